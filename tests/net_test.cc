// Net: fan-out gradients accumulate (a tensor read by two branches gets the sum of both gradients, checked
// against central differences of the whole net's loss), weight decay enters loss and gradient, and the
// Xavier and He initializers draw the right distributions.
#include "terngrad/nn/net.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/bound_net.h"
#include "terngrad/backend/backend.h"
#include "terngrad/nn/layers.h"

namespace tg {
namespace {

// images (2, 5, 5, 3) -> conv a 1x1x4 -> relu -> { conv b 3x3x4, conv c 1x1x4 } -> add -> flatten -> fc 3 -> loss
void build_fanout_net(Net& net, float wd) {
  net.set_input_shape(5, 5, 3);
  ConvOptions o;
  o.out_channels = 4;
  o.weight_decay = wd;
  o.weight_init = Initializer::truncated_normal(0.5f, 1);
  o.bias_init = 0.1f;
  net.add(conv2d("a", o), {"images"});
  net.add(relu("a/relu"));
  o.kernel_h = o.kernel_w = 3;
  o.weight_init = Initializer::truncated_normal(0.5f, 2);
  net.add(conv2d("b", o), {"a/relu"});
  o.kernel_h = o.kernel_w = 1;
  o.weight_init = Initializer::truncated_normal(0.5f, 3);
  net.add(conv2d("c", o), {"a/relu"});
  net.add(add("sum"), {"b", "c"});
  net.add(flatten("flatten"));
  FcOptions f;
  f.out = 3;
  f.weight_decay = wd;
  f.weight_init = Initializer::truncated_normal(0.2f, 4);
  net.set_logits(net.add(fully_connected("logits", f)));
  net.set_loss(net.add(softmax_cross_entropy("loss"), {"logits", "labels"}));
}

TEST(Net, FanOutGradientsAccumulateAndMatchCentralDifferences) {
  auto be = make_backend("cpu", {1});
  const auto build = [](Net& n) { build_fanout_net(n, 0.01f); };
  testing::BoundNet m(*be, build, 2, 3);
  Net& net = m.net;
  ParameterStore& store = m.store;
  std::vector<float> images(2 * 5 * 5 * 3);
  for (size_t i = 0; i < images.size(); ++i) images[i] = std::sin(0.7f * float(i)) + 0.3f;
  std::vector<int32_t> labels = {2, 0};
  Tensor x(images.data(), Shape{2, 5, 5, 3}, DType::kF32, Device::cpu());
  Tensor y(labels.data(), Shape{2}, DType::kI32, Device::cpu());
  net.forward(x, y, true);
  net.backward();

  // Every weight of conv a (upstream of the fan-out) and a sample of the others.
  int checked = 0;
  for (const char* name : {"a/weights", "a/biases", "b/weights", "c/weights", "logits/weights"}) {
    Tensor w = store.params().view(name);
    Tensor g = net.grads().view(name);
    const int64_t stride = std::max<int64_t>(1, w.numel() / 12);
    for (int64_t i = 0; i < w.numel(); i += stride) {
      float* p = w.data<float>() + i;
      const float saved = *p, h = 1e-2f;
      *p = saved + h;
      const double up = net.forward(x, y, true);
      *p = saved - h;
      const double down = net.forward(x, y, true);
      *p = saved;
      const double numeric = (up - down) / (2 * h);
      const double analytic = g.data<float>()[i];
      EXPECT_NEAR(analytic, numeric, 2e-2 * std::max({std::fabs(analytic), std::fabs(numeric), 1e-1}))
          << name << "[" << i << "]";
      ++checked;
    }
  }
  EXPECT_GT(checked, 40);
}

TEST(Net, WeightDecayEntersLossAndGradient) {
  auto be = make_backend("cpu", {1});
  Net with, without;
  build_fanout_net(with, 0.5f);
  build_fanout_net(without, 0.f);
  with.setup(*be, 2);
  without.setup(*be, 2);
  ParameterStore store(with.param_specs(), with.state_specs(), *be);
  store.initialize(3);
  with.bind(store);
  without.bind(store);
  std::vector<float> images(2 * 75, 0.25f);
  std::vector<int32_t> labels = {1, 1};
  Tensor x(images.data(), Shape{2, 5, 5, 3}, DType::kF32, Device::cpu());
  Tensor y(labels.data(), Shape{2}, DType::kI32, Device::cpu());
  const float lw = with.forward(x, y, true);
  with.backward();
  const float l0 = without.forward(x, y, true);
  without.backward();
  double reg = 0;
  for (const char* name : {"a/weights", "b/weights", "c/weights", "logits/weights"})
    reg += 0.5 * 0.5 * be->sum_squares(store.params().view(name));
  EXPECT_NEAR(lw - l0, reg, 1e-4 * reg);
  EXPECT_NEAR(with.last_regularization(), reg, 1e-4 * reg);
  Tensor w = store.params().view("b/weights");
  for (int64_t i = 0; i < w.numel(); ++i)
    ASSERT_NEAR(with.grads().view("b/weights").data<float>()[i] - without.grads().view("b/weights").data<float>()[i],
                0.5f * w.data<float>()[i], 1e-5f);
  // biases carry no decay
  EXPECT_EQ(0, std::memcmp(with.grads().view("b/biases").raw(), without.grads().view("b/biases").raw(), 16));
}

TEST(Initializer, XavierAndHeDrawTheirDistributions) {
  std::vector<float> buf(300 * 200);
  Tensor t(buf.data(), Shape{300, 200}, DType::kF32, Device::cpu());
  initialize_host(Initializer::xavier(1), t, 7, 0);
  const double a = std::sqrt(6.0 / 500);
  double sq = 0;
  for (float v : buf) {
    ASSERT_LE(std::fabs(v), a);
    sq += double(v) * v;
  }
  EXPECT_NEAR(std::sqrt(sq / buf.size()), a / std::sqrt(3.0), 0.01 * a);  // uniform(-a, a) has std a/sqrt(3)

  std::vector<float> cbuf(3 * 3 * 64 * 128);
  Tensor c(cbuf.data(), Shape{3, 3, 64, 128}, DType::kF32, Device::cpu());
  initialize_host(Initializer::he(2), c, 7, 0);
  const double s = std::sqrt(2.0 / (3 * 3 * 64));
  sq = 0;
  for (float v : cbuf) {
    ASSERT_LE(std::fabs(v), 2 * s + 1e-6);
    sq += double(v) * v;
  }
  EXPECT_NEAR(std::sqrt(sq / cbuf.size()), 0.8796 * s, 0.01 * s);  // normal truncated at 2 sigma
  std::vector<float> again(cbuf.size());
  initialize_host(Initializer::he(2), Tensor(again.data(), c.shape(), DType::kF32, Device::cpu()), 7, 0);
  EXPECT_EQ(again, cbuf);
}

}  // namespace
}  // namespace tg
