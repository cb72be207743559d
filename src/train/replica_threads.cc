// ReplicaThreads: one host thread per replica (see the header).
#include "terngrad/train/replica_threads.h"

#include "terngrad/core/error.h"

namespace tg {

ReplicaThreads::ReplicaThreads(int replicas, const std::function<void(int)>& setup) : replicas_(replicas) {
  TG_CHECK(replicas >= 1, "replica threads: {} replicas (at least 1)", replicas);
  setup(0);
  std::exception_ptr setup_error;
  for (int r = 1; r < replicas; ++r) {
    threads_.emplace_back([this, r, &setup, &setup_error] {
      try {
        setup(r);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu_);
        if (!setup_error) setup_error = std::current_exception();
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        ++started_;
      }
      done_cv_.notify_all();
      loop(r);
    });
  }
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return started_ == replicas - 1; });
  if (setup_error) {
    lock.unlock();
    shutdown();  // the destructor does not run for an object whose constructor throws
    std::rethrow_exception(setup_error);
  }
}

ReplicaThreads::~ReplicaThreads() { shutdown(); }

void ReplicaThreads::shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return;
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : threads_)
    if (t.joinable()) t.join();
}

void ReplicaThreads::record_error(std::exception_ptr e) {
  bool first;
  {
    std::lock_guard<std::mutex> lock(mu_);
    first = !error_;
    if (first) error_ = e;
  }
  if (first && on_error_) on_error_();
}

void ReplicaThreads::loop(int r) {
  uint64_t seen = 0;
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      job = job_;
    }
    try {
      job.call(job.fn, r);
    } catch (...) {
      record_error(std::current_exception());
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      --pending_;
    }
    done_cv_.notify_all();
  }
}

void ReplicaThreads::run_job(const Job& job) {
  if (replicas_ > 1) {
    std::lock_guard<std::mutex> lock(mu_);
    error_ = nullptr;
    job_ = job;
    pending_ = replicas_ - 1;
    ++generation_;
  } else {
    error_ = nullptr;
  }
  work_cv_.notify_all();
  try {
    job.call(job.fn, 0);
  } catch (...) {
    record_error(std::current_exception());
  }
  std::exception_ptr error;
  {
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [&] { return pending_ == 0; });
    job_ = Job{};
    error = error_;
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace tg
