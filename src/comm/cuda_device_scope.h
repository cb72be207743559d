// CudaDeviceScope: makes a GPU current for a scope and restores the previous one (best effort) at its end; shared by
// the communicators' CUDA code (nccl_communicator.cc, cuda_loopback_device.cc). Internal to src/comm; CUDA builds only.
#pragma once

#include <cuda_runtime_api.h>

#include "terngrad/core/error.h"

namespace tg::comm_detail {

// A failed cudaSetDevice throws, or with `best_effort` (teardown and abort, which must not throw) is let pass.
class CudaDeviceScope {
 public:
  explicit CudaDeviceScope(int device, bool best_effort = false) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    if (previous_ == device) return;
    const cudaError_t e = cudaSetDevice(device);
    if (e != cudaSuccess && !best_effort)
      TG_THROW("cudaSetDevice({}) failed: {} ({})", device, cudaGetErrorName(e), cudaGetErrorString(e));
    changed_ = e == cudaSuccess;
  }
  ~CudaDeviceScope() {
    if (changed_ && previous_ >= 0) cudaSetDevice(previous_);
  }
  CudaDeviceScope(const CudaDeviceScope&) = delete;
  CudaDeviceScope& operator=(const CudaDeviceScope&) = delete;

 private:
  int previous_ = -1;
  bool changed_ = false;
};

}  // namespace tg::comm_detail
