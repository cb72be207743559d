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
// ran one after the other (see the .cc). Reductions: f32/i32/i8 sum and max (integer sums wrap; an f32 max
// with a NaN is NaN), f16 sum
// added in fp32 and rounded to fp16 after each pairwise combination (ring and MPI user op alike, through
// src/comm/reduce_into.h; f32 max and i8 sum also go through our MPI user ops on the small path: Open MPI's
// drop a NaN depending on the operands' order and saturate int8 sums); every rank ends with the same bits; bf16
// is refused (supports()).
// Reduce-scatter: payloads (size() * count elements) of >= 256 KiB run the ring's reduce-scatter half, the same
// code as the all-reduce's, so reduce_scatter followed by allgather gives the large all-reduce's bits: block b is
// reduced along the ring starting at rank b + 1, ((x[b+1] + x[b+2]) + ...) + x[b] (indices mod N), each step
// adding the received partial sum to the local block (out of place, the partial sums between steps go to two
// buffers of one block each, grown on first use and reused). Smaller ones go through MPI_Ireduce_scatter_block
// (Open MPI's order). In-place forms (reduce_scatter recv = send + rank * count, allgather send = recv + rank * bytes)
// are MPI_IN_PLACE or a copy where MPI has no matching form.
// Broadcast: MPI_Ibcast; barrier: MPI_Ibarrier. Every MPI return code is checked
// with TG_MPI_CHECK (the call, its error string, file and line). The ring's scratch (4 segments, allocated
// on first use) and request arrays belong to the communicator: no allocation per call in steady state.
// MpiEnvironment initialises MPI once per process (and finalises it if it did the initialising);
// NcclCommunicator::create_across_processes bootstraps a GPU group through an MpiCommunicator.
//
// Threads: different MpiCommunicators (e.g. the splits of one replica thread each) may be driven by different
// threads at once; one communicator by one thread at a time. MpiEnvironment asks for MPI_THREAD_MULTIPLE; when
// the library provides only MPI_THREAD_SERIALIZED (or TG_MPI_THREAD_LEVEL=serialized asks for it), every MPI
// call of this file holds one process-wide lock, which is cheap because the collectives are non-blocking and
// waited for by polling (the lock is held for one MPI_Test, not for the wait). Creating communicators
// (construction, split, split_shared_memory) is blocking and collective: under the lock, the processes must
// create them from one thread at a time and in the same order (which the set-up code does anyway).
//
// split(color, key): MPI_Comm_split (MPI_UNDEFINED for color < 0); the new communicator has its own ring state.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "terngrad/comm/communicator.h"
#include "terngrad/core/launcher.h"  // launched_by_mpi()

namespace tg {

// Throws tg::Error "MPI error: <call> returned <MPI error string> at file:line" on failure.
#define TG_MPI_CHECK(call) TG_CHECK_CALL("MPI", call, status_ == 0 /* MPI_SUCCESS */, ::tg::mpi_error_string(status_))
std::string mpi_error_string(int code);

class MpiEnvironment {
 public:
  // Initialises MPI (MPI_THREAD_MULTIPLE, or MPI_THREAD_SERIALIZED when TG_MPI_THREAD_LEVEL=serialized) unless
  // it already is; finalises in the destructor if it did. At least MPI_THREAD_SERIALIZED is required.
  MpiEnvironment();
  ~MpiEnvironment();
  MpiEnvironment(const MpiEnvironment&) = delete;
  MpiEnvironment& operator=(const MpiEnvironment&) = delete;
  int world_rank() const;
  int world_size() const;
  // Ends every process of the job with `code` (MPI_Abort): what a failing process does so that the others,
  // waiting in a collective, do not wait forever.
  [[noreturn]] static void abort_all(int code);
  // Whether MPI calls of different threads run concurrently (MPI_THREAD_MULTIPLE provided) rather than one at
  // a time under the process-wide lock. MPI must be initialised.
  static bool thread_multiple();

 private:
  bool owns_ = false;
};

class MpiCommunicator final : public Communicator {
 public:
  // A communicator over MPI_COMM_WORLD (duplicated, so our traffic never mixes with other users').
  // MPI must be initialised (MpiEnvironment).
  MpiCommunicator();
  // Every MPI wait of this process (any communicator, any thread) stops at its next test and throws one line naming
  // the process(es) it waited for and `why` (the progress watchdog's abort: a peer that stopped answering). Once
  // only; the process is then ending.
  static void abort_waits(const std::string& why);
  // Which processes of MPI_COMM_WORLD are alive: each process that calls this sends a word to every other and waits
  // up to `seconds` for theirs; returns the world ranks whose word did not arrive (a stopped process, a machine or
  // link gone), ascending. Every process that is alive must call it within `seconds` of the others (the progress
  // watchdog's stall: each survivor's fires within its period of the others'). Once per process, on its way out:
  // its buffers are left to the process's end, as a word may still arrive after the deadline.
  static std::vector<int> unanswered_processes(double seconds);
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override;

  // Collective: the processes of this communicator that share this one's host memory (MPI_Comm_split_type
  // MPI_COMM_TYPE_SHARED), ranked as here: the processes of one host.
  std::unique_ptr<MpiCommunicator> split_shared_memory();

 protected:
#define TG_DECLARE_COMM_IMPL(ret, name, params) ret name params override;
  TG_COMMUNICATOR_IMPLS(TG_DECLARE_COMM_IMPL)
#undef TG_DECLARE_COMM_IMPL

 private:
  struct Impl;
  explicit MpiCommunicator(std::unique_ptr<Impl> impl);  // wraps a communicator made by a split
  std::unique_ptr<Impl> impl_;
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace tg
