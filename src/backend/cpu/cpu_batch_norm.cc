// CpuBackend batch normalization on oneDNN: forward (training: batch statistics; inference: given
// statistics) and backward.
//
// The data (rows = N*H*W, C) is seen by oneDNN as NHWC with dims (rows, C, 1, 1): the same bytes, and the
// channels-last layout its optimized kernels handle. Statistics are per channel; the variance is the
// population variance of the batch (what oneDNN computes). beta is always present (use_shift); gamma only
// when the descriptor has it (use_scale); without gamma the scale is 1 and no dgamma exists.
#include <dnnl.hpp>

#include <algorithm>
#include <memory>

#include "src/backend/cpu/cpu_backend.h"
#include "src/backend/cpu/dnnl_util.h"

namespace tg {
namespace {

using namespace dnnl_util;
using dnnl::normalization_flags;
using dnnl::prop_kind;

dnnl::memory::desc data_desc(const BatchNormDesc& d) { return f32_desc({d.rows, d.c, 1, 1}, tag::nhwc); }

normalization_flags flags(const BatchNormDesc& d, bool global_stats) {
  normalization_flags f = normalization_flags::use_shift;
  if (d.has_gamma) f = f | normalization_flags::use_scale;
  if (global_stats) f = f | normalization_flags::use_global_stats;
  return f;
}

dnnl::batch_normalization_forward::desc forward_desc(const BatchNormDesc& d, bool training) {
  return dnnl::batch_normalization_forward::desc(
      training ? prop_kind::forward_training : prop_kind::forward_inference, data_desc(d), d.epsilon,
      flags(d, /*global_stats=*/!training));
}

// Forward, training or inference: the memories differ only in whether mean/var are outputs or inputs.
struct BnForward : CpuBackend::CachedOp {
  dnnl::batch_normalization_forward prim;
  dnnl::memory src, dst, mean, var, scale, shift, scratch;
  Buffer scratch_storage;
  Args args;
};

struct BnBackward : CpuBackend::CachedOp {
  dnnl::batch_normalization_backward prim;
  dnnl::memory src, mean, var, diff_dst, scale, shift, diff_src, diff_scale, diff_shift, scratch;
  Buffer scratch_storage;
  Buffer shift_storage;  // (C) oneDNN 2.6 insists on a shift input to the backward; its value is unused
  Buffer diff_scale_storage, diff_shift_storage;  // (C) each: gradients nobody asked for
  Buffer diff_src_storage;                        // (rows, C), only allocated if a caller omits dx
  Args args;
};

void check_common(const BatchNormDesc& d, const char* op, const Tensor& x, const Tensor& gamma) {
  TG_CHECK(d.rows > 0 && d.c > 0, "{}: empty batch norm {}", op, d.key());
  check_f32(x, d.rows * d.c, op, "x");
  if (d.has_gamma) check_f32(gamma, d.c, op, "gamma");
  else TG_CHECK(gamma.raw() == nullptr, "{}: gamma given to a batch norm without gamma ({})", op, d.key());
}

}  // namespace

static BnForward& bn_forward_entry(CpuBackend& be, const BatchNormDesc& d, bool training) {
  return be.cached<BnForward>((training ? "bn_fwd_train:" : "bn_fwd_infer:") + d.key(), [&] {
    auto e = std::make_unique<BnForward>();
    dnnl::batch_normalization_forward::primitive_desc pd;
    TG_DNNL_CALL(pd = dnnl::batch_normalization_forward::primitive_desc(forward_desc(d, training),
                                                                         user_scratchpad_attr(), be.engine()));
    TG_DNNL_CALL(e->prim = dnnl::batch_normalization_forward(pd));
    const dnnl::engine& eng = be.engine();
    dnnl::memory::desc channel = f32_desc({d.c}, tag::x);
    e->src = unbound(pd.src_desc(), eng);
    e->dst = unbound(pd.dst_desc(), eng);
    e->mean = unbound(pd.mean_desc(), eng);
    e->var = unbound(pd.variance_desc(), eng);
    e->shift = unbound(channel, eng);
    e->scratch = owned(pd.scratchpad_desc(), eng, e->scratch_storage);
    e->args = {{DNNL_ARG_SRC, e->src},   {DNNL_ARG_DST, e->dst},     {DNNL_ARG_MEAN, e->mean},
               {DNNL_ARG_VARIANCE, e->var}, {DNNL_ARG_SHIFT, e->shift}, {DNNL_ARG_SCRATCHPAD, e->scratch}};
    if (d.has_gamma) {
      e->scale = unbound(channel, eng);
      e->args[DNNL_ARG_SCALE] = e->scale;
    }
    return e;
  });
}

void CpuBackend::batch_norm_forward_training(const BatchNormDesc& d, const Tensor& x, const Tensor& gamma,
                                             const Tensor& beta, const Tensor& y, const Tensor& mean,
                                             const Tensor& var) {
  const char* op = "batch_norm_forward_training";
  check_common(d, op, x, gamma);
  check_f32(beta, d.c, op, "beta");
  check_f32(y, x.numel(), op, "y");
  check_f32(mean, d.c, op, "mean");
  check_f32(var, d.c, op, "var");
  BnForward& e = bn_forward_entry(*this, d, /*training=*/true);
  bind(e.src, x);
  bind(e.dst, y);
  bind(e.mean, mean);
  bind(e.var, var);
  bind(e.shift, beta);
  if (d.has_gamma) bind(e.scale, gamma);
  execute(stream_, e.prim, e.args);
}

void CpuBackend::batch_norm_forward_inference(const BatchNormDesc& d, const Tensor& x, const Tensor& gamma,
                                              const Tensor& beta, const Tensor& mean, const Tensor& var,
                                              const Tensor& y) {
  const char* op = "batch_norm_forward_inference";
  check_common(d, op, x, gamma);
  check_f32(beta, d.c, op, "beta");
  check_f32(y, x.numel(), op, "y");
  check_f32(mean, d.c, op, "mean");
  check_f32(var, d.c, op, "var");
  BnForward& e = bn_forward_entry(*this, d, /*training=*/false);
  bind(e.src, x);
  bind(e.dst, y);
  bind(e.mean, mean);
  bind(e.var, var);
  bind(e.shift, beta);
  if (d.has_gamma) bind(e.scale, gamma);
  execute(stream_, e.prim, e.args);
}

void CpuBackend::batch_norm_backward(const BatchNormDesc& d, const Tensor& x, const Tensor& gamma,
                                     const Tensor& mean, const Tensor& var, const Tensor& dy, const Tensor& dx,
                                     const Tensor& dgamma, const Tensor& dbeta) {
  const char* op = "batch_norm_backward";
  check_common(d, op, x, gamma);
  check_f32(mean, d.c, op, "mean");
  check_f32(var, d.c, op, "var");
  check_f32(dy, x.numel(), op, "dy");
  if (dx) check_f32(dx, x.numel(), op, "dx");
  if (dbeta) check_f32(dbeta, d.c, op, "dbeta");
  if (dgamma) {
    TG_CHECK(d.has_gamma, "{}: dgamma requested from a batch norm without gamma ({})", op, d.key());
    check_f32(dgamma, d.c, op, "dgamma");
  }
  auto& e = cached<BnBackward>("bn_bwd:" + d.key(), [&] {
    auto e = std::make_unique<BnBackward>();
    dnnl::batch_normalization_forward::primitive_desc hint;
    dnnl::batch_normalization_backward::primitive_desc pd;
    TG_DNNL_CALL(hint = dnnl::batch_normalization_forward::primitive_desc(forward_desc(d, true), engine_));
    dnnl::batch_normalization_backward::desc bd(prop_kind::backward, data_desc(d), data_desc(d), d.epsilon,
                                                flags(d, /*global_stats=*/false));
    TG_DNNL_CALL(pd = dnnl::batch_normalization_backward::primitive_desc(bd, user_scratchpad_attr(), engine_, hint));
    TG_DNNL_CALL(e->prim = dnnl::batch_normalization_backward(pd));
    dnnl::memory::desc channel = f32_desc({d.c}, tag::x);
    e->src = unbound(pd.src_desc(), engine_);
    e->mean = unbound(pd.mean_desc(), engine_);
    e->var = unbound(pd.variance_desc(), engine_);
    e->diff_dst = unbound(pd.diff_dst_desc(), engine_);
    e->diff_src = unbound(pd.diff_src_desc(), engine_);
    e->diff_shift = unbound(channel, engine_);
    e->diff_shift_storage = Buffer(host_allocator(), d.c * sizeof(float));
    e->shift = owned(channel, engine_, e->shift_storage);
    std::fill_n(static_cast<float*>(e->shift_storage.data()), d.c, 0.f);
    e->scratch = owned(pd.scratchpad_desc(), engine_, e->scratch_storage);
    e->args = {{DNNL_ARG_SRC, e->src},           {DNNL_ARG_MEAN, e->mean},
               {DNNL_ARG_VARIANCE, e->var},      {DNNL_ARG_DIFF_DST, e->diff_dst},
               {DNNL_ARG_DIFF_SRC, e->diff_src}, {DNNL_ARG_DIFF_SHIFT, e->diff_shift},
               {DNNL_ARG_SHIFT, e->shift},       {DNNL_ARG_SCRATCHPAD, e->scratch}};
    if (d.has_gamma) {
      e->scale = unbound(channel, engine_);
      e->diff_scale = unbound(channel, engine_);
      e->diff_scale_storage = Buffer(host_allocator(), d.c * sizeof(float));
      e->args[DNNL_ARG_SCALE] = e->scale;
      e->args[DNNL_ARG_DIFF_SCALE] = e->diff_scale;
    }
    return e;
  });
  if (!dx && e.diff_src_storage.empty()) e.diff_src_storage = Buffer(host_allocator(), x.bytes());
  bind(e.src, x);
  bind(e.mean, mean);
  bind(e.var, var);
  bind(e.diff_dst, dy);
  bind(e.diff_src, dx ? dx.raw() : e.diff_src_storage.data());
  bind(e.diff_shift, dbeta ? dbeta.raw() : e.diff_shift_storage.data());
  if (d.has_gamma) {
    bind(e.scale, gamma);
    bind(e.diff_scale, dgamma ? dgamma.raw() : e.diff_scale_storage.data());
  }
  execute(stream_, e.prim, e.args);
}

}  // namespace tg
