// CpuBackend LRN: lrn_workspace_bytes / lrn_forward on oneDNN, lrn_backward on our own loops.
//
// TensorFlow's convention: y = x / (bias + alpha * sum_{|d'-d| <= r} x_{d'}^2)^beta, alpha NOT divided by
// the window. oneDNN's across-channels LRN divides its alpha by local_size, so it gets alpha * (2r + 1)
// with local_size 2r + 1. NHWC activations, f32 or bf16 (the primitive's dtype, part of its cache key).
//
// Why the backward is ours: oneDNN 2.6 has a JIT backward for NHWC across-channel LRN only on AVX-512; on
// AVX2 it runs its reference implementation (lrn_ref), measured at 1.15 s of AlexNet's 3.7 s step (batch 40,
// 1 thread; 50x its AVX-512 JIT). Our loops recompute s = bias + alpha * window(x^2) per pixel from x, so the
// forward keeps no workspace (lrn_workspace_bytes is 0 and the forward is oneDNN's inference primitive):
//   dx_j = dy_j s_j^-beta - 2 alpha beta x_j sum_{|c-j| <= r} dy_c x_c s_c^(-beta-1)
// Each pixel's C channels are independent of every other pixel, window sums run in a fixed order and
// -ffp-contract=off holds, so the result is the same bits on every thread count and every ISA (one loop body,
// compiled for generic x86-64, AVX2 and AVX-512; the path is the codec's, ternary_codec_isa(), which
// ONEDNN_MAX_CPU_ISA lowers as it lowers oneDNN's kernels). beta 0.75 (every network here), 0.5 and 1 use square roots
// and a division; any other beta pow.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <dnnl.hpp>
#include <memory>
#include <type_traits>
#include <vector>

#include "src/backend/cpu/cpu_backend.h"
#include "src/backend/cpu/cpu_dtype.h"
#include "src/backend/cpu/cpu_isa_targets.h"
#include "src/backend/cpu/dnnl_util.h"
#include "terngrad/backend/ternary_codec.h"

namespace tg {
namespace {

using namespace dnnl_util;
using dnnl::algorithm;
using dnnl::prop_kind;

int64_t local_size(const LrnDesc& d) { return 2 * d.depth_radius + 1; }
float dnnl_alpha(const LrnDesc& d) { return d.alpha * static_cast<float>(local_size(d)); }
dnnl::memory::desc data_desc(const LrnDesc& d, DType t) { return md({d.n, d.c, d.h, d.w}, t, tag::nhwc); }

OpKey lrn_key(CpuOp op, const LrnDesc& d, DType t) {
  return OpKey(op, {d.n, d.h, d.w, d.c, d.depth_radius, OpKey::bits(d.bias), OpKey::bits(d.alpha), OpKey::bits(d.beta),
                    static_cast<int64_t>(t)});
}

// ---- backward loops ------------------------------------------------------------------------------------------

// Per-thread scratch of the backward: one slot of 2 (C + 2r) + 4 C floats per compute thread (omp_get_thread_num()
// indexes it: parallel_for runs at most threads_ of them).
struct LrnScratch : CpuBackend::CachedOp {
  int64_t slot = 0;  // floats per thread
  std::vector<float> data;
};

// s^-beta for the betas with a cheap exact form; std::pow for the rest.
enum class BetaForm { k075, k05, k1, kPow };
BetaForm beta_form(float beta) {
  if (beta == 0.75f) return BetaForm::k075;
  if (beta == 0.5f) return BetaForm::k05;
  if (beta == 1.f) return BetaForm::k1;
  return BetaForm::kPow;
}

template <BetaForm kForm>
TG_ALWAYS_INLINE float pow_neg_beta(float s, float beta) {
  if constexpr (kForm == BetaForm::k075) {
    const float r = std::sqrt(s);
    return 1.f / (r * std::sqrt(r));
  } else if constexpr (kForm == BetaForm::k05) {
    return 1.f / std::sqrt(s);
  } else if constexpr (kForm == BetaForm::k1) {
    return 1.f / s;
  } else {
    return std::pow(s, -beta);
  }
}

// Pixels [p0, p1) of an NHWC tensor with C channels. scratch: 2 (C + 2r) + 4 C floats, the padded arrays'
// first and last r entries zero.
template <typename T, BetaForm kForm>
TG_ALWAYS_INLINE void lrn_backward_pixels(const LrnDesc& d, const T* __restrict x, const T* __restrict dy,
                                          T* __restrict dx, int64_t p0, int64_t p1, float* __restrict scratch) {
  const int64_t c = d.c, r = d.depth_radius, window = 2 * r + 1, padded = c + 2 * r;
  const float bias = d.bias, alpha = d.alpha, beta = d.beta, k2 = 2.f * d.alpha * d.beta;
  float* __restrict sq = scratch;     // (C + 2r): x^2, zero-padded
  float* __restrict t = sq + padded;  // (C + 2r): dy x s^(-beta-1), zero-padded
  float* __restrict xf = t + padded;  // (C): x in f32
  float* __restrict dyf = xf + c;     // (C): dy in f32
  float* __restrict pw = dyf + c;     // (C): s^-beta
  float* __restrict acc = pw + c;     // (C): window sums
  for (int64_t p = p0; p < p1; ++p) {
    const T* xp = x + p * c;
    const T* dyp = dy + p * c;
    T* dxp = dx + p * c;
    for (int64_t j = 0; j < c; ++j) {
      xf[j] = cpu::to_f32(xp[j]);
      dyf[j] = cpu::to_f32(dyp[j]);
      sq[r + j] = xf[j] * xf[j];
    }
    for (int64_t j = 0; j < c; ++j) acc[j] = 0.f;
    for (int64_t k = 0; k < window; ++k)
      for (int64_t j = 0; j < c; ++j) acc[j] += sq[j + k];
    for (int64_t j = 0; j < c; ++j) {
      const float s = bias + alpha * acc[j];
      const float q = pow_neg_beta<kForm>(s, beta);
      pw[j] = q;
      t[r + j] = dyf[j] * xf[j] * (q / s);
    }
    for (int64_t j = 0; j < c; ++j) acc[j] = 0.f;
    for (int64_t k = 0; k < window; ++k)
      for (int64_t j = 0; j < c; ++j) acc[j] += t[j + k];
    for (int64_t j = 0; j < c; ++j) dxp[j] = cpu::from_f32<T>(dyf[j] * pw[j] - k2 * xf[j] * acc[j]);
  }
}

template <typename T, BetaForm kForm>
void lrn_backward_generic(const LrnDesc& d, const T* x, const T* dy, T* dx, int64_t p0, int64_t p1, float* scratch) {
  lrn_backward_pixels<T, kForm>(d, x, dy, dx, p0, p1, scratch);
}
#if TG_CPU_X86
template <typename T, BetaForm kForm>
TG_TARGET_AVX2 void lrn_backward_avx2(const LrnDesc& d, const T* x, const T* dy, T* dx, int64_t p0, int64_t p1,
                                      float* scratch) {
  lrn_backward_pixels<T, kForm>(d, x, dy, dx, p0, p1, scratch);
}
template <typename T, BetaForm kForm>
TG_TARGET_AVX512 void lrn_backward_avx512(const LrnDesc& d, const T* x, const T* dy, T* dx, int64_t p0, int64_t p1,
                                          float* scratch) {
  lrn_backward_pixels<T, kForm>(d, x, dy, dx, p0, p1, scratch);
}
#endif

template <typename T>
using LrnBackwardFn = void (*)(const LrnDesc&, const T*, const T*, T*, int64_t, int64_t, float*);

template <typename T, BetaForm kForm>
LrnBackwardFn<T> pick_backward(CodecIsa isa) {
#if TG_CPU_X86
  if (isa == CodecIsa::kAvx512) return lrn_backward_avx512<T, kForm>;
  if (isa == CodecIsa::kAvx2) return lrn_backward_avx2<T, kForm>;
#endif
  (void)isa;
  return lrn_backward_generic<T, kForm>;
}

template <typename T>
LrnBackwardFn<T> backward_loop(float beta) {
  const CodecIsa isa = ternary_codec_isa();  // the path of the backend's own loops
  switch (beta_form(beta)) {
    case BetaForm::k075:
      return pick_backward<T, BetaForm::k075>(isa);
    case BetaForm::k05:
      return pick_backward<T, BetaForm::k05>(isa);
    case BetaForm::k1:
      return pick_backward<T, BetaForm::k1>(isa);
    default:
      return pick_backward<T, BetaForm::kPow>(isa);
  }
}

}  // namespace

size_t CpuBackend::lrn_workspace_bytes_impl(const LrnDesc&) {
  return 0;  // the backward recomputes what it needs from x
}

void CpuBackend::lrn_forward_impl(const LrnDesc& d, const Tensor& x, const Tensor& y, const Tensor& /*workspace*/) {
  const DType t = x.dtype();
  require_compute(t, "lrn_forward");
  auto& e = cached<CachedPrimitive>(lrn_key(CpuOp::kLrnFwdInfer, d, t), [&] {
    auto e = std::make_unique<CachedPrimitive>();
    dnnl::lrn_forward::primitive_desc pd;
    TG_DNNL_CALL(pd = dnnl::lrn_forward::primitive_desc(
                     dnnl::lrn_forward::desc(prop_kind::forward_inference, algorithm::lrn_across_channels,
                                             data_desc(d, t), local_size(d), dnnl_alpha(d), d.beta, d.bias),
                     user_scratchpad_attr(), engine_));
    e->init(pd, {DNNL_ARG_SRC, DNNL_ARG_DST}, engine_);
    return e;
  });
  e.run(stream_, {x.raw(), y.raw()});
}

void CpuBackend::lrn_backward_impl(const LrnDesc& d, const Tensor& x, const Tensor& dy, const Tensor& /*workspace*/,
                                   const Tensor& dx) {
  const char* op = "lrn_backward";
  const DType t = x.dtype();
  require_compute(t, op);
  auto& scratch = cached<LrnScratch>(lrn_key(CpuOp::kLrnBwd, d, t), [&] {
    auto e = std::make_unique<LrnScratch>();
    e->slot = 2 * (d.c + 2 * d.depth_radius) + 4 * d.c;
    e->data.assign(static_cast<size_t>(e->slot * threads_), 0.f);  // the padded arrays' ends stay 0
    return e;
  });
  cpu::dispatch_compute(t, op, [&](auto* type) {
    using T = std::remove_pointer_t<decltype(type)>;
    const LrnBackwardFn<T> loop = backward_loop<T>(d.beta);
    const T* px = static_cast<const T*>(x.raw());
    const T* pdy = static_cast<const T*>(dy.raw());
    T* pdx = static_cast<T*>(dx.raw());
    parallel_for(
        d.n * d.h * d.w,
        [&](int64_t p0, int64_t p1) {
          float* slot = scratch.data.data() + scratch.slot * omp_get_thread_num();
          loop(d, px, pdy, pdx, p0, p1, slot);
        },
        std::max<int64_t>(1, 16384 / d.c));
  });
}

}  // namespace tg
