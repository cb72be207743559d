// NcclCommunicator: collectives over NCCL, one rank per GPU (see the header). Compiled only in CUDA builds.
#include "terngrad/comm/nccl_communicator.h"

#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <nccl.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "src/comm/cuda_device_scope.h"
#include "terngrad/core/error.h"

namespace tg {

namespace {

using DeviceScope = comm_detail::CudaDeviceScope;

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::kF32:
      return ncclFloat32;
    case DType::kF16:
      return ncclFloat16;
    case DType::kBf16:
      return ncclBfloat16;
    case DType::kI8:
      return ncclInt8;
    case DType::kU8:
      return ncclUint8;
    case DType::kI32:
      return ncclInt32;
  }
  TG_THROW("NCCL communicator: no NCCL datatype for {}", dtype_name(t));
}

std::string device_list(const std::vector<int>& devices) {
  std::string s;
  for (int d : devices) s += fmt::format("{}cuda:{}", s.empty() ? "" : ", ", d);
  return s;
}

const char* last_error_text(ncclComm_t comm) {
  const char* text = ncclGetLastError(comm);
  return text != nullptr && *text != '\0' ? text : "no further detail";
}

// Non-blocking communicators: no NCCL call blocks (one that cannot finish at once returns ncclInProgress and the
// caller polls ncclCommGetAsyncError), so an abort from another thread always gets in between (AbortGate).
ncclConfig_t nonblocking_config() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  return config;
}

// Waits for a communicator being created, split or finalized to leave ncclInProgress, pausing between polls as
// AbortGate does; its final state, or ncclInProgress when `deadline` (seconds; 0: none) passed first.
ncclResult_t settle(ncclComm_t comm, double deadline = 0) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point end = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                   std::chrono::duration<double>(deadline > 0 ? deadline : 0));
  for (PollBackoff backoff;; backoff.pause()) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t r = ncclCommGetAsyncError(comm, &state);
    if (r != ncclSuccess) return r;
    if (state != ncclInProgress) return state;
    if (deadline > 0 && Clock::now() >= end) return ncclInProgress;
  }
}

// NCCL's own error on a communicator: ncclSuccess while healthy (idle or with work in progress), else the failed
// query's result or the error state.
ncclResult_t own_error(ncclComm_t comm) {
  ncclResult_t state = ncclSuccess;
  const ncclResult_t r = ncclCommGetAsyncError(comm, &state);
  if (r != ncclSuccess) return r;
  return state == ncclInProgress ? ncclSuccess : state;
}

// How long an init or a split may take before it is given up (its communicators aborted, an error naming the
// bound): a process that never joins (it failed before, or was never started) must not leave the others waiting.
constexpr double kSetupSeconds = 300;

// After a group of non-blocking inits or splits: `r` (the calls' and ncclGroupEnd's result; ncclInProgress is not a
// failure) and then every new communicator's settled state; ncclInProgress when one did not settle within
// kSetupSeconds.
ncclResult_t settle_all(ncclResult_t r, const std::vector<ncclComm_t>& comms) {
  if (r != ncclSuccess && r != ncclInProgress) return r;
  for (ncclComm_t c : comms)
    if (c != nullptr) {
      const ncclResult_t state = settle(c, kSetupSeconds);
      if (state != ncclSuccess) return state;
    }
  return ncclSuccess;
}

// Why an init or a split failed, for its error line: NCCL's error, or the setup bound passed.
std::string setup_failure(ncclResult_t r, ncclComm_t comm) {
  if (r == ncclInProgress)
    return fmt::format("it did not finish within {} s (a process that never joined?); its communicators were aborted",
                       kSetupSeconds);
  return fmt::format("{} ({})", ncclGetErrorString(r), last_error_text(comm));
}

// Checks a process's own list of GPUs: each exists, none twice, one stream each. One line naming the device.
void check_local_devices(const std::vector<int>& devices, const std::vector<void*>& streams) {
  if (devices.empty()) TG_THROW("NCCL communicator: no GPU listed");
  if (streams.size() != devices.size())
    TG_THROW("NCCL communicator: {} streams for {} GPUs ({})", streams.size(), devices.size(), device_list(devices));
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    cudaGetLastError();  // clear the error so that later CUDA calls do not report it again
    TG_THROW("NCCL communicator on cuda:{}: no CUDA device is available (cudaGetDeviceCount: {})", devices[0],
             e != cudaSuccess ? fmt::format("{}: {}", cudaGetErrorName(e), cudaGetErrorString(e))
                              : std::string("0 devices"));
  }
  for (size_t k = 0; k < devices.size(); ++k) {
    if (devices[k] < 0 || devices[k] >= count)
      TG_THROW("NCCL communicator on cuda:{}: no such device ({} CUDA devices: cuda:0..cuda:{})", devices[k], count,
               count - 1);
    for (size_t j = 0; j < k; ++j)
      if (devices[j] == devices[k])
        TG_THROW("NCCL communicator: cuda:{} is listed twice ({}): one NCCL rank per GPU", devices[k],
                 device_list(devices));
  }
}

// Wraps initialised NCCL communicators; on a failure aborts every one not yet owned by a wrapper.
std::vector<std::unique_ptr<NcclCommunicator>> wrap(std::vector<ncclComm_t>& comms, int first_rank, int size,
                                                    const std::vector<int>& devices,
                                                    const std::vector<void*>& streams) {
  std::vector<std::unique_ptr<NcclCommunicator>> out;
  size_t k = 0;
  try {
    for (; k < comms.size(); ++k)
      out.push_back(
          std::make_unique<NcclCommunicator>(comms[k], first_rank + static_cast<int>(k), size, devices[k], streams[k]));
  } catch (...) {
    for (auto& c : out) c->abort();
    for (; k < comms.size(); ++k) ncclCommAbort(comms[k]);
    throw;
  }
  return out;
}

// One mutex per GPU of this process, shared by the gates of every communicator on it: NCCL calls on independent
// communicators of one device must not run in parallel from several threads either (NCCL's thread-safety rules), and
// an abort from another thread is such a call.
std::shared_ptr<AbortGate::Mutex> device_mutex(int device) {
  static std::mutex registry_mutex;
  static std::map<int, std::shared_ptr<AbortGate::Mutex>> registry;
  std::lock_guard<std::mutex> lock(registry_mutex);
  std::shared_ptr<AbortGate::Mutex>& m = registry[device];
  if (!m) m = std::make_shared<AbortGate::Mutex>();
  return m;
}
}  // namespace

NcclCommunicator::NcclCommunicator(ncclComm* comm, int rank, int size, int device, void* stream)
    : rank_(rank), size_(size), device_(device), stream_(stream), gate_(name(), device_mutex(device)) {
  TG_CHECK(comm != nullptr, "NCCL communicator: null ncclComm_t for rank {} on cuda:{}", rank, device);
  TG_CHECK(rank >= 0 && rank < size, "NCCL communicator: rank {} outside [0, {})", rank, size);
  DeviceScope scope(device_);
  void* word = nullptr;
  check_cuda(cudaMalloc(&word, sizeof(int)), "cudaMalloc of the barrier word");
  barrier_word_ = static_cast<int*>(word);
  const cudaError_t e = cudaMemset(barrier_word_, 0, sizeof(int));
  if (e != cudaSuccess) {
    cudaFree(barrier_word_);
    barrier_word_ = nullptr;
    check_cuda(e, "cudaMemset of the barrier word");
  }
  comm_ = comm;  // owned from here on (a constructor that throws leaves it to the caller)
}

// A healthy communicator is finalized (its queued collectives flushed, then ncclCommFinalize; each waited for by polls
// with the gate free between them, at most kTeardownSeconds each) and destroyed; a failed one, or one whose finalize
// does not settle in time, is aborted. An abort from another thread may come at any point of the waits (it then does
// the teardown: ncclCommAbort); the last step goes through the gate's abort, so the two never both run.
NcclCommunicator::~NcclCommunicator() {
  DeviceScope scope(device_, /*best_effort=*/true);
  if (comm_ != nullptr) {
    try {
      // finalize_nccl_communicators may have started the finalize (and waited for it, or given up): a second
      // ncclCommFinalize would be refused and mark the communicator failed.
      if (!finalized_ && (finalize_started_ || start_finalize(kTeardownSeconds)))
        finalized_ = settled_ok(kTeardownSeconds);
    } catch (const Error&) {  // aborted meanwhile (its action is the teardown), or a failed poll: abort below
    }
    gate_.abort(
        [&] {
          if (finalized_)
            ncclCommDestroy(comm_);
          else
            ncclCommAbort(comm_);
        },
        "destroyed");
    gate_.settle_abort();  // an abort left to the gate's thread has run before anything it uses goes
  }
  if (barrier_word_ != nullptr) cudaFree(barrier_word_);
}

// Whether NCCL's state on this communicator left ncclInProgress within `seconds` as ncclSuccess, polled with the gate
// free between polls; throws once aborted.
bool NcclCommunicator::settled_ok(double seconds) {
  ncclResult_t state = ncclInProgress;
  const bool done = gate_.wait_until(
      [&] {
        if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess) state = ncclInternalError;
        return state != ncclInProgress;
      },
      seconds);
  return done && state == ncclSuccess;
}

// Whether the communicator is healthy, its queued work settled (at most `seconds`, the gate free between polls) and
// ncclCommFinalize started (inside the gate); the caller then waits for it to settle.
bool NcclCommunicator::start_finalize(double seconds) {
  if (failed_ || !settled_ok(seconds)) return false;
  return gate_.call([&] {
    DeviceScope scope(device_, /*best_effort=*/true);
    const ncclResult_t f = ncclCommFinalize(comm_);
    finalize_started_ = true;
    return f == ncclSuccess || f == ncclInProgress;
  });
}

void* NcclCommunicator::use_stream(void* stream) {
  void* previous = stream_;
  stream_ = stream;
  return previous;
}

std::string NcclCommunicator::name() const {
  return fmt::format("nccl (rank {} of {}, cuda:{})", rank_, size_, device_);
}

bool NcclCommunicator::supports(DType dtype, ReduceOp op) const {
  return reduce_supported(dtype, op) || (dtype == DType::kBf16 && op == ReduceOp::kSum);
}

void NcclCommunicator::check_nccl(int result, const char* what) {
  if (result == ncclSuccess) return;
  failed_ = true;
  TG_THROW("{}: {} failed: {} ({})", name(), what, ncclGetErrorString(static_cast<ncclResult_t>(result)),
           last_error_text(comm_));
}

void NcclCommunicator::check_cuda(int result, const char* what) {
  if (result == cudaSuccess) return;
  const cudaError_t e = static_cast<cudaError_t>(result);
  failed_ = true;
  TG_THROW("{}: {} failed: {} ({})", name(), what, cudaGetErrorName(e), cudaGetErrorString(e));
}

void NcclCommunicator::check_usable() {
  gate_.call([] {});  // throws naming the reason once aborted
}

// One NCCL call on this communicator, inside the gate; one left in progress is polled to its end with the gate free
// between polls.
void NcclCommunicator::enqueue(const char* what, const std::function<int()>& call) {
  const int r = gate_.call([&] {
    DeviceScope scope(device_);
    return call();
  });
  if (r == ncclInProgress)
    gate_.wait_until([&] {
      ncclResult_t state = ncclSuccess;
      check_nccl(ncclCommGetAsyncError(comm_, &state), "ncclCommGetAsyncError");
      if (state == ncclInProgress) return false;
      check_nccl(state, what);
      return true;
    });
  else
    check_nccl(r, what);
}

void NcclCommunicator::check_device(Device device) const {
  if (device.is_cpu() || device.index != device_)  // name() formats a string: only on failure
    TG_THROW("{}: buffers on {} are not supported (device memory of cuda:{} only)", name(), device.str(), device_);
}

namespace {
// The pointer itself must be device (or managed) memory of `device`: a host pointer passed as a device buffer
// would make NCCL fault instead of failing cleanly.
void check_pointer(const NcclCommunicator& c, const void* p, int device, const char* what) {
  cudaPointerAttributes attr{};
  const cudaError_t e = cudaPointerGetAttributes(&attr, p);
  if (e != cudaSuccess) {
    cudaGetLastError();
    TG_THROW("{}: cannot inspect the {} pointer {}: {}", c.name(), what, p, cudaGetErrorString(e));
  }
  if (attr.type == cudaMemoryTypeManaged) return;
  if (attr.type != cudaMemoryTypeDevice)
    TG_THROW("{}: the {} buffer {} is host memory, not memory of cuda:{}", c.name(), what, p, device);
  if (attr.device != device)
    TG_THROW("{}: the {} buffer {} is memory of cuda:{}, not of cuda:{}", c.name(), what, p, attr.device, device);
}
}  // namespace

void NcclCommunicator::allreduce_impl(void* buffer, int64_t count, DType dtype, ReduceOp op, Device device) {
  check_usable();
  check_device(device);
  if (count == 0) return;
  check_pointer(*this, buffer, device_, "all-reduce");
  enqueue("ncclAllReduce", [&] {
    return ncclAllReduce(buffer, buffer, static_cast<size_t>(count), nccl_type(dtype),
                         op == ReduceOp::kSum ? ncclSum : ncclMax, comm_, static_cast<cudaStream_t>(stream_));
  });
}

void NcclCommunicator::reduce_scatter_impl(const void* send, void* recv, int64_t count, DType dtype, ReduceOp op,
                                           Device device) {
  check_usable();
  check_device(device);
  if (count == 0) return;
  check_pointer(*this, send, device_, "reduce-scatter send");
  check_pointer(*this, recv, device_, "reduce-scatter receive");
  // In place when recv == send + rank * count elements (NCCL's rule; the base's contract is the same).
  enqueue("ncclReduceScatter", [&] {
    return ncclReduceScatter(send, recv, static_cast<size_t>(count), nccl_type(dtype),
                             op == ReduceOp::kSum ? ncclSum : ncclMax, comm_, static_cast<cudaStream_t>(stream_));
  });
}

void NcclCommunicator::allgather_impl(const void* send, void* recv, size_t send_bytes, Device device) {
  check_usable();
  check_device(device);
  if (send_bytes == 0) return;
  check_pointer(*this, send, device_, "all-gather send");
  check_pointer(*this, recv, device_, "all-gather receive");
  // In place when send == recv + rank * send_bytes (NCCL's rule; the base's contract is the same).
  enqueue("ncclAllGather",
          [&] { return ncclAllGather(send, recv, send_bytes, ncclUint8, comm_, static_cast<cudaStream_t>(stream_)); });
}

void NcclCommunicator::broadcast_impl(void* buffer, size_t bytes, int root, Device device) {
  check_usable();
  check_device(device);
  if (bytes == 0) return;
  check_pointer(*this, buffer, device_, "broadcast");
  enqueue("ncclBroadcast", [&] {
    return ncclBroadcast(buffer, buffer, bytes, ncclUint8, root, comm_, static_cast<cudaStream_t>(stream_));
  });
}

void NcclCommunicator::barrier_impl() {
  // Max keeps the word at 0 however often it runs.
  enqueue("ncclAllReduce (barrier)", [&] {
    return ncclAllReduce(barrier_word_, barrier_word_, 1, ncclInt32, ncclMax, comm_,
                         static_cast<cudaStream_t>(stream_));
  });
  synchronize();
}

std::unique_ptr<Communicator> NcclCommunicator::split_impl(int color, int key) {
  auto split = split_nccl_communicators({this}, {color}, {key});
  return std::move(split[0]);
}

void NcclCommunicator::synchronize() {
  gate_.wait_until([&] {
    DeviceScope scope(device_);
    const cudaError_t e = cudaStreamQuery(static_cast<cudaStream_t>(stream_));
    if (e == cudaSuccess) return true;
    if (e != cudaErrorNotReady) check_cuda(e, "cudaStreamQuery (synchronize)");
    ncclResult_t async = ncclSuccess;
    check_nccl(ncclCommGetAsyncError(comm_, &async), "ncclCommGetAsyncError");
    if (async != ncclSuccess && async != ncclInProgress) {
      failed_ = true;
      TG_THROW("{}: a collective failed while waiting for the stream: {} ({})", name(), ncclGetErrorString(async),
               last_error_text(comm_));
    }
    return false;
  });
}

// Never throws (a failed replica aborts every communicator in turn): the device is set best-effort, and
// ncclCommAbort runs whatever cudaSetDevice said.
void NcclCommunicator::abort(const std::string& why) noexcept {
  if (comm_ == nullptr) return;
  try {
    gate_.abort(
        [&] {
          DeviceScope scope(device_, /*best_effort=*/true);
          ncclCommAbort(comm_);
        },
        why);
  } catch (...) {  // the gate's own bookkeeping (a string copy) failing: nothing left to do
  }
}

std::string NcclCommunicator::async_error() noexcept {
  if (comm_ == nullptr || gate_.aborted()) return {};
  try {
    return gate_.call([&]() -> std::string {
      const ncclResult_t bad = own_error(comm_);
      if (bad == ncclSuccess) return {};
      return fmt::format("{}: NCCL reports an error of its own: {} ({})", name(), ncclGetErrorString(bad),
                         last_error_text(comm_));
    });
  } catch (...) {  // aborted meanwhile (the gate throws), or formatting failed: nothing to report
    return {};
  }
}

void finalize_nccl_communicators(const std::vector<NcclCommunicator*>& comms, double seconds) {
  // Finalize every healthy one first (non-blocking: returns at once), then wait for all: one communicator's finalize
  // may wait for its peers' (NCCL: it synchronises with the ranks still using shared resources), and several of the
  // ranks may be this thread's. Every wait polls with the gate free between polls: an abort gets in.
  std::vector<NcclCommunicator*> started;
  for (NcclCommunicator* c : comms) {
    if (c == nullptr || c->comm_ == nullptr || c->finalize_started_) continue;
    try {
      if (c->start_finalize(seconds)) started.push_back(c);
    } catch (const Error&) {  // aborted meanwhile: its teardown is done
    }
  }
  for (NcclCommunicator* c : started) {
    try {
      c->finalized_ = c->settled_ok(seconds);
    } catch (const Error&) {
    }
  }
}

namespace {
// Ranks first_rank + k of a group of `size` on devices[k], in one NCCL group call, non-blocking, settled.
ncclResult_t init_ranks(std::vector<ncclComm_t>& comms, const std::vector<int>& devices, int size,
                        const ncclUniqueId& id, int first_rank) {
  ncclResult_t r = ncclGroupStart();
  if (r != ncclSuccess) return r;
  int previous = -1;
  if (cudaGetDevice(&previous) != cudaSuccess) previous = -1;
  for (size_t k = 0; k < devices.size(); ++k) {
    cudaSetDevice(devices[k]);
    ncclConfig_t config = nonblocking_config();
    // Inside the group the result only says whether the call was queued; ncclGroupEnd reports the init.
    const ncclResult_t rk = ncclCommInitRankConfig(&comms[k], size, id, first_rank + static_cast<int>(k), &config);
    if (rk != ncclSuccess && rk != ncclInProgress && r == ncclSuccess) r = rk;
  }
  const ncclResult_t end = ncclGroupEnd();
  if (r == ncclSuccess) r = end;
  if (previous >= 0) cudaSetDevice(previous);
  return settle_all(r, comms);
}
}  // namespace

std::vector<std::unique_ptr<NcclCommunicator>> make_nccl_communicators(const std::vector<int>& devices,
                                                                       const std::vector<void*>& streams) {
  check_local_devices(devices, streams);
  // ncclCommInitAll's work (an id, then every rank in one group) with non-blocking communicators.
  const int n = static_cast<int>(devices.size());
  std::vector<ncclComm_t> comms(devices.size(), nullptr);
  ncclUniqueId id;
  ncclResult_t r = ncclGetUniqueId(&id);
  if (r == ncclSuccess) r = init_ranks(comms, devices, n, id, 0);
  if (r != ncclSuccess) {
    const std::string why = setup_failure(r, nullptr);
    for (ncclComm_t c : comms)
      if (c != nullptr) ncclCommAbort(c);
    TG_THROW("NCCL communicator: initialising a group over {} failed: {}", device_list(devices), why);
  }
  return wrap(comms, 0, n, devices, streams);
}

std::vector<std::unique_ptr<NcclCommunicator>> make_nccl_communicators_across_processes(
    Communicator& host, const std::vector<int>& devices, const std::vector<void*>& streams) {
  const int P = host.size(), p = host.rank();
  // Every process learns every process's GPU count and whether its GPUs are usable, so that all fail together.
  std::string local_error;
  try {
    check_local_devices(devices, streams);
  } catch (const Error& e) {
    local_error = e.what();
  }
  const int32_t mine[2] = {static_cast<int32_t>(devices.size()), local_error.empty() ? 1 : 0};
  std::vector<int32_t> all(2 * static_cast<size_t>(P));
  host.allgather(mine, all.data(), sizeof(mine));
  // The same message on every process first (a configuration error), then this process's own, then the others'.
  for (int q = 1; q < P; ++q)
    if (all[2 * q] != all[0])
      TG_THROW(
          "NCCL communicator across processes: process 0 brings {} GPUs, process {} brings {}: every process "
          "must bring the same number (global rank = process rank * local GPUs + local index)",
          all[0], q, all[2 * q]);
  if (!local_error.empty()) throw Error(local_error);
  for (int q = 0; q < P; ++q)
    if (all[2 * q + 1] == 0)
      TG_THROW(
          "NCCL communicator across processes: process {} of {} cannot use its GPUs (its own error says why); "
          "no group was formed",
          q, P);
  // Rank 0 makes the unique id and broadcasts it, with whether that worked.
  struct {
    int32_t ok;
    ncclUniqueId id;
  } boot{};
  std::string id_error;
  if (p == 0) {
    const ncclResult_t r = ncclGetUniqueId(&boot.id);
    boot.ok = r == ncclSuccess ? 1 : 0;
    if (r != ncclSuccess) id_error = fmt::format("{} ({})", ncclGetErrorString(r), last_error_text(nullptr));
  }
  host.broadcast(&boot, sizeof(boot), 0);
  if (!boot.ok)
    TG_THROW("NCCL communicator across processes: ncclGetUniqueId failed on process 0{}",
             id_error.empty() ? std::string() : ": " + id_error);
  const int L = static_cast<int>(devices.size()), N = P * L;
  std::vector<ncclComm_t> comms(devices.size(), nullptr);
  const ncclResult_t r = init_ranks(comms, devices, N, boot.id, p * L);
  if (r != ncclSuccess) {
    const std::string why = setup_failure(r, nullptr);
    for (ncclComm_t c : comms)
      if (c != nullptr) ncclCommAbort(c);
    TG_THROW("NCCL communicator across processes: initialising ranks {}..{} of {} on {} failed: {}", p * L,
             p * L + L - 1, N, device_list(devices), why);
  }
  return wrap(comms, p * L, N, devices, streams);
}

std::vector<std::unique_ptr<NcclCommunicator>> split_nccl_communicators(const std::vector<NcclCommunicator*>& parents,
                                                                        const std::vector<int>& colors,
                                                                        const std::vector<int>& keys) {
  TG_CHECK(colors.size() == parents.size() && keys.size() == parents.size(),
           "NCCL split: {} communicators, {} colors, {} keys", parents.size(), colors.size(), keys.size());
  for (NcclCommunicator* p : parents) {
    TG_CHECK(p != nullptr, "NCCL split: a null communicator");
    p->check_usable();
  }
  std::vector<ncclComm_t> comms(parents.size(), nullptr);
  int previous = -1;
  if (cudaGetDevice(&previous) != cudaSuccess) previous = -1;
  // Several ranks of one thread must split inside one group call (each split waits for every rank of the parent).
  ncclResult_t r = ncclGroupStart();
  if (r == ncclSuccess) {
    for (size_t k = 0; k < parents.size(); ++k) {
      cudaSetDevice(parents[k]->device_);
      ncclConfig_t config = nonblocking_config();
      const ncclResult_t rk =
          ncclCommSplit(parents[k]->comm_, colors[k] < 0 ? NCCL_SPLIT_NOCOLOR : colors[k], keys[k], &comms[k], &config);
      if (rk != ncclSuccess && rk != ncclInProgress && r == ncclSuccess) r = rk;
    }
    const ncclResult_t end = ncclGroupEnd();
    if (r == ncclSuccess) r = end;
  }
  if (previous >= 0) cudaSetDevice(previous);
  // The parents are non-blocking too: each settles with its split before it takes another call. NCCL writes the
  // new handles when the split completes, so they are read only after the parents settled (a handle still null
  // then is a color < 0).
  std::vector<ncclComm_t> parent_comms;
  for (NcclCommunicator* p : parents) parent_comms.push_back(p->comm_);
  r = settle_all(r, parent_comms);
  r = settle_all(r, comms);
  if (r != ncclSuccess) {
    const std::string why = setup_failure(r, parents.empty() ? nullptr : parents[0]->comm_);
    for (ncclComm_t c : comms)
      if (c != nullptr) ncclCommAbort(c);
    for (NcclCommunicator* p : parents) p->failed_ = true;
    TG_THROW("NCCL split of {}{}: ncclCommSplit failed: {}", parents.empty() ? "" : parents[0]->name(),
             parents.size() > 1 ? fmt::format(" and {} more", parents.size() - 1) : "", why);
  }
  std::vector<std::unique_ptr<NcclCommunicator>> out(parents.size());
  size_t k = 0;
  try {
    for (; k < parents.size(); ++k) {
      if (comms[k] == nullptr) continue;  // color < 0: no new communicator
      int rank = 0, size = 0;
      if (ncclCommUserRank(comms[k], &rank) != ncclSuccess || ncclCommCount(comms[k], &size) != ncclSuccess)
        TG_THROW("NCCL split of {}: cannot read the new communicator's rank and size", parents[k]->name());
      out[k] = std::make_unique<NcclCommunicator>(comms[k], rank, size, parents[k]->device_, parents[k]->stream_);
    }
  } catch (...) {
    for (auto& c : out)
      if (c) c->abort();
    for (; k < comms.size(); ++k)
      if (comms[k] != nullptr) ncclCommAbort(comms[k]);
    throw;
  }
  return out;
}

}  // namespace tg
