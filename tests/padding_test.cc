// TensorFlow's SAME/VALID padding, checked against values worked out by hand rather than against the
// implementation's own pad_1d (which the reference-op tests share with the backends):
//   - the output size and the split of the padding (TF: out = ceil(in / stride) for SAME, total =
//     max((out - 1) * stride + kernel - in, 0), the odd pixel after: 6 with kernel 3, stride 2 -> pads (0, 1));
//   - a 3x3 stride-2 convolution, max and average pooling (average over the in-image pixels, as TF) of a 6x6
//     image whose pixel (r, c) is 6r + c, and the convolution's input gradient, whose values show which rows and
//     columns each window covered; a split of (1, 0), as cuDNN or PyTorch would pad, gives other numbers;
//   - PyTorch's symmetric padding (Padding::kSymmetric, --padding_style torch) on the same image: pads (1, 1),
//     and average pooling that divides by the whole window (PoolKind::kAvgIncludePad, count_include_pad).
// And the front's refusal of bad pooling and LRN arguments (one contract for every backend).
// On every backend of the build: the CPU one, and the CUDA one where a device exists (else SKIPPED).
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "terngrad/backend/backend.h"
#include "terngrad/backend/op_desc.h"
#include "terngrad/core/buffer.h"
#include "terngrad/core/error.h"

namespace tg {
namespace {

struct PadCase {
  int64_t in, kernel, stride;
  Padding padding;
  int64_t out, before, after;  // by hand
};

TEST(TfPadding, HandComputedSplits) {
  const PadCase cases[] = {
      {6, 3, 2, Padding::kSame, 3, 0, 1},      // total (3-1)*2+3-6 = 1: the odd pixel after
      {5, 3, 2, Padding::kSame, 3, 1, 1},      // total 2
      {7, 3, 2, Padding::kSame, 4, 1, 1},      // total 3*2+3-7 = 2
      {10, 4, 3, Padding::kSame, 4, 1, 2},     // total 3*3+4-10 = 3
      {224, 11, 4, Padding::kSame, 56, 3, 4},  // AlexNet's conv1: total 55*4+11-224 = 7
      {28, 5, 1, Padding::kSame, 28, 2, 2},    // LeNet's convolutions
      {1, 3, 1, Padding::kSame, 1, 1, 1},
      {4, 2, 2, Padding::kSame, 2, 0, 0},       // windows tile the input
      {6, 1, 2, Padding::kSame, 3, 0, 0},       // (3-1)*2+1-6 = -1: no padding
      {7, 3, 2, Padding::kValid, 3, 0, 0},      // (7-3)/2+1
      {299, 3, 2, Padding::kValid, 149, 0, 0},  // Inception-v3's first convolution
      {6, 3, 2, Padding::kValid, 2, 0, 0},
      {2, 5, 1, Padding::kValid, 0, 0, 0},  // the kernel does not fit
      // PyTorch's padding = (kernel - 1) / 2 both sides, out = (in + 2 pad - kernel) / stride + 1:
      {6, 3, 2, Padding::kSymmetric, 3, 1, 1},      // SAME's size, one pixel more before
      {224, 7, 2, Padding::kSymmetric, 112, 3, 3},  // ResNet's conv1 (SAME: 2, 3)
      {112, 3, 2, Padding::kSymmetric, 56, 1, 1},   // ResNet's max pool (SAME: 0, 1)
      {35, 3, 1, Padding::kSymmetric, 35, 1, 1},    // Inception's 3x3/1 average pools (as SAME)
      {28, 2, 2, Padding::kSymmetric, 14, 0, 0},    // LeNet's pools
      {27, 2, 2, Padding::kSymmetric, 13, 0, 0},    // an odd map: floor (SAME gives 14)
      {2, 5, 1, Padding::kSymmetric, 2, 2, 2},
  };
  for (const PadCase& c : cases) {
    const Pad1D p = pad_1d(c.in, c.kernel, c.stride, c.padding);
    const std::string what = std::to_string(c.in) + " k" + std::to_string(c.kernel) + " s" + std::to_string(c.stride) +
                             " " + padding_name(c.padding);
    EXPECT_EQ(p.out, c.out) << what;
    EXPECT_EQ(p.before, c.before) << what;
    EXPECT_EQ(p.after, c.after) << what;
  }
}

// ---- the ops ------------------------------------------------------------------------------------------------------
// The 6x6 image: x(r, c) = 6r + c. With SAME, kernel 3, stride 2 (pads (0, 1)) the windows cover the rows (and
// columns) R0 = {0,1,2}, R1 = {2,3,4}, R2 = {4,5}.

class PaddingOps : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() != "cpu") {
      if (!cuda_backend_compiled()) GTEST_SKIP() << "this build has no CUDA backend (configure with -DTG_CUDA=ON)";
      try {
        be_ = make_backend(GetParam());
      } catch (const Error& e) {
        GTEST_SKIP() << "no usable CUDA device: " << e.what();
      }
    } else {
      be_ = make_backend("cpu", BackendOptions{1});
    }
  }

  // A tensor on the backend holding `values` (f32), kept alive by the fixture.
  Tensor put(const Shape& s, const std::vector<float>& values) {
    buffers_.emplace_back(be_->allocator(), static_cast<size_t>(s.numel()) * 4);
    Tensor t(buffers_.back().data(), s, DType::kF32, be_->device());
    std::vector<float> host = values;
    host.resize(s.numel(), 0.f);
    be_->copy(t, Tensor(host.data(), s, DType::kF32, Device::cpu()));
    return t;
  }
  std::vector<float> get(const Tensor& t) {
    std::vector<float> host(t.numel());
    be_->copy(Tensor(host.data(), t.shape(), DType::kF32, Device::cpu()), t);
    return host;
  }
  static std::vector<float> image6() {
    std::vector<float> x(36);
    for (int r = 0; r < 6; ++r)
      for (int c = 0; c < 6; ++c) x[r * 6 + c] = static_cast<float>(6 * r + c);
    return x;
  }

  std::unique_ptr<Backend> be_;
  std::vector<Buffer> buffers_;
};

TEST_P(PaddingOps, ConvolutionSameStride2On6) {
  const ConvDesc d = make_conv_desc(1, 6, 6, 1, 3, 3, 1, 2, Padding::kSame, 1, false);
  ASSERT_EQ(d.out_h, 3);
  const Tensor x = put(Shape{1, 6, 6, 1}, image6()), w = put(Shape{3, 3, 1, 1}, std::vector<float>(9, 1.f));
  const Tensor y = put(Shape{1, 3, 3, 1}, {});
  be_->conv2d_forward(d, x, w, Tensor(), y);
  // y(i, j) = sum over R_i x C_j of 6r + c = 6 |C_j| sum(R_i) + |R_i| sum(C_j); sums 3, 9, 9 and sizes 3, 3, 2.
  EXPECT_EQ(get(y), (std::vector<float>{63, 81, 63, 171, 189, 135, 168, 180, 126}));

  // dx with dy = 1 and w = 1 counts the windows covering each pixel: per row (and column) 1 1 2 1 2 1, with
  // pads (1, 0) it would be 1 2 1 2 1 1.
  const Tensor dy = put(Shape{1, 3, 3, 1}, std::vector<float>(9, 1.f)), dx = put(Shape{1, 6, 6, 1}, {});
  be_->conv2d_backward(d, x, w, dy, dx, Tensor(), Tensor());
  const float cover[6] = {1, 1, 2, 1, 2, 1};
  std::vector<float> want(36);
  for (int r = 0; r < 6; ++r)
    for (int c = 0; c < 6; ++c) want[r * 6 + c] = cover[r] * cover[c];
  EXPECT_EQ(get(dx), want);
}

TEST_P(PaddingOps, ConvolutionValidStride2On6) {
  const ConvDesc d = make_conv_desc(1, 6, 6, 1, 3, 3, 1, 2, Padding::kValid, 1, false);
  const Tensor x = put(Shape{1, 6, 6, 1}, image6()), w = put(Shape{3, 3, 1, 1}, std::vector<float>(9, 1.f));
  const Tensor y = put(Shape{1, 2, 2, 1}, {});
  be_->conv2d_forward(d, x, w, Tensor(), y);
  EXPECT_EQ(get(y), (std::vector<float>{63, 81, 171, 189}));  // rows and columns {0,1,2}, {2,3,4}
}

TEST_P(PaddingOps, MaxAndAveragePoolingSameStride2On6) {
  for (PoolKind kind : {PoolKind::kMax, PoolKind::kAvg}) {
    const PoolDesc d = make_pool_desc(kind, 1, 6, 6, 1, 3, 3, 2, Padding::kSame);
    const Tensor x = put(Shape{1, 6, 6, 1}, image6()), y = put(Shape{1, 3, 3, 1}, {});
    be_->pool_forward(d, x, y, Tensor());
    if (kind == PoolKind::kMax) {  // 6 max(R_i) + max(C_j): maxima 2, 4, 5
      EXPECT_EQ(get(y), (std::vector<float>{14, 16, 17, 26, 28, 29, 32, 34, 35}));
    } else {  // 6 mean(R_i) + mean(C_j) over the pixels inside the image: means 1, 3, 4.5
      const std::vector<float> want{7, 9, 10.5f, 19, 21, 22.5f, 28, 30, 31.5f}, got = get(y);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5 * want[i]) << "avg pool, output " << i;
    }
  }
}

// Symmetric padding, kernel 3, stride 2 on the 6x6 image: the windows cover R0 = {0,1} (and the pad row -1),
// R1 = {1,2,3}, R2 = {3,4,5}; sums 1, 6, 12, sizes 2, 3, 3.
TEST_P(PaddingOps, ConvolutionSymmetricStride2On6) {
  const ConvDesc d = make_conv_desc(1, 6, 6, 1, 3, 3, 1, 2, Padding::kSymmetric, 1, false);
  ASSERT_EQ(d.out_h, 3);
  ASSERT_EQ(d.pad_top, 1);
  const Tensor x = put(Shape{1, 6, 6, 1}, image6()), w = put(Shape{3, 3, 1, 1}, std::vector<float>(9, 1.f));
  const Tensor y = put(Shape{1, 3, 3, 1}, {});
  be_->conv2d_forward(d, x, w, Tensor(), y);
  // y(i, j) = 6 |C_j| sum(R_i) + |R_i| sum(C_j)
  EXPECT_EQ(get(y), (std::vector<float>{14, 30, 42, 75, 126, 144, 147, 234, 252}));
  const Tensor dy = put(Shape{1, 3, 3, 1}, std::vector<float>(9, 1.f)), dx = put(Shape{1, 6, 6, 1}, {});
  be_->conv2d_backward(d, x, w, dy, dx, Tensor(), Tensor());
  const float cover[6] = {1, 2, 1, 2, 1, 1};  // SAME's split gives 1 1 2 1 2 1
  std::vector<float> want(36);
  for (int r = 0; r < 6; ++r)
    for (int c = 0; c < 6; ++c) want[r * 6 + c] = cover[r] * cover[c];
  EXPECT_EQ(get(dx), want);
}

TEST_P(PaddingOps, PoolingSymmetricStride2On6) {
  const float conv_sums[9] = {14, 30, 42, 75, 126, 144, 147, 234, 252};  // the window sums above
  const float cells[9] = {4, 6, 6, 6, 9, 9, 6, 9, 9};                    // |R_i| |C_j|
  for (PoolKind kind : {PoolKind::kMax, PoolKind::kAvg, PoolKind::kAvgIncludePad}) {
    const PoolDesc d = make_pool_desc(kind, 1, 6, 6, 1, 3, 3, 2, Padding::kSymmetric);
    const Tensor x = put(Shape{1, 6, 6, 1}, image6()), y = put(Shape{1, 3, 3, 1}, {});
    be_->pool_forward(d, x, y, Tensor());
    const std::vector<float> got = get(y);
    ASSERT_EQ(got.size(), 9u);
    for (int i = 0; i < 9; ++i) {
      // max: 6 max(R_i) + max(C_j), maxima 1, 3, 5; avg: over the in-image cells; include-pad: over all 9.
      const float want = kind == PoolKind::kMax   ? static_cast<float>(6 * (2 * (i / 3) + 1) + 2 * (i % 3) + 1)
                         : kind == PoolKind::kAvg ? conv_sums[i] / cells[i]
                                                  : conv_sums[i] / 9.f;
      EXPECT_NEAR(got[i], want, 1e-5 * want) << "pool kind " << static_cast<int>(kind) << ", output " << i;
    }
  }
  // The include-pad average's input gradient with dy = 1: (windows covering the pixel) / 9.
  const PoolDesc d = make_pool_desc(PoolKind::kAvgIncludePad, 1, 6, 6, 1, 3, 3, 2, Padding::kSymmetric);
  const Tensor x = put(Shape{1, 6, 6, 1}, image6()), y = put(Shape{1, 3, 3, 1}, {});
  const Tensor dy = put(Shape{1, 3, 3, 1}, std::vector<float>(9, 1.f)), dx = put(Shape{1, 6, 6, 1}, {});
  be_->pool_forward(d, x, y, Tensor());
  be_->pool_backward(d, x, y, dy, Tensor(), dx);
  const float cover[6] = {1, 2, 1, 2, 1, 1};
  const std::vector<float> got = get(dx);
  for (int r = 0; r < 6; ++r)
    for (int c = 0; c < 6; ++c) EXPECT_NEAR(got[r * 6 + c], cover[r] * cover[c] / 9.f, 1e-6) << r << "," << c;
}

// The front checks pooling's and LRN's descriptors and sizes for every backend, before any implementation runs: the
// same refusal, one line, on the CPU and on CUDA.
TEST_P(PaddingOps, TheFrontRefusesBadPoolAndLrnArgumentsOnEveryBackend) {
  auto error_of = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  const Tensor x = put(Shape{1, 6, 6, 1}, image6()), y = put(Shape{1, 3, 3, 1}, {}), small = put(Shape{1, 2, 2, 1}, {});
  PoolDesc wide = make_pool_desc(PoolKind::kMax, 1, 6, 6, 1, 3, 3, 2, Padding::kSame);
  wide.pad_bottom = 3;  // a window with no image cell
  std::string e = error_of([&] { be_->pool_forward(wide, x, y, Tensor()); });
  EXPECT_NE(e.find("pool_forward: padding as large as the kernel"), std::string::npos) << e;
  e = error_of([&] { be_->pool_workspace_bytes(wide); });
  EXPECT_NE(e.find("pool_workspace_bytes: padding as large as the kernel"), std::string::npos) << e;
  const PoolDesc d = make_pool_desc(PoolKind::kMax, 1, 6, 6, 1, 3, 3, 2, Padding::kSame);
  e = error_of([&] { be_->pool_forward(d, x, small, Tensor()); });
  EXPECT_NE(e.find("y " + small.str() + " must have 9 elements"), std::string::npos) << e;
  e = error_of([&] { be_->pool_backward(d, x, y, small, Tensor(), x); });
  EXPECT_NE(e.find("dy " + small.str() + " must have 9 elements"), std::string::npos) << e;
  LrnDesc lrn;
  lrn.n = 1, lrn.h = 6, lrn.w = 6, lrn.c = 1, lrn.depth_radius = 2;
  e = error_of([&] { be_->lrn_forward(lrn, x, small, Tensor()); });
  EXPECT_NE(e.find("y " + small.str() + " must have 36 elements"), std::string::npos) << e;
  lrn.depth_radius = -1;
  e = error_of([&] { be_->lrn_backward(lrn, x, x, Tensor(), x); });
  EXPECT_NE(e.find("needs channels and a depth_radius >= 0"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
}

INSTANTIATE_TEST_SUITE_P(Backends, PaddingOps, ::testing::Values("cpu", "cuda:0"),
                         [](const ::testing::TestParamInfo<std::string>& i) {
                           return i.param == "cpu" ? std::string("cpu") : std::string("cuda");
                         });

}  // namespace
}  // namespace tg
