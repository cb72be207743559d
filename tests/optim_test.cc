// Tests of src/optim: each optimizer's update against the TF 1.x arithmetic written out in double, slot
// names and initial values, the fused (whole-slab) and per-tensor paths agreeing bit for bit, learning-rate
// schedules at chosen steps, the EMA decay formula and values, swap/assign, and the error messages.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "terngrad/backend/backend.h"
#include "terngrad/core/error.h"
#include "terngrad/core/slab.h"
#include "terngrad/optim/lr_schedule.h"
#include "terngrad/optim/moving_average.h"
#include "terngrad/optim/optimizer.h"

namespace tg {
namespace {

// Expects `f` to throw tg::Error whose message contains `needle`.
template <typename F>
void expect_error(F&& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "expected an error containing \"" << needle << "\"";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << "message: " << e.what();
  }
}

// |actual - expected| within a few float ulps of the larger magnitude (the device math is float).
void expect_close(float actual, double expected, const std::string& what) {
  const double tol = 4e-7 * std::max(1.0, std::fabs(expected));
  EXPECT_NEAR(actual, expected, tol) << what;
}

std::vector<float> read(const Tensor& t) {
  const float* p = t.data<float>();
  return std::vector<float>(p, p + t.numel());
}

void write(const Tensor& t, const std::vector<double>& v) {
  ASSERT_EQ(static_cast<int64_t>(v.size()), t.numel());
  float* p = t.data<float>();
  for (size_t i = 0; i < v.size(); ++i) p[i] = static_cast<float>(v[i]);
}

// Two parameters, like one layer's weights and biases; gradients in a slab of the same layout.
struct Model {
  Slab params, grads;
  explicit Model(Backend& be) {
    for (Slab* s : {&params, &grads}) {
      s->add("fc/weights", Shape{2, 3});
      s->add("fc/biases", Shape{3});
      s->allocate(be.allocator());
    }
    write(params.view("fc/weights"), {0.5, -1.25, 2.0, 0.0, 3.5, -0.75});
    write(params.view("fc/biases"), {0.1, -0.2, 0.3});
  }
};

// The gradients of step k (k = 0, 1, 2): distinct values and signs per step and element.
std::vector<double> weight_grad(int k) {
  const std::vector<std::vector<double>> g = {
      {0.2, -0.4, 1.5, 0.0, -2.0, 0.05}, {-0.1, 0.3, 1.0, 0.25, -1.0, -0.5}, {0.6, -0.2, -0.5, 0.125, 0.75, 0.0}};
  return g[k];
}
std::vector<double> bias_grad(int k) {
  const std::vector<std::vector<double>> g = {{1.0, -1.0, 0.5}, {0.5, 0.0, -0.25}, {-2.0, 0.75, 0.1}};
  return g[k];
}

class OptimTest : public ::testing::Test {
 protected:
  void SetUp() override { be_ = make_backend("cpu", BackendOptions{2}); }
  Backend& be() { return *be_; }

  // Runs 3 steps of `opt` on a fresh model with lr(k); returns the parameters after each step, both
  // tensors concatenated (weights then biases).
  std::vector<std::vector<float>> run3(Optimizer& opt, Model& m, const std::vector<float>& lr) {
    std::vector<std::vector<float>> out;
    for (int k = 0; k < 3; ++k) {
      write(m.grads.view("fc/weights"), weight_grad(k));
      write(m.grads.view("fc/biases"), bias_grad(k));
      opt.apply(be(), m.params, m.grads, k, lr[k]);
      std::vector<float> w = read(m.params.view("fc/weights")), b = read(m.params.view("fc/biases"));
      w.insert(w.end(), b.begin(), b.end());
      out.push_back(w);
    }
    return out;
  }
  static std::vector<double> initial() { return {0.5, -1.25, 2.0, 0.0, 3.5, -0.75, 0.1, -0.2, 0.3}; }
  static std::vector<double> grad(int k) {
    std::vector<double> g = weight_grad(k), b = bias_grad(k);
    g.insert(g.end(), b.begin(), b.end());
    return g;
  }
  static OptimizerOptions options(OptimizerKind kind) {
    OptimizerOptions o;
    o.optimizer = enum_name(kind);
    return o;
  }

  std::unique_ptr<Backend> be_;
};

// ---- optimizer: names and slots ---------------------------------------------------------------------------

TEST_F(OptimTest, ParseOptimizerKind) {
  EXPECT_EQ(parse_enum<OptimizerKind>("gd"), OptimizerKind::kGd);
  EXPECT_EQ(parse_enum<OptimizerKind>("momentum"), OptimizerKind::kMomentum);
  EXPECT_EQ(parse_enum<OptimizerKind>("adam"), OptimizerKind::kAdam);
  EXPECT_EQ(parse_enum<OptimizerKind>("rmsprop"), OptimizerKind::kRmsprop);
  EXPECT_STREQ(enum_name(OptimizerKind::kRmsprop), "rmsprop");
  expect_error([] { parse_enum<OptimizerKind>("sgd"); }, "--optimizer 'sgd' is not one of gd, momentum, adam, rmsprop");
}

TEST_F(OptimTest, SlotNamesAndInitialValues) {
  Model m(be());
  Optimizer gd(options(OptimizerKind::kGd), m.params, be());
  EXPECT_EQ(gd.slots().size(), 0);

  Optimizer mom(options(OptimizerKind::kMomentum), m.params, be());
  ASSERT_EQ(mom.slots().size(), 2);
  EXPECT_EQ(mom.slots().entry(0).name, "fc/weights/Momentum");
  EXPECT_EQ(mom.slots().entry(1).name, "fc/biases/Momentum");
  EXPECT_EQ(mom.slots().entry(0).shape, Shape({2, 3}));
  for (float v : read(mom.slots().view("fc/weights/Momentum"))) EXPECT_EQ(v, 0.f);

  Optimizer adam(options(OptimizerKind::kAdam), m.params, be());
  for (const char* n : {"fc/weights/Adam", "fc/biases/Adam", "fc/weights/Adam_1", "fc/biases/Adam_1"}) {
    ASSERT_TRUE(adam.slots().contains(n)) << n;
    for (float v : read(adam.slots().view(n))) EXPECT_EQ(v, 0.f) << n;
  }

  Optimizer rms(options(OptimizerKind::kRmsprop), m.params, be());
  EXPECT_EQ(rms.slots().entry(0).name, "fc/weights/RMSProp");
  EXPECT_EQ(rms.slots().entry(3).name, "fc/biases/RMSProp_1");
  for (const char* n : {"fc/weights/RMSProp", "fc/biases/RMSProp"})
    for (float v : read(rms.slots().view(n))) EXPECT_EQ(v, 1.f) << n;  // TF 1.x: ms starts at 1
  for (const char* n : {"fc/weights/RMSProp_1", "fc/biases/RMSProp_1"})
    for (float v : read(rms.slots().view(n))) EXPECT_EQ(v, 0.f) << n;
}

// ---- optimizer: updates against the arithmetic in double -------------------------------------------------

TEST_F(OptimTest, GradientDescentThreeSteps) {
  Model m(be());
  Optimizer opt(options(OptimizerKind::kGd), m.params, be());
  const std::vector<float> lr = {0.1f, 0.05f, 0.025f};
  auto got = run3(opt, m, lr);
  std::vector<double> w = initial();
  for (int k = 0; k < 3; ++k)
    for (size_t i = 0; i < w.size(); ++i) {
      w[i] = w[i] - double(lr[k]) * grad(k)[i];
      expect_close(got[k][i], w[i], "gd step " + std::to_string(k) + " element " + std::to_string(i));
    }
  // One element written out: 2.0 - 0.1*1.5 - 0.05*1.0 - 0.025*(-0.5) = 1.8125
  expect_close(got[2][2], 1.8125, "gd weights[2]");
}

TEST_F(OptimTest, MomentumThreeSteps) {
  Model m(be());
  OptimizerOptions o = options(OptimizerKind::kMomentum);
  o.momentum = 0.9f;
  Optimizer opt(o, m.params, be());
  const std::vector<float> lr = {0.1f, 0.1f, 0.01f};
  auto got = run3(opt, m, lr);
  std::vector<double> w = initial(), acc(w.size(), 0.0);
  for (int k = 0; k < 3; ++k)
    for (size_t i = 0; i < w.size(); ++i) {
      acc[i] = double(0.9f) * acc[i] + grad(k)[i];
      w[i] -= double(lr[k]) * acc[i];
      expect_close(got[k][i], w[i], "momentum step " + std::to_string(k) + " element " + std::to_string(i));
    }
  // weights[2]: acc 1.5 -> 2.35 -> 1.615; w = 2 - 0.15 - 0.235 - 0.01615 = 1.59885
  expect_close(got[2][2], 1.59885, "momentum weights[2]");
  expect_close(read(opt.slots().view("fc/weights/Momentum"))[2], 1.615, "momentum accumulator");
}

TEST_F(OptimTest, AdamThreeStepsWithBiasCorrection) {
  Model m(be());
  Optimizer opt(options(OptimizerKind::kAdam), m.params, be());
  const std::vector<float> lr = {0.01f, 0.01f, 0.01f};
  auto got = run3(opt, m, lr);
  const double b1 = 0.9f, b2 = 0.999f, eps = 1e-8f;  // the float hyper-parameters, widened
  std::vector<double> w = initial(), mm(w.size(), 0.0), v(w.size(), 0.0);
  for (int k = 0; k < 3; ++k) {
    const int t = k + 1;  // TF's beta powers after t steps
    const double lr_t = double(lr[k]) * std::sqrt(1 - std::pow(b2, t)) / (1 - std::pow(b1, t));
    for (size_t i = 0; i < w.size(); ++i) {
      const double g = grad(k)[i];
      mm[i] = b1 * mm[i] + (1 - b1) * g;
      v[i] = b2 * v[i] + (1 - b2) * g * g;
      w[i] -= lr_t * mm[i] / (std::sqrt(v[i]) + eps);
      expect_close(got[k][i], w[i], "adam step " + std::to_string(k) + " element " + std::to_string(i));
    }
  }
  // The first Adam step moves every element with a non-zero gradient by about lr against its sign.
  const std::vector<double> w0 = initial();
  for (size_t i = 0; i < w0.size(); ++i) {
    const double g = grad(0)[i];
    const double moved = double(got[0][i]) - w0[i];
    if (g == 0)
      EXPECT_EQ(moved, 0.0);
    else
      EXPECT_NEAR(moved, -0.01 * (g > 0 ? 1 : -1), 1e-5) << i;
  }
  // Slots hold m and v of the last step.
  const std::vector<float> m_w = read(opt.slots().view("fc/weights/Adam"));
  const std::vector<float> v_w = read(opt.slots().view("fc/weights/Adam_1"));
  for (int i = 0; i < 6; ++i) {
    expect_close(m_w[i], mm[i], "adam m");
    EXPECT_NEAR(v_w[i], v[i], 1e-6 * std::max(1e-3, v[i])) << "adam v " << i;
  }
}

TEST_F(OptimTest, AdamCorrectedLearningRate) {
  // t = step + 1: step 0 gives lr * sqrt(0.001) / 0.1.
  EXPECT_DOUBLE_EQ(Optimizer::adam_corrected_lr(0.01, 0.9, 0.999, 0), 0.01 * std::sqrt(0.001) / 0.1);
  EXPECT_DOUBLE_EQ(Optimizer::adam_corrected_lr(0.01, 0.9, 0.999, 2),
                   0.01 * std::sqrt(1 - 0.999 * 0.999 * 0.999) / (1 - 0.9 * 0.9 * 0.9));
  EXPECT_NEAR(Optimizer::adam_corrected_lr(0.01, 0.9, 0.999, 1000000), 0.01, 1e-12);
  Slab p;
  p.add("w", Shape{1});
  Optimizer opt(options(OptimizerKind::kAdam), p, be());
  const OptimizerStep s = opt.step_descriptor(4, 0.5f);
  EXPECT_EQ(s.kind, OptimizerKind::kAdam);
  EXPECT_FLOAT_EQ(s.lr, float(0.5 * std::sqrt(1 - std::pow(double(0.999f), 5)) / (1 - std::pow(double(0.9f), 5))));
}

TEST_F(OptimTest, RmsPropThreeStepsFromMsOne) {
  Model m(be());
  OptimizerOptions o = options(OptimizerKind::kRmsprop);
  o.momentum = 0.9f;
  Optimizer opt(o, m.params, be());
  const std::vector<float> lr = {0.1f, 0.1f, 0.1f};
  auto got = run3(opt, m, lr);
  const double d = 0.9f, mu = 0.9f, eps = 1.0;
  std::vector<double> w = initial(), ms(w.size(), 1.0), mom(w.size(), 0.0);
  for (int k = 0; k < 3; ++k)
    for (size_t i = 0; i < w.size(); ++i) {
      const double g = grad(k)[i];
      ms[i] = d * ms[i] + (1 - d) * g * g;
      mom[i] = mu * mom[i] + double(lr[k]) * g / std::sqrt(ms[i] + eps);
      w[i] -= mom[i];
      expect_close(got[k][i], w[i], "rmsprop step " + std::to_string(k) + " element " + std::to_string(i));
    }
  // First step of weights[2] written out: ms = 0.9 + 0.1*2.25 = 1.125; mom = 0.1*1.5/sqrt(2.125).
  Model fresh(be());
  Optimizer one(o, fresh.params, be());
  write(fresh.grads.view("fc/weights"), weight_grad(0));
  write(fresh.grads.view("fc/biases"), bias_grad(0));
  one.apply(be(), fresh.params, fresh.grads, 0, 0.1f);
  expect_close(read(fresh.params.view("fc/weights"))[2], 2.0 - 0.15 / std::sqrt(2.125), "rmsprop first step");
  expect_close(read(one.slots().view("fc/weights/RMSProp"))[2], 1.125, "rmsprop ms");
}

// A gradient slab in another order takes the per-tensor path; it must give the fused path's bits.
TEST_F(OptimTest, PerTensorPathMatchesFusedPath) {
  for (OptimizerKind kind :
       {OptimizerKind::kGd, OptimizerKind::kMomentum, OptimizerKind::kAdam, OptimizerKind::kRmsprop}) {
    Model fused(be()), split(be());
    Slab reordered;
    reordered.add("fc/biases", Shape{3});
    reordered.add("fc/weights", Shape{2, 3});
    reordered.allocate(be().allocator());
    Optimizer a(options(kind), fused.params, be()), b(options(kind), split.params, be());
    for (int k = 0; k < 3; ++k) {
      write(fused.grads.view("fc/weights"), weight_grad(k));
      write(fused.grads.view("fc/biases"), bias_grad(k));
      write(reordered.view("fc/weights"), weight_grad(k));
      write(reordered.view("fc/biases"), bias_grad(k));
      a.apply(be(), fused.params, fused.grads, k, 0.05f);
      b.apply(be(), split.params, reordered, k, 0.05f);
    }
    for (const char* n : {"fc/weights", "fc/biases"})
      EXPECT_EQ(read(fused.params.view(n)), read(split.params.view(n))) << enum_name(kind) << " " << n;
    for (int i = 0; i < a.slots().size(); ++i)
      EXPECT_EQ(read(a.slots().view(i)), read(b.slots().view(i))) << a.slots().entry(i).name;
  }
}

// The trainer's one pass (update + moving average of the new values) gives the bits of two separate passes,
// on the fused and the per-tensor path, for every kind.
TEST_F(OptimTest, UpdateWithMovingAverageMatchesTwoPasses) {
  for (OptimizerKind kind :
       {OptimizerKind::kGd, OptimizerKind::kMomentum, OptimizerKind::kAdam, OptimizerKind::kRmsprop}) {
    for (bool reorder : {false, true}) {
      Model one(be()), two(be());
      Slab reordered;
      reordered.add("fc/biases", Shape{3});
      reordered.add("fc/weights", Shape{2, 3});
      reordered.allocate(be().allocator());
      Optimizer a(options(kind), one.params, be()), b(options(kind), two.params, be());
      ExponentialMovingAverage ea(be(), std::vector<const Slab*>{&one.params}, 0.99f),
          eb(be(), std::vector<const Slab*>{&two.params}, 0.99f);
      for (int k = 0; k < 3; ++k) {
        Slab& g = reorder ? reordered : one.grads;
        write(g.view("fc/weights"), weight_grad(k));
        write(g.view("fc/biases"), bias_grad(k));
        write(two.grads.view("fc/weights"), weight_grad(k));
        write(two.grads.view("fc/biases"), bias_grad(k));
        a.apply(be(), one.params, g, k, 0.05f, &ea);
        ea.update(be(), k, &one.params);  // nothing else tracked: must not fold the parameters in twice
        b.apply(be(), two.params, two.grads, k, 0.05f);
        eb.update(be(), k);
      }
      for (const char* n : {"fc/weights", "fc/biases"}) {
        EXPECT_EQ(read(one.params.view(n)), read(two.params.view(n))) << enum_name(kind) << " " << n;
        EXPECT_EQ(read(ea.average(n)), read(eb.average(n))) << enum_name(kind) << " " << n;
      }
    }
  }
  Model m(be());
  Optimizer opt(options(OptimizerKind::kMomentum), m.params, be());
  Slab other;
  other.add("x", Shape{4});
  other.allocate(be().allocator());
  ExponentialMovingAverage unrelated(be(), std::vector<const Slab*>{&other}, 0.9f);
  expect_error([&] { opt.apply(be(), m.params, m.grads, 0, 0.1f, &unrelated); }, "does not track this parameter slab");
}

// Enough elements that the CPU backend splits the loop over threads; several tensors with padding.
TEST_F(OptimTest, LargeSlabMatchesDoubleReference) {
  Slab params, grads;
  const std::vector<Shape> shapes = {Shape{300, 257}, Shape{257}, Shape{5, 5, 3, 64}, Shape{7}};
  for (Slab* s : {&params, &grads}) {
    for (size_t i = 0; i < shapes.size(); ++i) s->add("t" + std::to_string(i), shapes[i]);
    s->allocate(be().allocator());
  }
  std::vector<std::vector<double>> w0, g0;
  for (int i = 0; i < params.size(); ++i) {
    std::vector<double> w(params.view(i).numel()), g(w.size());
    for (size_t j = 0; j < w.size(); ++j) {
      w[j] = std::sin(0.37 * j + i);
      g[j] = std::cos(0.11 * j - i) * 0.5;
    }
    write(params.view(i), w);
    write(grads.view(i), g);
    w0.push_back(w);
    g0.push_back(g);
  }
  OptimizerOptions o = options(OptimizerKind::kAdam);
  Optimizer opt(o, params, be());
  opt.apply(be(), params, grads, 0, 0.001f);
  const double lr_t = double(0.001f) * std::sqrt(1 - double(0.999f)) / (1 - double(0.9f));
  for (int i = 0; i < params.size(); ++i) {
    const std::vector<float> got = read(params.view(i));
    for (size_t j = 0; j < got.size(); ++j) {
      const double g = float(g0[i][j]);
      const double m = (1 - double(0.9f)) * g, v = (1 - double(0.999f)) * g * g;
      const double want = double(float(w0[i][j])) - lr_t * m / (std::sqrt(v) + double(1e-8f));
      ASSERT_NEAR(got[j], want, 4e-7 * std::max(1.0, std::fabs(want))) << "tensor " << i << " element " << j;
    }
  }
}

TEST_F(OptimTest, Errors) {
  Model m(be());
  OptimizerOptions bad = options(OptimizerKind::kMomentum);
  bad.momentum = -0.5f;
  expect_error([&] { Optimizer(bad, m.params, be()); }, "--momentum must be >= 0");
  OptimizerOptions bad_adam = options(OptimizerKind::kAdam);
  bad_adam.adam_beta1 = 1.0f;
  expect_error([&] { Optimizer(bad_adam, m.params, be()); }, "adam beta1 must be in [0, 1)");

  Optimizer opt(options(OptimizerKind::kMomentum), m.params, be());
  expect_error([&] { opt.apply(be(), m.params, m.grads, 0, -0.1f); }, "learning rate at step 0 must be finite");
  expect_error([&] { opt.apply(be(), m.params, m.grads, 0, NAN); }, "learning rate at step 0 must be finite");
  expect_error([&] { opt.apply(be(), m.params, m.grads, -1, 0.1f); }, "step must be >= 0");

  Slab missing;
  missing.add("fc/weights", Shape{2, 3});
  missing.allocate(be().allocator());
  expect_error([&] { opt.apply(be(), m.params, missing, 0, 0.1f); }, "gradient slab has no tensor 'fc/biases'");

  Slab wrong_shape;
  wrong_shape.add("fc/weights", Shape{3, 2});
  wrong_shape.add("fc/biases", Shape{3});
  wrong_shape.allocate(be().allocator());
  expect_error([&] { opt.apply(be(), m.params, wrong_shape, 0, 0.1f); },
               "gradient tensor 'fc/weights' is f32(3, 2), the optimizer was built for f32(2, 3)");
}

TEST_F(OptimTest, ResetRestoresInitialSlots) {
  Model m(be());
  Optimizer opt(options(OptimizerKind::kRmsprop), m.params, be());
  run3(opt, m, {0.1f, 0.1f, 0.1f});
  EXPECT_NE(read(opt.slots().view("fc/weights/RMSProp"))[0], 1.f);
  opt.reset(be());
  for (float v : read(opt.slots().view("fc/weights/RMSProp"))) EXPECT_EQ(v, 1.f);
  for (float v : read(opt.slots().view("fc/biases/RMSProp_1"))) EXPECT_EQ(v, 0.f);
}

// ---- learning-rate schedules -----------------------------------------------------------------------------

LearningRateOptions schedule(LearningRateDecay type) {
  LearningRateOptions o;
  o.learning_rate_decay_type = enum_name(type);
  o.initial_learning_rate = 0.1;
  o.examples_per_epoch = 50000;
  o.batch_size = 128;
  o.num_epochs_per_decay = 20;
  o.learning_rate_decay_factor = 0.1;
  o.max_steps = 1000;
  return o;
}

TEST(LearningRateScheduleTest, ParseNames) {
  EXPECT_EQ(parse_enum<LearningRateDecay>("fixed"), LearningRateDecay::kFixed);
  EXPECT_EQ(parse_enum<LearningRateDecay>("exponential"), LearningRateDecay::kExponential);
  EXPECT_EQ(parse_enum<LearningRateDecay>("polynomial"), LearningRateDecay::kPolynomial);
  EXPECT_EQ(parse_enum<LearningRateDecay>("cosine"), LearningRateDecay::kCosine);
  expect_error([] { parse_enum<LearningRateDecay>("foo"); },
               "--learning_rate_decay_type 'foo' is not one of fixed, exponential, polynomial, cosine");
}

TEST(LearningRateScheduleTest, Fixed) {
  LearningRateSchedule s(schedule(LearningRateDecay::kFixed));
  for (int64_t t : {0, 1, 999, 1000, 100000}) EXPECT_EQ(s.rate(t), 0.1);
  EXPECT_EQ(s(5), 0.1f);
}

TEST(LearningRateScheduleTest, ExponentialStaircase) {
  LearningRateSchedule s(schedule(LearningRateDecay::kExponential));
  // decay_steps = int(50000 / 128 * 20) = int(7812.5) = 7812
  EXPECT_EQ(s.decay_steps(), 7812);
  EXPECT_DOUBLE_EQ(s.rate(0), 0.1);
  EXPECT_DOUBLE_EQ(s.rate(7811), 0.1);
  EXPECT_DOUBLE_EQ(s.rate(7812), 0.1 * 0.1);
  EXPECT_DOUBLE_EQ(s.rate(15623), 0.1 * 0.1);
  EXPECT_DOUBLE_EQ(s.rate(15624), 0.1 * 0.1 * 0.1);
  EXPECT_DOUBLE_EQ(s.rate(3 * 7812 + 5), 0.1 * 0.1 * 0.1 * 0.1);
  EXPECT_NE(s.describe().find("7812"), std::string::npos) << s.describe();
}

TEST(LearningRateScheduleTest, Polynomial) {
  LearningRateSchedule s(schedule(LearningRateDecay::kPolynomial));
  EXPECT_DOUBLE_EQ(s.rate(0), 0.1);
  EXPECT_DOUBLE_EQ(s.rate(500), 0.1 * std::sqrt(0.5));
  EXPECT_DOUBLE_EQ(s.rate(750), 0.1 * 0.5);
  EXPECT_DOUBLE_EQ(s.rate(1000), 0.0);
  EXPECT_DOUBLE_EQ(s.rate(5000), 0.0);  // clamped at max_steps
}

TEST(LearningRateScheduleTest, CosineWithWarmup) {
  LearningRateOptions o = schedule(LearningRateDecay::kCosine);
  o.warmup_steps = 10;
  o.max_steps = 110;
  LearningRateSchedule s(o);
  EXPECT_DOUBLE_EQ(s.rate(0), 0.1 / 10);  // warm-up starts at lr0 / warmup
  EXPECT_DOUBLE_EQ(s.rate(4), 0.1 * 5 / 10);
  EXPECT_DOUBLE_EQ(s.rate(9), 0.1);   // reaches lr0 at the last warm-up step
  EXPECT_DOUBLE_EQ(s.rate(10), 0.1);  // the cosine starts at lr0
  EXPECT_NEAR(s.rate(35), 0.05 * (1 + std::cos(M_PI / 4)), 1e-15);
  EXPECT_NEAR(s.rate(60), 0.05, 1e-15);                                         // half way
  EXPECT_NEAR(s.rate(110), 0.0, 1e-15);                                         // end
  EXPECT_NEAR(s.rate(500), 0.0, 1e-15);                                         // clamped
  for (int64_t t = 10; t < 110; ++t) EXPECT_GE(s.rate(t), s.rate(t + 1)) << t;  // monotone after warm-up

  o.warmup_steps = 0;
  LearningRateSchedule plain(o);
  EXPECT_DOUBLE_EQ(plain.rate(0), 0.1);
  EXPECT_NEAR(plain.rate(55), 0.05, 1e-15);
}

TEST(LearningRateScheduleTest, AdamKeepsTheRateConstant) {
  LearningRateOptions o = schedule(LearningRateDecay::kExponential);
  o.optimizer = OptimizerKind::kAdam;
  o.examples_per_epoch = 0;  // unused with adam: no error
  LearningRateSchedule s(o);
  EXPECT_EQ(s.effective_decay(), LearningRateDecay::kFixed);
  for (int64_t t : {0, 7812, 100000}) EXPECT_EQ(s.rate(t), 0.1);
  EXPECT_NE(s.describe().find("adam"), std::string::npos);
}

TEST(LearningRateScheduleTest, Errors) {
  LearningRateOptions o = schedule(LearningRateDecay::kExponential);
  o.examples_per_epoch = 100;
  o.num_epochs_per_decay = 0.5;  // int(100 / 128 * 0.5) = 0
  expect_error([&] { LearningRateSchedule s(o); },
               "--num_epochs_per_decay 0.5: decay_steps = int(100 / 128 * 0.5) = 0");

  o = schedule(LearningRateDecay::kFixed);
  o.initial_learning_rate = -0.01;
  expect_error([&] { LearningRateSchedule s(o); }, "--initial_learning_rate must be finite and >= 0, got -0.01");

  o = schedule(LearningRateDecay::kCosine);
  o.warmup_steps = 1000;
  expect_error([&] { LearningRateSchedule s(o); }, "--warmup_steps (1000) must be less than --max_steps (1000)");

  o = schedule(LearningRateDecay::kExponential);
  o.warmup_steps = 5;
  expect_error([&] { LearningRateSchedule s(o); },
               "--warmup_steps 5 is only used by --learning_rate_decay_type cosine");

  o = schedule(LearningRateDecay::kPolynomial);
  o.max_steps = 0;
  expect_error([&] { LearningRateSchedule s(o); }, "--max_steps must be > 0 for polynomial");

  o = schedule(LearningRateDecay::kExponential);
  o.batch_size = 0;
  expect_error([&] { LearningRateSchedule s(o); }, "--batch_size must be > 0");

  o = schedule(LearningRateDecay::kExponential);
  o.learning_rate_decay_factor = -0.1;
  expect_error([&] { LearningRateSchedule s(o); }, "--learning_rate_decay_factor must be finite and > 0");

  LearningRateSchedule ok(schedule(LearningRateDecay::kFixed));
  expect_error([&] { ok.rate(-1); }, "step must be >= 0");
}

// ---- exponential moving average ------------------------------------------------------------------------

TEST(MovingAverageTest, DecayFormula) {
  EXPECT_DOUBLE_EQ(ExponentialMovingAverage::decay_at(0.9999, 0), 0.1);  // (1 + 0) / (10 + 0)
  EXPECT_DOUBLE_EQ(ExponentialMovingAverage::decay_at(0.9999, 10), 11.0 / 20);
  EXPECT_DOUBLE_EQ(ExponentialMovingAverage::decay_at(0.9999, 89991), 0.9999);  // 89992/90001 > 0.9999
  EXPECT_DOUBLE_EQ(ExponentialMovingAverage::decay_at(0.9999, 89989), 89990.0 / 89999);
  EXPECT_DOUBLE_EQ(ExponentialMovingAverage::decay_at(0.5, 100), 0.5);
  expect_error([] { ExponentialMovingAverage::decay_at(0.9, -1); }, "step must be >= 0");
}

class MovingAverageFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    be_ = make_backend("cpu", BackendOptions{2});
    params_.add("conv1/weights", Shape{2, 2});
    params_.add("conv1/biases", Shape{3});
    params_.allocate(be_->allocator());
    state_.add("conv1/BatchNorm/moving_mean", Shape{2});
    state_.allocate(be_->allocator());
    set_values(0);
  }
  // Live values at "time" k: distinct per element and per k.
  static std::vector<double> values(int tensor, int k) {
    const int n = tensor == 0 ? 4 : tensor == 1 ? 3 : 2;
    std::vector<double> v(n);
    for (int i = 0; i < n; ++i) v[i] = 0.25 * (i + 1) * (tensor + 1) + (k == 0 ? 0.0 : std::pow(-1.5, k) + i);
    return v;
  }
  void set_values(int k) {
    write(params_.view("conv1/weights"), values(0, k));
    write(params_.view("conv1/biases"), values(1, k));
    write(state_.view("conv1/BatchNorm/moving_mean"), values(2, k));
  }
  std::vector<Tensor> live() {
    return {params_.view("conv1/weights"), params_.view("conv1/biases"), state_.view("conv1/BatchNorm/moving_mean")};
  }
  static std::vector<std::string> names() { return {"conv1/weights", "conv1/biases", "conv1/BatchNorm/moving_mean"}; }
  std::unique_ptr<Backend> be_;
  Slab params_, state_;
};

TEST_F(MovingAverageFixture, ShadowNamesAndInitialCopy) {
  ExponentialMovingAverage ema(*be_, {&params_, &state_});
  ASSERT_EQ(ema.shadow().size(), 3);
  EXPECT_EQ(ema.shadow().entry(0).name, "conv1/weights/ExponentialMovingAverage");
  EXPECT_EQ(ema.shadow().entry(2).name, "conv1/BatchNorm/moving_mean/ExponentialMovingAverage");
  for (int t = 0; t < 3; ++t) EXPECT_EQ(read(ema.average(names()[t])), read(live()[t])) << names()[t];
  EXPECT_FLOAT_EQ(ema.decay(), 0.9999f);
}

TEST_F(MovingAverageFixture, UpdateValuesInDouble) {
  ExponentialMovingAverage ema(*be_, {&params_, &state_});
  std::vector<std::vector<double>> shadow;
  for (int t = 0; t < 3; ++t) {
    std::vector<double> v;
    for (float x : read(live()[t])) v.push_back(x);
    shadow.push_back(v);
  }
  for (int k = 1; k <= 3; ++k) {
    set_values(k);
    const int64_t step = k - 1;  // the iteration just applied
    ema.update(*be_, step);
    const double d = double(float(std::min(0.9999, (1.0 + step) / (10.0 + step))));  // 0.1, 2/11, 0.25
    for (int t = 0; t < 3; ++t) {
      const std::vector<float> got = read(ema.average(names()[t]));
      for (size_t i = 0; i < got.size(); ++i) {
        shadow[t][i] = d * shadow[t][i] + (1 - d) * double(float(values(t, k)[i]));
        expect_close(got[i], shadow[t][i], names()[t] + " step " + std::to_string(step));
      }
    }
  }
  // One element written out: weights[0] starts at 0.25; k=1 value 0.25 - 1.5 = -1.25, d = 0.1:
  // 0.1*0.25 + 0.9*(-1.25) = -1.1
  set_values(0);
  ExponentialMovingAverage one(*be_, {&params_, &state_});
  set_values(1);
  one.update(*be_, 0);
  expect_close(read(one.average("conv1/weights"))[0], -1.1, "ema first update");
}

TEST_F(MovingAverageFixture, NamedTensorsMatchSlabs) {
  std::vector<std::pair<std::string, Tensor>> tracked;
  for (int t = 0; t < 3; ++t) tracked.push_back({names()[t], live()[t]});
  ExponentialMovingAverage by_slab(*be_, {&params_, &state_}, 0.99f);
  ExponentialMovingAverage by_tensor(*be_, tracked, 0.99f);
  for (int k = 1; k <= 4; ++k) {
    set_values(k);
    by_slab.update(*be_, 100 * k);
    by_tensor.update(*be_, 100 * k);
  }
  for (const std::string& n : names()) EXPECT_EQ(read(by_slab.average(n)), read(by_tensor.average(n))) << n;
}

TEST_F(MovingAverageFixture, SwapAndAssign) {
  ExponentialMovingAverage ema(*be_, {&params_, &state_});
  set_values(2);
  ema.update(*be_, 0);
  std::vector<std::vector<float>> live_before, avg_before;
  for (int t = 0; t < 3; ++t) {
    live_before.push_back(read(live()[t]));
    avg_before.push_back(read(ema.average(names()[t])));
    ASSERT_NE(live_before[t], avg_before[t]);
  }
  ema.swap(*be_);
  for (int t = 0; t < 3; ++t) {
    EXPECT_EQ(read(live()[t]), avg_before[t]);
    EXPECT_EQ(read(ema.average(names()[t])), live_before[t]);
  }
  ema.swap(*be_);
  for (int t = 0; t < 3; ++t) {
    EXPECT_EQ(read(live()[t]), live_before[t]);
    EXPECT_EQ(read(ema.average(names()[t])), avg_before[t]);
  }
  ema.assign_averages(*be_);
  for (int t = 0; t < 3; ++t) {
    EXPECT_EQ(read(live()[t]), avg_before[t]);
    EXPECT_EQ(read(ema.average(names()[t])), avg_before[t]);
  }
}

TEST_F(MovingAverageFixture, Errors) {
  expect_error([&] { ExponentialMovingAverage e(*be_, {&params_}, 1.5f); }, "moving-average decay must be in [0, 1]");
  Slab ints;
  ints.add("step", Shape{1}, DType::kI32);
  ints.allocate(be_->allocator());
  expect_error([&] { ExponentialMovingAverage e(*be_, {&ints}); }, "tensor 'step' is i32, only f32 tensors");
  Slab unallocated;
  unallocated.add("w", Shape{2});
  expect_error([&] { ExponentialMovingAverage e(*be_, {&unallocated}); }, "tracked slab is not allocated");
  expect_error([&] { ExponentialMovingAverage e(*be_, {&params_, &params_}); }, "duplicate tensor name");
}

}  // namespace
}  // namespace tg
