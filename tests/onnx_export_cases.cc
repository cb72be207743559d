// Layer cases of the ONNX translation that no registry network has, for tests/onnx_export_test.py: small nets
// with random weights and random BN statistics, run by the CPU backend (inference) and exported with the same
// graph builder terngrad-export uses. For each case it writes OUT_DIR/<case>.onnx, <case>_inputs.npy (the NHWC
// images) and <case>_logits.npy (our logits); the Python test runs ONNX Runtime on the inputs and compares.
//
//   grouped    conv 3x3/2 SAME with 2 groups (12 -> 6: pads 0 before, 1 after), a depthwise conv (6 groups,
//              multiplier 2), LRN radius 1, max pool 2x2/1 SAME (pads 0, 1), avg pool 3x3/2 SAME (6 -> 3, pads 0
//              and 1: corner windows average 4 cells), BN with gamma, a flatten of a 3x3 map read by a ReLU (the
//              Transpose-to-NHWC path), FC, BN with gamma on (N, C), dropout, logits.
//   branches   two convs of a 1x7 / 7x1 pair (asymmetric kernels) concatenated, added to a 1x1 conv of the input,
//              global average pool (VALID), flatten of a 1x1 map, logits; a beta-only BN.
// Usage: onnx_export_cases OUT_DIR [OPSET]
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "common/bound_net.h"
#include "onnx.pb.h"
#include "src/export/onnx_graph.h"
#include "terngrad/core/atomic_file.h"
#include "terngrad/core/npy_file.h"
#include "terngrad/export/onnx_export.h"
#include "terngrad/nn/layers.h"

namespace tg {
namespace {

constexpr int64_t kBatch = 3, kClasses = 5;

ConvOptions conv_options(int64_t out, int64_t kh, int64_t kw, int64_t stride, int64_t groups) {
  ConvOptions c;
  c.out_channels = out;
  c.kernel_h = kh;
  c.kernel_w = kw;
  c.stride = stride;
  c.groups = groups;
  c.padding = Padding::kSame;
  c.bias_init = 0.05f;
  return c;
}

BatchNormOptions with_gamma(bool gamma) {
  BatchNormOptions b;
  b.gamma = gamma;
  return b;
}

void logits_and_loss(Net& net) {
  FcOptions fc;
  fc.out = kClasses;
  add_logits_and_loss(net, fc, 0.f);
}

void build_grouped(Net& net) {
  net.set_input_shape(12, 12, 4);
  net.add(conv2d("conv1", conv_options(6, 3, 3, 2, 2)), {"images"});
  net.add(conv2d("depthwise", conv_options(12, 3, 3, 1, 6)));
  net.add(lrn("lrn", 1, 1.5f, 0.2f, 0.75f));
  net.add(max_pool("maxpool", 2, 1, Padding::kSame));
  net.add(avg_pool("avgpool", 3, 2, Padding::kSame));
  net.add(batch_norm("bn4d", with_gamma(true)));
  net.add(flatten("flatten"));
  net.add(relu("flatten/relu"));
  FcOptions fc;
  fc.out = 16;
  net.add(fully_connected("fc", fc));
  net.add(batch_norm("bn2d", with_gamma(true)));
  net.add(relu("fc/relu"));
  net.add(dropout("dropout", 0.5f));
  logits_and_loss(net);
}

void build_branches(Net& net) {
  net.set_input_shape(9, 9, 3);
  net.add(conv2d("row", conv_options(4, 1, 7, 1, 1)), {"images"});
  net.add(conv2d("column", conv_options(4, 7, 1, 1, 1)));
  net.add(conv2d("side", conv_options(6, 3, 1, 2, 1)), {"images"});
  net.add(concat("concat"), {"row", "column"});
  net.add(conv2d("mix", conv_options(6, 1, 1, 2, 1)), {"concat"});
  net.add(add("sum"), {"mix", "side"});
  net.add(batch_norm("bn", with_gamma(false)));
  net.add(relu("relu"));
  net.add(avg_pool("global", 5, 1, Padding::kValid));
  net.add(flatten("flatten"));
  logits_and_loss(net);
}

// Random values in every BN statistic (the initial mean 0 / variance 1 would hide a mix-up).
void randomize_state(ParameterStore& store, std::mt19937& rng) {
  std::uniform_real_distribution<float> mean(-0.5f, 0.5f), var(0.3f, 2.f);
  for (int i = 0; i < store.state().size(); ++i) {
    const Tensor t = store.state().view(i);
    const bool variance = store.state().entry(i).name.find("variance") != std::string::npos;
    for (int64_t k = 0; k < t.numel(); ++k) t.data<float>()[k] = variance ? var(rng) : mean(rng);
  }
  for (int i = 0; i < store.params().size(); ++i)  // gamma and beta away from 1 and 0 as well
    if (store.params().entry(i).name.find("/gamma") != std::string::npos ||
        store.params().entry(i).name.find("/beta") != std::string::npos) {
      const Tensor t = store.params().view(i);
      for (int64_t k = 0; k < t.numel(); ++k) t.data<float>()[k] += mean(rng);
    }
}

void write_case(const std::string& dir, const std::string& name, void (*build)(Net&), int opset) {
  auto backend = make_backend("cpu");
  testing::BoundNet m(*backend, build, kBatch, 11);
  std::mt19937 rng(5);
  randomize_state(m.store, rng);
  const Shape in = m.net.shape("images");
  std::vector<float> images(static_cast<size_t>(in.numel()));
  std::normal_distribution<float> normal(0.f, 1.f);
  for (float& x : images) x = normal(rng);
  std::vector<int32_t> labels(kBatch, 0);
  m.net.forward(Tensor(images.data(), in, DType::kF32, Device::cpu()),
                Tensor(labels.data(), Shape{kBatch}, DType::kI32, Device::cpu()), false);
  const Tensor logits = m.net.tensor(m.net.logits_name());

  onnx::ModelProto model;
  init_onnx_model(opset, &model);
  model.mutable_graph()->set_name(name);
  build_onnx_graph(
      m.net,
      [&](const std::string& t) {
        return m.store.params().contains(t) ? m.store.params().view(t) : m.store.state().view(t);
      },
      0, model.mutable_graph());
  AtomicFile file(dir + "/" + name + ".onnx");
  file.write(model.SerializeAsString());
  file.commit();
  write_npy(dir + "/" + name + "_inputs.npy", images.data(), DType::kF32, {in[0], in[1], in[2], in[3]});
  write_npy(dir + "/" + name + "_logits.npy", logits.raw(), DType::kF32, {kBatch, kClasses});
}

}  // namespace
}  // namespace tg

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: onnx_export_cases OUT_DIR [OPSET]\n");
    return 2;
  }
  try {
    const int opset = argc > 2 ? std::stoi(argv[2]) : tg::kDefaultOnnxOpset;
    tg::write_case(argv[1], "grouped", tg::build_grouped, opset);
    tg::write_case(argv[1], "branches", tg::build_branches, opset);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "onnx_export_cases: error: %s\n", e.what());
    return 1;
  }
}
