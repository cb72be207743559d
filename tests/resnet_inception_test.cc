// ResNet-50 v1.5 and Inception-v3: every output shape and parameter count at the real input sizes (224 and
// 299; shape inference only), the totals torchvision reports, parameter names / decay / init options, the
// minimum image sizes, and a CPU smoke test per network at a reduced size on one thread (ResNet-50 64x64
// batch 2, Inception-v3 75x75 batch 4): forward, backward and momentum update on a fixed batch with a finite,
// decreasing loss; batch-norm moving statistics updated in training, left alone and used in inference;
// Inception-v3's aux loss counted with weight 0.4.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <random>

#include "common/bound_net.h"
#include "terngrad/backend/backend.h"
#include "terngrad/models/registry.h"
#include "terngrad/optim/optimizer.h"

namespace tg {
namespace {

struct Expect {
  Shape out;
  int64_t params;
};
using ExpectMap = std::map<std::string, Expect>;

// conv without bias (kh x kw, cin -> cout) + BN with gamma and beta [+ ReLU], output (n, hw, hw, cout).
void expect_conv_bn(ExpectMap& m, const std::string& name, int64_t n, int64_t hw, int64_t cin, int64_t cout, int64_t kh,
                    int64_t kw, bool with_relu = true) {
  const Shape s{n, hw, hw, cout};
  m[name] = {s, kh * kw * cin * cout};
  m[name + "/BatchNorm"] = {s, 2 * cout};
  if (with_relu) m[name + "/relu"] = {s, 0};
}

// Every layer of the net is expected, with its output shape and parameter count, and nothing else is there.
void check_layers(const Net& net, const ExpectMap& want) {
  const auto rows = net.summary();
  EXPECT_EQ(rows.size(), want.size());
  for (const auto& r : rows) {
    auto it = want.find(r.name);
    if (it == want.end()) {
      ADD_FAILURE() << "unexpected layer " << r.name << " " << r.output.str();
      continue;
    }
    EXPECT_EQ(r.output, it->second.out) << r.name;
    EXPECT_EQ(r.parameters, it->second.params) << r.name;
  }
}

int64_t count_parameters(const Net& net) {
  int64_t n = 0;
  for (const auto& p : net.param_specs()) n += p.shape.numel();
  return n;
}

ModelConfig imagenet_config(int64_t image_size, int64_t classes) {
  ModelConfig c;
  c.image_size = image_size;
  c.channels = 3;
  c.num_classes = classes;
  c.weight_decay = 1e-4f;
  return c;
}

// ---- ResNet-50 v1.5 -------------------------------------------------------------------------------------------

ExpectMap resnet50_layers(int64_t classes) {
  ExpectMap m;
  expect_conv_bn(m, "conv1", 1, 112, 3, 64, 7, 7);
  m["pool1"] = {{1, 56, 56, 64}, 0};
  const int units[4] = {3, 4, 6, 3};
  const int64_t widths[4] = {64, 128, 256, 512}, out_hw[4] = {56, 28, 14, 7};
  int64_t cin = 64, in_hw = 56;
  for (int b = 0; b < 4; ++b) {
    for (int u = 0; u < units[b]; ++u) {
      const std::string s = "block" + std::to_string(b + 1) + "/unit_" + std::to_string(u + 1);
      const int64_t w = widths[b], out = 4 * w, hw = out_hw[b];
      expect_conv_bn(m, s + "/conv1", 1, in_hw, cin, w, 1, 1);  // v1.5: the 1x1 keeps the input resolution
      expect_conv_bn(m, s + "/conv2", 1, hw, w, w, 3, 3);       // ... and the 3x3 carries the stride
      expect_conv_bn(m, s + "/conv3", 1, hw, w, out, 1, 1, false);
      if (u == 0) expect_conv_bn(m, s + "/shortcut", 1, hw, cin, out, 1, 1, false);
      m[s + "/add"] = {{1, hw, hw, out}, 0};
      m[s + "/relu"] = {{1, hw, hw, out}, 0};
      cin = out;
      in_hw = hw;
    }
  }
  m["pool5"] = {{1, 1, 1, 2048}, 0};
  m["flatten"] = {{1, 2048}, 0};
  m["logits"] = {{1, classes}, 2048 * classes + classes};
  m["loss"] = {{1}, 0};
  return m;
}

TEST(ResNet50, EveryShapeAndParameterCountAt224MatchesTorchvision) {
  auto be = make_backend("cpu", {1});
  for (int64_t classes : {1000, 1001}) {
    Net net;
    build_model("resnet50", imagenet_config(224, classes), net);
    net.setup(*be, 1);
    check_layers(net, resnet50_layers(classes));
    EXPECT_EQ(count_parameters(net), classes == 1000 ? 25557032 : 25559081);
    // 53 convolutions + 53 BN (gamma, beta) + logits (weights, biases)
    const auto specs = net.param_specs();
    ASSERT_EQ(specs.size(), 53u * 3 + 2);
    EXPECT_EQ(specs[specs.size() - 2].name, "logits/weights");
    EXPECT_EQ(specs.back().name, "logits/biases");
  }
}

TEST(ResNet50, NamesDecayInitAndZeroGammaOption) {
  auto be = make_backend("cpu", {1});
  for (bool zero_gamma : {false, true}) {
    ModelConfig c = imagenet_config(32, 10);
    c.zero_init_last_bn_gamma = zero_gamma;
    Net net;
    build_model("resnet50", c, net);
    net.setup(*be, 1);
    int conv_weights = 0, zero_gammas = 0, one_gammas = 0;
    for (const auto& p : net.param_specs()) {
      const bool is_weight = p.name.size() > 8 && p.name.compare(p.name.size() - 8, 8, "/weights") == 0;
      EXPECT_FLOAT_EQ(p.weight_decay, is_weight ? 1e-4f : 0.f) << p.name;
      if (is_weight && p.shape.rank() == 4) {
        ++conv_weights;
        EXPECT_EQ(p.init.kind, Initializer::Kind::kHe) << p.name;
      }
      if (p.name.find("/gamma") != std::string::npos) {
        ASSERT_EQ(p.init.kind, Initializer::Kind::kConstant);
        const bool last_of_block = p.name.find("/conv3/BatchNorm/gamma") != std::string::npos;
        EXPECT_EQ(p.init.value, (zero_gamma && last_of_block) ? 0.f : 1.f) << p.name;
        (p.init.value == 0.f ? zero_gammas : one_gammas)++;
      }
    }
    EXPECT_EQ(conv_weights, 53);
    EXPECT_EQ(zero_gammas, zero_gamma ? 16 : 0);  // one per bottleneck
    EXPECT_EQ(zero_gammas + one_gammas, 53);
    // At the minimum size 32 (the network's total stride) the last stage is 1x1.
    const auto rows = net.summary();
    for (const auto& r : rows)
      if (r.name == "pool5" || r.name == "block4/unit_3/relu") {
        EXPECT_EQ(r.output, (Shape{1, 1, 1, 2048})) << r.name;
      }
  }
  Net net;
  build_model("resnet50", imagenet_config(224, 1000), net);
  net.setup(*be, 1);
  std::map<std::string, Shape> shapes;
  for (const auto& p : net.param_specs()) shapes[p.name] = p.shape;
  EXPECT_EQ(shapes.at("conv1/weights"), (Shape{7, 7, 3, 64}));
  EXPECT_EQ(shapes.at("block2/unit_1/conv2/weights"), (Shape{3, 3, 128, 128}));
  EXPECT_EQ(shapes.at("block2/unit_1/shortcut/weights"), (Shape{1, 1, 256, 512}));
  EXPECT_EQ(shapes.at("block4/unit_3/conv3/BatchNorm/gamma"), (Shape{2048}));
  EXPECT_EQ(shapes.at("logits/weights"), (Shape{2048, 1000}));
  EXPECT_EQ(shapes.count("conv1/biases"), 0u);  // convolutions have no bias
}

// ---- Inception-v3 ---------------------------------------------------------------------------------------------

void expect_block_a(ExpectMap& m, const std::string& s, int64_t cin, int64_t pool_features) {
  expect_conv_bn(m, s + "/Branch_0/Conv2d_0a_1x1", 1, 35, cin, 64, 1, 1);
  expect_conv_bn(m, s + "/Branch_1/Conv2d_0a_1x1", 1, 35, cin, 48, 1, 1);
  expect_conv_bn(m, s + "/Branch_1/Conv2d_0b_5x5", 1, 35, 48, 64, 5, 5);
  expect_conv_bn(m, s + "/Branch_2/Conv2d_0a_1x1", 1, 35, cin, 64, 1, 1);
  expect_conv_bn(m, s + "/Branch_2/Conv2d_0b_3x3", 1, 35, 64, 96, 3, 3);
  expect_conv_bn(m, s + "/Branch_2/Conv2d_0c_3x3", 1, 35, 96, 96, 3, 3);
  m[s + "/Branch_3/AvgPool_0a_3x3"] = {{1, 35, 35, cin}, 0};
  expect_conv_bn(m, s + "/Branch_3/Conv2d_0b_1x1", 1, 35, cin, pool_features, 1, 1);
  m[s] = {{1, 35, 35, 64 + 64 + 96 + pool_features}, 0};
}

void expect_block_c(ExpectMap& m, const std::string& s, int64_t c7) {
  expect_conv_bn(m, s + "/Branch_0/Conv2d_0a_1x1", 1, 17, 768, 192, 1, 1);
  expect_conv_bn(m, s + "/Branch_1/Conv2d_0a_1x1", 1, 17, 768, c7, 1, 1);
  expect_conv_bn(m, s + "/Branch_1/Conv2d_0b_1x7", 1, 17, c7, c7, 1, 7);
  expect_conv_bn(m, s + "/Branch_1/Conv2d_0c_7x1", 1, 17, c7, 192, 7, 1);
  expect_conv_bn(m, s + "/Branch_2/Conv2d_0a_1x1", 1, 17, 768, c7, 1, 1);
  expect_conv_bn(m, s + "/Branch_2/Conv2d_0b_7x1", 1, 17, c7, c7, 7, 1);
  expect_conv_bn(m, s + "/Branch_2/Conv2d_0c_1x7", 1, 17, c7, c7, 1, 7);
  expect_conv_bn(m, s + "/Branch_2/Conv2d_0d_7x1", 1, 17, c7, c7, 7, 1);
  expect_conv_bn(m, s + "/Branch_2/Conv2d_0e_1x7", 1, 17, c7, 192, 1, 7);
  m[s + "/Branch_3/AvgPool_0a_3x3"] = {{1, 17, 17, 768}, 0};
  expect_conv_bn(m, s + "/Branch_3/Conv2d_0b_1x1", 1, 17, 768, 192, 1, 1);
  m[s] = {{1, 17, 17, 768}, 0};
}

void expect_block_e(ExpectMap& m, const std::string& s, int64_t cin) {
  expect_conv_bn(m, s + "/Branch_0/Conv2d_0a_1x1", 1, 8, cin, 320, 1, 1);
  expect_conv_bn(m, s + "/Branch_1/Conv2d_0a_1x1", 1, 8, cin, 384, 1, 1);
  expect_conv_bn(m, s + "/Branch_1/Conv2d_0b_1x3", 1, 8, 384, 384, 1, 3);
  expect_conv_bn(m, s + "/Branch_1/Conv2d_0b_3x1", 1, 8, 384, 384, 3, 1);
  expect_conv_bn(m, s + "/Branch_2/Conv2d_0a_1x1", 1, 8, cin, 448, 1, 1);
  expect_conv_bn(m, s + "/Branch_2/Conv2d_0b_3x3", 1, 8, 448, 384, 3, 3);
  expect_conv_bn(m, s + "/Branch_2/Conv2d_0c_1x3", 1, 8, 384, 384, 1, 3);
  expect_conv_bn(m, s + "/Branch_2/Conv2d_0d_3x1", 1, 8, 384, 384, 3, 1);
  m[s + "/Branch_3/AvgPool_0a_3x3"] = {{1, 8, 8, cin}, 0};
  expect_conv_bn(m, s + "/Branch_3/Conv2d_0b_1x1", 1, 8, cin, 192, 1, 1);
  m[s] = {{1, 8, 8, 2048}, 0};
}

// torchvision's Inception3 at 299x299 (its BasicConv2d = conv without bias + BN), TF-slim's names.
ExpectMap inception_v3_layers(int64_t classes, bool aux) {
  ExpectMap m;
  expect_conv_bn(m, "Conv2d_1a_3x3", 1, 149, 3, 32, 3, 3);
  expect_conv_bn(m, "Conv2d_2a_3x3", 1, 147, 32, 32, 3, 3);
  expect_conv_bn(m, "Conv2d_2b_3x3", 1, 147, 32, 64, 3, 3);
  m["MaxPool_3a_3x3"] = {{1, 73, 73, 64}, 0};
  expect_conv_bn(m, "Conv2d_3b_1x1", 1, 73, 64, 80, 1, 1);
  expect_conv_bn(m, "Conv2d_4a_3x3", 1, 71, 80, 192, 3, 3);
  m["MaxPool_5a_3x3"] = {{1, 35, 35, 192}, 0};
  expect_block_a(m, "Mixed_5b", 192, 32);
  expect_block_a(m, "Mixed_5c", 256, 64);
  expect_block_a(m, "Mixed_5d", 288, 64);
  // Mixed_6a: 35 -> 17
  expect_conv_bn(m, "Mixed_6a/Branch_0/Conv2d_1a_3x3", 1, 17, 288, 384, 3, 3);
  expect_conv_bn(m, "Mixed_6a/Branch_1/Conv2d_0a_1x1", 1, 35, 288, 64, 1, 1);
  expect_conv_bn(m, "Mixed_6a/Branch_1/Conv2d_0b_3x3", 1, 35, 64, 96, 3, 3);
  expect_conv_bn(m, "Mixed_6a/Branch_1/Conv2d_1a_3x3", 1, 17, 96, 96, 3, 3);
  m["Mixed_6a/Branch_2/MaxPool_1a_3x3"] = {{1, 17, 17, 288}, 0};
  m["Mixed_6a"] = {{1, 17, 17, 768}, 0};
  expect_block_c(m, "Mixed_6b", 128);
  expect_block_c(m, "Mixed_6c", 160);
  expect_block_c(m, "Mixed_6d", 160);
  expect_block_c(m, "Mixed_6e", 192);
  if (aux) {
    m["AuxLogits/AvgPool_1a_5x5"] = {{1, 5, 5, 768}, 0};
    expect_conv_bn(m, "AuxLogits/Conv2d_1b_1x1", 1, 5, 768, 128, 1, 1);
    expect_conv_bn(m, "AuxLogits/Conv2d_2a_5x5", 1, 1, 128, 768, 5, 5);
    m["AuxLogits/flatten"] = {{1, 768}, 0};
    m["AuxLogits/logits"] = {{1, classes}, 768 * classes + classes};
    m["AuxLogits/loss"] = {{1}, 0};
  }
  // Mixed_7a: 17 -> 8
  expect_conv_bn(m, "Mixed_7a/Branch_0/Conv2d_0a_1x1", 1, 17, 768, 192, 1, 1);
  expect_conv_bn(m, "Mixed_7a/Branch_0/Conv2d_1a_3x3", 1, 8, 192, 320, 3, 3);
  expect_conv_bn(m, "Mixed_7a/Branch_1/Conv2d_0a_1x1", 1, 17, 768, 192, 1, 1);
  expect_conv_bn(m, "Mixed_7a/Branch_1/Conv2d_0b_1x7", 1, 17, 192, 192, 1, 7);
  expect_conv_bn(m, "Mixed_7a/Branch_1/Conv2d_0c_7x1", 1, 17, 192, 192, 7, 1);
  expect_conv_bn(m, "Mixed_7a/Branch_1/Conv2d_1a_3x3", 1, 8, 192, 192, 3, 3);
  m["Mixed_7a/Branch_2/MaxPool_1a_3x3"] = {{1, 8, 8, 768}, 0};
  m["Mixed_7a"] = {{1, 8, 8, 1280}, 0};
  expect_block_e(m, "Mixed_7b", 1280);
  expect_block_e(m, "Mixed_7c", 2048);
  m["Logits/AvgPool_1a"] = {{1, 1, 1, 2048}, 0};
  m["Logits/Dropout_1b"] = {{1, 1, 1, 2048}, 0};
  m["Logits/flatten"] = {{1, 2048}, 0};
  m["logits"] = {{1, classes}, 2048 * classes + classes};
  m["loss"] = {{1}, 0};
  return m;
}

TEST(InceptionV3, EveryShapeAndParameterCountAt299MatchesTorchvision) {
  auto be = make_backend("cpu", {1});
  const std::map<std::pair<bool, int64_t>, int64_t> want = {
      {{true, 1000}, 27161264}, {{true, 1001}, 27164082}, {{false, 1000}, 23834568}, {{false, 1001}, 23836617}};
  for (const auto& [key, total] : want) {
    const auto [aux, classes] = key;
    ModelConfig c = imagenet_config(299, classes);
    c.aux_logits = aux;
    Net net;
    build_model("inception_v3", c, net);
    net.setup(*be, 1);
    SCOPED_TRACE(::testing::Message() << "aux " << aux << ", " << classes << " classes");
    check_layers(net, inception_v3_layers(classes, aux));
    EXPECT_EQ(count_parameters(net), total);
    const auto specs = net.param_specs();
    // The main logits are the last two parameter tensors (what --quantize_logits refers to).
    EXPECT_EQ(specs[specs.size() - 2].name, "logits/weights");
    EXPECT_EQ(specs.back().name, "logits/biases");
    for (const auto& p : specs) {
      const bool is_weight = p.name.size() > 8 && p.name.compare(p.name.size() - 8, 8, "/weights") == 0;
      EXPECT_FLOAT_EQ(p.weight_decay, is_weight ? 1e-4f : 0.f) << p.name;
    }
  }
}

TEST(InceptionV3, ImageSizeBelow75IsOneClearErrorAnd75IsTheTrueMinimum) {
  auto be = make_backend("cpu", {1});
  Net net;
  try {
    build_model("inception_v3", imagenet_config(74, 1001), net);
    FAIL() << "image size 74 accepted";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("--image_size 74"), std::string::npos) << msg;
    EXPECT_NE(msg.find("minimum 75"), std::string::npos) << msg;
  }
  // The minimum is the architecture's: at 74 the last stride-2 VALID reduction (Mixed_7a) has no output.
  Net raw;
  build_inception_v3(raw, imagenet_config(74, 1001));
  try {
    raw.setup(*be, 1);
    FAIL() << "a 74x74 Inception-v3 set up";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Mixed_7a"), std::string::npos) << e.what();
  }
  Net resnet;
  try {
    build_model("resnet50", imagenet_config(31, 1001), resnet);
    FAIL() << "image size 31 accepted for resnet50";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("minimum 32"), std::string::npos) << e.what();
  }
}

// ---- CPU smoke tests --------------------------------------------------------------------------------------------

std::vector<float> host_copy(Backend& be, const Tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  be.copy(Tensor(v.data(), t.shape(), DType::kF32, Device::cpu()), t);
  return v;
}

std::vector<uint8_t> slab_bytes(Backend& be, const Slab& slab) {
  const Tensor flat = slab.flat_bytes();
  std::vector<uint8_t> v(static_cast<size_t>(flat.numel()));
  be.copy(Tensor(v.data(), flat.shape(), DType::kU8, Device::cpu()), flat);
  return v;
}

bool all_finite(const std::vector<float>& v) {
  for (float x : v)
    if (!std::isfinite(x)) return false;
  return true;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(double(a[i]) - double(b[i])));
  return d;
}

struct SmokeSpec {
  std::string net;
  ModelConfig config;
  int steps;
  float learning_rate;
  std::string probe_bn;  // a BN layer whose moving statistics the test checks and perturbs
  int64_t batch = 2;
};

// Trains `steps` momentum steps on one fixed batch on one CPU thread, then checks inference mode.
void run_smoke(const SmokeSpec& spec, const std::function<void(Net&, float)>& check_loss_terms = {}) {
  auto be = make_backend("cpu", {1});
  const int64_t batch = spec.batch, size = spec.config.image_size, classes = spec.config.num_classes;
  testing::BoundNet m(*be, spec.net, spec.config, batch);
  Net& net = m.net;
  ParameterStore& store = m.store;
  Optimizer opt(testing::momentum_sgd(), store.params(), *be);

  std::vector<float> images(static_cast<size_t>(batch * size * size * 3));
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> uni(-1.f, 1.f);
  for (float& v : images) v = uni(rng);
  std::vector<int32_t> labels(static_cast<size_t>(batch));
  for (int64_t i = 0; i < batch; ++i) labels[i] = static_cast<int32_t>((3 + 7 * i) % classes);
  Tensor x(images.data(), Shape{batch, size, size, 3}, DType::kF32, Device::cpu());
  Tensor y(labels.data(), Shape{batch}, DType::kI32, Device::cpu());

  const std::string mean_name = spec.probe_bn + "/moving_mean", var_name = spec.probe_bn + "/moving_variance";
  const std::vector<float> state0 = host_copy(*be, store.state().view(mean_name));
  const std::vector<float> var0 = host_copy(*be, store.state().view(var_name));
  for (float v : state0) ASSERT_EQ(v, 0.f);
  for (float v : var0) ASSERT_EQ(v, 1.f);

  std::vector<float> losses;
  const auto t0 = std::chrono::steady_clock::now();
  for (int step = 0; step < spec.steps; ++step) {
    const float loss = net.forward(x, y, true, static_cast<uint32_t>(step));
    ASSERT_TRUE(std::isfinite(loss)) << "step " << step;
    if (step == 0 && check_loss_terms) check_loss_terms(net, loss);
    net.backward();
    if (step == 0) {
      const std::vector<float> g = host_copy(*be, net.grads().view(store.param_specs().front().name));
      ASSERT_TRUE(all_finite(g));
      EXPECT_GT(max_abs_diff(g, std::vector<float>(g.size(), 0.f)), 0.0) << "first layer got no gradient";
    }
    opt.apply(*be, store.params(), net.grads(), step, spec.learning_rate);
    losses.push_back(loss);
    std::printf("  step %d: total %.4f = cross-entropy %.4f + aux/regularization %.4f\n", step, loss,
                net.last_cross_entropy(), loss - net.last_cross_entropy());
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::string trace;
  for (float l : losses) trace += std::to_string(l) + " ";
  std::printf("%s %lldx%lld, batch %lld, 1 thread: losses %s(%.2f s/step)\n", spec.net.c_str(), (long long)size,
              (long long)size, (long long)batch, trace.c_str(), secs / spec.steps);
  EXPECT_LT(losses.back(), losses.front()) << trace;
  EXPECT_TRUE(all_finite(host_copy(*be, store.params().view(store.param_specs().back().name))));

  // Training moved the moving statistics away from their initial values.
  const std::vector<float> mean_trained = host_copy(*be, store.state().view(mean_name));
  const std::vector<float> var_trained = host_copy(*be, store.state().view(var_name));
  EXPECT_GT(max_abs_diff(mean_trained, state0), 0.0) << mean_name;
  EXPECT_GT(max_abs_diff(var_trained, var0), 0.0) << var_name;

  // Inference: deterministic, finite, leaves the state alone, differs from training mode (batch statistics),
  // and depends on the moving statistics.
  const std::vector<uint8_t> all_state = slab_bytes(*be, store.state());
  const float infer_loss = net.forward(x, y, false);
  EXPECT_TRUE(std::isfinite(infer_loss));
  const std::vector<float> logits_a = host_copy(*be, net.tensor(net.logits_name()));
  ASSERT_TRUE(all_finite(logits_a));
  net.forward(x, y, false);
  const std::vector<float> logits_b = host_copy(*be, net.tensor(net.logits_name()));
  EXPECT_EQ(max_abs_diff(logits_a, logits_b), 0.0) << "inference is not deterministic";
  EXPECT_EQ(max_abs_diff(host_copy(*be, store.state().view(mean_name)), mean_trained), 0.0)
      << "inference changed the moving statistics";
  EXPECT_TRUE(slab_bytes(*be, store.state()) == all_state) << "inference changed the BN state";

  net.forward(x, y, true, 1000);
  const std::vector<float> logits_train = host_copy(*be, net.tensor(net.logits_name()));
  EXPECT_GT(max_abs_diff(logits_train, logits_a), 1e-6) << "inference used batch statistics";

  std::vector<float> shifted = mean_trained;
  for (float& v : shifted) v += 1.f;
  be->copy(store.state().view(mean_name),
           Tensor(shifted.data(), Shape{int64_t(shifted.size())}, DType::kF32, Device::cpu()));
  net.forward(x, y, false);
  const std::vector<float> logits_shifted = host_copy(*be, net.tensor(net.logits_name()));
  EXPECT_GT(max_abs_diff(logits_shifted, logits_a), 1e-6) << "inference ignored " << mean_name;
}

TEST(ResNet50, CpuSmokeTrainsAndInfersAt64) {
  ModelConfig c = imagenet_config(64, 10);
  c.label_smoothing = 0.1f;
  run_smoke({"resnet50", c, 5, 0.0005f, "block3/unit_2/conv2/BatchNorm"});
}

TEST(InceptionV3, CpuSmokeTrainsAndInfersAt75WithTheAuxLoss) {
  ModelConfig c = imagenet_config(75, 10);
  c.weight_decay = 4e-5f;  // configs/imagenet_inception_v3_terngrad.ini
  c.label_smoothing = 0.1f;
  c.dropout_keep_prob = 0.8f;
  c.aux_logits = true;
  {  // at 75 the aux head shrinks its pool and pads its 5x5 conv: same parameters as at 299
    auto be = make_backend("cpu", {1});
    Net net;
    build_model("inception_v3", c, net);
    net.setup(*be, 2);
    EXPECT_EQ(count_parameters(net), 21785568 + 2557696 + 2818 * 10);
    const std::map<std::string, Shape> want = {{"Mixed_6e", {2, 3, 3, 768}},
                                               {"AuxLogits/AvgPool_1a_5x5", {2, 1, 1, 768}},
                                               {"AuxLogits/Conv2d_2a_5x5", {2, 1, 1, 768}},
                                               {"Mixed_7c", {2, 1, 1, 2048}}};
    int found = 0;
    for (const auto& r : net.summary()) {
      auto it = want.find(r.name);
      if (it == want.end()) continue;
      EXPECT_EQ(r.output, it->second) << r.name;
      ++found;
    }
    EXPECT_EQ(found, 4);
  }
  // total = cross-entropy + 0.4 * aux cross-entropy + weight decay
  auto loss_terms = [](Net& net, float total) {
    float aux = 0.f;
    Tensor t = net.tensor("AuxLogits/loss");
    std::memcpy(&aux, t.data<float>(), sizeof(float));  // CPU tensor
    EXPECT_TRUE(std::isfinite(aux));
    EXPECT_GT(aux, 0.f);
    EXPECT_NEAR(total, net.last_cross_entropy() + 0.4f * aux + net.last_regularization(), 1e-4f * std::fabs(total));
  };
  // Batch 4, not 2: at 75x75 Mixed_7a-7c run on 1x1 maps, where batch norm over 2 values per channel is
  // degenerate (each normalized value is about +-1 and the backward divides by near-zero deviations: measured
  // |grad| of Conv2d_1a_3x3 ~9e5 at batch 2 against ~3e2 at batch 4 and ~15 at 299x299).
  run_smoke({"inception_v3", c, 5, 0.002f, "Mixed_6b/Branch_1/Conv2d_0b_1x7/BatchNorm", 4}, loss_terms);
}

}  // namespace
}  // namespace tg
