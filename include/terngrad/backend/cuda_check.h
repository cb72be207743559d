// Check macros for the CUDA family of libraries, built on TG_CHECK_CALL (include/terngrad/core/error.h):
// each names the call's text, the file, the line, the library's own error string and the current device.
//   TG_CUDA_CHECK(cudaMemcpyAsync(...));      // CUDA runtime
//   TG_CUDA_CHECK_LAUNCH();                   // after every kernel launch (cudaGetLastError; with
//                                             // TG_CUDA_SYNC=1 also a device sync, naming the launcher)
//   TG_CUDA_CHECK_LAUNCH_OF("relu_forward");  // the same, naming the launcher (inside a lambda)
//   TG_CUDNN_CHECK(cudnnConvolutionForward(...));
//   TG_CUBLAS_CHECK(cublasSgemm(...));
//   TG_NCCL_CHECK(ncclAllReduce(...));
// Only the CUDA runtime header is included here; the cuDNN/cuBLAS/NCCL variants expand to their library's
// error-string function, so use them where that library's header is included.
#pragma once

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "terngrad/core/error.h"

namespace tg::detail {
// "device 3" (or "device ?" when even cudaGetDevice fails), for the error line.
inline std::string cuda_current_device_text() {
  int dev = -1;
  if (cudaGetDevice(&dev) != cudaSuccess) return "device ?";
  return fmt::format("device {}", dev);
}

// TG_CUDA_SYNC=1 in the environment (read once): every TG_CUDA_CHECK_LAUNCH also synchronizes the device and
// checks, so a fault inside a kernel is reported by the launcher that started it, not by a later call.
// Slow: for finding a fault.
inline bool cuda_sync_after_launch() {
  static const bool on = [] {
    const char* v = std::getenv("TG_CUDA_SYNC");
    return v != nullptr && v[0] != '\0' && std::strcmp(v, "0") != 0;
  }();
  return on;
}
}  // namespace tg::detail

#define TG_CUDA_CHECK(call)                                                                            \
  TG_CHECK_CALL("CUDA", call, status_ == cudaSuccess,                                                  \
                ::fmt::format("{} ({}) on {}", cudaGetErrorName(status_), cudaGetErrorString(status_), \
                              ::tg::detail::cuda_current_device_text()))

namespace tg::detail {
// Device launches made by this process so far, on every GPU: each of our kernel launches counts in check_launch, each
// cuDNN/cuBLAS compute call (a convolution, a GEMM: one or more kernels of the library's) where it is made
// (count_library_launch). Backend::device_launches reads it; the trainer logs it per step ("device_launches").
inline std::atomic<int64_t>& cuda_launch_counter() {
  static std::atomic<int64_t> launches{0};
  return launches;
}
inline void count_library_launch() { cuda_launch_counter().fetch_add(1, std::memory_order_relaxed); }

// A kernel launch reports bad configurations through cudaGetLastError: checks it, naming `launcher` (the
// function that launched); with TG_CUDA_SYNC=1 also waits for the kernel(s) and names the launcher if one
// faulted. Called right after each launch (TG_CUDA_CHECK_LAUNCH, cuda_kernels::linear_kernel).
inline void check_launch(const char* launcher, const char* file, int line) {
  cuda_launch_counter().fetch_add(1, std::memory_order_relaxed);
  cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess)
    throw_call_failed("CUDA", "cudaGetLastError()",
                      ::fmt::format("{} ({}) launching from {} on {}", cudaGetErrorName(status),
                                    cudaGetErrorString(status), launcher, cuda_current_device_text()),
                      file, line);
  if (!cuda_sync_after_launch()) return;
  status = cudaDeviceSynchronize();
  if (status != cudaSuccess)
    throw_call_failed(
        "CUDA", "cudaDeviceSynchronize()",
        ::fmt::format("{} ({}) in a kernel launched by {} (TG_CUDA_SYNC=1) on {}", cudaGetErrorName(status),
                      cudaGetErrorString(status), launcher, cuda_current_device_text()),
        file, line);
}
}  // namespace tg::detail

#define TG_CUDA_CHECK_LAUNCH() ::tg::detail::check_launch(__func__, __FILE__, __LINE__)
// The same naming the launcher explicitly (inside a lambda, where __func__ would say "operator()").
#define TG_CUDA_CHECK_LAUNCH_OF(launcher) ::tg::detail::check_launch(launcher, __FILE__, __LINE__)

#define TG_CUDNN_CHECK(call)                                    \
  TG_CHECK_CALL("cuDNN", call, status_ == CUDNN_STATUS_SUCCESS, \
                ::fmt::format("{} on {}", cudnnGetErrorString(status_), ::tg::detail::cuda_current_device_text()))

#define TG_CUBLAS_CHECK(call)                                                                                \
  TG_CHECK_CALL("cuBLAS", call, status_ == CUBLAS_STATUS_SUCCESS,                                            \
                ::fmt::format("{} ({}) on {}", cublasGetStatusName(status_), cublasGetStatusString(status_), \
                              ::tg::detail::cuda_current_device_text()))

#define TG_NCCL_CHECK(call)                           \
  TG_CHECK_CALL("NCCL", call, status_ == ncclSuccess, \
                ::fmt::format("{} on {}", ncclGetErrorString(status_), ::tg::detail::cuda_current_device_text()))
