// CudaBackend fully connected layer on cuBLAS: y (N, out) = x (N, in) * w (in, out) + b (out).
//
// cuBLAS is column-major: a row-major (R, C) matrix is, to cuBLAS, its transpose (C x R) with leading
// dimension C. So y^T (out x N) = w^T (out x in) * x^T (in x N) is one GEMM on the buffers as they are:
//   forward: y^T  = w^T * x^T         gemm(N, N, m=out, n=N,  k=in)
//   dx:      dx^T = (w^T)^T * dy^T    gemm(T, N, m=in,  n=N,  k=out)
//   dw:      dw^T = dy^T * (x^T)^T    gemm(N, T, m=out, n=in, k=N)
// db is the column sum of dy (scratch from the arena). The handle's math mode is plain fp32 unless
// BackendOptions::allow_tf32.
#include <climits>

#include "src/backend/cuda/cuda_backend.h"
#include "src/backend/cuda/cuda_kernels.h"
#include "terngrad/backend/cuda_check.h"

namespace tg {

namespace {
void check_ip(const InnerProductDesc& d, const char* op) {
  TG_CHECK(d.n <= INT_MAX && d.in <= INT_MAX && d.out <= INT_MAX && d.n >= 0 && d.in > 0 && d.out > 0,
           "{}: {} has sizes cuBLAS cannot take", op, d.key());
}
}  // namespace

void CudaBackend::inner_product_forward_impl(const InnerProductDesc& d, const Tensor& x, const Tensor& w,
                                        const Tensor& b, const Tensor& y) {
  check_ip(d, "inner_product_forward");
  TG_CHECK(x.numel() == d.n * d.in && w.numel() == d.in * d.out && y.numel() == d.n * d.out,
           "inner_product_forward {}: x {}, w {}, y {} do not match", d.key(), x.str(), w.str(), y.str());
  check_on_device(x, "inner_product_forward", "x"), check_on_device(w, "inner_product_forward", "w");
  check_on_device(y, "inner_product_forward", "y");
  if (d.has_bias) {
    TG_CHECK(b.numel() == d.out, "inner_product_forward {}: bias {} must have {} elements", d.key(), b.str(), d.out);
    check_on_device(b, "inner_product_forward", "b");
  }
  if (d.n == 0) return;
  CudaDeviceGuard guard(index());
  const float one = 1.f, beta0 = 0.f;
  TG_CUBLAS_CHECK(cublasSgemm(cublas(), CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(d.out), static_cast<int>(d.n),
                              static_cast<int>(d.in), &one, w.data<float>(), static_cast<int>(d.out),
                              x.data<float>(), static_cast<int>(d.in), &beta0, y.data<float>(),
                              static_cast<int>(d.out)));
  debug_sync_after("inner_product_forward");
  if (d.has_bias) cuda_kernels::add_bias_rows_f32(y.data<float>(), b.data<float>(), d.n, d.out, stream());
}

void CudaBackend::inner_product_backward_impl(const InnerProductDesc& d, const Tensor& x, const Tensor& w,
                                         const Tensor& dy, const Tensor& dx, const Tensor& dw, const Tensor& db) {
  check_ip(d, "inner_product_backward");
  TG_CHECK(dy.numel() == d.n * d.out, "inner_product_backward {}: dy {} does not match", d.key(), dy.str());
  check_on_device(dy, "inner_product_backward", "dy");
  CudaDeviceGuard guard(index());
  const float one = 1.f, beta0 = 0.f;
  const int n = static_cast<int>(d.n), in = static_cast<int>(d.in), out = static_cast<int>(d.out);
  if (dx) {
    TG_CHECK(dx.numel() == d.n * d.in && w.numel() == d.in * d.out,
             "inner_product_backward {}: dx {} or w {} does not match", d.key(), dx.str(), w.str());
    check_on_device(dx, "inner_product_backward", "dx"), check_on_device(w, "inner_product_backward", "w");
    if (n > 0)
      TG_CUBLAS_CHECK(cublasSgemm(cublas(), CUBLAS_OP_T, CUBLAS_OP_N, in, n, out, &one, w.data<float>(), out,
                                  dy.data<float>(), out, &beta0, dx.data<float>(), in));
  }
  if (dw) {
    TG_CHECK(dw.numel() == d.in * d.out && x.numel() == d.n * d.in,
             "inner_product_backward {}: dw {} or x {} does not match", d.key(), dw.str(), x.str());
    check_on_device(dw, "inner_product_backward", "dw"), check_on_device(x, "inner_product_backward", "x");
    if (n > 0)
      TG_CUBLAS_CHECK(cublasSgemm(cublas(), CUBLAS_OP_N, CUBLAS_OP_T, out, in, n, &one, dy.data<float>(), out,
                                  x.data<float>(), in, &beta0, dw.data<float>(), out));
    else
      zero(dw);
  }
  debug_sync_after("inner_product_backward");
  if (db) {
    TG_CHECK(d.has_bias && db.numel() == d.out, "inner_product_backward {}: db {} given for {} outputs", d.key(),
             db.str(), d.out);
    check_on_device(db, "inner_product_backward", "db");
    cuda_kernels::column_sum_f32(dy.data<float>(), d.n, d.out, db.data<float>(),
                                 workspace(cuda_kernels::column_sum_scratch_bytes(d.n, d.out)), stream());
  }
}

}  // namespace tg
