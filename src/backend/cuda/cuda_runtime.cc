// CudaBackend's runtime: construction (streams, cuBLAS/cuDNN handles bound to them, small reduction buffers), the
// two lanes (the main stream and the side stream, each with its cuBLAS handle, reduction buffers and workspace
// arena), the side stream's fork and join, device time marks, transfer tickets and fences, the cudaMalloc and
// page-locked allocators, the deferred label check, and make_cuda_backend. The ops: cuda_backend.cc and the layer
// files beside it.
#include <cuda_runtime.h>

#include <cstring>

#include "src/backend/cuda/cuda_backend.h"
#include "src/backend/cuda/cuda_kernels.h"
#include "terngrad/backend/cuda_check.h"

namespace tg {

namespace {
constexpr size_t kWorkspaceGranule = size_t{1} << 20;  // the arena grows in whole MiB

// Ordinary (pageable) host memory, as opposed to page-locked or managed memory.
bool is_pageable(const void* p) {
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    cudaGetLastError();
    return false;  // unknown: treat as pinned (wait)
  }
  return attr.type == cudaMemoryTypeUnregistered;
}

// Page-locked host memory, portable to every device (the staging memory of the transfers).
class CudaPinnedAllocator final : public Allocator {
 public:
  Device device() const override { return Device::cpu(); }
  void* allocate(size_t bytes) override {
    void* p = nullptr;
    const cudaError_t status = cudaHostAlloc(&p, bytes == 0 ? 64 : bytes, cudaHostAllocPortable);
    if (status != cudaSuccess) {
      cudaGetLastError();
      TG_THROW("cannot allocate {} bytes of page-locked host memory ({})", bytes, cudaGetErrorString(status));
    }
    return p;
  }
  void deallocate(void* ptr) noexcept override {
    if (ptr) cudaFreeHost(ptr);
  }
};
}  // namespace

Allocator& CudaBackend::staging_allocator() {
  static CudaPinnedAllocator* pinned = new CudaPinnedAllocator;  // never destroyed: buffers may outlive backends
  return *pinned;
}

void debug_sync_after(const char* op) {
  if (!detail::cuda_sync_after_launch()) return;
  const cudaError_t status = cudaDeviceSynchronize();
  if (status != cudaSuccess)
    TG_THROW("{}: {} ({}) in a library kernel (TG_CUDA_SYNC=1) on {}", op, cudaGetErrorName(status),
             cudaGetErrorString(status), detail::cuda_current_device_text());
}

// ---- device guard and allocator ------------------------------------------------------------------------
CudaDeviceGuard::CudaDeviceGuard(int index) {
  TG_CUDA_CHECK(cudaGetDevice(&previous_));
  if (previous_ != index) {
    TG_CUDA_CHECK(cudaSetDevice(index));
    changed_ = true;
  }
}

CudaDeviceGuard::~CudaDeviceGuard() {
  if (changed_) cudaSetDevice(previous_);  // best effort: destructors must not throw
}

void* CudaAllocator::allocate(size_t bytes) {
  CudaDeviceGuard guard(index_);
  void* p = nullptr;
  cudaError_t status = cudaMalloc(&p, bytes == 0 ? 256 : bytes);
  if (status != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free allocation error
    size_t free_bytes = 0, total_bytes = 0;
    cudaMemGetInfo(&free_bytes, &total_bytes);
    TG_THROW("cuda:{}: cannot allocate {} bytes of device memory ({}; {} of {} bytes free)", index_, bytes,
             cudaGetErrorString(status), free_bytes, total_bytes);
  }
  return p;
}

void CudaAllocator::deallocate(void* ptr) noexcept {
  if (!ptr) return;
  int previous = -1;
  cudaGetDevice(&previous);
  if (previous != index_) cudaSetDevice(index_);
  cudaFree(ptr);
  if (previous != index_ && previous >= 0) cudaSetDevice(previous);
}

std::optional<size_t> CudaBackend::free_memory() {
  CudaDeviceGuard guard(index_);
  size_t free_bytes = 0, total_bytes = 0;
  TG_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  return free_bytes;
}

// ---- construction ----------------------------------------------------------------------------------------
CudaBackend::CudaBackend(int index, const BackendOptions& options)
    : index_(index), options_(options), allocator_(index) {
  CudaDeviceGuard guard(index_);
  cudaDeviceProp prop{};
  TG_CUDA_CHECK(cudaGetDeviceProperties(&prop, index_));
  name_ = fmt::format("cuda:{} ({}, sm_{}{}, {} MiB, cuDNN {})", index_, prop.name, prop.major, prop.minor,
                      prop.totalGlobalMem >> 20, cudnnGetVersion());
  sm_ = prop.major * 10 + prop.minor;
  device_text_ = fmt::format("cuda:{} ({}) is sm_{}{}", index_, prop.name, prop.major, prop.minor);
  TG_CUDA_CHECK(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking));
  TG_CUDA_CHECK(cudaEventCreateWithFlags(&upload_done_, cudaEventDisableTiming));
  TG_CUDA_CHECK(cudaEventCreateWithFlags(&fork_event_, cudaEventDisableTiming));
  TG_CUDA_CHECK(cudaEventCreateWithFlags(&join_event_, cudaEventDisableTiming));
  for (cudaEvent_t& e : ticket_events_) TG_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  int least_priority = 0, greatest_priority = 0;
  TG_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least_priority, &greatest_priority));
  make_lane(main_, least_priority);
  make_lane(side_, greatest_priority);
  TG_CUDNN_CHECK(cudnnCreate(&cudnn_));
  use_lane(main_);
  label_flag_ = Buffer(allocator_, sizeof(unsigned long long));
  TG_CUDA_CHECK(cudaMemsetAsync(label_flag_.data(), 0xFF, sizeof(unsigned long long), stream()));
  TG_CUDA_CHECK(cudaMallocHost(&host_pinned_, 64));
}

CudaBackend::~CudaBackend() {
  int previous = -1;
  cudaGetDevice(&previous);
  cudaSetDevice(index_);
  if (copy_stream_) cudaStreamSynchronize(copy_stream_);
  for (Lane* lane : {&side_, &main_})
    if (lane->stream) cudaStreamSynchronize(lane->stream);
  cache_.clear();  // cuDNN descriptors before the handle
  label_flag_ = Buffer();
  if (host_pinned_) cudaFreeHost(host_pinned_);
  if (cudnn_) cudnnDestroy(cudnn_);
  destroy_lane(side_);
  destroy_lane(main_);
  for (cudaEvent_t e : ticket_events_)
    if (e) cudaEventDestroy(e);
  for (cudaEvent_t e : {upload_done_, fork_event_, join_event_, mark_origins_[0].event, mark_origins_[1].event})
    if (e) cudaEventDestroy(e);
  for (cudaEvent_t e : mark_events_)
    if (e) cudaEventDestroy(e);
  if (copy_stream_) cudaStreamDestroy(copy_stream_);
  if (previous >= 0) cudaSetDevice(previous);
}

// Plain fp32 GEMMs (no TF32 tensor-core rounding) unless allowed: results stay comparable with the CPU backend.
// cuBLAS's fp32 GEMMs give the same bits on every run (no atomics: the default atomics mode).
void CudaBackend::make_lane(Lane& lane, int priority) {
  TG_CUDA_CHECK(cudaStreamCreateWithPriority(&lane.stream, cudaStreamNonBlocking, priority));
  TG_CUBLAS_CHECK(cublasCreate(&lane.cublas));
  TG_CUBLAS_CHECK(cublasSetStream(lane.cublas, lane.stream));
  TG_CUBLAS_CHECK(
      cublasSetMathMode(lane.cublas, options_.allow_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
  lane.reduce_partials = Buffer(allocator_, cuda_kernels::kReduceMaxBlocks * sizeof(double));
  lane.reduce_result = Buffer(allocator_, sizeof(double));
}

void CudaBackend::destroy_lane(Lane& lane) {
  lane.workspace = Buffer();
  lane.reduce_partials = Buffer();
  lane.reduce_result = Buffer();
  if (lane.cublas) cublasDestroy(lane.cublas);
  if (lane.stream) cudaStreamDestroy(lane.stream);
  lane.cublas = nullptr;
  lane.stream = nullptr;
}

cudnnStatus_t CudaBackend::switch_lane(Lane& lane) noexcept {
  lane_ = &lane;
  return cudnnSetStream(cudnn_, lane.stream);
}

void CudaBackend::use_lane(Lane& lane) { TG_CUDNN_CHECK(switch_lane(lane)); }

void CudaBackend::bind_thread() { TG_CUDA_CHECK(cudaSetDevice(index_)); }

// Both streams: the side stream's work is part of "every op enqueued so far".
void CudaBackend::synchronize_impl() {
  CudaDeviceGuard guard(index_);
  TG_CUDA_CHECK(cudaStreamSynchronize(side_.stream));
  sync_and_check();
}

// ---- the side stream ------------------------------------------------------------------------------------------
void CudaBackend::enter_side_stream() {
  TG_CHECK(lane_ == &main_, "{}: enter_side_stream() while already on the side stream", device().str());
  CudaDeviceGuard guard(index_);
  TG_CUDA_CHECK(cudaEventRecord(fork_event_, main_.stream));
  TG_CUDA_CHECK(cudaStreamWaitEvent(side_.stream, fork_event_, 0));
  use_lane(side_);
}

void CudaBackend::leave_side_stream() {
  TG_CHECK(lane_ == &side_, "{}: leave_side_stream() without enter_side_stream()", device().str());
  use_lane(main_);
}

void CudaBackend::leave_side_stream_after_error() noexcept {
  if (lane_ == &side_) switch_lane(main_);  // cuDNN's status let pass: the step is failing anyway
}

// ---- device time marks ----------------------------------------------------------------------------------------
// An origin: a timing event recorded on the main stream and waited for, the host's clock read right after; a mark's
// time is its origin's plus the device's elapsed time between the two events. cudaEventElapsedTime gives float ms, so
// a new origin is made every kMarkOriginSeconds (one wait of the device, only while marks are being recorded: the
// timeline's window), which keeps the resolution near a microsecond; a mark keeps the origin it was recorded under.
void CudaBackend::new_mark_origin() {
  MarkOrigin& o = mark_origins_[(origins_ + 1) % 2];
  if (o.event == nullptr) TG_CUDA_CHECK(cudaEventCreate(&o.event));
  TG_CUDA_CHECK(cudaEventRecord(o.event, main_.stream));
  TG_CUDA_CHECK(cudaEventSynchronize(o.event));
  o.time = MarkClock::now();
  ++origins_;
}

uint64_t CudaBackend::record_mark() {
  CudaDeviceGuard guard(index_);
  if (mark_events_.empty()) {
    mark_events_.resize(kMarkRing, nullptr);
    for (cudaEvent_t& e : mark_events_) TG_CUDA_CHECK(cudaEventCreate(&e));
  }
  if (origins_ == 0 ||
      MarkClock::now() - mark_origins_[origins_ % 2].time > std::chrono::duration<double>(kMarkOriginSeconds))
    new_mark_origin();
  const uint64_t mark = ++marks_;
  const size_t slot = mark % kMarkRing;
  TG_CUDA_CHECK(cudaEventRecord(mark_events_[slot], stream()));
  mark_in_slot_[slot] = mark;
  mark_origin_of_slot_[slot] = origins_;
  return mark;
}

std::optional<Backend::MarkClock::time_point> CudaBackend::mark_time(uint64_t mark) {
  const size_t slot = mark % kMarkRing;
  if (mark == 0 || mark_events_.empty() || mark_in_slot_[slot] != mark) return std::nullopt;
  const uint64_t origin = mark_origin_of_slot_[slot];
  if (origin + 1 < origins_) return std::nullopt;  // its origin was replaced twice since
  CudaDeviceGuard guard(index_);
  const cudaError_t q = cudaEventQuery(mark_events_[slot]);
  if (q == cudaErrorNotReady) {
    cudaGetLastError();  // not an error: the device has not passed it yet
    return std::nullopt;
  }
  TG_CUDA_CHECK(q);
  const MarkOrigin& o = mark_origins_[origin % 2];
  float ms = 0.f;
  TG_CUDA_CHECK(cudaEventElapsedTime(&ms, o.event, mark_events_[slot]));
  return o.time + std::chrono::duration_cast<MarkClock::duration>(std::chrono::duration<double, std::milli>(ms));
}

void CudaBackend::join_side_stream() {
  CudaDeviceGuard guard(index_);
  TG_CUDA_CHECK(cudaEventRecord(join_event_, side_.stream));
  TG_CUDA_CHECK(cudaStreamWaitEvent(main_.stream, join_event_, 0));
}

// ---- transfers ----------------------------------------------------------------------------------------------
void CudaBackend::record_ticket(uint64_t ticket, cudaStream_t stream) {
  const size_t slot = ticket % kTicketRing;
  const uint64_t held = ticket_in_slot_[slot];
  if (held > done_ticket()) {  // kTicketRing tickets without a host synchronisation: wait for the oldest
    TG_CUDA_CHECK(cudaEventSynchronize(ticket_events_[slot]));
    synced_up_to(held);
  }
  TG_CUDA_CHECK(cudaEventRecord(ticket_events_[slot], stream));
  ticket_in_slot_[slot] = ticket;
}

cudaEvent_t CudaBackend::ticket_event(uint64_t ticket) const {
  const size_t slot = ticket % kTicketRing;
  TG_CHECK(ticket_in_slot_[slot] == ticket, "ticket {} is no longer pending on {} (slot holds {})", ticket,
           device().str(), ticket_in_slot_[slot]);
  return ticket_events_[slot];
}

void CudaBackend::record_fence_impl(uint64_t ticket) {
  TG_CHECK(lane_ == &main_, "{}: record_fence on the side stream (tickets cover the main stream)", device().str());
  CudaDeviceGuard guard(index_);
  record_ticket(ticket, main_.stream);
}

// The copy waits (on the copy stream) for the fence, the ops wait (on the compute stream) for the copy, and the
// ticket's event follows that wait on the compute stream: a ticket is done when the ops before it and the copy are.
void CudaBackend::upload_async_impl(const Tensor& dst, const Tensor& src, uint64_t after, uint64_t ticket) {
  TG_CHECK(lane_ == &main_, "{}: upload_async on the side stream (tickets cover the main stream)", device().str());
  check_on_device(dst, "upload_async", "dst");
  TG_CHECK(!is_pageable(src.raw()),
           "upload_async: {} is pageable host memory, not staging memory "
           "(staging_allocator()): the copy would stall the host",
           src.str());
  CudaDeviceGuard guard(index_);
  if (after > done_ticket()) TG_CUDA_CHECK(cudaStreamWaitEvent(copy_stream_, ticket_event(after), 0));
  TG_CUDA_CHECK(cudaMemcpyAsync(dst.raw(), src.raw(), dst.bytes(), cudaMemcpyHostToDevice, copy_stream_));
  TG_CUDA_CHECK(cudaEventRecord(upload_done_, copy_stream_));
  TG_CUDA_CHECK(cudaStreamWaitEvent(main_.stream, upload_done_, 0));
  record_ticket(ticket, main_.stream);
}

void CudaBackend::download_async_impl(const Tensor& dst, const Tensor& src, uint64_t ticket) {
  TG_CHECK(lane_ == &main_, "{}: download_async on the side stream (tickets cover the main stream)", device().str());
  check_on_device(src, "download_async", "src");
  TG_CHECK(!is_pageable(dst.raw()),
           "download_async: {} is pageable host memory, not staging memory "
           "(staging_allocator()): the copy would stall the host",
           dst.str());
  CudaDeviceGuard guard(index_);
  TG_CUDA_CHECK(cudaMemcpyAsync(dst.raw(), src.raw(), dst.bytes(), cudaMemcpyDeviceToHost, main_.stream));
  record_ticket(ticket, main_.stream);
}

void CudaBackend::wait_transfer_impl(uint64_t ticket) {
  CudaDeviceGuard guard(index_);
  TG_CUDA_CHECK(cudaEventSynchronize(ticket_event(ticket)));
}

// host_pinned_ layout: [0, 8) a reduction's result, [8, 16) the label flag. Waits for the current stream and the
// main one (the front then counts every ticket done: they are main-stream events); the label flag (the losses run on
// the main stream) is read on the main stream.
void CudaBackend::sync_and_check() {
  const bool read_flag = label_check_pending_;
  auto* flag_host = static_cast<char*>(host_pinned_) + 8;
  if (read_flag)
    TG_CUDA_CHECK(cudaMemcpyAsync(flag_host, label_flag_.data(), sizeof(unsigned long long), cudaMemcpyDeviceToHost,
                                  main_.stream));
  TG_CUDA_CHECK(cudaStreamSynchronize(stream()));
  if (stream() != main_.stream) TG_CUDA_CHECK(cudaStreamSynchronize(main_.stream));
  if (!read_flag) return;
  label_check_pending_ = false;
  unsigned long long flag;
  std::memcpy(&flag, flag_host, sizeof(flag));
  if (flag == cuda_kernels::kNoBadLabel) return;
  TG_CUDA_CHECK(cudaMemsetAsync(label_flag_.data(), 0xFF, sizeof(unsigned long long), main_.stream));  // reset
  const auto row = static_cast<int64_t>(flag >> 32);
  const auto label = static_cast<int32_t>(static_cast<uint32_t>(flag & 0xFFFFFFFFull));
  TG_THROW("label {} of example {} is outside [0, {}) (found by a softmax cross-entropy kernel)", label, row, label_k_);
}

void* CudaBackend::workspace(size_t bytes) {
  Buffer& arena = lane_->workspace;
  if (bytes <= arena.bytes()) return arena.data();
  const size_t rounded = (bytes + kWorkspaceGranule - 1) / kWorkspaceGranule * kWorkspaceGranule;
  TG_CUDA_CHECK(cudaStreamSynchronize(stream()));  // ops still queued may read the old arena
  arena = Buffer();
  arena = Buffer(allocator_, rounded);
  ++workspace_grows_;
  return arena.data();
}

void CudaBackend::check_on_device(const Tensor& t, const char* op, const char* what) const {
  TG_CHECK(t.raw() != nullptr || t.numel() == 0, "{}: {} is undefined", op, what);
  TG_CHECK(t.device() == device(), "{}: {} {} is not on {}", op, what, t.str(), device().str());
}

// ---- factory
// ----------------------------------------------------------------------------------------------------------
namespace {
void check_cuda_index(int index) {
  int count = 0;
  cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    cudaGetLastError();  // clear it: a later CUDA call must not report this one
    TG_THROW("--device cuda: no CUDA device is available (cudaGetDeviceCount: {}: {})", cudaGetErrorName(status),
             cudaGetErrorString(status));
  }
  if (count == 0) TG_THROW("--device cuda: no CUDA device is available (cudaGetDeviceCount: 0 devices)");
  TG_CHECK(index >= 0 && index < count, "--device cuda:{}: this machine has {} CUDA device(s), cuda:0..cuda:{}", index,
           count, count - 1);
}
}  // namespace

std::unique_ptr<Backend> make_cuda_backend(int index, const BackendOptions& options) {
  check_cuda_index(index);
  return std::make_unique<CudaBackend>(index, options);
}

void select_cuda_device(int index) {
  check_cuda_index(index);
  TG_CUDA_CHECK(cudaSetDevice(index));
}

}  // namespace tg
