// CpuBackend linear algebra (the low-rank gradient schemes): matmul on oneDNN's sgemm (row-major, the OpenMP
// team of the backend; run to run the same bits for one thread count), and Gram-Schmidt orthogonalization of a
// few columns in plain loops (norms and dot products in double, rows in order). The front (backend_front.cc)
// has checked dtypes, shapes, devices and aliasing.
#include <algorithm>
#include <cmath>

#include "src/backend/cpu/cpu_backend.h"

namespace tg {

void CpuBackend::matmul_impl(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, float beta,
                             const Tensor& c) {
  const int64_t m = c.shape()[0], n = c.shape()[1];
  const int64_t k = transpose_a ? a.shape()[0] : a.shape()[1];
  // beta 0 must not read c (it may hold NaN: 0 * NaN is NaN in sgemm too).
  if (beta == 0.f) std::fill_n(c.data<float>(), c.numel(), 0.f);
  const dnnl_status_t st =
      dnnl_sgemm(transpose_a ? 'T' : 'N', transpose_b ? 'T' : 'N', m, n, k, 1.f, a.data<float>(), a.shape()[1],
                 b.data<float>(), b.shape()[1], beta == 0.f ? 0.f : beta, c.data<float>(), n);
  TG_CHECK(st == dnnl_success, "matmul: oneDNN's sgemm of {} x {} -> {} failed (status {})", a.str(), b.str(), c.str(),
           static_cast<int>(st));
}

void CpuBackend::orthogonalize_columns_impl(const Tensor& m, float epsilon) {
  const int64_t rows = m.shape()[0], cols = m.shape()[1];
  float* p = m.data<float>();
  for (int64_t i = 0; i < cols; ++i) {
    double norm2 = 0;
    for (int64_t r = 0; r < rows; ++r) norm2 += static_cast<double>(p[r * cols + i]) * p[r * cols + i];
    const double norm = std::sqrt(norm2) + epsilon;
    const float inv = norm > 0 ? static_cast<float>(1.0 / norm) : 0.f;  // a zero column stays zero
    for (int64_t r = 0; r < rows; ++r) p[r * cols + i] *= inv;
    for (int64_t j = i + 1; j < cols; ++j) {
      double dot = 0;
      for (int64_t r = 0; r < rows; ++r) dot += static_cast<double>(p[r * cols + i]) * p[r * cols + j];
      const float d = static_cast<float>(dot);
      for (int64_t r = 0; r < rows; ++r) p[r * cols + j] -= d * p[r * cols + i];
    }
  }
}

}  // namespace tg
