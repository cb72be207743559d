// HierarchicalCommunicator: N workers (threads of one LocalGroup) in each of P processes (MPI between the
// processes) seen as ONE communicator of P*N ranks, rank = process * N + local rank, so the exchange of
// `mpirun -np P terngrad-train --num_nodes N` is the same collective as N*P workers anywhere.
// Each collective runs in three stages: inside the process (the local group), between the processes (only
// local rank 0 of each process calls MPI), and back inside the process (a local broadcast). MPI must allow
// calls from a worker thread, one at a time (MPI_THREAD_SERIALIZED, which MpiEnvironment requests).
// Byte counters follow the flat byte model of communicator.h over P*N ranks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "terngrad/comm/communicator.h"
#include "terngrad/comm/local_communicator.h"

namespace tg {

class HierarchicalCommunicator final : public Communicator {
 public:
  // `local`: this worker's place in its process's group; `processes`: the MPI communicator of the processes
  // (used only from local rank 0). Both outlive this object.
  HierarchicalCommunicator(LocalCommunicator& local, Communicator& processes);
  int rank() const override { return processes_.rank() * local_.size() + local_.rank(); }
  int size() const override { return processes_.size() * local_.size(); }
  std::string name() const override;

 protected:
  void allreduce_impl(void* buffer, int64_t count, DType dtype, ReduceOp op, Device device) override;
  void allgather_impl(const void* send, void* recv, size_t send_bytes, Device device) override;
  void broadcast_impl(void* buffer, size_t bytes, int root, Device device) override;
  void barrier_impl() override;

 private:
  bool leader() const { return local_.rank() == 0; }
  LocalCommunicator& local_;
  Communicator& processes_;
  std::vector<uint8_t> gathered_;  // (N, send_bytes): this process's blocks; grows once, then reused
};

}  // namespace tg
