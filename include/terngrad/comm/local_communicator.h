// LocalCommunicator: N workers inside one process. A LocalGroup is the meeting point; each participant
// (rank 0..N-1) holds its own LocalCommunicator and calls every collective from its OWN thread, in the same
// order as the others (as MPI ranks would). The participants meet at the group's barrier, the reduction is
// split into N slices (participant r reduces slice r over all inputs, in rank order, so every rank gets the
// same bits), then each copies the result. Calling a collective for all ranks from one thread deadlocks;
// LocalGroup::run_all runs one function per rank on N threads for that purpose.
//
// Errors: a participant that throws inside run_all aborts the group; the others, waiting at a barrier,
// throw "local group aborted" and run_all rethrows the first error. Mismatched arguments between ranks
// (count, dtype, op, bytes, root) are errors on every rank.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "terngrad/comm/communicator.h"

namespace tg {

class LocalCommunicator;

class LocalGroup {
 public:
  explicit LocalGroup(int size);
  ~LocalGroup();
  LocalGroup(const LocalGroup&) = delete;
  LocalGroup& operator=(const LocalGroup&) = delete;

  int size() const { return size_; }
  // Participant `rank`'s communicator (owned by the group; valid for its life).
  LocalCommunicator& communicator(int rank);

  // Runs fn(communicator(r)) for r = 0..N-1 on N threads and waits; rethrows the first exception.
  void run_all(const std::function<void(LocalCommunicator&)>& fn);

  // Wakes every waiting participant with an error; later collectives fail until reset_abort().
  void abort(const std::string& reason);
  void reset_abort();

 private:
  friend class LocalCommunicator;
  struct Post {  // what one participant brings to the current collective
    const void* send = nullptr;
    void* recv = nullptr;
    int64_t count = 0;
    size_t bytes = 0;
    DType dtype = DType::F32;
    ReduceOp op = ReduceOp::Sum;
    int root = 0;
    int kind = 0;
  };
  // Blocks until all participants arrive; the last one to arrive runs `last` first (under the lock).
  void arrive_and_wait(const std::function<void()>& last);

  const int size_;
  std::vector<std::unique_ptr<LocalCommunicator>> comms_;
  std::vector<Post> posts_;
  std::vector<uint8_t> scratch_;
  std::string mismatch_;  // set by the last arriver when the posts disagree
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  bool aborted_ = false;
  std::string abort_reason_;
};

class LocalCommunicator final : public Communicator {
 public:
  LocalCommunicator(LocalGroup& group, int rank) : group_(group), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return group_.size(); }
  std::string name() const override;

 protected:
  void allreduce_impl(void* buffer, int64_t count, DType dtype, ReduceOp op, Device device) override;
  void allgather_impl(const void* send, void* recv, size_t send_bytes, Device device) override;
  void broadcast_impl(void* buffer, size_t bytes, int root, Device device) override;
  void barrier_impl() override;

 private:
  void post_and_check(const LocalGroup::Post& p);
  LocalGroup& group_;
  int rank_;
};

}  // namespace tg
