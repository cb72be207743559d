// CudaBackend: the Backend of one CUDA device ("cuda:<k>"). It owns everything device-specific, so layers
// stay free of library state:
//   - a cudaMalloc allocator (plain device memory, never managed) behind tg::Buffer;
//   - two non-blocking streams, main and side (Backend::enter_side_stream: the gradient exchange beside
//     backward); an op is enqueued on the current one, in order;
//   - per stream ("lane") a cuBLAS handle bound to it, a workspace arena (one growable device buffer shared
//     by that stream's ops: they run in stream order, so one op's scratch is free again when the next starts;
//     it grows when an op descriptor is first seen, never in steady state) and the reductions' scratch; one
//     cuDNN handle, set to the current stream;
//   - a cache of per-descriptor state (cuDNN descriptors and chosen algorithms) keyed by a CudaOpKey (the
//     op, the descriptor's numbers and the compute dtype; src/backend/op_key.h, shared with the CPU backend).
// Element-wise ops, reductions, losses and optimizer updates are kernels in kernels/*.cu that call the
// shared TG_HOST_DEVICE math (compiled with -fmad=false: the CPU's bits). Reductions and the loss's label
// check synchronize the stream (their results are read on the host).
// Compute dtypes (backend.h): activations, and conv/FC weights and their gradients, may be F32, F16 or BF16
// (one per call); kernels convert to f32 in registers; cuDNN runs CUDNN_DATA_HALF / CUDNN_DATA_BFLOAT16
// tensors with f32 compute (tensor-op math), cuBLAS cublasGemmEx with CUBLAS_COMPUTE_32F; batch norm
// statistics, probabilities and losses are f32. The batch norm scratch does not depend on the dtype, so its
// cache key holds none.
//
// Files: cuda_backend.cc (construction, memory, element-wise, reductions, loss, optimizer, factory),
// cuda_precision.cc (compute dtypes: supports_compute, cast, unscale_and_check),
// cuda_conv.cc (cuDNN convolution), cuda_pool.cc (pooling kernels), cuda_lrn.cc (LRN kernels),
// cuda_batch_norm.cc (batch norm kernels), cuda_inner_product.cc (cuBLAS). Kernel launchers: cuda_kernels.h.
//
// Host syncs: only where a value goes to the host (reductions, copies to or from host memory, waits for a
// transfer) and when the arena grows (first use of a descriptor). A step moves its input and its values through
// the transfers of backend.h instead: page-locked staging memory, uploads on a copy stream that the compute
// stream waits for (an event), downloads read once their event is done; each ticket is an event of a ring on the
// compute stream. Errors found by kernels (a bad
// label) are read at the next of those syncs. TG_CUDA_SYNC=1 synchronizes after every launch
// (include/terngrad/backend/cuda_check.h), so an asynchronous fault names the launcher that caused it.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <array>
#include <initializer_list>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "src/backend/op_key.h"
#include "terngrad/backend/backend.h"
#include "terngrad/backend/backend_impls.h"
#include "terngrad/backend/cuda_check.h"

namespace tg {

struct CodedUpdateCuda;  // terngrad/backend/ternary_cuda.h

// The ops whose per-descriptor state the CUDA backend caches; their keys (CudaOpKey) hold the descriptor's
// numbers (and the compute dtype where the state depends on it: the convolution's).
enum class CudaOp : int32_t { CONV, BATCH_NORM };
using CudaOpKey = OpKeyOf<CudaOp>;

// With TG_CUDA_SYNC=1: waits for the device after a library call (cuDNN, cuBLAS) that launched kernels and
// throws naming `op` if one faulted (our own launches do this in TG_CUDA_CHECK_LAUNCH).
void debug_sync_after(const char* op);

// The compute dtype of an op's activations: x's, which must be F32, F16 or BF16; every tensor in `others`
// that is defined must have it too (else one line naming the op and both tensors).
DType compute_dtype(const char* op, const Tensor& x, std::initializer_list<const Tensor*> others);

// Creates the backend of CUDA device `index`. Throws tg::Error when no device is present or the index is
// out of range ("--device cuda: no CUDA device is available (cudaGetDeviceCount: ...)").
std::unique_ptr<Backend> make_cuda_backend(int index, const BackendOptions& options);

// Makes CUDA device `index` the calling thread's current device (checked as make_cuda_backend checks it).
void select_cuda_device(int index);

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
  bool tensor_op = false;      // the descriptor allowed tensor-op math: TF32 for f32 data (allow_tf32), or f16/bf16
  bool chosen = false;
  float measured_ms = -1.f;  // with BackendOptions::conv_search: its time per call in the search; -1 otherwise
  int timed = 0;             // ... and how many candidates were timed
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int index, const BackendOptions& options = {});
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  Device device() const override { return Device::cuda(index_); }
  // cuDNN's NHWC filters are (out_c, KH, KW, C/g): a net hands them over in that layout (cast_many transposes
  // once a step) and the convolutions skip their per-call transposes.
  bool conv2d_filter_ohwi() const override { return true; }
  std::string name() const override { return name_; }
  Allocator& allocator() override { return allocator_; }
  Allocator& staging_allocator() override;  // page-locked host memory (cudaHostAlloc, portable to every device)
  void bind_thread() override;
  void* native_stream() override { return lane_->stream; }
  bool has_side_stream() const override { return true; }
  int64_t device_launches() const override { return detail::cuda_launch_counter().load(std::memory_order_relaxed); }
  void enter_side_stream() override;
  void leave_side_stream() override;
  void leave_side_stream_after_error() noexcept override;
  void join_side_stream() override;
  uint64_t record_mark() override;
  std::optional<MarkClock::time_point> mark_time(uint64_t mark) override;

  // Compute dtypes: F32 everywhere; F16 on sm_70+, BF16 on sm_80+ (tensor-core generations with those types).
  bool supports_compute(DType t) const override;
  std::optional<size_t> free_memory() override;  // cudaMemGetInfo's free bytes
  std::string why_not(DType t) const override;

  // The Backend's *_impl hooks (include/terngrad/backend/backend_impls.h), defined in the files named at the
  // top of this header.
#define TG_DECLARE_IMPL(ret, name, params) ret name params override;
  TG_BACKEND_IMPLS(TG_DECLARE_IMPL)
#undef TG_DECLARE_IMPL
  // Table launches, transposing pairs included (cuda_precision.cc).
  void cast_many_impl(const Tensor* dst, const Tensor* src, int count, const int64_t* transpose_rows) override;
  void optimizer_update_coded_many_impl(const OptimizerStep& step, const CodedUpdateItem* items,
                                        int count) override;  // table launches (cuda_backend.cc)
  void unscale_and_check_many_impl(const UnscaleItem* items, int count, float scale,
                                   const Tensor& found) override;  // table launches (cuda_precision.cc)
  void ternary_scaler_many_impl(const TernaryScalerItem* items, int count,
                                float clip_factor) override;  // table launches (cuda_codec.cc)

  // ---- what the op files share --------------------------------------------------------------------------
  int index() const { return index_; }
  const BackendOptions& options() const { return options_; }
  cudaStream_t stream() const { return lane_->stream; }  // the current lane's: where ops go now
  cublasHandle_t cublas() const { return lane_->cublas; }
  cudnnHandle_t cudnn() const { return cudnn_; }

  // The current stream's arena, at least `bytes` long. Growing it synchronizes that stream first (pending ops
  // may still read the old one); op caches reserve what they need when an entry is created, so steady-state
  // calls never grow it.
  void* workspace(size_t bytes);
  size_t workspace_bytes() const { return main_.workspace.bytes(); }  // the main stream's
  int workspace_grow_count() const { return workspace_grows_; }

  // Throws unless `t` is defined and lives on this device; `op` and `what` name it in the message.
  void check_on_device(const Tensor& t, const char* op, const char* what) const;

  // Cached per-descriptor state (descriptors, algorithms; defined in each op's file).
  struct CachedOp {
    virtual ~CachedOp() = default;
  };
  // The entry for `key`, created with make() on first use.
  template <typename T, typename Make>
  T& cached(const CudaOpKey& key, Make&& make) {
    auto it = cache_.find(key);
    if (it == cache_.end()) it = cache_.emplace(key, std::unique_ptr<CachedOp>(make())).first;
    return static_cast<T&>(*it->second);
  }
  size_t cache_size() const { return cache_.size(); }
  const CachedOp* find_cached(const CudaOpKey& key) const {
    auto it = cache_.find(key);
    return it == cache_.end() ? nullptr : it->second.get();
  }

  // The algorithms conv `d` ran with in compute dtype t: forward, backward-data, backward-filter (for reports;
  // cuda_ops_check).
  std::array<ConvAlgorithm, 3> conv_algorithms(const ConvDesc& d, DType t = DType::kF32) const;

 protected:
  void synchronize_impl() override;
  void record_fence_impl(uint64_t ticket) override;
  void upload_async_impl(const Tensor& dst, const Tensor& src, uint64_t after, uint64_t ticket) override;
  void download_async_impl(const Tensor& dst, const Tensor& src, uint64_t ticket) override;
  void wait_transfer_impl(uint64_t ticket) override;

 private:
  static constexpr int kTicketRing = 256;           // events of the tickets not yet known done
  static constexpr int kMarkRing = 4096;            // timing events of the last marks (record_mark)
  static constexpr double kMarkOriginSeconds = 30;  // a new origin after this long (float ms keep ~us resolution)
  // Records ticket's event on `stream` (after waiting for the ticket that held its slot, when still pending).
  void record_ticket(uint64_t ticket, cudaStream_t stream);
  // The event of a pending ticket (one that a synchronisation has not covered yet).
  cudaEvent_t ticket_event(uint64_t ticket) const;
  double reduce_to_host(const Tensor& x, bool squares, const char* op);
  // One coded update checked on this device, in the kernels' form (cuda_backend.cc).
  CodedUpdateCuda coded_update_args(const OptimizerStep& step, const Tensor& w, const CodedAverage& g, const Tensor& s1,
                                    const Tensor& s2, const Tensor& ema) const;
  // Synchronizes the stream, then throws if a loss kernel since the last check flagged a bad label (naming
  // the first example and its label).
  void sync_and_check();

  int index_;
  BackendOptions options_;
  std::string name_;
  CudaAllocator allocator_;
  // A stream and what its ops share: the cuBLAS handle bound to it, the workspace arena, the reductions' scratch.
  struct Lane {
    cudaStream_t stream = nullptr;
    cublasHandle_t cublas = nullptr;
    Buffer workspace;
    Buffer reduce_partials;  // per-block partial sums of the reductions (double)
    Buffer reduce_result;    // one double on the device
  };
  void make_lane(Lane& lane, int priority);  // priority: CUDA's stream priority (lower is sooner)
  void destroy_lane(Lane& lane);
  void use_lane(Lane& lane);                       // makes `lane` current (and cuDNN's stream)
  cudnnStatus_t switch_lane(Lane& lane) noexcept;  // the same, cuDNN's status returned instead of thrown

  // The side stream has the device's highest priority, the main stream the default: the exchange's codec kernels
  // and NCCL's collectives on the side stream are scheduled ahead of queued backward kernels, so a bucket's
  // exchange runs while backward goes on (as PyTorch's process group streams, created with high priority).
  Lane main_, side_;
  Lane* lane_ = &main_;                   // the current lane
  cudaEvent_t fork_event_ = nullptr;      // main stream -> side stream (enter_side_stream)
  cudaEvent_t join_event_ = nullptr;      // side stream -> main stream (join_side_stream)
  std::vector<cudaEvent_t> mark_events_;  // kMarkRing timing events, made on the first mark
  std::array<uint64_t, kMarkRing> mark_in_slot_{};
  std::array<uint64_t, kMarkRing> mark_origin_of_slot_{};  // the origin (its number) a slot's mark is timed from
  uint64_t marks_ = 0;
  // Origins: a timing event the device passed at a known host time; the current one (number origins_) and the one
  // before (origins_ - 1): marks older than that are dropped (nullopt).
  struct MarkOrigin {
    cudaEvent_t event = nullptr;
    MarkClock::time_point time;
  };
  std::array<MarkOrigin, 2> mark_origins_{};  // [number % 2]
  uint64_t origins_ = 0;
  void new_mark_origin();
  cudaStream_t copy_stream_ = nullptr;  // uploads (upload_async), beside the ops
  cudaEvent_t upload_done_ = nullptr;   // the last upload's end on copy_stream_ (stream_ waits for it)
  std::array<cudaEvent_t, kTicketRing> ticket_events_{};
  std::array<uint64_t, kTicketRing> ticket_in_slot_{};
  cudnnHandle_t cudnn_ = nullptr;
  int workspace_grows_ = 0;
  Buffer label_flag_;                 // one u64: (first bad example's row << 32 | its label), or kNoBadLabel
  bool label_check_pending_ = false;  // a loss kernel ran since the flag was last read
  int64_t label_k_ = 0;               // K of the last loss (for the message)
  void* host_pinned_ = nullptr;       // 64 bytes of page-locked host memory for the values read back
  int sm_ = 0;                        // compute capability major * 10 + minor
  std::string device_text_;           // "cuda:0 (NVIDIA H200, sm_90)", for why_not
  std::unordered_map<CudaOpKey, std::unique_ptr<CachedOp>, OpKeyHashOf<CudaOp>> cache_;
};

}  // namespace tg
