// How many CUDA devices this machine has, for tests that SKIP without enough (0 in builds without CUDA, and when
// the runtime finds no driver or device; the runtime's error is cleared so that later calls do not report it).
#pragma once

#ifdef TG_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace tg::testing {

inline int cuda_device_count() {
#ifdef TG_HAVE_CUDA
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
#else
  return 0;
#endif
}

}  // namespace tg::testing
