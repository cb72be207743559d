// ProgressWatchdog: a run that stops making progress ends instead of hanging (--collective_timeout). A peer that dies
// with its machine, a link that goes down or a process that is stopped (SIGSTOP) sends no error a survivor could see:
// TCP never resets, NCCL's kernels keep waiting, and every survivor would wait in its collective forever. The watchdog
// lives above the communicators: the trainer arms it for the run and reports each step; every collective of a
// communicator it watches (Communicator::set_watchdog) enters and leaves it. When nothing of that happened for the
// timeout, one thread of its own calls `on_stall` once with one line naming the step, the collective in flight (its
// communicator, bytes and how long it has waited) or the last progress; the trainer then aborts its groups (MPI: the
// waits throw, naming the ranks they wait for; NCCL: ncclCommAbort; threads: the group fails).
// Nothing on the step's path allocates: enter/leave/step store numbers and a pointer; the line is made at a stall.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace tg {

class Communicator;

class ProgressWatchdog {
 public:
  using Stall = std::function<void(const std::string& why)>;
  // timeout_s > 0. The check runs every min(timeout / 4, 1 s).
  ProgressWatchdog(double timeout_s, Stall on_stall);
  ~ProgressWatchdog();  // stops its thread (never calls on_stall afterwards)
  ProgressWatchdog(const ProgressWatchdog&) = delete;
  ProgressWatchdog& operator=(const ProgressWatchdog&) = delete;

  void arm();     // from now on, a stall counts (progress now)
  void disarm();  // nothing counts until the next arm()
  // Progress: step s (1-based) begins; something of the step finished (a worker's backward).
  void step(int64_t s);
  void progress();
  // Progress: a collective begins (`op` a string literal: "all-reduce") on `c`, moving `bytes`; and ends. Any thread.
  void enter(const char* op, const Communicator* c, uint64_t bytes);
  void leave();
  bool fired() const { return fired_.load(std::memory_order_acquire); }
  double timeout_s() const { return timeout_s_; }

 private:
  void run();
  std::string why(int64_t now_ns) const;
  const double timeout_s_;
  const Stall on_stall_;
  std::atomic<bool> armed_{false}, fired_{false};
  std::atomic<int64_t> last_ns_{0};  // the last progress (monotonic ns)
  std::atomic<int64_t> step_{0};
  mutable std::mutex mu_;  // the collective in flight, and stop_
  const char* op_ = nullptr;
  const Communicator* comm_ = nullptr;
  uint64_t bytes_ = 0;
  int64_t entered_ns_ = 0;
  int in_flight_ = 0;
  bool stop_ = false;
  std::condition_variable cv_;
  std::thread thread_;
};

}  // namespace tg
