// CudaBackend: the Backend of one CUDA device ("cuda:<k>"). It owns everything device-specific, so layers
// stay free of library state:
//   - a cudaMalloc allocator (plain device memory, never managed) behind tg::Buffer;
//   - one non-blocking stream, on which every op is enqueued in order;
//   - one cuBLAS and one cuDNN handle, both bound to that stream;
//   - a workspace arena: one growable device buffer shared by all ops (they run in stream order, so one
//     op's scratch is free again when the next starts). It grows when an op descriptor is first seen
//     (cache creation), never in steady state;
//   - a cache of per-descriptor state (cuDNN descriptors and chosen algorithms) keyed by op key().
// Element-wise ops, reductions, losses and optimizer updates are kernels in kernels/*.cu that call the
// shared TG_HOST_DEVICE math (compiled with -fmad=false: the CPU's bits). Reductions and the loss's label
// check synchronize the stream (their results are read on the host).
//
// Files: cuda_backend.cc (construction, memory, element-wise, reductions, loss, optimizer, factory),
// cuda_conv.cc (cuDNN convolution), cuda_pool.cc (pooling kernels), cuda_lrn.cc (LRN kernels),
// cuda_batch_norm.cc (batch norm kernels), cuda_inner_product.cc (cuBLAS). Kernel launchers: cuda_kernels.h.
//
// Host syncs: only where a value goes to the host (reductions, copies to or from host memory that is read or
// reused at once) and when the arena grows (first use of a descriptor). Errors found by kernels (a bad
// label) are read at the next of those syncs. TG_CUDA_SYNC=1 synchronizes after every launch
// (include/terngrad/backend/cuda_check.h), so an asynchronous fault names the launcher that caused it.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <array>
#include <memory>
#include <string>
#include <unordered_map>

#include "terngrad/backend/backend.h"

namespace tg {

// With TG_CUDA_SYNC=1: waits for the device after a library call (cuDNN, cuBLAS) that launched kernels and
// throws naming `op` if one faulted (our own launches do this in TG_CUDA_CHECK_LAUNCH).
void debug_sync_after(const char* op);

// Creates the backend of CUDA device `index`. Throws tg::Error when no device is present or the index is
// out of range ("--device cuda: no CUDA device is available (cudaGetDeviceCount: ...)").
std::unique_ptr<Backend> make_cuda_backend(int index, const BackendOptions& options);

// Makes device `index` current for the calling thread for the guard's lifetime, restoring the previous one.
class CudaDeviceGuard {
 public:
  explicit CudaDeviceGuard(int index);
  ~CudaDeviceGuard();
  CudaDeviceGuard(const CudaDeviceGuard&) = delete;
  CudaDeviceGuard& operator=(const CudaDeviceGuard&) = delete;

 private:
  int previous_ = -1;
  bool changed_ = false;
};

// cudaMalloc/cudaFree on one device.
class CudaAllocator final : public Allocator {
 public:
  explicit CudaAllocator(int index) : index_(index) {}
  Device device() const override { return Device::cuda(index_); }
  void* allocate(size_t bytes) override;
  void deallocate(void* ptr) noexcept override;

 private:
  int index_;
};

// The cuDNN algorithm a convolution direction runs with, once it has run (chosen is false before).
struct ConvAlgorithm {
  std::string name;            // "IMPLICIT_PRECOMP_GEMM", "ALGO_1", ...
  bool deterministic = false;  // cuDNN's CUDNN_DETERMINISTIC
  bool tf32 = false;           // the descriptor allowed TF32 (BackendOptions::allow_tf32)
  bool chosen = false;
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int index, const BackendOptions& options = {});
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  Device device() const override { return Device::cuda(index_); }
  std::string name() const override { return name_; }
  Allocator& allocator() override { return allocator_; }
  void synchronize() override;
  void bind_thread() override;
  void* native_stream() override { return stream_; }

  // Compute dtypes (cuda_precision_stubs.cc until the fp16/bf16 kernels land: F32 only).
  bool supports_compute(DType t) const override;
  std::string why_not(DType t) const override;

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

  // ---- gradient codec (cuda_codec.cc: checks, then the kernels of kernels/ternary_kernels.cu) ----
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

  // ---- what the op files share --------------------------------------------------------------------------
  int index() const { return index_; }
  const BackendOptions& options() const { return options_; }
  cudaStream_t stream() const { return stream_; }
  cublasHandle_t cublas() const { return cublas_; }
  cudnnHandle_t cudnn() const { return cudnn_; }

  // The arena, at least `bytes` long. Growing it synchronizes the stream first (pending ops may still
  // read the old one); op caches reserve what they need when an entry is created, so steady-state calls
  // never grow it.
  void* workspace(size_t bytes);
  size_t workspace_bytes() const { return workspace_.bytes(); }
  int workspace_grow_count() const { return workspace_grows_; }

  // Throws unless `t` is defined and lives on this device; `op` and `what` name it in the message.
  void check_on_device(const Tensor& t, const char* op, const char* what) const;

  // Cached per-descriptor state (descriptors, algorithms; defined in each op's file).
  struct CachedOp {
    virtual ~CachedOp() = default;
  };
  // The entry for `key`, created with make() on first use.
  template <typename T, typename Make> T& cached(const std::string& key, Make&& make) {
    auto it = cache_.find(key);
    if (it == cache_.end()) it = cache_.emplace(key, std::unique_ptr<CachedOp>(make())).first;
    return static_cast<T&>(*it->second);
  }
  size_t cache_size() const { return cache_.size(); }
  const CachedOp* find_cached(const std::string& key) const {
    auto it = cache_.find(key);
    return it == cache_.end() ? nullptr : it->second.get();
  }

  // The algorithms conv `d` ran with: forward, backward-data, backward-filter (for reports; cuda_ops_check).
  std::array<ConvAlgorithm, 3> conv_algorithms(const ConvDesc& d) const;

 private:
  double reduce_to_host(const Tensor& x, bool squares, const char* op);
  // Synchronizes the stream, then throws if a loss kernel since the last check flagged a bad label (naming
  // the first example and its label).
  void sync_and_check();

  int index_;
  BackendOptions options_;
  std::string name_;
  CudaAllocator allocator_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  cudnnHandle_t cudnn_ = nullptr;
  Buffer workspace_;
  int workspace_grows_ = 0;
  Buffer reduce_partials_;  // per-block partial sums of the reductions (double)
  Buffer reduce_result_;    // one double on the device
  Buffer label_flag_;       // one u64: (first bad example's row << 32 | its label), or kNoBadLabel
  bool label_check_pending_ = false;  // a loss kernel ran since the flag was last read
  int64_t label_k_ = 0;               // K of the last loss (for the message)
  void* host_pinned_ = nullptr;  // 64 bytes of page-locked host memory for the values read back
  std::unordered_map<std::string, std::unique_ptr<CachedOp>> cache_;
};

}  // namespace tg
