// Tests of HealthWatch (comm/health_watch.h), the watch that turns a communicator library's own error (NCCL's async
// error) into an abort of the process's groups: real threads and probes. A probe that starts failing is reported
// once, with its reason, and nothing is probed after it; healthy probes are asked every period and never reported;
// a probe that throws is a failure naming the exception; stop() wakes a watch with a long period at once, and after
// it no probe runs.
#include "terngrad/comm/health_watch.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "terngrad/core/error.h"

namespace tg {
namespace {

using Clock = std::chrono::steady_clock;

// Waits (at most a minute: a watch that never acts fails the test instead of hanging it) until `done`.
template <typename F>
bool eventually(F done) {
  const auto end = Clock::now() + std::chrono::seconds(60);
  while (!done()) {
    if (Clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

struct Failures {
  std::mutex mu;
  std::vector<std::string> reasons;
  void add(const std::string& why) {
    std::lock_guard<std::mutex> lock(mu);
    reasons.push_back(why);
  }
  std::vector<std::string> get() {
    std::lock_guard<std::mutex> lock(mu);
    return reasons;
  }
};

TEST(HealthWatch, AProbeThatStartsFailingIsReportedOnceAndEndsTheWatch) {
  std::atomic<int> healthy_polls{0}, failing_polls{0};
  Failures failures;
  HealthWatch watch(
      {[&] {
         healthy_polls.fetch_add(1);
         return std::string();
       },
       [&]() -> std::string {
         return failing_polls.fetch_add(1) < 3 ? "" : "nccl (rank 1 of 2, cuda:1): ncclRemoteError (peer gone)";
       }},
      0.001, [&](const std::string& why) { failures.add(why); });
  ASSERT_TRUE(eventually([&] { return !failures.get().empty(); }));
  const int polls_at_failure = failing_polls.load();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // 50 periods: none may probe again
  watch.stop();
  EXPECT_EQ(failures.get(), std::vector<std::string>{"nccl (rank 1 of 2, cuda:1): ncclRemoteError (peer gone)"});
  EXPECT_EQ(failing_polls.load(), 4);
  EXPECT_EQ(polls_at_failure, 4);
  EXPECT_EQ(healthy_polls.load(), 4);  // asked before the failing one in every period
}

TEST(HealthWatch, HealthyProbesAreAskedEveryPeriodAndNeverReported) {
  std::atomic<int> polls{0};
  Failures failures;
  HealthWatch watch({[&] {
                      polls.fetch_add(1);
                      return std::string();
                    }},
                    0.001, [&](const std::string& why) { failures.add(why); });
  ASSERT_TRUE(eventually([&] { return polls.load() >= 20; }));
  watch.stop();
  const int after_stop = polls.load();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(polls.load(), after_stop) << "a probe ran after stop()";
  EXPECT_TRUE(failures.get().empty());
}

TEST(HealthWatch, AProbeThatThrowsIsAFailureNamingTheException) {
  Failures failures;
  HealthWatch watch({[]() -> std::string { throw std::runtime_error("cudaErrorLaunchFailure on cuda:0"); }}, 0.001,
                    [&](const std::string& why) { failures.add(why); });
  ASSERT_TRUE(eventually([&] { return !failures.get().empty(); }));
  watch.stop();
  EXPECT_EQ(failures.get(), std::vector<std::string>{"cudaErrorLaunchFailure on cuda:0"});
}

TEST(HealthWatch, StopWakesAWatchWithALongPeriod) {
  std::atomic<int> polls{0};
  const auto start = Clock::now();
  {
    HealthWatch watch({[&] {
                        polls.fetch_add(1);
                        return std::string();
                      }},
                      3600, [](const std::string&) {});
    watch.stop();
    watch.stop();  // idempotent; the destructor stops a third time
  }
  // Not a timing target: a watch that slept out its hour would never get here within ctest's limit.
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 60.0);
  EXPECT_EQ(polls.load(), 0);
}

TEST(HealthWatch, BadSettingsAreRefused) {
  EXPECT_THROW(HealthWatch({}, 0, [](const std::string&) {}), Error);
  EXPECT_THROW(HealthWatch({}, 1, nullptr), Error);
}

}  // namespace
}  // namespace tg
