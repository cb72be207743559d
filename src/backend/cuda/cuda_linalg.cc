// CudaBackend linear algebra (the low-rank gradient schemes): matmul on cuBLAS and Gram-Schmidt
// orthogonalization (kernels/linalg_kernels.cu). The front (backend_front.cc) has checked dtypes, shapes,
// devices and aliasing.
//
// cuBLAS is column-major: a row-major (R, C) matrix is, to cuBLAS, its transpose (C x R) with leading dimension
// C. So c (M x N) = op(a) * op(b) is c^T (N x M) = op(b)^T * op(a)^T, one GEMM on the buffers as they are, with
// a's and b's roles swapped and the same transpose flags.
#include <climits>

#include "src/backend/cuda/cuda_backend.h"
#include "src/backend/cuda/cuda_kernels.h"
#include "terngrad/backend/cuda_check.h"

namespace tg {

void CudaBackend::matmul_impl(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, float beta,
                              const Tensor& c) {
  const int64_t m = c.shape()[0], n = c.shape()[1], k = transpose_a ? a.shape()[0] : a.shape()[1];
  for (int64_t v : {m, n, k, a.shape()[1], b.shape()[1]})
    TG_CHECK(v <= INT_MAX, "matmul: {} x {} -> {} has sizes cuBLAS cannot take", a.str(), b.str(), c.str());
  CudaDeviceGuard guard(index_);
  const float one = 1.f;
  // beta 0: cuBLAS does not read c then (NaN in c does not propagate).
  detail::count_library_launch();
  TG_CUBLAS_CHECK(cublasSgemm(
      cublas(), transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N, transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(n),
      static_cast<int>(m), static_cast<int>(k), &one, b.data<float>(), static_cast<int>(b.shape()[1]), a.data<float>(),
      static_cast<int>(a.shape()[1]), &beta, c.data<float>(), static_cast<int>(n)));
}

void CudaBackend::orthogonalize_columns_impl(const Tensor& m, float epsilon) {
  CudaDeviceGuard guard(index_);
  cuda_kernels::orthogonalize_columns(m.data<float>(), m.shape()[0], m.shape()[1], epsilon, stream());
}

}  // namespace tg
