// MpiCommunicator: one worker per MPI process (Open MPI 4.1), host buffers. Every collective is started
// non-blocking and waited for with MPI_Test/MPI_Testsome plus a backoff (a 200 us spin, then nanosleep from
// 10 us doubling to a cap, 250 us by default; the environment variable TG_MPI_POLL_CAP_US overrides it), so
// a communication thread waiting on a slow peer or link leaves the cores to the compute threads instead of
// busy-polling as a blocking Open MPI collective does (a waiting thread uses ~6% of a core, not 100%).
// All-reduces of >= 256 KiB and all-gathers of >= 256 KiB in all run as a pipelined ring over
// MPI_Isend/MPI_Irecv (reduce-scatter + all-gather; 4 MiB segments, 4 in flight each way; the reduction of
// a received segment overlaps the transfer of the next): Open MPI's MPI_Iallreduce (libnbc) sends one
// direction at a time between 2 ranks and reached ~40% of the blocking call's bandwidth. Smaller ones go
// through MPI_Iallreduce/MPI_Iallgather. MpiEnvironment raises Open MPI's TCP eager limit above the ring's
// segment size (unless the user set it): with rendezvous messages the two directions of an exchange often
// ran one after the other (see the .cc). Reductions: f32/i32/i8 sum and max (integer sums wrap), f16 sum
// added in fp32 and rounded to fp16 after each pairwise combination (ring and MPI user op alike, through
// src/comm/reduce_into.h); every rank ends with the same bits; bf16 is refused (supports()).
// Broadcast: MPI_Ibcast; barrier: MPI_Ibarrier. Every MPI return code is checked
// with TG_MPI_CHECK (the call, its error string, file and line). The ring's scratch (4 segments, allocated
// on first use) and request arrays belong to the communicator: no allocation per call in steady state.
// MpiEnvironment initialises MPI once per process (and finalises it if it did the initialising);
// NcclCommunicator::create_across_processes bootstraps a GPU group through an MpiCommunicator.
#pragma once

#include <memory>
#include <string>

#include "terngrad/comm/communicator.h"

namespace tg {

// Throws tg::Error "MPI error: <call> returned <MPI error string> at file:line" on failure.
#define TG_MPI_CHECK(call) TG_CHECK_CALL("MPI", call, status_ == 0 /* MPI_SUCCESS */, ::tg::mpi_error_string(status_))
std::string mpi_error_string(int code);

// True when this process was started by an MPI launcher (OMPI_COMM_WORLD_SIZE / PMI_SIZE / PMIX_RANK set).
bool launched_by_mpi();

class MpiEnvironment {
 public:
  // Initialises MPI (MPI_THREAD_SERIALIZED) unless it already is; finalises in the destructor if it did.
  MpiEnvironment();
  ~MpiEnvironment();
  MpiEnvironment(const MpiEnvironment&) = delete;
  MpiEnvironment& operator=(const MpiEnvironment&) = delete;
  int world_rank() const;
  int world_size() const;
  // Ends every process of the job with `code` (MPI_Abort): what a failing process does so that the others,
  // waiting in a collective, do not wait forever.
  [[noreturn]] static void abort_all(int code);

 private:
  bool owns_ = false;
};

class MpiCommunicator final : public Communicator {
 public:
  // A communicator over MPI_COMM_WORLD (duplicated, so our traffic never mixes with other users').
  // MPI must be initialised (MpiEnvironment).
  MpiCommunicator();
  ~MpiCommunicator() override;
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override;

 protected:
  void allreduce_impl(void* buffer, int64_t count, DType dtype, ReduceOp op, Device device) override;
  void allgather_impl(const void* send, void* recv, size_t send_bytes, Device device) override;
  void broadcast_impl(void* buffer, size_t bytes, int root, Device device) override;
  void barrier_impl() override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace tg
