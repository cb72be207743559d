// MachineLoad: /proc/loadavg and /proc/stat read and parsed; the threads that fit beside the other work.
#include "terngrad/core/machine_load.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <fstream>
#include <sstream>
#include <thread>

#include "terngrad/core/cpu_cores.h"

namespace tg {

std::optional<double> parse_load1(const std::string& loadavg) {
  std::istringstream in(loadavg);
  double load1 = 0;
  if (!(in >> load1) || !std::isfinite(load1) || load1 < 0) return std::nullopt;
  return load1;
}

std::optional<CpuTimes> parse_cpu_times(const std::string& stat) {
  std::istringstream in(stat);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("cpu ", 0) != 0) continue;
    std::istringstream fields(line.substr(4));
    unsigned long long v[8] = {};
    for (unsigned long long& x : v)
      if (!(fields >> x)) return std::nullopt;
    CpuTimes t;
    for (unsigned long long x : v) t.total += x;  // user nice system idle iowait irq softirq steal
    t.idle = v[3] + v[4];
    return t;
  }
  return std::nullopt;
}

double busy_between(const CpuTimes& a, const CpuTimes& b, int cores) {
  if (b.total <= a.total || b.idle < a.idle) return 0;
  const double total = static_cast<double>(b.total - a.total), idle = static_cast<double>(b.idle - a.idle);
  return std::clamp(static_cast<double>(cores) * (1.0 - idle / total), 0.0, static_cast<double>(cores));
}

std::optional<MachineLoad> read_machine_load(double window_s) {
  auto slurp = [](const char* path) {
    std::ifstream f(path);
    std::stringstream text;
    text << f.rdbuf();
    return f ? text.str() : std::string();
  };
  // This process's own threads (an input pipeline filling its queue) are not other work: their CPU time over the
  // window is taken off.
  auto own_seconds = [] {
    timespec t{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
  };
  const double own0 = own_seconds();
  const auto t0 = std::chrono::steady_clock::now();
  const std::optional<CpuTimes> a = parse_cpu_times(slurp("/proc/stat"));
  std::this_thread::sleep_for(std::chrono::duration<double>(window_s));
  const std::optional<CpuTimes> b = parse_cpu_times(slurp("/proc/stat"));
  const double own = (own_seconds() - own0) /
                     std::max(1e-3, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  const std::optional<double> load1 = parse_load1(slurp("/proc/loadavg"));
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  if (!a || !b || !load1 || cores <= 0) return std::nullopt;
  return MachineLoad{std::max(0.0, busy_between(*a, *b, cores) - own), *load1, cores};
}

double busy_cores(const MachineLoad& m) { return m.busy; }

int threads_to_try(const MachineLoad& m, int threads, int processes) {
  const int free_cores = m.cores - static_cast<int>(std::lround(busy_cores(m)));
  if (threads * processes <= free_cores) return threads;
  return std::max(1, free_cores / std::max(1, processes));
}

std::optional<Crowding> crowding(int threads, int processes, double window_s) {
  if (threads <= 0) threads = available_cores();
  if (threads <= 1) return std::nullopt;  // nothing fewer to try
  const std::optional<MachineLoad> load = read_machine_load(window_s);
  if (!load) return std::nullopt;
  const int fit = threads_to_try(*load, threads, processes);
  if (fit >= threads) return std::nullopt;
  return Crowding{*load, threads, fit};
}

}  // namespace tg
