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
// Contract (include/terngrad/backend/backend.h, checked in the Backend's front): gamma defined iff d.has_gamma; beta
// required by both forwards (and by the backward with a fused ReLU, d.relu, for its mask); backward uses the given
// mean/var; dx, dgamma, dbeta may each be undefined; the training forward updates the moving statistics in its last
// statistics kernel (no launches of their own). Per-descriptor
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
  const CudaOpKey key(CudaOp::BATCH_NORM, {d.rows, d.c});  // all the scratch size depends on
  BnEntry& e = be.cached<BnEntry>(key, [&] {
    auto* n = new BnEntry;
    n->scratch_bytes = cuda_kernels::batch_norm_scratch_bytes(d.rows, d.c);
    be.workspace(n->scratch_bytes);  // grow now, while the descriptor is new
    return n;
  });
  return be.workspace(e.scratch_bytes);
}

const float* ptr_or_null(const Tensor& t) { return t ? t.data<float>() : nullptr; }
float* mut_ptr_or_null(const Tensor& t) { return t ? t.data<float>() : nullptr; }

}  // namespace

void CudaBackend::batch_norm_forward_training_impl(const BatchNormDesc& d, const Tensor& x, const Tensor& gamma,
                                                   const Tensor& beta, const Tensor& y, const Tensor& mean,
                                                   const Tensor& var, const BatchNormMoving& moving) {
  const char* op = "batch_norm_forward_training";
  const DType t = compute_dtype(op, x, {&y});
  CudaDeviceGuard guard(index());
  void* scratch = bn_scratch(*this, d);
  cuda_kernels::batch_norm_forward_training(t, x.raw(), ptr_or_null(gamma), beta.data<float>(), y.raw(),
                                            mean.data<float>(), var.data<float>(), mut_ptr_or_null(moving.mean),
                                            mut_ptr_or_null(moving.var), moving.decay, d.rows, d.c, d.epsilon, d.relu,
                                            scratch, stream());
}

void CudaBackend::batch_norm_forward_inference_impl(const BatchNormDesc& d, const Tensor& x, const Tensor& gamma,
                                                    const Tensor& beta, const Tensor& mean, const Tensor& var,
                                                    const Tensor& y) {
  const char* op = "batch_norm_forward_inference";
  const DType t = compute_dtype(op, x, {&y});
  CudaDeviceGuard guard(index());
  void* scratch = bn_scratch(*this, d);
  cuda_kernels::batch_norm_forward_inference(t, x.raw(), ptr_or_null(gamma), beta.data<float>(), mean.data<float>(),
                                             var.data<float>(), y.raw(), d.rows, d.c, d.epsilon, d.relu, scratch,
                                             stream());
}

void CudaBackend::batch_norm_backward_impl(const BatchNormDesc& d, const Tensor& x, const Tensor& gamma,
                                           const Tensor& mean, const Tensor& var, const Tensor& dy, const Tensor& dx,
                                           const Tensor& dgamma, const Tensor& dbeta, const Tensor& beta) {
  const char* op = "batch_norm_backward";
  const DType t = compute_dtype(op, x, {&dy, &dx});
  CudaDeviceGuard guard(index());
  void* scratch = bn_scratch(*this, d);
  cuda_kernels::batch_norm_backward(t, x.raw(), ptr_or_null(gamma), ptr_or_null(beta), mean.data<float>(),
                                    var.data<float>(), dy.raw(), dx ? dx.raw() : nullptr, mut_ptr_or_null(dgamma),
                                    mut_ptr_or_null(dbeta), d.rows, d.c, d.epsilon, d.relu, scratch, stream());
}

}  // namespace tg
