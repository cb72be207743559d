// CompositeCommunicator: P processes x R threads as one group, composed of an inner and an outer communicator
// (see the header).
#include "terngrad/comm/composite_communicator.h"

#include <fmt/format.h>

#include <cstring>

#include "terngrad/core/error.h"

namespace tg {

CompositeCommunicator::CompositeCommunicator(std::unique_ptr<Communicator> inner, std::unique_ptr<Communicator> outer)
    : inner_(std::move(inner)), outer_(std::move(outer)) {
  TG_CHECK(inner_ != nullptr && outer_ != nullptr, "composite communicator: needs an inner and an outer communicator");
  rank_ = outer_->rank() * inner_->size() + inner_->rank();
  size_ = outer_->size() * inner_->size();
}

CompositeCommunicator::~CompositeCommunicator() = default;

std::string CompositeCommunicator::name() const {
  return fmt::format("composite (rank {} of {}: process {} of {}, local {} of {})", rank_, size_, outer_->rank(),
                     outer_->size(), inner_->rank(), inner_->size());
}

bool CompositeCommunicator::supports(DType dtype, ReduceOp op) const {
  return inner_->supports(dtype, op) && outer_->supports(dtype, op);
}

uint8_t* CompositeCommunicator::scratch(size_t bytes) {
  if (scratch_.size() < bytes) scratch_.resize(bytes);
  return scratch_.data();
}

namespace {
// Takes the communicator, not its name: formatting the name on every call would allocate.
void check_host(const CompositeCommunicator& c, Device device) {
  TG_CHECK(device.is_cpu(), "{}: buffers on {} are not supported (host memory only)", c.name(), device.str());
}
}  // namespace

void CompositeCommunicator::allreduce_impl(void* buffer, int64_t count, DType dtype, ReduceOp op, Device device) {
  check_host(*this, device);
  const int R = inner_->size(), r = inner_->rank();
  const size_t elem = dtype_size(dtype);
  uint8_t* p = static_cast<uint8_t*>(buffer);
  // R shards of `shard` elements: shard r is reduced inside the process, then across the processes by rank r's
  // outer communicator, then gathered back inside the process (all three in place).
  const int64_t shard = count / R, tail = count - shard * R;
  if (shard > 0) {
    uint8_t* mine = p + static_cast<size_t>(r) * static_cast<size_t>(shard) * elem;
    inner_->reduce_scatter(p, mine, shard, dtype, op);
    outer_->allreduce(mine, shard, dtype, op);
    inner_->allgather(mine, p, static_cast<size_t>(shard) * elem);
  }
  // The last count mod R elements: reduced inside the process, across the processes by rank 0 alone (so that
  // every rank gets one result's bits), then broadcast inside the process.
  if (tail > 0) {
    uint8_t* t = p + static_cast<size_t>(shard * R) * elem;
    inner_->allreduce(t, tail, dtype, op);
    if (r == 0) outer_->allreduce(t, tail, dtype, op);
    inner_->broadcast(t, static_cast<size_t>(tail) * elem, 0);
  }
}

void CompositeCommunicator::reduce_scatter_impl(const void* send, void* recv, int64_t count, DType dtype, ReduceOp op,
                                                Device device) {
  check_host(*this, device);
  const int R = inner_->size(), r = inner_->rank(), P = outer_->size();
  const size_t block = static_cast<size_t>(count) * dtype_size(dtype);
  if (block == 0) return;
  // Regroup by in-process rank: block p*R + q goes to position q*P + p, so that in-process rank q's shard of
  // the inner reduce-scatter is the P blocks the ranks (p, q) own, in process order.
  uint8_t* s = scratch(static_cast<size_t>(P) * static_cast<size_t>(R) * block);
  const uint8_t* in = static_cast<const uint8_t*>(send);
  for (int p = 0; p < P; ++p)
    for (int q = 0; q < R; ++q)
      std::memcpy(s + static_cast<size_t>(q * P + p) * block, in + static_cast<size_t>(p * R + q) * block, block);
  uint8_t* mine = s + static_cast<size_t>(r) * static_cast<size_t>(P) * block;
  inner_->reduce_scatter(s, mine, static_cast<int64_t>(P) * count, dtype, op);
  outer_->reduce_scatter(mine, recv, count, dtype, op);
}

void CompositeCommunicator::allgather_impl(const void* send, void* recv, size_t send_bytes, Device device) {
  check_host(*this, device);
  const int R = inner_->size(), r = inner_->rank(), P = outer_->size();
  if (send_bytes == 0) return;
  // h[q*P + p] = the block of rank (p, q): the outer all-gather fills this rank's row, the inner one the rest.
  uint8_t* h = scratch(static_cast<size_t>(P) * static_cast<size_t>(R) * send_bytes);
  uint8_t* row = h + static_cast<size_t>(r) * static_cast<size_t>(P) * send_bytes;
  outer_->allgather(send, row, send_bytes);
  inner_->allgather(row, h, static_cast<size_t>(P) * send_bytes);
  uint8_t* out = static_cast<uint8_t*>(recv);
  for (int p = 0; p < P; ++p)
    for (int q = 0; q < R; ++q)
      std::memcpy(out + static_cast<size_t>(p * R + q) * send_bytes, h + static_cast<size_t>(q * P + p) * send_bytes,
                  send_bytes);
}

void CompositeCommunicator::broadcast_impl(void* buffer, size_t bytes, int root, Device device) {
  check_host(*this, device);
  const int R = inner_->size();
  const int root_process = root / R, root_local = root % R;
  if (inner_->rank() == root_local) outer_->broadcast(buffer, bytes, root_process);
  inner_->broadcast(buffer, bytes, root_local);
}

void CompositeCommunicator::barrier_impl() {
  // Every rank's outer barrier completes once that in-process rank of every process has entered it, which each
  // does only after its whole process entered the inner barrier.
  inner_->barrier();
  outer_->barrier();
}

std::unique_ptr<Communicator> CompositeCommunicator::split_impl(int, int) {
  TG_THROW("{}: split is not offered by the composite communicator (split its inner and outer communicators)", name());
}

}  // namespace tg
