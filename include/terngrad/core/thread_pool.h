// ThreadPool: a fixed set of workers for host loops that run beside (not inside) the CPU backend: the
// gradient codec and tests. (The CPU backend's own loops share oneDNN's OpenMP threads instead, so two pools
// never fight over the cores.)
// parallel_for splits [0, n) into contiguous chunks, one per thread (the caller runs one of them), and
// returns when all are done; exceptions thrown by a chunk are rethrown in the caller.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tg {

class ThreadPool {
 public:
  explicit ThreadPool(int num_threads);  // total threads including the caller; >= 1
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }

  // fn(begin, end) over contiguous chunks of [0, n); chunks smaller than min_chunk are not split further.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t min_chunk = 1024);

 private:
  void worker_loop(int id);

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t job_n_ = 0;
  int job_chunks_ = 0;
  uint64_t generation_ = 0;
  int pending_ = 0;
  std::exception_ptr error_;
  bool stop_ = false;
};

}  // namespace tg
