// The backend's flag sub-table (backend_config.h).
#include "terngrad/backend/backend_config.h"

namespace tg {

const std::vector<Flag<BackendConfig>>& backend_flags() {
  using C = BackendConfig;
  static const std::vector<Flag<C>> table = {
      {"device", &C::device, "cpu, cuda, cuda:<k>", no_check(), kFlagGpu},
      {"threads", &C::threads, "CPU threads (0: all cores)", at_least(0).max(4096).note("0: all cores")},
      {"allow_tf32", &C::allow_tf32,
       "`--device cuda`: TF32 tensor-core math for fp32 convolutions and matrix products (faster; ~1e-3 "
       "relative error; written to keep runs deterministic)",
       no_check(), kFlagGpu},
      {"deterministic", &C::deterministic,
       "`--device cuda`: only cuDNN algorithms that give the same bits on every run; false also allows the "
       "atomics-based ones (sometimes faster; runs then differ in the last bits)",
       no_check(), kFlagGpu},
      {"conv_search", &C::conv_search,
       "`--device cuda`: a convolution's first call times every acceptable cuDNN algorithm (deterministic ones "
       "unless `--deterministic=false`, scratch up to 1 GiB) and keeps the fastest (PyTorch's cudnn.benchmark); "
       "the choice can differ between runs, and with it the last bits; off: cuDNN's heuristics' first one",
       no_check(), kFlagGpu},
  };
  return table;
}

}  // namespace tg
