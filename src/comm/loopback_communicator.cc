// LoopbackCommunicator: stream-ordered collectives of ranks sharing one device (see the header).
//
// A collective's phases: enter (each rank records its "entered" mark after the work that made its buffers, posts its
// call, and all meet: the calls must agree), work (each stream waits for the peers' marks of the previous phase, then
// reads their memory: copies and reductions), meet again, ..., and after the last meeting each stream waits for every
// peer's "done" before anything later on it. The host meetings order the marks: a mark is recorded again only after
// every peer has queued its wait for the previous record.
#include "terngrad/comm/loopback_communicator.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <mutex>

#include "src/comm/collective_call.h"
#include "terngrad/core/error.h"

namespace tg {

using comm_detail::CollectiveKind;
using Mark = LoopbackDevice::Mark;

struct LoopbackCommunicator::Group {
  explicit Group(int n) : size(n), calls(static_cast<size_t>(n)), devices(static_cast<size_t>(n)) {}

  const int size;
  std::mutex mutex;
  int arrived = 0;          // ranks at the current meeting
  int left = 0;             // ranks that left the collective in progress by an error
  uint64_t generation = 0;  // completed meetings
  bool failed = false;
  std::string failure;      // why the group failed (set once)
  std::vector<Call> calls;  // each rank's call, posted when it enters
  // Each rank's device (its marks), kept while any rank's communicator lives: a peer still queues waits on them after
  // this rank has returned.
  std::vector<std::unique_ptr<LoopbackDevice>> devices;
  // split: each rank's new group and rank in it (valid until the next collective completes its entry).
  std::vector<std::pair<std::shared_ptr<Group>, int>> split_result;

  void fail_locked(const std::string& why) {
    if (failed) return;
    failure = why;
    failed = true;
  }
  // Run by the last rank to enter: every rank must have posted the same call; a split forms its groups.
  void check_calls_locked() {
    for (int k = 1; k < size; ++k)
      if (!comm_detail::same_call(calls[0], calls[static_cast<size_t>(k)]))
        return fail_locked(comm_detail::disagreement(calls, k));
    left = 0;
    if (calls[0].kind != CollectiveKind::kSplit) return;
    split_result = comm_detail::split_groups<Group>(calls, [](int n) { return std::make_shared<Group>(n); });
  }
};

LoopbackCommunicator::LoopbackCommunicator(std::shared_ptr<Group> group, int rank,
                                           std::unique_ptr<LoopbackDevice> device)
    : group_(std::move(group)), rank_(rank), size_(group_ ? group_->size : 0), device_(device.get()), gate_(name()) {
  TG_CHECK(group_ != nullptr && device_ != nullptr, "loopback communicator: rank {} without a group or a device", rank);
  TG_CHECK(rank >= 0 && rank < size_, "loopback communicator: rank {} outside [0, {})", rank, size_);
  std::lock_guard<std::mutex> lock(group_->mutex);
  std::unique_ptr<LoopbackDevice>& slot = group_->devices[static_cast<size_t>(rank)];
  TG_CHECK(slot == nullptr, "loopback communicator: rank {} made twice", rank);
  slot = std::move(device);
}

LoopbackCommunicator::~LoopbackCommunicator() {
  const std::string why = fmt::format("rank {}'s communicator was destroyed", rank_);
  gate_.abort(
      [&] {
        std::lock_guard<std::mutex> lock(group_->mutex);
        group_->fail_locked(why);
      },
      "destroyed");
  gate_.settle_abort();
}

std::vector<std::unique_ptr<LoopbackCommunicator>> make_loopback_communicators(
    std::vector<std::unique_ptr<LoopbackDevice>> devices) {
  const int n = static_cast<int>(devices.size());
  TG_CHECK(n >= 1 && n <= LoopbackDevice::kMaxSources, "loopback communicator: {} ranks (1 to {})", n,
           LoopbackDevice::kMaxSources);
  for (const auto& d : devices) {
    TG_CHECK(d != nullptr, "loopback communicator: a rank without a device");
    TG_CHECK(d->device() == devices[0]->device(),
             "loopback communicator: rank 0 is on {}, another rank on {} (one device for every rank)",
             devices[0]->device().str(), d->device().str());
  }
  auto group = std::make_shared<LoopbackCommunicator::Group>(n);
  std::vector<std::unique_ptr<LoopbackCommunicator>> comms;
  for (int k = 0; k < n; ++k)
    comms.push_back(std::make_unique<LoopbackCommunicator>(group, k, std::move(devices[static_cast<size_t>(k)])));
  return comms;
}

std::vector<std::unique_ptr<LoopbackCommunicator>> split_loopback_communicators(
    const std::vector<LoopbackCommunicator*>& parents, const std::vector<int>& colors, const std::vector<int>& keys) {
  TG_CHECK(colors.size() == parents.size() && keys.size() == parents.size(),
           "loopback split: {} communicators, {} colors, {} keys", parents.size(), colors.size(), keys.size());
  TG_CHECK(!parents.empty() && parents[0] != nullptr, "loopback split: no communicators");
  const int n = parents[0]->size();
  TG_CHECK(static_cast<int>(parents.size()) == n, "loopback split: {} of the group's {} ranks (all of them, in order)",
           parents.size(), n);
  for (int k = 0; k < n; ++k)
    TG_CHECK(parents[static_cast<size_t>(k)] != nullptr &&
                 parents[static_cast<size_t>(k)]->group_ == parents[0]->group_ &&
                 parents[static_cast<size_t>(k)]->rank() == k,
             "loopback split: entry {} is not rank {} of the group", k, k);
  const auto groups = comm_detail::split_groups<LoopbackCommunicator::Group>(
      colors, keys, [](int n) { return std::make_shared<LoopbackCommunicator::Group>(n); });
  std::vector<std::unique_ptr<LoopbackCommunicator>> out(parents.size());
  for (size_t k = 0; k < groups.size(); ++k)
    if (groups[k].first)
      out[k] =
          std::make_unique<LoopbackCommunicator>(groups[k].first, groups[k].second, parents[k]->device_->another());
  return out;
}

std::string LoopbackCommunicator::name() const {
  return fmt::format("loopback (rank {} of {}, {})", rank_, size_, device_ ? device_->device().str() : "none");
}

bool LoopbackCommunicator::supports(DType dtype, ReduceOp op) const {
  return reduce_supported(dtype, op) || (dtype == DType::kBf16 && op == ReduceOp::kSum);
}

void LoopbackCommunicator::abort(const std::string& why) noexcept {
  try {
    const std::string reason = fmt::format("rank {} aborted: {}", rank_, why);
    gate_.abort(
        [&] {
          std::lock_guard<std::mutex> lock(group_->mutex);
          group_->fail_locked(reason);
        },
        why);
  } catch (...) {  // a string copy failing: nothing left to do
  }
}

std::string LoopbackCommunicator::async_error() noexcept {
  if (gate_.aborted()) return {};
  try {
    {
      std::lock_guard<std::mutex> lock(group_->mutex);
      if (group_->failed) return fmt::format("{}: the group failed: {}", name(), group_->failure);
    }
    const std::string device_error = device_->own_error();
    return device_error.empty() ? device_error : fmt::format("{}: {}", name(), device_error);
  } catch (...) {
    return {};
  }
}

void LoopbackCommunicator::check_buffer_device(Device device) const {
  if (!(device == device_->device()))
    TG_THROW("{}: buffers on {} are not supported (memory of {} only)", name(), device.str(), device_->device().str());
}

// The host side of a meeting: counts this rank in and waits (polling with a back-off, no lock held between polls)
// for the others. Entering, a failed group throws before every rank arrived (nothing has begun: nobody reads this
// rank's memory). Later meetings wait until every rank arrived (go on) or, the group failed, until each rank has
// arrived or left the collective; then this rank leaves too (throws): no peer reads its memory any more.
void LoopbackCommunicator::meet(const Call& call, bool entering) {
  Group& g = *group_;
  auto throw_failed = [&] { TG_THROW("{}: {} failed: {}", name(), comm_detail::describe(call), g.failure); };
  uint64_t generation = 0;
  {
    std::lock_guard<std::mutex> lock(g.mutex);
    if (entering) {
      if (g.failed) throw_failed();
      g.calls[static_cast<size_t>(rank_)] = call;
    }
    generation = g.generation;
    if (++g.arrived == g.size) {
      g.arrived = 0;
      if (entering) g.check_calls_locked();
      if (entering && g.failed) throw_failed();  // the calls disagree: nobody goes on
      ++g.generation;
      return;
    }
  }
  for (PollBackoff backoff;; backoff.pause()) {
    std::lock_guard<std::mutex> lock(g.mutex);
    if (g.generation != generation) return;
    if (g.failed && (entering || g.arrived + g.left >= g.size)) {
      if (g.arrived > 0) --g.arrived;  // 0 when the last to enter failed the group (the calls disagree)
      if (!entering) {
        ++g.left;
        counted_out_ = true;
      }
      throw_failed();
    }
  }
}

void LoopbackCommunicator::enter(const Call& call) {
  counted_out_ = false;
  gate_.call([&] { device_->record(Mark::kEntered); });
  meet(call, /*entering=*/true);
}

// After an error in a collective this rank had entered (and not yet left by a meeting): the group fails, the rank
// counts as left, and it waits until every peer has arrived at a meeting or left too, so that none still reads its
// memory when it returns.
void LoopbackCommunicator::leave_after_error(const std::string& why) noexcept {
  if (counted_out_) return;
  Group& g = *group_;
  try {
    {
      std::lock_guard<std::mutex> lock(g.mutex);
      g.fail_locked(fmt::format("rank {} left a collective: {}", rank_, why));
      ++g.left;
      counted_out_ = true;
    }
    for (PollBackoff backoff;; backoff.pause()) {
      std::lock_guard<std::mutex> lock(g.mutex);
      if (g.arrived + g.left >= g.size) return;
    }
  } catch (...) {
  }
}

void LoopbackCommunicator::wait_for_peers(Mark mark) {
  for (int j = 0; j < size_; ++j)
    if (j != rank_) device_->wait_for(*group_->devices[static_cast<size_t>(j)], mark);  // set before any collective
}

template <typename Body>
void LoopbackCommunicator::run_entered(Body&& body) {
  try {
    body();
  } catch (const std::exception& e) {
    leave_after_error(e.what());
    throw;
  }
  // Every meeting is over: nobody reads this rank's memory any more; its stream waits for the peers' reads.
  gate_.call([&] { wait_for_peers(Mark::kDone); });
}

namespace {
// The slice of `count` elements rank k owns: [begin, end), the first count % size ranks one longer.
std::pair<int64_t, int64_t> slice_of(int64_t count, int size, int k) {
  const int64_t base = count / size, extra = count % size;
  const int64_t begin = k * base + std::min<int64_t>(k, extra);
  return {begin, begin + base + (k < extra ? 1 : 0)};
}
}  // namespace

void LoopbackCommunicator::allreduce_impl(void* buffer, int64_t count, DType dtype, ReduceOp op, Device device) {
  check_buffer_device(device);
  if (size_ == 1) return;
  Group& g = *group_;
  const Call call{CollectiveKind::kAllreduce, buffer, count, dtype, op};
  enter(call);
  const size_t elem = dtype_size(dtype);
  auto at = [&](int rank, int64_t element) {
    return static_cast<uint8_t*>(const_cast<void*>(g.calls[static_cast<size_t>(rank)].src)) +
           static_cast<size_t>(element) * elem;
  };
  run_entered([&] {
    // Reduce-scatter: slice rank_ of every rank's buffer, in rank order, into this rank's own slice.
    const std::pair<int64_t, int64_t> mine = slice_of(count, size_, rank_);
    gate_.call([&] {
      wait_for_peers(Mark::kEntered);
      std::array<const void*, LoopbackDevice::kMaxSources> srcs;
      for (int j = 0; j < size_; ++j) srcs[static_cast<size_t>(j)] = at(j, mine.first);
      if (mine.second > mine.first)
        device_->reduce(at(rank_, mine.first), srcs.data(), size_, mine.second - mine.first, dtype, op);
      device_->record(Mark::kReduced);
    });
    meet(call);
    // All-gather in place: every other slice from its owner.
    gate_.call([&] {
      wait_for_peers(Mark::kReduced);
      for (int j = 0; j < size_; ++j) {
        if (j == rank_) continue;
        const auto [b, e] = slice_of(count, size_, j);
        device_->copy(at(rank_, b), at(j, b), static_cast<size_t>(e - b) * elem);
      }
      device_->record(Mark::kDone);
    });
    meet(call);
  });
}

void LoopbackCommunicator::reduce_scatter_impl(const void* send, void* recv, int64_t count, DType dtype, ReduceOp op,
                                               Device device) {
  check_buffer_device(device);
  const size_t block = static_cast<size_t>(count) * dtype_size(dtype);
  if (size_ == 1) {
    if (recv != send && block > 0) gate_.call([&] { device_->copy(recv, send, block); });
    return;
  }
  Group& g = *group_;
  const Call call{CollectiveKind::kReduceScatter, send, count, dtype, op};
  enter(call);
  run_entered([&] {
    // Block rank_ of every rank's send buffer, in rank order; in place, recv is that block of this rank's own buffer,
    // which only this rank reads.
    gate_.call([&] {
      wait_for_peers(Mark::kEntered);
      std::array<const void*, LoopbackDevice::kMaxSources> srcs;
      for (int j = 0; j < size_; ++j)
        srcs[static_cast<size_t>(j)] =
            static_cast<const uint8_t*>(g.calls[static_cast<size_t>(j)].src) + static_cast<size_t>(rank_) * block;
      if (count > 0) device_->reduce(recv, srcs.data(), size_, count, dtype, op);
      device_->record(Mark::kDone);
    });
    meet(call);
  });
}

void LoopbackCommunicator::allgather_impl(const void* send, void* recv, size_t send_bytes, Device device) {
  check_buffer_device(device);
  uint8_t* out = static_cast<uint8_t*>(recv);
  if (size_ == 1) {
    if (out != send && send_bytes > 0) gate_.call([&] { device_->copy(out, send, send_bytes); });
    return;
  }
  Group& g = *group_;
  const Call call{CollectiveKind::kAllgather, send, 0, DType::kU8, ReduceOp::kSum, send_bytes};
  enter(call);
  run_entered([&] {
    gate_.call([&] {
      wait_for_peers(Mark::kEntered);
      for (int j = 0; j < size_; ++j) {
        const void* from = g.calls[static_cast<size_t>(j)].src;
        uint8_t* to = out + static_cast<size_t>(j) * send_bytes;
        if (to != from) device_->copy(to, from, send_bytes);  // in place (send in recv): skip
      }
      device_->record(Mark::kDone);
    });
    meet(call);
  });
}

void LoopbackCommunicator::broadcast_impl(void* buffer, size_t bytes, int root, Device device) {
  check_buffer_device(device);
  if (size_ == 1) return;
  Group& g = *group_;
  const Call call{CollectiveKind::kBroadcast, buffer, 0, DType::kU8, ReduceOp::kSum, bytes, root};
  enter(call);
  run_entered([&] {
    gate_.call([&] {
      wait_for_peers(Mark::kEntered);
      if (rank_ != root) device_->copy(buffer, g.calls[static_cast<size_t>(root)].src, bytes);
      device_->record(Mark::kDone);
    });
    meet(call);
  });
}

void LoopbackCommunicator::barrier_impl() {
  if (size_ > 1) enter(Call{});
  synchronize();
}

void LoopbackCommunicator::synchronize() {
  gate_.wait_until([&] { return device_->idle(); });
}

std::unique_ptr<Communicator> LoopbackCommunicator::split_impl(int color, int key) {
  Call call;
  call.kind = CollectiveKind::kSplit;
  call.color = color;
  call.key = key;
  if (size_ == 1) {
    if (color < 0) return nullptr;
    return std::make_unique<LoopbackCommunicator>(std::make_shared<Group>(1), 0, device_->another());
  }
  enter(call);
  // The result stays until every rank has entered the next collective, which this rank has not.
  auto [group, rank] = group_->split_result[static_cast<size_t>(rank_)];
  if (!group) return nullptr;
  return std::make_unique<LoopbackCommunicator>(std::move(group), rank, device_->another());
}

}  // namespace tg
