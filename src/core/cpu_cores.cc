// available_cores(): what --threads 0 means.
#include "terngrad/core/cpu_cores.h"

#include <sched.h>

#include <cstdlib>
#include <string>
#include <thread>

namespace tg {

int available_cores() {
  if (const char* omp = std::getenv("OMP_NUM_THREADS")) {
    char* end = nullptr;
    const long n = std::strtol(omp, &end, 10);  // "4" or "4,2" (nested levels): the first
    if (end != omp && n > 0 && (*end == '\0' || *end == ',')) return static_cast<int>(n);
  }
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  const unsigned hw = std::thread::hardware_concurrency();
  return hw > 0 ? static_cast<int>(hw) : 1;
}

}  // namespace tg
