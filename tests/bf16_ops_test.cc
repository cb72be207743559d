// The CPU backend in bf16 compute (mixed precision) against the double-precision references of
// tests/common/reference_ops.h, op by op, and the precision ops cast and unscale_and_check.
//
// Method: inputs are drawn, rounded to bf16, and the reference is computed in double on exactly those rounded
// values, so the only differences left are the output's rounding to bf16 and f32 accumulation order. bf16 keeps
// 8 significant bits: one rounding to nearest is at most 2^-8 of the value (0.4%). Tolerances are stated per op
// relative to max(1, max |reference|) (as tests/cpu_ops_test.cc does for f32) and explained where they are set.
//
// bf16 runs where oneDNN's effective ISA has AVX512_BF16 or AMX; elsewhere each test reports SKIPPED with
// why_not's reason (never a pass). BackendPrecision.Bf16RefusedBelowAvx512Bf16 lowers the ISA to AVX2 to check
// that refusal on any machine.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <dnnl.hpp>
#include <functional>
#include <iterator>
#include <limits>
#include <random>
#include <tuple>
#include <vector>

#include "common/close_values.h"
#include "common/error_of.h"
#include "common/reference_ops.h"
#include "src/backend/cpu/cpu_backend.h"

namespace tg {
namespace {

using ref::Vec;

constexpr int kGuard = 8;
constexpr double kBf16Unit = 1.0 / 256;  // 2^-8: the largest relative error of one bf16 rounding (unit roundoff)

double to_double(DType t, const uint8_t* p) {
  switch (t) {
    case DType::kF32: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    case DType::kBf16: {
      bf16_bits b;
      std::memcpy(&b, p, 2);
      return bf16_to_float(b);
    }
    case DType::kF16: {
      half_bits h;
      std::memcpy(&h, p, 2);
      return half_to_float(h);
    }
    default:
      ADD_FAILURE() << "not a float dtype";
      return 0;
  }
}

void from_double(DType t, double v, uint8_t* p) {
  const float f = static_cast<float>(v);
  if (t == DType::kF32) std::memcpy(p, &f, 4);
  if (t == DType::kBf16) {
    bf16_bits b = float_to_bf16(f);
    std::memcpy(p, &b, 2);
  }
  if (t == DType::kF16) {
    half_bits h = float_to_half(f);
    std::memcpy(p, &h, 2);
  }
}

// A host tensor of dtype t followed by kGuard guard elements (bytes 0xA5) that must survive. Without values,
// the elements are NaN (they must be written).
struct Host {
  DType dtype;
  std::vector<uint8_t> bytes;
  Tensor t;
  Host(DType type, const Shape& s, const Vec& values = {}) : dtype(type), bytes((s.numel() + kGuard) * 4, 0xA5) {
    const size_t es = dtype_size(type);
    for (int64_t i = 0; i < s.numel(); ++i)
      from_double(type, values.empty() ? std::nan("") : values[i], bytes.data() + i * es);
    t = Tensor(bytes.data(), s, type, Device::cpu());
  }
  Vec values() const {
    Vec v(t.numel());
    for (int64_t i = 0; i < t.numel(); ++i) v[i] = to_double(dtype, bytes.data() + i * dtype_size(dtype));
    return v;
  }
  bool guard_intact() const {
    for (size_t i = t.bytes(); i < bytes.size(); ++i)
      if (bytes[i] != 0xA5) return false;
    return true;
  }
};

// Values in [lo, hi) rounded to bf16 (exactly what a bf16 tensor of them holds).
Vec bf16_vec(int64_t n, uint32_t seed, double lo = -1.0, double hi = 1.0) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  Vec v(n);
  for (auto& e : v) e = bf16_to_float(float_to_bf16(static_cast<float>(u(gen))));
  return v;
}

// |got - want| <= tol * max(1, max |want|) everywhere, no NaN/Inf, guards intact.
void expect_close(const Host& got, const Vec& want, const char* what, double tol) {
  ASSERT_TRUE(got.guard_intact()) << what << ": write past the end of the output";
  testing::expect_close_values(got.values(), want, what, tol);
}

class Bf16Ops : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!be.supports_compute(DType::kBf16)) GTEST_SKIP() << be.why_not(DType::kBf16);
  }
  CpuBackend be{2};
  static constexpr DType B = DType::kBf16;
};

// ---- oneDNN ops ---------------------------------------------------------------------------------------
// Convolution and inner product: oneDNN multiplies bf16 inputs exactly into f32 and accumulates in f32, then
// rounds the output once: 2^-8 relative to the output. The tolerance is 2 units (2^-7) of the largest
// reference value: one rounding, plus f32 accumulation over up to a few hundred terms in another order
// (~1e-6 relative) and cancellation (an output far below the largest is held to the largest's unit).
constexpr double kGemmTol = 2 * kBf16Unit;

TEST_F(Bf16Ops, Conv2dForwardBackward) {
  for (const ConvDesc& d : {make_conv_desc(2, 9, 9, 3, 5, 5, 4, 2, Padding::kValid, 1, true),
                            make_conv_desc(3, 8, 8, 4, 3, 3, 6, 1, Padding::kSame, 2, true),
                            make_conv_desc(3, 14, 14, 20, 5, 5, 50, 1, Padding::kSame, 1, false)}) {
    SCOPED_TRACE(d.key());
    Shape xs{d.n, d.h, d.w, d.c}, ws{d.kh, d.kw, d.c / d.groups, d.out_c}, ys{d.n, d.out_h, d.out_w, d.out_c};
    Vec x = bf16_vec(xs.numel(), 1), w = bf16_vec(ws.numel(), 2), dy = bf16_vec(ys.numel(), 4);
    Vec b = d.has_bias ? bf16_vec(d.out_c, 3) : Vec{};
    Host tx(B, xs, x), tw(B, ws, w), tb(B, Shape{d.out_c}, b), ty(B, ys), tdy(B, ys, dy);
    be.conv2d_forward(d, tx.t, tw.t, d.has_bias ? tb.t : Tensor(), ty.t);
    expect_close(ty, ref::conv2d_forward(d, x, w, b), "conv y", kGemmTol);
    Vec rdx, rdw, rdb;
    ref::conv2d_backward(d, x, w, dy, &rdx, &rdw, &rdb);
    Host tdx(B, xs), tdw(B, ws), tdb(B, Shape{d.out_c});
    be.conv2d_backward(d, tx.t, tw.t, tdy.t, tdx.t, tdw.t, d.has_bias ? tdb.t : Tensor());
    expect_close(tdx, rdx, "conv dx", kGemmTol);
    expect_close(tdw, rdw, "conv dw", kGemmTol);
    if (d.has_bias) expect_close(tdb, rdb, "conv db", kGemmTol);
  }
}

TEST_F(Bf16Ops, InnerProductForwardBackward) {
  for (auto [n, in, out, bias] : std::vector<std::tuple<int64_t, int64_t, int64_t, bool>>{
           {3, 17, 9, false}, {64, 800, 500, true}, {2, 1, 1, true}}) {
    InnerProductDesc d;
    d.n = n, d.in = in, d.out = out, d.has_bias = bias;
    SCOPED_TRACE(d.key());
    Shape xs{d.n, d.in}, ws{d.in, d.out}, ys{d.n, d.out};
    Vec x = bf16_vec(xs.numel(), 41), w = bf16_vec(ws.numel(), 42), dy = bf16_vec(ys.numel(), 44);
    Vec b = bias ? bf16_vec(d.out, 43) : Vec{};
    Host tx(B, xs, x), tw(B, ws, w), tb(B, Shape{d.out}, b), ty(B, ys), tdy(B, ys, dy);
    Host tdx(B, xs), tdw(B, ws), tdb(B, Shape{d.out});
    be.inner_product_forward(d, tx.t, tw.t, bias ? tb.t : Tensor(), ty.t);
    expect_close(ty, ref::inner_product_forward(d, x, w, b), "ip y", kGemmTol);
    Vec rdx, rdw, rdb;
    ref::inner_product_backward(d, x, w, dy, &rdx, &rdw, &rdb);
    be.inner_product_backward(d, tx.t, tw.t, tdy.t, tdx.t, tdw.t, bias ? tdb.t : Tensor());
    expect_close(tdx, rdx, "ip dx", kGemmTol);
    expect_close(tdw, rdw, "ip dw", kGemmTol);
    if (bias) expect_close(tdb, rdb, "ip db", kGemmTol);
  }
}

// Pooling: max selects an input (exact; 0 tolerance would hold, 1 unit allows for a tie broken otherwise: the
// inputs are distinct draws, so ties are rare), average divides a sum of at most 9 values (one rounding).
// Backward routes or spreads dy (one rounding of a sum of at most 4 overlapping windows' shares).
TEST_F(Bf16Ops, PoolForwardBackward) {
  for (const PoolDesc& d : {make_pool_desc(PoolKind::kMax, 3, 7, 7, 4, 3, 3, 2, Padding::kSame),
                            make_pool_desc(PoolKind::kAvg, 3, 7, 7, 4, 3, 3, 2, Padding::kSame),
                            make_pool_desc(PoolKind::kMax, 1, 28, 28, 3, 2, 2, 2, Padding::kSame)}) {
    SCOPED_TRACE(d.key());
    Shape xs{d.n, d.h, d.w, d.c}, ys{d.n, d.out_h, d.out_w, d.c};
    Vec x = bf16_vec(xs.numel(), 11), dy = bf16_vec(ys.numel(), 12);
    std::vector<uint8_t> ws_bytes(std::max<size_t>(1, be.pool_workspace_bytes(d)));
    Tensor ws = d.kind == PoolKind::kMax
                    ? Tensor(ws_bytes.data(), Shape{static_cast<int64_t>(ws_bytes.size())}, DType::kU8, Device::cpu())
                    : Tensor();
    Host tx(B, xs, x), ty(B, ys), tdy(B, ys, dy), tdx(B, xs);
    be.pool_forward(d, tx.t, ty.t, ws);
    expect_close(ty, ref::pool_forward(d, x), "pool y", kBf16Unit);
    be.pool_backward(d, tx.t, ty.t, tdy.t, ws, tdx.t);
    expect_close(tdx, ref::pool_backward(d, x, dy), "pool dx", kBf16Unit);
  }
}

// LRN: oneDNN computes the window sum and the power in f32 from bf16 inputs, rounding y and dx once each;
// the backward combines two terms of similar size, so 2 units of the largest value.
TEST_F(Bf16Ops, LrnForwardBackward) {
  LrnDesc d;
  d.n = 2, d.h = 3, d.w = 3, d.c = 7, d.depth_radius = 2, d.bias = 1.f, d.alpha = 0.1f, d.beta = 0.75f;
  Shape s{d.n, d.h, d.w, d.c};
  Vec x = bf16_vec(s.numel(), 21), dy = bf16_vec(s.numel(), 22);
  std::vector<uint8_t> ws_bytes(std::max<size_t>(1, be.lrn_workspace_bytes(d)));
  Tensor ws(ws_bytes.data(), Shape{static_cast<int64_t>(ws_bytes.size())}, DType::kU8, Device::cpu());
  Host tx(B, s, x), ty(B, s), tdy(B, s, dy), tdx(B, s);
  be.lrn_forward(d, tx.t, ty.t, ws);
  expect_close(ty, ref::lrn_forward(d, x), "lrn y", 2 * kBf16Unit);
  be.lrn_backward(d, tx.t, tdy.t, ws, tdx.t);
  expect_close(tdx, ref::lrn_backward(d, x, dy), "lrn dx", 2 * kBf16Unit);
}

// ---- our own loops ---------------------------------------------------------------------------------------
// Batch norm: statistics f32 from bf16 x (exact inputs, double sums): as tight as f32 (1e-5 relative). y and
// dx are computed in f32 and rounded once; y = x^ * gamma + beta reaches |x^| ~ 3, so 2 units of the
// largest value cover the rounding and the f32 (not double) arithmetic of the reference's terms.
TEST_F(Bf16Ops, BatchNormStatisticsStayF32) {
  BatchNormDesc d;
  d.rows = 3 * 5 * 5, d.c = 20, d.epsilon = 0.001f, d.has_gamma = true;
  Shape xs{d.rows, d.c}, cs{d.c};
  Vec x = bf16_vec(xs.numel(), 31, -1.0, 3.0), dy = bf16_vec(xs.numel(), 32);
  Vec gamma = bf16_vec(d.c, 33, 0.5, 1.5), beta = bf16_vec(d.c, 34);
  Host tx(B, xs, x), tg(DType::kF32, cs, gamma), tb(DType::kF32, cs, beta), ty(B, xs), tmean(DType::kF32, cs),
      tvar(DType::kF32, cs);
  be.batch_norm_forward_training(d, tx.t, tg.t, tb.t, ty.t, tmean.t, tvar.t);
  Vec rmean, rvar;
  Vec ry = ref::batch_norm_forward_training(d, x, gamma, beta, &rmean, &rvar);
  expect_close(ty, ry, "bn y", 2 * kBf16Unit);
  expect_close(tmean, rmean, "bn mean (f32)", 1e-5);
  expect_close(tvar, rvar, "bn var (f32)", 1e-5);
  Host ty2(B, xs);
  be.batch_norm_forward_inference(d, tx.t, tg.t, tb.t, tmean.t, tvar.t, ty2.t);
  expect_close(ty2, ry, "bn y (inference)", 2 * kBf16Unit);
  Vec rdx, rdg, rdb;
  ref::batch_norm_backward(d, x, gamma, rmean, rvar, dy, &rdx, &rdg, &rdb);
  Host tdy(B, xs, dy), tdx(B, xs), tdg(DType::kF32, cs), tdb(DType::kF32, cs);
  be.batch_norm_backward(d, tx.t, tg.t, tmean.t, tvar.t, tdy.t, tdx.t, tdg.t, tdb.t);
  expect_close(tdx, rdx, "bn dx", 2 * kBf16Unit);
  expect_close(tdb, rdb, "bn dbeta (f32)", 1e-5);
  expect_close(tdg, rdg, "bn dgamma (f32)", 1e-5);
}

// A ReLU fused into batch norm (BatchNormDesc::relu) is bit for bit the batch norm then relu_forward, and its
// backward relu_backward then the batch norm's backward (dx, dgamma, dbeta), in f32 and bf16, training and inference
// forwards, with and without gamma; about half the outputs are negative (beta in [-1, 1] shifts them).
TEST(BatchNormRelu, FusedGivesTheBitsOfBatchNormThenRelu) {
  CpuBackend be(2);
  for (const DType t : {DType::kF32, DType::kBf16})
    for (const bool has_gamma : {true, false}) {
      if (!be.supports_compute(t)) {
        std::printf("%s skipped: %s\n", dtype_name(t), be.why_not(t).c_str());
        continue;
      }
      SCOPED_TRACE(std::string(dtype_name(t)) + (has_gamma ? " gamma" : " beta-only"));
      BatchNormDesc d;
      d.rows = 4 * 7 * 7, d.c = 24, d.epsilon = 0.001f, d.has_gamma = has_gamma;
      BatchNormDesc fused = d;
      fused.relu = true;
      const Shape xs{d.rows, d.c}, cs{d.c};
      const Vec x = bf16_vec(xs.numel(), 41, -1.0, 3.0), dy = bf16_vec(xs.numel(), 42);
      const Vec gamma = bf16_vec(d.c, 43, 0.5, 1.5), beta = bf16_vec(d.c, 44);
      const DType f = DType::kF32;
      Host tx(t, xs, x), tdy(t, xs, dy), tg(f, cs, gamma), tb(f, cs, beta);
      const Tensor g = has_gamma ? tg.t : Tensor();
      // Separate: batch norm, relu in place, relu's backward, batch norm's backward.
      Host y(t, xs), mean(f, cs), var(f, cs), dr(t, xs), dx(t, xs), dgamma(f, cs), dbeta(f, cs), yi(t, xs);
      be.batch_norm_forward_training(d, tx.t, g, tb.t, y.t, mean.t, var.t);
      be.relu_forward(y.t, y.t);
      be.relu_backward(y.t, tdy.t, dr.t);
      be.batch_norm_backward(d, tx.t, g, mean.t, var.t, dr.t, dx.t, has_gamma ? dgamma.t : Tensor(), dbeta.t);
      be.batch_norm_forward_inference(d, tx.t, g, tb.t, mean.t, var.t, yi.t);
      be.relu_forward(yi.t, yi.t);
      // Fused.
      Host fy(t, xs), fmean(f, cs), fvar(f, cs), fdx(t, xs), fdgamma(f, cs), fdbeta(f, cs), fyi(t, xs);
      be.batch_norm_forward_training(fused, tx.t, g, tb.t, fy.t, fmean.t, fvar.t);
      be.batch_norm_backward(fused, tx.t, g, fmean.t, fvar.t, tdy.t, fdx.t, has_gamma ? fdgamma.t : Tensor(), fdbeta.t,
                             tb.t);
      be.batch_norm_forward_inference(fused, tx.t, g, tb.t, fmean.t, fvar.t, fyi.t);
      const auto same = [](const Host& a, const Host& b) { return a.bytes == b.bytes; };
      EXPECT_TRUE(same(y, fy)) << "forward (training)";
      EXPECT_TRUE(same(yi, fyi)) << "forward (inference)";
      EXPECT_TRUE(same(mean, fmean) && same(var, fvar)) << "statistics";
      EXPECT_TRUE(same(dx, fdx)) << "dx";
      EXPECT_TRUE(same(dbeta, fdbeta)) << "dbeta";
      if (has_gamma) {
        EXPECT_TRUE(same(dgamma, fdgamma)) << "dgamma";
      }
      const Vec yv = fy.values();
      const auto zeros = std::count(yv.begin(), yv.end(), 0.0);
      EXPECT_GT(zeros, xs.numel() / 5) << "the ReLU must cut a good part of the outputs";
      EXPECT_LT(zeros, xs.numel() * 4 / 5);
      // The front: beta only with a fused ReLU, and required by it.
      EXPECT_NE(testing::error_of([&] {
                  be.batch_norm_backward(fused, tx.t, g, fmean.t, fvar.t, tdy.t, fdx.t, Tensor(), fdbeta.t);
                }).find("a fused ReLU's mask needs beta"),
                std::string::npos);
      EXPECT_NE(testing::error_of([&] {
                  be.batch_norm_backward(d, tx.t, g, fmean.t, fvar.t, tdy.t, fdx.t, Tensor(), fdbeta.t, tb.t);
                }).find("beta given to"),
                std::string::npos);
    }
}

// Element-wise ops: relu and concat/split are exact on bf16 values (selection, copies); add and dropout's
// x / keep_prob round once (1 unit). Reductions read bf16 exactly and sum in double (1e-12).
TEST_F(Bf16Ops, ElementwiseConcatAndReductions) {
  const int64_t n = 1000;
  Vec a = bf16_vec(n, 51), b = bf16_vec(n, 52);
  Host ta(B, Shape{n}, a), tb(B, Shape{n}, b), out(B, Shape{n}), relu(B, Shape{n}), drelu(B, Shape{n});
  be.add(ta.t, tb.t, out.t);
  Vec sum(n), r(n), dr(n);
  for (int64_t i = 0; i < n; ++i) sum[i] = a[i] + b[i], r[i] = std::max(a[i], 0.0), dr[i] = a[i] > 0 ? b[i] : 0.0;
  expect_close(out, sum, "add", kBf16Unit);
  // In place (out is a: the add layer's third and later inputs): a + b rounded, plus b, rounded again.
  Vec sum2(n);
  const Vec rounded = out.values();
  for (int64_t i = 0; i < n; ++i) sum2[i] = rounded[i] + b[i];
  be.add(out.t, tb.t, out.t);
  expect_close(out, sum2, "add in place", kBf16Unit);
  be.relu_forward(ta.t, relu.t);
  expect_close(relu, r, "relu", 0);
  be.relu_backward(relu.t, tb.t, drelu.t);
  expect_close(drelu, dr, "relu backward", 0);

  std::vector<uint8_t> mask(n);
  Tensor tm(mask.data(), Shape{n}, DType::kU8, Device::cpu());
  Host dropped(B, Shape{n});
  be.dropout_forward(ta.t, dropped.t, tm, 0.7f, PhiloxKey{1, 2}, 3, 4);
  Vec want(n);
  for (int64_t i = 0; i < n; ++i) want[i] = mask[i] ? a[i] / 0.7 : 0.0;
  expect_close(dropped, want, "dropout", kBf16Unit);

  // Concat two NHWC parts of 3 and 5 channels, then split back: exact.
  Vec p1 = bf16_vec(4 * 3, 53), p2 = bf16_vec(4 * 5, 54);
  Host tp1(B, Shape{1, 2, 2, 3}, p1), tp2(B, Shape{1, 2, 2, 5}, p2), cat(B, Shape{1, 2, 2, 8});
  be.concat_channels({tp1.t, tp2.t}, cat.t);
  Host back1(B, Shape{1, 2, 2, 3}), back2(B, Shape{1, 2, 2, 5});
  be.split_channels(cat.t, {back1.t, back2.t});
  expect_close(back1, p1, "split part 1", 0);
  expect_close(back2, p2, "split part 2", 0);

  double s = 0, ss = 0, mx = 0;
  for (double v : a) s += v, ss += v * v, mx = std::max(mx, std::fabs(v));
  EXPECT_NEAR(be.sum(ta.t), s, 1e-12 * n);
  EXPECT_NEAR(be.sum_squares(ta.t), ss, 1e-12 * n);
  EXPECT_EQ(be.max_abs(ta.t), static_cast<float>(mx));
}

// softmax_xent: probs and losses f32 from bf16 logits (exp/log in double: 1e-6 of f32 rounding); dlogits
// = scale * (probs - target) rounded once to bf16 (1 unit).
TEST_F(Bf16Ops, SoftmaxXentLogitsInBf16ProbsAndLossInF32) {
  const int64_t n = 4, k = 10;
  const float ls = 0.1f, scale = 0.25f;
  Vec logits = bf16_vec(n * k, 61, -4.0, 4.0);
  std::vector<int32_t> labels = {3, 0, 9, 5};
  Tensor tl(labels.data(), Shape{n}, DType::kI32, Device::cpu());
  Host tlog(B, Shape{n, k}, logits), probs(DType::kF32, Shape{n, k}), losses(DType::kF32, Shape{n});
  Host dlogits(B, Shape{n, k});
  be.softmax_xent_forward(tlog.t, tl, ls, probs.t, losses.t);
  be.softmax_xent_backward(probs.t, tl, ls, scale, dlogits.t);
  Vec rp(n * k), rloss(n), rd(n * k);
  for (int64_t r = 0; r < n; ++r) {
    double mx = -1e30, z = 0;
    for (int64_t j = 0; j < k; ++j) mx = std::max(mx, logits[r * k + j]);
    for (int64_t j = 0; j < k; ++j) z += std::exp(logits[r * k + j] - mx);
    for (int64_t j = 0; j < k; ++j) {
      const double logp = logits[r * k + j] - mx - std::log(z), target = (j == labels[r] ? 1 - ls : 0) + ls / k;
      rp[r * k + j] = std::exp(logp);
      rloss[r] -= target * logp;
      rd[r * k + j] = scale * (rp[r * k + j] - target);
    }
  }
  expect_close(probs, rp, "probs (f32)", 1e-6);
  expect_close(losses, rloss, "losses (f32)", 1e-6);
  expect_close(dlogits, rd, "dlogits (bf16)", kBf16Unit);
}

// ---- cast and unscale_and_check (no ISA needed: plain loops; F16C for the fp16 casts where the CPU has it) ----

TEST(BackendPrecision, CastRoundsToNearestEvenAndKeepsInfNan) {
  CpuBackend be(2);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  // 1 + 2^-8 is halfway between bf16 1 and 1 + 2^-7: ties to even (1). 1 + 3*2^-8 ties up to 1 + 2^-6.
  // 1 + 2^-8 + 2^-20 is above the tie: rounds up. 70000 overflows f16 (max 65504) to +Inf.
  const std::vector<float> in = {
      1.f + 0x1p-8f, 1.f + 3 * 0x1p-8f, 1.f + 0x1p-8f + 0x1p-20f, -2.5f, inf, -inf, nan, 70000.f, 0.f, -0.f};
  const int64_t n = static_cast<int64_t>(in.size());
  Tensor src(const_cast<float*>(in.data()), Shape{n}, DType::kF32, Device::cpu());
  std::vector<uint16_t> b16(n), h16(n);
  Tensor tb(b16.data(), Shape{n}, DType::kBf16, Device::cpu()), th(h16.data(), Shape{n}, DType::kF16, Device::cpu());
  be.cast(tb, src);
  be.cast(th, src);
  const std::vector<float> want_b = {1.f, 1.f + 0x1p-6f, 1.f + 0x1p-7f, -2.5f, inf, -inf, nan, 70144.f, 0.f, -0.f};
  for (int64_t i = 0; i < n; ++i) {
    const float got = bf16_to_float(bf16_bits{b16[i]});
    if (std::isnan(want_b[i]))
      EXPECT_TRUE(std::isnan(got)) << i;
    else
      EXPECT_EQ(got, want_b[i]) << "bf16 element " << i;
    EXPECT_EQ(std::signbit(got), std::signbit(want_b[i])) << i;
  }
  EXPECT_EQ(half_to_float(half_bits{h16[7]}), inf) << "70000 overflows fp16 to +Inf";
  EXPECT_EQ(half_to_float(half_bits{h16[0]}), 1.f + 0x1p-8f) << "fp16 holds 1 + 2^-8 exactly";
  EXPECT_TRUE(std::isnan(half_to_float(half_bits{h16[6]})));
  // Round trips: bf16 -> f32 -> bf16 and f16 -> bf16 -> f32 through the op, against the scalar conversions.
  std::vector<float> back(n);
  Tensor tback(back.data(), Shape{n}, DType::kF32, Device::cpu());
  be.cast(tback, tb);
  std::vector<uint16_t> b16_again(n);
  Tensor tb2(b16_again.data(), Shape{n}, DType::kBf16, Device::cpu());
  be.cast(tb2, tback);
  EXPECT_EQ(b16_again, b16) << "bf16 -> f32 -> bf16 is the identity";
  be.cast(tb2, th);  // f16 -> bf16 directly
  for (int64_t i = 0; i < n; ++i) {
    const float want = bf16_to_float(float_to_bf16(half_to_float(half_bits{h16[i]})));
    const float got = bf16_to_float(bf16_bits{b16_again[i]});
    if (std::isnan(want))
      EXPECT_TRUE(std::isnan(got));
    else
      EXPECT_EQ(got, want) << "f16 -> bf16 element " << i;
  }
  EXPECT_THROW(be.cast(tb, Tensor(b16.data(), Shape{n - 1}, DType::kBf16, Device::cpu())), Error);
}

// fp32 <-> fp16 casts go through the bulk (F16C) conversions: the scalar conversions' bits on a large tensor of
// every kind of value (normal, subnormal in fp16, overflowing, signed zeros, Inf; NaNs by NaN-ness: F16C keeps
// their payloads), at 2 threads.
TEST(BackendPrecision, HalfCastsMatchTheScalarConversions) {
  CpuBackend be(2);
  const int64_t n = 100003;
  std::vector<float> in(n);
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> exponent(-30.f, 20.f);
  for (int64_t i = 0; i < n; ++i) in[i] = (rng() & 1 ? -1.f : 1.f) * std::exp2(exponent(rng));
  const float specials[] = {0.f,
                            -0.f,
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(),
                            65504.f,
                            65520.f,
                            0x1p-24f,
                            0x1p-25f,
                            0x1p-26f};
  for (size_t k = 0; k < std::size(specials); ++k) in[k * 977] = specials[k];
  std::vector<uint16_t> h(n);
  std::vector<float> back(n);
  be.cast(Tensor(h.data(), Shape{n}, DType::kF16, Device::cpu()),
          Tensor(in.data(), Shape{n}, DType::kF32, Device::cpu()));
  be.cast(Tensor(back.data(), Shape{n}, DType::kF32, Device::cpu()),
          Tensor(h.data(), Shape{n}, DType::kF16, Device::cpu()));
  for (int64_t i = 0; i < n; ++i) {
    const half_bits want = float_to_half(in[i]);
    if (std::isnan(in[i])) {
      EXPECT_TRUE(std::isnan(half_to_float(half_bits{h[i]})) && std::isnan(back[i])) << i;
      continue;
    }
    ASSERT_EQ(h[i], want.bits) << "f32 -> f16 element " << i << " (" << in[i] << ")";
    const float want_back = half_to_float(want);
    ASSERT_EQ(0, std::memcmp(&back[i], &want_back, sizeof want_back)) << "f16 -> f32 element " << i;
  }
}

TEST(BackendPrecision, UnscaleAndCheckSetsTheFlagOnInfOrNanOnly) {
  CpuBackend be(2);
  const int64_t n = 40000;  // more than one thread's chunk
  std::vector<uint16_t> g(n);
  for (int64_t i = 0; i < n; ++i) g[i] = float_to_bf16(static_cast<float>(i % 97) - 48.f).bits;
  Tensor tg(g.data(), Shape{n}, DType::kBf16, Device::cpu());
  std::vector<float> out(n);
  Tensor to(out.data(), Shape{n}, DType::kF32, Device::cpu());
  int32_t found = 0;
  Tensor tf(&found, Shape{1}, DType::kI32, Device::cpu());
  be.unscale_and_check(tg, 0.5f, to, tf);
  EXPECT_EQ(found, 0) << "finite gradients set no flag";
  for (int64_t i = 0; i < n; i += 997) EXPECT_EQ(out[i], (static_cast<float>(i % 97) - 48.f) * 0.5f) << i;
  // The largest finite bf16 times 2 overflows f32 to Inf: flagged. So are an Inf and a NaN in the input.
  for (uint16_t bad : {uint16_t{0x7f7f}, uint16_t{0x7f80}, uint16_t{0xff80}, uint16_t{0x7fc1}}) {
    found = 0;
    g[n - 3] = bad;
    be.unscale_and_check(tg, bad == 0x7f7f ? 2.f : 1.f, to, tf);
    EXPECT_EQ(found, 1) << std::hex << bad;
  }
  // Never cleared by the op: a clean tensor after a bad one leaves the flag set.
  g[n - 3] = 0;
  be.unscale_and_check(tg, 1.f, to, tf);
  EXPECT_EQ(found, 1);
  // f32 in place.
  std::vector<float> f(5, 3.f);
  Tensor tf32(f.data(), Shape{5}, DType::kF32, Device::cpu());
  found = 0;
  be.unscale_and_check(tf32, 1.f / 4, tf32, tf);
  EXPECT_EQ(f[4], 0.75f);
  EXPECT_EQ(found, 0);
}

// unscale_and_check_many (a layer's gradients at once, their weight decay folded in): the bits of unscale_and_check
// and then axpy per tensor, the flag set by any tensor's non-finite product; bad items are one-line errors.
TEST(BackendPrecision, UnscaleAndCheckManyGivesEachUnscaleThenItsDecay) {
  CpuBackend be(2);
  const int count = 20;
  std::vector<std::vector<uint16_t>> g(count);
  std::vector<std::vector<float>> w(count), outs[2];
  for (int k = 0; k < count; ++k) {
    const int64_t n = 1 + (k * 977) % 5003;
    for (int64_t i = 0; i < n; ++i) {
      g[k].push_back(float_to_bf16(static_cast<float>((i + k) % 97) - 48.f).bits);
      w[k].push_back(0.01f * static_cast<float>((i * 7 + k) % 31) - 0.15f);
    }
  }
  int32_t found[2] = {0, 0};
  for (int many = 0; many < 2; ++many) {
    outs[many].assign(count, {});
    std::vector<UnscaleItem> items;
    for (int k = 0; k < count; ++k) {
      const int64_t n = static_cast<int64_t>(g[k].size());
      outs[many][k].assign(n, 0.f);
      items.push_back({Tensor(g[k].data(), Shape{n}, DType::kBf16, Device::cpu()),
                       Tensor(outs[many][k].data(), Shape{n}, DType::kF32, Device::cpu()),
                       k % 3 == 0 ? Tensor() : Tensor(w[k].data(), Shape{n}, DType::kF32, Device::cpu()),
                       k % 3 == 0 ? 0.f : 4e-4f, 0});
    }
    Tensor tf(&found[many], Shape{1}, DType::kI32, Device::cpu());
    if (many) {
      be.unscale_and_check_many(items.data(), count, 0.25f, tf);
    } else {
      for (const UnscaleItem& it : items) {
        be.unscale_and_check(it.src, 0.25f, it.dst, tf);
        if (it.decayed) be.axpy(it.decay, it.decayed, it.dst);
      }
    }
  }
  EXPECT_EQ(found[0], 0);
  EXPECT_EQ(found[1], 0);
  for (int k = 0; k < count; ++k) {
    ASSERT_EQ(0, std::memcmp(outs[0][k].data(), outs[1][k].data(), outs[0][k].size() * sizeof(float))) << k;
    for (size_t i = 0; i < g[k].size(); i += 101) {
      const double want = (static_cast<double>((i + k) % 97) - 48.0) * 0.25 + (k % 3 == 0 ? 0.0 : 4e-4 * w[k][i]);
      EXPECT_NEAR(outs[1][k][i], want, 1e-5) << "tensor " << k << " element " << i;
    }
  }
  // One overflowing tensor among them sets the flag.
  g[7][3] = 0x7f7f;  // bf16's largest finite value: times 2 overflows
  std::vector<UnscaleItem> items;
  for (int k = 0; k < count; ++k) {
    const int64_t n = static_cast<int64_t>(g[k].size());
    items.push_back({Tensor(g[k].data(), Shape{n}, DType::kBf16, Device::cpu()),
                     Tensor(outs[0][k].data(), Shape{n}, DType::kF32, Device::cpu()), Tensor(), 0.f, 0});
  }
  int32_t flag = 0;
  const Tensor tf(&flag, Shape{1}, DType::kI32, Device::cpu());
  be.unscale_and_check_many(items.data(), count, 2.f, tf);
  EXPECT_EQ(flag, 1);
  // A transposing item (a filter-layout gradient back to ours): (5 x 3) read, (3 x 5) written, then its decay.
  {
    std::vector<uint16_t> src(15);
    std::vector<float> dst(15), decayed(15, 1.f);
    for (int i = 0; i < 15; ++i) src[i] = float_to_bf16(static_cast<float>(i)).bits;
    const UnscaleItem t{Tensor(src.data(), Shape{5, 3}, DType::kBf16, Device::cpu()),
                        Tensor(dst.data(), Shape{3, 5}, DType::kF32, Device::cpu()),
                        Tensor(decayed.data(), Shape{3, 5}, DType::kF32, Device::cpu()), 0.5f, 5};
    flag = 0;
    be.unscale_and_check_many(&t, 1, 2.f, tf);
    for (int c = 0; c < 3; ++c)
      for (int r = 0; r < 5; ++r)
        EXPECT_EQ(dst[c * 5 + r], 2.f * static_cast<float>(r * 3 + c) + 0.5f) << r << "," << c;
    EXPECT_EQ(flag, 0);
    UnscaleItem wrong = t;
    wrong.transpose_rows = 4;  // does not divide 15
    EXPECT_THROW(be.unscale_and_check_many(&wrong, 1, 2.f, tf), Error);
    std::vector<float> in_place(15, 1.f);
    const Tensor ip(in_place.data(), Shape{15}, DType::kF32, Device::cpu());
    const UnscaleItem same{ip, ip, Tensor(), 0.f, 5};
    EXPECT_THROW(be.unscale_and_check_many(&same, 1, 2.f, tf), Error);  // no transposition in place
  }
  // Bad items: a decayed parameter overlapping dst, of another dtype, a non-finite decay.
  const int64_t n0 = static_cast<int64_t>(g[0].size());
  UnscaleItem bad = items[0];
  bad.decayed = bad.dst, bad.decay = 1e-4f;
  EXPECT_THROW(be.unscale_and_check_many(&bad, 1, 1.f, tf), Error);
  bad.decayed = Tensor(g[0].data(), Shape{n0}, DType::kBf16, Device::cpu());
  EXPECT_THROW(be.unscale_and_check_many(&bad, 1, 1.f, tf), Error);
  bad.decayed = Tensor(w[0].data(), Shape{n0}, DType::kF32, Device::cpu()), bad.decay = NAN;
  EXPECT_THROW(be.unscale_and_check_many(&bad, 1, 1.f, tf), Error);
  bad.decay = 1e-4f;
  EXPECT_NO_THROW(be.unscale_and_check_many(&bad, 1, 1.f, tf));
}

// The dtype rules of the front: mixed activation dtypes, a bf16 batch-norm statistic, f32-only ops given bf16.
TEST(BackendPrecision, FrontRefusesMixedOrMisplacedDtypes) {
  CpuBackend be(1);
  std::vector<float> f(8, 1.f);
  std::vector<uint16_t> h(8, 0);
  Tensor f32(f.data(), Shape{8}, DType::kF32, Device::cpu()), b16(h.data(), Shape{8}, DType::kBf16, Device::cpu());
  auto expect_error = [](const std::function<void()>& call, const std::vector<std::string>& words) {
    const std::string what = testing::error_of(call);  // "(no error)" names none of the words
    for (const auto& w : words) EXPECT_NE(what.find(w), std::string::npos) << what;
  };
  expect_error([&] { be.relu_forward(f32, b16); }, {"relu_forward", "bf16", "f32"});
  expect_error([&] { be.add(b16, f32, b16); }, {"add", "b"});
  expect_error([&] { be.axpy(1.f, b16, b16); }, {"axpy", "f32"});
  BatchNormDesc d;
  d.rows = 4, d.c = 2;
  expect_error([&] { be.batch_norm_forward_inference(d, f32, Tensor(), b16.reshaped(Shape{8}), f32, f32, f32); },
               {"batch_norm_forward_inference", "beta", "f32"});
  std::vector<int32_t> labels(2, 0);
  Tensor tl(labels.data(), Shape{2}, DType::kI32, Device::cpu());
  expect_error(
      [&] {
        be.softmax_xent_forward(f32.reshaped(Shape{2, 4}), tl, 0.f, b16.reshaped(Shape{2, 4}), f32);
      },
      {"softmax_xent_forward", "probs", "f32"});
}

// fp16 compute on the CPU is refused by name, with the reason (a GPU), and so is bf16 below AVX512_BF16.
TEST(BackendPrecision, Fp16ComputeIsRefusedOnTheCpu) {
  CpuBackend be(1);
  EXPECT_TRUE(be.supports_compute(DType::kF32));
  EXPECT_EQ(be.why_not(DType::kF32), "");
  EXPECT_FALSE(be.supports_compute(DType::kF16));
  EXPECT_NE(be.why_not(DType::kF16).find("GPU"), std::string::npos) << be.why_not(DType::kF16);
  ConvDesc d = make_conv_desc(1, 5, 5, 2, 3, 3, 4, 1, Padding::kSame, 1, false);
  std::vector<uint16_t> x(50), w(72), y(100);
  try {
    be.conv2d_forward(d, Tensor(x.data(), Shape{1, 5, 5, 2}, DType::kF16, Device::cpu()),
                      Tensor(w.data(), Shape{3, 3, 2, 4}, DType::kF16, Device::cpu()), Tensor(),
                      Tensor(y.data(), Shape{1, 5, 5, 4}, DType::kF16, Device::cpu()));
    FAIL() << "fp16 convolution accepted on the CPU";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("conv2d_forward"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("GPU"), std::string::npos) << e.what();
  }
}

TEST(BackendPrecision, Bf16RefusedBelowAvx512Bf16) {
  // Must run before anything in this process fixed oneDNN's ISA (ctest runs each test in its own process).
  if (dnnl::set_max_cpu_isa(dnnl::cpu_isa::avx2) != dnnl::status::success)
    GTEST_SKIP() << "oneDNN's ISA was already fixed in this process (run this test alone)";
  CpuBackend be(1);
  EXPECT_FALSE(be.supports_compute(DType::kBf16));
  EXPECT_EQ(be.why_not(DType::kBf16), "bf16 needs AVX512_BF16 or AMX; this CPU has avx2");
  InnerProductDesc d;
  d.n = 1, d.in = 2, d.out = 2, d.has_bias = false;
  std::vector<uint16_t> x(2), w(4), y(2);
  EXPECT_THROW(be.inner_product_forward(d, Tensor(x.data(), Shape{1, 2}, DType::kBf16, Device::cpu()),
                                        Tensor(w.data(), Shape{2, 2}, DType::kBf16, Device::cpu()), Tensor(),
                                        Tensor(y.data(), Shape{1, 2}, DType::kBf16, Device::cpu())),
               Error);
}

}  // namespace
}  // namespace tg
