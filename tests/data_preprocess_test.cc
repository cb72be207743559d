// Each preprocessing step against a hand-computed case; whole-dataset recipes for shape, range and
// determinism (same (seed, epoch, record) -> same output).
#include <gtest/gtest.h>

#include <cmath>

#include "common/images.h"
#include "terngrad/core/error.h"
#include "terngrad/data/preprocess.h"

using namespace tg;
using tg::testing::image_of;

namespace {

FloatImage make(int h, int w, int c, std::vector<float> v) {
  FloatImage f;
  f.height = h;
  f.width = w;
  f.channels = c;
  f.data = std::move(v);
  return f;
}

Image ramp(int h, int w, int c) {  // pixel i (in storage order) = 7 i mod 256
  return image_of(h, w, c,
                  [=](int y, int x, int k) { return static_cast<uint8_t>((((y * w + x) * c + k) * 7) % 256); });
}

}  // namespace

TEST(PreprocessSteps, ToFloatCropFlip) {
  Image img;
  img.height = 2;
  img.width = 3;
  img.channels = 1;
  img.pixels = {0, 51, 102, 153, 204, 255};
  FloatImage f = to_float(img);
  EXPECT_FLOAT_EQ(f.data[1], 0.2f);
  EXPECT_FLOAT_EQ(f.data[5], 1.0f);
  FloatImage c = crop(f, 1, 1, 1, 2);
  EXPECT_FLOAT_EQ(c.data[0], 0.8f);
  EXPECT_FLOAT_EQ(c.data[1], 1.0f);
  flip_left_right(&f);
  EXPECT_FLOAT_EQ(f.data[0], 0.4f);
  EXPECT_FLOAT_EQ(f.data[2], 0.0f);
  EXPECT_FLOAT_EQ(f.data[3], 1.0f);
  EXPECT_THROW(crop(f, 1, 1, 2, 2), Error);
}

TEST(PreprocessSteps, CropOrPadCentres) {
  // 4x4 -> 2x2 crops the centre (offset 1); 1x1 -> 3x3 pads (offset 1) with zeros.
  std::vector<float> v(16);
  for (int i = 0; i < 16; ++i) v[i] = static_cast<float>(i);
  FloatImage c = crop_or_pad(make(4, 4, 1, v), 2, 2);
  EXPECT_EQ(c.data, (std::vector<float>{5, 6, 9, 10}));
  FloatImage p = crop_or_pad(make(1, 1, 1, {7}), 3, 3);
  EXPECT_EQ(p.data, (std::vector<float>{0, 0, 0, 0, 7, 0, 0, 0, 0}));
  // 32 -> 24 uses offset 4, as the reference's CIFAR-10 eval.
  std::vector<float> big(32 * 32);
  for (int i = 0; i < 32 * 32; ++i) big[i] = static_cast<float>(i);
  FloatImage e = crop_or_pad(make(32, 32, 1, big), 24, 24);
  EXPECT_EQ(e.data[0], 4 * 32 + 4);
}

TEST(PreprocessSteps, CentralCropFraction) {
  // TF: start = int((10 - 8.75) / 2) = 0 -> all 10 rows kept; for 16: int((16 - 14) / 2) = 1 -> 14 kept.
  FloatImage a = central_crop(make(10, 10, 1, std::vector<float>(100, 1)), 0.875f);
  EXPECT_EQ(a.height, 10);
  FloatImage b = central_crop(make(16, 16, 1, std::vector<float>(256, 1)), 0.875f);
  EXPECT_EQ(b.height, 14);
  EXPECT_EQ(b.width, 14);
}

TEST(PreprocessSteps, BrightnessContrastStandardization) {
  FloatImage f = make(1, 2, 2, {0.1f, 0.5f, 0.3f, 0.9f});  // channel 0: 0.1, 0.3; channel 1: 0.5, 0.9
  adjust_brightness(&f, 0.1f);
  EXPECT_NEAR(f.data[0], 0.2f, 1e-7);
  adjust_contrast(&f, 2.0f);  // channel 0 mean 0.3: 0.2 -> 0.1, 0.4 -> 0.5; channel 1 mean 0.8: 0.6->0.4, 1.0->1.2
  EXPECT_NEAR(f.data[0], 0.1f, 1e-6);
  EXPECT_NEAR(f.data[2], 0.5f, 1e-6);
  EXPECT_NEAR(f.data[1], 0.4f, 1e-6);
  EXPECT_NEAR(f.data[3], 1.2f, 1e-6);

  FloatImage s = make(1, 4, 1, {1, 2, 3, 4});  // mean 2.5, population std sqrt(1.25)
  per_image_standardization(&s);
  const double sd = std::sqrt(1.25);
  EXPECT_NEAR(s.data[0], (1 - 2.5) / sd, 1e-6);
  EXPECT_NEAR(s.data[3], (4 - 2.5) / sd, 1e-6);
  FloatImage flat = make(1, 4, 1, {0.5f, 0.5f, 0.5f, 0.5f});  // std 0 -> divided by 1/sqrt(4), all zero
  per_image_standardization(&flat);
  for (float v : flat.data) EXPECT_EQ(v, 0.0f);
}

TEST(PreprocessSteps, SaturationAndHue) {
  // (0.8, 0.4, 0.2): h = (0.4-0.2)/0.6/6 = 1/18, s = 0.75, v = 0.8.
  FloatImage f = make(1, 1, 3, {0.8f, 0.4f, 0.2f});
  adjust_saturation(&f, 0.0f);  // gray at v
  EXPECT_NEAR(f.data[0], 0.8f, 1e-6);
  EXPECT_NEAR(f.data[1], 0.8f, 1e-6);
  EXPECT_NEAR(f.data[2], 0.8f, 1e-6);
  FloatImage g = make(1, 1, 3, {0.8f, 0.4f, 0.2f});
  adjust_saturation(&g, 0.5f);  // s = 0.375 -> min = 0.5, and (g - min) scales by 0.5: g = 0.5 + 0.1 = 0.6
  EXPECT_NEAR(g.data[0], 0.8f, 1e-6);
  EXPECT_NEAR(g.data[1], 0.6f, 1e-6);
  EXPECT_NEAR(g.data[2], 0.5f, 1e-6);
  FloatImage h = make(1, 1, 3, {1.0f, 0.0f, 0.0f});
  adjust_hue(&h, 1.0f / 3.0f);  // red -> green
  EXPECT_NEAR(h.data[0], 0.0f, 1e-5);
  EXPECT_NEAR(h.data[1], 1.0f, 1e-5);
  EXPECT_NEAR(h.data[2], 0.0f, 1e-5);
  FloatImage k = make(1, 1, 3, {0.0f, 0.0f, 1.0f});
  adjust_hue(&k, -2.0f / 3.0f);  // blue (h 2/3) -> red (h 0), wraps
  EXPECT_NEAR(k.data[0], 1.0f, 1e-5);
  EXPECT_NEAR(k.data[2], 0.0f, 1e-5);
}

TEST(PreprocessSteps, ResizeBilinearTf1Convention) {
  // 2x2 -> 4x4: source coords 0, 0.5, 1, 1.5 (clamped) along each axis.
  FloatImage f = make(2, 2, 1, {0, 1, 2, 3});
  FloatImage r = resize_bilinear(f, 4, 4);
  EXPECT_FLOAT_EQ(r.at(0, 1, 0), 0.5f);
  EXPECT_FLOAT_EQ(r.at(1, 0, 0), 1.0f);
  EXPECT_FLOAT_EQ(r.at(1, 1, 0), 1.5f);
  EXPECT_FLOAT_EQ(r.at(3, 3, 0), 3.0f);
  FloatImage d = resize_bilinear(make(1, 4, 1, {0, 1, 2, 3}), 1, 2);  // source x 0, 2
  EXPECT_EQ(d.data, (std::vector<float>{0, 2}));
}

TEST(PreprocessSteps, DistortedCropRespectsConstraints) {
  for (uint32_t r = 0; r < 300; ++r) {
    AugmentRng rng(1, 0, 0, r);
    CropWindow w = sample_distorted_crop(200, 300, rng);
    ASSERT_GE(w.y0, 0);
    ASSERT_GE(w.x0, 0);
    ASSERT_LE(w.y0 + w.h, 200);
    ASSERT_LE(w.x0 + w.w, 300);
    const double frac = static_cast<double>(w.h) * w.w / (200.0 * 300.0);
    ASSERT_GE(frac, 0.05 - 1e-9);
    ASSERT_LE(frac, 1.0);
    if (frac < 0.999) {
      const double aspect = static_cast<double>(w.w) / w.h;
      ASSERT_GT(aspect, 0.70) << "rounding allowed, not more";
      ASSERT_LT(aspect, 1.40);
    }
  }
}

TEST(Preprocess, MnistIsAffineNoAugmentation) {
  Image img = ramp(28, 28, 1);
  std::vector<float> a(28 * 28), b(28 * 28);
  AugmentRng r1(1, 0, 0, 0), r2(2, 5, 3, 9);
  preprocess_image(img, {PreprocessKind::kMnist, 28, 1, true}, r1, a.data(), "t");
  preprocess_image(img, {PreprocessKind::kMnist, 28, 1, false}, r2, b.data(), "t");
  EXPECT_EQ(a, b);
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], (img.pixels[i] / 255.0 - 0.5) * 2.0, 1e-6);
  EXPECT_THROW(preprocess_image(ramp(28, 28, 3), {PreprocessKind::kMnist, 28, 1, true}, r1, a.data(), "t"), Error);
}

TEST(Preprocess, Cifar10EvalIsCentreCropStandardized) {
  Image img = ramp(32, 32, 3);
  std::vector<float> out(24 * 24 * 3);
  AugmentRng rng(1, 0, 0, 0);
  preprocess_image(img, {PreprocessKind::kCifar10, 24, 3, false}, rng, out.data(), "t");
  // Hand pipeline: crop at (4, 4), standardize.
  std::vector<double> v;
  for (int y = 0; y < 24; ++y)
    for (int x = 0; x < 24; ++x)
      for (int c = 0; c < 3; ++c) v.push_back(img.pixels[((y + 4) * 32 + x + 4) * 3 + c] / 255.0);
  double m = 0, s = 0;
  for (double x : v) m += x;
  m /= v.size();
  for (double x : v) s += (x - m) * (x - m);
  s = std::sqrt(s / v.size());
  for (size_t i = 0; i < v.size(); ++i) ASSERT_NEAR(out[i], (v[i] - m) / s, 1e-4);
}

TEST(Preprocess, Cifar10TrainIsDeterministicPerRecordAndVaries) {
  Image img = ramp(32, 32, 3);
  std::vector<float> a(24 * 24 * 3), b(a.size()), c(a.size());
  {
    AugmentRng r(123, 2, 4, 17);
    preprocess_image(img, {PreprocessKind::kCifar10, 24, 3, true}, r, a.data(), "t");
  }
  {
    AugmentRng r(123, 2, 4, 17);
    preprocess_image(img, {PreprocessKind::kCifar10, 24, 3, true}, r, b.data(), "t");
  }
  {
    AugmentRng r(123, 3, 4, 17);  // next epoch: a different draw
    preprocess_image(img, {PreprocessKind::kCifar10, 24, 3, true}, r, c.data(), "t");
  }
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  // Standardized: mean 0, std 1 (no clipping after contrast).
  double m = 0, s = 0;
  for (float x : a) m += x;
  m /= a.size();
  for (float x : a) s += (x - m) * (x - m);
  EXPECT_NEAR(m, 0.0, 1e-4);
  EXPECT_NEAR(std::sqrt(s / a.size()), 1.0, 1e-3);
  // Too small for the crop.
  AugmentRng r(1, 0, 0, 0);
  try {
    preprocess_image(ramp(20, 32, 3), {PreprocessKind::kCifar10, 24, 3, true}, r, a.data(), "f:16");
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "f:16: image 20x32 is smaller than the 24x24 crop");
  }
}

TEST(Preprocess, AlexnetEvalHandCase) {
  // A 256x256 image: no resize; centre crop offset 16; x*255 - mean.
  Image img = ramp(256, 256, 3);
  std::vector<float> out(224 * 224 * 3);
  AugmentRng rng(1, 0, 0, 0);
  preprocess_image(img, {PreprocessKind::kAlexnet, 224, 3, false}, rng, out.data(), "t");
  const float mean[3] = {123.68f, 116.78f, 103.94f};
  for (int y : {0, 100, 223})
    for (int x : {0, 57, 223})
      for (int c = 0; c < 3; ++c)
        ASSERT_NEAR(out[(y * 224 + x) * 3 + c], img.pixels[((y + 16) * 256 + x + 16) * 3 + c] - mean[c], 1e-3);
  // Train output is a 224 crop of the same values (possibly flipped): every value appears in the source.
  AugmentRng tr(5, 0, 0, 3);
  preprocess_image(img, {PreprocessKind::kAlexnet, 224, 3, true}, tr, out.data(), "t");
  for (int c = 0; c < 3; ++c) {
    float v = out[c] + mean[c];
    EXPECT_NEAR(v, std::round(v), 1e-3);
  }
}

TEST(Preprocess, InceptionRangesAndShapes) {
  Image img = ramp(120, 160, 3);
  for (bool train : {true, false}) {
    std::vector<float> out(64 * 64 * 3);
    AugmentRng rng(9, 1, 2, 3);
    preprocess_image(img, {PreprocessKind::kInception, 64, 3, train}, rng, out.data(), "t");
    for (float v : out) {
      ASSERT_GE(v, -1.0f - 1e-6f);
      ASSERT_LE(v, 1.0f + 1e-6f);
    }
  }
  // Eval: central crop 0.875 of 120x160 -> start (7, 10), 106x140, resized to 64: corner = source (7, 10).
  std::vector<float> out(64 * 64 * 3);
  AugmentRng rng(9, 1, 2, 3);
  preprocess_image(img, {PreprocessKind::kInception, 64, 3, false}, rng, out.data(), "t");
  EXPECT_NEAR(out[0], (img.pixels[(7 * 160 + 10) * 3] / 255.0f - 0.5f) * 2.0f, 1e-5);
}

TEST(Preprocess, KindSelection) {
  EXPECT_EQ(preprocess_kind_for("fashion_mnist", "lenet"), PreprocessKind::kMnist);
  EXPECT_EQ(preprocess_kind_for("cifar10", "cifar10_alexnet"), PreprocessKind::kCifar10);
  EXPECT_EQ(preprocess_kind_for("imagenet", "alexnet"), PreprocessKind::kAlexnet);
  EXPECT_EQ(preprocess_kind_for("imagenet", "resnet50"), PreprocessKind::kInception);
  EXPECT_THROW(preprocess_kind_for("svhn", "x"), Error);
}
