// CudaBackend LRN: lrn_workspace_bytes / lrn_forward / lrn_backward over the direct NHWC kernels of
// kernels/lrn_kernels.cu, TensorFlow's convention (alpha NOT divided by the window):
//   y = x / (bias + alpha * sum_{|d'-d| <= r} x_{d'}^2)^beta
// Not cuDNN: cudnnLRNCrossChannel* caps the window at 16 (depth_radius <= 7) and is documented for
// NCHW-packed tensors, so NHWC data would need transposes around every call. The backward recomputes the
// normalizers from x: no workspace (0 bytes), and a backward after an inference forward is valid. Any compute
// dtype (x, y, dy, dx), computed in f32.
#include "src/backend/cuda/cuda_backend.h"
#include "src/backend/cuda/cuda_kernels.h"

namespace tg {

// The descriptor, the devices and the sizes are checked by the front (Backend::lrn_*).
size_t CudaBackend::lrn_workspace_bytes_impl(const LrnDesc&) { return 0; }

void CudaBackend::lrn_forward_impl(const LrnDesc& d, const Tensor& x, const Tensor& y, const Tensor& /*workspace*/) {
  const int64_t numel = d.n * d.h * d.w * d.c;
  const DType t = compute_dtype("lrn_forward", x, {&y});
  CudaDeviceGuard guard(index());
  cuda_kernels::lrn_forward(t, x.raw(), y.raw(), numel / d.c, d.c, d.depth_radius, d.bias, d.alpha, d.beta, stream());
}

void CudaBackend::lrn_backward_impl(const LrnDesc& d, const Tensor& x, const Tensor& dy, const Tensor& /*workspace*/,
                                    const Tensor& dx) {
  const int64_t numel = d.n * d.h * d.w * d.c;
  const DType t = compute_dtype("lrn_backward", x, {&dy, &dx});
  CudaDeviceGuard guard(index());
  cuda_kernels::lrn_backward(t, x.raw(), dy.raw(), dx.raw(), numel / d.c, d.c, d.depth_radius, d.bias, d.alpha, d.beta,
                             stream());
}

}  // namespace tg
