// CpuBackend's optimizer ops: the update of w from a gradient (optimizer_update, with the moving average of the
// new w in the same pass), the update from a TernGrad average still coded (optimizer_update_coded: the decode
// one cache-sized tile at a time on each thread, then the same update loop over the tile, so the decoded
// gradient never reaches memory), and the moving average alone. Plain loops over the shared TG_HOST_DEVICE math
// of terngrad/math/optim_math.h, split over the backend's compute team.
#include <cstdint>

#include "src/backend/codec_checks.h"
#include "src/backend/cpu/cpu_backend.h"
#include "terngrad/backend/ternary_codec.h"
#include "terngrad/math/optim_math.h"

namespace tg {

namespace {
constexpr int64_t kGrain = 16384;  // elements per chunk below which loops run on one thread
// The coded update's tile: 4 KiB of decoded gradient on the thread's stack, in L1 while the update reads it;
// a multiple of 64 elements (the decode kernels' step) and of 4 (a packed byte).
constexpr int64_t kTile = 1024;

void check_same_numel(const Tensor& a, const Tensor& b, const char* op) {
  TG_CHECK(a.numel() == b.numel(), "{}: element counts differ: {} vs {}", op, a.str(), b.str());
}

// One range of the update: the kind's per-element function (the same shared functions as
// optimizer_update_one, so the same bits), then (kEma) the moving average of the new value in the same loop
// so w is read once. Kind and kEma are template parameters and the pointers restrict-qualified, so every
// combination is one plain loop the compiler vectorizes (through a lambda it did not: the fused pass ran at
// half the speed of two separate ones).
template <OptimizerKind kKind, bool kEma>
void update_range(int64_t s, int64_t e, float* __restrict pw, const float* __restrict pg, float* __restrict p1,
                  float* __restrict p2, float* __restrict pe, const OptimizerStep& st) {
  const float lr = st.lr, momentum = st.momentum, beta1 = st.beta1, beta2 = st.beta2, epsilon = st.epsilon,
              decay = st.decay, ema_decay = st.ema_decay;
  for (int64_t i = s; i < e; ++i) {
    if constexpr (kKind == OptimizerKind::kGd) gd_update(pw[i], pg[i], lr);
    if constexpr (kKind == OptimizerKind::kMomentum) momentum_update(pw[i], pg[i], p1[i], lr, momentum);
    if constexpr (kKind == OptimizerKind::kAdam) adam_update(pw[i], pg[i], p1[i], p2[i], lr, beta1, beta2, epsilon);
    if constexpr (kKind == OptimizerKind::kRmsprop)
      rmsprop_update(pw[i], pg[i], p1[i], p2[i], lr, decay, momentum, epsilon);
    if constexpr (kEma) ema_update_one(pe[i], pw[i], ema_decay);
  }
}

template <OptimizerKind kKind>
void update_range(bool ema, int64_t s, int64_t e, float* pw, const float* pg, float* p1, float* p2, float* pe,
                  const OptimizerStep& st) {
  if (ema)
    update_range<kKind, true>(s, e, pw, pg, p1, p2, pe, st);
  else
    update_range<kKind, false>(s, e, pw, pg, p1, p2, pe, st);
}

// The update's buffers, checked: w, its slots and moving average (null when the step does not use them).
struct UpdateBuffers {
  float *w = nullptr, *s1 = nullptr, *s2 = nullptr, *ema = nullptr;
  bool with_ema = false;
  // The same buffers from element `at` on (elements [at, ...) of each).
  UpdateBuffers from(int64_t at) const {
    auto shift = [at](float* p) { return p ? p + at : nullptr; };
    return {shift(w), shift(s1), shift(s2), shift(ema), with_ema};
  }
};

UpdateBuffers update_buffers(const OptimizerStep& step, const Tensor& w, const Tensor& s1, const Tensor& s2,
                             const Tensor& ema, const char* op) {
  UpdateBuffers b;
  b.w = w.data<float>();
  b.s1 = s1 ? s1.data<float>() : nullptr;
  b.s2 = s2 ? s2.data<float>() : nullptr;
  const bool needs1 = step.kind != OptimizerKind::kGd;
  const bool needs2 = step.kind == OptimizerKind::kAdam || step.kind == OptimizerKind::kRmsprop;
  TG_CHECK(!needs1 || (b.s1 && s1.numel() == w.numel()), "{}: first slot missing for {}", op, w.str());
  TG_CHECK(!needs2 || (b.s2 && s2.numel() == w.numel()), "{}: second slot missing for {}", op, w.str());
  b.with_ema = step.ema_decay >= 0.f;
  TG_CHECK(!b.with_ema || (ema && ema.numel() == w.numel()), "{}: moving average missing for {}", op, w.str());
  b.ema = b.with_ema ? ema.data<float>() : nullptr;
  return b;
}

// Elements [0, count) of the update from the gradient g[0, count); the buffers start at the range's first element.
void update(const OptimizerStep& step, const UpdateBuffers& b, const float* g, int64_t count) {
  switch (step.kind) {
    case OptimizerKind::kGd:
      return update_range<OptimizerKind::kGd>(b.with_ema, 0, count, b.w, g, b.s1, b.s2, b.ema, step);
    case OptimizerKind::kMomentum:
      return update_range<OptimizerKind::kMomentum>(b.with_ema, 0, count, b.w, g, b.s1, b.s2, b.ema, step);
    case OptimizerKind::kAdam:
      return update_range<OptimizerKind::kAdam>(b.with_ema, 0, count, b.w, g, b.s1, b.s2, b.ema, step);
    case OptimizerKind::kRmsprop:
      return update_range<OptimizerKind::kRmsprop>(b.with_ema, 0, count, b.w, g, b.s1, b.s2, b.ema, step);
  }
}
}  // namespace

void CpuBackend::optimizer_update_impl(const OptimizerStep& step, const Tensor& w, const Tensor& g, const Tensor& s1,
                                       const Tensor& s2, const Tensor& ema) {
  check_same_numel(w, g, "optimizer_update");
  const UpdateBuffers buffers = update_buffers(step, w, s1, s2, ema, "optimizer_update");
  const float* pg = g.data<float>();
  parallel_for(
      w.numel(), [&](int64_t s, int64_t e) { update(step, buffers.from(s), pg + s, e - s); }, kGrain);
}

void CpuBackend::optimizer_update_coded_impl(const OptimizerStep& step, const Tensor& w, const CodedAverage& g,
                                             const Tensor& s1, const Tensor& s2, const Tensor& ema) {
  namespace cc = codec_checks;
  const char* op = "optimizer_update_coded";
  const int64_t n = w.numel();
  const UpdateBuffers buffers = update_buffers(step, w, s1, s2, ema, op);
  TG_CHECK(g.num_workers >= 1, "{}: {} workers", op, g.num_workers);
  cc::scalers(g.scaler, n, g.bucket, op);
  TG_CHECK(g.scaler.device().is_cpu(), "{} on the cpu: the scaler {} is on another device", op, g.scaler.str());
  const float* s = g.scaler.data<float>();
  const uint8_t* gathered = nullptr;
  const int8_t* sums = nullptr;
  if (g.gathered) {
    cc::workers_packed(g.gathered, g.stride, g.num_workers, n, op);
    gathered = g.gathered.data<uint8_t>();
  } else {
    cc::dtype(g.code_sums, DType::kI8, op, "code sums");
    cc::numel(g.code_sums, n, op, "code sums");
    sums = g.code_sums.data<int8_t>();
  }
  const int64_t tiles = (n + kTile - 1) / kTile;
  parallel_for(
      tiles,
      [&](int64_t t0, int64_t t1) {
        alignas(64) float decoded[kTile];
        for (int64_t t = t0; t < t1; ++t) {
          const int64_t begin = t * kTile, count = std::min(kTile, n - begin);
          if (gathered)
            ternary_decode_gathered_range_cpu(gathered, g.stride, g.num_workers, begin, count, s, g.bucket, decoded);
          else
            ternary_decode_sums_range_cpu(sums, begin, count, s, g.bucket, g.num_workers, decoded);
          update(step, buffers.from(begin), decoded, count);
        }
      },
      kGrain / kTile);
}

void CpuBackend::ema_update_impl(float decay, const Tensor& w, const Tensor& ema) {
  check_same_numel(w, ema, "ema_update");
  const float* pw = w.data<float>();
  float* pe = ema.data<float>();
  parallel_for(
      w.numel(),
      [&](int64_t s, int64_t e) {
        for (int64_t i = s; i < e; ++i) ema_update_one(pe[i], pw[i], decay);
      },
      kGrain);
}

}  // namespace tg
