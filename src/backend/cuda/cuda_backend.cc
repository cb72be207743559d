// CudaBackend: construction (stream, cuBLAS/cuDNN handles bound to it, small reduction buffers), the
// cudaMalloc allocator, the workspace arena, memory ops, element-wise ops, reductions, softmax
// cross-entropy, optimizer updates and make_cuda_backend. Activations of any compute dtype (F32, F16, BF16)
// are handed to the kernels as raw pointers with their dtype. The layer ops live in cuda_conv.cc, cuda_pool.cc,
// cuda_lrn.cc, cuda_batch_norm.cc and cuda_inner_product.cc; kernels in kernels/*.cu.
#include "src/backend/cuda/cuda_backend.h"

#include <cuda_runtime.h>

#include <cstring>

#include "src/backend/codec_checks.h"
#include "src/backend/cuda/cuda_kernels.h"
#include "terngrad/backend/cuda_check.h"
#include "terngrad/backend/ternary_cuda.h"

namespace tg {

namespace {
void check_same_numel(const Tensor& a, const Tensor& b, const char* op) {
  TG_CHECK(a.numel() == b.numel(), "{}: element counts differ: {} vs {}", op, a.str(), b.str());
}
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
  make_lane(main_);
  make_lane(side_);
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
void CudaBackend::make_lane(Lane& lane) {
  TG_CUDA_CHECK(cudaStreamCreateWithFlags(&lane.stream, cudaStreamNonBlocking));
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

// ---- memory ------------------------------------------------------------------------------------------------
void CudaBackend::copy_impl(const Tensor& dst, const Tensor& src) {
  TG_CHECK(dst.bytes() == src.bytes(), "copy: sizes differ: {} vs {}", dst.str(), src.str());
  for (const Tensor* t : {&dst, &src})
    TG_CHECK(t->device().is_cpu() || t->device() == device(), "copy on {}: {} is on another device", device().str(),
             t->str());
  if (dst.bytes() == 0 || dst.raw() == src.raw()) return;
  CudaDeviceGuard guard(index_);
  cudaMemcpyKind kind = dst.device().is_cpu()
                            ? (src.device().is_cpu() ? cudaMemcpyHostToHost : cudaMemcpyDeviceToHost)
                            : (src.device().is_cpu() ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToDevice);
  TG_CUDA_CHECK(cudaMemcpyAsync(dst.raw(), src.raw(), dst.bytes(), kind, stream()));
  // A host destination is read by the caller right after, and a host source may be reused at once: wait for the
  // copy (the front counts it as the host synchronisation it is; a step uses upload_async / download_async).
  if (dst.device().is_cpu() || src.device().is_cpu()) sync_and_check();
}

void CudaBackend::zero_impl(const Tensor& dst) {
  if (dst.bytes() == 0) return;
  check_on_device(dst, "zero", "dst");
  CudaDeviceGuard guard(index_);
  TG_CUDA_CHECK(cudaMemsetAsync(dst.raw(), 0, dst.bytes(), stream()));
}

void CudaBackend::fill_impl(const Tensor& dst, float value) {
  check_on_device(dst, "fill", "dst");
  CudaDeviceGuard guard(index_);
  cuda_kernels::fill_f32(dst.data<float>(), dst.numel(), value, stream());
}

// ---- element-wise --------------------------------------------------------------------------------------------
void CudaBackend::add_impl(const Tensor& a, const Tensor& b, const Tensor& out) {
  check_same_numel(a, b, "add");
  check_same_numel(a, out, "add");
  check_on_device(a, "add", "a"), check_on_device(b, "add", "b"), check_on_device(out, "add", "out");
  CudaDeviceGuard guard(index_);
  const DType t = compute_dtype("add", a, {&b, &out});
  cuda_kernels::add(t, a.raw(), b.raw(), out.raw(), a.numel(), stream());
}

void CudaBackend::axpy_impl(float alpha, const Tensor& x, const Tensor& y) {
  check_same_numel(x, y, "axpy");
  check_on_device(x, "axpy", "x"), check_on_device(y, "axpy", "y");
  CudaDeviceGuard guard(index_);
  cuda_kernels::axpy_f32(alpha, x.data<float>(), y.data<float>(), x.numel(), stream());
}

void CudaBackend::scale_impl(float alpha, const Tensor& x) {
  check_on_device(x, "scale", "x");
  CudaDeviceGuard guard(index_);
  cuda_kernels::scale_f32(alpha, x.data<float>(), x.numel(), stream());
}

void CudaBackend::relu_forward_impl(const Tensor& x, const Tensor& y) {
  check_same_numel(x, y, "relu");
  check_on_device(x, "relu", "x"), check_on_device(y, "relu", "y");
  CudaDeviceGuard guard(index_);
  cuda_kernels::relu_forward(compute_dtype("relu", x, {&y}), x.raw(), y.raw(), x.numel(), stream());
}

void CudaBackend::relu_backward_impl(const Tensor& y, const Tensor& dy, const Tensor& dx) {
  check_same_numel(y, dy, "relu_backward");
  check_same_numel(y, dx, "relu_backward");
  check_on_device(y, "relu_backward", "y"), check_on_device(dy, "relu_backward", "dy");
  check_on_device(dx, "relu_backward", "dx");
  CudaDeviceGuard guard(index_);
  const DType t = compute_dtype("relu_backward", y, {&dy, &dx});
  cuda_kernels::relu_backward(t, y.raw(), dy.raw(), dx.raw(), y.numel(), stream());
}

void CudaBackend::dropout_forward_impl(const Tensor& x, const Tensor& y, const Tensor& mask, float keep_prob,
                                       PhiloxKey key, uint32_t step, uint32_t salt) {
  check_same_numel(x, y, "dropout");
  check_same_numel(x, mask, "dropout");
  TG_CHECK(keep_prob > 0.f && keep_prob <= 1.f, "dropout keep_prob {} is not in (0, 1]", keep_prob);
  check_on_device(x, "dropout", "x"), check_on_device(y, "dropout", "y"), check_on_device(mask, "dropout", "mask");
  CudaDeviceGuard guard(index_);
  const DType t = compute_dtype("dropout", x, {&y});
  cuda_kernels::dropout_forward(t, x.raw(), y.raw(), mask.data<uint8_t>(), x.numel(), keep_prob, key, step, salt,
                                stream());
}

void CudaBackend::dropout_backward_impl(const Tensor& dy, const Tensor& mask, float keep_prob, const Tensor& dx) {
  check_same_numel(dy, dx, "dropout_backward");
  check_same_numel(dy, mask, "dropout_backward");
  check_on_device(dy, "dropout_backward", "dy"), check_on_device(mask, "dropout_backward", "mask");
  check_on_device(dx, "dropout_backward", "dx");
  CudaDeviceGuard guard(index_);
  const DType t = compute_dtype("dropout_backward", dy, {&dx});
  cuda_kernels::dropout_backward(t, dy.raw(), mask.data<uint8_t>(), keep_prob, dx.raw(), dy.numel(), stream());
}

// Channel concat/split are strided 2-D copies: rows = N*H*W, a part's row is c elements (of the compute dtype,
// es bytes each) at offset `offset`.
void CudaBackend::concat_channels_impl(const std::vector<Tensor>& parts, const Tensor& out) {
  check_on_device(out, "concat", "out");
  const int64_t c_out = out.shape().dim(-1);
  const int64_t rows = c_out ? out.numel() / c_out : 0;
  const size_t es = dtype_size(compute_dtype("concat", out, {}));
  char* po = static_cast<char*>(out.raw());
  CudaDeviceGuard guard(index_);
  int64_t offset = 0;
  for (const Tensor& p : parts) {
    const int64_t c = p.shape().dim(-1);
    TG_CHECK(p.numel() == rows * c, "concat: part {} does not match output {}", p.str(), out.str());
    TG_CHECK(offset + c <= c_out, "concat: parts have more channels than the output {}", out.str());
    check_on_device(p, "concat", "part");
    compute_dtype("concat", out, {&p});
    if (rows * c > 0)
      TG_CUDA_CHECK(cudaMemcpy2DAsync(po + offset * es, c_out * es, p.raw(), c * es, c * es, rows,
                                      cudaMemcpyDeviceToDevice, stream()));
    offset += c;
  }
  TG_CHECK(offset == c_out, "concat: parts have {} channels, output {}", offset, c_out);
}

void CudaBackend::split_channels_impl(const Tensor& dout, const std::vector<Tensor>& dparts) {
  check_on_device(dout, "split", "dout");
  const int64_t c_out = dout.shape().dim(-1);
  const int64_t rows = c_out ? dout.numel() / c_out : 0;
  const size_t es = dtype_size(compute_dtype("split", dout, {}));
  const char* po = static_cast<const char*>(dout.raw());
  CudaDeviceGuard guard(index_);
  int64_t offset = 0;
  for (const Tensor& p : dparts) {
    const int64_t c = p.shape().dim(-1);
    TG_CHECK(offset + c <= c_out, "split: parts have more channels than {}", dout.str());
    if (p) {
      TG_CHECK(p.numel() == rows * c, "split: part {} does not match {}", p.str(), dout.str());
      check_on_device(p, "split", "part");
      compute_dtype("split", dout, {&p});
      if (rows * c > 0)
        TG_CUDA_CHECK(cudaMemcpy2DAsync(p.raw(), c * es, po + offset * es, c_out * es, c * es, rows,
                                        cudaMemcpyDeviceToDevice, stream()));
    }
    offset += c;
  }
  TG_CHECK(offset == c_out, "split: parts have {} channels, dout {}", offset, c_out);
}

// ---- reductions -----------------------------------------------------------------------------------------------
double CudaBackend::reduce_to_host(const Tensor& x, bool squares, const char* op) {
  check_on_device(x, op, "x");
  if (x.numel() == 0) return 0.0;
  CudaDeviceGuard guard(index_);
  auto* partials = static_cast<double*>(lane_->reduce_partials.data());
  auto* result = static_cast<double*>(lane_->reduce_result.data());
  cuda_kernels::reduce_sum_f64(x.dtype(), x.raw(), x.numel(), squares, partials, result, stream());
  TG_CUDA_CHECK(cudaMemcpyAsync(host_pinned_, result, sizeof(double), cudaMemcpyDeviceToHost, stream()));
  sync_and_check();
  double v;
  std::memcpy(&v, host_pinned_, sizeof(double));
  return v;
}

double CudaBackend::sum_impl(const Tensor& x) { return reduce_to_host(x, false, "sum"); }
double CudaBackend::sum_squares_impl(const Tensor& x) { return reduce_to_host(x, true, "sum_squares"); }

// Tables of up to kReduceTable tensors; the running double between tables lives in the lane's reduce_result. Empty
// tensors add 0 and are left out (a null pointer would be read by nobody, but the table stays dense).
void CudaBackend::reduce_into_impl(Reduction r, const Tensor* xs, const float* weights, int count, const Tensor& out) {
  check_on_device(out, "reduce_into", "out");
  for (int k = 0; k < count; ++k)
    if (xs[k].numel() > 0) check_on_device(xs[k], "reduce_into", "input");
  CudaDeviceGuard guard(index_);
  void* scratch = workspace(cuda_kernels::reduce_table_scratch_bytes());
  auto* running = static_cast<double*>(lane_->reduce_result.data());
  cuda_kernels::ReduceTable t;
  bool first = true;
  int k = 0;
  do {
    t.count = 0;
    for (; k < count && t.count < cuda_kernels::kReduceTable; ++k) {
      if (xs[k].numel() == 0) continue;
      t.x[t.count] = xs[k].data<float>(), t.n[t.count] = xs[k].numel(), t.w[t.count] = weights[k];
      ++t.count;
    }
    const bool last = k >= count;
    cuda_kernels::reduce_table(t, r == Reduction::kSumSquares, first, last, running, out.data<float>(), scratch,
                               stream());
    first = false;
  } while (k < count);
}

float CudaBackend::max_abs_impl(const Tensor& x) {
  check_on_device(x, "max_abs", "x");
  if (x.numel() == 0) return 0.f;
  CudaDeviceGuard guard(index_);
  auto* partials = static_cast<double*>(lane_->reduce_partials.data());
  auto* result = static_cast<double*>(lane_->reduce_result.data());
  cuda_kernels::reduce_max_abs(x.dtype(), x.raw(), x.numel(), partials, result, stream());
  TG_CUDA_CHECK(cudaMemcpyAsync(host_pinned_, result, sizeof(double), cudaMemcpyDeviceToHost, stream()));
  sync_and_check();
  double v;
  std::memcpy(&v, host_pinned_, sizeof(double));
  return static_cast<float>(v);  // exact: v holds a float
}

// ---- softmax cross-entropy --------------------------------------------------------------------------------------
void CudaBackend::softmax_xent_forward_impl(const Tensor& logits, const Tensor& labels, float label_smoothing,
                                            const Tensor& probs, const Tensor& losses) {
  TG_CHECK(logits.shape().rank() == 2, "softmax_xent: logits {} must be (N, K)", logits.str());
  const int64_t n = logits.shape()[0], k = logits.shape()[1];
  TG_CHECK(labels.numel() == n && probs.numel() == n * k && losses.numel() == n,
           "softmax_xent: logits {}, labels {}, probs {}, losses {} do not match", logits.str(), labels.str(),
           probs.str(), losses.str());
  TG_CHECK(n < (int64_t{1} << 31), "softmax_xent: {} examples exceed the label check's int range", n);
  check_on_device(logits, "softmax_xent", "logits"), check_on_device(labels, "softmax_xent", "labels");
  check_on_device(probs, "softmax_xent", "probs"), check_on_device(losses, "softmax_xent", "losses");
  if (n == 0) return;
  CudaDeviceGuard guard(index_);
  cuda_kernels::softmax_xent_forward(logits.dtype(), logits.raw(), labels.data<int32_t>(), n, k, label_smoothing,
                                     probs.data<float>(), losses.data<float>(),
                                     static_cast<unsigned long long*>(label_flag_.data()), stream());
  label_check_pending_ = true, label_k_ = k;  // read at the next host sync (no wait here)
}

void CudaBackend::softmax_xent_backward_impl(const Tensor& probs, const Tensor& labels, float label_smoothing,
                                             float scale, const Tensor& dlogits) {
  TG_CHECK(probs.shape().rank() == 2, "softmax_xent_backward: probs {} must be (N, K)", probs.str());
  const int64_t n = probs.shape()[0], k = probs.shape()[1];
  TG_CHECK(labels.numel() == n && dlogits.numel() == n * k,
           "softmax_xent_backward: probs {}, labels {}, dlogits {} do not match", probs.str(), labels.str(),
           dlogits.str());
  check_on_device(probs, "softmax_xent_backward", "probs"), check_on_device(labels, "softmax_xent_backward", "labels");
  check_on_device(dlogits, "softmax_xent_backward", "dlogits");
  if (n == 0) return;
  CudaDeviceGuard guard(index_);
  cuda_kernels::softmax_xent_backward(dlogits.dtype(), probs.data<float>(), labels.data<int32_t>(), n, k,
                                      label_smoothing, scale, dlogits.raw(),
                                      static_cast<unsigned long long*>(label_flag_.data()), stream());
  label_check_pending_ = true, label_k_ = k;
}

// ---- optimizer ------------------------------------------------------------------------------------------------------
void CudaBackend::optimizer_update_impl(const OptimizerStep& step, const Tensor& w, const Tensor& g, const Tensor& s1,
                                        const Tensor& s2, const Tensor& ema) {
  check_same_numel(w, g, "optimizer_update");
  check_on_device(w, "optimizer_update", "w"), check_on_device(g, "optimizer_update", "g");
  const bool needs1 = step.kind != OptimizerKind::kGd;
  const bool needs2 = step.kind == OptimizerKind::kAdam || step.kind == OptimizerKind::kRmsprop;
  TG_CHECK(!needs1 || (s1 && s1.numel() == w.numel()), "optimizer_update: first slot missing for {}", w.str());
  TG_CHECK(!needs2 || (s2 && s2.numel() == w.numel()), "optimizer_update: second slot missing for {}", w.str());
  if (needs1) check_on_device(s1, "optimizer_update", "slot 1");
  if (needs2) check_on_device(s2, "optimizer_update", "slot 2");
  const bool with_ema = step.ema_decay >= 0.f;
  TG_CHECK(!with_ema || (ema && ema.numel() == w.numel()), "optimizer_update: moving average missing for {}", w.str());
  if (with_ema) check_on_device(ema, "optimizer_update", "ema");
  CudaDeviceGuard guard(index_);
  cuda_kernels::optimizer_update_f32(step, w.data<float>(), g.data<float>(), needs1 ? s1.data<float>() : nullptr,
                                     needs2 ? s2.data<float>() : nullptr, with_ema ? ema.data<float>() : nullptr,
                                     w.numel(), stream());
}

void CudaBackend::optimizer_update_coded_impl(const OptimizerStep& step, const Tensor& w, const CodedAverage& g,
                                              const Tensor& s1, const Tensor& s2, const Tensor& ema) {
  namespace cc = codec_checks;
  const char* op = "optimizer_update_coded";
  check_on_device(w, op, "w");
  const bool needs1 = step.kind != OptimizerKind::kGd;
  const bool needs2 = step.kind == OptimizerKind::kAdam || step.kind == OptimizerKind::kRmsprop;
  TG_CHECK(!needs1 || (s1 && s1.numel() == w.numel()), "{}: first slot missing for {}", op, w.str());
  TG_CHECK(!needs2 || (s2 && s2.numel() == w.numel()), "{}: second slot missing for {}", op, w.str());
  if (needs1) check_on_device(s1, op, "slot 1");
  if (needs2) check_on_device(s2, op, "slot 2");
  const bool with_ema = step.ema_decay >= 0.f;
  TG_CHECK(!with_ema || (ema && ema.numel() == w.numel()), "{}: moving average missing for {}", op, w.str());
  if (with_ema) check_on_device(ema, op, "ema");
  TG_CHECK(g.num_workers >= 1, "{}: {} workers", op, g.num_workers);
  cc::scalers(g.scaler, w.numel(), g.bucket, op);
  check_on_device(g.scaler, op, "scaler");
  if (g.gathered) {
    cc::workers_packed(g.gathered, g.stride, g.num_workers, w.numel(), op);
    check_on_device(g.gathered, op, "packed codes");
  } else {
    cc::dtype(g.code_sums, DType::kI8, op, "code sums");
    cc::numel(g.code_sums, w.numel(), op, "code sums");
    check_on_device(g.code_sums, op, "code sums");
  }
  CudaDeviceGuard guard(index_);
  optimizer_update_coded_cuda(step, w.data<float>(), g.gathered ? g.gathered.data<uint8_t>() : nullptr, g.stride,
                              g.code_sums ? g.code_sums.data<int8_t>() : nullptr, g.num_workers, g.scaler.data<float>(),
                              needs1 ? s1.data<float>() : nullptr, needs2 ? s2.data<float>() : nullptr,
                              with_ema ? ema.data<float>() : nullptr, w.numel(), stream(), g.bucket);
}

void CudaBackend::ema_update_impl(float decay, const Tensor& w, const Tensor& ema) {
  check_same_numel(w, ema, "ema_update");
  check_on_device(w, "ema_update", "w"), check_on_device(ema, "ema_update", "ema");
  CudaDeviceGuard guard(index_);
  cuda_kernels::ema_update_f32(decay, w.data<float>(), ema.data<float>(), w.numel(), stream());
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
