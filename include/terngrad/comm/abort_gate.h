// AbortGate: a communicator's calls into a library that is not thread-safe (NCCL: "multiple threads should use
// separate communicator objects") against an abort that may come from any thread (a failed replica aborts every
// group of its process: ReplicaGroups::abort).
//
// The owner thread makes every library call inside call(); a call the library leaves in progress (NCCL's non-blocking
// communicators return ncclInProgress instead of blocking) is waited for with wait_until(), which holds the gate only
// for each poll and pauses between polls (PollBackoff). So abort(), from any thread, gets in between two polls: it
// never waits for a collective, never runs beside a library call of the owner, runs its action once, and every later
// call() or wait_until() throws naming the communicator and why it was aborted.
//
// Several gates may share one mutex: NCCL forbids calls on independent communicators of the same GPU from several
// threads at once as well, so the communicators of one GPU share their device's (nccl_communicator.cc); each gate
// keeps its own aborted state.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "terngrad/core/error.h"

namespace tg {

// The pause between two polls of a wait: kSpinPolls back to back, then sleeps from kSleepMinNs doubling to
// kSleepCapNs, so a thread waiting for a slow collective leaves the core to others.
class PollBackoff {
 public:
  static constexpr int kSpinPolls = 200;
  static constexpr long kSleepMinNs = 10'000;
  static constexpr long kSleepCapNs = 500'000;
  void pause();

 private:
  int polls_ = 0;
  long sleep_ns_ = 0;
};

class AbortGate {
 public:
  // `name` names the communicator in the errors ("nccl (rank 3 of 16, cuda:3)"); `mutex`: the one it shares with
  // other gates (a new one by default).
  explicit AbortGate(std::string name, std::shared_ptr<std::mutex> mutex = std::make_shared<std::mutex>())
      : mu_(std::move(mutex)), name_(std::move(name)) {}
  AbortGate(const AbortGate&) = delete;
  AbortGate& operator=(const AbortGate&) = delete;

  // Runs f with the gate held and returns its result; throws instead once aborted.
  template <typename F>
  decltype(auto) call(F&& f) {
    std::lock_guard<std::mutex> lock(*mu_);
    throw_if_aborted();
    return f();
  }
  // Calls poll (true: done) with the gate held for each call, released between calls, until it returns true; throws
  // once aborted (a poll that throws ends the wait with its error).
  void wait_until(const std::function<bool()>& poll);
  // Runs `action` once, with the gate held (after the owner's call or poll running now, if any); from then on call()
  // and wait_until() throw naming `why`. Returns false (and runs nothing) when already aborted.
  bool abort(const std::function<void()>& action, const std::string& why);
  bool aborted() const { return aborted_.load(std::memory_order_acquire); }

 private:
  void throw_if_aborted() const;  // with mu_ held

  std::shared_ptr<std::mutex> mu_;
  std::atomic<bool> aborted_{false};
  std::string name_;
  std::string why_;  // written once under mu_, before aborted_
};

}  // namespace tg
