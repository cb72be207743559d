// ProgressWatchdog: progress stamps from the step and the collectives, a thread that notices their absence.
#include "terngrad/comm/progress_watchdog.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "terngrad/comm/communicator.h"
#include "terngrad/core/error.h"
#include "terngrad/core/human_units.h"

namespace tg {

namespace {
int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

ProgressWatchdog::ProgressWatchdog(double timeout_s, Stall on_stall)
    : timeout_s_(timeout_s), on_stall_(std::move(on_stall)) {
  TG_CHECK(timeout_s > 0 && timeout_s < 1e7, "--collective_timeout {} must be a positive number of seconds", timeout_s);
  TG_CHECK(on_stall_ != nullptr, "progress watchdog: no action on a stall");
  last_ns_.store(now_ns(), std::memory_order_relaxed);
  thread_ = std::thread([this] { run(); });
}

ProgressWatchdog::~ProgressWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void ProgressWatchdog::arm() {
  last_ns_.store(now_ns(), std::memory_order_relaxed);
  armed_.store(true, std::memory_order_release);
}

void ProgressWatchdog::disarm() { armed_.store(false, std::memory_order_release); }

void ProgressWatchdog::step(int64_t s) {
  step_.store(s, std::memory_order_relaxed);
  last_ns_.store(now_ns(), std::memory_order_relaxed);
}

void ProgressWatchdog::progress() { last_ns_.store(now_ns(), std::memory_order_relaxed); }

void ProgressWatchdog::enter(const char* op, const Communicator* c, uint64_t bytes) {
  const int64_t t = now_ns();
  last_ns_.store(t, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(mu_);
  op_ = op, comm_ = c, bytes_ = bytes, entered_ns_ = t;
  ++in_flight_;
}

void ProgressWatchdog::leave() {
  last_ns_.store(now_ns(), std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(mu_);
  in_flight_ = std::max(0, in_flight_ - 1);
}

// The stall's line (under mu_).
std::string ProgressWatchdog::why(int64_t now) const {
  const double idle = static_cast<double>(now - last_ns_.load(std::memory_order_relaxed)) * 1e-9;
  std::string where;
  if (in_flight_ > 0 && comm_ != nullptr)
    where = fmt::format("waiting in {} of {} on {} for {:.1f} s", op_, human_bytes(double(bytes_)), comm_->name(),
                        static_cast<double>(now - entered_ns_) * 1e-9);
  else
    where = "outside a collective (a peer's or this process's computation, or its input)";
  return fmt::format("step {} made no progress for {:.1f} s (--collective_timeout {}): {}",
                     step_.load(std::memory_order_relaxed), idle, timeout_s_, where);
}

void ProgressWatchdog::run() {
  const auto period = std::chrono::duration<double>(std::min(timeout_s_ / 4, 1.0));
  const int64_t timeout_ns = static_cast<int64_t>(timeout_s_ * 1e9);
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, period, [this] { return stop_; });
    if (stop_) break;
    const int64_t now = now_ns();
    if (!armed_.load(std::memory_order_acquire) || fired_.load(std::memory_order_acquire) ||
        now - last_ns_.load(std::memory_order_relaxed) < timeout_ns)
      continue;
    fired_.store(true, std::memory_order_release);
    const std::string line = why(now);
    lock.unlock();
    try {
      on_stall_(line);
    } catch (...) {  // the action is an abort: nothing more this thread could do
    }
    lock.lock();
  }
}

}  // namespace tg
