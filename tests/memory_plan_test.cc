// The memory plan (memory_plan.h, Net): placement never lets two buffers that are live at once share a byte; for
// each of the five networks a run planned by liveness (with dead buffers poisoned with NaN after their last use, so
// a layer reading a value the plan thought dead computes NaN) gives the bits of the unplanned run (every buffer its
// own bytes), with and without recomputation, in f32 and bf16 where the CPU runs it; the arena is smaller; a layer
// that misstates what its backward reads gives other bits; nets sharing one arena give their own bits.
#include "terngrad/nn/memory_plan.h"

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "common/bound_net.h"
#include "terngrad/backend/backend.h"
#include "terngrad/models/registry.h"
#include "terngrad/nn/layers.h"
#include "terngrad/nn/net.h"
#include "terngrad/optim/optimizer.h"

namespace tg {
namespace {

// ---- placement ---------------------------------------------------------------------------------------------------

TEST(MemoryPlan, BuffersLiveAtOnceNeverShareAByte) {
  std::mt19937 rng(7);
  for (int round = 0; round < 50; ++round) {
    std::vector<PlannedBuffer> b(static_cast<size_t>(5 + rng() % 60));
    for (PlannedBuffer& x : b) {
      x.bytes = 1 + rng() % 5000;
      const int begin = static_cast<int>(rng() % 40), end = begin + static_cast<int>(rng() % 10);
      x.live.push_back({begin, end});
      if (rng() % 3 == 0)
        x.live.push_back({end + 2 + static_cast<int>(rng() % 5), end + 8 + static_cast<int>(rng() % 20)});
    }
    const size_t arena = place_buffers(b, MemoryPlan::kLiveness);
    EXPECT_GE(arena, peak_live_bytes(b));
    for (size_t i = 0; i < b.size(); ++i) {
      ASSERT_EQ(b[i].offset % kArenaAlignment, 0u);
      ASSERT_LE(b[i].offset + b[i].bytes, arena);
      for (size_t j = i + 1; j < b.size(); ++j) {
        if (!live_at_once(b[i], b[j])) continue;
        const bool apart = b[i].offset + b[i].bytes <= b[j].offset || b[j].offset + b[j].bytes <= b[i].offset;
        ASSERT_TRUE(apart) << "round " << round << ": buffers " << i << " and " << j << " overlap";
      }
    }
    size_t sum = 0;
    for (const PlannedBuffer& x : b) sum += align_up(x.bytes);
    EXPECT_EQ(place_buffers(b, MemoryPlan::kNone), sum);
  }
}

TEST(MemoryPlan, BuffersLiveAtDifferentTimesShareTheirBytes) {
  std::vector<PlannedBuffer> b = {{1000, {{0, 2}}, 0}, {900, {{3, 5}}, 0}, {100, {{1, 4}}, 0}};
  EXPECT_EQ(place_buffers(b, MemoryPlan::kLiveness), align_up(1000) + align_up(100));
  EXPECT_EQ(b[0].offset, b[1].offset);
  int slot = -1;
  EXPECT_EQ(peak_live_bytes(b, &slot), align_up(1000) + align_up(100));
  EXPECT_EQ(slot, 1);
}

// ---- the five networks: planned runs give the unplanned bits ----------------------------------------------------

struct Case {
  const char* net;
  int64_t image_size, channels, classes, batch;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.net << " batch " << c.batch; }

ModelConfig config_of(const Case& c) {
  ModelConfig m;
  m.image_size = c.image_size;
  m.channels = c.channels;
  m.num_classes = c.classes;
  m.weight_decay = 1e-4f;
  m.dropout_keep_prob = 0.8f;
  return m;
}

// What a run leaves: every step's losses, the last step's gradients, the parameters and state after the updates.
struct Outcome {
  std::vector<float> losses;
  std::vector<uint8_t> grads, params, state;
  Net::MemoryReport report;
  int fused_relus = 0;
  int filters_transposed = 0;
};

std::vector<uint8_t> bytes_of(Slab& s) {
  const auto* p = static_cast<const uint8_t*>(s.data());
  return std::vector<uint8_t>(p, p + s.bytes());
}

Outcome train(Backend& be, const Case& c, DType compute, MemoryPlan plan, Recompute recompute, bool poison,
              int steps = 2, bool fuse_relu = true, int filter_ohwi = -1) {
  testing::BoundNet m(
      be,
      [&](Net& n) {
        build_model(c.net, config_of(c), n);
        n.set_compute_dtype(compute);
        n.set_memory_plan(plan, recompute);
        n.set_poison_dead_buffers(poison);
        n.set_fuse_relu(fuse_relu);
        if (filter_ohwi >= 0) n.set_conv_filter_ohwi(filter_ohwi == 1);
      },
      c.batch, 3);
  Optimizer opt(testing::momentum_sgd(), m.store.params(), be);
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> pixel(-1.f, 1.f);
  std::vector<float> images(static_cast<size_t>(c.batch * c.image_size * c.image_size * c.channels));
  std::vector<int32_t> labels(static_cast<size_t>(c.batch));
  Outcome out;
  for (int step = 0; step < steps; ++step) {
    for (float& v : images) v = pixel(rng);
    for (int32_t& l : labels) l = static_cast<int32_t>(rng() % static_cast<uint32_t>(c.classes));
    const Tensor x(images.data(), Shape{c.batch, c.image_size, c.image_size, c.channels}, DType::kF32, Device::cpu());
    const Tensor y(labels.data(), Shape{c.batch}, DType::kI32, Device::cpu());
    out.losses.push_back(m.net.forward(x, y, true, static_cast<uint32_t>(step), PhiloxKey{{5, 9}}));
    m.net.backward();
    opt.apply(be, m.store.params(), m.net.grads(), step, 0.01f);
  }
  out.grads = bytes_of(m.net.grads());
  out.params = bytes_of(m.store.params());
  out.state = bytes_of(m.store.state());
  out.report = m.net.memory_report();
  out.fused_relus = m.net.fused_relus();
  out.filters_transposed = m.net.filters_transposed();
  return out;
}

void expect_same_bits(const Outcome& a, const Outcome& b, const std::string& what) {
  ASSERT_EQ(a.losses.size(), b.losses.size());
  for (size_t i = 0; i < a.losses.size(); ++i)
    EXPECT_EQ(0, std::memcmp(&a.losses[i], &b.losses[i], sizeof(float)))
        << what << ": loss of step " << i << ": " << a.losses[i] << " vs " << b.losses[i];
  EXPECT_TRUE(a.grads == b.grads) << what << ": gradients differ";
  EXPECT_TRUE(a.params == b.params) << what << ": parameters differ";
  EXPECT_TRUE(a.state == b.state) << what << ": batch-norm statistics differ";
}

class NetworkPlans : public ::testing::TestWithParam<Case> {};

TEST_P(NetworkPlans, PlannedRunsGiveTheUnplannedBits) {
  const Case& c = GetParam();
  auto be = make_backend("cpu", {1});
  const Outcome none = train(*be, c, DType::kF32, MemoryPlan::kNone, Recompute::kNone, false);
  const Outcome planned = train(*be, c, DType::kF32, MemoryPlan::kLiveness, Recompute::kNone, true);
  expect_same_bits(none, planned, std::string(c.net) + " liveness");
  const Outcome recomputed = train(*be, c, DType::kF32, MemoryPlan::kLiveness, Recompute::kBnRelu, true);
  expect_same_bits(none, recomputed, std::string(c.net) + " liveness + recompute bn_relu");
  const Outcome blocks = train(*be, c, DType::kF32, MemoryPlan::kLiveness, Recompute::kBlocks, true);
  expect_same_bits(none, blocks, std::string(c.net) + " liveness + recompute blocks");
  // ReLU fusion (a batch norm writing the in-place ReLU's output): only where the plan puts the ReLU in place, so
  // never without a plan; the planned run fuses the pairs of every network with batch norms.
  const Outcome unfused = train(*be, c, DType::kF32, MemoryPlan::kLiveness, Recompute::kNone, true, 2, false);
  expect_same_bits(none, unfused, std::string(c.net) + " liveness, no fusion");
  EXPECT_EQ(none.fused_relus, 0) << c.net;
  EXPECT_EQ(unfused.fused_relus, 0) << c.net;
  const bool has_bn =
      std::string(c.net) == "alexnet" || std::string(c.net) == "resnet50" || std::string(c.net) == "inception_v3";
  EXPECT_EQ(planned.fused_relus > 0, has_bn) << c.net << ": " << planned.fused_relus << " fused";

  // The arena: no reuse at all without a plan; the plan within its lower bound, and smaller.
  EXPECT_EQ(none.report.arena, none.report.unplanned);
  // (A fused ReLU's input needs no gradient buffer of its own: the fused plan's unplanned total is smaller.)
  EXPECT_EQ(unfused.report.unplanned, none.report.unplanned);
  EXPECT_EQ(planned.report.unplanned == none.report.unplanned, planned.fused_relus == 0);
  EXPECT_GE(planned.report.arena, planned.report.peak_live);
  EXPECT_LT(planned.report.arena, none.report.arena / 2) << c.net;
  EXPECT_LE(recomputed.report.arena, planned.report.arena) << c.net;
  EXPECT_GT(planned.report.in_place, 0) << c.net;
  EXPECT_LE(blocks.report.arena, planned.report.arena) << c.net;
  std::printf(
      "%s batch %lld: unplanned %zu, liveness %zu (peak live %zu, at %s; %d outputs in place, %d ReLUs fused), "
      "bn_relu %zu (%d recomputed, %d fused), blocks %zu (%d recomputed, %d fused)\n",
      c.net, static_cast<long long>(c.batch), none.report.arena, planned.report.arena, planned.report.peak_live,
      planned.report.peak_at.c_str(), planned.report.in_place, planned.fused_relus, recomputed.report.arena,
      recomputed.report.recomputed, recomputed.fused_relus, blocks.report.arena, blocks.report.recomputed,
      blocks.fused_relus);
}

INSTANTIATE_TEST_SUITE_P(FiveNetworks, NetworkPlans,
                         ::testing::Values(Case{"lenet", 28, 1, 10, 4}, Case{"cifarnet", 24, 3, 10, 4},
                                           Case{"alexnet", 67, 3, 1001, 2}, Case{"resnet50", 32, 3, 10, 2},
                                           Case{"inception_v3", 75, 3, 10, 2}),
                         [](const ::testing::TestParamInfo<Case>& i) { return std::string(i.param.net); });

TEST(NetworkPlans, Bf16PlannedRunsGiveTheUnplannedBits) {
  auto be = make_backend("cpu", {1});
  if (!be->supports_compute(DType::kBf16)) GTEST_SKIP() << "no bf16 compute on this CPU: " << be->why_not(DType::kBf16);
  const Case c{"resnet50", 32, 3, 10, 2};
  const Outcome none = train(*be, c, DType::kBf16, MemoryPlan::kNone, Recompute::kNone, false);
  const Outcome planned = train(*be, c, DType::kBf16, MemoryPlan::kLiveness, Recompute::kBnRelu, true);
  expect_same_bits(none, planned, "resnet50 bf16 liveness + bn_relu");
  EXPECT_GT(planned.fused_relus, 0);  // bf16: the fused forward rounds y once, then takes max(y, 0), as relu does
}

// The half copy's convolution filters in the filter layout (what a CUDA net hands cuDNN: transposed once a step in the
// cast, the convolutions then skip their per-call transposes) give the bits of our layout: the CPU accepts either.
// f32 weights are the masters themselves and are never transposed.
TEST(NetworkPlans, FiltersInTheFilterLayoutGiveTheSameBits) {
  auto be = make_backend("cpu", {1});
  const Case c{"resnet50", 32, 3, 10, 2};
  const Outcome f32 = train(*be, c, DType::kF32, MemoryPlan::kLiveness, Recompute::kNone, false, 1, true, 1);
  EXPECT_EQ(f32.filters_transposed, 0);
  if (!be->supports_compute(DType::kBf16)) GTEST_SKIP() << "no bf16 compute on this CPU: " << be->why_not(DType::kBf16);
  const Outcome ours = train(*be, c, DType::kBf16, MemoryPlan::kLiveness, Recompute::kNone, false, 2, true, 0);
  const Outcome ohwi = train(*be, c, DType::kBf16, MemoryPlan::kLiveness, Recompute::kNone, false, 2, true, 1);
  const Outcome chosen = train(*be, c, DType::kBf16, MemoryPlan::kLiveness, Recompute::kNone, false, 2, true);
  expect_same_bits(ours, ohwi, "resnet50 bf16, filters transposed in the cast");
  EXPECT_EQ(ours.filters_transposed, 0);
  EXPECT_EQ(ohwi.filters_transposed, 53) << "every convolution of ResNet-50";
  EXPECT_EQ(chosen.filters_transposed, be->conv2d_filter_ohwi() ? 53 : 0) << "the backend's choice by default";
}

// ---- a layer that misstates what its backward reads is caught -----------------------------------------

// y = x * x element-wise, whose backward (dx = 2 x dy) reads x, declared as reading nothing.
class SquareClaimingItsBackwardReadsNothing final : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "square"; }
  bool backward_reads_input(int) const override { return false; }  // wrong: it reads x
  bool backward_reads_output() const override { return false; }

 protected:
  std::vector<Shape> setup_impl(SetupContext& ctx) override { return {ctx.input(0)}; }
  void forward_impl(LayerIO& io) override {
    const float* x = io.in[0].data<float>();
    float* y = io.out[0].data<float>();
    for (int64_t i = 0; i < io.in[0].numel(); ++i) y[i] = x[i] * x[i];
  }
  void backward_impl(LayerIO& io) override {
    const float *x = io.in[0].data<float>(), *dy = io.dout[0].data<float>();
    float* dx = io.din[0].data<float>();
    for (int64_t i = 0; i < io.in[0].numel(); ++i) dx[i] = 2.f * x[i] * dy[i];
  }
};

TEST(MemoryPlan, ABackwardReadingAValueThePlanThoughtDeadIsCaught) {
  auto be = make_backend("cpu", {1});
  auto run = [&](MemoryPlan plan, bool poison) {
    testing::BoundNet m(
        *be,
        [&](Net& n) {
          n.set_input_shape(1, 1, 8);
          n.add(flatten("flatten"), {"images"});
          FcOptions f;
          f.out = 8;
          n.add(fully_connected("fc1", f));
          n.add(std::make_unique<SquareClaimingItsBackwardReadsNothing>("square"));
          f.out = 3;
          n.set_logits(n.add(fully_connected("logits", f)));
          n.set_loss(n.add(softmax_cross_entropy("loss"), {"logits", "labels"}));
          n.set_memory_plan(plan);
          n.set_poison_dead_buffers(poison);
        },
        2);
    std::vector<float> images(16, 0.5f);
    std::vector<int32_t> labels = {1, 2};
    m.net.forward(Tensor(images.data(), Shape{2, 1, 1, 8}, DType::kF32, Device::cpu()),
                  Tensor(labels.data(), Shape{2}, DType::kI32, Device::cpu()), true);
    m.net.backward();
    return bytes_of(m.net.grads());
  };
  // Its input dies after its forward: poisoned, then (maybe) reused by a later buffer. Either way the backward
  // reads something else than x, and the gradients upstream are not the unplanned run's.
  const std::vector<uint8_t> unplanned = run(MemoryPlan::kNone, true);
  EXPECT_EQ(unplanned, run(MemoryPlan::kNone, false));
  EXPECT_NE(unplanned, run(MemoryPlan::kLiveness, true));
}

// ---- nets sharing one arena ---------------------------------------------------------------------------------------

// Two workers of one replica: nets over one store, run one after another, share one arena and each gives the bits it
// gives with an arena of its own.
TEST(MemoryPlan, NetsSharingAnArenaGiveTheirOwnBits) {
  auto be = make_backend("cpu", {1});
  const Case c{"cifarnet", 24, 3, 10, 4};
  auto arena = std::make_shared<StepArena>(be->allocator());
  Net a, b, alone;
  for (Net* n : {&a, &b, &alone}) build_model(c.net, config_of(c), *n);
  a.share_arena(arena);
  b.share_arena(arena);
  for (Net* n : {&a, &b, &alone}) n->setup(*be, c.batch);
  ParameterStore store(a.param_specs(), a.state_specs(), *be);
  store.initialize(2);
  for (Net* n : {&a, &b, &alone}) n->bind(store);
  EXPECT_EQ(arena->bytes(), a.memory_report().arena);
  // Two batches: a and b run one after another in the shared arena, then each batch alone in an arena of its own.
  std::vector<float> images_a(static_cast<size_t>(4 * 24 * 24 * 3)), images_b(images_a.size());
  for (size_t i = 0; i < images_a.size(); ++i) {
    images_a[i] = std::sin(0.37f * float(i));
    images_b[i] = std::cos(0.11f * float(i));
  }
  std::vector<int32_t> labels = {1, 4, 7, 2};
  const Tensor y(labels.data(), Shape{4}, DType::kI32, Device::cpu());
  auto step = [&](Net& n, std::vector<float>& images) {
    n.forward(Tensor(images.data(), Shape{4, 24, 24, 3}, DType::kF32, Device::cpu()), y, true);
    n.backward();
    return bytes_of(n.grads());
  };
  const std::vector<uint8_t> ga = step(a, images_a), gb = step(b, images_b);
  EXPECT_NE(ga, gb);
  EXPECT_TRUE(step(alone, images_a) == ga);
  EXPECT_TRUE(step(alone, images_b) == gb);
}

TEST(MemoryPlan, BadSettingsAreRefused) {
  Net n;
  build_model("lenet", ModelConfig{}, n);
  try {
    n.set_memory_plan(MemoryPlan::kNone, Recompute::kBnRelu);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--recompute bn_relu needs --memory_plan liveness"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(n.keep("no_such_tensor"), Error);
  EXPECT_THROW(parse_enum<Recompute>("everything"), Error);
  auto be = make_backend("cpu", {1});
  n.setup(*be, 2);
  ParameterStore store(n.param_specs(), n.state_specs(), *be);
  n.bind(store);
  try {
    n.tensor("conv1");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is not kept after a step"), std::string::npos) << e.what();
  }
  EXPECT_EQ(n.tensor(n.logits_name()).shape(), n.shape(n.logits_name()));
}

}  // namespace
}  // namespace tg
