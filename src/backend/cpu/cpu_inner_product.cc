// CpuBackend fully connected layer on oneDNN inner products: y (N, out) = x (N, in) * w (in, out) + b (out).
//
// The caller's weights (in, out) are oneDNN's (out, in) weights in format `io`. The primitives are asked for
// exactly that format (kWeightFormat): with plain formats oneDNN runs its GEMM-based inner product directly
// on the caller's memory, which measured faster for our sizes than letting it pick a blocked format and
// reordering the weights at every call (they change every step). Should a primitive still choose another
// format, a cached reorder converts (weights in, weight gradient out).
#include <dnnl.hpp>

#include <memory>

#include "src/backend/cpu/cpu_backend.h"
#include "src/backend/cpu/dnnl_util.h"

namespace tg {
namespace {

using namespace dnnl_util;
using dnnl::prop_kind;

constexpr tag kWeightFormat = tag::io;

dnnl::memory::desc src_desc(const InnerProductDesc& d) { return f32_desc({d.n, d.in}, tag::nc); }
dnnl::memory::desc dst_desc(const InnerProductDesc& d) { return f32_desc({d.n, d.out}, tag::nc); }
dnnl::memory::desc user_weight_desc(const InnerProductDesc& d) { return f32_desc({d.out, d.in}, tag::io); }
dnnl::memory::desc prim_weight_desc(const InnerProductDesc& d) { return f32_desc({d.out, d.in}, kWeightFormat); }
dnnl::memory::desc bias_desc(const InnerProductDesc& d) { return f32_desc({d.out}, tag::x); }

OpKey ip_key(CpuOp op, const InnerProductDesc& d) { return OpKey(op, {d.n, d.in, d.out, d.has_bias}); }

dnnl::inner_product_forward::desc forward_desc(const InnerProductDesc& d) {
  if (d.has_bias)
    return dnnl::inner_product_forward::desc(prop_kind::forward_training, src_desc(d), prim_weight_desc(d),
                                             bias_desc(d), dst_desc(d));
  return dnnl::inner_product_forward::desc(prop_kind::forward_training, src_desc(d), prim_weight_desc(d),
                                           dst_desc(d));
}

struct IpForward : CpuBackend::CachedOp {
  dnnl::inner_product_forward prim;
  dnnl::memory src, wei, bias, dst, scratch;
  Buffer scratch_storage;
  bool reorder = false;
  Reorder to_prim;
  Buffer wei_storage;
  Args args;
};

struct IpBackwardData : CpuBackend::CachedOp {
  dnnl::inner_product_backward_data prim;
  dnnl::memory diff_src, wei, diff_dst, scratch;
  Buffer scratch_storage;
  bool reorder = false;
  Reorder to_prim;
  Buffer wei_storage;
  Args args;
};

using IpBackwardWeights = BackwardWeightsOp<dnnl::inner_product_backward_weights>;

void check_args(const InnerProductDesc& d, const char* op, const Tensor& x, const Tensor& w) {
  TG_CHECK(d.n > 0 && d.in > 0 && d.out > 0, "{}: empty inner product {}", op, d.key());
  check_f32(x, d.n * d.in, op, "x");
  check_f32(w, d.in * d.out, op, "w");
}

}  // namespace

void CpuBackend::inner_product_forward_impl(const InnerProductDesc& d, const Tensor& x, const Tensor& w,
                                       const Tensor& b, const Tensor& y) {
  const char* op = "inner_product_forward";
  check_args(d, op, x, w);
  check_f32(y, d.n * d.out, op, "y");
  if (d.has_bias) check_f32(b, d.out, op, "b");
  auto& e = cached<IpForward>(ip_key(CpuOp::kIpFwd, d), [&] {
    auto e = std::make_unique<IpForward>();
    dnnl::inner_product_forward::primitive_desc pd;
    TG_DNNL_CALL(pd = dnnl::inner_product_forward::primitive_desc(forward_desc(d), user_scratchpad_attr(), engine_));
    TG_DNNL_CALL(e->prim = dnnl::inner_product_forward(pd));
    e->src = unbound(pd.src_desc(), engine_);
    e->wei = unbound(pd.weights_desc(), engine_);
    e->dst = unbound(pd.dst_desc(), engine_);
    e->scratch = owned(pd.scratchpad_desc(), engine_, e->scratch_storage);
    e->reorder = pd.weights_desc() != user_weight_desc(d);
    if (e->reorder) {
      e->to_prim.init(user_weight_desc(d), pd.weights_desc(), engine_);
      e->wei_storage = Buffer(host_allocator(), pd.weights_desc().get_size());
    }
    e->args = {{DNNL_ARG_SRC, e->src}, {DNNL_ARG_WEIGHTS, e->wei}, {DNNL_ARG_DST, e->dst},
               {DNNL_ARG_SCRATCHPAD, e->scratch}};
    if (d.has_bias) {
      e->bias = unbound(pd.bias_desc(), engine_);
      e->args[DNNL_ARG_BIAS] = e->bias;
    }
    return e;
  });
  if (e.reorder) e.to_prim.run(stream_, w.raw(), e.wei_storage.data());
  bind(e.src, x);
  bind(e.wei, e.reorder ? e.wei_storage.data() : w.raw());
  bind(e.dst, y);
  if (d.has_bias) bind(e.bias, b);
  execute(stream_, e.prim, e.args);
}

void CpuBackend::inner_product_backward_impl(const InnerProductDesc& d, const Tensor& x, const Tensor& w,
                                        const Tensor& dy, const Tensor& dx, const Tensor& dw, const Tensor& db) {
  const char* op = "inner_product_backward";
  check_args(d, op, x, w);
  check_f32(dy, d.n * d.out, op, "dy");
  if (dx) check_f32(dx, x.numel(), op, "dx");
  if (dw) check_f32(dw, w.numel(), op, "dw");
  if (db) {
    TG_CHECK(d.has_bias, "{}: a bias gradient was requested from an inner product without bias ({})", op, d.key());
    check_f32(db, d.out, op, "db");
  }

  if (dx) {
    auto& e = cached<IpBackwardData>(ip_key(CpuOp::kIpBwdData, d), [&] {
      auto e = std::make_unique<IpBackwardData>();
      dnnl::inner_product_forward::primitive_desc hint;
      dnnl::inner_product_backward_data::primitive_desc pd;
      TG_DNNL_CALL(hint = dnnl::inner_product_forward::primitive_desc(forward_desc(d), engine_));
      dnnl::inner_product_backward_data::desc bd(src_desc(d), prim_weight_desc(d), dst_desc(d));
      TG_DNNL_CALL(pd = dnnl::inner_product_backward_data::primitive_desc(bd, user_scratchpad_attr(), engine_, hint));
      TG_DNNL_CALL(e->prim = dnnl::inner_product_backward_data(pd));
      e->diff_src = unbound(pd.diff_src_desc(), engine_);
      e->wei = unbound(pd.weights_desc(), engine_);
      e->diff_dst = unbound(pd.diff_dst_desc(), engine_);
      e->scratch = owned(pd.scratchpad_desc(), engine_, e->scratch_storage);
      e->reorder = pd.weights_desc() != user_weight_desc(d);
      if (e->reorder) {
        e->to_prim.init(user_weight_desc(d), pd.weights_desc(), engine_);
        e->wei_storage = Buffer(host_allocator(), pd.weights_desc().get_size());
      }
      e->args = {{DNNL_ARG_DIFF_SRC, e->diff_src}, {DNNL_ARG_WEIGHTS, e->wei}, {DNNL_ARG_DIFF_DST, e->diff_dst},
                 {DNNL_ARG_SCRATCHPAD, e->scratch}};
      return e;
    });
    if (e.reorder) e.to_prim.run(stream_, w.raw(), e.wei_storage.data());
    bind(e.diff_src, dx);
    bind(e.wei, e.reorder ? e.wei_storage.data() : w.raw());
    bind(e.diff_dst, dy);
    execute(stream_, e.prim, e.args);
  }

  if (dw || db) {
    auto& e = cached<IpBackwardWeights>(ip_key(CpuOp::kIpBwdWeights, d), [&] {
      auto e = std::make_unique<IpBackwardWeights>();
      dnnl::inner_product_forward::primitive_desc hint;
      dnnl::inner_product_backward_weights::primitive_desc pd;
      TG_DNNL_CALL(hint = dnnl::inner_product_forward::primitive_desc(forward_desc(d), engine_));
      auto make = [&]() {
        if (d.has_bias)
          return dnnl::inner_product_backward_weights::desc(src_desc(d), prim_weight_desc(d), bias_desc(d),
                                                            dst_desc(d));
        return dnnl::inner_product_backward_weights::desc(src_desc(d), prim_weight_desc(d), dst_desc(d));
      };
      TG_DNNL_CALL(pd = dnnl::inner_product_backward_weights::primitive_desc(make(), user_scratchpad_attr(), engine_,
                                                                             hint));
      e->init(pd, user_weight_desc(d), d.has_bias, engine_);
      return e;
    });
    e.run(stream_, x, dy, dw, db, d.has_bias);
  }
}

}  // namespace tg
