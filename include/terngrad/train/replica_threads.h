// ReplicaThreads: one host thread per replica (device) of a process, so the towers of several devices
// compute at the same time instead of one after another. Replica 0 runs on the calling (main) thread; replica
// r > 0 on its own persistent thread, which owns everything of that replica that is bound to a thread: its
// CUDA device and stream, or its share of the CPU cores (the OpenMP team of terngrad/core/parallel.h belongs
// to the thread that starts it, so every replica thread has its own team of --threads / replicas threads).
//
// run(fn) calls fn(r) for every replica concurrently and returns when all have returned. A replica that
// throws does not leave the others waiting on it forever: on_error (set by the trainer: it aborts the
// replicas' communicator, so a peer blocked in a collective gets an error too) is called once, every replica
// finishes its fn, and run rethrows the first error. No allocation per run.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace tg {

class ReplicaThreads {
 public:
  // setup(r) runs once on replica r's thread before any job (r = 0: on the caller, now).
  ReplicaThreads(int replicas, const std::function<void(int)>& setup);
  ~ReplicaThreads();
  ReplicaThreads(const ReplicaThreads&) = delete;
  ReplicaThreads& operator=(const ReplicaThreads&) = delete;

  int size() const { return replicas_; }
  // Called (once per run, on the failing replica's thread) when a replica's fn throws.
  void set_on_error(std::function<void()> on_error) { on_error_ = std::move(on_error); }
  // fn(r) on every replica at once; rethrows the first exception after all have returned. fn is called by
  // reference (no copy, no allocation).
  template <typename Fn>
  void run(Fn&& fn) {
    using F = std::remove_reference_t<Fn>;
    run_job(Job{[](void* f, int r) { (*static_cast<F*>(f))(r); }, const_cast<void*>(static_cast<const void*>(&fn))});
  }

 private:
  struct Job {
    void (*call)(void* fn, int replica) = nullptr;
    void* fn = nullptr;
  };
  void run_job(const Job& job);
  void loop(int r);
  void shutdown();  // stops and joins the replica threads (idempotent)
  void record_error(std::exception_ptr e);

  int replicas_;
  std::function<void()> on_error_;
  std::vector<std::thread> threads_;  // replicas 1..R-1
  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  Job job_;
  uint64_t generation_ = 0;  // incremented per run
  int pending_ = 0;          // replica threads still running the current job
  int started_ = 0;          // replica threads whose setup finished
  bool stop_ = false;
  std::exception_ptr error_;
};

}  // namespace tg
