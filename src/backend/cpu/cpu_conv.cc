// CpuBackend::conv2d_forward / conv2d_backward on oneDNN convolutions.
//
// Activations are NHWC (oneDNN `nhwc`, dims given as N, C, H, W). Weights arrive in TensorFlow's layout
// (KH, KW, Cin/groups, Cout); for groups == 1 that is oneDNN's `hwio`, for groups > 1 it is described to
// oneDNN by explicit strides over the grouped dims (G, Cout/G, Cin/G, KH, KW), since TF's output channel
// index is g * (Cout/G) + o. The primitives pick their own weight format (format_tag::any); a cached
// reorder converts the caller's weights into it (and the weight gradient back) when it differs. Weights and their
// gradient in the (Cout, KH, KW, Cin/groups) filter layout (ConvDesc::filter_ohwi, what a CUDA net hands its
// convolutions) go through ours by copies: accepted, not preferred (conv2d_filter_ohwi() is false here).
// Padding is TensorFlow's split, already in the ConvDesc (SAME puts the odd pixel after). Activations,
// weights, bias and gradients are all f32 or all bf16 (oneDNN accumulates in f32); the dtype is part of the
// cache key.
#include <dnnl.hpp>
#include <memory>
#include <vector>

#include "src/backend/cpu/cpu_backend.h"
#include "src/backend/cpu/cpu_transpose.h"
#include "src/backend/cpu/dnnl_util.h"

namespace tg {
namespace {

using namespace dnnl_util;
using dnnl::algorithm;
using dnnl::prop_kind;

Dims src_dims(const ConvDesc& d) { return {d.n, d.c, d.h, d.w}; }
Dims dst_dims(const ConvDesc& d) { return {d.n, d.out_c, d.out_h, d.out_w}; }
Dims strides(const ConvDesc& d) { return {d.stride_h, d.stride_w}; }
Dims pad_l(const ConvDesc& d) { return {d.pad_top, d.pad_left}; }
Dims pad_r(const ConvDesc& d) { return {d.pad_bottom, d.pad_right}; }

Dims weight_dims(const ConvDesc& d) {
  int64_t g = d.groups, og = d.out_c / g, ig = d.c / g;
  if (g == 1) return {d.out_c, d.c, d.kh, d.kw};
  return {g, og, ig, d.kh, d.kw};
}

// The caller's weights (KH, KW, Cin/G, Cout) as a oneDNN descriptor.
dnnl::memory::desc tf_weight_desc(const ConvDesc& d, DType t) {
  int64_t g = d.groups, og = d.out_c / g, ig = d.c / g, O = d.out_c;
  if (g == 1) return md(weight_dims(d), t, tag::hwio);
  // element (g, o, i, h, w) lives at ((h * KW + w) * ig + i) * O + g * og + o
  Dims s = {og, 1, O, d.kw * ig * O, ig * O};
  return dnnl::memory::desc(weight_dims(d), dnnl_type(t), s);
}

OpKey conv_key(CpuOp op, const ConvDesc& d, DType t) {
  return OpKey(op, {d.n, d.h, d.w, d.c, d.kh, d.kw, d.out_c, d.groups, d.stride_h, d.stride_w, d.pad_top, d.pad_bottom,
                    d.pad_left, d.pad_right, d.has_bias, static_cast<int64_t>(t)});
}

dnnl::memory::desc any_weight_desc(const ConvDesc& d, DType t) { return md(weight_dims(d), t, tag::any); }
dnnl::memory::desc act_desc(const Dims& dims, DType t) { return md(dims, t, tag::nhwc); }
dnnl::memory::desc bias_desc(const ConvDesc& d, DType t) { return md({d.out_c}, t, tag::x); }

dnnl::convolution_forward::desc forward_desc(const ConvDesc& d, DType t) {
  if (d.has_bias)
    return dnnl::convolution_forward::desc(prop_kind::forward_training, algorithm::convolution_direct,
                                           act_desc(src_dims(d), t), any_weight_desc(d, t), bias_desc(d, t),
                                           act_desc(dst_dims(d), t), strides(d), pad_l(d), pad_r(d));
  return dnnl::convolution_forward::desc(prop_kind::forward_training, algorithm::convolution_direct,
                                         act_desc(src_dims(d), t), any_weight_desc(d, t), act_desc(dst_dims(d), t),
                                         strides(d), pad_l(d), pad_r(d));
}

using ConvBackwardWeights = BackwardWeightsOp<dnnl::convolution_backward_weights>;

void check_args(const CpuBackend& be, const ConvDesc& d, const char* op, const Tensor& x, const Tensor& w) {
  TG_CHECK(d.groups >= 1 && d.c % d.groups == 0 && d.out_c % d.groups == 0,
           "{}: groups {} must divide input channels {} and output channels {}", op, d.groups, d.c, d.out_c);
  TG_CHECK(d.out_h > 0 && d.out_w > 0, "{}: empty output {}x{} for {}", op, d.out_h, d.out_w, d.key());
  be.require_compute(x.dtype(), op);
  check_act(x, d.n * d.h * d.w * d.c, x.dtype(), op, "x");
  check_act(w, d.kh * d.kw * (d.c / d.groups) * d.out_c, x.dtype(), op, "w");
}

}  // namespace

namespace {
// A filter-layout tensor's memory in ours, (KH*KW*C/g) x out_c, in `ours` (the CPU computes in its own layout;
// the other is accepted so a net or test can hand either to any backend). `t` is copied in when `copy`.
Tensor filter_as_hwio(const ConvDesc& d, const Tensor& t, std::vector<unsigned char>& ours, bool copy) {
  const int64_t rows = d.kh * d.kw * (d.c / d.groups), cols = d.out_c;
  const size_t es = dtype_size(t.dtype());
  TG_CHECK(t.numel() == rows * cols, "conv {}: weights {} do not match", d.key(), t.str());
  ours.resize(static_cast<size_t>(t.numel()) * es);
  if (copy) cpu::transpose_elements(t.raw(), ours.data(), cols, rows, es);
  return Tensor(ours.data(), t.shape(), t.dtype(), Device::cpu());
}
}  // namespace

void CpuBackend::conv2d_forward_impl(const ConvDesc& d, const Tensor& x, const Tensor& w, const Tensor& b,
                                     const Tensor& y) {
  if (d.filter_ohwi) {
    ConvDesc ours = d;
    ours.filter_ohwi = false;
    std::vector<unsigned char> hwio;
    return conv2d_forward_impl(ours, x, filter_as_hwio(d, w, hwio, true), b, y);
  }
  const char* op = "conv2d_forward";
  check_args(*this, d, op, x, w);
  const DType t = x.dtype();
  check_act(y, d.n * d.out_h * d.out_w * d.out_c, t, op, "y");
  if (d.has_bias) check_act(b, d.out_c, t, op, "b");

  run_weighted_forward(
      *this, conv_key(CpuOp::kConvFwd, d, t),
      [&] {
        dnnl::convolution_forward::primitive_desc pd;
        TG_DNNL_CALL(
            pd = dnnl::convolution_forward::primitive_desc(forward_desc(d, t), user_scratchpad_attr(), engine()));
        return pd;
      },
      [&] { return tf_weight_desc(d, t); }, d.has_bias, x, w, b, y);
}

void CpuBackend::conv2d_backward_impl(const ConvDesc& d, const Tensor& x, const Tensor& w, const Tensor& dy,
                                      const Tensor& dx, const Tensor& dw, const Tensor& db) {
  if (d.filter_ohwi) {  // w in, dw out through our layout
    ConvDesc ours = d;
    ours.filter_ohwi = false;
    std::vector<unsigned char> w_hwio, dw_hwio;
    const Tensor dw_ours = dw ? filter_as_hwio(d, dw, dw_hwio, false) : Tensor();
    conv2d_backward_impl(ours, x, dx ? filter_as_hwio(d, w, w_hwio, true) : w, dy, dx, dw_ours, db);
    if (dw)
      cpu::transpose_elements(dw_ours.raw(), dw.raw(), d.kh * d.kw * (d.c / d.groups), d.out_c, dtype_size(dw.dtype()));
    return;
  }
  const char* op = "conv2d_backward";
  check_args(*this, d, op, x, w);
  const DType t = x.dtype();
  check_act(dy, d.n * d.out_h * d.out_w * d.out_c, t, op, "dy");
  if (dx) check_act(dx, x.numel(), t, op, "dx");
  if (dw) check_act(dw, w.numel(), t, op, "dw");
  if (db) {
    TG_CHECK(d.has_bias, "{}: a bias gradient was requested from a convolution without bias ({})", op, d.key());
    check_act(db, d.out_c, t, op, "db");
  }

  if (dx) {
    auto& e = cached<WeightedPrimitive>(conv_key(CpuOp::kConvBwdData, d, t), [&] {
      auto e = std::make_unique<WeightedPrimitive>();
      dnnl::convolution_forward::primitive_desc hint;
      dnnl::convolution_backward_data::primitive_desc pd;
      TG_DNNL_CALL(hint = dnnl::convolution_forward::primitive_desc(forward_desc(d, t), engine_));
      dnnl::convolution_backward_data::desc bd(algorithm::convolution_direct, act_desc(src_dims(d), t),
                                               any_weight_desc(d, t), act_desc(dst_dims(d), t), strides(d), pad_l(d),
                                               pad_r(d));
      TG_DNNL_CALL(pd = dnnl::convolution_backward_data::primitive_desc(bd, user_scratchpad_attr(), engine_, hint));
      e->init(pd, {DNNL_ARG_DIFF_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DIFF_DST}, engine_);
      e->weights.init(pd.weights_desc(), tf_weight_desc(d, t), engine_);
      return e;
    });
    e.run(stream_, {dx.raw(), e.weights.prepare(stream_, w), dy.raw()});
  }

  if (dw || db) {
    auto& e = cached<ConvBackwardWeights>(conv_key(CpuOp::kConvBwdWeights, d, t), [&] {
      auto e = std::make_unique<ConvBackwardWeights>();
      dnnl::convolution_forward::primitive_desc hint;
      dnnl::convolution_backward_weights::primitive_desc pd;
      TG_DNNL_CALL(hint = dnnl::convolution_forward::primitive_desc(forward_desc(d, t), engine_));
      auto make = [&]() {
        if (d.has_bias)
          return dnnl::convolution_backward_weights::desc(algorithm::convolution_direct, act_desc(src_dims(d), t),
                                                          any_weight_desc(d, t), bias_desc(d, t),
                                                          act_desc(dst_dims(d), t), strides(d), pad_l(d), pad_r(d));
        return dnnl::convolution_backward_weights::desc(algorithm::convolution_direct, act_desc(src_dims(d), t),
                                                        any_weight_desc(d, t), act_desc(dst_dims(d), t), strides(d),
                                                        pad_l(d), pad_r(d));
      };
      TG_DNNL_CALL(
          pd = dnnl::convolution_backward_weights::primitive_desc(make(), user_scratchpad_attr(), engine_, hint));
      e->init(pd, tf_weight_desc(d, t), d.has_bias, engine_);
      return e;
    });
    e.run(stream_, x, dy, dw, db, d.has_bias);
  }
}

}  // namespace tg
