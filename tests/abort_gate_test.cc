// Tests of AbortGate (comm/abort_gate.h), the CPU twin of the NCCL communicator's abort: real threads, a "library"
// that counts who is inside it. An abort from another thread while the owner waits on a call in progress ends the
// wait with an error naming the communicator and the reason, runs its action once and never beside a library call or
// poll; an abort in the middle of a stream of calls stops the stream; a second abort does nothing; gates that share
// a mutex (one GPU's communicators) exclude each other's calls but keep their own aborts; an abort never waits longer
// than its bound for a library call that blocks (its action runs when the call returns); a wait with a deadline ends.
#include "terngrad/comm/abort_gate.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace tg {
namespace {

// Who is inside the library now; an action that finds anyone there records the overlap.
struct Library {
  std::atomic<int> inside{0};
  std::atomic<int> overlaps{0};
  std::atomic<int> aborts{0};
  std::atomic<long> calls{0};
  void enter_and_leave() {
    if (inside.fetch_add(1) != 0) overlaps.fetch_add(1);
    std::this_thread::yield();
    inside.fetch_sub(1);
    calls.fetch_add(1);
  }
  void abort_action() {
    if (inside.load() != 0) overlaps.fetch_add(1);
    aborts.fetch_add(1);
  }
};

TEST(AbortGate, AnAbortEndsAWaitOnACallThatNeverFinishes) {
  AbortGate gate("nccl (rank 1 of 2, cuda:1)");
  Library lib;
  std::string error;
  std::atomic<bool> waiting{false};
  std::thread owner([&] {
    try {
      gate.call([&] { lib.enter_and_leave(); });  // the collective is queued; it never completes
      gate.wait_until([&] {
        waiting = true;
        lib.enter_and_leave();  // a poll of the library's state: still in progress
        return false;
      });
    } catch (const Error& e) {
      error = e.what();
    }
  });
  while (!waiting) std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the owner is in its back-off by now
  EXPECT_TRUE(gate.abort([&] { lib.abort_action(); }, "a replica's step failed"));
  owner.join();
  EXPECT_EQ(error, "nccl (rank 1 of 2, cuda:1): the communicator was aborted (a replica's step failed)");
  EXPECT_EQ(lib.aborts.load(), 1);
  EXPECT_EQ(lib.overlaps.load(), 0);
  EXPECT_TRUE(gate.aborted());
  EXPECT_FALSE(gate.abort([&] { lib.abort_action(); }, "again"));  // once only
  EXPECT_EQ(lib.aborts.load(), 1);
  EXPECT_THROW(gate.call([] { return 0; }), Error);
}

// Calls and polls as fast as the owner can make them, an abort at some point: never beside one of them, and the
// owner's next call or poll throws.
TEST(AbortGate, AnAbortNeverRunsBesideACallOrAPoll) {
  for (int round = 0; round < 20; ++round) {
    AbortGate gate("g");
    Library lib;
    std::atomic<bool> stopped{false};
    std::thread owner([&] {
      try {
        for (;;) {
          gate.call([&] { lib.enter_and_leave(); });
          int polls = 0;
          gate.wait_until([&] {
            lib.enter_and_leave();
            return ++polls == 3;
          });
        }
      } catch (const Error&) {
        stopped = true;
      }
    });
    while (lib.calls.load() < 50L * (round + 1)) std::this_thread::yield();
    EXPECT_TRUE(gate.abort([&] { lib.abort_action(); }, "stop"));
    owner.join();
    EXPECT_TRUE(stopped.load());
    EXPECT_EQ(lib.overlaps.load(), 0) << "round " << round;
    EXPECT_EQ(lib.aborts.load(), 1);
  }
}

// Gates sharing a mutex (the communicators of one GPU): aborting one never runs beside a call through the other, and
// the other goes on working.
TEST(AbortGate, GatesOfOneDeviceShareTheirMutexNotTheirAbort) {
  auto device = std::make_shared<AbortGate::Mutex>();
  AbortGate world("world", device), local("local", device);
  Library lib;
  std::atomic<bool> stop{false};
  std::thread owner([&] {
    while (!stop) local.call([&] { lib.enter_and_leave(); });
  });
  while (lib.calls.load() < 200) std::this_thread::yield();
  EXPECT_TRUE(world.abort([&] { lib.abort_action(); }, "a replica's step failed"));
  const long at_abort = lib.calls.load();
  while (lib.calls.load() < at_abort + 200) std::this_thread::yield();  // local still works
  stop = true;
  owner.join();
  EXPECT_EQ(lib.overlaps.load(), 0);
  EXPECT_FALSE(local.aborted());
  EXPECT_THROW(world.call([] { return 0; }), Error);
}

// A poll's own error ends the wait with it (a failed collective), and the gate stays usable.
TEST(AbortGate, APollsErrorEndsTheWait) {
  AbortGate gate("g");
  try {
    gate.wait_until([]() -> bool { TG_THROW("g: a collective failed"); });
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "g: a collective failed");
  }
  EXPECT_EQ(gate.call([] { return 7; }), 7);
  EXPECT_FALSE(gate.aborted());
}

// A library call that blocks while holding the gate (an enqueue that does not return): abort() returns within its
// bound, the abort is decided at once, and the action runs when the call returns, never beside it.
TEST(AbortGate, AnAbortDoesNotWaitForACallThatBlocks) {
  AbortGate gate("nccl (rank 0 of 2, cuda:0)", std::make_shared<AbortGate::Mutex>(), /*abort_wait_seconds=*/0.05);
  Library lib;
  std::atomic<bool> inside{false}, release{false};
  std::string error;
  std::thread owner([&] {
    try {
      gate.call([&] {
        lib.inside.fetch_add(1);
        inside = true;
        while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));  // blocked in the library
        lib.inside.fetch_sub(1);
      });
      gate.call([] {});  // the next call after the abort
    } catch (const Error& e) {
      error = e.what();
    }
  });
  while (!inside) std::this_thread::yield();
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(gate.abort([&] { lib.abort_action(); }, "the health watch saw a lost peer"));
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(waited, 5.0);  // the bound is 0.05 s; generous for a loaded machine, far below "forever"
  EXPECT_TRUE(gate.aborted());
  EXPECT_EQ(lib.aborts.load(), 0) << "the action ran while the library call was still inside";
  EXPECT_FALSE(gate.abort([&] { lib.abort_action(); }, "again"));
  release = true;
  gate.settle_abort();
  owner.join();
  EXPECT_EQ(lib.aborts.load(), 1);
  EXPECT_EQ(lib.overlaps.load(), 0);
  EXPECT_EQ(error, "nccl (rank 0 of 2, cuda:0): the communicator was aborted (the health watch saw a lost peer)");
}

// The same through a mutex shared with another gate (one GPU): the other communicator's blocked call holds the device.
TEST(AbortGate, AnAbortDoesNotWaitForABlockedCallOfAnotherCommunicatorOfItsDevice) {
  auto device = std::make_shared<AbortGate::Mutex>();
  AbortGate world("world", device, 0.05), local("local", device, 0.05);
  Library lib;
  std::atomic<bool> inside{false}, release{false};
  std::thread owner([&] {
    local.call([&] {
      lib.inside.fetch_add(1);
      inside = true;
      while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      lib.inside.fetch_sub(1);
    });
  });
  while (!inside) std::this_thread::yield();
  EXPECT_TRUE(world.abort([&] { lib.abort_action(); }, "a replica's step failed"));
  EXPECT_EQ(lib.aborts.load(), 0);
  release = true;
  owner.join();
  world.settle_abort();
  EXPECT_EQ(lib.aborts.load(), 1);
  EXPECT_EQ(lib.overlaps.load(), 0);
  EXPECT_FALSE(local.aborted());
  EXPECT_EQ(local.call([] { return 3; }), 3);
}

// A wait with a deadline: false once it passed (a flush or finalize that does not settle), true when the poll is done,
// an error once aborted.
TEST(AbortGate, AWaitWithADeadlineEnds) {
  AbortGate gate("g");
  int polls = 0;
  EXPECT_FALSE(gate.wait_until([&] { return ++polls < 0; }, 0.02));
  EXPECT_GT(polls, 1);
  EXPECT_TRUE(gate.wait_until([&] { return true; }, 0.02));
  gate.abort([] {}, "stop");
  EXPECT_THROW(gate.wait_until([] { return true; }, 1.0), Error);
  EXPECT_THROW(gate.wait_until([] { return true; }, 0.0), Error);  // not a deadline
}

}  // namespace
}  // namespace tg
