// CpuBackend LRN on oneDNN: lrn_workspace_bytes / lrn_forward / lrn_backward.
//
// TensorFlow's convention: y = x / (bias + alpha * sum_{|d'-d| <= r} x_{d'}^2)^beta, alpha NOT divided by
// the window. oneDNN's across-channels LRN divides its alpha by local_size, so it gets alpha * (2r + 1)
// with local_size 2r + 1. NHWC activations. The training forward may keep a workspace for the backward
// (implementation-dependent; lrn_workspace_bytes says how much, possibly 0).
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
dnnl::memory::desc data_desc(const LrnDesc& d) { return f32_desc({d.n, d.c, d.h, d.w}, tag::nhwc); }

dnnl::lrn_forward::desc forward_desc(const LrnDesc& d, prop_kind pk) {
  return dnnl::lrn_forward::desc(pk, algorithm::lrn_across_channels, data_desc(d), local_size(d), dnnl_alpha(d),
                                 d.beta, d.bias);
}

struct LrnForward : CpuBackend::CachedOp {
  dnnl::lrn_forward prim;
  dnnl::memory src, dst, workspace, scratch;
  Buffer scratch_storage;
  size_t workspace_bytes = 0;
  Args args;
};

struct LrnBackward : CpuBackend::CachedOp {
  dnnl::lrn_backward prim;
  dnnl::memory src, diff_dst, diff_src, workspace, scratch;
  Buffer scratch_storage;
  size_t workspace_bytes = 0;
  Args args;
};

OpKey lrn_key(CpuOp op, const LrnDesc& d) {
  return OpKey(op, {d.n, d.h, d.w, d.c, d.depth_radius, OpKey::bits(d.bias), OpKey::bits(d.alpha),
                    OpKey::bits(d.beta)});
}

void check_desc(const LrnDesc& d, const char* op) {
  TG_CHECK(d.depth_radius >= 0 && d.c > 0, "{}: bad LRN descriptor {}", op, d.key());
}

}  // namespace

static LrnForward& lrn_forward_entry(CpuBackend& be, const LrnDesc& d, bool training) {
  return be.cached<LrnForward>(lrn_key(training ? CpuOp::kLrnFwdTrain : CpuOp::kLrnFwdInfer, d), [&] {
    auto e = std::make_unique<LrnForward>();
    dnnl::lrn_forward::primitive_desc pd;
    TG_DNNL_CALL(pd = dnnl::lrn_forward::primitive_desc(
                     forward_desc(d, training ? prop_kind::forward_training : prop_kind::forward_inference),
                     user_scratchpad_attr(), be.engine()));
    TG_DNNL_CALL(e->prim = dnnl::lrn_forward(pd));
    e->src = unbound(pd.src_desc(), be.engine());
    e->dst = unbound(pd.dst_desc(), be.engine());
    e->scratch = owned(pd.scratchpad_desc(), be.engine(), e->scratch_storage);
    e->args = {{DNNL_ARG_SRC, e->src}, {DNNL_ARG_DST, e->dst}, {DNNL_ARG_SCRATCHPAD, e->scratch}};
    e->workspace_bytes = pd.workspace_desc().get_size();
    if (e->workspace_bytes > 0) {
      e->workspace = unbound(pd.workspace_desc(), be.engine());
      e->args[DNNL_ARG_WORKSPACE] = e->workspace;
    }
    return e;
  });
}

size_t CpuBackend::lrn_workspace_bytes_impl(const LrnDesc& d) {
  check_desc(d, "lrn_workspace_bytes");
  return lrn_forward_entry(*this, d, /*training=*/true).workspace_bytes;
}

void CpuBackend::lrn_forward_impl(const LrnDesc& d, const Tensor& x, const Tensor& y, const Tensor& workspace) {
  const char* op = "lrn_forward";
  check_desc(d, op);
  int64_t numel = d.n * d.h * d.w * d.c;
  check_f32(x, numel, op, "x");
  check_f32(y, numel, op, "y");
  // A training forward is one whose caller keeps a workspace; with a 0-byte workspace both are the same.
  bool training = workspace.raw() != nullptr;
  LrnForward& e = lrn_forward_entry(*this, d, training);
  if (e.workspace_bytes > 0) {
    TG_CHECK(workspace.bytes() >= e.workspace_bytes, "lrn_forward: workspace {} holds {} bytes, {} needs {}",
             workspace.str(), workspace.bytes(), d.key(), e.workspace_bytes);
    bind(e.workspace, workspace);
  }
  bind(e.src, x);
  bind(e.dst, y);
  execute(stream_, e.prim, e.args);
}

void CpuBackend::lrn_backward_impl(const LrnDesc& d, const Tensor& x, const Tensor& dy, const Tensor& workspace,
                              const Tensor& dx) {
  const char* op = "lrn_backward";
  check_desc(d, op);
  int64_t numel = d.n * d.h * d.w * d.c;
  check_f32(x, numel, op, "x");
  check_f32(dy, numel, op, "dy");
  check_f32(dx, numel, op, "dx");
  auto& e = cached<LrnBackward>(lrn_key(CpuOp::kLrnBwd, d), [&] {
    auto e = std::make_unique<LrnBackward>();
    dnnl::lrn_forward::primitive_desc hint;
    dnnl::lrn_backward::primitive_desc pd;
    TG_DNNL_CALL(hint = dnnl::lrn_forward::primitive_desc(forward_desc(d, prop_kind::forward_training), engine_));
    dnnl::lrn_backward::desc bd(algorithm::lrn_across_channels, data_desc(d), data_desc(d), local_size(d),
                                dnnl_alpha(d), d.beta, d.bias);
    TG_DNNL_CALL(pd = dnnl::lrn_backward::primitive_desc(bd, user_scratchpad_attr(), engine_, hint));
    TG_DNNL_CALL(e->prim = dnnl::lrn_backward(pd));
    e->src = unbound(pd.src_desc(), engine_);
    e->diff_dst = unbound(pd.diff_dst_desc(), engine_);
    e->diff_src = unbound(pd.diff_src_desc(), engine_);
    e->scratch = owned(pd.scratchpad_desc(), engine_, e->scratch_storage);
    e->args = {{DNNL_ARG_SRC, e->src}, {DNNL_ARG_DIFF_DST, e->diff_dst}, {DNNL_ARG_DIFF_SRC, e->diff_src},
               {DNNL_ARG_SCRATCHPAD, e->scratch}};
    e->workspace_bytes = pd.workspace_desc().get_size();
    if (e->workspace_bytes > 0) {
      e->workspace = unbound(pd.workspace_desc(), engine_);
      e->args[DNNL_ARG_WORKSPACE] = e->workspace;
    }
    return e;
  });
  if (e.workspace_bytes > 0) {
    TG_CHECK(workspace.raw() != nullptr && workspace.bytes() >= e.workspace_bytes,
             "lrn_backward: {} needs the {}-byte workspace its forward filled, got {}", d.key(), e.workspace_bytes,
             workspace.str());
    bind(e.workspace, workspace);
  }
  bind(e.src, x);
  bind(e.diff_dst, dy);
  bind(e.diff_src, dx);
  execute(stream_, e.prim, e.args);
}

}  // namespace tg
