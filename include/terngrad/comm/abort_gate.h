// AbortGate: a communicator's calls into a library that is not thread-safe (NCCL: "multiple threads should use
// separate communicator objects") against an abort that may come from any thread (a failed replica aborts every
// group of its process: ReplicaGroups::abort; the health watch does on a library's own error).
//
// The owner thread makes every library call inside call(); a call the library leaves in progress (NCCL's non-blocking
// communicators return ncclInProgress instead of blocking) is waited for with wait_until(), which holds the gate only
// for each poll and pauses between polls (PollBackoff). abort(), from any thread, decides at once: every later call()
// or wait_until() of the owner throws naming the communicator and why. Its action (ncclCommAbort) runs once and never
// beside a library call or poll: at once when the gate is free within the abort's bound (kAbortWaitSeconds), else, if a
// library call holds the gate longer (an enqueue that blocks), on a thread of the gate's own as soon as that call
// returns; abort() itself returns within the bound either way, so the caller goes on to abort the process's other
// communicators. settle_abort() waits for a pending action (a communicator's teardown calls it before it frees what the
// action uses; the destructor does too).
//
// Several gates may share one mutex: NCCL forbids calls on independent communicators of the same GPU from several
// threads at once as well, so the communicators of one GPU share their device's (nccl_communicator.cc); each gate
// keeps its own aborted state.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

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
  using Mutex = std::timed_mutex;
  // How long abort() waits for a library call holding the gate before it leaves the action to the gate's thread.
  static constexpr double kAbortWaitSeconds = 1;

  // `name` names the communicator in the errors ("nccl (rank 3 of 16, cuda:3)"); `mutex`: the one it shares with
  // other gates (a new one by default); `abort_wait_seconds`: abort()'s bound (> 0).
  explicit AbortGate(std::string name, std::shared_ptr<Mutex> mutex = std::make_shared<Mutex>(),
                     double abort_wait_seconds = kAbortWaitSeconds);
  ~AbortGate();  // settle_abort()
  AbortGate(const AbortGate&) = delete;
  AbortGate& operator=(const AbortGate&) = delete;

  // Runs f with the gate held and returns its result; throws instead once aborted.
  template <typename F>
  decltype(auto) call(F&& f) {
    std::lock_guard<Mutex> lock(*mu_);
    throw_if_aborted();
    return f();
  }
  // Calls poll (true: done) with the gate held for each call, released between calls, until it returns true; throws
  // once aborted (a poll that throws ends the wait with its error).
  void wait_until(const std::function<bool()>& poll);
  // The same with a deadline: false when `seconds` (> 0) passed before poll returned true.
  bool wait_until(const std::function<bool()>& poll, double seconds);
  // Decides the abort (from then on call() and wait_until() throw naming `why`) and runs `action` once, never beside a
  // call or poll of a gate sharing the mutex (see the file comment). Returns false, and runs nothing, when already
  // aborted. An action run at once may throw (the abort stays decided); one run later has its error dropped.
  bool abort(const std::function<void()>& action, const std::string& why);
  bool aborted() const { return aborted_.load(std::memory_order_acquire); }
  // Returns once the action of a decided abort has run (at once when none is pending).
  void settle_abort();

 private:
  void throw_if_aborted() const;

  std::shared_ptr<Mutex> mu_;
  std::string name_;
  double abort_wait_seconds_;
  std::atomic<bool> aborted_{false};
  std::string why_;  // written once, before aborted_ is set (under state_mu_)
  std::mutex state_mu_;
  std::condition_variable action_ran_;
  bool action_pending_ = false;  // under state_mu_: the action waits for the gate on action_thread_
  std::thread action_thread_;
};

}  // namespace tg
