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

namespace {
void check_lrn(const LrnDesc& d, const char* op) {
  TG_CHECK(d.n >= 0 && d.h >= 0 && d.w >= 0 && d.c > 0 && d.depth_radius >= 0,
           "{}: {} needs channels and a depth_radius >= 0", op, d.key());
}
}  // namespace

size_t CudaBackend::lrn_workspace_bytes_impl(const LrnDesc& d) {
  check_lrn(d, "lrn_workspace_bytes");
  return 0;
}

void CudaBackend::lrn_forward_impl(const LrnDesc& d, const Tensor& x, const Tensor& y, const Tensor& /*workspace*/) {
  check_lrn(d, "lrn_forward");
  const int64_t numel = d.n * d.h * d.w * d.c;
  TG_CHECK(x.numel() == numel && y.numel() == numel, "lrn_forward {}: x {}, y {} do not match", d.key(), x.str(),
           y.str());
  check_on_device(x, "lrn_forward", "x"), check_on_device(y, "lrn_forward", "y");
  const DType t = compute_dtype("lrn_forward", x, {&y});
  CudaDeviceGuard guard(index());
  cuda_kernels::lrn_forward(t, x.raw(), y.raw(), numel / d.c, d.c, d.depth_radius, d.bias, d.alpha, d.beta, stream());
}

void CudaBackend::lrn_backward_impl(const LrnDesc& d, const Tensor& x, const Tensor& dy, const Tensor& /*workspace*/,
                                    const Tensor& dx) {
  check_lrn(d, "lrn_backward");
  const int64_t numel = d.n * d.h * d.w * d.c;
  TG_CHECK(x.numel() == numel && dy.numel() == numel && dx.numel() == numel,
           "lrn_backward {}: x {}, dy {}, dx {} do not match", d.key(), x.str(), dy.str(), dx.str());
  check_on_device(x, "lrn_backward", "x"), check_on_device(dy, "lrn_backward", "dy");
  check_on_device(dx, "lrn_backward", "dx");
  const DType t = compute_dtype("lrn_backward", x, {&dy, &dx});
  CudaDeviceGuard guard(index());
  cuda_kernels::lrn_backward(t, x.raw(), dy.raw(), dx.raw(), numel / d.c, d.c, d.depth_radius, d.bias, d.alpha, d.beta,
                             stream());
}

}  // namespace tg
