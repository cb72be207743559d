// CudaBackend fully connected layer on cuBLAS: y (N, out) = x (N, in) * w (in, out) + b (out).
//
// cuBLAS is column-major: a row-major (R, C) matrix is, to cuBLAS, its transpose (C x R) with leading
// dimension C. So y^T (out x N) = w^T (out x in) * x^T (in x N) is one GEMM on the buffers as they are:
//   forward: y^T  = w^T * x^T         gemm(N, N, m=out, n=N,  k=in)
//   dx:      dx^T = (w^T)^T * dy^T    gemm(T, N, m=in,  n=N,  k=out)
//   dw:      dw^T = dy^T * (x^T)^T    gemm(N, T, m=out, n=in, k=N)
// db is the column sum of dy (scratch from the arena). Every GEMM is cublasGemmEx on the compute dtype's
// matrices (CUDA_R_32F / 16F / 16BF) with CUBLAS_COMPUTE_32F (f32 accumulation; f16/bf16 inputs run on
// tensor cores). The handle's math mode keeps f32 inputs plain fp32 unless BackendOptions::allow_tf32.
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

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::kF32:
      return CUDA_R_32F;
    case DType::kF16:
      return CUDA_R_16F;
    case DType::kBf16:
      return CUDA_R_16BF;
    default:
      TG_THROW("inner_product: dtype {} is not a compute dtype (f32, f16, bf16)", dtype_name(t));
  }
}

// C (m x n, ldc) = op(A) (m x k) * op(B) (k x n), column-major, all of dtype t, accumulated in f32.
void gemm(cublasHandle_t h, DType t, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void* a,
          int lda, const void* b, int ldb, void* c, int ldc) {
  const float one = 1.f, zero = 0.f;
  const cudaDataType_t ct = cuda_type(t);
  detail::count_library_launch();
  TG_CUBLAS_CHECK(cublasGemmEx(h, ta, tb, m, n, k, &one, a, ct, lda, b, ct, ldb, &zero, c, ct, ldc, CUBLAS_COMPUTE_32F,
                               CUBLAS_GEMM_DEFAULT));
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
  const DType t = compute_dtype("inner_product_forward", x, {&w, &b, &y});
  if (d.n == 0) return;
  CudaDeviceGuard guard(index());
  const int n = static_cast<int>(d.n), in = static_cast<int>(d.in), out = static_cast<int>(d.out);
  gemm(cublas(), t, CUBLAS_OP_N, CUBLAS_OP_N, out, n, in, w.raw(), out, x.raw(), in, y.raw(), out);
  debug_sync_after("inner_product_forward");
  if (d.has_bias) cuda_kernels::add_bias_rows(t, y.raw(), b.raw(), d.n, d.out, stream());
}

void CudaBackend::inner_product_backward_impl(const InnerProductDesc& d, const Tensor& x, const Tensor& w,
                                              const Tensor& dy, const Tensor& dx, const Tensor& dw, const Tensor& db) {
  check_ip(d, "inner_product_backward");
  TG_CHECK(dy.numel() == d.n * d.out, "inner_product_backward {}: dy {} does not match", d.key(), dy.str());
  check_on_device(dy, "inner_product_backward", "dy");
  const DType t = compute_dtype("inner_product_backward", dy, {&x, &w, &dx, &dw, &db});
  CudaDeviceGuard guard(index());
  const int n = static_cast<int>(d.n), in = static_cast<int>(d.in), out = static_cast<int>(d.out);
  if (dx) {
    TG_CHECK(dx.numel() == d.n * d.in && w.numel() == d.in * d.out,
             "inner_product_backward {}: dx {} or w {} does not match", d.key(), dx.str(), w.str());
    check_on_device(dx, "inner_product_backward", "dx"), check_on_device(w, "inner_product_backward", "w");
    if (n > 0) gemm(cublas(), t, CUBLAS_OP_T, CUBLAS_OP_N, in, n, out, w.raw(), out, dy.raw(), out, dx.raw(), in);
  }
  if (dw) {
    TG_CHECK(dw.numel() == d.in * d.out && x.numel() == d.n * d.in,
             "inner_product_backward {}: dw {} or x {} does not match", d.key(), dw.str(), x.str());
    check_on_device(dw, "inner_product_backward", "dw"), check_on_device(x, "inner_product_backward", "x");
    if (n > 0)
      gemm(cublas(), t, CUBLAS_OP_N, CUBLAS_OP_T, out, in, n, dy.raw(), out, x.raw(), in, dw.raw(), out);
    else
      zero(dw);
  }
  debug_sync_after("inner_product_backward");
  if (db) {
    TG_CHECK(d.has_bias && db.numel() == d.out, "inner_product_backward {}: db {} given for {} outputs", d.key(),
             db.str(), d.out);
    check_on_device(db, "inner_product_backward", "db");
    cuda_kernels::column_sum(t, dy.raw(), d.n, d.out, db.raw(),
                             workspace(cuda_kernels::column_sum_scratch_bytes(d.n, d.out)), stream());
  }
}

}  // namespace tg
