// make_backend: the one place that turns a --device string into a Backend.
#include "terngrad/backend/backend.h"

#include <string>

#include "src/backend/cpu/cpu_backend.h"
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

std::unique_ptr<Backend> make_backend(const std::string& device, const BackendOptions& options) {
  if (device == "cpu") return std::make_unique<CpuBackend>(options.threads);
  if (device == "cuda" || device.rfind("cuda:", 0) == 0) {
    int index = 0;
    if (device.size() > 5) {
      std::string idx = device.substr(5);
      TG_CHECK(!idx.empty() && idx.find_first_not_of("0123456789") == std::string::npos,
               "--device '{}': expected cuda:<index>, e.g. cuda:0", device);
      index = std::stoi(idx);
    }
#ifdef TG_HAVE_CUDA
    return make_cuda_backend(index, options);
#else
    (void)index;
    TG_THROW("--device {}: this build has no CUDA backend (configure with -DTG_CUDA=ON on a machine with nvcc)",
             device);
#endif
  }
  TG_THROW("--device '{}' is not one of cpu, cuda, cuda:<index>", device);
}

}  // namespace tg
