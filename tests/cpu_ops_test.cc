// Every oneDNN op of the CPU backend (convolution, pooling, LRN, batch norm, inner product), forward and
// backward, against the double-precision plain-loop references in tests/common/reference_ops.h, over shapes
// covering stride 1 and 2, SAME and VALID, odd sizes, groups 1 and 2, batch 1 and 3. Outputs carry guard
// elements after their end that must survive (no overrun); NaN/Inf fail explicitly. A second call with the
// same descriptor must not grow the primitive cache.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "common/close_values.h"
#include "common/reference_ops.h"
#include "src/backend/cpu/cpu_backend.h"
#include "terngrad/backend/ternary_codec.h"

namespace tg {
namespace {

using ref::Vec;

constexpr int kGuard = 16;
constexpr float kGuardValue = -12345.625f;

// A host f32 tensor followed by kGuard guard elements.
struct HostF32 {
  std::vector<float> storage;
  Tensor t;
  HostF32(const Shape& s, const Vec& values = {}) : storage(s.numel() + kGuard, kGuardValue) {
    for (size_t i = 0; i < values.size(); ++i) storage[i] = static_cast<float>(values[i]);
    if (values.empty()) std::fill(storage.begin(), storage.begin() + s.numel(), std::nanf(""));  // must be written
    t = Tensor(storage.data(), s, DType::kF32, Device::cpu());
  }
  Vec values() const { return Vec(storage.begin(), storage.begin() + t.numel()); }
  bool guard_intact() const {
    for (int i = 0; i < kGuard; ++i)
      if (storage[t.numel() + i] != kGuardValue) return false;
    return true;
  }
};

Vec random_vec(int64_t n, uint32_t seed, double lo = -1.0, double hi = 1.0) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  Vec v(n);
  // round to float so the reference sees exactly what the backend sees
  for (auto& e : v) e = static_cast<float>(u(gen));
  return v;
}

// |got - want| <= tol * max(1, max |want|) everywhere, no NaN/Inf, guards intact.
void expect_close(const HostF32& got, const Vec& want, const char* what, double tol = 1e-4) {
  ASSERT_TRUE(got.guard_intact()) << what << ": write past the end of the output";
  testing::expect_close_values(got.values(), want, what, tol);
}

// ---- convolution ----------------------------------------------------------------------------------------

struct ConvCase {
  int64_t n, h, w, c, kh, kw, out_c, stride;
  Padding padding;
  int64_t groups;
  bool bias;
};

void PrintTo(const ConvCase& p, std::ostream* os) {
  *os << p.n << "x" << p.h << "x" << p.w << "x" << p.c << " k" << p.kh << "x" << p.kw << " o" << p.out_c << " s"
      << p.stride << " " << padding_name(p.padding) << " g" << p.groups << (p.bias ? " bias" : "");
}

class ConvTest : public ::testing::TestWithParam<ConvCase> {};

TEST_P(ConvTest, ForwardAndBackwardMatchReference) {
  const ConvCase& p = GetParam();
  CpuBackend be(2);
  ConvDesc d = make_conv_desc(p.n, p.h, p.w, p.c, p.kh, p.kw, p.out_c, p.stride, p.padding, p.groups, p.bias);
  Shape xs{d.n, d.h, d.w, d.c}, ws{d.kh, d.kw, d.c / d.groups, d.out_c}, ys{d.n, d.out_h, d.out_w, d.out_c};
  Vec x = random_vec(xs.numel(), 1), w = random_vec(ws.numel(), 2), dy = random_vec(ys.numel(), 4);
  Vec b = p.bias ? random_vec(d.out_c, 3) : Vec{};
  HostF32 tx(xs, x), tw(ws, w), tb(Shape{d.out_c}, b), ty(ys), tdy(ys, dy);
  be.conv2d_forward(d, tx.t, tw.t, p.bias ? tb.t : Tensor(), ty.t);
  expect_close(ty, ref::conv2d_forward(d, x, w, b), "conv y");

  Vec rdx, rdw, rdb;
  ref::conv2d_backward(d, x, w, dy, &rdx, &rdw, &rdb);
  HostF32 tdx(xs), tdw(ws), tdb(Shape{d.out_c});
  be.conv2d_backward(d, tx.t, tw.t, tdy.t, tdx.t, tdw.t, p.bias ? tdb.t : Tensor());
  expect_close(tdx, rdx, "conv dx");
  expect_close(tdw, rdw, "conv dw");
  if (p.bias) expect_close(tdb, rdb, "conv db");

  // Partial requests: only dw (first layer: no dx), only dx.
  HostF32 tdw2(ws), tdx2(xs);
  be.conv2d_backward(d, tx.t, tw.t, tdy.t, Tensor(), tdw2.t, Tensor());
  expect_close(tdw2, rdw, "conv dw alone");
  be.conv2d_backward(d, tx.t, tw.t, tdy.t, tdx2.t, Tensor(), Tensor());
  expect_close(tdx2, rdx, "conv dx alone");
}

TEST_P(ConvTest, SecondCallCreatesNoPrimitive) {
  const ConvCase& p = GetParam();
  CpuBackend be(1);
  ConvDesc d = make_conv_desc(p.n, p.h, p.w, p.c, p.kh, p.kw, p.out_c, p.stride, p.padding, p.groups, p.bias);
  Shape xs{d.n, d.h, d.w, d.c}, ws{d.kh, d.kw, d.c / d.groups, d.out_c}, ys{d.n, d.out_h, d.out_w, d.out_c};
  HostF32 tx(xs, random_vec(xs.numel(), 1)), tw(ws, random_vec(ws.numel(), 2)), tb(Shape{d.out_c}, Vec(d.out_c, 0.5));
  HostF32 ty(ys), tdy(ys, random_vec(ys.numel(), 3)), tdx(xs), tdw(ws), tdb(Shape{d.out_c});
  Tensor b = p.bias ? tb.t : Tensor(), db = p.bias ? tdb.t : Tensor();
  be.conv2d_forward(d, tx.t, tw.t, b, ty.t);
  be.conv2d_backward(d, tx.t, tw.t, tdy.t, tdx.t, tdw.t, db);
  size_t entries = be.cache_size();
  EXPECT_GE(entries, 3u);
  Vec y1 = ty.values(), dw1 = tdw.values();
  be.conv2d_forward(d, tx.t, tw.t, b, ty.t);
  be.conv2d_backward(d, tx.t, tw.t, tdy.t, tdx.t, tdw.t, db);
  EXPECT_EQ(be.cache_size(), entries);
  EXPECT_EQ(ty.values(), y1) << "the cached primitive must give the same result";
  EXPECT_EQ(tdw.values(), dw1);
}

INSTANTIATE_TEST_SUITE_P(Shapes, ConvTest,
                         ::testing::Values(ConvCase{1, 5, 5, 1, 3, 3, 2, 1, Padding::kSame, 1, true},
                                           ConvCase{3, 7, 6, 4, 3, 3, 6, 2, Padding::kSame, 2, true},
                                           ConvCase{2, 9, 9, 3, 5, 5, 4, 2, Padding::kValid, 1, false},
                                           ConvCase{3, 8, 8, 4, 2, 2, 4, 2, Padding::kSame, 2, true},
                                           ConvCase{1, 7, 7, 2, 3, 3, 4, 2, Padding::kSame, 1, true},
                                           ConvCase{2, 6, 5, 6, 1, 1, 6, 1, Padding::kValid, 2, true},
                                           ConvCase{3, 11, 11, 4, 3, 3, 8, 2, Padding::kValid, 2, false},
                                           ConvCase{1, 28, 28, 1, 5, 5, 20, 1, Padding::kSame, 1, true},
                                           ConvCase{3, 14, 14, 20, 5, 5, 50, 1, Padding::kSame, 1, true},
                                           ConvCase{1, 13, 13, 32, 3, 3, 48, 1, Padding::kSame, 2, true},
                                           ConvCase{2, 12, 12, 3, 7, 7, 8, 2, Padding::kSymmetric, 1, false},
                                           ConvCase{2, 9, 10, 4, 3, 3, 6, 2, Padding::kSymmetric, 1, true}));

// ---- pooling ------------------------------------------------------------------------------------------

struct PoolCase {
  PoolKind kind;
  int64_t n, h, w, c, k, stride;
  Padding padding;
};

void PrintTo(const PoolCase& p, std::ostream* os) {
  *os << (p.kind == PoolKind::kMax   ? "max "
          : p.kind == PoolKind::kAvg ? "avg "
                                     : "avg_include_pad ")
      << p.n << "x" << p.h << "x" << p.w << "x" << p.c << " k" << p.k << " s" << p.stride << " "
      << padding_name(p.padding);
}

class PoolTest : public ::testing::TestWithParam<PoolCase> {};

TEST_P(PoolTest, ForwardAndBackwardMatchReference) {
  const PoolCase& p = GetParam();
  CpuBackend be(2);
  PoolDesc d = make_pool_desc(p.kind, p.n, p.h, p.w, p.c, p.k, p.k, p.stride, p.padding);
  Shape xs{d.n, d.h, d.w, d.c}, ys{d.n, d.out_h, d.out_w, d.c};
  Vec x = random_vec(xs.numel(), 11), dy = random_vec(ys.numel(), 12);
  size_t ws_bytes = be.pool_workspace_bytes(d);
  if (p.kind == PoolKind::kMax) {
    EXPECT_GT(ws_bytes, 0u) << "max pooling needs its arg-max workspace";
  }
  std::vector<uint8_t> ws(ws_bytes + 1);
  Tensor tws =
      ws_bytes ? Tensor(ws.data(), Shape{static_cast<int64_t>(ws_bytes)}, DType::kU8, Device::cpu()) : Tensor();
  HostF32 tx(xs, x), ty(ys), tdy(ys, dy), tdx(xs);
  be.pool_forward(d, tx.t, ty.t, tws);
  Vec ry = ref::pool_forward(d, x);
  expect_close(ty, ry, "pool y", 1e-6);
  be.pool_backward(d, tx.t, ty.t, tdy.t, tws, tdx.t);
  expect_close(tdx, ref::pool_backward(d, x, dy), "pool dx", 1e-6);

  // Inference forward without workspace gives the same output.
  HostF32 ty2(ys);
  be.pool_forward(d, tx.t, ty2.t, Tensor());
  expect_close(ty2, ry, "pool y (inference)", 1e-6);

  size_t entries = be.cache_size();
  be.pool_forward(d, tx.t, ty.t, tws);
  be.pool_backward(d, tx.t, ty.t, tdy.t, tws, tdx.t);
  EXPECT_EQ(be.cache_size(), entries);
}

INSTANTIATE_TEST_SUITE_P(Shapes, PoolTest,
                         ::testing::Values(PoolCase{PoolKind::kMax, 1, 28, 28, 3, 2, 2, Padding::kSame},
                                           PoolCase{PoolKind::kMax, 3, 7, 7, 4, 2, 2, Padding::kSame},
                                           PoolCase{PoolKind::kMax, 3, 7, 7, 4, 3, 2, Padding::kSame},
                                           PoolCase{PoolKind::kMax, 1, 9, 8, 5, 3, 2, Padding::kValid},
                                           PoolCase{PoolKind::kMax, 3, 6, 6, 2, 3, 1, Padding::kSame},
                                           PoolCase{PoolKind::kAvg, 3, 7, 7, 4, 3, 2, Padding::kSame},
                                           PoolCase{PoolKind::kAvg, 1, 8, 9, 3, 2, 2, Padding::kValid},
                                           PoolCase{PoolKind::kMax, 2, 8, 8, 3, 3, 2, Padding::kSymmetric},
                                           PoolCase{PoolKind::kAvg, 2, 8, 7, 3, 3, 2, Padding::kSymmetric},
                                           PoolCase{PoolKind::kAvgIncludePad, 2, 8, 7, 3, 3, 2, Padding::kSymmetric},
                                           PoolCase{PoolKind::kAvgIncludePad, 3, 7, 7, 4, 3, 1, Padding::kSymmetric},
                                           PoolCase{PoolKind::kAvg, 3, 5, 5, 2, 3, 1, Padding::kSame},
                                           PoolCase{PoolKind::kAvg, 1, 8, 8, 16, 8, 1, Padding::kValid}));

// ---- LRN ----------------------------------------------------------------------------------------------

struct LrnCase {
  int64_t n, h, w, c, radius;
  float bias, alpha, beta;
};

void PrintTo(const LrnCase& p, std::ostream* os) {
  *os << p.n << "x" << p.h << "x" << p.w << "x" << p.c << " r" << p.radius << " bias " << p.bias << " alpha " << p.alpha
      << " beta " << p.beta;
}

class LrnTest : public ::testing::TestWithParam<LrnCase> {};

TEST_P(LrnTest, ForwardAndBackwardMatchReference) {
  const LrnCase& p = GetParam();
  CpuBackend be(2);
  LrnDesc d;
  d.n = p.n, d.h = p.h, d.w = p.w, d.c = p.c, d.depth_radius = p.radius, d.bias = p.bias, d.alpha = p.alpha,
  d.beta = p.beta;
  Shape xs{d.n, d.h, d.w, d.c};
  Vec x = random_vec(xs.numel(), 21, -2.0, 2.0), dy = random_vec(xs.numel(), 22);
  size_t ws_bytes = be.lrn_workspace_bytes(d);
  std::vector<uint8_t> ws(ws_bytes + 1);
  Tensor tws =
      ws_bytes ? Tensor(ws.data(), Shape{static_cast<int64_t>(ws_bytes)}, DType::kU8, Device::cpu()) : Tensor();
  HostF32 tx(xs, x), ty(xs), tdy(xs, dy), tdx(xs);
  be.lrn_forward(d, tx.t, ty.t, tws);
  Vec ry = ref::lrn_forward(d, x);
  expect_close(ty, ry, "lrn y");
  be.lrn_backward(d, tx.t, tdy.t, tws, tdx.t);
  expect_close(tdx, ref::lrn_backward(d, x, dy), "lrn dx");
  // The normalization must matter in these cases, or the test would not see a wrong alpha convention.
  double change = 0;
  for (size_t i = 0; i < x.size(); ++i) change = std::max(change, std::fabs(ry[i] - x[i] * std::pow(p.bias, -p.beta)));
  EXPECT_GT(change, 1e-2);

  size_t entries = be.cache_size();
  be.lrn_forward(d, tx.t, ty.t, tws);
  be.lrn_backward(d, tx.t, tdy.t, tws, tdx.t);
  EXPECT_EQ(be.cache_size(), entries);
}

INSTANTIATE_TEST_SUITE_P(Shapes, LrnTest,
                         ::testing::Values(LrnCase{2, 3, 3, 7, 2, 1.f, 0.1f, 0.75f},
                                           LrnCase{1, 4, 4, 64, 4, 1.f, 0.01f, 0.75f},
                                           LrnCase{3, 2, 2, 5, 5, 2.f, 0.2f, 0.75f},
                                           LrnCase{1, 3, 5, 16, 2, 2.f, 0.05f, 0.5f},
                                           LrnCase{3, 5, 3, 48, 1, 1.f, 0.3f, 1.f},
                                           LrnCase{2, 3, 2, 37, 3, 2.f, 0.05f, 0.6f},   // beta by pow
                                           LrnCase{2, 2, 3, 1, 2, 1.f, 0.5f, 0.75f},    // one channel
                                           LrnCase{1, 3, 3, 3, 6, 1.f, 0.2f, 0.75f}));  // window > C

// The LRN backward's own loops: the same bits on every vector path (generic, AVX2, AVX-512, as far as this CPU
// has them) and every thread count, with and without a leftover shorter than a vector.
TEST(LrnBackward, SameBitsOnEveryPathAndThreadCount) {
  for (const LrnCase& p : {LrnCase{3, 7, 5, 48, 2, 2.f, 1e-2f, 0.75f}, LrnCase{2, 5, 3, 37, 3, 1.f, 0.03f, 0.6f},
                           LrnCase{2, 4, 4, 19, 1, 1.f, 0.1f, 0.5f}}) {
    SCOPED_TRACE(::testing::PrintToString(p));
    LrnDesc d;
    d.n = p.n, d.h = p.h, d.w = p.w, d.c = p.c, d.depth_radius = p.radius, d.bias = p.bias, d.alpha = p.alpha,
    d.beta = p.beta;
    Shape xs{d.n, d.h, d.w, d.c};
    Vec x = random_vec(xs.numel(), 31, -3.0, 3.0), dy = random_vec(xs.numel(), 32);
    HostF32 tx(xs, x), tdy(xs, dy);
    std::vector<float> first;
    for (CodecIsa isa : {CodecIsa::kGeneric, CodecIsa::kAvx2, CodecIsa::kAvx512}) {
      const CodecIsa used = set_ternary_codec_isa(isa);
      for (int threads : {1, 2}) {
        CpuBackend be(threads);
        HostF32 tdx(xs);
        be.lrn_backward(d, tx.t, tdy.t, Tensor(), tdx.t);
        ASSERT_TRUE(tdx.guard_intact());
        std::vector<float> got(tdx.storage.begin(), tdx.storage.begin() + xs.numel());
        if (first.empty()) {
          first = got;
          expect_close(tdx, ref::lrn_backward(d, x, dy), "lrn dx");
        } else {
          EXPECT_EQ(0, std::memcmp(got.data(), first.data(), got.size() * sizeof(float)))
              << "path " << enum_name(used) << ", " << threads << " threads";
        }
      }
    }
    set_ternary_codec_isa(CodecIsa::kAuto);
  }
}

// ---- batch norm ---------------------------------------------------------------------------------------

struct BnCase {
  int64_t rows, c;
  bool gamma;
  float epsilon;
};

void PrintTo(const BnCase& p, std::ostream* os) {
  *os << p.rows << "x" << p.c << (p.gamma ? " gamma" : " beta-only") << " eps " << p.epsilon;
}

class BatchNormTest : public ::testing::TestWithParam<BnCase> {};

TEST_P(BatchNormTest, TrainingInferenceAndBackwardMatchReference) {
  const BnCase& p = GetParam();
  CpuBackend be(2);
  BatchNormDesc d;
  d.rows = p.rows, d.c = p.c, d.epsilon = p.epsilon, d.has_gamma = p.gamma;
  Shape xs{d.rows, d.c}, cs{d.c};
  Vec x = random_vec(xs.numel(), 31, -1.0, 3.0), dy = random_vec(xs.numel(), 32);
  Vec gamma = p.gamma ? random_vec(d.c, 33, 0.5, 1.5) : Vec{}, beta = random_vec(d.c, 34);
  HostF32 tx(xs, x), tg(cs, gamma), tb(cs, beta), ty(xs), tmean(cs), tvar(cs);
  Tensor g = p.gamma ? tg.t : Tensor();
  be.batch_norm_forward_training(d, tx.t, g, tb.t, ty.t, tmean.t, tvar.t);
  Vec rmean, rvar;
  Vec ry = ref::batch_norm_forward_training(d, x, gamma, beta, &rmean, &rvar);
  expect_close(ty, ry, "bn y (training)");
  expect_close(tmean, rmean, "bn batch mean");
  expect_close(tvar, rvar, "bn batch variance (population)");

  // Inference with given statistics (deliberately not the batch's).
  Vec mmean = random_vec(d.c, 35), mvar = random_vec(d.c, 36, 0.5, 2.0);
  HostF32 tmm(cs, mmean), tmv(cs, mvar), ty2(xs);
  be.batch_norm_forward_inference(d, tx.t, g, tb.t, tmm.t, tmv.t, ty2.t);
  expect_close(ty2, ref::batch_norm_forward_inference(d, x, gamma, beta, mmean, mvar), "bn y (inference)");

  Vec rdx, rdg, rdb;
  ref::batch_norm_backward(d, x, gamma, rmean, rvar, dy, &rdx, &rdg, &rdb);
  HostF32 tdy(xs, dy), tdx(xs), tdg(cs), tdb(cs);
  be.batch_norm_backward(d, tx.t, g, tmean.t, tvar.t, tdy.t, tdx.t, p.gamma ? tdg.t : Tensor(), tdb.t);
  expect_close(tdx, rdx, "bn dx");
  expect_close(tdb, rdb, "bn dbeta");
  if (p.gamma) expect_close(tdg, rdg, "bn dgamma");

  size_t entries = be.cache_size();
  be.batch_norm_forward_training(d, tx.t, g, tb.t, ty.t, tmean.t, tvar.t);
  be.batch_norm_forward_inference(d, tx.t, g, tb.t, tmm.t, tmv.t, ty2.t);
  be.batch_norm_backward(d, tx.t, g, tmean.t, tvar.t, tdy.t, tdx.t, p.gamma ? tdg.t : Tensor(), tdb.t);
  EXPECT_EQ(be.cache_size(), entries);
}

INSTANTIATE_TEST_SUITE_P(Shapes, BatchNormTest,
                         ::testing::Values(BnCase{6, 3, false, 0.001f}, BnCase{6, 3, true, 0.001f},
                                           BnCase{48, 16, true, 1e-5f}, BnCase{3 * 5 * 5, 20, false, 0.001f},
                                           BnCase{2, 7, true, 0.1f}, BnCase{1 * 7 * 7, 33, true, 0.001f}));

// ---- inner product ------------------------------------------------------------------------------------

struct IpCase {
  int64_t n, in, out;
  bool bias;
};

void PrintTo(const IpCase& p, std::ostream* os) {
  *os << p.n << "x" << p.in << "->" << p.out << (p.bias ? " bias" : "");
}

class InnerProductTest : public ::testing::TestWithParam<IpCase> {};

TEST_P(InnerProductTest, ForwardAndBackwardMatchReference) {
  const IpCase& p = GetParam();
  CpuBackend be(2);
  InnerProductDesc d;
  d.n = p.n, d.in = p.in, d.out = p.out, d.has_bias = p.bias;
  Shape xs{d.n, d.in}, ws{d.in, d.out}, ys{d.n, d.out};
  Vec x = random_vec(xs.numel(), 41), w = random_vec(ws.numel(), 42), dy = random_vec(ys.numel(), 44);
  Vec b = p.bias ? random_vec(d.out, 43) : Vec{};
  HostF32 tx(xs, x), tw(ws, w), tb(Shape{d.out}, b), ty(ys), tdy(ys, dy), tdx(xs), tdw(ws), tdb(Shape{d.out});
  be.inner_product_forward(d, tx.t, tw.t, p.bias ? tb.t : Tensor(), ty.t);
  expect_close(ty, ref::inner_product_forward(d, x, w, b), "ip y");
  Vec rdx, rdw, rdb;
  ref::inner_product_backward(d, x, w, dy, &rdx, &rdw, &rdb);
  be.inner_product_backward(d, tx.t, tw.t, tdy.t, tdx.t, tdw.t, p.bias ? tdb.t : Tensor());
  expect_close(tdx, rdx, "ip dx");
  expect_close(tdw, rdw, "ip dw");
  if (p.bias) expect_close(tdb, rdb, "ip db");
  // Only the bias gradient (the weight gradient goes to the cache's scratch).
  if (p.bias) {
    HostF32 tdb2(Shape{d.out});
    be.inner_product_backward(d, tx.t, tw.t, tdy.t, Tensor(), Tensor(), tdb2.t);
    expect_close(tdb2, rdb, "ip db alone");
  }
  size_t entries = be.cache_size();
  be.inner_product_forward(d, tx.t, tw.t, p.bias ? tb.t : Tensor(), ty.t);
  be.inner_product_backward(d, tx.t, tw.t, tdy.t, tdx.t, tdw.t, p.bias ? tdb.t : Tensor());
  EXPECT_EQ(be.cache_size(), entries);
}

INSTANTIATE_TEST_SUITE_P(Shapes, InnerProductTest,
                         ::testing::Values(IpCase{1, 5, 3, true}, IpCase{3, 17, 9, false}, IpCase{3, 64, 10, true},
                                           IpCase{64, 2450, 500, true}, IpCase{2, 1, 1, true}));

// ---- errors -------------------------------------------------------------------------------------------

TEST(CpuOpsErrors, WrongTensorSizeIsAClearError) {
  CpuBackend be(1);
  ConvDesc d = make_conv_desc(1, 5, 5, 2, 3, 3, 4, 1, Padding::kSame, 1, false);
  HostF32 x(Shape{1, 5, 5, 2}, Vec(50, 1.0)), w(Shape{3, 3, 2, 3}, Vec(54, 1.0)), y(Shape{1, 5, 5, 4});
  try {
    be.conv2d_forward(d, x.t, w.t, Tensor(), y.t);
    FAIL() << "a weight tensor of the wrong size was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("conv2d_forward"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("`w`"), std::string::npos) << e.what();
  }
}

// The Backend front checks every call once, before the backend runs it: a tensor of another device, a wrong
// dtype or element count is an error naming the op and the argument.
TEST(CpuOpsErrors, TheBackendFrontRefusesForeignDevicesAndMismatchedTensors) {
  CpuBackend be(1);
  HostF32 a(Shape{8}, Vec(8, 1.0)), b(Shape{8}, Vec(8, 2.0)), out(Shape{8}), short_out(Shape{7});
  Tensor on_gpu(a.t.raw(), Shape{8}, DType::kF32, Device::cuda(0));
  auto expect_error = [](const std::function<void()>& call, const std::vector<std::string>& words) {
    try {
      call();
      ADD_FAILURE() << "accepted: " << words[0];
    } catch (const Error& e) {
      for (const auto& w : words) EXPECT_NE(std::string(e.what()).find(w), std::string::npos) << e.what();
    }
  };
  expect_error([&] { be.add(on_gpu, b.t, out.t); }, {"add", "cuda:0", "a"});
  expect_error([&] { be.add(a.t, b.t, short_out.t); }, {"add", "7 elements"});
  expect_error([&] { be.axpy(2.f, a.t, short_out.t); }, {"axpy"});
  expect_error([&] { be.ema_update(0.9f, a.t, on_gpu); }, {"ema_update", "ema"});
  std::vector<int32_t> ints(8);
  expect_error([&] { be.sum(Tensor(ints.data(), Shape{8}, DType::kI32, Device::cpu())); }, {"sum", "f32"});
  be.add(a.t, b.t, out.t);  // and a correct call still runs
  EXPECT_EQ(static_cast<const float*>(out.t.raw())[7], 3.f);
}

// Batch norm's shapes are the front's (the same checks for every backend): an empty descriptor, x of another size,
// gamma given to a descriptor without one (or missing from one with it), a statistic or gradient of another size, a
// required tensor missing, dgamma without gamma: each an error naming the op and the tensor; nothing is written.
TEST(CpuOpsErrors, BatchNormShapesAreCheckedInTheFront) {
  CpuBackend be(1);
  BatchNormDesc d;
  d.rows = 6, d.c = 4, d.epsilon = 1e-3f, d.has_gamma = false;
  HostF32 x(Shape{6, 4}, random_vec(24, 41)), y(Shape{6, 4}), dy(Shape{6, 4}, random_vec(24, 42)), dx(Shape{6, 4}),
      beta(Shape{4}, random_vec(4, 43)), gamma(Shape{4}, Vec(4, 1.0)), mean(Shape{4}), var(Shape{4}, Vec(4, 1.0)),
      short_x(Shape{5, 4}), short_c(Shape{3}), dgamma(Shape{4});
  auto expect_error = [](const std::function<void()>& call, const std::vector<std::string>& words) {
    try {
      call();
      ADD_FAILURE() << "accepted: " << words.back();
    } catch (const Error& e) {
      for (const auto& w : words) EXPECT_NE(std::string(e.what()).find(w), std::string::npos) << e.what();
    }
  };
  const float* py = static_cast<const float*>(y.t.raw());
  const std::vector<float> y_before(py, py + 24);
  BatchNormDesc empty = d;
  empty.rows = 0;
  expect_error([&] { be.batch_norm_forward_training(empty, x.t, Tensor(), beta.t, y.t, mean.t, var.t); },
               {"batch_norm_forward_training", "empty"});
  expect_error([&] { be.batch_norm_forward_training(d, short_x.t, Tensor(), beta.t, y.t, mean.t, var.t); },
               {"batch_norm_forward_training", "x", "6 x 4"});
  expect_error([&] { be.batch_norm_forward_training(d, x.t, gamma.t, beta.t, y.t, mean.t, var.t); },
               {"batch_norm_forward_training", "without gamma"});
  BatchNormDesc with_gamma = d;
  with_gamma.has_gamma = true;
  expect_error([&] { be.batch_norm_forward_training(with_gamma, x.t, Tensor(), beta.t, y.t, mean.t, var.t); },
               {"batch_norm_forward_training", "gamma"});
  expect_error([&] { be.batch_norm_forward_inference(d, x.t, Tensor(), beta.t, short_c.t, var.t, y.t); },
               {"batch_norm_forward_inference", "mean", "4 elements"});
  expect_error([&] { be.batch_norm_forward_inference(d, x.t, Tensor(), Tensor(), mean.t, var.t, y.t); },
               {"batch_norm_forward_inference", "`beta` is undefined"});
  expect_error([&] { be.batch_norm_backward(d, x.t, Tensor(), mean.t, var.t, short_x.t, dx.t, Tensor(), Tensor()); },
               {"batch_norm_backward", "dy"});
  expect_error([&] { be.batch_norm_backward(d, x.t, Tensor(), mean.t, var.t, dy.t, dx.t, dgamma.t, Tensor()); },
               {"batch_norm_backward", "dgamma", "without gamma"});
  EXPECT_EQ(std::memcmp(py, y_before.data(), 24 * sizeof(float)), 0) << "a refused call wrote y";
  be.batch_norm_forward_training(d, x.t, Tensor(), beta.t, y.t, mean.t, var.t);  // a correct call still runs
  be.batch_norm_backward(d, x.t, Tensor(), mean.t, var.t, dy.t, Tensor(), Tensor(), beta.t);
}

// max_abs propagates a NaN wherever it is, also when finite values follow it (the CUDA backend does too).
TEST(CpuOpsReductions, MaxAbsPropagatesNaN) {
  CpuBackend be(1);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const Vec& v : {Vec{nan, 1.0, 2.0}, Vec{1.0, nan, -3.0}, Vec{-4.0, 2.0, nan}, Vec{nan}}) {
    HostF32 x(Shape{static_cast<int64_t>(v.size())}, v);
    EXPECT_TRUE(std::isnan(be.max_abs(x.t))) << v[0] << " " << v.back();
  }
  HostF32 finite(Shape{3}, Vec{1.0, -5.0, 2.0});
  EXPECT_EQ(be.max_abs(finite.t), 5.f);
}

// ReLU passes a NaN on (as TF's relu does: max(NaN, 0) is NaN), so a diverging run reaches the non-finite-loss
// check instead of hiding behind zeros; +-Inf are clipped or kept as max(x, 0) says; the backward passes dy where
// y > 0 (a NaN y passes nothing, the NaN itself flows on forward). Every vector width and tail.
TEST(CpuOpsElementwise, ReluPropagatesNaN) {
  CpuBackend be(1);
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (int64_t n : {1, 7, 8, 9, 16, 17, 33, 1001}) {
    Vec v(static_cast<size_t>(n), -1.0);
    for (int64_t i = 0; i < n; ++i) v[i] = (i % 4 == 0) ? nan : (i % 4 == 1 ? -inf : (i % 4 == 2 ? inf : 0.5 - i));
    HostF32 x(Shape{n}, v), y(Shape{n}, Vec(static_cast<size_t>(n), 7.0));
    be.relu_forward(x.t, y.t);
    const float* out = y.t.data<float>();
    for (int64_t i = 0; i < n; ++i) {
      if (i % 4 == 0) {
        EXPECT_TRUE(std::isnan(out[i])) << "n " << n << " element " << i;
      } else {
        EXPECT_EQ(out[i], std::max(static_cast<float>(v[i]), 0.f)) << "n " << n << " element " << i;
      }
    }
    HostF32 dy(Shape{n}, Vec(static_cast<size_t>(n), 2.0)), dx(Shape{n}, Vec(static_cast<size_t>(n), 7.0));
    be.relu_backward(y.t, dy.t, dx.t);
    for (int64_t i = 0; i < n; ++i)
      EXPECT_EQ(dx.t.data<float>()[i], out[i] > 0.f ? 2.f : 0.f) << "n " << n << " element " << i;
  }
}

TEST(CpuOpsErrors, MaxPoolBackwardWithoutWorkspaceIsAnError) {
  CpuBackend be(1);
  PoolDesc d = make_pool_desc(PoolKind::kMax, 1, 4, 4, 1, 2, 2, 2, Padding::kValid);
  HostF32 x(Shape{1, 4, 4, 1}, random_vec(16, 1)), y(Shape{1, 2, 2, 1}, Vec(4, 0.0)),
      dy(Shape{1, 2, 2, 1}, Vec(4, 1.0));
  HostF32 dx(Shape{1, 4, 4, 1});
  EXPECT_THROW(be.pool_backward(d, x.t, y.t, dy.t, Tensor(), dx.t), Error);
}

// ---- linear algebra (PowerSGD's products and orthogonalization) ----------------------------------------------

TEST(CpuLinalg, MatmulEveryTransposeAndBetaMatchesReference) {
  CpuBackend be(2);
  const int64_t m = 37, k = 1029, n = 5;  // a tall product like PowerSGD's P = M^T Q
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (double beta : {0.0, 1.0, 0.5}) {
        const Vec av = random_vec(m * k, 11), bv = random_vec(k * n, 12), cv = random_vec(m * n, 13);
        HostF32 a(ta ? Shape{k, m} : Shape{m, k}, av), b(tb ? Shape{n, k} : Shape{k, n}, bv);
        // beta 0 must not read c: NaN there (HostF32 without values) must not propagate.
        HostF32 c = beta == 0.0 ? HostF32(Shape{m, n}) : HostF32(Shape{m, n}, cv);
        be.matmul(a.t, ta, b.t, tb, static_cast<float>(beta), c.t);
        const Vec want = ref::matmul(av, a.t.shape()[0], a.t.shape()[1], ta, bv, b.t.shape()[0], b.t.shape()[1], tb,
                                     beta, beta == 0.0 ? Vec() : cv);
        expect_close(c, want, ta ? (tb ? "matmul TT" : "matmul TN") : (tb ? "matmul NT" : "matmul NN"), 1e-5);
      }
}

TEST(CpuLinalg, MatmulRefusesMismatchedShapesAndAliasing) {
  CpuBackend be(1);
  HostF32 a(Shape{4, 3}, random_vec(12, 1)), b(Shape{3, 2}, random_vec(6, 2)), c(Shape{4, 2});
  be.matmul(a.t, false, b.t, false, 0.f, c.t);
  HostF32 wrong(Shape{3, 2});
  EXPECT_THROW(be.matmul(a.t, false, b.t, false, 0.f, wrong.t), Error);  // c must be 4x2
  EXPECT_THROW(be.matmul(a.t, true, b.t, false, 0.f, c.t), Error);       // inner sizes 4 vs 3
  EXPECT_THROW(be.matmul(a.t, false, b.t, false, 0.f, a.t.reshaped(Shape{6, 2}).slice0(0, 4)), Error);  // aliasing
  EXPECT_THROW(be.matmul(a.t.reshaped(Shape{12}), false, b.t, false, 0.f, c.t), Error);                 // rank 1
}

TEST(CpuLinalg, OrthogonalizeColumnsMatchesReferenceAndIsOrthonormal) {
  CpuBackend be(2);
  for (int64_t cols : {1, 2, 4}) {
    const int64_t rows = 777;
    Vec v = random_vec(rows * cols, 20 + static_cast<uint32_t>(cols));
    if (cols == 4)
      for (int64_t r = 0; r < rows; ++r) v[r * cols + 2] = 0.0;  // a zero column stays zero, no NaN
    HostF32 p(Shape{rows, cols}, v);
    be.orthogonalize_columns(p.t, 0.f);
    const Vec want = ref::orthogonalize_columns(v, rows, cols, 0.0);
    expect_close(p, want, "orthogonalize_columns", 1e-5);
    const Vec got = p.values();
    for (int64_t i = 0; i < cols; ++i)
      for (int64_t j = i; j < cols; ++j) {
        double dot = 0;
        for (int64_t r = 0; r < rows; ++r) dot += got[r * cols + i] * got[r * cols + j];
        const bool zero = cols == 4 && (i == 2 || j == 2);
        EXPECT_NEAR(dot, zero ? 0.0 : (i == j ? 1.0 : 0.0), 1e-5) << cols << " columns: " << i << "." << j;
      }
  }
  HostF32 wide(Shape{2, 3}, random_vec(6, 3));
  EXPECT_THROW(be.orthogonalize_columns(wide.t, 0.f), Error);  // more columns than rows
}

}  // namespace
}  // namespace tg
