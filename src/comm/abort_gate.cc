// AbortGate: the owner's library calls and polls serialised with an abort from any thread (see the header).
#include "terngrad/comm/abort_gate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>

namespace tg {

namespace {
using Clock = std::chrono::steady_clock;
Clock::duration seconds_to_duration(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}
}  // namespace

void PollBackoff::pause() {
  if (polls_++ < kSpinPolls) return;
  sleep_ns_ = sleep_ns_ == 0 ? kSleepMinNs : std::min(2 * sleep_ns_, kSleepCapNs);
  timespec ts{0, sleep_ns_};
  nanosleep(&ts, nullptr);
}

AbortGate::AbortGate(std::string name, std::shared_ptr<Mutex> mutex, double abort_wait_seconds)
    : mu_(std::move(mutex)), name_(std::move(name)), abort_wait_seconds_(abort_wait_seconds) {
  TG_CHECK(mu_ != nullptr, "abort gate {}: no mutex", name_);
  TG_CHECK(std::isfinite(abort_wait_seconds) && abort_wait_seconds > 0,
           "abort gate {}: the abort's bound must be a positive number of seconds, got {}", name_, abort_wait_seconds);
}

AbortGate::~AbortGate() { settle_abort(); }

void AbortGate::throw_if_aborted() const {
  if (aborted_.load(std::memory_order_acquire)) TG_THROW("{}: the communicator was aborted ({})", name_, why_);
}

void AbortGate::wait_until(const std::function<bool()>& poll) {
  for (PollBackoff backoff;; backoff.pause()) {
    std::lock_guard<Mutex> lock(*mu_);
    throw_if_aborted();
    if (poll()) return;
  }
}

bool AbortGate::wait_until(const std::function<bool()>& poll, double seconds) {
  TG_CHECK(std::isfinite(seconds) && seconds > 0, "abort gate {}: a wait's deadline must be positive, got {} s", name_,
           seconds);
  const Clock::time_point end = Clock::now() + seconds_to_duration(seconds);
  for (PollBackoff backoff;; backoff.pause()) {
    {
      std::lock_guard<Mutex> lock(*mu_);
      throw_if_aborted();
      if (poll()) return true;
    }
    if (Clock::now() >= end) return false;
  }
}

bool AbortGate::abort(const std::function<void()>& action, const std::string& why) {
  {
    std::lock_guard<std::mutex> state(state_mu_);
    if (aborted_.load(std::memory_order_acquire)) return false;
    why_ = why.empty() ? "no reason given" : why;
    aborted_.store(true, std::memory_order_release);  // before the action: a throwing action still leaves it aborted
  }
  if (mu_->try_lock_for(seconds_to_duration(abort_wait_seconds_))) {
    std::lock_guard<Mutex> lock(*mu_, std::adopt_lock);
    action();
    return true;
  }
  // A library call holds the gate past the bound: the action runs when it returns, and this caller goes on.
  std::lock_guard<std::mutex> state(state_mu_);
  action_pending_ = true;
  action_thread_ = std::thread([this, action] {
    {
      std::lock_guard<Mutex> lock(*mu_);
      try {
        action();
      } catch (...) {  // nobody to tell: the abort is decided, and every later call throws naming why
      }
    }
    std::lock_guard<std::mutex> done(state_mu_);
    action_pending_ = false;
    action_ran_.notify_all();
  });
  return true;
}

void AbortGate::settle_abort() {
  std::unique_lock<std::mutex> state(state_mu_);
  action_ran_.wait(state, [this] { return !action_pending_; });
  if (action_thread_.joinable()) {
    std::thread t = std::move(action_thread_);
    state.unlock();
    t.join();
  }
}

}  // namespace tg
