// CudaBackend pooling: pool_workspace_bytes / pool_forward / pool_backward over the direct NHWC kernels of
// kernels/pool_kernels.cu. Not cuDNN: cuDNN's pooling pads symmetrically and cannot express TensorFlow's
// SAME split (odd pixel after) nor, with that split, TF's in-image average count. The max backward
// recomputes arg-maxes from x, so no workspace is kept (0 bytes; y is not needed either). Any compute dtype.
#include "src/backend/cuda/cuda_backend.h"
#include "src/backend/cuda/cuda_kernels.h"

namespace tg {

// The descriptor, the devices and the sizes are checked by the front (Backend::pool_*).
size_t CudaBackend::pool_workspace_bytes_impl(const PoolDesc&) { return 0; }

void CudaBackend::pool_forward_impl(const PoolDesc& d, const Tensor& x, const Tensor& y, const Tensor& /*workspace*/) {
  const DType t = compute_dtype("pool_forward", x, {&y});
  CudaDeviceGuard guard(index());
  cuda_kernels::pool_forward(t, d, x.raw(), y.raw(), stream());
}

void CudaBackend::pool_backward_impl(const PoolDesc& d, const Tensor& x, const Tensor& /*y*/, const Tensor& dy,
                                     const Tensor& /*workspace*/, const Tensor& dx) {
  const DType t = compute_dtype("pool_backward", x, {&dy, &dx});
  CudaDeviceGuard guard(index());
  cuda_kernels::pool_backward(t, d, x.raw(), dy.raw(), dx.raw(), stream());
}

}  // namespace tg
