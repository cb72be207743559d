// Descriptors of the ops a Backend runs. Each is a plain struct of sizes and settings, hashable into the
// backend's primitive/algorithm cache. Activations are NHWC; convolution weights are (KH, KW, Cin/groups,
// Cout) as in TensorFlow; fully connected weights are (in, out).
#pragma once

#include <cstdint>
#include <string>

#include "terngrad/math/optim_math.h"

namespace tg {

// kSame: TensorFlow's SAME (output ceil(in / stride); the total padding split with the odd pixel after).
// kValid: no padding (output floor((in - kernel) / stride) + 1).
// kSymmetric: PyTorch's padding = (kernel - 1) / 2 on both sides (output floor((in + 2 pad - kernel) / stride)
// + 1). It gives SAME's output size for odd kernels, with stride 1 SAME's split too; at stride 2 SAME pads one
// pixel less before (a 3x3/2 convolution of an even map: 0 before, 1 after against 1 and 1), so a network
// trained with one computes something else with the other. ModelConfig::padding_style picks one per network.
enum class Padding { kSame, kValid, kSymmetric };
const char* padding_name(Padding padding);  // "SAME", "VALID", "SYMMETRIC"

// The output size and the padding before and after of one spatial dimension.
struct Pad1D {
  int64_t out, before, after;
};
Pad1D pad_1d(int64_t in, int64_t kernel, int64_t stride, Padding padding);

struct ConvDesc {
  int64_t n = 0, h = 0, w = 0, c = 0;             // input (N, H, W, C)
  int64_t kh = 0, kw = 0, out_c = 0, groups = 1;  // weights (KH, KW, C/groups, out_c)
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_top = 0, pad_bottom = 0, pad_left = 0, pad_right = 0;
  int64_t out_h = 0, out_w = 0;  // output (N, out_h, out_w, out_c)
  bool has_bias = false;         // bias (out_c)
  // w and dw in (out_c, KH, KW, C/groups) instead: the filter layout of a backend whose conv2d_filter_ohwi() is true
  // (cuDNN's NHWC filters): w written once a step by cast_many's transposing pairs and dw read back to ours by
  // unscale_and_check_many's, instead of both transposed per call.
  bool filter_ohwi = false;
  std::string key() const;
};
ConvDesc make_conv_desc(int64_t n, int64_t h, int64_t w, int64_t c, int64_t kh, int64_t kw, int64_t out_c,
                        int64_t stride, Padding padding, int64_t groups, bool has_bias);

// What Backend::reduce_into adds up per tensor: its elements or their squares.
enum class Reduction { kSum, kSumSquares };

// kAvg divides by the window's in-image cells (TF's average pooling, oneDNN pooling_avg_exclude_padding);
// kAvgIncludePad by the whole window, padding included (PyTorch's avg_pool2d default count_include_pad=True).
enum class PoolKind { kMax, kAvg, kAvgIncludePad };
struct PoolDesc {
  PoolKind kind = PoolKind::kMax;
  int64_t n = 0, h = 0, w = 0, c = 0;  // input (N, H, W, C)
  int64_t kh = 0, kw = 0, stride_h = 1, stride_w = 1;
  int64_t pad_top = 0, pad_bottom = 0, pad_left = 0, pad_right = 0;
  int64_t out_h = 0, out_w = 0;  // output (N, out_h, out_w, C)
  std::string key() const;
};
PoolDesc make_pool_desc(PoolKind kind, int64_t n, int64_t h, int64_t w, int64_t c, int64_t kh, int64_t kw,
                        int64_t stride, Padding padding);

// TensorFlow LRN across channels: y = x / (bias + alpha * sum_{|d'-d|<=radius} x_{d'}^2)^beta
// (alpha is NOT divided by the window size, unlike Caffe and oneDNN).
struct LrnDesc {
  int64_t n = 0, h = 0, w = 0, c = 0;
  int64_t depth_radius = 5;
  float bias = 1.f, alpha = 1.f, beta = 0.5f;
  std::string key() const;
};

// Batch norm over N*H*W per channel C (rank-2 input: N per channel). gamma is optional (beta-only BN as
// the reference's nets use). Variance is the population variance of the batch. relu: a ReLU fused into the
// output (the forwards write max(y, 0), the backward takes that output's gradient; Backend's batch norm).
struct BatchNormDesc {
  int64_t rows = 0;  // N*H*W
  int64_t c = 0;
  float epsilon = 0.001f;
  bool has_gamma = false;
  bool relu = false;
  std::string key() const;
};

// Fully connected: y (N, out) = x (N, in) * w (in, out) + b (out).
struct InnerProductDesc {
  int64_t n = 0, in = 0, out = 0;
  bool has_bias = true;
  std::string key() const;
};

// One optimizer update of one tensor, TF semantics (see include/terngrad/math/optim_math.h).
// OptimizerKind and OptimizerStep (an optimizer_update's parameters): terngrad/math/optim_math.h.

}  // namespace tg
