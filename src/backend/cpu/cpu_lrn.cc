// CpuBackend LRN on oneDNN: lrn_workspace_bytes / lrn_forward / lrn_backward.
//
// TensorFlow's convention: y = x / (bias + alpha * sum_{|d'-d| <= r} x_{d'}^2)^beta, alpha NOT divided by
// the window. oneDNN's across-channels LRN divides its alpha by local_size, so it gets alpha * (2r + 1)
// with local_size 2r + 1. NHWC activations. The training forward may keep a workspace for the backward
// (implementation-dependent; lrn_workspace_bytes says how much, possibly 0: the most f32 and bf16 need).
// Activations are f32 or bf16 (the primitives' dtype, part of their cache key).
#include <algorithm>
#include <dnnl.hpp>
#include <memory>

#include "src/backend/cpu/cpu_backend.h"
#include "src/backend/cpu/dnnl_util.h"

namespace tg {
namespace {

using namespace dnnl_util;
using dnnl::algorithm;
using dnnl::prop_kind;

int64_t local_size(const LrnDesc& d) { return 2 * d.depth_radius + 1; }
float dnnl_alpha(const LrnDesc& d) { return d.alpha * static_cast<float>(local_size(d)); }
dnnl::memory::desc data_desc(const LrnDesc& d, DType t) { return md({d.n, d.c, d.h, d.w}, t, tag::nhwc); }

dnnl::lrn_forward::desc forward_desc(const LrnDesc& d, prop_kind pk, DType t) {
  return dnnl::lrn_forward::desc(pk, algorithm::lrn_across_channels, data_desc(d, t), local_size(d), dnnl_alpha(d),
                                 d.beta, d.bias);
}

OpKey lrn_key(CpuOp op, const LrnDesc& d, DType t) {
  return OpKey(op, {d.n, d.h, d.w, d.c, d.depth_radius, OpKey::bits(d.bias), OpKey::bits(d.alpha), OpKey::bits(d.beta),
                    static_cast<int64_t>(t)});
}

void check_desc(const LrnDesc& d, const char* op) {
  TG_CHECK(d.depth_radius >= 0 && d.c > 0, "{}: bad LRN descriptor {}", op, d.key());
}

}  // namespace

static CachedPrimitive& lrn_forward_entry(CpuBackend& be, const LrnDesc& d, bool training, DType t) {
  return be.cached<CachedPrimitive>(lrn_key(training ? CpuOp::kLrnFwdTrain : CpuOp::kLrnFwdInfer, d, t), [&] {
    auto e = std::make_unique<CachedPrimitive>();
    dnnl::lrn_forward::primitive_desc pd;
    TG_DNNL_CALL(pd = dnnl::lrn_forward::primitive_desc(
                     forward_desc(d, training ? prop_kind::forward_training : prop_kind::forward_inference, t),
                     user_scratchpad_attr(), be.engine()));
    e->init(pd, {DNNL_ARG_SRC, DNNL_ARG_DST}, be.engine());
    return e;
  });
}

size_t CpuBackend::lrn_workspace_bytes_impl(const LrnDesc& d) {
  check_desc(d, "lrn_workspace_bytes");
  size_t bytes = lrn_forward_entry(*this, d, /*training=*/true, DType::kF32).workspace_bytes;
  if (supports_compute(DType::kBf16))
    bytes = std::max(bytes, lrn_forward_entry(*this, d, /*training=*/true, DType::kBf16).workspace_bytes);
  return bytes;
}

void CpuBackend::lrn_forward_impl(const LrnDesc& d, const Tensor& x, const Tensor& y, const Tensor& workspace) {
  const char* op = "lrn_forward";
  check_desc(d, op);
  const DType t = x.dtype();
  require_compute(t, op);
  const int64_t numel = d.n * d.h * d.w * d.c;
  check_act(x, numel, t, op, "x");
  check_act(y, numel, t, op, "y");
  // A training forward is one whose caller keeps a workspace; with a 0-byte workspace both are the same.
  CachedPrimitive& e = lrn_forward_entry(*this, d, /*training=*/workspace.raw() != nullptr, t);
  e.bind_workspace(workspace, op, d);
  e.run(stream_, {x.raw(), y.raw()});
}

void CpuBackend::lrn_backward_impl(const LrnDesc& d, const Tensor& x, const Tensor& dy, const Tensor& workspace,
                                   const Tensor& dx) {
  const char* op = "lrn_backward";
  check_desc(d, op);
  const DType t = x.dtype();
  require_compute(t, op);
  const int64_t numel = d.n * d.h * d.w * d.c;
  check_act(x, numel, t, op, "x");
  check_act(dy, numel, t, op, "dy");
  check_act(dx, numel, t, op, "dx");
  auto& e = cached<CachedPrimitive>(lrn_key(CpuOp::kLrnBwd, d, t), [&] {
    auto e = std::make_unique<CachedPrimitive>();
    dnnl::lrn_forward::primitive_desc hint;
    dnnl::lrn_backward::primitive_desc pd;
    TG_DNNL_CALL(hint = dnnl::lrn_forward::primitive_desc(forward_desc(d, prop_kind::forward_training, t), engine_));
    dnnl::lrn_backward::desc bd(algorithm::lrn_across_channels, data_desc(d, t), data_desc(d, t), local_size(d),
                                dnnl_alpha(d), d.beta, d.bias);
    TG_DNNL_CALL(pd = dnnl::lrn_backward::primitive_desc(bd, user_scratchpad_attr(), engine_, hint));
    e->init(pd, {DNNL_ARG_SRC, DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_SRC}, engine_);
    return e;
  });
  e.bind_workspace(workspace, op, d);
  e.run(stream_, {x.raw(), dy.raw(), dx.raw()});
}

}  // namespace tg
