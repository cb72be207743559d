// CpuBackend: the complete CPU implementation of Backend and the oracle for every other backend.
// oneDNN primitives (convolution, pooling, LRN, inner product) are created once per op
// descriptor and kept in `cache_` (keyed by an OpKey: the op and the descriptor's numbers, hashed without
// formatting a string), with their memory descriptors, argument arrays and scratch buffers, so a training
// step creates no primitive and allocates nothing of ours (oneDNN's own execute path still allocates a few
// small objects per call). Element-wise ops, losses and optimizer updates are plain loops over the shared
// TG_HOST_DEVICE math, split over the same OpenMP threads oneDNN runs on: a second pool of threads would
// compete for the cores with OpenMP's spin-waiting workers (measured: 2-thread LeNet 8x slower).
//
// Files: cpu_backend.cc (memory, element-wise, reductions, loss, optimizer), cpu_conv.cc, cpu_pool.cc,
// cpu_lrn.cc, cpu_inner_product.cc (oneDNN ops), cpu_batch_norm.cc (plain loops; see there why), cpu_codec.cc
// (gradient codec ops over the vectorized loops of ternary_codec.cc, terngrad/backend/ternary_codec.h).
#pragma once

#include <dnnl.hpp>
#include <omp.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <string>
#include <unordered_map>

#include "terngrad/backend/backend.h"
#include "terngrad/core/parallel.h"

namespace tg {

// oneDNN reports failures by throwing dnnl::error; TG_DNNL_CALL turns one into a tg::Error naming the
// call, file and line.
#define TG_DNNL_CALL(...)                                                                            \
  do {                                                                                               \
    try {                                                                                            \
      __VA_ARGS__;                                                                                   \
    } catch (const dnnl::error& e_) {                                                                \
      ::tg::detail::throw_call_failed("oneDNN", #__VA_ARGS__, e_.what(), __FILE__, __LINE__);        \
    }                                                                                                \
  } while (0)

// The oneDNN ops the CPU backend caches (one primitive per op and descriptor).
enum class CpuOp : int32_t {
  CONV_FWD, CONV_BWD_DATA, CONV_BWD_WEIGHTS,
  POOL_FWD_TRAIN, POOL_FWD_INFER, POOL_BWD,
  LRN_FWD_TRAIN, LRN_FWD_INFER, LRN_BWD,
  BN_FWD_TRAIN, BN_FWD_INFER, BN_BWD,
  IP_FWD, IP_BWD_DATA, IP_BWD_WEIGHTS,
};

// Cache key: the op and up to kMaxFields numbers of its descriptor (floats by their bits). Built on the
// stack; hashing and comparing it allocate nothing (a formatted string per lookup did, ~30 times a step).
struct OpKey {
  static constexpr int kMaxFields = 16;
  CpuOp op;
  int32_t size = 0;
  std::array<int64_t, kMaxFields> fields{};
  OpKey(CpuOp o, std::initializer_list<int64_t> values);
  static int64_t bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    return u;
  }
  bool operator==(const OpKey& o) const { return op == o.op && size == o.size && fields == o.fields; }
};
struct OpKeyHash {
  size_t operator()(const OpKey& k) const;
};

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int threads);
  ~CpuBackend() override;

  Device device() const override { return Device::cpu(); }
  std::string name() const override;
  Allocator& allocator() override { return host_allocator(); }
  void synchronize() override {}
  void bind_thread() override;

  // Compute dtypes (cpu_precision.cc): f32 always, bf16 when oneDNN's effective ISA has AVX512_BF16 or AMX.
  bool supports_compute(DType t) const override;
  std::string why_not(DType t) const override;
  // Throws "<op>: <why_not(t)>" unless this CPU runs compute dtype t (the oneDNN ops call it first, so an
  // unsupported dtype is named instead of failing inside oneDNN).
  void require_compute(DType t, const char* op) const;

  void copy_impl(const Tensor& dst, const Tensor& src) override;
  void cast_impl(const Tensor& dst, const Tensor& src) override;
  void unscale_and_check_impl(const Tensor& src, float scale, const Tensor& dst, const Tensor& found) override;
  void zero_impl(const Tensor& dst) override;
  void fill_impl(const Tensor& dst, float value) override;

  void add_impl(const Tensor& a, const Tensor& b, const Tensor& out) override;
  void axpy_impl(float alpha, const Tensor& x, const Tensor& y) override;
  void scale_impl(float alpha, const Tensor& x) override;
  void relu_forward_impl(const Tensor& x, const Tensor& y) override;
  void relu_backward_impl(const Tensor& y, const Tensor& dy, const Tensor& dx) override;
  void dropout_forward_impl(const Tensor& x, const Tensor& y, const Tensor& mask, float keep_prob, PhiloxKey key,
                       uint32_t step, uint32_t salt) override;
  void dropout_backward_impl(const Tensor& dy, const Tensor& mask, float keep_prob, const Tensor& dx) override;
  void concat_channels_impl(const std::vector<Tensor>& parts, const Tensor& out) override;
  void split_channels_impl(const Tensor& dout, const std::vector<Tensor>& dparts) override;

  double sum_impl(const Tensor& x) override;
  double sum_squares_impl(const Tensor& x) override;
  float max_abs_impl(const Tensor& x) override;

  void softmax_xent_forward_impl(const Tensor& logits, const Tensor& labels, float label_smoothing, const Tensor& probs,
                            const Tensor& losses) override;
  void softmax_xent_backward_impl(const Tensor& probs, const Tensor& labels, float label_smoothing, float scale,
                             const Tensor& dlogits) override;

  void conv2d_forward_impl(const ConvDesc& d, const Tensor& x, const Tensor& w, const Tensor& b,
                      const Tensor& y) override;
  void conv2d_backward_impl(const ConvDesc& d, const Tensor& x, const Tensor& w, const Tensor& dy, const Tensor& dx,
                       const Tensor& dw, const Tensor& db) override;
  size_t pool_workspace_bytes_impl(const PoolDesc& d) override;
  void pool_forward_impl(const PoolDesc& d, const Tensor& x, const Tensor& y, const Tensor& workspace) override;
  void pool_backward_impl(const PoolDesc& d, const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& workspace,
                     const Tensor& dx) override;
  size_t lrn_workspace_bytes_impl(const LrnDesc& d) override;
  void lrn_forward_impl(const LrnDesc& d, const Tensor& x, const Tensor& y, const Tensor& workspace) override;
  void lrn_backward_impl(const LrnDesc& d, const Tensor& x, const Tensor& dy, const Tensor& workspace,
                    const Tensor& dx) override;
  void batch_norm_forward_training_impl(const BatchNormDesc& d, const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                   const Tensor& y, const Tensor& mean, const Tensor& var) override;
  void batch_norm_forward_inference_impl(const BatchNormDesc& d, const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                    const Tensor& mean, const Tensor& var, const Tensor& y) override;
  void batch_norm_backward_impl(const BatchNormDesc& d, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                           const Tensor& var, const Tensor& dy, const Tensor& dx, const Tensor& dgamma,
                           const Tensor& dbeta) override;
  void inner_product_forward_impl(const InnerProductDesc& d, const Tensor& x, const Tensor& w, const Tensor& b,
                             const Tensor& y) override;
  void inner_product_backward_impl(const InnerProductDesc& d, const Tensor& x, const Tensor& w, const Tensor& dy,
                              const Tensor& dx, const Tensor& dw, const Tensor& db) override;

  void optimizer_update_impl(const OptimizerStep& step, const Tensor& w, const Tensor& g, const Tensor& s1,
                        const Tensor& s2, const Tensor& ema) override;
  void ema_update_impl(float decay, const Tensor& w, const Tensor& ema) override;

  // ---- gradient codec (cpu_codec.cc: checks, then the loops of ternary_codec.cc) ----
  void ternary_scaler_impl(const Tensor& g, float clip_factor, const Tensor& scaler) override;
  void ternary_encode_impl(const Tensor& g, const Tensor& scaler, PhiloxKey key, uint32_t step, uint32_t tensor,
                      const Tensor& packed, const Tensor& zero_count) override;
  void ternary_sum_codes_impl(const Tensor& packed, int64_t stride, int num_workers, const Tensor& code_sums) override;
  void max_scalers_impl(const Tensor* xs, int count, const Tensor& out) override;
  void ternary_decode_sums_impl(const Tensor& code_sums, const Tensor& scaler, int num_workers, const Tensor& g) override;
  void ternary_decode_gathered_impl(const Tensor& gathered, int64_t stride, int num_workers, const Tensor& scaler,
                               const Tensor& g) override;
  void encode_f16_sum_impl(const Tensor* xs, int count, const Tensor& out) override;
  void encode_f32_sum_impl(const Tensor* xs, int count, const Tensor& out) override;
  void average_f16_impl(const Tensor* xs, int count, const Tensor& out) override;
  void average_f32_impl(const Tensor* xs, int count, const Tensor& out) override;
  void decode_f16_sum_impl(const Tensor& sum, int num_workers, const Tensor& g) override;
  void decode_f32_sum_impl(const Tensor& sum, int num_workers, const Tensor& g) override;

  int threads() const { return threads_; }
  dnnl::engine& engine() { return engine_; }
  dnnl::stream& stream() { return stream_; }

  // Cached per-descriptor state of the oneDNN ops (defined in each op's file).
  struct CachedOp {
    virtual ~CachedOp() = default;
  };
  // Returns the entry for `key`, creating it with make() on first use.
  template <typename T, typename Make> T& cached(const OpKey& key, Make&& make) {
    auto it = cache_.find(key);
    if (it == cache_.end()) it = cache_.emplace(key, std::unique_ptr<CachedOp>(make())).first;
    return static_cast<T&>(*it->second);
  }
  size_t cache_size() const { return cache_.size(); }

 private:
  // fn(begin, end) over contiguous chunks of [0, n) on up to threads_ compute threads (core/parallel.h).
  template <typename Fn> void parallel_for(int64_t n, const Fn& fn, int64_t grain) {
    tg::parallel_for(n, grain, fn, threads_);
  }

  int threads_;
  dnnl::engine engine_;
  dnnl::stream stream_;
  std::unordered_map<OpKey, std::unique_ptr<CachedOp>, OpKeyHash> cache_;
};

}  // namespace tg
