// ProgressWatchdog (--collective_timeout): it reports a stall once, with the step and the collective in flight (its
// communicator, bytes, how long) or that none was; steady progress and a disarmed watchdog never report; its thread
// stops at once whatever the timeout; a communicator's collectives enter and leave it. (The MPI side, a stopped
// process ending the job: scripts/fault_test.sh.)
#include "terngrad/comm/progress_watchdog.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "terngrad/comm/thread_communicator.h"
#include "terngrad/core/error.h"

namespace tg {
namespace {

using namespace std::chrono_literals;

struct Reports {
  std::mutex mu;
  std::vector<std::string> lines;
  ProgressWatchdog::Stall action() {
    return [this](const std::string& why) {
      std::lock_guard<std::mutex> lock(mu);
      lines.push_back(why);
    };
  }
  size_t count() {
    std::lock_guard<std::mutex> lock(mu);
    return lines.size();
  }
};

// Polls until `done` (at most 20 s: a loaded machine only makes it slower).
template <class F>
bool eventually(F done) {
  for (int i = 0; i < 2000 && !done(); ++i) std::this_thread::sleep_for(10ms);
  return done();
}

TEST(ProgressWatchdog, AStallInACollectiveIsReportedOnceNamingTheStepAndTheCollective) {
  auto comms = make_thread_communicators(2);
  Reports r;
  ProgressWatchdog w(0.2, r.action());
  w.arm();
  w.step(12);
  w.enter("all-reduce", comms[1].get(), 3 << 20);
  ASSERT_TRUE(eventually([&] { return w.fired(); }));
  std::this_thread::sleep_for(600ms);  // more checks pass: still one report
  ASSERT_EQ(r.count(), 1u);
  const std::string& line = r.lines[0];
  EXPECT_EQ(line.rfind("step 12 made no progress for ", 0), 0u) << line;
  EXPECT_NE(line.find("(--collective_timeout 0.2): waiting in all-reduce of 3.0 MiB on " + comms[1]->name() + " for "),
            std::string::npos)
      << line;
}

TEST(ProgressWatchdog, AStallOutsideACollectiveSaysSo) {
  auto comms = make_thread_communicators(2);
  Reports r;
  ProgressWatchdog w(0.2, r.action());
  w.arm();
  w.step(3);
  w.enter("all-gather", comms[0].get(), 10);
  w.leave();
  ASSERT_TRUE(eventually([&] { return r.count() == 1; }));
  EXPECT_NE(r.lines[0].find("step 3 made no progress"), std::string::npos) << r.lines[0];
  EXPECT_NE(r.lines[0].find("outside a collective"), std::string::npos) << r.lines[0];
}

TEST(ProgressWatchdog, SteadyProgressAndADisarmedWatchdogNeverReport) {
  Reports r;
  ProgressWatchdog w(1.0, r.action());
  w.arm();
  const auto end = std::chrono::steady_clock::now() + 3s;
  for (int64_t s = 1; std::chrono::steady_clock::now() < end; ++s) {
    w.step(s);
    std::this_thread::sleep_for(50ms);
    w.progress();
  }
  w.disarm();
  std::this_thread::sleep_for(2500ms);  // more than the timeout without progress, disarmed
  EXPECT_EQ(r.count(), 0u);
  EXPECT_FALSE(w.fired());
}

TEST(ProgressWatchdog, ItsThreadStopsAtOnceAndBadTimeoutsAreRefused) {
  Reports r;
  const auto t0 = std::chrono::steady_clock::now();
  {
    ProgressWatchdog w(1000, r.action());
    w.arm();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 500ms);
  for (double bad : {0.0, -1.0, 1e9}) EXPECT_THROW(ProgressWatchdog(bad, r.action()), Error) << bad;
}

TEST(ProgressWatchdog, ACommunicatorsCollectivesEnterAndLeaveIt) {
  auto comms = make_thread_communicators(2);
  Reports r;
  ProgressWatchdog w(0.3, r.action());
  for (auto& c : comms) c->set_watchdog(&w);
  w.arm();
  w.step(5);
  // Rank 0 all-reduces; rank 1 never joins: rank 0 waits inside the collective, which the report names.
  std::atomic<bool> failed{false};
  std::thread rank0([&] {
    float x = 1.f;
    try {
      comms[0]->allreduce(&x, 1, DType::kF32, ReduceOp::kSum);
    } catch (const Error&) {
      failed = true;
    }
  });
  ASSERT_TRUE(eventually([&] { return r.count() == 1; }));
  EXPECT_NE(r.lines[0].find("waiting in all-reduce of 4.0 B on " + comms[0]->name()), std::string::npos) << r.lines[0];
  comms[0]->abort(r.lines[0]);  // what the trainer's stall action does to a thread group
  rank0.join();
  EXPECT_TRUE(failed);
  for (auto& c : comms) c->set_watchdog(nullptr);
}

}  // namespace
}  // namespace tg
