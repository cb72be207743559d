// CpuBackend batch normalization: forward (training: batch statistics; inference: given statistics) and
// backward, as plain loops over the data (rows = N*H*W, C), channels contiguous.
//
// Why not oneDNN: its batch norm (bnorm_jit, 2.6) reduces the statistics across threads with a spin
// barrier inside one parallel region. When the machine runs other work and a thread is descheduled, the
// others spin through whole time slices: with 2 threads on a loaded 2-core machine ResNet-50's batch
// norms took 1.3 s a step instead of 77 ms, and the step ran 2x slower than on 1 thread. These loops
// synchronise only at the end of each OpenMP region (where waiting threads can sleep).
//
// Determinism: the rows are cut into fixed chunks (kBnChunkRows, independent of the thread count); each
// chunk's per-channel sums are accumulated in double and the chunks are added in batch_norm_math.h's fixed
// order (groups of chunks, then the groups), so the statistics, and therefore every output, are the same bits for
// any thread count, and the CUDA kernels' bits. The variance is the population
// variance of the batch, from a second pass over x - mean (no cancellation of E[x^2] - E[x]^2).
//
// Compute dtypes: x, y, dy, dx are f32, f16 or bf16 (one per call), read into f32 and written rounded once;
// gamma, beta, the statistics and dgamma/dbeta are f32, accumulated as above (the same chunk order).
//
// Backward of the training forward (x^ = (x - mean) * inv_std, inv_std = 1 / sqrt(var + eps)):
//   dbeta = sum dy,  dgamma = sum dy * x^,  dx = gamma * inv_std * (dy - dbeta / R - x^ * dgamma / R)
// with gamma = 1 when the descriptor has none (dgamma is still needed for dx, just not returned).
#include <algorithm>
#include <cmath>
#include <memory>
#include <type_traits>
#include <vector>

#include "src/backend/cpu/cpu_backend.h"
#include "src/backend/cpu/cpu_dtype.h"
#include "src/backend/cpu/dnnl_util.h"
#include "terngrad/math/activation_math.h"
#include "terngrad/math/batch_norm_math.h"

namespace tg {
namespace {

int64_t num_chunks(const BatchNormDesc& d) { return bn_num_chunks(d.rows); }

// Per-chunk partial sums and per-channel coefficients, sized once per descriptor.
struct BnScratch : CpuBackend::CachedOp {
  std::vector<double> partial;      // (chunks, 2, C): two per-channel sums per chunk
  std::vector<double> group;        // (2, C): one group of chunks' sums (batch_norm_math.h's order)
  std::vector<double> sums;         // (2, C): the groups' sums added in order
  std::vector<float> scale, shift;  // (C) each: y = x * scale + shift; backward: gamma * inv_std, mean dy
  std::vector<float> inv_std;       // (C) backward: 1 / sqrt(var + eps)
  std::vector<float> mean_dy_xhat;  // (C) backward: sum(dy * x^) / R
  std::vector<float> y_shift;       // (C) backward with a fused ReLU: the forward's shift (its scale is `scale`)
};

OpKey bn_key(CpuOp op, const BatchNormDesc& d) { return OpKey(op, {d.rows, d.c, OpKey::bits(d.epsilon), d.has_gamma}); }

// y = x * scale[c] + shift[c] over rows [r0, r1); with kRelu max(y, 0) of the rounded y (relu_forward's bits).
template <bool kRelu, typename T>
void affine_rows(const T* __restrict x, T* __restrict y, const float* __restrict scale, const float* __restrict shift,
                 int64_t c, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    const T* xr = x + r * c;
    T* yr = y + r * c;
    for (int64_t j = 0; j < c; ++j) {
      const T v = cpu::from_f32<T>(cpu::to_f32(xr[j]) * scale[j] + shift[j]);
      yr[j] = kRelu ? cpu::from_f32<T>(relu_one(cpu::to_f32(v))) : v;
    }
  }
}

template <typename T>
void affine(const BatchNormDesc& d, const T* x, T* y, const BnScratch& s, int64_t r0, int64_t r1) {
  if (d.relu)
    affine_rows<true>(x, y, s.scale.data(), s.shift.data(), d.c, r0, r1);
  else
    affine_rows<false>(x, y, s.scale.data(), s.shift.data(), d.c, r0, r1);
}

template <typename T>
using Elem = std::remove_pointer_t<T>;

}  // namespace

static BnScratch& bn_scratch(CpuBackend& be, CpuOp op, const BatchNormDesc& d) {
  return be.cached<BnScratch>(bn_key(op, d), [&] {
    auto e = std::make_unique<BnScratch>();
    e->partial.assign(static_cast<size_t>(num_chunks(d) * 2 * d.c), 0.0);
    e->group.assign(static_cast<size_t>(2 * d.c), 0.0);
    e->sums.assign(static_cast<size_t>(2 * d.c), 0.0);
    e->scale.assign(static_cast<size_t>(d.c), 0.f);
    e->shift.assign(static_cast<size_t>(d.c), 0.f);
    e->inv_std.assign(static_cast<size_t>(d.c), 0.f);
    e->mean_dy_xhat.assign(static_cast<size_t>(d.c), 0.f);
    e->y_shift.assign(static_cast<size_t>(d.c), 0.f);
    return e;
  });
}

// Adds the chunks' partial sums (chunks, 2, C) into sums (2, C) in batch_norm_math.h's order: each group of
// kBnGroupChunks chunks in chunk order, then the groups in group order (the CUDA kernels add the same way).
static void reduce_chunks(BnScratch& s, int64_t chunks, int64_t c) {
  std::fill(s.sums.begin(), s.sums.end(), 0.0);
  for (int64_t g0 = 0; g0 < chunks; g0 += kBnGroupChunks) {
    std::fill(s.group.begin(), s.group.end(), 0.0);
    for (int64_t k = g0, k1 = std::min(chunks, g0 + kBnGroupChunks); k < k1; ++k) {
      const double* p = s.partial.data() + k * 2 * c;
      for (int64_t j = 0; j < 2 * c; ++j) s.group[j] += p[j];
    }
    for (int64_t j = 0; j < 2 * c; ++j) s.sums[j] += s.group[j];
  }
}

static void update_moving(const float* batch, float* moving, float decay, int64_t c) {
  for (int64_t j = 0; j < c; ++j) moving[j] = bn_moving_update(moving[j], batch[j], decay);
}

void CpuBackend::batch_norm_forward_training_impl(const BatchNormDesc& d, const Tensor& x, const Tensor& gamma,
                                                  const Tensor& beta, const Tensor& y, const Tensor& mean,
                                                  const Tensor& var, const BatchNormMoving& moving) {
  const char* op = "batch_norm_forward_training";  // shapes and dtypes: checked in the Backend's front
  BnScratch& s = bn_scratch(*this, CpuOp::kBnFwdTrain, d);
  cpu::dispatch_compute(x.dtype(), op, [&](auto* type) {
    using T = Elem<decltype(type)>;
    const int64_t c = d.c, rows = d.rows, chunks = num_chunks(d);
    const T* px = static_cast<const T*>(x.raw());
    double* partial = s.partial.data();

    // Pass 1: per-chunk sums of x -> mean.
    parallel_for(
        chunks,
        [&](int64_t k0, int64_t k1) {
          for (int64_t k = k0; k < k1; ++k) {
            double* __restrict acc = partial + k * 2 * c;
            std::fill(acc, acc + c, 0.0);
            for (int64_t r = k * kBnChunkRows, r1 = std::min(rows, r + kBnChunkRows); r < r1; ++r) {
              const T* __restrict xr = px + r * c;
              for (int64_t j = 0; j < c; ++j) acc[j] += cpu::to_f32(xr[j]);
            }
          }
        },
        1);
    reduce_chunks(s, chunks, c);  // only the first C sums are meaningful here
    float* pmean = mean.data<float>();
    for (int64_t j = 0; j < c; ++j) pmean[j] = static_cast<float>(s.sums[j] / static_cast<double>(rows));

    // Pass 2: per-chunk sums of (x - mean)^2 -> population variance.
    parallel_for(
        chunks,
        [&](int64_t k0, int64_t k1) {
          for (int64_t k = k0; k < k1; ++k) {
            double* __restrict acc = partial + k * 2 * c + c;
            std::fill(acc, acc + c, 0.0);
            for (int64_t r = k * kBnChunkRows, r1 = std::min(rows, r + kBnChunkRows); r < r1; ++r) {
              const T* __restrict xr = px + r * c;
              for (int64_t j = 0; j < c; ++j) {
                const double t = static_cast<double>(cpu::to_f32(xr[j]) - pmean[j]);
                acc[j] += t * t;
              }
            }
          }
        },
        1);
    reduce_chunks(s, chunks, c);
    float* pvar = var.data<float>();
    const float* pgamma = d.has_gamma ? gamma.data<float>() : nullptr;
    const float* pbeta = beta.data<float>();
    for (int64_t j = 0; j < c; ++j) {
      pvar[j] = static_cast<float>(s.sums[c + j] / static_cast<double>(rows));
      const float inv_std = 1.f / std::sqrt(pvar[j] + d.epsilon);
      s.scale[j] = (pgamma ? pgamma[j] : 1.f) * inv_std;
      s.shift[j] = pbeta[j] - pmean[j] * s.scale[j];
    }
    if (moving.mean) update_moving(pmean, moving.mean.data<float>(), moving.decay, c);
    if (moving.var) update_moving(pvar, moving.var.data<float>(), moving.decay, c);

    // Pass 3: y = x * scale + shift.
    T* py = static_cast<T*>(y.raw());
    parallel_for(
        rows, [&](int64_t r0, int64_t r1) { affine(d, px, py, s, r0, r1); }, std::max<int64_t>(1, 16384 / c));
  });
}

void CpuBackend::batch_norm_forward_inference_impl(const BatchNormDesc& d, const Tensor& x, const Tensor& gamma,
                                                   const Tensor& beta, const Tensor& mean, const Tensor& var,
                                                   const Tensor& y) {
  const char* op = "batch_norm_forward_inference";  // shapes and dtypes: checked in the Backend's front
  BnScratch& s = bn_scratch(*this, CpuOp::kBnFwdInfer, d);
  const float *pmean = mean.data<float>(), *pvar = var.data<float>(), *pbeta = beta.data<float>();
  const float* pgamma = d.has_gamma ? gamma.data<float>() : nullptr;
  for (int64_t j = 0; j < d.c; ++j) {
    const float inv_std = 1.f / std::sqrt(pvar[j] + d.epsilon);
    s.scale[j] = (pgamma ? pgamma[j] : 1.f) * inv_std;
    s.shift[j] = pbeta[j] - pmean[j] * s.scale[j];
  }
  cpu::dispatch_compute(x.dtype(), op, [&](auto* type) {
    using T = Elem<decltype(type)>;
    const T* px = static_cast<const T*>(x.raw());
    T* py = static_cast<T*>(y.raw());
    parallel_for(
        d.rows, [&](int64_t r0, int64_t r1) { affine(d, px, py, s, r0, r1); }, std::max<int64_t>(1, 16384 / d.c));
  });
}

// kRelu: dy is the gradient of max(y, 0) and each element's is taken only where the forward's rounded y > 0
// (relu_backward's bits), y recomputed from x with the forward's scale and shift (gamma * inv_std, beta - mean *
// scale: the same float operations, so the same mask).
template <bool kRelu>
void CpuBackend::batch_norm_backward_loops(const BatchNormDesc& d, const Tensor& x, const Tensor& gamma,
                                           const Tensor& mean, const Tensor& var, const Tensor& dy, const Tensor& dx,
                                           const Tensor& dgamma, const Tensor& dbeta, const Tensor& beta) {
  const char* op = "batch_norm_backward";  // shapes and dtypes: checked in the Backend's front
  BnScratch& s = bn_scratch(*this, CpuOp::kBnBwd, d);
  cpu::dispatch_compute(x.dtype(), op, [&](auto* type) {
    using T = Elem<decltype(type)>;
    const int64_t c = d.c, rows = d.rows, chunks = num_chunks(d);
    const T *px = static_cast<const T*>(x.raw()), *pdy = static_cast<const T*>(dy.raw());
    const float* pmean = mean.data<float>();
    const float* pvar = var.data<float>();
    const float* pgamma = d.has_gamma ? gamma.data<float>() : nullptr;
    float* inv_std = s.inv_std.data();
    for (int64_t j = 0; j < c; ++j) inv_std[j] = 1.f / std::sqrt(pvar[j] + d.epsilon);
    // The forward's coefficients, for the ReLU's mask: scale (also dx's factor below) and shift.
    for (int64_t j = 0; j < c; ++j) s.scale[j] = (pgamma ? pgamma[j] : 1.f) * inv_std[j];
    if (kRelu) {
      const float* pbeta = beta.data<float>();
      for (int64_t j = 0; j < c; ++j) s.y_shift[j] = pbeta[j] - pmean[j] * s.scale[j];
    }
    const float *y_scale = s.scale.data(), *y_shift = s.y_shift.data();
    // dy of the batch norm's own output: the ReLU's gradient where the forward's y > 0.
    auto grad = [&](const T* xr, const T* dyr, int64_t j) {
      const float g = cpu::to_f32(dyr[j]);
      if (!kRelu) return g;
      const T yv = cpu::from_f32<T>(cpu::to_f32(xr[j]) * y_scale[j] + y_shift[j]);
      return relu_grad_one(cpu::to_f32(yv), g);
    };
    double* partial = s.partial.data();

    // Pass 1: per-chunk sums of dy and dy * x^ (x^ = (x - mean) * inv_std).
    parallel_for(
        chunks,
        [&](int64_t k0, int64_t k1) {
          for (int64_t k = k0; k < k1; ++k) {
            double* __restrict sum_dy = partial + k * 2 * c;
            double* __restrict sum_dy_xhat = sum_dy + c;
            std::fill(sum_dy, sum_dy + 2 * c, 0.0);
            for (int64_t r = k * kBnChunkRows, r1 = std::min(rows, r + kBnChunkRows); r < r1; ++r) {
              const T* __restrict xr = px + r * c;
              const T* __restrict dyr = pdy + r * c;
              for (int64_t j = 0; j < c; ++j) {
                const float xhat = (cpu::to_f32(xr[j]) - pmean[j]) * inv_std[j];
                const float g = grad(xr, dyr, j);
                sum_dy[j] += g;
                sum_dy_xhat[j] += static_cast<double>(g * xhat);
              }
            }
          }
        },
        1);
    reduce_chunks(s, chunks, c);
    float* pdbeta = dbeta ? dbeta.data<float>() : nullptr;
    float* pdgamma = dgamma ? dgamma.data<float>() : nullptr;
    // dx = k * (dy - mean_dy - x^ * mean_dy_xhat) with k = gamma * inv_std (scale) and mean_dy (shift).
    for (int64_t j = 0; j < c; ++j) {
      if (pdbeta) pdbeta[j] = static_cast<float>(s.sums[j]);
      if (pdgamma) pdgamma[j] = static_cast<float>(s.sums[c + j]);
      s.shift[j] = static_cast<float>(s.sums[j] / static_cast<double>(rows));
      s.mean_dy_xhat[j] = static_cast<float>(s.sums[c + j] / static_cast<double>(rows));
    }
    if (!dx) return;

    // Pass 2: dx.
    T* pdx = static_cast<T*>(dx.raw());
    const float *k = s.scale.data(), *mean_dy = s.shift.data(), *mean_dy_xhat = s.mean_dy_xhat.data();
    parallel_for(
        rows,
        [&](int64_t r0, int64_t r1) {
          for (int64_t r = r0; r < r1; ++r) {
            const T* __restrict xr = px + r * c;
            const T* __restrict dyr = pdy + r * c;
            T* __restrict dxr = pdx + r * c;
            for (int64_t j = 0; j < c; ++j) {
              const float xhat = (cpu::to_f32(xr[j]) - pmean[j]) * inv_std[j];
              dxr[j] = cpu::from_f32<T>(k[j] * (grad(xr, dyr, j) - mean_dy[j] - xhat * mean_dy_xhat[j]));
            }
          }
        },
        std::max<int64_t>(1, 16384 / c));
  });
}

void CpuBackend::batch_norm_backward_impl(const BatchNormDesc& d, const Tensor& x, const Tensor& gamma,
                                          const Tensor& mean, const Tensor& var, const Tensor& dy, const Tensor& dx,
                                          const Tensor& dgamma, const Tensor& dbeta, const Tensor& beta) {
  if (d.relu)
    batch_norm_backward_loops<true>(d, x, gamma, mean, var, dy, dx, dgamma, dbeta, beta);
  else
    batch_norm_backward_loops<false>(d, x, gamma, mean, var, dy, dx, dgamma, dbeta, beta);
}

}  // namespace tg
