// CudaBackend batch norm: our own kernels (kernels/batch_norm_kernels.cu), the CPU backend's algorithm on
// the GPU. x is (rows = N*H*W, C), channels contiguous.
//
// Why not cuDNN: cuDNN's batch norm indexes with 32-bit ints (PyTorch stops using it above 880,801 rows in
// training and 65,535 in inference), and AlexNet/Inception shapes cross those limits; described as
// (rows, C, 1, 1) its reads are strided by C; and its backward recomputes the statistics from x instead of
// using the given mean/var (the interface's contract). The kernels here use 64-bit indexing, coalesced reads
// (a warp covers 32 consecutive channels of a row), the CPU's fixed row chunks and summation order, so the
// results are the CPU backend's bits on any GPU (tests/cuda_backend_test.cc checks that).
//
// Contract (include/terngrad/backend/backend.h): gamma defined iff d.has_gamma; beta required by both
// forwards; backward uses the given mean/var; dx, dgamma, dbeta may each be undefined. Per-descriptor
// scratch (chunk sums, coefficients) is reserved in the arena when a descriptor is first seen.
// Compute dtypes: x, y, dy, dx may be F32, F16 or BF16 (read as f32, rounded once when stored); gamma, beta,
// mean, var, dgamma, dbeta are f32. The scratch does not depend on the dtype, so neither does the cache key.
#include "src/backend/cuda/cuda_backend.h"
#include "src/backend/cuda/cuda_kernels.h"
#include "terngrad/backend/cuda_check.h"

namespace tg {
namespace {

struct BnEntry : CudaBackend::CachedOp {
  size_t scratch_bytes = 0;
};

void* bn_scratch(CudaBackend& be, const BatchNormDesc& d) {
  TG_CHECK(d.rows > 0 && d.c > 0, "batch norm {}: empty", d.key());
  const CudaOpKey key(CudaOp::BATCH_NORM, {d.rows, d.c});  // all the scratch size depends on
  BnEntry& e = be.cached<BnEntry>(key, [&] {
    auto* n = new BnEntry;
    n->scratch_bytes = cuda_kernels::batch_norm_scratch_bytes(d.rows, d.c);
    be.workspace(n->scratch_bytes);  // grow now, while the descriptor is new
    return n;
  });
  return be.workspace(e.scratch_bytes);
}

void check_x(CudaBackend& be, const BatchNormDesc& d, const char* op, const Tensor& x, const Tensor& gamma) {
  TG_CHECK(x.numel() == d.rows * d.c, "{} {}: x {} does not match", op, d.key(), x.str());
  be.check_on_device(x, op, "x");
  if (d.has_gamma) {
    TG_CHECK(gamma.numel() == d.c, "{} {}: gamma {} must have {} elements", op, d.key(), gamma.str(), d.c);
    be.check_on_device(gamma, op, "gamma");
  } else {
    TG_CHECK(gamma.raw() == nullptr, "{}: gamma given to a batch norm without gamma ({})", op, d.key());
  }
}

void check_param(CudaBackend& be, const BatchNormDesc& d, const char* op, const Tensor& t, const char* what) {
  TG_CHECK(t.numel() == d.c, "{} {}: {} {} must have {} elements", op, d.key(), what, t.str(), d.c);
  be.check_on_device(t, op, what);
}

void check_same(CudaBackend& be, const BatchNormDesc& d, const char* op, const Tensor& t, const char* what) {
  TG_CHECK(t.numel() == d.rows * d.c, "{} {}: {} {} does not match x", op, d.key(), what, t.str());
  be.check_on_device(t, op, what);
}

const float* ptr_or_null(const Tensor& t) { return t ? t.data<float>() : nullptr; }
float* mut_ptr_or_null(const Tensor& t) { return t ? t.data<float>() : nullptr; }

}  // namespace

void CudaBackend::batch_norm_forward_training_impl(const BatchNormDesc& d, const Tensor& x, const Tensor& gamma,
                                                   const Tensor& beta, const Tensor& y, const Tensor& mean,
                                                   const Tensor& var) {
  const char* op = "batch_norm_forward_training";
  check_x(*this, d, op, x, gamma);
  check_param(*this, d, op, beta, "beta"), check_param(*this, d, op, mean, "mean");
  check_param(*this, d, op, var, "var"), check_same(*this, d, op, y, "y");
  const DType t = compute_dtype(op, x, {&y});
  CudaDeviceGuard guard(index());
  void* scratch = bn_scratch(*this, d);
  cuda_kernels::batch_norm_forward_training(t, x.raw(), ptr_or_null(gamma), beta.data<float>(), y.raw(),
                                            mean.data<float>(), var.data<float>(), d.rows, d.c, d.epsilon, scratch,
                                            stream());
}

void CudaBackend::batch_norm_forward_inference_impl(const BatchNormDesc& d, const Tensor& x, const Tensor& gamma,
                                                    const Tensor& beta, const Tensor& mean, const Tensor& var,
                                                    const Tensor& y) {
  const char* op = "batch_norm_forward_inference";
  check_x(*this, d, op, x, gamma);
  check_param(*this, d, op, beta, "beta"), check_param(*this, d, op, mean, "mean");
  check_param(*this, d, op, var, "var"), check_same(*this, d, op, y, "y");
  const DType t = compute_dtype(op, x, {&y});
  CudaDeviceGuard guard(index());
  void* scratch = bn_scratch(*this, d);
  cuda_kernels::batch_norm_forward_inference(t, x.raw(), ptr_or_null(gamma), beta.data<float>(), mean.data<float>(),
                                             var.data<float>(), y.raw(), d.rows, d.c, d.epsilon, scratch, stream());
}

void CudaBackend::batch_norm_backward_impl(const BatchNormDesc& d, const Tensor& x, const Tensor& gamma,
                                           const Tensor& mean, const Tensor& var, const Tensor& dy, const Tensor& dx,
                                           const Tensor& dgamma, const Tensor& dbeta) {
  const char* op = "batch_norm_backward";
  check_x(*this, d, op, x, gamma);
  check_param(*this, d, op, mean, "mean"), check_param(*this, d, op, var, "var");
  check_same(*this, d, op, dy, "dy");
  if (dx) check_same(*this, d, op, dx, "dx");
  TG_CHECK(d.has_gamma || !dgamma, "{}: dgamma requested from a batch norm without gamma ({})", op, d.key());
  if (dgamma) check_param(*this, d, op, dgamma, "dgamma");
  if (dbeta) check_param(*this, d, op, dbeta, "dbeta");
  const DType t = compute_dtype(op, x, {&dy, &dx});
  CudaDeviceGuard guard(index());
  void* scratch = bn_scratch(*this, d);
  cuda_kernels::batch_norm_backward(t, x.raw(), ptr_or_null(gamma), mean.data<float>(), var.data<float>(), dy.raw(),
                                    dx ? dx.raw() : nullptr, mut_ptr_or_null(dgamma), mut_ptr_or_null(dbeta), d.rows,
                                    d.c, d.epsilon, scratch, stream());
}

}  // namespace tg
