// ReplicaThreads: every replica's job runs on its own thread at the same time, setup runs on the thread that
// later runs the replica's jobs, a failing replica reaches on_error once and its error is rethrown after all
// replicas returned, and the threads are reused run after run.
#include "terngrad/train/replica_threads.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "terngrad/core/error.h"

namespace tg {
namespace {

TEST(ReplicaThreads, JobsRunConcurrentlyOnTheThreadOfTheirSetup) {
  constexpr int kReplicas = 4;
  std::vector<std::thread::id> setup_ids(kReplicas), job_ids(kReplicas);
  ReplicaThreads threads(kReplicas, [&](int r) { setup_ids[r] = std::this_thread::get_id(); });
  EXPECT_EQ(threads.size(), kReplicas);
  EXPECT_EQ(setup_ids[0], std::this_thread::get_id());  // replica 0: the caller
  for (int round = 0; round < 3; ++round) {
    // A barrier inside the job: it completes only if all four jobs run at the same time.
    std::mutex mu;
    std::condition_variable cv;
    int arrived = 0;
    threads.run([&](int r) {
      job_ids[r] = std::this_thread::get_id();
      std::unique_lock<std::mutex> lock(mu);
      ++arrived;
      cv.notify_all();
      ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(20), [&] { return arrived == kReplicas; }))
          << "replica " << r << " ran alone";
    });
    EXPECT_EQ(job_ids, setup_ids) << "round " << round;
    for (int r = 1; r < kReplicas; ++r) EXPECT_NE(job_ids[r], job_ids[0]);
  }
}

TEST(ReplicaThreads, OneFailureCallsOnErrorOnceAndIsRethrownAfterAllReturned) {
  ReplicaThreads threads(3, [](int) {});
  std::atomic<int> on_error_calls{0}, finished{0};
  std::atomic<bool> aborted{false};
  threads.set_on_error([&] {
    ++on_error_calls;
    aborted = true;  // what the trainer does: abort the communicator the others wait in
  });
  try {
    threads.run([&](int r) {
      if (r == 1) TG_THROW("replica {} failed", r);
      // The others wait "in a collective" until the abort releases them, then fail too.
      for (int i = 0; i < 20000 && !aborted; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      ++finished;
      if (aborted) TG_THROW("replica {}: aborted", r);
    });
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("replica 1 failed"), std::string::npos) << e.what();
  }
  EXPECT_EQ(on_error_calls.load(), 1);
  EXPECT_EQ(finished.load(), 2);
  // The threads still work after a failed run.
  std::atomic<int> ran{0};
  threads.run([&](int) { ++ran; });
  EXPECT_EQ(ran.load(), 3);
}

TEST(ReplicaThreads, AFailingSetupIsRethrownAndTheThreadsJoined) {
  try {
    ReplicaThreads threads(3, [](int r) {
      if (r == 2) TG_THROW("cuda:{}: no such device", r);
    });
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cuda:2"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ReplicaThreads(0, [](int) {}), Error);
}

}  // namespace
}  // namespace tg
