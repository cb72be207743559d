// TF padding arithmetic and descriptor keys for primitive caches.
#include "terngrad/backend/op_desc.h"

#include <fmt/format.h>

#include <algorithm>

#include "terngrad/core/error.h"

namespace tg {

const char* padding_name(Padding padding) {
  switch (padding) {
    case Padding::kSame:
      return "SAME";
    case Padding::kValid:
      return "VALID";
    case Padding::kSymmetric:
      return "SYMMETRIC";
  }
  return "?";
}

Pad1D pad_1d(int64_t in, int64_t kernel, int64_t stride, Padding padding) {
  TG_CHECK(stride >= 1 && kernel >= 1, "kernel {} and stride {} must be positive", kernel, stride);
  if (padding == Padding::kSame) {
    int64_t out = (in + stride - 1) / stride;
    int64_t total = std::max<int64_t>((out - 1) * stride + kernel - in, 0);
    return {out, total / 2, total - total / 2};
  }
  if (padding == Padding::kSymmetric) {
    const int64_t pad = (kernel - 1) / 2;
    int64_t out = in + 2 * pad >= kernel ? (in + 2 * pad - kernel) / stride + 1 : 0;
    return {out, pad, pad};
  }
  int64_t out = in >= kernel ? (in - kernel) / stride + 1 : 0;
  return {out, 0, 0};
}

ConvDesc make_conv_desc(int64_t n, int64_t h, int64_t w, int64_t c, int64_t kh, int64_t kw, int64_t out_c,
                        int64_t stride, Padding padding, int64_t groups, bool has_bias) {
  TG_CHECK(groups >= 1 && c % groups == 0 && out_c % groups == 0,
           "convolution groups {} must divide input channels {} and output channels {}", groups, c, out_c);
  ConvDesc d;
  d.n = n, d.h = h, d.w = w, d.c = c, d.kh = kh, d.kw = kw, d.out_c = out_c, d.groups = groups;
  d.stride_h = d.stride_w = stride;
  Pad1D ph = pad_1d(h, kh, stride, padding), pw = pad_1d(w, kw, stride, padding);
  d.out_h = ph.out, d.pad_top = ph.before, d.pad_bottom = ph.after;
  d.out_w = pw.out, d.pad_left = pw.before, d.pad_right = pw.after;
  d.has_bias = has_bias;
  return d;
}

PoolDesc make_pool_desc(PoolKind kind, int64_t n, int64_t h, int64_t w, int64_t c, int64_t kh, int64_t kw,
                        int64_t stride, Padding padding) {
  PoolDesc d;
  d.kind = kind, d.n = n, d.h = h, d.w = w, d.c = c, d.kh = kh, d.kw = kw;
  d.stride_h = d.stride_w = stride;
  Pad1D ph = pad_1d(h, kh, stride, padding), pw = pad_1d(w, kw, stride, padding);
  d.out_h = ph.out, d.pad_top = ph.before, d.pad_bottom = ph.after;
  d.out_w = pw.out, d.pad_left = pw.before, d.pad_right = pw.after;
  return d;
}

std::string ConvDesc::key() const {
  return fmt::format("conv:{}x{}x{}x{}:k{}x{}:o{}:g{}:s{}x{}:p{},{},{},{}:b{}{}", n, h, w, c, kh, kw, out_c, groups,
                     stride_h, stride_w, pad_top, pad_bottom, pad_left, pad_right, has_bias,
                     filter_ohwi ? ":ohwi" : "");
}
std::string PoolDesc::key() const {
  return fmt::format("pool{}:{}x{}x{}x{}:k{}x{}:s{}x{}:p{},{},{},{}", kind == PoolKind::kMax ? "max" : "avg", n, h, w,
                     c, kh, kw, stride_h, stride_w, pad_top, pad_bottom, pad_left, pad_right);
}
std::string LrnDesc::key() const {
  return fmt::format("lrn:{}x{}x{}x{}:r{}:{}:{}:{}", n, h, w, c, depth_radius, bias, alpha, beta);
}
std::string BatchNormDesc::key() const {
  return fmt::format("bn:{}x{}:e{}:g{}{}", rows, c, epsilon, has_gamma, relu ? ":relu" : "");
}
std::string InnerProductDesc::key() const { return fmt::format("ip:{}x{}x{}:b{}", n, in, out, has_bias); }

}  // namespace tg
