// StopSignals: the first SIGINT/SIGTERM sets the stop flag (the trainer finishes its step, saves a checkpoint
// and returns; a process waiting for input stops waiting). If the process is still running 10 s later (a long
// step, a collective waiting for a lost peer, a slow checkpoint write: the write is atomic, so cutting it
// leaves the previous checkpoint), it says so in one line and exits with 128 + signal. A second signal exits
// at once with 128 + signal (one a second or more after the first: a single request often arrives twice).
//
// Construct first thing in main, before any thread exists (MPI, OpenMP, the input pipeline): the signals are
// blocked in this thread and so in every thread created later, and one thread of ours receives them with
// sigtimedwait. No handler ever interrupts a computation, and no blocking call anywhere sees EINTR. This is
// the fix of the SIGINT heap corruption ("corrupted size vs. prev_size" in 1 of 10 stopped runs): oneDNN's
// JIT f32 GEMM kernels (the FC layers) point rsp into a heap workspace while they run, so the kernel wrote the
// signal frame of a handler run on that thread into the heap (oneDNN issue #4845, fixed upstream in 3.11).
#pragma once

#include <signal.h>

#include <atomic>
#include <thread>

namespace tg::apps {

class StopSignals {
 public:
  explicit StopSignals(const char* program, double grace_seconds = 10.0);
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  const std::atomic<bool>* flag() const { return &stop_; }
  int signal_number() const { return first_.load(); }

 private:
  [[noreturn]] void exit_now(int sig, const char* why);
  void watch();

  const char* program_;
  double grace_;
  sigset_t set_, old_mask_;
  std::atomic<bool> stop_{false}, done_{false};
  std::atomic<int> first_{0};
  std::thread thread_;
};

}  // namespace tg::apps
