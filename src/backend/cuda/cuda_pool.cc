// CudaBackend pooling: pool_workspace_bytes / pool_forward / pool_backward over the direct NHWC kernels of
// kernels/pool_kernels.cu. Not cuDNN: cuDNN's pooling pads symmetrically and cannot express TensorFlow's
// SAME split (odd pixel after) nor, with that split, TF's in-image average count. The max backward
// recomputes arg-maxes from x, so no workspace is kept (0 bytes; y is not needed either). Any compute dtype.
#include "src/backend/cuda/cuda_backend.h"
#include "src/backend/cuda/cuda_kernels.h"

namespace tg {

namespace {
void check_pool(const PoolDesc& d, const char* op) {
  TG_CHECK(d.out_h > 0 && d.out_w > 0 && d.kh >= 1 && d.kw >= 1 && d.stride_h >= 1 && d.stride_w >= 1,
           "{}: empty output {}x{} for {}", op, d.out_h, d.out_w, d.key());
  TG_CHECK(d.pad_top < d.kh && d.pad_bottom < d.kh && d.pad_left < d.kw && d.pad_right < d.kw,
           "{}: {} has padding as large as the window (windows with no image cell)", op, d.key());
}
}  // namespace

size_t CudaBackend::pool_workspace_bytes_impl(const PoolDesc& d) {
  check_pool(d, "pool_workspace_bytes");
  return 0;
}

void CudaBackend::pool_forward_impl(const PoolDesc& d, const Tensor& x, const Tensor& y, const Tensor& /*workspace*/) {
  check_pool(d, "pool_forward");
  TG_CHECK(x.numel() == d.n * d.h * d.w * d.c && y.numel() == d.n * d.out_h * d.out_w * d.c,
           "pool_forward {}: x {}, y {} do not match", d.key(), x.str(), y.str());
  check_on_device(x, "pool_forward", "x"), check_on_device(y, "pool_forward", "y");
  const DType t = compute_dtype("pool_forward", x, {&y});
  CudaDeviceGuard guard(index());
  cuda_kernels::pool_forward(t, d, x.raw(), y.raw(), stream());
}

void CudaBackend::pool_backward_impl(const PoolDesc& d, const Tensor& x, const Tensor& /*y*/, const Tensor& dy,
                                     const Tensor& /*workspace*/, const Tensor& dx) {
  check_pool(d, "pool_backward");
  TG_CHECK(x.numel() == d.n * d.h * d.w * d.c && dx.numel() == x.numel() && dy.numel() == d.n * d.out_h * d.out_w * d.c,
           "pool_backward {}: x {}, dy {}, dx {} do not match", d.key(), x.str(), dy.str(), dx.str());
  check_on_device(x, "pool_backward", "x"), check_on_device(dy, "pool_backward", "dy");
  check_on_device(dx, "pool_backward", "dx");
  const DType t = compute_dtype("pool_backward", x, {&dy, &dx});
  CudaDeviceGuard guard(index());
  cuda_kernels::pool_backward(t, d, x.raw(), dy.raw(), dx.raw(), stream());
}

}  // namespace tg
