// HealthWatch: a thread that asks the communicators of this process, once a period, whether their library has seen
// an error on its own (NCCL's ncclCommGetAsyncError: a peer's connection lost, a remote failure) and on the first
// one calls `on_failure(why)` (ReplicaGroups::abort: every communicator of the process aborted, so no replica
// stays blocked in a device wait on a collective that will never finish; each replica then fails on its next call
// naming why). NCCL leaves its kernels running after such an error until the application aborts them: without the
// watch a rank whose peer died or hung behind a network failure waits forever.
//
// A probe returns "" while healthy (also while busy or already aborted) and a one-line reason otherwise; a probe
// that throws counts as failed, its message the reason. After the first failure the watch stops probing. stop()
// (and the destructor) wakes the thread and joins it: call it before the probed objects go.
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace tg {

class HealthWatch {
 public:
  using Probe = std::function<std::string()>;

  HealthWatch(std::vector<Probe> probes, double period_seconds, std::function<void(const std::string&)> on_failure);
  ~HealthWatch();  // stop()
  HealthWatch(const HealthWatch&) = delete;
  HealthWatch& operator=(const HealthWatch&) = delete;

  void stop();  // idempotent; returns once the thread has ended (an on_failure running now finishes first)

 private:
  void run();

  std::vector<Probe> probes_;
  double period_seconds_;
  std::function<void(const std::string&)> on_failure_;
  std::mutex mu_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace tg
