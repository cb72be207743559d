// make_backend: the one place that turns a --device string into a Backend.
#include "terngrad/backend/backend.h"

#include <string>

#include "src/backend/cpu/cpu_backend.h"
#include "terngrad/backend/calling_thread.h"
#include "terngrad/backend/planning_backend.h"
#ifdef TG_HAVE_CUDA
#include "src/backend/cuda/cuda_backend.h"
#endif

namespace tg {

bool cuda_backend_compiled() {
#ifdef TG_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

namespace {
// The CUDA device index of "cuda" / "cuda:<k>", -1 for "cpu"; other names are errors naming the choices.
int cuda_index(const std::string& device) {
  if (device == "cpu") return -1;
  if (device == "cuda" || device.rfind("cuda:", 0) == 0) {
    int index = 0;
    if (device.size() > 5) {
      std::string idx = device.substr(5);
      TG_CHECK(!idx.empty() && idx.size() < 9 && idx.find_first_not_of("0123456789") == std::string::npos,
               "--device '{}': expected cuda:<index>, e.g. cuda:0", device);
      index = std::stoi(idx);
    }
    return index;
  }
  TG_THROW("--device '{}' is not one of cpu, cuda, cuda:<index>", device);
}

#ifndef TG_HAVE_CUDA
[[noreturn]] void no_cuda_backend(const std::string& device) {
  TG_THROW("--device {}: this build has no CUDA backend (configure with -DTG_CUDA=ON on a machine with nvcc)", device);
}
#endif
}  // namespace

std::unique_ptr<Backend> make_backend(const std::string& device, const BackendOptions& options) {
  const int index = cuda_index(device);
  if (index < 0) return std::make_unique<CpuBackend>(options.threads);
#ifdef TG_HAVE_CUDA
  return make_cuda_backend(index, options);
#else
  no_cuda_backend(device);
#endif
}

std::unique_ptr<Backend> make_planning_backend(const std::string& device) {
  const int index = cuda_index(device);
  return index < 0 ? std::make_unique<CpuBackend>(1) : make_cuda_planning_backend(index);
}

void bind_calling_thread_to(const std::string& device) {
  const int index = cuda_index(device);
  if (index < 0) return;
#ifdef TG_HAVE_CUDA
  select_cuda_device(index);
#else
  no_cuda_backend(device);
#endif
}

}  // namespace tg
