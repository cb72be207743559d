// MpiCommunicator: one worker per MPI process (Open MPI 4.1), host buffers. all-reduce maps to
// MPI_Allreduce (f32/i32/i8 sum and max through MPI_FLOAT/MPI_INT32_T/MPI_INT8_T; f16 sum through a
// commutative user op that adds in fp32 and rounds to fp16), all-gather to MPI_Allgather, broadcast to
// MPI_Bcast, barrier to MPI_Barrier. Every MPI return code is checked with TG_MPI_CHECK (the call, its
// error string, file and line). MpiEnvironment initialises MPI once per process (and finalises it if it
// did the initialising); the NCCL communicator will bootstrap through the same environment.
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
