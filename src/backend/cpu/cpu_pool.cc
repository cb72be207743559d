// CpuBackend pooling on oneDNN: pool_workspace_bytes / pool_forward / pool_backward.
//
// NHWC activations; TensorFlow's padding split (in the PoolDesc). Max pooling ignores padded cells; average
// pooling divides by the number of in-image cells (oneDNN pooling_avg_exclude_padding), as TF does. Max
// pooling's forward (training) records the arg-max positions in a workspace the caller keeps for the
// backward; pool_workspace_bytes says how large it is. A forward without workspace (inference) runs a
// separate forward_inference primitive that records nothing.
#include <dnnl.hpp>

#include <memory>

#include "src/backend/cpu/cpu_backend.h"
#include "src/backend/cpu/dnnl_util.h"

namespace tg {
namespace {

using namespace dnnl_util;
using dnnl::algorithm;
using dnnl::prop_kind;

algorithm pool_algorithm(const PoolDesc& d) {
  return d.kind == PoolKind::MAX ? algorithm::pooling_max : algorithm::pooling_avg_exclude_padding;
}

OpKey pool_key(CpuOp op, const PoolDesc& d) {
  return OpKey(op, {static_cast<int64_t>(d.kind), d.n, d.h, d.w, d.c, d.kh, d.kw, d.stride_h, d.stride_w, d.pad_top,
                    d.pad_bottom, d.pad_left, d.pad_right});
}

dnnl::pooling_forward::desc forward_desc(const PoolDesc& d, prop_kind pk) {
  return dnnl::pooling_forward::desc(pk, pool_algorithm(d), f32_desc({d.n, d.c, d.h, d.w}, tag::nhwc),
                                     f32_desc({d.n, d.c, d.out_h, d.out_w}, tag::nhwc), {d.stride_h, d.stride_w},
                                     {d.kh, d.kw}, {d.pad_top, d.pad_left}, {d.pad_bottom, d.pad_right});
}

struct PoolForward : CpuBackend::CachedOp {
  dnnl::pooling_forward prim;
  dnnl::memory src, dst, workspace, scratch;
  Buffer scratch_storage;
  size_t workspace_bytes = 0;  // 0 when the primitive keeps no workspace
  Args args;
};

struct PoolBackward : CpuBackend::CachedOp {
  dnnl::pooling_backward prim;
  dnnl::memory diff_src, diff_dst, workspace, scratch;
  Buffer scratch_storage;
  size_t workspace_bytes = 0;
  Args args;
};

void check_desc(const PoolDesc& d, const char* op) {
  TG_CHECK(d.out_h > 0 && d.out_w > 0 && d.kh >= 1 && d.kw >= 1, "{}: empty output {}x{} for {}", op, d.out_h,
           d.out_w, d.key());
}

}  // namespace

// The training forward primitive for `d` (it also defines the workspace the backward reads).
static PoolForward& pool_forward_entry(CpuBackend& be, const PoolDesc& d, bool training) {
  return be.cached<PoolForward>(pool_key(training ? CpuOp::kPoolFwdTrain : CpuOp::kPoolFwdInfer, d), [&] {
    auto e = std::make_unique<PoolForward>();
    dnnl::pooling_forward::primitive_desc pd;
    TG_DNNL_CALL(pd = dnnl::pooling_forward::primitive_desc(
                     forward_desc(d, training ? prop_kind::forward_training : prop_kind::forward_inference),
                     user_scratchpad_attr(), be.engine()));
    TG_DNNL_CALL(e->prim = dnnl::pooling_forward(pd));
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

size_t CpuBackend::pool_workspace_bytes_impl(const PoolDesc& d) {
  check_desc(d, "pool_workspace_bytes");
  return pool_forward_entry(*this, d, /*training=*/true).workspace_bytes;
}

void CpuBackend::pool_forward_impl(const PoolDesc& d, const Tensor& x, const Tensor& y, const Tensor& workspace) {
  const char* op = "pool_forward";
  check_desc(d, op);
  check_f32(x, d.n * d.h * d.w * d.c, op, "x");
  check_f32(y, d.n * d.out_h * d.out_w * d.c, op, "y");
  bool training = workspace.raw() != nullptr;
  PoolForward& e = pool_forward_entry(*this, d, training);
  if (e.workspace_bytes > 0) {
    TG_CHECK(workspace.bytes() >= e.workspace_bytes, "pool_forward: workspace {} holds {} bytes, {} needs {}",
             workspace.str(), workspace.bytes(), d.key(), e.workspace_bytes);
    bind(e.workspace, workspace);
  }
  bind(e.src, x);
  bind(e.dst, y);
  execute(stream_, e.prim, e.args);
}

void CpuBackend::pool_backward_impl(const PoolDesc& d, const Tensor& x, const Tensor& y, const Tensor& dy,
                               const Tensor& workspace, const Tensor& dx) {
  const char* op = "pool_backward";
  check_desc(d, op);
  check_f32(x, d.n * d.h * d.w * d.c, op, "x");
  check_f32(y, d.n * d.out_h * d.out_w * d.c, op, "y");
  check_f32(dy, y.numel(), op, "dy");
  check_f32(dx, x.numel(), op, "dx");
  auto& e = cached<PoolBackward>(pool_key(CpuOp::kPoolBwd, d), [&] {
    auto e = std::make_unique<PoolBackward>();
    dnnl::pooling_forward::primitive_desc hint;
    dnnl::pooling_backward::primitive_desc pd;
    TG_DNNL_CALL(hint = dnnl::pooling_forward::primitive_desc(forward_desc(d, prop_kind::forward_training), engine_));
    dnnl::pooling_backward::desc bd(pool_algorithm(d), f32_desc({d.n, d.c, d.h, d.w}, tag::nhwc),
                                    f32_desc({d.n, d.c, d.out_h, d.out_w}, tag::nhwc), {d.stride_h, d.stride_w},
                                    {d.kh, d.kw}, {d.pad_top, d.pad_left}, {d.pad_bottom, d.pad_right});
    TG_DNNL_CALL(pd = dnnl::pooling_backward::primitive_desc(bd, user_scratchpad_attr(), engine_, hint));
    TG_DNNL_CALL(e->prim = dnnl::pooling_backward(pd));
    e->diff_src = unbound(pd.diff_src_desc(), engine_);
    e->diff_dst = unbound(pd.diff_dst_desc(), engine_);
    e->scratch = owned(pd.scratchpad_desc(), engine_, e->scratch_storage);
    e->args = {{DNNL_ARG_DIFF_SRC, e->diff_src}, {DNNL_ARG_DIFF_DST, e->diff_dst}, {DNNL_ARG_SCRATCHPAD, e->scratch}};
    e->workspace_bytes = pd.workspace_desc().get_size();
    if (e->workspace_bytes > 0) {
      e->workspace = unbound(pd.workspace_desc(), engine_);
      e->args[DNNL_ARG_WORKSPACE] = e->workspace;
    }
    return e;
  });
  if (e.workspace_bytes > 0) {
    TG_CHECK(workspace.raw() != nullptr && workspace.bytes() >= e.workspace_bytes,
             "pool_backward: {} needs the {}-byte workspace its forward filled, got {}", d.key(), e.workspace_bytes,
             workspace.str());
    bind(e.workspace, workspace);
  }
  bind(e.diff_src, dx);
  bind(e.diff_dst, dy);
  execute(stream_, e.prim, e.args);
}

}  // namespace tg
