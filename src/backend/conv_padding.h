// How a convolution's padding reaches a library that pads symmetrically only (cuDNN's legacy API). TensorFlow's SAME
// puts the odd pixel after (pad_bottom = pad_top + 1); a descriptor with unequal pads runs one of two ways, whichever
// moves fewer elements:
//   - output shift: the library pads P = before + stride * m on both sides (m = ceil((after - before) / stride)
//     per dimension), so its windows start m strides early: its output y' has m extra rows (columns) first and e
//     after, ours is y'[m : m + out]. Forward crops y'; backward pads dy to dy' with zeros once for both backward
//     calls, which then read x and write dx as they are. Extra passes: y' and dy' (4 output-sized), none over x:
//     ResNet-50's stride-2 3x3 convolutions, whose outputs are a quarter of their inputs.
//   - input copy: an explicitly zero-padded copy of x (VALID for the library) for forward and backward-filter, dx
//     computed on the padded grid and cropped (6 input-sized passes): a stem whose 3-channel input is far smaller
//     than its output.
// Header-only (the GPU-check build compiles the CUDA backend without the rest of the backend room); the CPU tests
// check the arithmetic of both ways against the reference convolution.
#pragma once

#include <cstdint>

#include "terngrad/backend/op_desc.h"
#include "terngrad/core/error.h"

namespace tg {

enum class ConvPadMode { kSymmetric, kOutputShift, kInputCopy };

// One dimension of an output shift: the library's symmetric pad and the extra outputs before and after ours.
struct ConvDimShift {
  int64_t pad = 0, before = 0, after = 0;
};

struct ConvPadPlan {
  ConvPadMode mode = ConvPadMode::kSymmetric;
  ConvDimShift h, w;  // kOutputShift (kSymmetric: the pads, no extra outputs)
  // The library's padded output (kOutputShift: y', else ours).
  int64_t out_h() const { return out_h_ + h.before + h.after; }
  int64_t out_w() const { return out_w_ + w.before + w.after; }
  int64_t out_h_ = 0, out_w_ = 0;
};

// The shift of one dimension of `in` elements, window k, for `out` outputs padded (before, after).
inline ConvDimShift conv_dim_shift(int64_t in, int64_t k, int64_t stride, int64_t before, int64_t after, int64_t out,
                                   const ConvDesc& d) {
  if (before == after) return {before, 0, 0};
  const int64_t m = after > before ? (after - before + stride - 1) / stride : 0;
  const int64_t p = before + stride * m;
  const int64_t shifted = (in + 2 * p - k) / stride + 1;
  TG_CHECK(shifted >= out + m, "conv {}: the shifted output ({}) cannot hold {} outputs after {}", d.key(), shifted,
           out, m);
  return {p, m, shifted - out - m};
}

// The way for descriptor d (file comment): symmetric pads as they are; else the output shift when its 4 passes over
// y' move fewer elements than the input copy's 6 over the padded x.
inline ConvPadPlan plan_conv_padding(const ConvDesc& d) {
  ConvPadPlan p;
  p.out_h_ = d.out_h, p.out_w_ = d.out_w;
  p.h = conv_dim_shift(d.h, d.kh, d.stride_h, d.pad_top, d.pad_bottom, d.out_h, d);
  p.w = conv_dim_shift(d.w, d.kw, d.stride_w, d.pad_left, d.pad_right, d.out_w, d);
  if (d.pad_top == d.pad_bottom && d.pad_left == d.pad_right) return p;
  const int64_t shifted = d.n * p.out_h() * p.out_w() * d.out_c;
  const int64_t copied = d.n * (d.h + d.pad_top + d.pad_bottom) * (d.w + d.pad_left + d.pad_right) * d.c;
  p.mode = 4 * shifted < 6 * copied ? ConvPadMode::kOutputShift : ConvPadMode::kInputCopy;
  if (p.mode == ConvPadMode::kInputCopy) p.h = {0, 0, 0}, p.w = {0, 0, 0};  // VALID over the padded copy
  return p;
}

}  // namespace tg
