// Communicator base: argument checks and byte accounting around the implementations' collectives.
#include "terngrad/comm/communicator.h"

#include "terngrad/comm/progress_watchdog.h"
#include "terngrad/core/error.h"

namespace tg {

bool reduce_supported(DType dtype, ReduceOp op) {
  return dtype == DType::kF32 || dtype == DType::kI8 || dtype == DType::kI32 ||
         (dtype == DType::kF16 && op == ReduceOp::kSum);
}

std::string Communicator::supported_text() const {
  std::string text;
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBf16, DType::kI8, DType::kU8, DType::kI32})
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax})
      if (supports(dtype, op))
        text += fmt::format("{}{} {}", text.empty() ? "" : ", ", dtype_name(dtype), enum_name(op));
  return text;
}

uint64_t Communicator::allreduce_moved_bytes(uint64_t payload, int size) {
  if (size <= 1) return 0;
  return 2 * static_cast<uint64_t>(size - 1) * payload / static_cast<uint64_t>(size);
}

uint64_t Communicator::allgather_moved_bytes(uint64_t payload, int size) {
  if (size <= 1) return 0;
  return static_cast<uint64_t>(size - 1) * payload;
}

uint64_t Communicator::reduce_scatter_moved_bytes(uint64_t payload, int size) {
  if (size <= 1) return 0;
  return static_cast<uint64_t>(size - 1) * payload / static_cast<uint64_t>(size);
}

namespace {
// A collective's stay in the watchdog, if there is one.
class Watched {
 public:
  Watched(ProgressWatchdog* w, const char* op, const Communicator* c, uint64_t bytes) : w_(w) {
    if (w_) w_->enter(op, c, bytes);
  }
  ~Watched() {
    if (w_) w_->leave();
  }
  Watched(const Watched&) = delete;
  Watched& operator=(const Watched&) = delete;

 private:
  ProgressWatchdog* w_;
};

// Whether [a, a + a_bytes) and [b, b + b_bytes) share a byte (addresses compared as integers: device pointers
// of one GPU too).
bool overlap(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  const auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return a_bytes > 0 && b_bytes > 0 && x < y + b_bytes && y < x + a_bytes;
}
}  // namespace

void Communicator::allreduce(void* buffer, int64_t count, DType dtype, ReduceOp op, Device device) {
  TG_CHECK(count >= 0, "{}: all-reduce of {} elements", name(), count);
  TG_CHECK(count == 0 || buffer != nullptr, "{}: all-reduce of {} elements from a null buffer", name(), count);
  if (!supports(dtype, op))  // name() formats a string: only on failure (a step allocates nothing)
    TG_THROW("{}: all-reduce {} over {} is not supported (supported: {})", name(), enum_name(op), dtype_name(dtype),
             supported_text());
  const uint64_t payload = static_cast<uint64_t>(count) * dtype_size(dtype);
  {
    Watched w(watchdog_, "all-reduce", this, payload);
    allreduce_impl(buffer, count, dtype, op, device);
  }
  stats_.calls += 1;
  stats_.payload_bytes += payload;
  stats_.moved_bytes += allreduce_moved_bytes(payload, size());
}

void Communicator::reduce_scatter(const void* send, void* recv, int64_t count, DType dtype, ReduceOp op,
                                  Device device) {
  TG_CHECK(count >= 0, "{}: reduce-scatter of {} elements per rank", name(), count);
  TG_CHECK(count == 0 || (send != nullptr && recv != nullptr), "{}: reduce-scatter of {} elements from/to null", name(),
           count);
  if (!supports(dtype, op))
    TG_THROW("{}: reduce-scatter {} over {} is not supported (supported: {})", name(), enum_name(op), dtype_name(dtype),
             supported_text());
  const size_t block = static_cast<size_t>(count) * dtype_size(dtype);
  const uint64_t payload = static_cast<uint64_t>(size()) * block;
  if (recv != static_cast<const uint8_t*>(send) + static_cast<size_t>(rank()) * block &&
      overlap(send, payload, recv, block))
    TG_THROW("{}: reduce-scatter's receive buffer overlaps its send buffer but is not block {} of it (in place)",
             name(), rank());
  {
    Watched w(watchdog_, "reduce-scatter", this, payload);
    reduce_scatter_impl(send, recv, count, dtype, op, device);
  }
  stats_.calls += 1;
  stats_.payload_bytes += payload;
  stats_.moved_bytes += reduce_scatter_moved_bytes(payload, size());
}

void Communicator::allgather(const void* send, void* recv, size_t send_bytes, Device device) {
  TG_CHECK(send_bytes == 0 || (send != nullptr && recv != nullptr), "{}: all-gather of {} bytes from/to null", name(),
           send_bytes);
  if (send != static_cast<const uint8_t*>(recv) + static_cast<size_t>(rank()) * send_bytes &&
      overlap(send, send_bytes, recv, static_cast<size_t>(size()) * send_bytes))
    TG_THROW("{}: all-gather's send buffer overlaps its receive buffer but is not block {} of it (in place)", name(),
             rank());
  {
    Watched w(watchdog_, "all-gather", this, send_bytes);
    allgather_impl(send, recv, send_bytes, device);
  }
  stats_.calls += 1;
  stats_.payload_bytes += send_bytes;
  stats_.moved_bytes += allgather_moved_bytes(send_bytes, size());
}

void Communicator::broadcast(void* buffer, size_t bytes, int root, Device device) {
  TG_CHECK(root >= 0 && root < size(), "{}: broadcast root {} outside [0, {})", name(), root, size());
  TG_CHECK(bytes == 0 || buffer != nullptr, "{}: broadcast of {} bytes from a null buffer", name(), bytes);
  {
    Watched w(watchdog_, "broadcast", this, bytes);
    broadcast_impl(buffer, bytes, root, device);
  }
  stats_.calls += 1;
  stats_.payload_bytes += bytes;
  stats_.moved_bytes += size() > 1 ? bytes : 0;
}

void Communicator::barrier() {
  {
    Watched w(watchdog_, "barrier", this, 0);
    barrier_impl();
  }
  stats_.calls += 1;
}

std::unique_ptr<Communicator> Communicator::split(int color, int key) { return split_impl(color, key); }

}  // namespace tg
