// Mixed precision in training: the LossScaler's rules (halve and skip on Inf/NaN, double after 2,000 good
// steps, stop below 1) and its checkpoint round trip; the Net's loss scaling (a power-of-two scale gives the
// unscaled fp32 gradients bit for bit; an overflow injected through a huge scale sets the flag the scaler
// skips on); and LeNet trained 200 steps in bf16 following the fp32 loss curve on Fashion-MNIST.
// fp16 compute needs a GPU, so the scaler is tested here with f32/bf16 nets and injected overflows.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <vector>

#include "common/bound_net.h"
#include "common/fashion_mnist.h"
#include "common/files.h"
#include "common/lenet_loss_curve.h"
#include "terngrad/backend/backend.h"
#include "terngrad/optim/optimizer.h"
#include "terngrad/train/checkpoint.h"
#include "terngrad/train/loss_scaler.h"

namespace tg {
namespace {

TEST(LossScaler, HalvesAndSkipsOnOverflowDoublesAfterTheGrowthInterval) {
  LossScaler s(true);
  EXPECT_EQ(s.scale(), 32768.f);
  EXPECT_FALSE(s.update(true, 1)) << "an overflowed step is skipped";
  EXPECT_EQ(s.scale(), 16384.f);
  EXPECT_EQ(s.skipped_steps(), 1);
  for (int i = 0; i < 1999; ++i) ASSERT_TRUE(s.update(false, 2 + i));
  EXPECT_EQ(s.scale(), 16384.f) << "1,999 good steps do not grow the scale";
  EXPECT_EQ(s.good_steps(), 1999);
  EXPECT_TRUE(s.update(false, 2001));
  EXPECT_EQ(s.scale(), 32768.f) << "the 2,000th good step doubles it";
  EXPECT_EQ(s.good_steps(), 0);
  // An overflow resets the run of good steps.
  for (int i = 0; i < 1500; ++i) s.update(false, 3000 + i);
  s.update(true, 4500);
  EXPECT_EQ(s.good_steps(), 0);
  for (int i = 0; i < 1999; ++i) s.update(false, 5000 + i);
  EXPECT_EQ(s.scale(), 16384.f);
  EXPECT_EQ(s.skipped_steps(), 2);
}

TEST(LossScaler, GrowthStopsAtTheCapAndADisabledScalerIsOne) {
  LossScaler s(true, LossScaler::kMaxScale, 1);
  EXPECT_TRUE(s.update(false, 1));
  EXPECT_EQ(s.scale(), LossScaler::kMaxScale);
  LossScaler off(false);
  EXPECT_EQ(off.scale(), 1.f);
  EXPECT_TRUE(off.update(true, 1)) << "bf16/fp32 never skip";
  EXPECT_EQ(off.skipped_steps(), 0);
  EXPECT_THROW(LossScaler(true, 0.5f), Error);
}

TEST(LossScaler, CollapseBelowOneStopsNamingTheStep) {
  LossScaler s(true, 4.f);
  EXPECT_FALSE(s.update(true, 7));  // 2
  EXPECT_FALSE(s.update(true, 8));  // 1
  try {
    s.update(true, 9);
    FAIL() << "a scale below 1 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("step 9"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("below 1"), std::string::npos) << e.what();
  }
}

TEST(LossScaler, CheckpointRoundTripIsBitIdentical) {
  const std::filesystem::path dir = testing::temp_dir("tg_loss_scaler");
  LossScaler s(true, 32768.f, 2000);
  s.update(true, 1);
  for (int i = 0; i < 1234; ++i) s.update(false, 2 + i);
  std::vector<Buffer> storage;
  std::vector<NamedTensor> tensors;
  s.append_checkpoint_tensors(tensors, storage);
  CheckpointMeta meta;
  meta.model = "lenet";
  meta.dataset = "mnist";
  meta.image_size = 28, meta.channels = 1, meta.num_classes = 10, meta.step = 1235;
  const std::string path = (dir / "model.ckpt-1235").string();
  write_checkpoint(path, meta, tensors);

  LossScaler back(true);
  ASSERT_TRUE(back.restore_from(CheckpointReader(path)));
  const float a = s.scale(), b = back.scale();
  EXPECT_EQ(0, std::memcmp(&a, &b, sizeof a));
  EXPECT_EQ(back.good_steps(), 1234);
  // Both continue identically: 766 more good steps double the scale.
  for (int i = 0; i < 766; ++i) s.update(false, 1236 + i), back.update(false, 1236 + i);
  EXPECT_EQ(back.scale(), 32768.f);
  EXPECT_EQ(back.scale(), s.scale());
  // A checkpoint saved without fp16 holds none: nothing changes.
  const std::string plain = (dir / "model.ckpt-2").string();
  write_checkpoint(plain, meta, {});
  LossScaler fresh(true);
  EXPECT_FALSE(fresh.restore_from(CheckpointReader(plain)));
  EXPECT_EQ(fresh.scale(), LossScaler::kInitialScale);
  EXPECT_THROW(fresh.restore(0.25f, 3), Error);
  std::filesystem::remove_all(dir);
}

// A LeNet batch of deterministic images (uniform in [-amplitude, amplitude]) and labels.
struct Batch {
  std::vector<float> images;
  std::vector<int32_t> labels;
  Tensor x, y;
  explicit Batch(int64_t n, float amplitude = 1.f) : images(n * 784), labels(n) {
    std::mt19937 gen(3);
    std::uniform_real_distribution<float> u(-amplitude, amplitude);
    for (auto& v : images) v = u(gen);
    for (int64_t i = 0; i < n; ++i) labels[i] = static_cast<int32_t>(i % 10);
    x = Tensor(images.data(), Shape{n, 28, 28, 1}, DType::kF32, Device::cpu());
    y = Tensor(labels.data(), Shape{n}, DType::kI32, Device::cpu());
  }
};

std::vector<uint8_t> grad_bytes(Net& net) {
  const Slab& g = net.grads();
  const uint8_t* p = static_cast<const uint8_t*>(g.flat_bytes().raw());
  return std::vector<uint8_t>(p, p + g.bytes());
}

// Scaling the loss by a power of two scales every f32 gradient exactly (no overflow, no subnormals here), and
// unscale_and_check divides it out exactly: the same bits as without scaling, and no overflow flagged.
TEST(NetLossScaling, PowerOfTwoScaleGivesTheUnscaledGradientsBitForBit) {
  auto be = make_backend("cpu", {1});
  testing::BoundNet m(*be, "lenet", ModelConfig{}, 4);
  Batch batch(4);
  m.net.forward(batch.x, batch.y, true, 1);
  m.net.backward();
  EXPECT_FALSE(m.net.overflowed());
  const std::vector<uint8_t> plain = grad_bytes(m.net);
  m.net.forward(batch.x, batch.y, true, 1);
  m.net.backward(nullptr, 32768.f);
  EXPECT_FALSE(m.net.overflowed());
  EXPECT_TRUE(grad_bytes(m.net) == plain);
}

// An overflow injected through a scale no gradient survives (images of amplitude 100 make the fc3 weight
// gradients reach hundreds, times 3e38 is past f32's 3.4e38): the flag is set, the scaler skips and halves,
// and the next step (a sane scale) is clean again: the flag is cleared per backward.
TEST(NetLossScaling, InjectedOverflowIsFlaggedAndSkipped) {
  auto be = make_backend("cpu", {1});
  testing::BoundNet m(*be, "lenet", ModelConfig{}, 4);
  Batch batch(4, 100.f);
  LossScaler scaler(true, 3e38f);
  m.net.forward(batch.x, batch.y, true, 1);
  m.net.backward(nullptr, scaler.scale());
  ASSERT_TRUE(m.net.overflowed()) << "gradients of a 3e38-scaled loss overflow f32";
  EXPECT_FALSE(scaler.update(m.net.overflowed(), 1));
  EXPECT_EQ(scaler.scale(), 1.5e38f);
  LossScaler sane(true);
  m.net.forward(batch.x, batch.y, true, 2);
  m.net.backward(nullptr, sane.scale());
  EXPECT_FALSE(m.net.overflowed());
  EXPECT_TRUE(sane.update(m.net.overflowed(), 2));
}

// bf16 compute: the loss follows fp32's. 200 momentum steps of LeNet (batch 32) on Fashion-MNIST, the same
// batches in the same order, from the same initial weights; compared: the mean of the last 50 losses (the
// single-step loss is noisy), relative difference below 1%. The bf16 losses must not be fp32's bits (at most 5%
// of the steps equal by chance, and never the first: its forward already reads bf16 weights), or the test
// would pass with a bf16 path that silently computes in fp32.
TEST(MixedPrecisionTraining, Bf16LeNetLossCurveFollowsFp32) {
  if (testing::fashion_mnist_dir().empty()) GTEST_SKIP() << "Fashion-MNIST not installed";
  auto be = make_backend("cpu", {2});
  if (!be->supports_compute(DType::kBf16)) GTEST_SKIP() << be->why_not(DType::kBf16);
  const testing::IdxDataset train = testing::load_fashion_mnist("train");
  const int64_t batch = 32, steps = 200, tail = 50;
  const std::vector<double> f32 = testing::lenet_loss_curve(*be, train, DType::kF32, batch, steps),
                            bf16 = testing::lenet_loss_curve(*be, train, DType::kBf16, batch, steps);
  const double a = testing::tail_mean(f32, tail), b = testing::tail_mean(bf16, tail);
  std::printf("LeNet 200 steps: mean loss of the last 50: fp32 %.5f, bf16 %.5f (%.3f%%); first %.4f / %.4f\n", a, b,
              100 * std::fabs(b - a) / a, f32[0], bf16[0]);
  EXPECT_LT(a, f32[0] * 0.6) << "fp32 itself must learn for the comparison to mean anything";
  EXPECT_LT(std::fabs(b - a) / a, 0.01);
  EXPECT_NE(bf16[0], f32[0]) << "the first bf16 loss has fp32's bits: bf16 was not computed";
  EXPECT_LE(testing::identical_losses(f32, bf16), steps / 20) << "bf16 losses with fp32's bits";
}

}  // namespace
}  // namespace tg
