// LocalCommunicator: collectives among N participant threads of one process (see the header).
#include "terngrad/comm/local_communicator.h"

#include <fmt/format.h>

#include <cstring>
#include <exception>
#include <thread>

#include "terngrad/core/error.h"

namespace tg {

namespace {

enum Kind { kAllreduce = 1, kAllgather = 2, kBroadcast = 3, kBarrier = 4 };

const char* kind_name(int k) {
  switch (k) {
    case kAllreduce:
      return "allreduce";
    case kAllgather:
      return "allgather";
    case kBroadcast:
      return "broadcast";
    case kBarrier:
      return "barrier";
  }
  return "?";
}

template <typename T>
void reduce_slice(const std::vector<const void*>& inputs, ReduceOp op, int64_t begin, int64_t end, void* out) {
  T* o = static_cast<T*>(out);
  for (int64_t i = begin; i < end; ++i) {
    T acc = static_cast<const T*>(inputs[0])[i];
    for (size_t r = 1; r < inputs.size(); ++r) {
      T v = static_cast<const T*>(inputs[r])[i];
      if (op == ReduceOp::Sum)
        acc = static_cast<T>(acc + v);  // int8 wraps, as documented
      else
        acc = v > acc ? v : acc;
    }
    o[i] = acc;
  }
}

void reduce_slice_f16(const std::vector<const void*>& inputs, int64_t begin, int64_t end, void* out) {
  half_bits* o = static_cast<half_bits*>(out);
  for (int64_t i = begin; i < end; ++i) {
    float acc = 0.f;
    for (const void* in : inputs) acc += half_to_float(static_cast<const half_bits*>(in)[i]);
    o[i] = float_to_half(acc);
  }
}

void check_host(const std::string& who, Device device) {
  TG_CHECK(device.is_cpu(), "{}: buffers on {} are not supported (host memory only)", who, device.str());
}

}  // namespace

LocalGroup::LocalGroup(int size) : size_(size) {
  TG_CHECK(size >= 1, "local group of {} participants; need at least 1", size);
  posts_.resize(size);
  for (int r = 0; r < size; ++r) comms_.push_back(std::make_unique<LocalCommunicator>(*this, r));
}

LocalGroup::~LocalGroup() = default;

LocalCommunicator& LocalGroup::communicator(int rank) {
  TG_CHECK(rank >= 0 && rank < size_, "local group: rank {} outside [0, {})", rank, size_);
  return *comms_[rank];
}

void LocalGroup::arrive_and_wait(const std::function<void()>& last) {
  std::unique_lock<std::mutex> lock(mu_);
  if (aborted_) TG_THROW("local group aborted: {}", abort_reason_);
  const uint64_t gen = generation_;
  if (++arrived_ == size_) {
    if (last) last();
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
    return;
  }
  cv_.wait(lock, [&] { return generation_ != gen || aborted_; });
  if (generation_ == gen) TG_THROW("local group aborted: {}", abort_reason_);
}

void LocalGroup::abort(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!aborted_) abort_reason_ = reason;
  aborted_ = true;
  cv_.notify_all();
}

void LocalGroup::reset_abort() {
  std::lock_guard<std::mutex> lock(mu_);
  aborted_ = false;
  abort_reason_.clear();
  arrived_ = 0;
  ++generation_;
}

void LocalGroup::run_all(const std::function<void(LocalCommunicator&)>& fn) {
  std::mutex err_mu;
  std::exception_ptr first;
  auto body = [&](int r) {
    try {
      fn(*comms_[r]);
    } catch (const std::exception& e) {
      {
        std::lock_guard<std::mutex> lock(err_mu);
        if (!first) first = std::current_exception();
      }
      abort(fmt::format("rank {} failed: {}", r, e.what()));
    } catch (...) {
      {
        std::lock_guard<std::mutex> lock(err_mu);
        if (!first) first = std::current_exception();
      }
      abort(fmt::format("rank {} failed", r));
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(size_ - 1);
  for (int r = 1; r < size_; ++r) threads.emplace_back(body, r);
  body(0);
  for (auto& t : threads) t.join();
  if (first) {
    reset_abort();
    std::rethrow_exception(first);
  }
}

std::string LocalCommunicator::name() const { return fmt::format("local (rank {} of {})", rank_, size()); }

// Posts this rank's arguments and meets the others; the last arriver checks that all posts agree and sizes
// the scratch buffer. Every rank throws the same mismatch error.
void LocalCommunicator::post_and_check(const LocalGroup::Post& p) {
  LocalGroup& g = group_;
  {
    std::lock_guard<std::mutex> lock(g.mu_);
    g.posts_[rank_] = p;
  }
  g.arrive_and_wait([&g] {
    g.mismatch_.clear();
    const LocalGroup::Post& a = g.posts_[0];
    for (int r = 1; r < g.size_; ++r) {
      const LocalGroup::Post& b = g.posts_[r];
      if (b.kind != a.kind || b.count != a.count || b.bytes != a.bytes || b.dtype != a.dtype || b.op != a.op ||
          b.root != a.root) {
        g.mismatch_ = fmt::format(
            "local group: rank {} called {} ({} bytes, {} elements of {}, op {}, root {}) while rank 0 called {} "
            "({} bytes, {} elements of {}, op {}, root {})",
            r, kind_name(b.kind), b.bytes, b.count, dtype_name(b.dtype), reduce_op_name(b.op), b.root,
            kind_name(a.kind), a.bytes, a.count, dtype_name(a.dtype), reduce_op_name(a.op), a.root);
        return;
      }
    }
    if (a.kind == kAllreduce && g.scratch_.size() < a.bytes) g.scratch_.resize(a.bytes);
  });
  if (!g.mismatch_.empty()) TG_THROW("{}", g.mismatch_);
}

void LocalCommunicator::allreduce_impl(void* buffer, int64_t count, DType dtype, ReduceOp op, Device device) {
  check_host(name(), device);
  const size_t bytes = static_cast<size_t>(count) * dtype_size(dtype);
  LocalGroup::Post p;
  p.send = buffer;
  p.count = count;
  p.bytes = bytes;
  p.dtype = dtype;
  p.op = op;
  p.kind = kAllreduce;
  post_and_check(p);
  LocalGroup& g = group_;
  // Slice rank_ of the elements, reduced over all ranks in rank order into the shared scratch.
  const int n = g.size_;
  const int64_t begin = count * rank_ / n, end = count * (rank_ + 1) / n;
  std::vector<const void*> inputs(n);
  for (int r = 0; r < n; ++r) inputs[r] = g.posts_[r].send;
  void* out = g.scratch_.data();
  switch (dtype) {
    case DType::F32:
      reduce_slice<float>(inputs, op, begin, end, out);
      break;
    case DType::I8:
      reduce_slice<int8_t>(inputs, op, begin, end, out);
      break;
    case DType::I32:
      reduce_slice<int32_t>(inputs, op, begin, end, out);
      break;
    case DType::F16:
      reduce_slice_f16(inputs, begin, end, out);
      break;
    default:
      TG_THROW("{}: all-reduce over {} is not supported", name(), dtype_name(dtype));
  }
  g.arrive_and_wait(nullptr);  // all slices written; no rank reads the inputs any more
  if (bytes) std::memcpy(buffer, g.scratch_.data(), bytes);
  // The next collective's first barrier keeps the scratch alive until every rank has copied it.
}

void LocalCommunicator::allgather_impl(const void* send, void* recv, size_t send_bytes, Device device) {
  check_host(name(), device);
  LocalGroup::Post p;
  p.send = send;
  p.bytes = send_bytes;
  p.kind = kAllgather;
  post_and_check(p);
  LocalGroup& g = group_;
  for (int r = 0; r < g.size_; ++r)
    if (send_bytes) std::memcpy(static_cast<uint8_t*>(recv) + r * send_bytes, g.posts_[r].send, send_bytes);
  g.arrive_and_wait(nullptr);  // senders may reuse their buffers only after everyone has copied
}

void LocalCommunicator::broadcast_impl(void* buffer, size_t bytes, int root, Device device) {
  check_host(name(), device);
  LocalGroup::Post p;
  p.send = buffer;
  p.bytes = bytes;
  p.root = root;
  p.kind = kBroadcast;
  post_and_check(p);
  LocalGroup& g = group_;
  if (rank_ != root && bytes) std::memcpy(buffer, g.posts_[root].send, bytes);
  g.arrive_and_wait(nullptr);
}

void LocalCommunicator::barrier_impl() {
  LocalGroup::Post p;
  p.kind = kBarrier;
  post_and_check(p);
}

}  // namespace tg
