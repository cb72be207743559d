// Small helpers shared by the oneDNN ops of the CPU backend (cpu_conv.cc, cpu_pool.cc, cpu_lrn.cc,
// cpu_batch_norm.cc, cpu_inner_product.cc).
//
// Pattern: every cached op keeps its primitive, its dnnl::memory objects created WITHOUT a data handle
// (DNNL_MEMORY_NONE) and its argument list (Args, which also keeps the C array the primitive executes
// with). A call only points those memories at the caller's tensors (set_data_handle) and executes, so
// repeated calls create no primitive and allocate nothing on our side. Primitives use a user-managed
// scratchpad that lives in the cache entry. Memory descriptors carry the tensors' compute dtype (f32 or bf16;
// oneDNN accumulates bf16 in f32), and so do the cache keys (the dtype is the key's last field).
#pragma once

#include <cstdint>
#include <dnnl.hpp>
#include <initializer_list>
#include <utility>
#include <vector>

#include "src/backend/cpu/cpu_backend.h"
#include "terngrad/core/buffer.h"
#include "terngrad/core/error.h"
#include "terngrad/core/tensor.h"

namespace tg::dnnl_util {

using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;
using Dims = dnnl::memory::dims;
// A primitive's arguments: (DNNL_ARG_*, memory) pairs, plus the C array dnnl_primitive_execute takes,
// built once (the C++ execute() builds a fresh vector at every call). The array holds the memories' C
// handles, which set_data_handle does not change, so it stays valid while the memories are re-pointed.
class Args {
 public:
  Args() = default;
  Args(std::initializer_list<std::pair<int, dnnl::memory>> args) : args_(args) {}
  // Adds or replaces an argument.
  dnnl::memory& operator[](int arg) {
    c_args_.clear();
    for (auto& a : args_)
      if (a.first == arg) return a.second;
    args_.emplace_back(arg, dnnl::memory());
    return args_.back().second;
  }
  const std::vector<dnnl_exec_arg_t>& c_args() {
    if (c_args_.size() != args_.size()) {
      c_args_.clear();
      for (auto& a : args_) c_args_.push_back({a.first, a.second.get()});
    }
    return c_args_;
  }

 private:
  std::vector<std::pair<int, dnnl::memory>> args_;
  std::vector<dnnl_exec_arg_t> c_args_;
};

// oneDNN's data type for a compute dtype.
inline dt dnnl_type(DType t) {
  switch (t) {
    case DType::kF32:
      return dt::f32;
    case DType::kBf16:
      return dt::bf16;
    case DType::kF16:
      return dt::f16;
    default:
      TG_THROW("oneDNN op: dtype {} is not a compute dtype", dtype_name(t));
  }
}
inline dnnl::memory::desc md(const Dims& dims, DType t, tag format) {
  return dnnl::memory::desc(dims, dnnl_type(t), format);
}
inline dnnl::memory::desc f32_desc(const Dims& dims, tag t) { return dnnl::memory::desc(dims, dt::f32, t); }

// A memory object over no data yet; bind() points it at a tensor at each call.
inline dnnl::memory unbound(const dnnl::memory::desc& md, const dnnl::engine& eng) {
  dnnl::memory m;
  TG_DNNL_CALL(m = dnnl::memory(md, eng, DNNL_MEMORY_NONE));
  return m;
}

// A memory object over a buffer owned by the cache entry (reordered weights, scratch outputs).
inline dnnl::memory owned(const dnnl::memory::desc& md, const dnnl::engine& eng, Buffer& storage) {
  size_t bytes = md.get_size();
  storage = Buffer(host_allocator(), bytes == 0 ? 64 : bytes);
  dnnl::memory m;
  TG_DNNL_CALL(m = dnnl::memory(md, eng, storage.data()));
  return m;
}

// Checks that `t` is a defined f32 CPU tensor of `numel` elements, naming the op and the argument.
inline void check_f32(const Tensor& t, int64_t numel, const char* op, const char* arg) {
  TG_CHECK(t.raw() != nullptr, "{}: tensor `{}` is undefined", op, arg);
  TG_CHECK(t.dtype() == DType::kF32 && t.device().is_cpu() && t.numel() == numel,
           "{}: tensor `{}` is {}, expected {} f32 elements on the cpu", op, arg, t.str(), numel);
}

// Checks that `t` is a defined CPU tensor of dtype `type` and `numel` elements (an activation, a weight or a
// gradient of an op whose compute dtype is `type`).
inline void check_act(const Tensor& t, int64_t numel, DType type, const char* op, const char* arg) {
  TG_CHECK(t.raw() != nullptr, "{}: tensor `{}` is undefined", op, arg);
  TG_CHECK(t.dtype() == type && t.device().is_cpu() && t.numel() == numel,
           "{}: tensor `{}` is {}, expected {} {} elements on the cpu", op, arg, t.str(), numel, dtype_name(type));
}

inline void bind(dnnl::memory& m, const Tensor& t) { m.set_data_handle(t.raw()); }
inline void bind(dnnl::memory& m, void* p) { m.set_data_handle(p); }

// Attributes every cached primitive is created with: scratchpad owned by us, not by the library.
inline dnnl::primitive_attr user_scratchpad_attr() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

// Executes `prim` with `args` and waits (CPU streams are in order; waiting keeps the contract synchronous).
inline void execute(dnnl::stream& s, const dnnl::primitive& prim, Args& args) {
  const std::vector<dnnl_exec_arg_t>& c = args.c_args();
  TG_DNNL_CALL(
      dnnl::error::wrap_c_api(dnnl_primitive_execute(prim.get(), s.get(), static_cast<int>(c.size()), c.data()),
                              "could not execute a primitive");
      s.wait());
}

// A reorder between two descriptors, with its memories (unbound) and argument map.
struct Reorder {
  dnnl::reorder prim;
  dnnl::memory src, dst;
  Args args;
  void init(const dnnl::memory::desc& from, const dnnl::memory::desc& to, const dnnl::engine& eng) {
    src = unbound(from, eng);
    dst = unbound(to, eng);
    TG_DNNL_CALL(prim = dnnl::reorder(src, dst));
    args = {{DNNL_ARG_FROM, src}, {DNNL_ARG_TO, dst}};
  }
  void run(dnnl::stream& s, void* from, void* to) {
    src.set_data_handle(from);
    dst.set_data_handle(to);
    execute(s, prim, args);
  }
};

// A cached primitive with its arguments: the data arguments named at init (DNNL_ARG_SRC, ..., their
// descriptors queried from the primitive descriptor) unbound, the scratchpad owned by the entry, and the
// workspace (when the primitive keeps one: max pooling's indices, LRN's) unbound. run() points the data
// arguments at the caller's tensors, in init's order, and executes. Pooling, LRN and the data-direction
// convolution and inner-product primitives share it.
struct CachedPrimitive : CpuBackend::CachedOp {
  dnnl::primitive prim;
  std::vector<dnnl::memory> data;
  dnnl::memory workspace;
  size_t workspace_bytes = 0;  // 0: the primitive keeps no workspace
  Buffer scratch_storage;
  Args args;

  void init(const dnnl::primitive_desc& pd, std::initializer_list<int> data_args, const dnnl::engine& eng) {
    TG_DNNL_CALL(prim = dnnl::primitive(pd));
    for (int a : data_args) {
      data.push_back(unbound(pd.query_md(dnnl::query::exec_arg_md, a), eng));
      args[a] = data.back();
    }
    args[DNNL_ARG_SCRATCHPAD] = owned(pd.scratchpad_desc(), eng, scratch_storage);
    workspace_bytes = pd.workspace_desc().get_size();
    if (workspace_bytes > 0) {
      workspace = unbound(pd.workspace_desc(), eng);
      args[DNNL_ARG_WORKSPACE] = workspace;
    }
  }
  // The caller's workspace (u8 of at least workspace_bytes; undefined for an inference forward, which keeps
  // none): a missing or short one is an error naming `op` and the descriptor.
  template <typename Desc>
  void bind_workspace(const Tensor& ws, const char* op, const Desc& d) {
    if (workspace_bytes == 0) return;
    TG_CHECK(ws.raw() != nullptr && ws.bytes() >= workspace_bytes,
             "{}: {} needs a {}-byte workspace (the one its forward filled), got {}", op, d.key(), workspace_bytes,
             ws.str());
    workspace.set_data_handle(ws.raw());
  }
  void run(dnnl::stream& s, std::initializer_list<void*> ptrs) {
    size_t i = 0;
    for (void* p : ptrs) data[i++].set_data_handle(p);
    execute(s, prim, args);
  }
};

// Weights as a primitive wants them: either the caller's tensor directly, or a cached buffer filled by a
// cached reorder from the caller's layout (`user`) when the primitive chose another format.
struct WeightsIn {
  bool reorder = false;
  Reorder to_prim;
  Buffer storage;
  void init(const dnnl::memory::desc& prim_md, const dnnl::memory::desc& user, const dnnl::engine& eng) {
    reorder = prim_md != user;
    if (reorder) {
      to_prim.init(user, prim_md, eng);
      storage = Buffer(host_allocator(), prim_md.get_size());
    }
  }
  // The pointer the primitive should read.
  void* prepare(dnnl::stream& s, const Tensor& w) {
    if (!reorder) return w.raw();
    to_prim.run(s, w.raw(), storage.data());
    return storage.data();
  }
};

// A data-direction primitive that reads weights (convolution / inner-product forward and backward data).
struct WeightedPrimitive : CachedPrimitive {
  WeightsIn weights;
};

// The forward of a layer with weights and an optional bias (convolution, inner product): y = op(x, w) (+ b),
// by the primitive cached under `key`, made on first use from make_pd() (a forward primitive descriptor) with
// the weights reordered from the caller's layout user_weights() when the primitive wants another.
template <typename MakePd, typename UserWeights>
void run_weighted_forward(CpuBackend& be, const OpKey& key, MakePd&& make_pd, UserWeights&& user_weights, bool has_bias,
                          const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y) {
  auto& e = be.cached<WeightedPrimitive>(key, [&] {
    auto e = std::make_unique<WeightedPrimitive>();
    const auto pd = make_pd();
    if (has_bias)
      e->init(pd, {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST, DNNL_ARG_BIAS}, be.engine());
    else
      e->init(pd, {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST}, be.engine());
    e->weights.init(pd.weights_desc(), user_weights(), be.engine());
    return e;
  });
  void* wei = e.weights.prepare(be.stream(), w);
  if (has_bias)
    e.run(be.stream(), {x.raw(), wei, y.raw(), b.raw()});
  else
    e.run(be.stream(), {x.raw(), wei, y.raw()});
}

// The cached state of a backward-weights primitive (convolution or inner product): the primitive, its
// memories and scratchpad, and, when its weight format differs from the caller's, a reorder into the
// caller's layout. dw and db may be unwanted: the primitive then writes into storage of the entry.
template <typename Primitive>
struct BackwardWeightsOp : CpuBackend::CachedOp {
  Primitive prim;
  dnnl::memory src, diff_dst, diff_wei, diff_bias, scratch;
  Buffer scratch_storage;
  bool reorder = false;  // the primitive's weight format differs from the caller's
  Reorder to_user;
  Buffer diff_wei_storage;   // primitive-format dw (when reordering, or when dw is unwanted)
  Buffer diff_bias_storage;  // db when unwanted
  Args args;

  // Everything but the primitive itself, from its descriptor; user_weights is the caller's weight layout.
  template <typename PrimitiveDesc>
  void init(const PrimitiveDesc& pd, const dnnl::memory::desc& user_weights, bool has_bias, const dnnl::engine& eng) {
    TG_DNNL_CALL(prim = Primitive(pd));
    src = unbound(pd.src_desc(), eng);
    diff_dst = unbound(pd.diff_dst_desc(), eng);
    diff_wei = unbound(pd.diff_weights_desc(), eng);
    scratch = owned(pd.scratchpad_desc(), eng, scratch_storage);
    diff_wei_storage = Buffer(host_allocator(), pd.diff_weights_desc().get_size());
    reorder = pd.diff_weights_desc() != user_weights;
    if (reorder) to_user.init(pd.diff_weights_desc(), user_weights, eng);
    args = {{DNNL_ARG_SRC, src},
            {DNNL_ARG_DIFF_DST, diff_dst},
            {DNNL_ARG_DIFF_WEIGHTS, diff_wei},
            {DNNL_ARG_SCRATCHPAD, scratch}};
    if (has_bias) {
      diff_bias = unbound(pd.diff_bias_desc(), eng);
      diff_bias_storage = Buffer(host_allocator(), pd.diff_bias_desc().get_size());
      args[DNNL_ARG_DIFF_BIAS] = diff_bias;
    }
  }

  // dw, db (either may be undefined) from x and dy.
  void run(dnnl::stream& s, const Tensor& x, const Tensor& dy, const Tensor& dw, const Tensor& db, bool has_bias) {
    const bool direct = dw && !reorder;  // the primitive writes straight into dw
    bind(src, x);
    bind(diff_dst, dy);
    bind(diff_wei, direct ? dw.raw() : diff_wei_storage.data());
    if (has_bias) bind(diff_bias, db ? db.raw() : diff_bias_storage.data());
    execute(s, prim, args);
    if (dw && reorder) to_user.run(s, diff_wei_storage.data(), dw.raw());
  }
};

}  // namespace tg::dnnl_util
