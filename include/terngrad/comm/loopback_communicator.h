// LoopbackCommunicator: R ranks inside one process whose buffers are memory of one device, one thread per rank: R
// replicas sharing one GPU, where NCCL allows one rank per device (a one-GPU machine exercising the device exchange:
// the side stream, use_stream, the abort gate and the health watch), or host memory (the same code on the CPU).
// Collectives are *stream-ordered* as NcclCommunicator's: each rank's part is queued on its own stream (its
// LoopbackDevice: loopback_device.h) and the call returns once queued; the ranks meet on the host at each phase
// (entered, reduced, done) and each stream waits for the others' marks of the phase before it reads their memory, and
// for their "done" before it goes on (so a rank's later work never overwrites memory a peer still reads).
//
// Results: allreduce is a reduce-scatter then an all-gather in place: rank k reduces slice k of every rank's buffer in
// rank order ((x0 + x1) + x2) + ... into its own buffer, then every rank copies every other slice from its owner. So
// every rank gets the same bits, and the same as ThreadCommunicator's (the same slices, order and rounding);
// reduce_scatter likewise per block; allgather and broadcast are copies; barrier waits for the stream (as NCCL's).
// f32/i8/i32 sum and max, f16 and bf16 sum; host buffers for a host device, the GPU's own memory for a CUDA one.
//
// Abort: every device call of a rank runs inside its AbortGate (abort_gate.h, as NcclCommunicator's); abort(why), from
// any thread, fails the group: ranks waiting for the others to enter a collective throw naming the aborting rank and
// why, and every later call throws. A collective every rank has entered completes its host side on all of them (the
// host device reads the peers' memory between the phases), unless a rank leaves it by an error, which frees the others
// once all have arrived or left. The destruction of a rank's communicator fails its group too ("rank k's communicator
// was destroyed"): the health watch (own_error: async_error()) reports that, or a device error on the rank's stream,
// so ReplicaGroups aborts every group of the process (loopback_replica_groups.cc). Splits are independent groups (an
// abort does not reach them; ReplicaGroups aborts each).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "terngrad/comm/abort_gate.h"
#include "terngrad/comm/communicator.h"
#include "terngrad/comm/loopback_device.h"

namespace tg {

namespace comm_detail {
struct CollectiveCall;
}

class LoopbackCommunicator final : public Communicator {
 public:
  struct Group;  // the shared state (loopback_communicator.cc)

  LoopbackCommunicator(std::shared_ptr<Group> group, int rank, std::unique_ptr<LoopbackDevice> device);
  ~LoopbackCommunicator() override;  // fails the group: "rank k's communicator was destroyed"
  LoopbackCommunicator(const LoopbackCommunicator&) = delete;
  LoopbackCommunicator& operator=(const LoopbackCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override;                       // "loopback (rank 1 of 2, cuda:0)"
  bool supports(DType dtype, ReduceOp op) const override;  // reduce_supported() and bf16 sum
  void* use_stream(void* stream) override { return device_->use_stream(stream); }
  Device device() const { return device_->device(); }

  // Waits (polling, the gate free between polls) until everything queued on this rank's stream has finished.
  void synchronize();
  // Fails the group (see the file comment), from any thread; returns within AbortGate's bound. The first reason given
  // on any rank is the one the group reports.
  void abort(const std::string& why = "abort() was called") noexcept;
  // For the health watch, from any thread: "" while healthy (or aborted already), else one line: the group failed
  // without this rank's abort (a peer destroyed or aborted), or the device reports an error on this rank's stream.
  std::string async_error() noexcept;

 protected:
#define TG_DECLARE_COMM_IMPL(ret, name, params) ret name params override;
  TG_COMMUNICATOR_IMPLS(TG_DECLARE_COMM_IMPL)
#undef TG_DECLARE_COMM_IMPL

 private:
  friend std::vector<std::unique_ptr<LoopbackCommunicator>> split_loopback_communicators(
      const std::vector<LoopbackCommunicator*>& parents, const std::vector<int>& colors, const std::vector<int>& keys);
  using Call = comm_detail::CollectiveCall;
  void check_buffer_device(Device device) const;
  // The phases of a collective (see the .cc).
  void enter(const Call& call);
  void meet(const Call& call, bool entering = false);
  void leave_after_error(const std::string& why) noexcept;
  // Runs a collective's work and meetings after enter (an error: the rank leaves, see the .cc), then queues the wait
  // for the peers' "done".
  template <typename Body>
  void run_entered(Body&& body);
  // Queued on this rank's stream: wait for every other rank's `mark`.
  void wait_for_peers(LoopbackDevice::Mark mark);

  std::shared_ptr<Group> group_;
  int rank_ = 0;
  int size_ = 1;
  LoopbackDevice* device_ = nullptr;  // owned by the group (a peer may wait on its marks after this rank returned)
  bool counted_out_ = false;          // this rank left the collective in progress (the owner thread's)
  AbortGate gate_;
};

// One group of ranks devices.size() (1 to LoopbackDevice::kMaxSources), rank k on devices[k] (all of one device).
std::vector<std::unique_ptr<LoopbackCommunicator>> make_loopback_communicators(
    std::vector<std::unique_ptr<LoopbackDevice>> devices);

// Splits every rank of one group from one thread (the set-up's, before any rank's thread drives them): result k is
// parents[k]'s new communicator for colors[k]/keys[k] (nullptr for a color < 0), ranked by (key, rank); the parents
// must be all the ranks of one group. The same groups split() forms collectively.
std::vector<std::unique_ptr<LoopbackCommunicator>> split_loopback_communicators(
    const std::vector<LoopbackCommunicator*>& parents, const std::vector<int>& colors, const std::vector<int>& keys);

}  // namespace tg
