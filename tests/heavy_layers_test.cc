// The heavy layers (conv2d, max/avg pool, LRN, batch norm, fully connected): shape inference and parameter
// declarations, impossible shapes as clear errors, a numerical gradient check of every backward (inputs and
// parameters), batch norm in training and inference with its moving-statistics update. Also checks that the
// gradient checker itself catches a wrong backward and refuses to pass on kinks only.
#include <gtest/gtest.h>

#include <cmath>

#include "common/grad_check.h"
#include "common/reference_ops.h"
#include "terngrad/nn/layers.h"

namespace tg {
namespace {

// Sets `layer` up for `inputs` on a CPU backend; returns the output shape.
Shape setup_shape(LayerPtr layer, const std::vector<Shape>& inputs) {
  LayerHarness h(std::move(layer), inputs);
  return h.layer().output_shapes().at(0);
}

// Expects setting the layer up to throw a tg::Error whose message contains every one of `needles`.
void expect_setup_error(LayerPtr layer, const std::vector<Shape>& inputs, const std::vector<std::string>& needles) {
  try {
    LayerHarness h(std::move(layer), inputs);
    FAIL() << "setup accepted impossible shapes";
  } catch (const Error& e) {
    for (const auto& n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
  }
}

ConvOptions conv_opts(int64_t out, int64_t k, int64_t stride, Padding p, int64_t groups = 1, bool bias = true) {
  ConvOptions o;
  o.out_channels = out, o.kernel_h = o.kernel_w = k, o.stride = stride, o.padding = p, o.groups = groups;
  o.bias = bias;
  return o;
}

// ---- shapes and declarations ----------------------------------------------------------------------------

TEST(HeavyLayerShapes, Conv2d) {
  LayerHarness h(conv2d("conv1", conv_opts(20, 5, 1, Padding::kSame)), {Shape{2, 28, 28, 1}});
  EXPECT_EQ(h.layer().output_shapes()[0], (Shape{2, 28, 28, 20}));
  ASSERT_EQ(h.param_specs().size(), 2u);
  EXPECT_EQ(h.param_specs()[0].name, "conv1/weights");
  EXPECT_EQ(h.param_specs()[0].shape, (Shape{5, 5, 1, 20}));
  EXPECT_EQ(h.param_specs()[1].name, "conv1/biases");
  EXPECT_EQ(h.param_specs()[1].shape, (Shape{20}));

  EXPECT_EQ(setup_shape(conv2d("c", conv_opts(4, 5, 2, Padding::kValid)), {Shape{1, 9, 9, 3}}), (Shape{1, 3, 3, 4}));
  EXPECT_EQ(setup_shape(conv2d("c", conv_opts(4, 3, 2, Padding::kSame)), {Shape{3, 7, 8, 3}}), (Shape{3, 4, 4, 4}));
  LayerHarness g(conv2d("g", conv_opts(6, 3, 1, Padding::kSame, 2, false)), {Shape{1, 8, 8, 4}});
  ASSERT_EQ(g.param_specs().size(), 1u) << "no bias declared when bias is off";
  EXPECT_EQ(g.param_specs()[0].shape, (Shape{3, 3, 2, 6}));
}

TEST(HeavyLayerShapes, Conv2dImpossibleShapesAreErrors) {
  expect_setup_error(conv2d("convg", conv_opts(4, 3, 1, Padding::kSame, 2)), {Shape{1, 5, 5, 3}},
                     {"convg", "(1, 5, 5, 3)", "groups 2"});
  expect_setup_error(conv2d("convk", conv_opts(4, 7, 1, Padding::kValid)), {Shape{1, 5, 5, 3}},
                     {"convk", "(1, 5, 5, 3)"});
  expect_setup_error(conv2d("convr", conv_opts(4, 3, 1, Padding::kSame)), {Shape{5, 5, 3}}, {"convr", "(5, 5, 3)"});
  EXPECT_THROW(conv2d("convz", conv_opts(0, 3, 1, Padding::kSame)), Error);
}

TEST(HeavyLayerShapes, Pooling) {
  LayerHarness m(max_pool("pool1", 2, 2, Padding::kSame), {Shape{1, 7, 7, 3}});
  EXPECT_EQ(m.layer().output_shapes()[0], (Shape{1, 4, 4, 3}));
  EXPECT_TRUE(m.param_specs().empty());
  ASSERT_EQ(m.saved_specs().size(), 1u) << "max pooling keeps its arg-max workspace";
  EXPECT_EQ(m.saved_specs()[0].dtype, DType::kU8);
  EXPECT_EQ(setup_shape(max_pool("p", 3, 2, Padding::kValid), {Shape{2, 7, 7, 3}}), (Shape{2, 3, 3, 3}));
  EXPECT_EQ(setup_shape(avg_pool("p", 3, 2, Padding::kSame), {Shape{2, 7, 6, 3}}), (Shape{2, 4, 3, 3}));
  LayerHarness a(avg_pool("avg", 2, 2, Padding::kValid), {Shape{1, 4, 4, 2}});
  EXPECT_TRUE(a.saved_specs().empty());
  expect_setup_error(max_pool("poolk", 5, 2, Padding::kValid), {Shape{1, 4, 4, 2}}, {"poolk", "(1, 4, 4, 2)"});
  expect_setup_error(avg_pool("poolr", 2, 2, Padding::kValid), {Shape{4, 2}}, {"poolr", "(4, 2)"});
}

TEST(HeavyLayerShapes, Lrn) {
  EXPECT_EQ(setup_shape(lrn("norm1", 4, 1.f, 0.001f / 9, 0.75f), {Shape{2, 5, 5, 64}}), (Shape{2, 5, 5, 64}));
  expect_setup_error(lrn("normr", 2, 1.f, 1e-4f, 0.75f), {Shape{2, 64}}, {"normr", "(2, 64)"});
  EXPECT_THROW(lrn("normb", 2, 0.f, 1e-4f, 0.75f), Error);
}

TEST(HeavyLayerShapes, BatchNorm) {
  BatchNormOptions o;
  LayerHarness h(batch_norm("conv1/BatchNorm", o), {Shape{2, 3, 3, 4}});
  EXPECT_EQ(h.layer().output_shapes()[0], (Shape{2, 3, 3, 4}));
  ASSERT_EQ(h.param_specs().size(), 1u) << "beta only by default, as the reference's ops.batch_norm";
  EXPECT_EQ(h.param_specs()[0].name, "conv1/BatchNorm/beta");
  ASSERT_EQ(h.state_specs().size(), 2u);
  EXPECT_EQ(h.state_specs()[0].name, "conv1/BatchNorm/moving_mean");
  EXPECT_EQ(h.state_specs()[0].init_value, 0.f);
  EXPECT_EQ(h.state_specs()[1].name, "conv1/BatchNorm/moving_variance");
  EXPECT_EQ(h.state_specs()[1].init_value, 1.f);
  o.gamma = true;
  LayerHarness g(batch_norm("bn", o), {Shape{6, 5}});
  ASSERT_EQ(g.param_specs().size(), 2u);
  EXPECT_EQ(g.param_specs()[1].name, "bn/gamma");
  EXPECT_EQ(g.param_specs()[1].shape, (Shape{5}));
  expect_setup_error(batch_norm("bnr", o), {Shape{2, 3, 4}}, {"bnr", "(2, 3, 4)"});
}

TEST(HeavyLayerShapes, FullyConnected) {
  FcOptions o;
  o.out = 7;
  LayerHarness h(fully_connected("fc3", o), {Shape{4, 10}});
  EXPECT_EQ(h.layer().output_shapes()[0], (Shape{4, 7}));
  ASSERT_EQ(h.param_specs().size(), 2u);
  EXPECT_EQ(h.param_specs()[0].name, "fc3/weights");
  EXPECT_EQ(h.param_specs()[0].shape, (Shape{10, 7}));
  EXPECT_EQ(h.param_specs()[1].name, "fc3/biases");
  expect_setup_error(fully_connected("fc4", o), {Shape{4, 2, 2, 3}}, {"fc4", "(4, 2, 2, 3)"});
}

// ---- gradient checks ----------------------------------------------------------------------------------

struct ConvGradCase {
  int64_t n, h, w, c, out, k, stride;
  Padding padding;
  int64_t groups;
  bool bias;
};

class ConvGradTest : public ::testing::TestWithParam<ConvGradCase> {};

TEST_P(ConvGradTest, BackwardMatchesNumericalGradient) {
  const ConvGradCase& p = GetParam();
  EXPECT_GRADIENTS_OK(check_layer_gradients(
      conv2d("conv", conv_opts(p.out, p.k, p.stride, p.padding, p.groups, p.bias)), {Shape{p.n, p.h, p.w, p.c}}));
}

INSTANTIATE_TEST_SUITE_P(Shapes, ConvGradTest,
                         ::testing::Values(ConvGradCase{1, 5, 5, 2, 3, 3, 1, Padding::kSame, 1, true},
                                           ConvGradCase{3, 6, 5, 4, 6, 3, 2, Padding::kSame, 2, true},
                                           ConvGradCase{2, 7, 7, 3, 2, 3, 2, Padding::kValid, 1, false},
                                           ConvGradCase{1, 4, 4, 4, 4, 2, 1, Padding::kValid, 2, true}));

struct PoolGradCase {
  bool max;
  int64_t n, h, w, c, k, stride;
  Padding padding;
};

class PoolGradTest : public ::testing::TestWithParam<PoolGradCase> {};

TEST_P(PoolGradTest, BackwardMatchesNumericalGradient) {
  const PoolGradCase& p = GetParam();
  LayerPtr layer = p.max ? max_pool("pool", p.k, p.stride, p.padding) : avg_pool("pool", p.k, p.stride, p.padding);
  GradCheckReport r = check_layer_gradients(std::move(layer), {Shape{p.n, p.h, p.w, p.c}});
  EXPECT_GRADIENTS_OK(r);
}

INSTANTIATE_TEST_SUITE_P(Shapes, PoolGradTest,
                         ::testing::Values(PoolGradCase{true, 1, 5, 5, 2, 2, 2, Padding::kSame},
                                           PoolGradCase{true, 3, 7, 6, 2, 3, 2, Padding::kValid},
                                           PoolGradCase{true, 2, 5, 5, 3, 3, 1, Padding::kSame},
                                           PoolGradCase{false, 1, 5, 5, 2, 3, 2, Padding::kSame},
                                           PoolGradCase{false, 3, 6, 7, 2, 2, 2, Padding::kValid},
                                           PoolGradCase{false, 2, 4, 4, 3, 3, 1, Padding::kSame}));

TEST(LrnGrad, BackwardMatchesNumericalGradient) {
  GradCheckOptions o;
  o.input_lo = -2.f, o.input_hi = 2.f;
  EXPECT_GRADIENTS_OK(check_layer_gradients(lrn("norm", 2, 1.f, 0.1f, 0.75f), {Shape{2, 3, 3, 7}}, o));
  EXPECT_GRADIENTS_OK(check_layer_gradients(lrn("norm", 4, 2.f, 0.05f, 0.75f), {Shape{1, 2, 3, 12}}, o));
  EXPECT_GRADIENTS_OK(check_layer_gradients(lrn("norm", 1, 1.f, 0.3f, 1.f), {Shape{3, 2, 2, 4}}, o));
  EXPECT_GRADIENTS_OK(check_layer_gradients(lrn("norm", 3, 2.f, 0.05f, 0.6f), {Shape{1, 2, 2, 9}}, o));  // pow
}

TEST(FullyConnectedGrad, BackwardMatchesNumericalGradient) {
  FcOptions o;
  o.out = 5;
  EXPECT_GRADIENTS_OK(check_layer_gradients(fully_connected("fc", o), {Shape{3, 7}}));
  o.bias = false;
  o.out = 3;
  EXPECT_GRADIENTS_OK(check_layer_gradients(fully_connected("fc", o), {Shape{1, 9}}));
}

TEST(BatchNormGrad, TrainingBackwardMatchesNumericalGradient) {
  GradCheckOptions o;
  o.input_lo = -1.f, o.input_hi = 2.f;
  BatchNormOptions bn;
  EXPECT_GRADIENTS_OK(check_layer_gradients(batch_norm("bn", bn), {Shape{2, 3, 3, 4}}, o));
  EXPECT_GRADIENTS_OK(check_layer_gradients(batch_norm("bn", bn), {Shape{6, 5}}, o));
  bn.gamma = true;
  o.param_lo = 0.5f, o.param_hi = 1.5f;
  EXPECT_GRADIENTS_OK(check_layer_gradients(batch_norm("bn", bn), {Shape{2, 3, 3, 4}}, o));
  EXPECT_GRADIENTS_OK(check_layer_gradients(batch_norm("bn", bn), {Shape{6, 5}}, o));
}

// Training normalizes with the batch statistics and updates the moving ones; inference uses the moving ones.
TEST(BatchNormLayer, MovingStatisticsAndInference) {
  for (bool gamma : {false, true}) {
    BatchNormOptions bn;
    bn.gamma = gamma;
    bn.decay = 0.9f;
    LayerHarness h(batch_norm("bn", bn), {Shape{2, 3, 3, 4}});
    GradCheckOptions o;
    o.input_lo = -1.f, o.input_hi = 3.f;
    h.randomize(o);
    LayerIO& io = h.io();
    const int64_t c = 4, rows = 18;
    BatchNormDesc d;
    d.rows = rows, d.c = c, d.epsilon = bn.epsilon, d.has_gamma = gamma;
    auto vec = [](const Tensor& t) {
      const float* p = t.data<float>();
      return ref::Vec(p, p + t.numel());
    };
    ref::Vec x = vec(io.in[0]), beta = vec(io.params[0]), g = gamma ? vec(io.params[1]) : ref::Vec{};
    fill_uniform(io.state[0], 5, -0.5f, 0.5f);  // moving mean
    fill_uniform(io.state[1], 6, 0.5f, 1.5f);   // moving variance
    ref::Vec m0 = vec(io.state[0]), v0 = vec(io.state[1]);

    h.forward(/*training=*/true);
    ref::Vec bmean, bvar;
    ref::Vec y = ref::batch_norm_forward_training(d, x, g, beta, &bmean, &bvar);
    ref::Vec got = vec(io.out[0]), mm = vec(io.state[0]), mv = vec(io.state[1]);
    for (size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(got[i], y[i], 1e-4) << "training output " << i;
    for (int64_t k = 0; k < c; ++k) {
      EXPECT_NEAR(mm[k], 0.9 * m0[k] + 0.1 * bmean[k], 1e-5) << "moving_mean " << k;
      EXPECT_NEAR(mv[k], 0.9 * v0[k] + 0.1 * bvar[k], 1e-5) << "moving_variance " << k;
    }

    h.forward(/*training=*/false);
    ref::Vec yi = ref::batch_norm_forward_inference(d, x, g, beta, mm, mv);
    got = vec(io.out[0]);
    for (size_t i = 0; i < yi.size(); ++i) ASSERT_NEAR(got[i], yi[i], 1e-4) << "inference output " << i;
    EXPECT_EQ(vec(io.state[0]), mm) << "inference must not move the statistics";
    EXPECT_THROW(h.backward(), Error) << "backward after an inference forward has no batch statistics";
  }
}

// The layers compute what the references compute (one shape each; cpu_ops_test covers the ops in depth).
TEST(HeavyLayerForward, ConvMatchesReference) {
  LayerHarness h(conv2d("c", conv_opts(6, 3, 2, Padding::kSame, 2)), {Shape{2, 5, 5, 4}});
  h.randomize({});
  h.forward(true);
  ConvDesc d = make_conv_desc(2, 5, 5, 4, 3, 3, 6, 2, Padding::kSame, 2, true);
  auto vec = [](const Tensor& t) {
    const float* p = t.data<float>();
    return ref::Vec(p, p + t.numel());
  };
  ref::Vec y = ref::conv2d_forward(d, vec(h.io().in[0]), vec(h.io().params[0]), vec(h.io().params[1]));
  ref::Vec got = vec(h.io().out[0]);
  ASSERT_EQ(got.size(), y.size());
  for (size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(got[i], y[i], 1e-4) << i;
}

// ---- the checker checks ---------------------------------------------------------------------------------

// y = 2x whose backward claims dx = 3 dy: the checker must fail it.
class WrongScaleLayer final : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "wrong_scale"; }

 protected:
  std::vector<Shape> setup_impl(SetupContext& ctx) override { return {ctx.input(0)}; }
  void forward_impl(LayerIO& io) override {
    io.backend->copy(io.out[0], io.in[0]);
    io.backend->scale(2.f, io.out[0]);
  }
  void backward_impl(LayerIO& io) override {
    io.backend->copy(io.din[0], io.dout[0]);
    io.backend->scale(3.f, io.din[0]);
  }
};

TEST(GradChecker, CatchesAWrongBackward) {
  GradCheckReport r = check_layer_gradients(std::make_unique<WrongScaleLayer>("wrong"), {Shape{2, 3}});
  EXPECT_EQ(r.checked, 6);
  EXPECT_EQ(r.failures.size(), 6u) << r.summary();
}

TEST(GradChecker, SkipsKinksButRefusesToPassOnKinksAlone) {
  // Max pooling over exact ties: every input element sits on a kink.
  LayerHarness h(max_pool("tied", 2, 2, Padding::kValid), {Shape{1, 4, 4, 1}});
  h.backend().fill(h.io().in[0], 0.5f);
  GradCheckReport r = check_gradients(h);
  EXPECT_GT(r.kinks, 0) << r.summary();
  EXPECT_FALSE(r.ok()) << "a check made of kinks must not pass: " << r.summary();
  // Inputs apart by more than the step: no kinks, and the max-pool backward passes.
  float* x = h.io().in[0].data<float>();
  for (int i = 0; i < 16; ++i) x[i] = 0.1f * static_cast<float>((i * 7) % 16);
  GradCheckReport clean = check_gradients(h);
  EXPECT_TRUE(clean.ok()) << clean.summary();
  EXPECT_EQ(clean.kinks, 0);
}

}  // namespace
}  // namespace tg
