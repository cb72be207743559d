// CpuBackend::conv2d_forward / conv2d_backward on oneDNN convolutions.
//
// Activations are NHWC (oneDNN `nhwc`, dims given as N, C, H, W). Weights arrive in TensorFlow's layout
// (KH, KW, Cin/groups, Cout); for groups == 1 that is oneDNN's `hwio`, for groups > 1 it is described to
// oneDNN by explicit strides over the grouped dims (G, Cout/G, Cin/G, KH, KW), since TF's output channel
// index is g * (Cout/G) + o. The primitives pick their own weight format (format_tag::any); a cached
// reorder converts the caller's weights into it (and the weight gradient back) when it differs.
// Padding is TensorFlow's split, already in the ConvDesc (SAME puts the odd pixel after).
#include <dnnl.hpp>

#include <memory>

#include "src/backend/cpu/cpu_backend.h"
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
dnnl::memory::desc tf_weight_desc(const ConvDesc& d) {
  int64_t g = d.groups, og = d.out_c / g, ig = d.c / g, O = d.out_c;
  if (g == 1) return f32_desc(weight_dims(d), tag::hwio);
  // element (g, o, i, h, w) lives at ((h * KW + w) * ig + i) * O + g * og + o
  Dims s = {og, 1, O, d.kw * ig * O, ig * O};
  return dnnl::memory::desc(weight_dims(d), dt::f32, s);
}

OpKey conv_key(CpuOp op, const ConvDesc& d) {
  return OpKey(op, {d.n, d.h, d.w, d.c, d.kh, d.kw, d.out_c, d.groups, d.stride_h, d.stride_w, d.pad_top,
                    d.pad_bottom, d.pad_left, d.pad_right, d.has_bias});
}

dnnl::memory::desc any_weight_desc(const ConvDesc& d) { return f32_desc(weight_dims(d), tag::any); }
dnnl::memory::desc act_desc(const Dims& dims) { return f32_desc(dims, tag::nhwc); }
dnnl::memory::desc bias_desc(const ConvDesc& d) { return f32_desc({d.out_c}, tag::x); }

dnnl::convolution_forward::desc forward_desc(const ConvDesc& d) {
  if (d.has_bias)
    return dnnl::convolution_forward::desc(prop_kind::forward_training, algorithm::convolution_direct,
                                           act_desc(src_dims(d)), any_weight_desc(d), bias_desc(d),
                                           act_desc(dst_dims(d)), strides(d), pad_l(d), pad_r(d));
  return dnnl::convolution_forward::desc(prop_kind::forward_training, algorithm::convolution_direct,
                                         act_desc(src_dims(d)), any_weight_desc(d), act_desc(dst_dims(d)),
                                         strides(d), pad_l(d), pad_r(d));
}

// Weights as the primitive wants them: either the caller's tensor directly, or a cached buffer filled by a
// cached reorder from the caller's layout.
struct WeightsIn {
  bool reorder = false;
  Reorder to_prim;
  Buffer storage;
  void init(const dnnl::memory::desc& prim_md, const ConvDesc& d, const dnnl::engine& eng) {
    dnnl::memory::desc user = tf_weight_desc(d);
    reorder = prim_md != user;
    if (reorder) {
      to_prim.init(user, prim_md, eng);
      storage = Buffer(host_allocator(), prim_md.get_size());
    }
  }
  // Returns the pointer the primitive should read.
  void* prepare(dnnl::stream& s, const Tensor& w) {
    if (!reorder) return w.raw();
    to_prim.run(s, w.raw(), storage.data());
    return storage.data();
  }
};

struct ConvForward : CpuBackend::CachedOp {
  dnnl::convolution_forward prim;
  dnnl::memory src, wei, bias, dst, scratch;
  Buffer scratch_storage;
  WeightsIn weights;
  Args args;
};

struct ConvBackwardData : CpuBackend::CachedOp {
  dnnl::convolution_backward_data prim;
  dnnl::memory diff_src, wei, diff_dst, scratch;
  Buffer scratch_storage;
  WeightsIn weights;
  Args args;
};

using ConvBackwardWeights = BackwardWeightsOp<dnnl::convolution_backward_weights>;

void check_args(const ConvDesc& d, const char* op, const Tensor& x, const Tensor& w) {
  TG_CHECK(d.groups >= 1 && d.c % d.groups == 0 && d.out_c % d.groups == 0,
           "{}: groups {} must divide input channels {} and output channels {}", op, d.groups, d.c, d.out_c);
  TG_CHECK(d.out_h > 0 && d.out_w > 0, "{}: empty output {}x{} for {}", op, d.out_h, d.out_w, d.key());
  check_f32(x, d.n * d.h * d.w * d.c, op, "x");
  check_f32(w, d.kh * d.kw * (d.c / d.groups) * d.out_c, op, "w");
}

}  // namespace

void CpuBackend::conv2d_forward_impl(const ConvDesc& d, const Tensor& x, const Tensor& w, const Tensor& b,
                                const Tensor& y) {
  const char* op = "conv2d_forward";
  check_args(d, op, x, w);
  check_f32(y, d.n * d.out_h * d.out_w * d.out_c, op, "y");
  if (d.has_bias) check_f32(b, d.out_c, op, "b");

  auto& e = cached<ConvForward>(conv_key(CpuOp::kConvFwd, d), [&] {
    auto e = std::make_unique<ConvForward>();
    dnnl::convolution_forward::primitive_desc pd;
    TG_DNNL_CALL(pd = dnnl::convolution_forward::primitive_desc(forward_desc(d), user_scratchpad_attr(), engine_));
    TG_DNNL_CALL(e->prim = dnnl::convolution_forward(pd));
    e->src = unbound(pd.src_desc(), engine_);
    e->wei = unbound(pd.weights_desc(), engine_);
    e->dst = unbound(pd.dst_desc(), engine_);
    e->scratch = owned(pd.scratchpad_desc(), engine_, e->scratch_storage);
    e->weights.init(pd.weights_desc(), d, engine_);
    e->args = {{DNNL_ARG_SRC, e->src}, {DNNL_ARG_WEIGHTS, e->wei}, {DNNL_ARG_DST, e->dst},
               {DNNL_ARG_SCRATCHPAD, e->scratch}};
    if (d.has_bias) {
      e->bias = unbound(pd.bias_desc(), engine_);
      e->args[DNNL_ARG_BIAS] = e->bias;
    }
    return e;
  });
  bind(e.src, x);
  bind(e.wei, e.weights.prepare(stream_, w));
  bind(e.dst, y);
  if (d.has_bias) bind(e.bias, b);
  execute(stream_, e.prim, e.args);
}

void CpuBackend::conv2d_backward_impl(const ConvDesc& d, const Tensor& x, const Tensor& w, const Tensor& dy,
                                 const Tensor& dx, const Tensor& dw, const Tensor& db) {
  const char* op = "conv2d_backward";
  check_args(d, op, x, w);
  check_f32(dy, d.n * d.out_h * d.out_w * d.out_c, op, "dy");
  if (dx) check_f32(dx, x.numel(), op, "dx");
  if (dw) check_f32(dw, w.numel(), op, "dw");
  if (db) {
    TG_CHECK(d.has_bias, "{}: a bias gradient was requested from a convolution without bias ({})", op, d.key());
    check_f32(db, d.out_c, op, "db");
  }

  if (dx) {
    auto& e = cached<ConvBackwardData>(conv_key(CpuOp::kConvBwdData, d), [&] {
      auto e = std::make_unique<ConvBackwardData>();
      dnnl::convolution_forward::primitive_desc hint;
      dnnl::convolution_backward_data::primitive_desc pd;
      TG_DNNL_CALL(hint = dnnl::convolution_forward::primitive_desc(forward_desc(d), engine_));
      dnnl::convolution_backward_data::desc bd(algorithm::convolution_direct, act_desc(src_dims(d)),
                                               any_weight_desc(d), act_desc(dst_dims(d)), strides(d), pad_l(d),
                                               pad_r(d));
      TG_DNNL_CALL(pd = dnnl::convolution_backward_data::primitive_desc(bd, user_scratchpad_attr(), engine_, hint));
      TG_DNNL_CALL(e->prim = dnnl::convolution_backward_data(pd));
      e->diff_src = unbound(pd.diff_src_desc(), engine_);
      e->wei = unbound(pd.weights_desc(), engine_);
      e->diff_dst = unbound(pd.diff_dst_desc(), engine_);
      e->scratch = owned(pd.scratchpad_desc(), engine_, e->scratch_storage);
      e->weights.init(pd.weights_desc(), d, engine_);
      e->args = {{DNNL_ARG_DIFF_SRC, e->diff_src}, {DNNL_ARG_WEIGHTS, e->wei}, {DNNL_ARG_DIFF_DST, e->diff_dst},
                 {DNNL_ARG_SCRATCHPAD, e->scratch}};
      return e;
    });
    bind(e.diff_src, dx);
    bind(e.wei, e.weights.prepare(stream_, w));
    bind(e.diff_dst, dy);
    execute(stream_, e.prim, e.args);
  }

  if (dw || db) {
    auto& e = cached<ConvBackwardWeights>(conv_key(CpuOp::kConvBwdWeights, d), [&] {
      auto e = std::make_unique<ConvBackwardWeights>();
      dnnl::convolution_forward::primitive_desc hint;
      dnnl::convolution_backward_weights::primitive_desc pd;
      TG_DNNL_CALL(hint = dnnl::convolution_forward::primitive_desc(forward_desc(d), engine_));
      auto make = [&]() {
        if (d.has_bias)
          return dnnl::convolution_backward_weights::desc(algorithm::convolution_direct, act_desc(src_dims(d)),
                                                          any_weight_desc(d), bias_desc(d), act_desc(dst_dims(d)),
                                                          strides(d), pad_l(d), pad_r(d));
        return dnnl::convolution_backward_weights::desc(algorithm::convolution_direct, act_desc(src_dims(d)),
                                                        any_weight_desc(d), act_desc(dst_dims(d)), strides(d),
                                                        pad_l(d), pad_r(d));
      };
      TG_DNNL_CALL(pd = dnnl::convolution_backward_weights::primitive_desc(make(), user_scratchpad_attr(), engine_,
                                                                           hint));
      e->init(pd, tf_weight_desc(d), d.has_bias, engine_);
      return e;
    });
    e.run(stream_, x, dy, dw, db, d.has_bias);
  }
}

}  // namespace tg
