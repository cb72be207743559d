// HierarchicalCommunicator: local stage, process stage (leaders only), local broadcast.
#include "terngrad/comm/hierarchical_communicator.h"

#include <fmt/format.h>

namespace tg {

HierarchicalCommunicator::HierarchicalCommunicator(LocalCommunicator& local, Communicator& processes)
    : local_(local), processes_(processes) {}

std::string HierarchicalCommunicator::name() const {
  return fmt::format("hierarchical (rank {} of {}: worker {} of {} in process {} of {})", rank(), size(),
                     local_.rank(), local_.size(), processes_.rank(), processes_.size());
}

void HierarchicalCommunicator::allreduce_impl(void* buffer, int64_t count, DType dtype, ReduceOp op,
                                              Device device) {
  TG_CHECK(device.is_cpu(), "{}: buffers on {} are not supported (host buffers only)", name(), device.str());
  local_.allreduce(buffer, count, dtype, op, device);  // every local worker: the process's reduction
  if (leader()) processes_.allreduce(buffer, count, dtype, op, device);
  local_.broadcast(buffer, static_cast<size_t>(count) * dtype_size(dtype), 0, device);
}

void HierarchicalCommunicator::allgather_impl(const void* send, void* recv, size_t send_bytes, Device device) {
  TG_CHECK(device.is_cpu(), "{}: buffers on {} are not supported (host buffers only)", name(), device.str());
  // Blocks are ordered by rank = process * N + local: the process's N blocks, then the processes in order.
  const size_t local_bytes = send_bytes * static_cast<size_t>(local_.size());
  if (gathered_.size() < local_bytes) gathered_.resize(local_bytes);
  local_.allgather(send, gathered_.data(), send_bytes, device);
  if (leader()) processes_.allgather(gathered_.data(), recv, local_bytes, device);
  local_.broadcast(recv, local_bytes * static_cast<size_t>(processes_.size()), 0, device);
}

void HierarchicalCommunicator::broadcast_impl(void* buffer, size_t bytes, int root, Device device) {
  TG_CHECK(device.is_cpu(), "{}: buffers on {} are not supported (host buffers only)", name(), device.str());
  const int root_process = root / local_.size(), root_local = root % local_.size();
  if (processes_.rank() == root_process) local_.broadcast(buffer, bytes, root_local, device);
  if (leader()) processes_.broadcast(buffer, bytes, root_process, device);
  local_.broadcast(buffer, bytes, 0, device);
}

void HierarchicalCommunicator::barrier_impl() {
  local_.barrier();
  if (leader()) processes_.barrier();
  local_.barrier();
}

}  // namespace tg
