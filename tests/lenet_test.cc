// LeNet as the reference table (section 3.2): every output shape and parameter count, bad configurations,
// and the proof that the whole CPU stack learns: a few hundred momentum steps on real Fashion-MNIST reach
// test accuracy >= 0.80.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>

#include "common/bound_net.h"
#include "common/fashion_mnist.h"
#include "terngrad/backend/backend.h"
#include "terngrad/models/registry.h"
#include "terngrad/nn/layers.h"
#include "terngrad/optim/lr_schedule.h"
#include "terngrad/optim/optimizer.h"

namespace tg {
namespace {

TEST(LeNet, ShapesAndParameterCountMatchTheReference) {
  auto be = make_backend("cpu", {1});
  Net net;
  build_model("lenet", ModelConfig{}, net);
  net.setup(*be, 64);
  struct Row {
    const char* name;
    Shape out;
    int64_t params;
  };
  const std::vector<Row> want = {
      {"conv1", {64, 28, 28, 20}, 500 + 20},
      {"conv1/relu", {64, 28, 28, 20}, 0},
      {"pool1", {64, 14, 14, 20}, 0},
      {"conv2", {64, 14, 14, 50}, 25000 + 50},
      {"conv2/relu", {64, 14, 14, 50}, 0},
      {"pool2", {64, 7, 7, 50}, 0},
      {"flatten", {64, 2450}, 0},
      {"fc3", {64, 500}, 1225000 + 500},
      {"fc3/relu", {64, 500}, 0},
      {"logits", {64, 10}, 5000 + 10},
      {"loss", {1}, 0},
  };
  auto rows = net.summary();
  ASSERT_EQ(rows.size(), want.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(rows[i].name, want[i].name);
    EXPECT_EQ(rows[i].output, want[i].out) << rows[i].name;
    EXPECT_EQ(rows[i].parameters, want[i].params) << rows[i].name;
  }
  ParameterStore store(net.param_specs(), net.state_specs(), *be);
  EXPECT_EQ(store.num_parameters(), 1256080);
  std::vector<std::string> names;
  for (const auto& p : store.param_specs()) names.push_back(p.name);
  EXPECT_EQ(names, (std::vector<std::string>{"conv1/weights", "conv1/biases", "conv2/weights", "conv2/biases",
                                             "fc3/weights", "fc3/biases", "logits/weights", "logits/biases"}));
  EXPECT_EQ(store.param_specs()[0].shape, (Shape{5, 5, 1, 20}));
  EXPECT_EQ(store.param_specs()[4].shape, (Shape{2450, 500}));
  for (const auto& p : store.param_specs())
    EXPECT_FLOAT_EQ(p.weight_decay, p.name.find("weights") != std::string::npos ? 0.0005f : 0.f) << p.name;
}

TEST(LeNet, InitializationIsSeededAndTruncated) {
  auto be = make_backend("cpu", {1});
  Net net;
  build_model("lenet", ModelConfig{}, net);
  net.setup(*be, 2);
  ParameterStore a(net.param_specs(), net.state_specs(), *be), b(net.param_specs(), net.state_specs(), *be),
      c(net.param_specs(), net.state_specs(), *be);
  a.initialize(1);
  b.initialize(1);
  c.initialize(2);
  EXPECT_EQ(0, std::memcmp(a.params().data(), b.params().data(), a.params().bytes()));
  EXPECT_NE(0, std::memcmp(a.params().data(), c.params().data(), a.params().bytes()));
  Tensor w = a.params().view("fc3/weights");  // truncated normal, stddev 0.048
  const float* p = w.data<float>();
  double sum = 0, sq = 0;
  for (int64_t i = 0; i < w.numel(); ++i) {
    ASSERT_LE(std::fabs(p[i]), 2 * 0.048f);
    sum += p[i];
    sq += double(p[i]) * p[i];
  }
  const double n = double(w.numel());
  // A normal truncated at 2 sigma has std 0.8796 sigma.
  EXPECT_NEAR(std::sqrt(sq / n - (sum / n) * (sum / n)), 0.8796 * 0.048, 0.002);
  EXPECT_NEAR(sum / n, 0.0, 0.001);
  Tensor bias = a.params().view("fc3/biases");
  for (int64_t i = 0; i < bias.numel(); ++i) ASSERT_EQ(bias.data<float>()[i], 0.f);
}

TEST(LeNet, BadConfigurationsGetOneClearLine) {
  auto be = make_backend("cpu", {1});
  try {
    Net net;
    build_model("lenet5", ModelConfig{}, net);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("known: lenet"), std::string::npos) << e.what();
  }
  ModelConfig tiny;
  tiny.image_size = 2;
  Net n2;
  EXPECT_THROW(build_model("lenet", tiny, n2), Error);
  EXPECT_THROW(make_backend("tpu"), Error);
}

TEST(Net, SpatialSizeReachingZeroNamesTheLayer) {
  auto be = make_backend("cpu", {1});
  Net net;
  net.set_input_shape(3, 3, 1);
  ConvOptions o;
  o.out_channels = 4;
  o.kernel_h = o.kernel_w = 5;
  o.padding = Padding::kValid;
  net.add(conv2d("conv_too_big", o), {"images"});
  net.add(flatten("flatten"));
  try {
    net.set_loss("flatten");
    net.setup(*be, 2);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("conv_too_big"), std::string::npos) << e.what();
  }
}

TEST(Net, NonFiniteLossIsAnErrorNamingTheStep) {
  auto be = make_backend("cpu", {1});
  testing::BoundNet m(*be, "lenet", ModelConfig{}, 2);
  Net& net = m.net;
  std::vector<float> images(2 * 28 * 28, 0.f);
  std::vector<int32_t> labels = {1, 2};
  float* bias = m.store.params().view("logits/biases").data<float>();
  bias[3] = std::numeric_limits<float>::quiet_NaN();  // a diverged parameter
  Tensor x(images.data(), Shape{2, 28, 28, 1}, DType::kF32, Device::cpu());
  Tensor y(labels.data(), Shape{2}, DType::kI32, Device::cpu());
  try {
    net.forward(x, y, true, 17);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("step 17"), std::string::npos) << e.what();
  }
  labels[1] = 10;  // outside [0, 10)
  bias[3] = 0.f;
  try {
    net.forward(x, y, true, 0);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("label 10"), std::string::npos) << e.what();
  }
}

// Top-1 accuracy of `store`'s LeNet on the whole Fashion-MNIST test set.
double test_accuracy(Backend& be, ParameterStore& store, const testing::IdxDataset& test) {
  const int64_t batch = 500;
  Net net;
  build_model("lenet", ModelConfig{}, net);
  net.setup(be, batch);
  net.bind(store);
  int64_t correct = 0;
  for (int64_t b = 0; b + batch <= test.count; b += batch) {
    Tensor x(const_cast<float*>(test.images.data()) + b * 784, Shape{batch, 28, 28, 1}, DType::kF32, Device::cpu());
    Tensor y(const_cast<int32_t*>(test.labels.data()) + b, Shape{batch}, DType::kI32, Device::cpu());
    net.forward(x, y, false);
    const float* logits = net.tensor(net.logits_name()).data<float>();
    for (int64_t i = 0; i < batch; ++i) {
      const float* row = logits + i * 10;
      correct += (std::max_element(row, row + 10) - row) == test.labels[b + i];
    }
  }
  return double(correct) / double(test.count);
}

TEST(LeNet, LearnsFashionMnistOnTheCpu) {
  if (testing::fashion_mnist_dir().empty())
    GTEST_SKIP() << "Fashion-MNIST not installed (scripts/setup.sh installs dataset-fashion-mnist)";
  const testing::IdxDataset train = testing::load_fashion_mnist("train");
  const testing::IdxDataset test = testing::load_fashion_mnist("t10k");
  ASSERT_EQ(train.count, 60000);
  ASSERT_EQ(test.count, 10000);

  auto be = make_backend("cpu", {2});
  const int64_t batch = 64, steps = 400;
  testing::BoundNet m(*be, "lenet", ModelConfig{}, batch);
  Net& net = m.net;
  ParameterStore& store = m.store;
  Optimizer opt(testing::momentum_sgd(), store.params(), *be);

  std::vector<int64_t> order(train.count);
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(7);
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<float> images(batch * 784);
  std::vector<int32_t> labels(batch);
  Tensor x(images.data(), Shape{batch, 28, 28, 1}, DType::kF32, Device::cpu());
  Tensor y(labels.data(), Shape{batch}, DType::kI32, Device::cpu());

  float first_loss = 0, last_loss = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t step = 0; step < steps; ++step) {
    for (int64_t i = 0; i < batch; ++i) {
      int64_t r = order[(step * batch + i) % train.count];
      std::copy_n(train.images.begin() + r * 784, 784, images.begin() + i * 784);
      labels[i] = train.labels[r];
    }
    float loss = net.forward(x, y, true, static_cast<uint32_t>(step));
    net.backward();
    opt.apply(*be, store.params(), net.grads(), step, 0.01f);
    if (step == 0) first_loss = loss;
    last_loss = loss;
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double acc = test_accuracy(*be, store, test);
  std::printf("LeNet/Fashion-MNIST: %lld steps of %lld, loss %.3f -> %.3f, test accuracy %.4f, %.0f images/sec\n",
              (long long)steps, (long long)batch, first_loss, last_loss, acc, steps * batch / secs);
  EXPECT_LT(last_loss, first_loss);
  EXPECT_GE(acc, 0.80);
}

}  // namespace
}  // namespace tg
