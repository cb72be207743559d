// CudaBackend batch norm on cuDNN (cudnnBatchNormalizationForwardTraining / ForwardInference / Backward,
// spatial mode). Our BN normalizes (rows = N*H*W, C) per channel; described to cuDNN as (rows, C, 1, 1),
// whose memory is the same as NHWC's.
//
// Statistics: the interface wants the batch mean and the *population* variance. cuDNN exposes the batch
// statistics through its running averages (unbiased variance, Bessel-corrected): with an averaging factor
// of 1 the running mean/var become the batch's; the variance is then scaled by (rows-1)/rows. (The outputs
// are zeroed first: cuDNN computes (1-f)*old + f*new and 0 * NaN would stay NaN.) The backward lets cuDNN
// recompute the batch statistics from x (saved mean/inv-variance passed as null).
// gamma absent: a vector of ones from the arena is the scale and dgamma goes to arena scratch.
#include <climits>

#include "src/backend/cuda/cuda_backend.h"
#include "src/backend/cuda/cuda_kernels.h"
#include "terngrad/backend/cuda_check.h"

namespace tg {
namespace {

struct BnEntry : CudaBackend::CachedOp {
  cudnnTensorDescriptor_t x = nullptr;      // (rows, C, 1, 1)
  cudnnTensorDescriptor_t param = nullptr;  // (1, C, 1, 1)
  size_t arena_bytes = 0;                   // [ones C][zeros C][scratch C]
  ~BnEntry() override {
    if (x) cudnnDestroyTensorDescriptor(x);
    if (param) cudnnDestroyTensorDescriptor(param);
  }
};

size_t align256(size_t bytes) { return (bytes + 255) / 256 * 256; }

BnEntry& bn_entry(CudaBackend& be, const BatchNormDesc& d) {
  TG_CHECK(d.rows > 0 && d.c > 0 && d.rows <= INT_MAX && d.c <= INT_MAX, "batch norm {}: bad sizes", d.key());
  return be.cached<BnEntry>("cuda_bn:" + d.key(), [&] {
    auto e = std::make_unique<BnEntry>();
    TG_CUDNN_CHECK(cudnnCreateTensorDescriptor(&e->x));
    TG_CUDNN_CHECK(cudnnSetTensor4dDescriptor(e->x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, static_cast<int>(d.rows),
                                              static_cast<int>(d.c), 1, 1));
    TG_CUDNN_CHECK(cudnnCreateTensorDescriptor(&e->param));
    TG_CUDNN_CHECK(cudnnDeriveBNTensorDescriptor(e->param, e->x, CUDNN_BATCHNORM_SPATIAL));
    e->arena_bytes = 3 * align256(static_cast<size_t>(d.c) * sizeof(float));
    be.workspace(e->arena_bytes);
    return e.release();
  });
}

// Pointers into the arena: ones (C), zeros (C), scratch (C). Filled on every call (C floats: cheap).
struct BnArena {
  float *ones, *zeros, *scratch;
};
BnArena bn_arena(CudaBackend& be, const BatchNormDesc& d, const BnEntry& e, bool need_ones, bool need_zeros) {
  char* base = static_cast<char*>(be.workspace(e.arena_bytes));
  const size_t slot = align256(static_cast<size_t>(d.c) * sizeof(float));
  BnArena a{reinterpret_cast<float*>(base), reinterpret_cast<float*>(base + slot),
            reinterpret_cast<float*>(base + 2 * slot)};
  if (need_ones) cuda_kernels::fill_f32(a.ones, d.c, 1.f, be.stream());
  if (need_zeros) cuda_kernels::fill_f32(a.zeros, d.c, 0.f, be.stream());
  return a;
}

void check_bn_tensors(CudaBackend& be, const BatchNormDesc& d, const char* op, const Tensor& x, const Tensor& y,
                      const Tensor& gamma) {
  TG_CHECK(x.numel() == d.rows * d.c && y.numel() == x.numel(), "{} {}: x {}, y {} do not match", op, d.key(),
           x.str(), y.str());
  TG_CHECK(!d.has_gamma || gamma.numel() == d.c, "{} {}: gamma {} must have {} elements", op, d.key(), gamma.str(),
           d.c);
  be.check_on_device(x, op, "x"), be.check_on_device(y, op, "y");
  if (d.has_gamma) be.check_on_device(gamma, op, "gamma");
}

void check_param(CudaBackend& be, const BatchNormDesc& d, const char* op, const Tensor& t, const char* what) {
  TG_CHECK(t.numel() == d.c, "{} {}: {} {} must have {} elements", op, d.key(), what, t.str(), d.c);
  be.check_on_device(t, op, what);
}

}  // namespace

void CudaBackend::batch_norm_forward_training(const BatchNormDesc& d, const Tensor& x, const Tensor& gamma,
                                              const Tensor& beta, const Tensor& y, const Tensor& mean,
                                              const Tensor& var) {
  const char* op = "batch_norm_forward_training";
  check_bn_tensors(*this, d, op, x, y, gamma);
  check_param(*this, d, op, mean, "mean"), check_param(*this, d, op, var, "var");
  if (beta) check_param(*this, d, op, beta, "beta");
  CudaDeviceGuard guard(index());
  BnEntry& e = bn_entry(*this, d);
  BnArena a = bn_arena(*this, d, e, !d.has_gamma, !beta);
  zero(mean), zero(var);
  const float one = 1.f, beta0 = 0.f;
  TG_CUDNN_CHECK(cudnnBatchNormalizationForwardTraining(
      cudnn(), CUDNN_BATCHNORM_SPATIAL, &one, &beta0, e.x, x.data<float>(), e.x, y.data<float>(), e.param,
      d.has_gamma ? gamma.data<float>() : a.ones, beta ? beta.data<float>() : a.zeros, 1.0, mean.data<float>(),
      var.data<float>(), d.epsilon, nullptr, nullptr));
  if (d.rows > 1)
    cuda_kernels::scale_f32(static_cast<float>(static_cast<double>(d.rows - 1) / static_cast<double>(d.rows)),
                            var.data<float>(), d.c, stream());
  else
    zero(var);  // one row: the population variance is 0 (cuDNN's unbiased one is undefined)
}

void CudaBackend::batch_norm_forward_inference(const BatchNormDesc& d, const Tensor& x, const Tensor& gamma,
                                               const Tensor& beta, const Tensor& mean, const Tensor& var,
                                               const Tensor& y) {
  const char* op = "batch_norm_forward_inference";
  check_bn_tensors(*this, d, op, x, y, gamma);
  check_param(*this, d, op, mean, "mean"), check_param(*this, d, op, var, "var");
  if (beta) check_param(*this, d, op, beta, "beta");
  CudaDeviceGuard guard(index());
  BnEntry& e = bn_entry(*this, d);
  BnArena a = bn_arena(*this, d, e, !d.has_gamma, !beta);
  const float one = 1.f, beta0 = 0.f;
  TG_CUDNN_CHECK(cudnnBatchNormalizationForwardInference(
      cudnn(), CUDNN_BATCHNORM_SPATIAL, &one, &beta0, e.x, x.data<float>(), e.x, y.data<float>(), e.param,
      d.has_gamma ? gamma.data<float>() : a.ones, beta ? beta.data<float>() : a.zeros, mean.data<float>(),
      var.data<float>(), d.epsilon));
}

void CudaBackend::batch_norm_backward(const BatchNormDesc& d, const Tensor& x, const Tensor& gamma,
                                      const Tensor& /*mean*/, const Tensor& /*var*/, const Tensor& dy,
                                      const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta) {
  const char* op = "batch_norm_backward";
  check_bn_tensors(*this, d, op, x, dy, gamma);
  TG_CHECK(dx.numel() == x.numel(), "{} {}: dx {} does not match x {}", op, d.key(), dx.str(), x.str());
  check_on_device(dx, op, "dx");
  TG_CHECK(d.has_gamma || !dgamma, "{} {}: dgamma given but the batch norm has no gamma", op, d.key());
  if (dgamma) check_param(*this, d, op, dgamma, "dgamma");
  if (dbeta) check_param(*this, d, op, dbeta, "dbeta");
  TG_CHECK(!dgamma || !dbeta || dgamma.raw() != dbeta.raw(), "{}: dgamma and dbeta alias", op);
  CudaDeviceGuard guard(index());
  BnEntry& e = bn_entry(*this, d);
  BnArena a = bn_arena(*this, d, e, !d.has_gamma, false);
  // Unwanted parameter gradients go to scratch; when both are unwanted they share it (written, not read).
  float* dscale = dgamma ? dgamma.data<float>() : a.scratch;
  float* dbias = dbeta ? dbeta.data<float>() : a.zeros;
  const float one = 1.f, beta0 = 0.f;
  TG_CUDNN_CHECK(cudnnBatchNormalizationBackward(cudnn(), CUDNN_BATCHNORM_SPATIAL, &one, &beta0, &one, &beta0, e.x,
                                                 x.data<float>(), e.x, dy.data<float>(), e.x, dx.data<float>(),
                                                 e.param, d.has_gamma ? gamma.data<float>() : a.ones, dscale, dbias,
                                                 d.epsilon, nullptr, nullptr));
}

}  // namespace tg
