// CpuBackend fully connected layer on oneDNN inner products: y (N, out) = x (N, in) * w (in, out) + b (out).
//
// The caller's weights (in, out) are oneDNN's (out, in) weights in format `io`. The primitives are asked for
// exactly that format (kWeightFormat): with plain formats oneDNN runs its GEMM-based inner product directly
// on the caller's memory, which measured faster for our sizes than letting it pick a blocked format and
// reordering the weights at every call (they change every step). Should a primitive still choose another
// format, a cached reorder converts (weights in, weight gradient out). Activations, weights, bias and
// gradients are all f32 or all bf16 (oneDNN accumulates in f32); the dtype is part of the cache key.
#include <dnnl.hpp>
#include <memory>

#include "src/backend/cpu/cpu_backend.h"
#include "src/backend/cpu/dnnl_util.h"

namespace tg {
namespace {

using namespace dnnl_util;
using dnnl::prop_kind;

constexpr tag kWeightFormat = tag::io;

dnnl::memory::desc src_desc(const InnerProductDesc& d, DType t) { return md({d.n, d.in}, t, tag::nc); }
dnnl::memory::desc dst_desc(const InnerProductDesc& d, DType t) { return md({d.n, d.out}, t, tag::nc); }
dnnl::memory::desc user_weight_desc(const InnerProductDesc& d, DType t) { return md({d.out, d.in}, t, tag::io); }
dnnl::memory::desc prim_weight_desc(const InnerProductDesc& d, DType t) { return md({d.out, d.in}, t, kWeightFormat); }
dnnl::memory::desc bias_desc(const InnerProductDesc& d, DType t) { return md({d.out}, t, tag::x); }

OpKey ip_key(CpuOp op, const InnerProductDesc& d, DType t) {
  return OpKey(op, {d.n, d.in, d.out, d.has_bias, static_cast<int64_t>(t)});
}

dnnl::inner_product_forward::desc forward_desc(const InnerProductDesc& d, DType t) {
  if (d.has_bias)
    return dnnl::inner_product_forward::desc(prop_kind::forward_training, src_desc(d, t), prim_weight_desc(d, t),
                                             bias_desc(d, t), dst_desc(d, t));
  return dnnl::inner_product_forward::desc(prop_kind::forward_training, src_desc(d, t), prim_weight_desc(d, t),
                                           dst_desc(d, t));
}

using IpBackwardWeights = BackwardWeightsOp<dnnl::inner_product_backward_weights>;

void check_args(const CpuBackend& be, const InnerProductDesc& d, const char* op, const Tensor& x, const Tensor& w) {
  TG_CHECK(d.n > 0 && d.in > 0 && d.out > 0, "{}: empty inner product {}", op, d.key());
  be.require_compute(x.dtype(), op);
  check_act(x, d.n * d.in, x.dtype(), op, "x");
  check_act(w, d.in * d.out, x.dtype(), op, "w");
}

}  // namespace

void CpuBackend::inner_product_forward_impl(const InnerProductDesc& d, const Tensor& x, const Tensor& w,
                                            const Tensor& b, const Tensor& y) {
  const char* op = "inner_product_forward";
  check_args(*this, d, op, x, w);
  const DType t = x.dtype();
  check_act(y, d.n * d.out, t, op, "y");
  if (d.has_bias) check_act(b, d.out, t, op, "b");
  run_weighted_forward(
      *this, ip_key(CpuOp::kIpFwd, d, t),
      [&] {
        dnnl::inner_product_forward::primitive_desc pd;
        TG_DNNL_CALL(
            pd = dnnl::inner_product_forward::primitive_desc(forward_desc(d, t), user_scratchpad_attr(), engine()));
        return pd;
      },
      [&] { return user_weight_desc(d, t); }, d.has_bias, x, w, b, y);
}

void CpuBackend::inner_product_backward_impl(const InnerProductDesc& d, const Tensor& x, const Tensor& w,
                                             const Tensor& dy, const Tensor& dx, const Tensor& dw, const Tensor& db) {
  const char* op = "inner_product_backward";
  check_args(*this, d, op, x, w);
  const DType t = x.dtype();
  check_act(dy, d.n * d.out, t, op, "dy");
  if (dx) check_act(dx, x.numel(), t, op, "dx");
  if (dw) check_act(dw, w.numel(), t, op, "dw");
  if (db) {
    TG_CHECK(d.has_bias, "{}: a bias gradient was requested from an inner product without bias ({})", op, d.key());
    check_act(db, d.out, t, op, "db");
  }

  if (dx) {
    auto& e = cached<WeightedPrimitive>(ip_key(CpuOp::kIpBwdData, d, t), [&] {
      auto e = std::make_unique<WeightedPrimitive>();
      dnnl::inner_product_forward::primitive_desc hint;
      dnnl::inner_product_backward_data::primitive_desc pd;
      TG_DNNL_CALL(hint = dnnl::inner_product_forward::primitive_desc(forward_desc(d, t), engine_));
      dnnl::inner_product_backward_data::desc bd(src_desc(d, t), prim_weight_desc(d, t), dst_desc(d, t));
      TG_DNNL_CALL(pd = dnnl::inner_product_backward_data::primitive_desc(bd, user_scratchpad_attr(), engine_, hint));
      e->init(pd, {DNNL_ARG_DIFF_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DIFF_DST}, engine_);
      e->weights.init(pd.weights_desc(), user_weight_desc(d, t), engine_);
      return e;
    });
    e.run(stream_, {dx.raw(), e.weights.prepare(stream_, w), dy.raw()});
  }

  if (dw || db) {
    auto& e = cached<IpBackwardWeights>(ip_key(CpuOp::kIpBwdWeights, d, t), [&] {
      auto e = std::make_unique<IpBackwardWeights>();
      dnnl::inner_product_forward::primitive_desc hint;
      dnnl::inner_product_backward_weights::primitive_desc pd;
      TG_DNNL_CALL(hint = dnnl::inner_product_forward::primitive_desc(forward_desc(d, t), engine_));
      auto make = [&]() {
        if (d.has_bias)
          return dnnl::inner_product_backward_weights::desc(src_desc(d, t), prim_weight_desc(d, t), bias_desc(d, t),
                                                            dst_desc(d, t));
        return dnnl::inner_product_backward_weights::desc(src_desc(d, t), prim_weight_desc(d, t), dst_desc(d, t));
      };
      TG_DNNL_CALL(
          pd = dnnl::inner_product_backward_weights::primitive_desc(make(), user_scratchpad_attr(), engine_, hint));
      e->init(pd, user_weight_desc(d, t), d.has_bias, engine_);
      return e;
    });
    e.run(stream_, x, dy, dw, db, d.has_bias);
  }
}

}  // namespace tg
