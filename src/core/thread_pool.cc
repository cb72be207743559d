// ThreadPool: generation-counted job hand-off; the caller runs chunk 0 itself.
#include "terngrad/core/thread_pool.h"

#include <algorithm>

#include "terngrad/core/error.h"

namespace tg {

ThreadPool::ThreadPool(int num_threads) {
  TG_CHECK(num_threads >= 1, "thread pool needs at least 1 thread, got {}", num_threads);
  for (int i = 1; i < num_threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

static void chunk_range(int64_t n, int chunks, int id, int64_t* b, int64_t* e) {
  int64_t base = n / chunks, rem = n % chunks;
  *b = id * base + std::min<int64_t>(id, rem);
  *e = *b + base + (id < rem ? 1 : 0);
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t min_chunk) {
  if (n <= 0) return;
  int chunks = static_cast<int>(std::min<int64_t>(num_threads(), std::max<int64_t>(1, n / std::max<int64_t>(1, min_chunk))));
  if (chunks <= 1) {
    fn(0, n);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &fn;
    job_n_ = n;
    job_chunks_ = chunks;
    pending_ = chunks - 1;
    error_ = nullptr;
    ++generation_;
  }
  work_cv_.notify_all();
  std::exception_ptr mine;
  try {
    int64_t b, e;
    chunk_range(n, chunks, 0, &b, &e);
    fn(b, e);
  } catch (...) {
    mine = std::current_exception();
  }
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [this] { return pending_ == 0; });
  job_ = nullptr;
  if (mine) std::rethrow_exception(mine);
  if (error_) std::rethrow_exception(error_);
}

void ThreadPool::worker_loop(int id) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int64_t, int64_t)>* job;
    int64_t n;
    int chunks;
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      job = job_;
      n = job_n_;
      chunks = job_chunks_;
    }
    if (id < chunks) {
      std::exception_ptr err;
      try {
        int64_t b, e;
        chunk_range(n, chunks, id, &b, &e);
        (*job)(b, e);
      } catch (...) {
        err = std::current_exception();
      }
      std::lock_guard<std::mutex> lock(mu_);
      if (err && !error_) error_ = err;
      if (--pending_ == 0) done_cv_.notify_all();
    }
  }
}

}  // namespace tg
