// The CUDA backend's ways of running TensorFlow's asymmetric SAME padding on a library that pads symmetrically
// (src/backend/conv_padding.h), checked on the CPU against the double-precision reference convolution: the output
// shift (symmetric pad P, the first m outputs of y' dropped; backward from dy' zero-padded) gives the asymmetric
// convolution's y, dx and dw; the input copy (VALID over x zero-padded) likewise; and which way each of ResNet-50's
// asymmetric convolutions takes.
#include "src/backend/conv_padding.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "common/op_case.h"
#include "common/reference_ops.h"

namespace tg {
namespace {

using Vec = ref::Vec;

Vec random_vec(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  Vec v(static_cast<size_t>(n));
  for (double& x : v) x = u(rng);
  return v;
}

// t (N, H, W, C) with `before`/`after` rows and columns of zeros around it (a negative count crops).
Vec pad(const Vec& t, int64_t n, int64_t h, int64_t w, int64_t c, int64_t top, int64_t bottom, int64_t left,
        int64_t right) {
  const int64_t H = h + top + bottom, W = w + left + right;
  Vec out(static_cast<size_t>(n * H * W * c), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t y = 0; y < H; ++y)
      for (int64_t x = 0; x < W; ++x) {
        const int64_t sy = y - top, sx = x - left;
        if (sy < 0 || sy >= h || sx < 0 || sx >= w) continue;
        for (int64_t k = 0; k < c; ++k)
          out[static_cast<size_t>(((i * H + y) * W + x) * c + k)] =
              t[static_cast<size_t>(((i * h + sy) * w + sx) * c + k)];
      }
  return out;
}

void expect_near(const Vec& a, const Vec& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-12) << what << " element " << i;
}

// The asymmetric convolutions of the ops table and of ResNet-50 (scaled down in batch), each through the output
// shift and through the input copy, whichever the plan would pick.
std::vector<ConvDesc> asymmetric_descs() {
  std::vector<ConvDesc> out;
  for (const ConvDesc& d : testing::table_conv_descs())
    if (d.pad_top != d.pad_bottom || d.pad_left != d.pad_right) out.push_back(d);
  out.push_back(make_conv_desc(1, 16, 16, 3, 7, 7, 8, 2, Padding::kSame, 1, false));  // a stem: pads 2, 3
  out.push_back(make_conv_desc(2, 12, 10, 6, 3, 3, 6, 2, Padding::kSame, 1, false));  // pads 0, 1
  out.push_back(make_conv_desc(1, 9, 12, 2, 4, 4, 3, 3, Padding::kSame, 1, true));    // stride 3, mixed pads
  out.push_back(make_conv_desc(1, 11, 11, 4, 3, 3, 4, 2, Padding::kSame, 2, false));  // odd input: symmetric
  return out;
}

TEST(ConvPadding, OutputShiftGivesTheAsymmetricConvolution) {
  for (const ConvDesc& d : asymmetric_descs()) {
    SCOPED_TRACE(d.key());
    const ConvDimShift sh = conv_dim_shift(d.h, d.kh, d.stride_h, d.pad_top, d.pad_bottom, d.out_h, d);
    const ConvDimShift sw = conv_dim_shift(d.w, d.kw, d.stride_w, d.pad_left, d.pad_right, d.out_w, d);
    // The library's symmetric convolution.
    ConvDesc lib = d;
    lib.pad_top = lib.pad_bottom = sh.pad, lib.pad_left = lib.pad_right = sw.pad;
    lib.out_h = d.out_h + sh.before + sh.after, lib.out_w = d.out_w + sw.before + sw.after;
    ASSERT_EQ(lib.out_h, (d.h + 2 * sh.pad - d.kh) / d.stride_h + 1);
    ASSERT_EQ(lib.out_w, (d.w + 2 * sw.pad - d.kw) / d.stride_w + 1);
    const Vec x = random_vec(d.n * d.h * d.w * d.c, 1), w = random_vec(d.kh * d.kw * (d.c / d.groups) * d.out_c, 2);
    const Vec b = d.has_bias ? random_vec(d.out_c, 3) : Vec{};
    const Vec dy = random_vec(d.n * d.out_h * d.out_w * d.out_c, 4);
    const Vec y = ref::conv2d_forward(d, x, w, b);
    const Vec y_shifted = ref::conv2d_forward(lib, x, w, b);
    expect_near(pad(y_shifted, d.n, lib.out_h, lib.out_w, d.out_c, -sh.before, -sh.after, -sw.before, -sw.after), y,
                "y cropped from y'");
    Vec dx, dw, db, dx2, dw2, db2;
    ref::conv2d_backward(d, x, w, dy, &dx, &dw, d.has_bias ? &db : nullptr);
    const Vec dy_shifted = pad(dy, d.n, d.out_h, d.out_w, d.out_c, sh.before, sh.after, sw.before, sw.after);
    ref::conv2d_backward(lib, x, w, dy_shifted, &dx2, &dw2, d.has_bias ? &db2 : nullptr);
    expect_near(dx2, dx, "dx from dy'");
    expect_near(dw2, dw, "dw from dy'");
  }
}

TEST(ConvPadding, InputCopyGivesTheAsymmetricConvolution) {
  for (const ConvDesc& d : asymmetric_descs()) {
    SCOPED_TRACE(d.key());
    ConvDesc lib = d;  // VALID over the padded copy
    lib.h = d.h + d.pad_top + d.pad_bottom, lib.w = d.w + d.pad_left + d.pad_right;
    lib.pad_top = lib.pad_bottom = lib.pad_left = lib.pad_right = 0;
    const Vec x = random_vec(d.n * d.h * d.w * d.c, 5), w = random_vec(d.kh * d.kw * (d.c / d.groups) * d.out_c, 6);
    const Vec dy = random_vec(d.n * d.out_h * d.out_w * d.out_c, 7);
    const Vec xp = pad(x, d.n, d.h, d.w, d.c, d.pad_top, d.pad_bottom, d.pad_left, d.pad_right);
    expect_near(ref::conv2d_forward(lib, xp, w, Vec{}), ref::conv2d_forward(d, x, w, Vec{}), "y");
    Vec dx, dw, dxp, dw2;
    ref::conv2d_backward(d, x, w, dy, &dx, &dw, nullptr);
    ref::conv2d_backward(lib, xp, w, dy, &dxp, &dw2, nullptr);
    expect_near(pad(dxp, d.n, lib.h, lib.w, d.c, -d.pad_top, -d.pad_bottom, -d.pad_left, -d.pad_right), dx,
                "dx cropped");
    expect_near(dw2, dw, "dw");
  }
}

// Which way each takes: the output shift where the output is the smaller (ResNet-50's stride-2 3x3 convolutions, a
// quarter of their input), the input copy for the 3-channel stem with 64 outputs; symmetric pads as they are.
TEST(ConvPadding, EachConvolutionTakesTheWayThatMovesLess) {
  const ConvDesc stem = make_conv_desc(256, 224, 224, 3, 7, 7, 64, 2, Padding::kSame, 1, false);
  EXPECT_EQ(plan_conv_padding(stem).mode, ConvPadMode::kInputCopy);
  for (int64_t c : {128, 256, 512}) {
    const int64_t hw = 56 * 128 / c;  // conv3_1, conv4_1, conv5_1's 3x3 at 56, 28, 14
    const ConvDesc d = make_conv_desc(256, hw, hw, c, 3, 3, c, 2, Padding::kSame, 1, false);
    ASSERT_EQ(d.pad_top, 0);
    ASSERT_EQ(d.pad_bottom, 1);
    const ConvPadPlan p = plan_conv_padding(d);
    EXPECT_EQ(p.mode, ConvPadMode::kOutputShift) << d.key();
    EXPECT_EQ(p.h.pad, 2);
    EXPECT_EQ(p.h.before, 1);
    EXPECT_EQ(p.h.after, 0);
    EXPECT_EQ(p.out_h(), d.out_h + 1);
  }
  const ConvDesc same = make_conv_desc(2, 9, 9, 3, 3, 3, 8, 1, Padding::kSame, 1, true);
  const ConvPadPlan p = plan_conv_padding(same);
  EXPECT_EQ(p.mode, ConvPadMode::kSymmetric);
  EXPECT_EQ(p.h.pad, 1);
  EXPECT_EQ(p.out_h(), same.out_h);
  // The ops table runs both ways (its rows are what the CUDA backend is checked on).
  bool shift = false, copy = false;
  for (const ConvDesc& d : testing::table_conv_descs()) {
    shift = shift || plan_conv_padding(d).mode == ConvPadMode::kOutputShift;
    copy = copy || plan_conv_padding(d).mode == ConvPadMode::kInputCopy;
  }
  EXPECT_TRUE(shift);
  EXPECT_TRUE(copy);
}

}  // namespace
}  // namespace tg
