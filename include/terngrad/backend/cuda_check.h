// Check macros for the CUDA family of libraries, built on TG_CHECK_CALL (include/terngrad/core/error.h):
// each names the call's text, the file, the line, the library's own error string and the current device.
//   TG_CUDA_CHECK(cudaMemcpyAsync(...));      // CUDA runtime
//   TG_CUDA_CHECK_LAUNCH();                   // after every kernel launch (cudaGetLastError)
//   TG_CUDNN_CHECK(cudnnConvolutionForward(...));
//   TG_CUBLAS_CHECK(cublasSgemm(...));
//   TG_NCCL_CHECK(ncclAllReduce(...));
// Only the CUDA runtime header is included here; the cuDNN/cuBLAS/NCCL variants expand to their library's
// error-string function, so use them where that library's header is included.
#pragma once

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <string>

#include "terngrad/core/error.h"

namespace tg::detail {
// "device 3" (or "device ?" when even cudaGetDevice fails), for the error line.
inline std::string cuda_current_device_text() {
  int dev = -1;
  if (cudaGetDevice(&dev) != cudaSuccess) return "device ?";
  return fmt::format("device {}", dev);
}
}  // namespace tg::detail

#define TG_CUDA_CHECK(call)                                                                                 \
  TG_CHECK_CALL("CUDA", call, status_ == cudaSuccess,                                                       \
                ::fmt::format("{} ({}) on {}", cudaGetErrorName(status_), cudaGetErrorString(status_),      \
                              ::tg::detail::cuda_current_device_text()))

// A kernel launch reports bad configurations through cudaGetLastError; call this right after each one.
#define TG_CUDA_CHECK_LAUNCH() TG_CUDA_CHECK(cudaGetLastError())

#define TG_CUDNN_CHECK(call)                                                                                \
  TG_CHECK_CALL("cuDNN", call, status_ == CUDNN_STATUS_SUCCESS,                                             \
                ::fmt::format("{} on {}", cudnnGetErrorString(status_), ::tg::detail::cuda_current_device_text()))

#define TG_CUBLAS_CHECK(call)                                                                               \
  TG_CHECK_CALL("cuBLAS", call, status_ == CUBLAS_STATUS_SUCCESS,                                           \
                ::fmt::format("{} ({}) on {}", cublasGetStatusName(status_), cublasGetStatusString(status_), \
                              ::tg::detail::cuda_current_device_text()))

#define TG_NCCL_CHECK(call)                                                                                 \
  TG_CHECK_CALL("NCCL", call, status_ == ncclSuccess,                                                       \
                ::fmt::format("{} on {}", ncclGetErrorString(status_), ::tg::detail::cuda_current_device_text()))
