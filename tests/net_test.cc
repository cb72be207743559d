// Net: fan-out gradients accumulate (a tensor read by two branches gets the sum of both gradients, checked
// against central differences of the whole net's loss), weight decay enters loss and gradient, and the
// Xavier and He initializers draw the right distributions.
#include "terngrad/nn/net.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

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

// images (N, 1, 1, 6) -> flatten -> fc pre (6) = x -> { fc a, fc b, fc c } (6 each) -> add -> fc logits 4 -> loss:
// x is read by three layers, so the order in which their gradient parts are summed shows in the last bits.
void build_three_reader_net(Net& net) {
  net.set_input_shape(1, 1, 6);
  net.add(flatten("flatten"), {"images"});
  FcOptions f;
  f.out = 6;
  uint32_t seed = 10;
  for (const char* name : {"pre", "a", "b", "c"}) {
    f.weight_init = Initializer::truncated_normal(0.7f, seed++);
    f.bias = false;
    net.add(fully_connected(name, f), {std::string(name) == "pre" ? "flatten" : "pre"});
  }
  net.add(add("sum"), {"a", "b", "c"});
  f.out = 4;
  f.weight_init = Initializer::truncated_normal(0.7f, seed);
  net.set_logits(net.add(fully_connected("logits", f)));
  net.set_loss(net.add(softmax_cross_entropy("loss"), {"logits", "labels"}));
}

// The gradient of a tensor read by several layers is the last reader's part plus each earlier reader's, in
// backward order: ((p_c + p_b) + p_a). Redone here op by op with the backend's own calls; the forward reader
// order ((p_a + p_b) + p_c) gives other bits on this data, so the test tells the two apart.
TEST(Net, FanOutPartsAreSummedInBackwardOrder) {
  auto be = make_backend("cpu", {1});
  testing::BoundNet m(*be, build_three_reader_net, 8, 5);
  std::vector<float> images(8 * 6);
  for (size_t i = 0; i < images.size(); ++i) images[i] = std::sin(1.3f * float(i) + 0.2f) * 3.f;
  std::vector<int32_t> labels = {0, 1, 2, 3, 3, 2, 1, 0};
  const Tensor x(images.data(), Shape{8, 1, 1, 6}, DType::kF32, Device::cpu());
  const Tensor y(labels.data(), Shape{8}, DType::kI32, Device::cpu());
  m.net.forward(x, y, true);
  m.net.backward();

  // The same backward by hand.
  const int64_t n = 8;
  auto host = [&](Shape s) { return std::make_shared<std::vector<float>>(static_cast<size_t>(s.numel())); };
  auto view = [](std::vector<float>& v, Shape s) { return Tensor(v.data(), s, DType::kF32, Device::cpu()); };
  auto w = [&](const char* name) { return m.store.params().view(std::string(name) + "/weights"); };
  InnerProductDesc d6{n, 6, 6, false}, d4{n, 6, 4, false};
  auto pre = host({n, 6}), a = host({n, 6}), b = host({n, 6}), c = host({n, 6}), sum = host({n, 6});
  auto logits = host({n, 4}), probs = host({n, 4}), losses = host({n});
  const Tensor flat(images.data(), Shape{n, 6}, DType::kF32, Device::cpu());
  be->inner_product_forward(d6, flat, w("pre"), Tensor(), view(*pre, {n, 6}));
  be->inner_product_forward(d6, view(*pre, {n, 6}), w("a"), Tensor(), view(*a, {n, 6}));
  be->inner_product_forward(d6, view(*pre, {n, 6}), w("b"), Tensor(), view(*b, {n, 6}));
  be->inner_product_forward(d6, view(*pre, {n, 6}), w("c"), Tensor(), view(*c, {n, 6}));
  be->add(view(*a, {n, 6}), view(*b, {n, 6}), view(*sum, {n, 6}));
  be->add(view(*sum, {n, 6}), view(*c, {n, 6}), view(*sum, {n, 6}));
  be->inner_product_forward(d4, view(*sum, {n, 6}), w("logits"), Tensor(), view(*logits, {n, 4}));
  be->softmax_xent_forward(view(*logits, {n, 4}), y, 0.f, view(*probs, {n, 4}), view(*losses, {n}));
  auto dlogits = host({n, 4}), dsum = host({n, 6}), dw4 = host({6, 4}), dw6 = host({6, 6});
  be->softmax_xent_backward(view(*probs, {n, 4}), y, 0.f, 1.f / float(n), view(*dlogits, {n, 4}));
  be->inner_product_backward(d4, view(*sum, {n, 6}), w("logits"), view(*dlogits, {n, 4}), view(*dsum, {n, 6}),
                             view(*dw4, {6, 4}), Tensor());
  std::map<std::string, std::shared_ptr<std::vector<float>>> part;
  for (const char* r : {"a", "b", "c"}) {
    part[r] = host({n, 6});
    be->inner_product_backward(d6, view(*pre, {n, 6}), w(r), view(*dsum, {n, 6}), view(*part[r], {n, 6}),
                               view(*dw6, {6, 6}), Tensor());
  }
  auto pre_weight_gradient = [&](const std::vector<const char*>& order) {
    auto g = host({n, 6});
    be->add(view(*part[order[0]], {n, 6}), view(*part[order[1]], {n, 6}), view(*g, {n, 6}));
    be->add(view(*g, {n, 6}), view(*part[order[2]], {n, 6}), view(*g, {n, 6}));
    std::vector<float> dw(36);
    be->inner_product_backward(d6, flat, w("pre"), view(*g, {n, 6}), Tensor(), view(dw, {6, 6}), Tensor());
    return dw;
  };
  const std::vector<float> backward_order = pre_weight_gradient({"c", "b", "a"});
  const std::vector<float> forward_order = pre_weight_gradient({"a", "b", "c"});
  ASSERT_NE(backward_order, forward_order) << "the data do not tell the two orders apart";
  const Tensor got = m.net.grads().view("pre/weights");
  EXPECT_EQ(std::vector<float>(got.data<float>(), got.data<float>() + 36), backward_order);
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
