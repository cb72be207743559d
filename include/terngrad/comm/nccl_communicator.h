// NcclCommunicator: one NCCL rank per GPU (CUDA builds only: compiled when TG_HAVE_CUDA). Buffers are device
// memory of the communicator's own GPU; a host buffer or another GPU's is refused with an error naming both
// devices.
//
// Groups: make_nccl_communicators(devices, streams) makes one communicator per GPU of this process
// (ncclCommInitAll: rank k = devices[k]); make_nccl_communicators_across_processes(host, devices, streams) makes
// one group of all processes' GPUs, bootstrapped over an existing host Communicator (an MpiCommunicator: rank 0
// makes the NCCL unique id and broadcasts it): with P processes of L GPUs each the group has P*L ranks and the
// GPU at local index i of process p is global rank p*L + i. Every process must bring the same number of GPUs
// (checked: every process gets the same error otherwise), and no GPU may appear twice in a group.
//
// Collectives: allreduce and reduce_scatter (ncclReduceScatter) f32 sum/max, i8 sum/max, i32 sum/max, f16 sum,
// bf16 sum (NCCL's reduction order, a ring or a tree: every rank gets the same bits, but the sum's order is not
// a plain loop over ranks, and an fp16/bf16 sum is NCCL's); allgather and broadcast of bytes; barrier. In-place
// forms are NCCL's (reduce-scatter recv = send + rank * count, all-gather send = recv + rank * bytes). Each is enqueued
// on the CUDA stream given at construction (or later by use_stream) (a cudaStream_t passed as void*, owned by the
// caller, e.g. the CUDA backend; nullptr = the legacy default stream) and is *stream-ordered*: the call returns once
// the work is queued; later work on that stream sees the result, and the host sees it after synchronize(). barrier() is
// the exception: it waits for the stream (a one-element all-reduce), so every rank has reached it when it returns. The
// byte counters follow the Communicator's model (the base class counts).
//
// Threads: a communicator is driven by one thread at a time, and the communicators of one process's GPUs by
// different threads (one per GPU, as the trainer's device threads are): NCCL documents that one thread issuing
// a collective on two of them in turn may wait forever on the first (its group calls are not exposed here).
// NCCL init failures on one process can leave the others waiting in NCCL's bootstrap; under mpirun the job
// ends when the failing process exits with its error.
//
// Sub-groups: split(color, key) is ncclCommSplit (collective over this communicator's ranks; NCCL_SPLIT_NOCOLOR
// for color < 0); the new communicator uses the parent's GPU and stream. With several GPUs in one thread use
// split_nccl_communicators, which splits them inside one NCCL group call. An abort of the parent does not reach
// its splits (NCCL communicators are independent); abort each (ReplicaGroups::abort does).
//
// Errors: every NCCL and CUDA failure becomes a tg::Error naming the call, the communicator ("nccl (rank 3 of
// 16, cuda:3)"), ncclGetErrorString and ncclGetLastError. synchronize() and barrier() wait by polling the
// stream with a sleeping back-off and ncclCommGetAsyncError, so a peer's failure that NCCL detects (a network
// error, a peer's ncclCommAbort) becomes an error instead of a hang. After any error the communicator is
// aborted (ncclCommAbort) rather than destroyed when it goes away; abort() does that at once, e.g. on the
// surviving ranks of a failed step.
//
// Abort from another thread: the communicators are non-blocking (ncclConfig_t blocking = 0, NCCL's documented way to
// make ncclCommAbort possible at any point): no NCCL call blocks, one that cannot finish at once returns
// ncclInProgress and is polled (ncclCommGetAsyncError) to its end. Every NCCL call and poll of the owner runs inside an
// AbortGate (comm/abort_gate.h), and abort() takes the same gate, so no NCCL call runs on a communicator while it is
// aborted or after. The gates of one GPU's communicators share that GPU's mutex: NCCL allows no parallel calls on
// independent communicators of one device from several threads either (its thread-safety rules). An abort waits for
// the gate at most AbortGate::kAbortWaitSeconds: should an enqueue block longer, the abort is decided at once and its
// ncclCommAbort runs as soon as that call returns, so the caller goes on to the process's other communicators. Every
// wait (a collective in progress, the teardown's flush and finalize) polls with the gate free between polls; an init or
// a split that has not settled after kSetupSeconds (300 s) is aborted with an error naming the bound. Splits happen at
// setup, before an abort can come (ReplicaGroups installs it after).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "terngrad/comm/abort_gate.h"
#include "terngrad/comm/communicator.h"

struct ncclComm;  // nccl.h's communicator (ncclComm_t = ncclComm*): nccl.h stays out of this header

namespace tg {

class NcclCommunicator final : public Communicator {
 public:
  // Takes ownership of an initialised NCCL communicator of `device`; the factories below are the usual way.
  NcclCommunicator(ncclComm* comm, int rank, int size, int device, void* stream);
  ~NcclCommunicator() override;  // ncclCommDestroy, or ncclCommAbort after an error
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override;                       // "nccl (rank 3 of 16, cuda:3)"
  bool supports(DType dtype, ReduceOp op) const override;  // reduce_supported() and bf16 sum
  Device device() const { return Device::cuda(device_); }
  void* stream() const { return stream_; }
  void* use_stream(void* stream) override;  // the stream of later collectives (barrier's and synchronize()'s too)

  // Waits until every collective queued so far on the stream has finished (and everything else on it),
  // throwing on a CUDA error or an asynchronous NCCL error (a failed peer).
  void synchronize();
  // Aborts the NCCL communicator (ncclCommAbort), from any thread: collectives of this rank still running stop, and
  // peers see an error where NCCL can tell them; every later call on this communicator throws naming `why`. Returns
  // within AbortGate::kAbortWaitSeconds (never waits for a collective: the communicator is non-blocking and its waits
  // poll with the gate free between polls); ncclCommAbort runs once, never beside another NCCL call of the GPU.
  void abort(const std::string& why = "abort() was called") noexcept;
  // From any thread (HealthWatch): "" while NCCL reports no error of its own on this communicator (or it is busy in
  // an init, split or finalize, or aborted already), else one line naming it and NCCL's error.
  std::string async_error() noexcept;

 protected:
#define TG_DECLARE_COMM_IMPL(ret, name, params) ret name params override;
  TG_COMMUNICATOR_IMPLS(TG_DECLARE_COMM_IMPL)
#undef TG_DECLARE_COMM_IMPL

 private:
  friend std::vector<std::unique_ptr<NcclCommunicator>> split_nccl_communicators(
      const std::vector<NcclCommunicator*>& parents, const std::vector<int>& colors, const std::vector<int>& keys);
  friend void finalize_nccl_communicators(const std::vector<NcclCommunicator*>& comms, double seconds);

  static constexpr double kTeardownSeconds = 30;  // a finalize that takes longer is given up: abort

  void check_device(Device device) const;  // throws unless device is this communicator's GPU
  void check_usable();                     // throws after abort()
  // One NCCL call (returning an ncclResult_t) inside the gate; polled to its end when it returns ncclInProgress.
  void enqueue(const char* what, const std::function<int()>& call);
  // Turns a failed NCCL result of `what` into a tg::Error (and marks the communicator failed).
  void check_nccl(int result, const char* what);
  bool start_finalize(double seconds);  // see the .cc
  bool settled_ok(double seconds);      // see the .cc
  void check_cuda(int result, const char* what);

  ncclComm* comm_ = nullptr;
  int rank_ = 0;
  int size_ = 1;
  int device_ = 0;
  void* stream_ = nullptr;
  int* barrier_word_ = nullptr;    // one device int: the barrier's all-reduce
  bool failed_ = false;            // an error was seen by the owner: abort, never destroy
  bool finalize_started_ = false;  // ncclCommFinalize was called (NCCL refuses a second one): only settle is left
  bool finalized_ = false;         // the finalize settled: only destroy is left
  AbortGate gate_;                 // the owner's NCCL calls and polls against abort() from any thread
};

// One communicator per listed GPU of this process, rank k on devices[k], collectives on streams[k]
// (streams.size() == devices.size()). Throws naming the device when a GPU is missing or listed twice.
std::vector<std::unique_ptr<NcclCommunicator>> make_nccl_communicators(const std::vector<int>& devices,
                                                                       const std::vector<void*>& streams);

// One group over every process of `host` (a CPU communicator over processes, e.g. MpiCommunicator), each
// contributing its `devices` (the same number in every process): global rank = host.rank() * devices.size() + k.
// Collective over `host`: every process calls it; a failure on one (a missing GPU, unequal counts, no unique
// id) throws on all of them rather than leaving the others waiting.
std::vector<std::unique_ptr<NcclCommunicator>> make_nccl_communicators_across_processes(
    Communicator& host, const std::vector<int>& devices, const std::vector<void*>& streams);

// Before several communicators of this thread go away (ReplicaGroups' teardown): ncclCommFinalize on every healthy
// one first, then waits (polling, at most `seconds` each) for all, so that a finalize waiting for a peer of the same
// process is not left waiting for a destructor that has not run yet; the destructors then only destroy. A
// communicator that fails or does not settle in time is aborted by its destructor.
void finalize_nccl_communicators(const std::vector<NcclCommunicator*>& comms, double seconds = 30);

// Splits several communicators of one process (e.g. one per GPU, driven by this one thread) in one NCCL group
// call: result k is parents[k]'s new communicator for colors[k]/keys[k] (nullptr for a color < 0). Collective
// over the parents' group: every process calls it for all its GPUs.
std::vector<std::unique_ptr<NcclCommunicator>> split_nccl_communicators(const std::vector<NcclCommunicator*>& parents,
                                                                        const std::vector<int>& colors,
                                                                        const std::vector<int>& keys);

}  // namespace tg
