// ThreadCommunicator: in-process collectives over shared memory (see the header).
#include "terngrad/comm/thread_communicator.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <new>

#include "src/comm/collective_call.h"
#include "src/comm/reduce_into.h"
#include "terngrad/core/error.h"

namespace tg {

namespace {

using comm_detail::CollectiveCall;
using Kind = comm_detail::CollectiveKind;
using Call = CollectiveCall;

// Waiting first spins this many pause instructions (some microseconds: peers that are about to arrive cost no
// sleep and wake-up), then blocks on the condition variable.
constexpr int kSpinIterations = 1000;
// The reduction walks each rank's slice in chunks of this many bytes, so that the partial sums stay in cache
// while every rank's buffer is added to them.
constexpr size_t kChunkBytes = size_t{64} << 10;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

}  // namespace

struct ThreadCommunicator::Group {
  explicit Group(int n) : size(n), calls(static_cast<size_t>(n)) {}

  const int size;
  std::mutex mutex;
  std::condition_variable cv;
  int arrived = 0;                           // ranks waiting in the current barrier
  uint64_t generation = 0;                   // completed barriers
  std::atomic<uint64_t> generation_seen{0};  // = generation, read without the lock while spinning
  std::atomic<bool> failed{false};
  std::string failure;                 // why the group failed (set once, under the lock)
  std::vector<Call> calls;             // each rank's call, posted at the entry barrier
  std::unique_ptr<uint8_t[]> scratch;  // the all-reduce result (grows, never shrinks)
  size_t scratch_bytes = 0;
  // split: the groups made from this one (an abort reaches them) and each rank's new group and rank in it
  // (valid until the next collective completes its entry).
  std::vector<std::weak_ptr<Group>> children;
  std::vector<std::pair<std::shared_ptr<Group>, int>> split_result;

  // With `to_children`, the groups split from this one (and theirs) fail too. The child's lock is taken under
  // this one's: locks are always taken parent before child.
  void fail_locked(const std::string& why, bool to_children) {
    if (failed.load()) return;
    failure = why;
    failed.store(true);
    cv.notify_all();
    if (!to_children) return;
    for (const std::weak_ptr<Group>& weak : children)
      if (std::shared_ptr<Group> child = weak.lock()) {
        std::lock_guard<std::mutex> child_lock(child->mutex);
        child->fail_locked(why, true);
      }
  }

  // Counts this rank in and waits for the others. With `abortable`, a failure of the group before every rank
  // arrived throws; a barrier that completed wins over a later failure (its callers go on, and the next call
  // fails). `on_complete` runs on the last rank to arrive, under the lock, before the others are released;
  // it may fail the group instead (then nobody is released and everyone throws).
  template <typename OnComplete>
  void arrive(const ThreadCommunicator& self, const Call& call, bool abortable, OnComplete on_complete) {
    std::unique_lock<std::mutex> lock(mutex);
    if (abortable && failed.load()) throw_failed(self, call);
    const uint64_t g = generation;
    if (++arrived == size) {
      arrived = 0;
      on_complete();
      if (abortable && failed.load()) throw_failed(self, call);
      ++generation;
      generation_seen.store(generation);
      cv.notify_all();
      return;
    }
    lock.unlock();
    for (int i = 0; i < kSpinIterations; ++i) {
      if (generation_seen.load(std::memory_order_acquire) != g) return;
      if (abortable && failed.load(std::memory_order_relaxed)) break;
      cpu_relax();
    }
    lock.lock();
    cv.wait(lock, [&] { return generation != g || (abortable && failed.load()); });
    if (generation == g) throw_failed(self, call);
  }

  [[noreturn]] void throw_failed(const ThreadCommunicator& self, const Call& call) const {
    TG_THROW("{}: {} failed: {}", self.name(), comm_detail::describe(call), failure);
  }

  // Run by the last rank to enter: every rank must have posted the same call; an all-reduce needs the scratch.
  void check_calls_locked() {
    for (int k = 1; k < size; ++k)
      if (!comm_detail::same_call(calls[0], calls[static_cast<size_t>(k)]))
        return fail_locked(comm_detail::disagreement(calls, k), true);
    if (calls[0].kind == Kind::kSplit) return make_splits_locked();
    if (calls[0].kind != Kind::kAllreduce) return;
    const size_t need = static_cast<size_t>(calls[0].count) * dtype_size(calls[0].dtype);
    if (need <= scratch_bytes) return;
    try {
      scratch.reset(new uint8_t[need]);
      scratch_bytes = need;
    } catch (const std::bad_alloc&) {
      scratch.reset();
      scratch_bytes = 0;
      fail_locked(fmt::format("cannot allocate the {} bytes of the all-reduce's scratch", need), true);
    }
  }

  // Run by the last rank to enter a split: one new group per color >= 0, its ranks ordered by (key, rank).
  void make_splits_locked() {
    split_result = comm_detail::split_groups<Group>(calls, [this](int n) {
      auto child = std::make_shared<Group>(n);
      children.push_back(child);
      return child;
    });
    // Forget children that are gone, so that repeated splits do not grow the list without bound.
    children.erase(std::remove_if(children.begin(), children.end(), [](auto& w) { return w.expired(); }),
                   children.end());
  }

  // The entry barrier: posts this rank's call, waits for every rank, checks that the calls agree.
  void enter(const ThreadCommunicator& self, int rank, const Call& call) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      calls[static_cast<size_t>(rank)] = call;
    }
    arrive(self, call, /*abortable=*/true, [this] { check_calls_locked(); });
  }

  // The exit barrier of a collective every rank entered: waits for all, whatever happens meanwhile (others may
  // still be reading this rank's memory).
  void leave(const ThreadCommunicator& self, const Call& call) {
    arrive(self, call, /*abortable=*/false, [] {});
  }
};

ThreadCommunicator::ThreadCommunicator(std::shared_ptr<Group> group, int rank)
    : group_(std::move(group)), rank_(rank), size_(group_->size) {
  TG_CHECK(rank >= 0 && rank < size_, "local communicator: rank {} outside [0, {})", rank, size_);
}

ThreadCommunicator::~ThreadCommunicator() {
  std::lock_guard<std::mutex> lock(group_->mutex);
  group_->fail_locked(fmt::format("rank {}'s communicator was destroyed", rank_), /*to_children=*/false);
}

std::vector<std::unique_ptr<ThreadCommunicator>> make_thread_communicators(int ranks) {
  TG_CHECK(ranks >= 1, "local communicator: {} ranks (need at least 1)", ranks);
  auto group = std::make_shared<ThreadCommunicator::Group>(ranks);
  std::vector<std::unique_ptr<ThreadCommunicator>> comms;
  for (int k = 0; k < ranks; ++k) comms.push_back(std::make_unique<ThreadCommunicator>(group, k));
  return comms;
}

std::string ThreadCommunicator::name() const { return fmt::format("local (rank {} of {})", rank_, size_); }

bool ThreadCommunicator::supports(DType dtype, ReduceOp op) const {
  return reduce_supported(dtype, op) || (dtype == DType::kBf16 && op == ReduceOp::kSum);
}

void ThreadCommunicator::abort(const std::string& why) {
  std::lock_guard<std::mutex> lock(group_->mutex);
  group_->fail_locked(fmt::format("rank {} aborted: {}", rank_, why), /*to_children=*/true);
}

namespace {
// Takes the communicator, not its name: formatting the name on every call would allocate.
void check_host(const ThreadCommunicator& c, Device device) {
  TG_CHECK(device.is_cpu(),
           "{}: buffers on {} are not supported (host memory only; the NCCL communicator takes GPU "
           "buffers)",
           c.name(), device.str());
}
}  // namespace

void ThreadCommunicator::allreduce_impl(void* buffer, int64_t count, DType dtype, ReduceOp op, Device device) {
  check_host(*this, device);
  if (size_ == 1) return;
  Group& g = *group_;
  const Call call{Kind::kAllreduce, buffer, count, dtype, op};
  g.enter(*this, rank_, call);
  // Slice rank_ of the elements, reduced over the ranks in rank order into the scratch.
  const size_t elem = dtype_size(dtype);
  const int64_t base = count / size_, extra = count % size_;
  const int64_t begin = rank_ * base + std::min<int64_t>(rank_, extra);
  const int64_t end = begin + base + (rank_ < extra ? 1 : 0);
  const size_t chunk = std::max<size_t>(elem, kChunkBytes / elem * elem);
  for (size_t off = static_cast<size_t>(begin) * elem, stop = static_cast<size_t>(end) * elem; off < stop;
       off += chunk) {
    const size_t bytes = std::min(chunk, stop - off);
    uint8_t* acc = g.scratch.get() + off;
    std::memcpy(acc, static_cast<const uint8_t*>(g.calls[0].src) + off, bytes);
    for (int w = 1; w < size_; ++w)
      comm_detail::reduce_into(acc, static_cast<const uint8_t*>(g.calls[static_cast<size_t>(w)].src) + off, bytes,
                               dtype, op);
  }
  g.leave(*this, call);  // every slice is in the scratch; nobody reads the buffers any more
  // The scratch stays valid until every rank has entered the next collective, so no third barrier is needed.
  if (count > 0) std::memcpy(buffer, g.scratch.get(), static_cast<size_t>(count) * elem);
}

void ThreadCommunicator::reduce_scatter_impl(const void* send, void* recv, int64_t count, DType dtype, ReduceOp op,
                                             Device device) {
  check_host(*this, device);
  const size_t elem = dtype_size(dtype), block = static_cast<size_t>(count) * elem;
  if (size_ == 1) {
    if (recv != send && block > 0) std::memmove(recv, send, block);
    return;
  }
  if (!chunk_) chunk_.reset(new uint8_t[kChunkBytes]);  // before entering: once entered, no rank may leave early
  Group& g = *group_;
  const Call call{Kind::kReduceScatter, send, count, dtype, op};
  g.enter(*this, rank_, call);
  // Block rank_ of every rank's send buffer, reduced over the ranks in rank order (as allreduce adds) a chunk at
  // a time. In place, recv is block rank_ of this rank's own send buffer, which only this rank reads: each chunk
  // is written after it has been read.
  const size_t chunk = kChunkBytes / elem * elem, first = static_cast<size_t>(rank_) * block;
  uint8_t* out = static_cast<uint8_t*>(recv);
  for (size_t off = 0; off < block; off += chunk) {
    const size_t bytes = std::min(chunk, block - off);
    std::memcpy(chunk_.get(), static_cast<const uint8_t*>(g.calls[0].src) + first + off, bytes);
    for (int w = 1; w < size_; ++w)
      comm_detail::reduce_into(chunk_.get(),
                               static_cast<const uint8_t*>(g.calls[static_cast<size_t>(w)].src) + first + off, bytes,
                               dtype, op);
    std::memcpy(out + off, chunk_.get(), bytes);
  }
  g.leave(*this, call);  // the others have read this rank's send buffer
}

void ThreadCommunicator::allgather_impl(const void* send, void* recv, size_t send_bytes, Device device) {
  check_host(*this, device);
  uint8_t* out = static_cast<uint8_t*>(recv);
  if (size_ == 1) {
    if (out != send && send_bytes > 0) std::memmove(out, send, send_bytes);
    return;
  }
  Group& g = *group_;
  const Call call{Kind::kAllgather, send, 0, DType::kU8, ReduceOp::kSum, send_bytes};
  g.enter(*this, rank_, call);
  for (int w = 0; w < size_; ++w) {
    const void* from = g.calls[static_cast<size_t>(w)].src;
    uint8_t* to = out + static_cast<size_t>(w) * send_bytes;
    if (to != from && send_bytes > 0) std::memcpy(to, from, send_bytes);  // in place (send in recv): skip
  }
  g.leave(*this, call);
}

void ThreadCommunicator::broadcast_impl(void* buffer, size_t bytes, int root, Device device) {
  check_host(*this, device);
  if (size_ == 1) return;
  Group& g = *group_;
  const Call call{Kind::kBroadcast, buffer, 0, DType::kU8, ReduceOp::kSum, bytes, root};
  g.enter(*this, rank_, call);
  if (rank_ != root && bytes > 0) std::memcpy(buffer, g.calls[static_cast<size_t>(root)].src, bytes);
  g.leave(*this, call);
}

void ThreadCommunicator::barrier_impl() {
  if (size_ == 1) return;
  group_->enter(*this, rank_, Call{});
}

std::unique_ptr<Communicator> ThreadCommunicator::split_impl(int color, int key) {
  Call call;
  call.kind = Kind::kSplit;
  call.color = color;
  call.key = key;
  group_->enter(*this, rank_, call);
  // The result stays until every rank has entered the next collective, which this rank has not.
  auto [group, rank] = group_->split_result[static_cast<size_t>(rank_)];
  if (!group) return nullptr;
  return std::make_unique<ThreadCommunicator>(std::move(group), rank);
}

}  // namespace tg
