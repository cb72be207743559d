// CommunicationThread: one thread that runs a process's collectives in the order they are posted, so the
// compute thread can go on with backward while gradients travel (the background thread of DDP and Horovod).
//
// A job is a function pointer with a context and an integer argument (no allocation per post). The poster
// leaves the job's buffers alone until done(ticket) says it finished. Every process must post the same
// collectives in the same order: MPI matches collectives by their order, not by name. A job that throws
// keeps its exception; later jobs are skipped, and done()/wait() rethrow it on the compute thread.
//
// The thread only waits on the network (the communicators' waits sleep instead of spinning): CPU work such
// as encoding stays on the compute thread's team (terngrad/core/parallel.h).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace tg {

// CPU time (user + system) the calling thread has used so far, in seconds (CLOCK_THREAD_CPUTIME_ID).
double thread_cpu_seconds();

class CommunicationThread {
 public:
  using Clock = std::chrono::steady_clock;
  struct Job {
    void (*run)(void* context, int64_t arg) = nullptr;
    void* context = nullptr;
    int64_t arg = 0;
  };

  // capacity: the most jobs posted and not yet known to be done (post() refuses more).
  explicit CommunicationThread(int capacity);
  // Waits (up to 2 s) for the posted jobs, then joins the thread. A thread still inside a job after that (a
  // peer that never came: the process is failing, and terngrad-train aborts the MPI job right after) is
  // detached instead of waited for forever.
  ~CommunicationThread();
  CommunicationThread(const CommunicationThread&) = delete;
  CommunicationThread& operator=(const CommunicationThread&) = delete;

  // Queues a job; returns its ticket (0, 1, 2, ... in post order).
  uint64_t post(const Job& job);
  // Whether job `ticket` has finished (rethrows the first job error).
  bool done(uint64_t ticket);
  // Blocks until job `ticket` has finished (rethrows the first job error).
  void wait(uint64_t ticket);
  // Start and end of a finished job that is among the last `capacity` posted.
  Clock::time_point begin_time(uint64_t ticket) const;
  Clock::time_point end_time(uint64_t ticket) const;
  // The CPU time (user + system, as the kernel charges this thread: protocol work in its system calls included)
  // the job took, of a finished job among the last `capacity` posted.
  double cpu_seconds(uint64_t ticket) const;

 private:
  struct Slot {
    Job job;
    Clock::time_point begin, end;
    double cpu_seconds = 0;
  };
  struct State {
    std::mutex mu;
    std::condition_variable work_cv, done_cv;
    std::vector<Slot> slots;
    uint64_t posted = 0, completed = 0;
    bool stop = false;
    std::exception_ptr error;
  };
  static void loop(std::shared_ptr<State> state);
  void rethrow_locked();

  std::shared_ptr<State> state_;  // shared with the thread, which may outlive a failing owner
  std::thread thread_;
};

}  // namespace tg
