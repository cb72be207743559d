// ThreadCommunicator: R ranks inside one process, one thread each (e.g. one per CPU replica), host memory.
// make_thread_communicators(R) returns the R communicators of one group; they share a state (a barrier, each
// rank's posted call, a scratch buffer), and rank k must be driven by one thread at a time, as every
// communicator's collectives are posted in the same order on every rank.
//
// Collectives, all through shared memory:
//   allreduce: every rank posts its buffer; after an entry barrier rank k reduces slice k of the elements over
//     all ranks' buffers *in rank order* ((x0 + x1) + x2) + ... into the shared scratch; after a second barrier
//     every rank copies the scratch into its buffer. So every rank gets the same bits, whatever the thread
//     timing, and the sum's order is that of a plain loop over ranks. Reductions (src/comm/reduce_into.h):
//     f32/i8/i32 sum and max, f16 and bf16 sum (fp32 add, rounded to the 16-bit type after each combination).
//   reduce_scatter: rank k reduces block k of every rank's send buffer over the ranks in rank order, exactly as
//     allreduce adds (so reduce_scatter followed by allgather gives allreduce's bits), through a 64 KiB chunk
//     of its own into its recv (in place allowed), then waits until the others have read its send buffer.
//   allgather: every rank copies every rank's send block into its own recv (in place: its own block stays);
//     broadcast: every rank copies the root's buffer; barrier: the entry barrier alone.
//   split(color, key): the last rank to arrive builds the new groups (one per color >= 0, ranked by (key,
//     rank)); each rank takes its communicator of its new group.
// The scratch grows to the largest all-reduce's size (allocated by the last rank to arrive, under the lock):
// no allocation in steady state. Waiting spins for a few microseconds (a collective whose peers are already
// there costs no sleep) and then blocks on a condition variable, so waiting never holds a core for long.
//
// Errors: every rank's call is checked against the others' (kind, count, dtype, op, root, bytes); a mismatch
// fails the collective on every rank with an error naming both calls. abort(why) on any rank (its thread
// failed) or the destruction of a rank's communicator fails the group: ranks waiting in a collective, and any
// later call, throw tg::Error naming the aborting rank and why, instead of waiting forever. Once every rank has
// entered a collective it completes on all of them (the copies between barriers touch other ranks' buffers, so
// no rank may leave early), and only later calls fail. An abort reaches the groups split from this one (and
// theirs): a failed replica thread aborting its world group frees replicas waiting in a sub-group too. The
// destruction of a rank's communicator fails its own group only (a parent may go away before its splits).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "terngrad/comm/communicator.h"

namespace tg {

class ThreadCommunicator final : public Communicator {
 public:
  struct Group;  // the shared state (thread_communicator.cc)

  ThreadCommunicator(std::shared_ptr<Group> group, int rank);
  ~ThreadCommunicator() override;  // aborts the group: "rank k's communicator was destroyed"
  ThreadCommunicator(const ThreadCommunicator&) = delete;
  ThreadCommunicator& operator=(const ThreadCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override;                       // "local (rank 2 of 4)"
  bool supports(DType dtype, ReduceOp op) const override;  // reduce_supported() and bf16 sum

  // Fails the group (see the file comment); any thread may call it, any number of times (the first reason
  // is the one reported).
  void abort(const std::string& why);

 protected:
#define TG_DECLARE_COMM_IMPL(ret, name, params) ret name params override;
  TG_COMMUNICATOR_IMPLS(TG_DECLARE_COMM_IMPL)
#undef TG_DECLARE_COMM_IMPL

 private:
  std::shared_ptr<Group> group_;
  int rank_ = 0;
  int size_ = 1;
  std::unique_ptr<uint8_t[]> chunk_;  // reduce_scatter's partial sums (allocated on first use)
};

// The `ranks` communicators of one in-process group, rank k at index k (ranks >= 1).
std::vector<std::unique_ptr<ThreadCommunicator>> make_thread_communicators(int ranks);

}  // namespace tg
