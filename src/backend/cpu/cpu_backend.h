// CpuBackend: the complete CPU implementation of Backend and the oracle for every other backend.
// oneDNN primitives (convolution, pooling, LRN, inner product) are created once per op
// descriptor and kept in `cache_` (keyed by an OpKey: the op and the descriptor's numbers, hashed without
// formatting a string), with their memory descriptors, argument arrays and scratch buffers, so a training
// step creates no primitive and allocates nothing of ours (oneDNN's own execute path still allocates a few
// small objects per call). Element-wise ops, losses and optimizer updates are plain loops over the shared
// TG_HOST_DEVICE math, split over the same OpenMP threads oneDNN runs on: a second pool of threads would
// compete for the cores with OpenMP's spin-waiting workers (measured: 2-thread LeNet 8x slower).
//
// Files: cpu_backend.cc (memory, element-wise, reductions, loss), cpu_optimizer.cc, cpu_conv.cc, cpu_pool.cc,
// cpu_lrn.cc, cpu_inner_product.cc (oneDNN ops), cpu_batch_norm.cc (plain loops; see there why), cpu_codec.cc
// (gradient codec ops over the vectorized loops of ternary_codec.cc, terngrad/backend/ternary_codec.h).
#pragma once

#include <omp.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <dnnl.hpp>
#include <initializer_list>
#include <memory>
#include <string>
#include <unordered_map>

#include "src/backend/op_key.h"
#include "terngrad/backend/backend.h"
#include "terngrad/backend/backend_impls.h"
#include "terngrad/core/parallel.h"

namespace tg {

// oneDNN reports failures by throwing dnnl::error; TG_DNNL_CALL turns one into a tg::Error naming the
// call, file and line.
#define TG_DNNL_CALL(...)                                                                     \
  do {                                                                                        \
    try {                                                                                     \
      __VA_ARGS__;                                                                            \
    } catch (const dnnl::error& e_) {                                                         \
      ::tg::detail::throw_call_failed("oneDNN", #__VA_ARGS__, e_.what(), __FILE__, __LINE__); \
    }                                                                                         \
  } while (0)

// The oneDNN ops the CPU backend caches (one primitive per op and descriptor).
enum class CpuOp : int32_t {
  kConvFwd,
  kConvBwdData,
  kConvBwdWeights,
  kPoolFwdTrain,
  kPoolFwdInfer,
  kPoolBwd,
  kLrnFwdInfer,
  kLrnBwd,
  kBnFwdTrain,
  kBnFwdInfer,
  kBnBwd,
  kIpFwd,
  kIpBwdData,
  kIpBwdWeights,
};

// Cache key: the op and up to kMaxFields numbers of its descriptor (src/backend/op_key.h, shared with CUDA).
using OpKey = OpKeyOf<CpuOp>;
using OpKeyHash = OpKeyHashOf<CpuOp>;

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int threads);
  ~CpuBackend() override;

  Device device() const override { return Device::cpu(); }
  std::string name() const override;
  // The CPU backend's own memory: host memory whose ranges are remembered, so a copy between it and other host
  // memory counts as the host synchronisation it would be on a GPU (backend.h). One for all CPU backends.
  Allocator& allocator() override;
  bool is_host_memory(const Tensor& t) const override;
  // Staging memory: plain host memory (nothing to wait for).
  Allocator& staging_allocator() override { return host_allocator(); }
  void bind_thread() override;

  // Compute dtypes (cpu_precision.cc): f32 always, bf16 when oneDNN's effective ISA has AVX512_BF16 or AMX.
  bool supports_compute(DType t) const override;
  std::string why_not(DType t) const override;
  // Throws "<op>: <why_not(t)>" unless this CPU runs compute dtype t (the oneDNN ops call it first, so an
  // unsupported dtype is named instead of failing inside oneDNN).
  void require_compute(DType t, const char* op) const;

  // The *_impl hooks of every op (backend_impls.h: one list for the interface and both backends). Element-wise
  // loops: cpu_backend.cc; compute dtypes: cpu_precision.cc; oneDNN ops: cpu_conv.cc, cpu_pool.cc, cpu_lrn.cc,
  // cpu_batch_norm.cc, cpu_inner_product.cc; gradient codec: cpu_codec.cc (checks, then ternary_codec.cc's loops).
#define TG_DECLARE_IMPL(ret, name, params) ret name params override;
  TG_BACKEND_IMPLS(TG_DECLARE_IMPL)
#undef TG_DECLARE_IMPL
  // cast_impl per pair; a transposing pair casts, then moves the elements (cpu_precision.cc).
  void cast_many_impl(const Tensor* dst, const Tensor* src, int count, const int64_t* transpose_rows) override;
  // unscale_and_check_impl and axpy_impl per item; a transposing item unscales, then moves (cpu_precision.cc).
  void unscale_and_check_many_impl(const UnscaleItem* items, int count, float scale, const Tensor& found) override;

  int threads() const { return threads_; }

 protected:
  // Transfers are plain copies done at once; synchronize has nothing to wait for (the front counts them).
  void synchronize_impl() override {}
  void record_fence_impl(uint64_t /*ticket*/) override {}
  void upload_async_impl(const Tensor& dst, const Tensor& src, uint64_t after, uint64_t ticket) override;
  void download_async_impl(const Tensor& dst, const Tensor& src, uint64_t ticket) override;
  void wait_transfer_impl(uint64_t /*ticket*/) override {}

 public:
  dnnl::engine& engine() { return engine_; }
  dnnl::stream& stream() { return stream_; }

  // Cached per-descriptor state of the oneDNN ops (defined in each op's file).
  struct CachedOp {
    virtual ~CachedOp() = default;
  };
  // Returns the entry for `key`, creating it with make() on first use.
  template <typename T, typename Make>
  T& cached(const OpKey& key, Make&& make) {
    auto it = cache_.find(key);
    if (it == cache_.end()) it = cache_.emplace(key, std::unique_ptr<CachedOp>(make())).first;
    return static_cast<T&>(*it->second);
  }
  size_t cache_size() const { return cache_.size(); }

 private:
  template <bool kRelu>  // cpu_batch_norm.cc: the backward, with a fused ReLU's mask or without
  void batch_norm_backward_loops(const BatchNormDesc& d, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                 const Tensor& var, const Tensor& dy, const Tensor& dx, const Tensor& dgamma,
                                 const Tensor& dbeta, const Tensor& beta);
  // ternary_encode of one tensor, with error feedback's residual when it is defined (cpu_codec.cc).
  void encode_one(const Tensor& g, const Tensor& scaler, PhiloxKey key, uint32_t step, uint32_t tensor,
                  const Tensor& packed, const Tensor& zero_count, const Tensor& residual, int64_t bucket);
  // fn(begin, end) over contiguous chunks of [0, n) on up to threads_ compute threads (core/parallel.h).
  template <typename Fn>
  void parallel_for(int64_t n, const Fn& fn, int64_t grain) {
    tg::parallel_for(n, grain, fn, threads_);
  }

  int threads_;
  dnnl::engine engine_;
  dnnl::stream stream_;
  std::unordered_map<OpKey, std::unique_ptr<CachedOp>, OpKeyHash> cache_;
};

}  // namespace tg
