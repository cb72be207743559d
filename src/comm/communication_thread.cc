// CommunicationThread: a FIFO of jobs run by one thread (see the header).
#include "terngrad/comm/communication_thread.h"

#include <time.h>

#include "terngrad/core/error.h"

namespace tg {

double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

CommunicationThread::CommunicationThread(int capacity) : state_(std::make_shared<State>()) {
  TG_CHECK(capacity >= 1, "communication thread: capacity {} must be >= 1", capacity);
  state_->slots.resize(static_cast<size_t>(capacity));
  thread_ = std::thread(loop, state_);
}

CommunicationThread::~CommunicationThread() {
  bool busy;
  {
    std::unique_lock<std::mutex> lock(state_->mu);
    state_->stop = true;
    state_->work_cv.notify_all();
    // Jobs every process posted finish on their own (the compute thread may have failed between posting and
    // collecting one): give them a moment so their buffers are not freed under them.
    state_->done_cv.wait_for(lock, std::chrono::seconds(2), [&] { return state_->completed == state_->posted; });
    busy = state_->completed < state_->posted;
  }
  if (busy)
    thread_.detach();
  else
    thread_.join();
}

void CommunicationThread::loop(std::shared_ptr<State> s) {
  std::unique_lock<std::mutex> lock(s->mu);
  for (;;) {
    s->work_cv.wait(lock, [&] { return s->stop || s->completed < s->posted; });
    if (s->completed == s->posted) return;  // stop requested and nothing left
    Slot& slot = s->slots[s->completed % s->slots.size()];
    const Job job = slot.job;
    const bool skip = s->error != nullptr;  // after a failure the rest of the queue is not run
    lock.unlock();
    const Clock::time_point begin = Clock::now();
    const double cpu_begin = thread_cpu_seconds();
    std::exception_ptr error;
    if (!skip) {
      try {
        job.run(job.context, job.arg);
      } catch (...) {
        error = std::current_exception();
      }
    }
    const Clock::time_point end = Clock::now();
    const double cpu = thread_cpu_seconds() - cpu_begin;
    lock.lock();
    slot.begin = begin;
    slot.end = end;
    slot.cpu_seconds = cpu;
    if (error && !s->error) s->error = error;
    ++s->completed;
    s->done_cv.notify_all();
  }
}

void CommunicationThread::rethrow_locked() {
  if (state_->error) std::rethrow_exception(state_->error);
}

uint64_t CommunicationThread::post(const Job& job) {
  TG_CHECK(job.run != nullptr, "communication thread: a job without a function");
  uint64_t ticket;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    rethrow_locked();
    TG_CHECK(state_->posted - state_->completed < state_->slots.size(),
             "communication thread: more than {} jobs in flight", state_->slots.size());
    ticket = state_->posted;
    state_->slots[ticket % state_->slots.size()].job = job;
    ++state_->posted;
  }
  state_->work_cv.notify_one();
  return ticket;
}

bool CommunicationThread::done(uint64_t ticket) {
  std::lock_guard<std::mutex> lock(state_->mu);
  rethrow_locked();
  return ticket < state_->completed;
}

void CommunicationThread::wait(uint64_t ticket) {
  std::unique_lock<std::mutex> lock(state_->mu);
  TG_CHECK(ticket < state_->posted, "communication thread: waiting for job {} of {} posted", ticket, state_->posted);
  state_->done_cv.wait(lock, [&] { return ticket < state_->completed || state_->error != nullptr; });
  rethrow_locked();
}

CommunicationThread::Clock::time_point CommunicationThread::begin_time(uint64_t ticket) const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->slots[ticket % state_->slots.size()].begin;
}

CommunicationThread::Clock::time_point CommunicationThread::end_time(uint64_t ticket) const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->slots[ticket % state_->slots.size()].end;
}

double CommunicationThread::cpu_seconds(uint64_t ticket) const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->slots[ticket % state_->slots.size()].cpu_seconds;
}

}  // namespace tg
