// AbortGate: the owner's library calls and polls serialised with an abort from any thread (see the header).
#include "terngrad/comm/abort_gate.h"

#include <algorithm>
#include <ctime>

namespace tg {

void AbortGate::throw_if_aborted() const {
  if (aborted_.load(std::memory_order_acquire)) TG_THROW("{}: the communicator was aborted ({})", name_, why_);
}

void PollBackoff::pause() {
  if (polls_++ < kSpinPolls) return;
  sleep_ns_ = sleep_ns_ == 0 ? kSleepMinNs : std::min(2 * sleep_ns_, kSleepCapNs);
  timespec ts{0, sleep_ns_};
  nanosleep(&ts, nullptr);
}

void AbortGate::wait_until(const std::function<bool()>& poll) {
  for (PollBackoff backoff;; backoff.pause()) {
    std::lock_guard<std::mutex> lock(*mu_);
    throw_if_aborted();
    if (poll()) return;
  }
}

bool AbortGate::abort(const std::function<void()>& action, const std::string& why) {
  std::lock_guard<std::mutex> lock(*mu_);
  if (aborted_.load(std::memory_order_acquire)) return false;
  why_ = why.empty() ? "no reason given" : why;
  aborted_.store(true, std::memory_order_release);  // before the action: a throwing action still leaves it aborted
  action();
  return true;
}

}  // namespace tg
