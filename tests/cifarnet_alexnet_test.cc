// CifarNet and AlexNet as the reference tables (reference sections 3.3 and 3.4): every output shape and
// parameter count, names, weight decay and initializers; the "cifar10_alexnet" alias; the smallest image
// size; and a CPU smoke test per network (forward + backward + update on a fixed batch, loss finite and
// decreasing) that exercises training mode and inference mode: BN moving statistics updated in training and
// used in inference, dropout active in training and off in inference.
//
// AlexNet parameter count, derived from the reference table (two branches b = 1, 2; BN beta only, so every
// conv contributes KH*KW*Cin*Cout weights + Cout betas and no bias; fc layers have weights and biases):
//   conv1_b  11*11*3*48   = 17424  + 48   -> x2 = 34944
//   conv2_b  5*5*48*128   = 153600 + 128  -> x2 = 307456
//   conv3_b  3*3*256*192  = 442368 + 192  -> x2 = 885120   (each reads the 256-channel concat)
//   conv4_b  3*3*192*192  = 331776 + 192  -> x2 = 663936
//   conv5_b  3*3*192*128  = 221184 + 128  -> x2 = 442624   convolutions: 2,334,080
//   fc6      9216*4096    = 37748736 + 4096 = 37,752,832   (9216 = 6*6*256 after pool5 at 224)
//   fc7      4096*4096    = 16777216 + 4096 = 16,781,312
//   logits   4096*K + K                     = 4,101,097 for K = 1001 (4,100,096 + 1001)
//   total    56,868,224 + 4097*K = 60,969,321 (K = 1001), 60,965,224 (K = 1000)
// Spatial sizes at 224: conv1 stride 4 SAME -> ceil(224/4) = 56; VALID 3x3/2 pools: (56-3)/2+1 = 27,
// (27-3)/2+1 = 13, (13-3)/2+1 = 6. The smallest input is 57: pool5 needs 3 rows, pool2 7, conv1 15 =
// ceil(S/4), so S >= 57.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/bound_net.h"
#include "common/error_of.h"
#include "terngrad/backend/backend.h"
#include "terngrad/models/registry.h"
#include "terngrad/nn/layers.h"
#include "terngrad/optim/optimizer.h"

namespace tg {
namespace {

struct Row {
  std::string name;
  Shape out;
  int64_t params;
};

void expect_rows(const Net& net, const std::vector<Row>& want) {
  const auto rows = net.summary();
  ASSERT_EQ(rows.size(), want.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(rows[i].name, want[i].name) << "row " << i;
    EXPECT_EQ(rows[i].output, want[i].out) << rows[i].name;
    EXPECT_EQ(rows[i].parameters, want[i].params) << rows[i].name;
  }
}

int64_t total_parameters(const Net& net) {
  int64_t n = 0;
  for (const auto& p : net.param_specs()) n += p.shape.numel();
  return n;
}

ParamSpec spec(const Net& net, const std::string& name) {
  for (const auto& p : net.param_specs())
    if (p.name == name) return p;
  ADD_FAILURE() << "no parameter " << name;
  return {};
}

Shape output_of(const Net& net, const std::string& layer) {
  for (const auto& r : net.summary())
    if (r.name == layer) return r.output;
  ADD_FAILURE() << "no layer " << layer;
  return {};
}

void expect_truncated_normal(const ParamSpec& p, float stddev, uint32_t seed_offset) {
  EXPECT_EQ(p.init.kind, Initializer::Kind::kTruncatedNormal) << p.name;
  EXPECT_FLOAT_EQ(p.init.stddev, stddev) << p.name;
  EXPECT_EQ(p.init.seed_offset, seed_offset) << p.name;
}

void expect_constant(const ParamSpec& p, float value) {
  EXPECT_EQ(p.init.kind, Initializer::Kind::kConstant) << p.name;
  EXPECT_FLOAT_EQ(p.init.value, value) << p.name;
}

std::string error_of(const std::string& net_name, const ModelConfig& c) {
  return testing::error_of([&] {
    Net net;
    build_model(net_name, c, net);
  });
}

ModelConfig cifar_config() {
  ModelConfig c;
  c.image_size = 24;
  c.channels = 3;
  c.num_classes = 10;
  c.weight_decay = 0.004f;
  return c;
}

ModelConfig imagenet_config(int64_t image_size) {
  ModelConfig c;
  c.image_size = image_size;
  c.channels = 3;
  c.num_classes = 1001;
  c.weight_decay = 0.0005f;
  c.dropout_keep_prob = 0.8f;
  return c;
}

// A fixed batch: images uniform in [-1, 1], labels uniform in [0, classes).
struct Batch {
  std::vector<float> images;    // (N, S, S, C)
  std::vector<int32_t> labels;  // (N)
  Tensor x, y;
  Batch(int64_t n, int64_t size, int64_t channels, int64_t classes, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    images.resize(n * size * size * channels);
    for (auto& v : images) v = u(rng);
    labels.resize(n);
    for (auto& l : labels) l = static_cast<int32_t>(rng() % classes);
    x = Tensor(images.data(), Shape{n, size, size, channels}, DType::kF32, Device::cpu());
    y = Tensor(labels.data(), Shape{n}, DType::kI32, Device::cpu());
  }
};

std::vector<float> copy_of(const Tensor& t) {
  const float* p = t.data<float>();
  return std::vector<float>(p, p + t.numel());
}

// ---- CifarNet ------------------------------------------------------------------------------------------

TEST(CifarNet, ShapesAndParameterCountMatchTheReference) {
  auto be = make_backend("cpu", {1});
  Net net;
  build_model("cifarnet", cifar_config(), net);
  net.setup(*be, 2);
  expect_rows(net, {
                       {"conv1", {2, 24, 24, 64}, 4800 + 64},
                       {"conv1/relu", {2, 24, 24, 64}, 0},
                       {"pool1", {2, 12, 12, 64}, 0},
                       {"lrn1", {2, 12, 12, 64}, 0},
                       {"conv2", {2, 12, 12, 64}, 102400 + 64},
                       {"conv2/relu", {2, 12, 12, 64}, 0},
                       {"lrn2", {2, 12, 12, 64}, 0},
                       {"pool2", {2, 6, 6, 64}, 0},
                       {"flatten", {2, 2304}, 0},
                       {"fc3", {2, 384}, 884736 + 384},
                       {"fc3/relu", {2, 384}, 0},
                       {"fc4", {2, 192}, 73728 + 192},
                       {"fc4/relu", {2, 192}, 0},
                       {"logits", {2, 10}, 1920 + 10},
                       {"loss", {1}, 0},
                   });
  EXPECT_EQ(total_parameters(net), 1068298);
  ParameterStore store(net.param_specs(), net.state_specs(), *be);
  EXPECT_EQ(store.num_parameters(), 1068298);
  EXPECT_TRUE(net.state_specs().empty()) << "CifarNet has no batch norm";

  std::vector<std::string> names;
  for (const auto& p : net.param_specs()) names.push_back(p.name);
  EXPECT_EQ(names,
            (std::vector<std::string>{"conv1/weights", "conv1/biases", "conv2/weights", "conv2/biases", "fc3/weights",
                                      "fc3/biases", "fc4/weights", "fc4/biases", "logits/weights", "logits/biases"}));
  EXPECT_EQ(spec(net, "conv1/weights").shape, (Shape{5, 5, 3, 64}));
  EXPECT_EQ(spec(net, "conv2/weights").shape, (Shape{5, 5, 64, 64}));
  EXPECT_EQ(spec(net, "fc3/weights").shape, (Shape{2304, 384}));
  // Weight decay only on fc3 and fc4 weights (the convolutions and the logits have wd 0 in the reference).
  for (const auto& p : net.param_specs()) {
    const bool decayed = p.name == "fc3/weights" || p.name == "fc4/weights";
    EXPECT_FLOAT_EQ(p.weight_decay, decayed ? 0.004f : 0.f) << p.name;
  }
  expect_truncated_normal(spec(net, "conv1/weights"), 0.05f, 1);
  expect_truncated_normal(spec(net, "conv2/weights"), 0.05f, 2);
  expect_truncated_normal(spec(net, "fc3/weights"), 0.04f, 3);
  expect_truncated_normal(spec(net, "fc4/weights"), 0.04f, 4);
  expect_truncated_normal(spec(net, "logits/weights"), 1.f / 192.f, 5);
  expect_constant(spec(net, "conv1/biases"), 0.f);
  expect_constant(spec(net, "conv2/biases"), 0.1f);
  expect_constant(spec(net, "fc3/biases"), 0.1f);
  expect_constant(spec(net, "fc4/biases"), 0.1f);
  expect_constant(spec(net, "logits/biases"), 0.f);
}

TEST(CifarNet, TheReferenceNameCifar10AlexnetIsAnAlias) {
  auto be = make_backend("cpu", {1});
  Net a, b;
  build_model("cifarnet", cifar_config(), a);
  build_model("cifar10_alexnet", cifar_config(), b);
  a.setup(*be, 2);
  b.setup(*be, 2);
  const auto ra = a.summary(), rb = b.summary();
  ASSERT_EQ(ra.size(), rb.size());
  for (size_t i = 0; i < ra.size(); ++i) {
    EXPECT_EQ(ra[i].name, rb[i].name);
    EXPECT_EQ(ra[i].type, rb[i].type);
    EXPECT_EQ(ra[i].output, rb[i].output);
    EXPECT_EQ(ra[i].parameters, rb[i].parameters);
  }
  ParameterStore sa(a.param_specs(), a.state_specs(), *be), sb(b.param_specs(), b.state_specs(), *be);
  sa.initialize(123);
  sb.initialize(123);
  ASSERT_EQ(sa.params().bytes(), sb.params().bytes());
  EXPECT_EQ(0, std::memcmp(sa.params().data(), sb.params().data(), sa.params().bytes()));
  EXPECT_EQ(find_model("cifar10_alexnet").min_image_size, find_model("cifarnet").min_image_size);
}

TEST(CifarNet, ClassesAndImageSizeFollowTheConfiguration) {
  auto be = make_backend("cpu", {1});
  ModelConfig c = cifar_config();
  c.image_size = 32;  // the uncropped CIFAR image: pool2 gives 8x8x64 = 4096 inputs to fc3
  c.num_classes = 100;
  Net net;
  build_model("cifarnet", c, net);
  net.setup(*be, 1);
  EXPECT_EQ(spec(net, "fc3/weights").shape, (Shape{4096, 384}));
  EXPECT_EQ(spec(net, "logits/weights").shape, (Shape{192, 100}));
  EXPECT_EQ(total_parameters(net), 1068298 + (4096 - 2304) * 384 + 90 * 192 + 90);
}

TEST(CifarNet, RunsAtItsMinimumImageSizeAndRejectsSmaller) {
  // Every layer pads SAME, so the registry's minimum is whatever the architecture admits: check the net
  // really runs (forward and backward) at that size, and that one pixel less is one clear error.
  const int64_t min = find_model("cifarnet").min_image_size;
  auto be = make_backend("cpu", {1});
  ModelConfig c = cifar_config();
  c.image_size = min;
  testing::BoundNet m(*be, "cifarnet", c, 2);
  Batch batch(2, min, 3, 10, 5);
  EXPECT_TRUE(std::isfinite(m.net.forward(batch.x, batch.y, true)));
  m.net.backward();
  c.image_size = min - 1;
  const std::string msg = error_of("cifar10_alexnet", c);
  EXPECT_NE(msg.find("--image_size " + std::to_string(min - 1)), std::string::npos) << msg;
  EXPECT_NE(msg.find("minimum " + std::to_string(min)), std::string::npos) << msg;
}

TEST(CifarNet, SmokeTrainingStepsReduceTheLossAndInferenceEqualsTraining) {
  auto be = make_backend("cpu", {1});
  const int64_t n = 16;
  testing::BoundNet m(*be, "cifarnet", cifar_config(), n, 123);
  Net& net = m.net;
  ParameterStore& store = m.store;
  Batch batch(n, 24, 3, 10, 11);

  // No batch norm and no dropout: the inference forward is the training forward, bit for bit.
  const float train_loss = net.forward(batch.x, batch.y, true, 0);
  const std::vector<float> train_logits = copy_of(net.tensor(net.logits_name()));
  const float infer_loss = net.forward(batch.x, batch.y, false, 1);
  EXPECT_EQ(train_loss, infer_loss);
  EXPECT_EQ(copy_of(net.tensor(net.logits_name())), train_logits);
  // Regularization = 0.004 * (|fc3/weights|^2 + |fc4/weights|^2) / 2, computed here in double.
  double sq = 0;
  for (const char* name : {"fc3/weights", "fc4/weights"}) {
    Tensor w = store.params().view(name);
    for (int64_t i = 0; i < w.numel(); ++i) sq += double(w.data<float>()[i]) * w.data<float>()[i];
  }
  EXPECT_NEAR(net.last_regularization(), 0.004 * sq / 2, 1e-5 * (0.004 * sq / 2));
  EXPECT_NEAR(net.last_cross_entropy() + net.last_regularization(), infer_loss, 1e-5);

  OptimizerOptions oo;
  oo.optimizer = "adam";  // the reference's CifarNet optimizer
  Optimizer opt(oo, store.params(), *be);
  std::vector<float> losses;
  for (int64_t step = 0; step < 6; ++step) {
    losses.push_back(net.forward(batch.x, batch.y, true, static_cast<uint32_t>(step)));
    ASSERT_TRUE(std::isfinite(losses.back())) << "step " << step;
    net.backward();
    opt.apply(*be, store.params(), net.grads(), step, 0.001f);
  }
  std::printf("CifarNet losses:");
  for (float l : losses) std::printf(" %.4f", l);
  std::printf("\n");
  for (size_t i = 1; i < losses.size(); ++i) EXPECT_LT(losses[i], losses[i - 1]) << "step " << i;
}

// ---- AlexNet -------------------------------------------------------------------------------------------

// The expected layer table of AlexNet for square input S, batch n and K classes, built from the reference
// table's rules (conv SAME: ceil(h / stride); max-pool 3x3/2 VALID: (h - 3) / 2 + 1).
std::vector<Row> alexnet_rows(int64_t n, int64_t s, int64_t k) {
  const int64_t c1 = (s + 3) / 4, p1 = (c1 - 3) / 2 + 1, p2 = (p1 - 3) / 2 + 1, p5 = (p2 - 3) / 2 + 1;
  std::vector<Row> rows;
  auto conv = [&](const std::string& name, int64_t h, int64_t cin, int64_t kernel, int64_t cout) {
    rows.push_back({name, {n, h, h, cout}, kernel * kernel * cin * cout});
    rows.push_back({name + "/BatchNorm", {n, h, h, cout}, cout});
    rows.push_back({name + "/relu", {n, h, h, cout}, 0});
  };
  for (const std::string b : {"1", "2"}) {
    conv("conv1_" + b, c1, 3, 11, 48);
    rows.push_back({"lrn1_" + b, {n, c1, c1, 48}, 0});
    rows.push_back({"pool1_" + b, {n, p1, p1, 48}, 0});
    conv("conv2_" + b, p1, 48, 5, 128);
    rows.push_back({"lrn2_" + b, {n, p1, p1, 128}, 0});
    rows.push_back({"pool2_" + b, {n, p2, p2, 128}, 0});
  }
  rows.push_back({"pool2", {n, p2, p2, 256}, 0});
  for (const std::string b : {"1", "2"}) {
    conv("conv3_" + b, p2, 256, 3, 192);
    conv("conv4_" + b, p2, 192, 3, 192);
    conv("conv5_" + b, p2, 192, 3, 128);
    rows.push_back({"pool5_" + b, {n, p5, p5, 128}, 0});
  }
  rows.push_back({"pool5", {n, p5, p5, 256}, 0});
  const int64_t flat = p5 * p5 * 256;
  rows.push_back({"flatten", {n, flat}, 0});
  rows.push_back({"fc6", {n, 4096}, flat * 4096 + 4096});
  rows.push_back({"fc6/relu", {n, 4096}, 0});
  rows.push_back({"dropout6", {n, 4096}, 0});
  rows.push_back({"fc7", {n, 4096}, 4096 * 4096 + 4096});
  rows.push_back({"fc7/relu", {n, 4096}, 0});
  rows.push_back({"dropout7", {n, 4096}, 0});
  rows.push_back({"logits", {n, k}, 4096 * k + k});
  rows.push_back({"loss", {1}, 0});
  return rows;
}

const char* const kAlexNetConvs[] = {"conv1_1", "conv1_2", "conv2_1", "conv2_2", "conv3_1",
                                     "conv3_2", "conv4_1", "conv4_2", "conv5_1", "conv5_2"};

TEST(AlexNet, ShapesAndParameterCountMatchTheDerivation) {
  auto be = make_backend("cpu", {1});
  Net net;
  build_model("alexnet", imagenet_config(224), net);
  net.setup(*be, 1);
  const std::vector<Row> want = alexnet_rows(1, 224, 1001);
  // The derivation's numbers at 224, spelled out.
  EXPECT_EQ(want[0].out, (Shape{1, 56, 56, 48}));
  EXPECT_EQ(want[4].out, (Shape{1, 27, 27, 48}));
  EXPECT_EQ(want[9].out, (Shape{1, 13, 13, 128}));
  EXPECT_EQ(want[20].out, (Shape{1, 13, 13, 256}));
  expect_rows(net, want);
  EXPECT_EQ(output_of(net, "pool5"), (Shape{1, 6, 6, 256}));
  EXPECT_EQ(output_of(net, "flatten"), (Shape{1, 9216}));
  int64_t summed = 0;
  for (const auto& r : want) summed += r.params;
  EXPECT_EQ(summed, 60969321);
  EXPECT_EQ(total_parameters(net), 60969321);

  ModelConfig k1000 = imagenet_config(224);
  k1000.num_classes = 1000;
  Net net1000;
  build_model("alexnet", k1000, net1000);
  net1000.setup(*be, 1);
  EXPECT_EQ(total_parameters(net1000), 60965224);
}

TEST(AlexNet, NamesInitializersWeightDecayAndBatchNormState) {
  auto be = make_backend("cpu", {1});
  Net net;
  build_model("alexnet", imagenet_config(224), net);
  net.setup(*be, 1);
  std::vector<std::string> names, want;
  for (const auto& p : net.param_specs()) names.push_back(p.name);
  // Order: branch 1 then 2 of stages 1-2, then branch 1 then 2 of stages 3-5.
  for (const char* conv :
       {"conv1_1", "conv2_1", "conv1_2", "conv2_2", "conv3_1", "conv4_1", "conv5_1", "conv3_2", "conv4_2", "conv5_2"}) {
    want.push_back(std::string(conv) + "/weights");
    want.push_back(std::string(conv) + "/BatchNorm/beta");  // beta only: no gamma, no conv bias
  }
  for (const char* fc : {"fc6", "fc7", "logits"}) {
    want.push_back(std::string(fc) + "/weights");
    want.push_back(std::string(fc) + "/biases");
  }
  EXPECT_EQ(names, want);
  // Weight decay on every weight (logits included), none on betas and biases.
  for (const auto& p : net.param_specs()) {
    const bool is_weight = p.name.size() > 8 && p.name.compare(p.name.size() - 8, 8, "/weights") == 0;
    EXPECT_FLOAT_EQ(p.weight_decay, is_weight ? 0.0005f : 0.f) << p.name;
  }
  uint32_t seed = 1;
  for (const char* conv : kAlexNetConvs) {
    expect_truncated_normal(spec(net, std::string(conv) + "/weights"), 0.01f, seed++);
    expect_constant(spec(net, std::string(conv) + "/BatchNorm/beta"), 0.f);
  }
  expect_truncated_normal(spec(net, "fc6/weights"), 0.005f, 11);
  expect_truncated_normal(spec(net, "fc7/weights"), 0.005f, 12);
  expect_truncated_normal(spec(net, "logits/weights"), 0.01f, 13);
  expect_constant(spec(net, "fc6/biases"), 0.1f);
  expect_constant(spec(net, "fc7/biases"), 0.1f);
  expect_constant(spec(net, "logits/biases"), 0.f);
  EXPECT_EQ(spec(net, "conv3_2/weights").shape, (Shape{3, 3, 256, 192}));  // reads the full concat
  EXPECT_EQ(spec(net, "conv4_2/weights").shape, (Shape{3, 3, 192, 192}));  // stays on its branch

  std::vector<std::string> states;
  for (const auto& s : net.state_specs()) {
    states.push_back(s.name);
    EXPECT_FLOAT_EQ(s.init_value, s.name.find("moving_variance") != std::string::npos ? 1.f : 0.f) << s.name;
  }
  EXPECT_EQ(states.size(), 20u);
  for (const char* conv : kAlexNetConvs) {
    EXPECT_NE(std::find(states.begin(), states.end(), std::string(conv) + "/BatchNorm/moving_mean"), states.end());
    EXPECT_NE(std::find(states.begin(), states.end(), std::string(conv) + "/BatchNorm/moving_variance"), states.end());
  }
}

TEST(AlexNet, ImageSizeBelowTheDerivedMinimumIsOneClearError) {
  EXPECT_EQ(find_model("alexnet").min_image_size, 57);
  const std::string msg = error_of("alexnet", imagenet_config(56));
  EXPECT_NE(msg.find("--image_size 56"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--net alexnet"), std::string::npos) << msg;
  EXPECT_NE(msg.find("minimum 57"), std::string::npos) << msg;

  // The minimum is tight: 57 gives a 1x1 pool5 ...
  auto be = make_backend("cpu", {1});
  Net ok;
  build_model("alexnet", imagenet_config(57), ok);
  ok.setup(*be, 1);
  expect_rows(ok, alexnet_rows(1, 57, 1001));
  EXPECT_EQ(output_of(ok, "pool5"), (Shape{1, 1, 1, 256}));
  // ... and 56, bypassing the registry's check, leaves nothing for pool5.
  Net too_small;
  build_alexnet(too_small, imagenet_config(56));
  try {
    too_small.setup(*be, 1);
    ADD_FAILURE() << "setup at 56 should fail";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("pool5_1"), std::string::npos) << e.what();
  }
}

// One AlexNet at a reduced input (67: pool5 is 1x1, fc6 has 256 inputs) for the smoke tests.
struct SmallAlexNet {
  static constexpr int64_t kBatch = 4, kSize = 67, kClasses = 1001;
  std::unique_ptr<Backend> be = make_backend("cpu", {1});
  // The tests read these activations after a step: kept (the memory plan reuses the others' bytes).
  testing::BoundNet m{*be,
                      [](Net& n) {
                        build_model("alexnet", imagenet_config(kSize), n);
                        for (const char* t : {"conv1_1", "conv1_1/BatchNorm", "conv2_2", "fc6/relu", "dropout6"})
                          n.keep(t);
                      },
                      kBatch};
  Net& net = m.net;
  ParameterStore& store = m.store;
  Batch batch{kBatch, kSize, 3, kClasses, 21};
  float forward(bool training, uint32_t step = 0, PhiloxKey key = {}) {
    return net.forward(batch.x, batch.y, training, step, key);
  }
};

TEST(AlexNet, SmokeTrainingStepsReduceTheLoss) {
  SmallAlexNet a;
  Optimizer opt(testing::momentum_sgd(), a.store.params(), *a.be);  // the reference's AlexNet optimizer
  std::vector<float> losses;
  for (int64_t step = 0; step < 5; ++step) {
    losses.push_back(a.forward(true, static_cast<uint32_t>(step)));
    ASSERT_TRUE(std::isfinite(losses.back())) << "step " << step;
    EXPECT_GT(a.net.last_regularization(), 0.f);
    a.net.backward();
    opt.apply(*a.be, a.store.params(), a.net.grads(), step, 0.01f);
  }
  std::printf("AlexNet losses:");
  for (float l : losses) std::printf(" %.4f", l);
  std::printf("\n");
  EXPECT_NEAR(losses[0], std::log(1001.0), 0.5);  // near-uniform predictions at initialization
  EXPECT_LT(losses.back(), losses.front() - 0.5f);
  // After training, inference (moving statistics, no dropout) gives finite logits.
  EXPECT_TRUE(std::isfinite(a.forward(false)));
}

TEST(AlexNet, BatchNormUpdatesMovingStatisticsInTrainingAndUsesThemInInference) {
  SmallAlexNet a;
  Slab& state = a.store.state();
  const std::vector<uint8_t> initial(static_cast<const uint8_t*>(state.data()),
                                     static_cast<const uint8_t*>(state.data()) + state.bytes());
  // Inference forwards leave the moving statistics alone.
  a.forward(false);
  EXPECT_EQ(0, std::memcmp(state.data(), initial.data(), state.bytes()));

  // Training: moving = 0.9997 * moving + 0.0003 * batch statistic (population variance over N, H, W).
  const std::vector<float> mean0 = copy_of(state.view("conv2_2/BatchNorm/moving_mean"));
  const std::vector<float> var0 = copy_of(state.view("conv2_2/BatchNorm/moving_variance"));
  a.forward(true);
  const Tensor x = a.net.tensor("conv2_2");  // (N, H, W, 128), the BN input
  const int64_t c = x.shape().dim(-1), rows = x.numel() / c;
  const std::vector<float> mean1 = copy_of(state.view("conv2_2/BatchNorm/moving_mean"));
  const std::vector<float> var1 = copy_of(state.view("conv2_2/BatchNorm/moving_variance"));
  for (int64_t ch = 0; ch < c; ++ch) {
    double s = 0, sq = 0;
    for (int64_t r = 0; r < rows; ++r) s += x.data<float>()[r * c + ch];
    const double m = s / rows;
    for (int64_t r = 0; r < rows; ++r) sq += std::pow(x.data<float>()[r * c + ch] - m, 2);
    const double v = sq / rows;
    ASSERT_NEAR(mean1[ch], 0.9997 * mean0[ch] + 0.0003 * m, 1e-7 + 1e-5 * std::fabs(m) * 0.0003) << ch;
    ASSERT_NEAR(var1[ch], 0.9997 * var0[ch] + 0.0003 * v, 1e-6 * (1 + v)) << ch;
  }

  // Inference normalizes with the moving statistics: set them (and beta) to chosen values and compare
  // conv1_1/BatchNorm's output with (x - moving_mean) / sqrt(moving_variance + 0.001) + beta.
  Tensor mm = state.view("conv1_1/BatchNorm/moving_mean"), mv = state.view("conv1_1/BatchNorm/moving_variance");
  Tensor beta = a.store.params().view("conv1_1/BatchNorm/beta");
  for (int64_t ch = 0; ch < 48; ++ch) {
    mm.data<float>()[ch] = 0.01f * float(ch - 24);
    mv.data<float>()[ch] = 0.05f + 0.02f * float(ch);
    beta.data<float>()[ch] = 0.1f - 0.005f * float(ch);
  }
  a.forward(false);
  const Tensor in = a.net.tensor("conv1_1"), out = a.net.tensor("conv1_1/BatchNorm");
  for (int64_t i = 0; i < in.numel(); ++i) {
    const int64_t ch = i % 48;
    const double want =
        (in.data<float>()[i] - double(mm.data<float>()[ch])) / std::sqrt(double(mv.data<float>()[ch]) + 0.001) +
        beta.data<float>()[ch];
    ASSERT_NEAR(out.data<float>()[i], want, 1e-4 * (1 + std::fabs(want))) << i;
  }
}

TEST(AlexNet, DropoutActsInTrainingOnlyAndInferenceIsDeterministic) {
  SmallAlexNet a;
  const float keep = 0.8f;
  // Inference: dropout is the identity and two forwards (any step, any key) give identical logits.
  a.forward(false, 3, PhiloxKey{{1, 2}});
  const std::vector<float> logits = copy_of(a.net.tensor("logits"));
  EXPECT_EQ(copy_of(a.net.tensor("dropout6")), copy_of(a.net.tensor("fc6/relu")));
  a.forward(false, 4, PhiloxKey{{5, 6}});
  EXPECT_EQ(copy_of(a.net.tensor("logits")), logits);

  // Training: each element is dropped (0) or kept and scaled by 1/keep; about 1 - keep of them dropped.
  a.forward(true, 7);
  const std::vector<float> in = copy_of(a.net.tensor("fc6/relu")), out = copy_of(a.net.tensor("dropout6"));
  int64_t positive = 0, dropped = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] <= 0.f) continue;
    ++positive;
    if (out[i] == 0.f) {
      ++dropped;
    } else {
      ASSERT_NEAR(out[i], in[i] / keep, 1e-6f * (1 + in[i])) << i;
    }
  }
  ASSERT_GT(positive, 1000);
  // Binomial(positive, 0.2): the bound is more than 6 standard deviations.
  const double frac = double(dropped) / double(positive);
  EXPECT_NEAR(frac, 1 - keep, 6 * std::sqrt(keep * (1 - keep) / positive));
  const std::vector<float> logits7 = copy_of(a.net.tensor("logits"));
  a.forward(true, 7);
  EXPECT_EQ(copy_of(a.net.tensor("logits")), logits7);  // same step and key: same masks
  a.forward(true, 8);
  EXPECT_NE(copy_of(a.net.tensor("logits")), logits7);  // next step: new masks
}

// The backward through the two-branch DAG (conv2_b's output reaches the loss through both conv3_1 and
// conv3_2, so its gradient is the sum of two paths): the analytic directional derivative <g, d> must match
// the central difference (L(w + e d) - L(w - e d)) / 2e of the total loss, with dropout masks held fixed.
TEST(AlexNet, GradientMatchesCentralDifferencesThroughBothBranches) {
  SmallAlexNet a;
  const uint32_t step = 2;
  a.forward(true, step);
  a.net.backward();
  std::mt19937 rng(99);
  std::uniform_real_distribution<float> u(0.5f, 1.5f);
  for (const char* name :
       {"conv2_1/weights", "conv1_2/weights", "conv3_2/BatchNorm/beta", "fc6/weights", "logits/biases"}) {
    Tensor w = a.store.params().view(name);
    const std::vector<float> g = copy_of(a.net.grads().view(name));
    std::vector<float> d(g.size());
    double analytic = 0;
    for (size_t i = 0; i < g.size(); ++i) {
      d[i] = (g[i] >= 0 ? 1.f : -1.f) * u(rng);
      analytic += double(g[i]) * d[i];
    }
    ASSERT_GT(analytic, 0.0) << name;
    const std::vector<float> w0 = copy_of(w);
    // A step that moves the loss by about 2e-4 (~400 ulps of a float loss near 7) while keeping the
    // perturbation small enough that few ReLU / max-pool kinks are crossed (measured: agreement within 0.4%).
    const float eps = static_cast<float>(1e-4 / analytic);
    auto loss_at = [&](float e) {
      for (size_t i = 0; i < d.size(); ++i) w.data<float>()[i] = w0[i] + e * d[i];
      return double(a.forward(true, step));
    };
    const double numeric = (loss_at(eps) - loss_at(-eps)) / (2.0 * eps);
    for (size_t i = 0; i < d.size(); ++i) w.data<float>()[i] = w0[i];
    std::printf("%-24s directional derivative: numeric %.6f analytic %.6f (relative %+.4f)\n", name, numeric, analytic,
                numeric / analytic - 1);
    EXPECT_NEAR(numeric, analytic, 0.02 * std::fabs(analytic)) << name << " analytic " << analytic;
  }
}

}  // namespace
}  // namespace tg
