// The CUDA backend's own checks, on random inputs against the CPU backend (the oracle): every output pre-filled with
// NaN (so an unwritten element fails) and followed by guard bytes that must survive. The ops' outputs against the CPU
// are rows of the backend ops table (backend_ops_table_test.cc; the layer ops, concatenation, linear algebra, loss and
// optimizer rows in tests/common/layer_op_rows.cc); what stays here is what only the CUDA backend has: the factory, the
// side stream's ordering, the element-wise kernels' vector and element paths at every alignment, dropout's masks (a
// real Bernoulli draw), a bad label reported at the next synchronisation, the convolutions' caches, workspace and
// algorithm choice, the exact population variance and batch norm's parameter gradients without dx.
//
// Without a CUDA build or without a device every test reports SKIPPED with the reason, except the factory's
// error message check, which is exactly the no-device case. A device fault (an illegal address in a kernel)
// is sticky: every later CUDA call of the process fails with it. The fixture synchronizes after each test,
// reports such a fault once, in the test that caused it, and skips the following tests naming that test.
// (TG_CUDA_SYNC=1 makes the failing test's message name the launcher too.)
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "common/cuda_test_fixture.h"
#include "common/op_case.h"
#include "terngrad/backend/calling_thread.h"

namespace tg {
namespace {

using namespace cuda_test;  // NOLINT: the fixture and its helpers

// ---- factory --------------------------------------------------------------------------------------------
TEST(CudaBackendFactory, MissingDeviceIsAClearError) {
  if (!cuda_backend_compiled()) GTEST_SKIP() << backends().skip;
  if (backends().cuda) GTEST_SKIP() << "a CUDA device is present: the no-device message cannot be observed";
  try {
    make_backend("cuda");
    FAIL() << "make_backend(\"cuda\") succeeded without a device";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--device cuda: no CUDA device is available (cudaGetDeviceCount: "),
              std::string::npos)
        << e.what();
  }
}

// The device of a thread that is not a replica's (calling_thread.h): nothing for the CPU; a bad name, an index the
// machine lacks and a machine without a GPU are errors naming them; on a GPU machine cuda:0 binds.
TEST(CallingThreadDevice, BindsOnlyToADeviceThatExists) {
  EXPECT_NO_THROW(bind_calling_thread_to("cpu"));
  EXPECT_THROW(bind_calling_thread_to("tpu"), Error);
  EXPECT_THROW(bind_calling_thread_to("cuda:x"), Error);
  if (!cuda_backend_compiled() || !backends().cuda) {
    try {
      bind_calling_thread_to("cuda:0");
      FAIL() << "bound to cuda:0 without a CUDA device";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--device cuda"), std::string::npos) << e.what();
    }
    return;
  }
  EXPECT_NO_THROW(bind_calling_thread_to("cuda:0"));
  try {
    bind_calling_thread_to("cuda:999");
    FAIL() << "cuda:999 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cuda:999"), std::string::npos) << e.what();
  }
}

TEST_F(CudaBackendTest, FactoryRejectsOutOfRangeIndex) {
  try {
    make_backend("cuda:999");
    FAIL() << "cuda:999 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cuda:999"), std::string::npos) << e.what();
  }
  EXPECT_EQ(gpu().device(), Device::cuda(0));
  EXPECT_NE(gpu().name().find("cuda:0"), std::string::npos) << gpu().name();
}

// ---- memory ---------------------------------------------------------------------------------------------
TEST_F(CudaBackendTest, CopyZeroFill) {
  const Shape s{3, 5, 7, 11};
  auto v = random_floats(s.numel(), 1);
  Pair a(s), b(s);
  a.set(v);                  // host -> device (and host -> host)
  cpu().copy(b.c.t, a.c.t);  // device -> device
  gpu().copy(b.g.t, a.g.t);
  expect_same_bits(b, "copy");
  EXPECT_EQ(b.g.read<float>(), v);  // device -> host
  cpu().zero(a.c.t), gpu().zero(a.g.t);
  expect_same_bits(a, "zero");
  cpu().fill(b.c.t, -2.5f), gpu().fill(b.g.t, -2.5f);
  expect_same_bits(b, "fill");
  EXPECT_EQ(b.g.read<float>()[17], -2.5f);
}

// The side stream (the gradient exchange beside backward, Backend::enter_side_stream): ops entered there see what the
// main stream did before (the fork event), the main stream goes on beside them, and after join_side_stream the main
// stream sees their results; each stream's own workspace (the ternary scaler's partial sums, on both streams at
// once) gives the CPU's bits. Bad nesting is an error naming the device.
TEST_F(CudaBackendTest, SideStreamOrdersItsOpsWithTheMainStream) {
  const Shape s{1 << 22};  // 4 Mi elements: kernels long enough to run side by side
  Pair a(s), b(s), c(s), e(s), out(s), g1(s), g2(s), sc1(Shape{1}), sc2(Shape{1});
  a.set(random_floats(s.numel(), 41)), b.set(random_floats(s.numel(), 42)), e.set(random_floats(s.numel(), 45));
  g1.set(random_floats(s.numel(), 43, -0.01f, 0.01f)), g2.set(random_floats(s.numel(), 44, -0.02f, 0.02f));
  ASSERT_TRUE(gpu().has_side_stream());
  void* main_stream = gpu().native_stream();
  for (int k = 0; k < 8; ++k) cpu().scale(1.01f, a.c.t), gpu().scale(1.01f, a.g.t);  // main: before the fork
  gpu().enter_side_stream();
  EXPECT_NE(gpu().native_stream(), main_stream);
  gpu().copy(c.g.t, a.g.t);  // side: must read the scaled a
  gpu().axpy(2.f, b.g.t, c.g.t);
  gpu().ternary_scaler(g1.g.t, 2.5f, sc1.g.t);
  gpu().leave_side_stream();
  EXPECT_EQ(gpu().native_stream(), main_stream);
  gpu().ternary_scaler(g2.g.t, 2.5f, sc2.g.t);           // main, beside the side stream's scaler: its own workspace
  for (int k = 0; k < 4; ++k) gpu().scale(0.5f, e.g.t);  // main: a tensor the side stream does not touch
  gpu().join_side_stream();
  gpu().add(c.g.t, a.g.t, out.g.t);  // main: after the join, sees c
  cpu().copy(c.c.t, a.c.t);
  cpu().axpy(2.f, b.c.t, c.c.t);
  cpu().ternary_scaler(g1.c.t, 2.5f, sc1.c.t);
  cpu().ternary_scaler(g2.c.t, 2.5f, sc2.c.t);
  for (int k = 0; k < 4; ++k) cpu().scale(0.5f, e.c.t);
  cpu().add(c.c.t, a.c.t, out.c.t);
  expect_same_bits(e, "main beside the side stream");
  expect_same_bits(out, "main after the join");
  expect_same_bits(sc1, "the side stream's scaler");
  expect_same_bits(sc2, "the main stream's scaler beside it");
  try {
    gpu().leave_side_stream();
    FAIL() << "leave_side_stream() without enter accepted";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("cuda:0"), std::string::npos) << err.what();
  }
  gpu().enter_side_stream();
  EXPECT_THROW(gpu().enter_side_stream(), Error);
  gpu().leave_side_stream();
  // Device marks (the timeline's side-stream spans): on the host's clock, in order, around the work between them.
  const auto before = Backend::MarkClock::now();
  const uint64_t m0 = gpu().record_mark();
  for (int k = 0; k < 8; ++k) gpu().scale(1.01f, a.g.t);
  const uint64_t m1 = gpu().record_mark();
  gpu().synchronize();
  const auto after = Backend::MarkClock::now();
  const auto t0 = gpu().mark_time(m0), t1 = gpu().mark_time(m1);
  ASSERT_TRUE(t0 && t1);
  EXPECT_LT(*t0, *t1);
  EXPECT_GT(*t0, before - std::chrono::milliseconds(1));  // the clocks' mapping: well within a millisecond
  EXPECT_LT(*t1, after + std::chrono::milliseconds(1));
  EXPECT_FALSE(gpu().mark_time(m1 + 1000));  // never recorded
}

// ---- element-wise (add, axpy, scale, ReLU with NaN and Inf, reductions: tests/backend_ops_table_test.cc) ----
// The element-wise and cast kernels move 16 bytes per thread when every pointer is 16-byte aligned and one element
// otherwise, with a tail of n % width elements: every offset (0..8 elements into a buffer) and size (1..33, 1001),
// in each compute dtype, gives the CPU's bits.
TEST_F(CudaBackendTest, VectorAndElementPathsAreBitIdentical) {
  const int64_t kMax = 1001 + 8;
  for (DType t : {DType::kF32, DType::kF16, DType::kBf16}) {
    if (!gpu().supports_compute(t)) continue;
    Pair a(Shape{kMax}, t), b(Shape{kMax}, t), out(Shape{kMax}, t), f32(Shape{kMax}), mask(Shape{kMax}, DType::kU8);
    std::vector<float> va = random_floats(kMax, 21, -3.f, 3.f), vb = random_floats(kMax, 22);
    f32.set(va);
    cpu().cast(a.c.t, f32.c.t), gpu().cast(a.g.t, f32.g.t);
    f32.set(vb);
    cpu().cast(b.c.t, f32.c.t), gpu().cast(b.g.t, f32.g.t);
    expect_same_bits(a, "cast f32 -> " + std::string(dtype_name(t)));
    for (int64_t off : {0, 1, 3, 4, 8}) {
      for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{8}, int64_t{9}, int64_t{33}, int64_t{1001}}) {
        const std::string what = fmt::format("{} offset {} n {}", dtype_name(t), off, n);
        auto view = [&](const Mem& m, DType dt) {
          return Tensor(static_cast<char*>(m.t.raw()) + off * dtype_size(dt), Shape{n}, dt, m.t.device());
        };
        struct Side {
          Backend& be;
          Tensor a, b, out, f32, mask;
        };
        Side sides[] = {
            {cpu(), view(a.c, t), view(b.c, t), view(out.c, t), view(f32.c, DType::kF32), view(mask.c, DType::kU8)},
            {gpu(), view(a.g, t), view(b.g, t), view(out.g, t), view(f32.g, DType::kF32), view(mask.g, DType::kU8)}};
        for (Side& x : sides) x.be.add(x.a, x.b, x.out);
        expect_same_bits(out, "add " + what);
        for (Side& x : sides) x.be.relu_forward(x.a, x.out);
        expect_same_bits(out, "relu_forward " + what);
        for (Side& x : sides) x.be.relu_backward(x.a, x.b, x.out);
        expect_same_bits(out, "relu_backward " + what);
        for (Side& x : sides) x.be.cast(x.f32, x.a);
        expect_same_bits(f32, "cast to f32 " + what);
        for (Side& x : sides) x.be.dropout_forward(x.a, x.out, x.mask, 0.7f, philox_key(5, 1), 3, 4);
        expect_same_bits(out, "dropout_forward " + what);
        expect_same_bits(mask, "dropout mask " + what);
      }
    }
  }
}

TEST_F(CudaBackendTest, DropoutMasksAndValuesAreBitIdentical) {
  const Shape s{4, 9, 9, 33};
  for (float keep : {0.5f, 0.9f, 1.0f}) {
    Pair x(s), y(s), mask(s, DType::kU8), dy(s), dx(s);
    x.set(random_floats(s.numel(), 4)), dy.set(random_floats(s.numel(), 5));
    const PhiloxKey key = philox_key(1234, 3);
    cpu().dropout_forward(x.c.t, y.c.t, mask.c.t, keep, key, 17, 2);
    gpu().dropout_forward(x.g.t, y.g.t, mask.g.t, keep, key, 17, 2);
    const std::string what = "dropout keep " + std::to_string(keep);
    expect_same_bits(mask, what + " mask");
    expect_same_bits(y, what + " y");
    auto m = mask.g.read<uint8_t>();
    const double kept = std::count(m.begin(), m.end(), uint8_t{1}) / static_cast<double>(m.size());
    EXPECT_NEAR(kept, keep, 0.02) << what;  // the mask is a real Bernoulli(keep) draw
    cpu().dropout_backward(dy.c.t, mask.c.t, keep, dx.c.t), gpu().dropout_backward(dy.g.t, mask.g.t, keep, dx.g.t);
    expect_same_bits(dx, what + " backward");
  }
}

// ---- loss (the outputs against the CPU: the ops table's softmax_xent rows) ------------------------------------
TEST_F(CudaBackendTest, SoftmaxCrossEntropyRejectsBadLabelNamingTheExample) {
  const int64_t n = 8, k = 5;
  Mem logits(gpu(), Shape{n, k}, DType::kF32), labels(gpu(), Shape{n}, DType::kI32),
      probs(gpu(), Shape{n, k}, DType::kF32), losses(gpu(), Shape{n}, DType::kF32);
  logits.write(random_floats(n * k, 11));
  for (int32_t bad : {5, -1}) {
    std::vector<int32_t> lab = {0, 1, 2, 3, 4, 0, 1, 2};
    lab[6] = bad, lab[7] = 99;  // the first bad example (6) is the one named
    labels.write(lab);
    try {
      // The kernel flags the label; the next host sync (here synchronize()) reports it.
      gpu().softmax_xent_forward(logits.t, labels.t, 0.f, probs.t, losses.t);
      gpu().synchronize();
      FAIL() << "label " << bad << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("label " + std::to_string(bad) + " of example 6 is outside [0, 5)"),
                std::string::npos)
          << e.what();
    }
    EXPECT_THROW(
        {
          gpu().softmax_xent_backward(probs.t, labels.t, 0.f, 1.f, logits.t);
          (void)gpu().sum(losses.t);  // a reduction is a host sync too
        },
        Error);
  }
  // The flag is reset: valid labels work afterwards.
  labels.write(std::vector<int32_t>{0, 1, 2, 3, 4, 0, 1, 2});
  EXPECT_NO_THROW({
    gpu().softmax_xent_forward(logits.t, labels.t, 0.f, probs.t, losses.t);
    gpu().synchronize();
  });
}

// ---- convolution (the outputs against the CPU: the ops table's conv rows) ---------------------------------------
// A second call of the same descriptor neither adds a cache entry nor grows the arena, and gives the CPU's result;
// every direction's algorithm is chosen, deterministic and without TF32.
TEST_F(CudaBackendTest, Conv2dSteadyStateAndAlgorithms) {
  for (const ConvDesc& d : testing::table_conv_descs()) {  // the ops table's convolutions
    const std::string what = d.key();
    const Shape xs{d.n, d.h, d.w, d.c}, ws{d.kh, d.kw, d.c / d.groups, d.out_c}, ys{d.n, d.out_h, d.out_w, d.out_c};
    Pair x(xs), w(ws), b(Shape{d.out_c}), y(ys), dy(ys), dx(xs), dw(ws), db(Shape{d.out_c});
    x.set(random_floats(xs.numel(), 40)), w.set(random_floats(ws.numel(), 41)), b.set(random_floats(d.out_c, 42));
    dy.set(random_floats(ys.numel(), 43));
    const Tensor bc = d.has_bias ? b.c.t : Tensor(), bg = d.has_bias ? b.g.t : Tensor();
    // The outputs against the CPU: the ops table's conv rows (the same cases).
    cpu().conv2d_forward(d, x.c.t, w.c.t, bc, y.c.t), gpu().conv2d_forward(d, x.g.t, w.g.t, bg, y.g.t);
    cpu().conv2d_backward(d, x.c.t, w.c.t, dy.c.t, dx.c.t, dw.c.t, d.has_bias ? db.c.t : Tensor());
    gpu().conv2d_backward(d, x.g.t, w.g.t, dy.g.t, dx.g.t, dw.g.t, d.has_bias ? db.g.t : Tensor());
#ifdef TG_HAVE_CUDA
    // Steady state: the same descriptor again neither adds a cache entry nor grows the arena.
    const size_t entries = cuda().cache_size();
    const int grows = cuda().workspace_grow_count();
    gpu().conv2d_forward(d, x.g.t, w.g.t, bg, y.g.t);
    gpu().conv2d_backward(d, x.g.t, w.g.t, dy.g.t, dx.g.t, dw.g.t, d.has_bias ? db.g.t : Tensor());
    expect_close(dw, what + " dw (second call)", 1e-5);
    EXPECT_EQ(cuda().cache_size(), entries) << what;
    EXPECT_EQ(cuda().workspace_grow_count(), grows) << what;
    // Default options: deterministic algorithms with FMA math (no TF32), each one chosen and reported.
    for (const ConvAlgorithm& a : cuda().conv_algorithms(d)) {
      EXPECT_TRUE(a.chosen && a.deterministic && !a.tensor_op) << what << " " << a.name;
    }
#endif
  }
}

// BackendOptions::conv_search: every direction's algorithm chosen by timing the acceptable ones (deterministic, FMA
// math by default), results within the tolerance of the CPU's (another algorithm than the heuristics' may win), and
// a second call (the kept algorithm) gives the first call's bits.
TEST_F(CudaBackendTest, ConvAlgorithmSearchByMeasurement) {
#ifdef TG_HAVE_CUDA
  BackendOptions bo;
  bo.conv_search = true;
  std::unique_ptr<Backend> searched = make_backend("cuda:0", bo);
  auto& cs = dynamic_cast<CudaBackend&>(*searched);
  for (Padding pad : {Padding::kSame, Padding::kValid}) {
    const ConvDesc d = make_conv_desc(4, 16, 15, 8, 3, 3, 16, 2, pad, 1, true);
    const std::string what = d.key();
    const Shape xs{d.n, d.h, d.w, d.c}, ws{d.kh, d.kw, d.c, d.out_c}, ys{d.n, d.out_h, d.out_w, d.out_c};
    Pair x(xs), w(ws), b(Shape{d.out_c}), y(ys), dy(ys), dx(xs), dw(ws), db(Shape{d.out_c});
    x.set(random_floats(xs.numel(), 50)), w.set(random_floats(ws.numel(), 51)), b.set(random_floats(d.out_c, 52));
    dy.set(random_floats(ys.numel(), 53));
    cpu().conv2d_forward(d, x.c.t, w.c.t, b.c.t, y.c.t), searched->conv2d_forward(d, x.g.t, w.g.t, b.g.t, y.g.t);
    cpu().conv2d_backward(d, x.c.t, w.c.t, dy.c.t, dx.c.t, dw.c.t, db.c.t);
    searched->conv2d_backward(d, x.g.t, w.g.t, dy.g.t, dx.g.t, dw.g.t, db.g.t);
    searched->synchronize();  // the tensors are read through the fixture's backend
    expect_close(y, what + " forward", 1e-5);
    expect_close(dx, what + " dx", 1e-5);
    expect_close(dw, what + " dw", 1e-5);
    const std::vector<float> y1 = y.g.read<float>(), dx1 = dx.g.read<float>(), dw1 = dw.g.read<float>();
    searched->conv2d_forward(d, x.g.t, w.g.t, b.g.t, y.g.t);
    searched->conv2d_backward(d, x.g.t, w.g.t, dy.g.t, dx.g.t, dw.g.t, db.g.t);
    searched->synchronize();
    EXPECT_EQ(y.g.read<float>(), y1) << what;
    EXPECT_EQ(dx.g.read<float>(), dx1) << what;
    EXPECT_EQ(dw.g.read<float>(), dw1) << what;
    for (const ConvAlgorithm& a : cs.conv_algorithms(d)) {
      EXPECT_TRUE(a.chosen && a.deterministic && !a.tensor_op) << what << " " << a.name;
      EXPECT_GE(a.timed, 1) << what << " " << a.name;
      EXPECT_GT(a.measured_ms, 0.f) << what << " " << a.name;
    }
  }
#else
  GTEST_SKIP() << "built without CUDA";
#endif
}

// ---- batch norm (the outputs against the CPU: the ops table's bn rows) ----------------------------------------
TEST_F(CudaBackendTest, BatchNormVarianceIsThePopulationsAndDbetaNeedsNoDx) {
  struct BnCase {
    int64_t n, hw, c;
    bool has_gamma;
  };
  for (const BnCase& bc : {BnCase{2, 5, 7, true}, BnCase{3, 17, 45, true}, BnCase{2, 9, 64, false}}) {
    BatchNormDesc d;
    d.rows = bc.n * bc.hw * bc.hw, d.c = bc.c, d.epsilon = 0.001f, d.has_gamma = bc.has_gamma;
    const Shape xs{bc.n, bc.hw, bc.hw, bc.c}, cs{d.c};
    const std::string what = d.key();
    Pair x(xs), gamma(cs), beta(cs), y(xs), mean(cs), var(cs);
    auto xv = random_floats(xs.numel(), 70, -1.f, 3.f);
    x.set(xv), gamma.set(random_floats(d.c, 71, 0.5f, 1.5f)), beta.set(random_floats(d.c, 72));
    const Tensor gc = bc.has_gamma ? gamma.c.t : Tensor(), gg = bc.has_gamma ? gamma.g.t : Tensor();
    cpu().batch_norm_forward_training(d, x.c.t, gc, beta.c.t, y.c.t, mean.c.t, var.c.t);
    gpu().batch_norm_forward_training(d, x.g.t, gg, beta.g.t, y.g.t, mean.g.t, var.g.t);
    // The population variance, checked directly in double (the table compares it with the CPU's bits).
    auto vg = var.g.read<float>();
    for (int64_t ch = 0; ch < d.c; ++ch) {
      double m = 0, v = 0;
      for (int64_t r = 0; r < d.rows; ++r) m += xv[r * d.c + ch];
      m /= d.rows;
      for (int64_t r = 0; r < d.rows; ++r) v += (xv[r * d.c + ch] - m) * (xv[r * d.c + ch] - m);
      EXPECT_NEAR(vg[ch], v / d.rows, 1e-5 * (1 + v / d.rows)) << what << " channel " << ch;
    }
    // dx not wanted (a first layer): the parameter gradients alone, the CPU's bits.
    Pair dy(xs), dx(xs), dgamma(cs), dbeta(cs), dbeta2(cs);
    dy.set(random_floats(xs.numel(), 73));
    const Tensor dgc = bc.has_gamma ? dgamma.c.t : Tensor();
    cpu().batch_norm_backward(d, x.c.t, gc, mean.c.t, var.c.t, dy.c.t, dx.c.t, dgc, dbeta.c.t);
    gpu().batch_norm_backward(d, x.g.t, gg, mean.g.t, var.g.t, dy.g.t, Tensor(), Tensor(), dbeta2.g.t);
    cpu().copy(dbeta2.c.t, dbeta.c.t);
    expect_same_bits(dbeta2, what + " dbeta without dx");
  }
}

}  // namespace
}  // namespace tg
