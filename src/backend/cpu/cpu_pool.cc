// CpuBackend pooling on oneDNN: pool_workspace_bytes / pool_forward / pool_backward.
//
// NHWC activations; the padding split is the PoolDesc's. Max pooling ignores padded cells; average pooling
// divides by the number of in-image cells (kAvg: oneDNN pooling_avg_exclude_padding, as TF does) or by the
// window (kAvgIncludePad: pooling_avg_include_padding, PyTorch's default). Max pooling's forward (training)
// records the arg-max positions in a workspace the caller keeps for the backward; pool_workspace_bytes says how
// large it is. A forward without workspace (inference) runs a separate forward_inference primitive that records
// nothing. Activations are f32 or bf16 (the primitives' dtype, part of their cache key); the workspace holds
// indices, the most either dtype needs.
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

algorithm pool_algorithm(const PoolDesc& d) {
  switch (d.kind) {
    case PoolKind::kMax:
      return algorithm::pooling_max;
    case PoolKind::kAvg:
      return algorithm::pooling_avg_exclude_padding;
    case PoolKind::kAvgIncludePad:
      return algorithm::pooling_avg_include_padding;
  }
  return algorithm::pooling_max;
}

OpKey pool_key(CpuOp op, const PoolDesc& d, DType t) {
  return OpKey(op, {static_cast<int64_t>(d.kind), d.n, d.h, d.w, d.c, d.kh, d.kw, d.stride_h, d.stride_w, d.pad_top,
                    d.pad_bottom, d.pad_left, d.pad_right, static_cast<int64_t>(t)});
}

dnnl::memory::desc src_md(const PoolDesc& d, DType t) { return md({d.n, d.c, d.h, d.w}, t, tag::nhwc); }
dnnl::memory::desc dst_md(const PoolDesc& d, DType t) { return md({d.n, d.c, d.out_h, d.out_w}, t, tag::nhwc); }

dnnl::pooling_forward::desc forward_desc(const PoolDesc& d, prop_kind pk, DType t) {
  return dnnl::pooling_forward::desc(pk, pool_algorithm(d), src_md(d, t), dst_md(d, t), {d.stride_h, d.stride_w},
                                     {d.kh, d.kw}, {d.pad_top, d.pad_left}, {d.pad_bottom, d.pad_right});
}

}  // namespace

// The forward primitive for `d` in dtype t (the training one also defines the workspace the backward reads).
static CachedPrimitive& pool_forward_entry(CpuBackend& be, const PoolDesc& d, bool training, DType t) {
  return be.cached<CachedPrimitive>(pool_key(training ? CpuOp::kPoolFwdTrain : CpuOp::kPoolFwdInfer, d, t), [&] {
    auto e = std::make_unique<CachedPrimitive>();
    dnnl::pooling_forward::primitive_desc pd;
    TG_DNNL_CALL(pd = dnnl::pooling_forward::primitive_desc(
                     forward_desc(d, training ? prop_kind::forward_training : prop_kind::forward_inference, t),
                     user_scratchpad_attr(), be.engine()));
    e->init(pd, {DNNL_ARG_SRC, DNNL_ARG_DST}, be.engine());
    return e;
  });
}

size_t CpuBackend::pool_workspace_bytes_impl(const PoolDesc& d) {
  size_t bytes = pool_forward_entry(*this, d, /*training=*/true, DType::kF32).workspace_bytes;
  if (supports_compute(DType::kBf16))
    bytes = std::max(bytes, pool_forward_entry(*this, d, /*training=*/true, DType::kBf16).workspace_bytes);
  return bytes;
}

void CpuBackend::pool_forward_impl(const PoolDesc& d, const Tensor& x, const Tensor& y, const Tensor& workspace) {
  const char* op = "pool_forward";
  const DType t = x.dtype();
  require_compute(t, op);
  CachedPrimitive& e = pool_forward_entry(*this, d, /*training=*/workspace.raw() != nullptr, t);
  e.bind_workspace(workspace, op, d);
  e.run(stream_, {x.raw(), y.raw()});
}

void CpuBackend::pool_backward_impl(const PoolDesc& d, const Tensor& x, const Tensor& /*y*/, const Tensor& dy,
                                    const Tensor& workspace, const Tensor& dx) {
  const char* op = "pool_backward";
  const DType t = x.dtype();
  require_compute(t, op);
  auto& e = cached<CachedPrimitive>(pool_key(CpuOp::kPoolBwd, d, t), [&] {
    auto e = std::make_unique<CachedPrimitive>();
    dnnl::pooling_forward::primitive_desc hint;
    dnnl::pooling_backward::primitive_desc pd;
    TG_DNNL_CALL(hint =
                     dnnl::pooling_forward::primitive_desc(forward_desc(d, prop_kind::forward_training, t), engine_));
    dnnl::pooling_backward::desc bd(pool_algorithm(d), src_md(d, t), dst_md(d, t), {d.stride_h, d.stride_w},
                                    {d.kh, d.kw}, {d.pad_top, d.pad_left}, {d.pad_bottom, d.pad_right});
    TG_DNNL_CALL(pd = dnnl::pooling_backward::primitive_desc(bd, user_scratchpad_attr(), engine_, hint));
    e->init(pd, {DNNL_ARG_DIFF_SRC, DNNL_ARG_DIFF_DST}, engine_);
    return e;
  });
  e.bind_workspace(workspace, op, d);
  e.run(stream_, {dx.raw(), dy.raw()});
}

}  // namespace tg
