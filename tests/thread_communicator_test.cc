// Tests of ThreadCommunicator with real std::threads, one per rank (1 to 4 ranks): every all-reduce dtype/op
// against a plain loop over the ranks in rank order (bit for bit, on every rank, whatever the thread timing:
// some rounds start the ranks at random moments), repeated calls on the same group (the scratch is reused),
// reduce-scatter (the same reference, in place too, and followed by an all-gather it gives the all-reduce's
// bits), all-gather (also in place), broadcast from every root, barrier, byte counters, argument errors,
// mismatched calls, and the failure paths: abort() and a destroyed communicator wake the waiting ranks with an
// error, and waiting does not hold a core. Split: the new groups' ranks and sizes, collectives on them from other
// threads than the parent's, their own counters, and an abort of the parent reaching them.
#include "terngrad/comm/thread_communicator.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <exception>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "common/reduce_reference.h"
#include "terngrad/core/error.h"

namespace tg {
namespace {

using testing::combine;
using testing::random_input;
using testing::same_bits;

// Runs body(rank, communicator) on one thread per rank; returns each rank's error message ("" when none).
std::vector<std::string> run_ranks(std::vector<std::unique_ptr<ThreadCommunicator>>& comms,
                                   const std::function<void(int, ThreadCommunicator&)>& body) {
  const int R = static_cast<int>(comms.size());
  std::vector<std::string> errors(R);
  std::vector<std::thread> threads;
  for (int r = 0; r < R; ++r)
    threads.emplace_back([&, r] {
      try {
        body(r, *comms[r]);
      } catch (const std::exception& e) {
        errors[r] = e.what();
        if (errors[r].empty()) errors[r] = "(empty error)";
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

void expect_no_errors(const std::vector<std::string>& errors) {
  for (size_t r = 0; r < errors.size(); ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

// Every rank's all-reduce of T/op equals the plain loop, for several counts, three rounds on the same group
// (the last with random start delays).
template <typename T>
void check_allreduce(int R, DType dtype, ReduceOp op) {
  auto comms = make_thread_communicators(R);
  for (int round = 0; round < 3; ++round) {
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{3}, int64_t{1001}, int64_t{70001}}) {
      std::vector<std::vector<T>> data(R);
      for (int w = 0; w < R; ++w) data[w] = random_input<T>(n, 1000u * round + 17u * w + static_cast<uint32_t>(n));
      std::vector<T> expected = data[0];
      for (int w = 1; w < R; ++w)
        for (int64_t i = 0; i < n; ++i) expected[i] = combine(expected[i], data[w][i], op);
      const std::vector<std::string> errors = run_ranks(comms, [&](int r, ThreadCommunicator& c) {
        if (round == 2) std::this_thread::sleep_for(std::chrono::microseconds((r * 7919 + n) % 3000));
        c.allreduce(data[r].data(), n, dtype, op);
      });
      expect_no_errors(errors);
      for (int r = 0; r < R; ++r)
        ASSERT_TRUE(same_bits(data[r], expected))
            << R << " ranks, " << dtype_name(dtype) << " " << enum_name(op) << ", n=" << n << ", round " << round
            << ": rank " << r << " differs from the plain loop";
    }
  }
}

TEST(ThreadCommunicator, AllreduceMatchesAPlainLoopOnEveryRank) {
  for (int R = 1; R <= 4; ++R) {
    check_allreduce<float>(R, DType::kF32, ReduceOp::kSum);
    check_allreduce<float>(R, DType::kF32, ReduceOp::kMax);
    check_allreduce<int8_t>(R, DType::kI8, ReduceOp::kSum);
    check_allreduce<int8_t>(R, DType::kI8, ReduceOp::kMax);
    check_allreduce<int32_t>(R, DType::kI32, ReduceOp::kSum);
    check_allreduce<int32_t>(R, DType::kI32, ReduceOp::kMax);
    check_allreduce<half_bits>(R, DType::kF16, ReduceOp::kSum);
    check_allreduce<bf16_bits>(R, DType::kBf16, ReduceOp::kSum);
  }
}

// Reduce-scatter of every dtype/op: rank r's block equals the plain loop over the ranks in rank order, out of
// place and in place (recv = send + r * count), and an all-gather of the blocks gives the all-reduce's bits.
TEST(ThreadCommunicator, ReduceScatterMatchesAPlainLoopAndAllreduce) {
  using testing::ReduceCase;
  for (int R = 1; R <= 4; ++R) {
    auto comms = make_thread_communicators(R);
    for (const ReduceCase& k : testing::reduce_cases(/*bf16=*/true)) {
      const size_t elem = dtype_size(k.dtype);
      // 20011 f32 elements per rank span several of the reduction's 64 KiB chunks.
      for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{3}, int64_t{1001}, int64_t{20011}}) {
        std::vector<std::vector<uint8_t>> send(R);
        for (int w = 0; w < R; ++w)
          send[w] = testing::random_input_bytes(k.dtype, R * n, 31u * w + static_cast<uint32_t>(n));
        std::vector<int> rank_order(R);
        for (int w = 0; w < R; ++w) rank_order[w] = w;
        std::vector<std::vector<uint8_t>> out(R), in_place(R), gathered(R), reduced(R);
        expect_no_errors(run_ranks(comms, [&](int r, ThreadCommunicator& c) {
          std::this_thread::sleep_for(std::chrono::microseconds((r * 7919 + n) % 2000));
          out[r].assign(n * elem, 0xEE);
          c.reduce_scatter(send[r].data(), out[r].data(), n, k.dtype, k.op);
          in_place[r] = send[r];
          c.reduce_scatter(in_place[r].data(), in_place[r].data() + r * n * elem, n, k.dtype, k.op);
          gathered[r].assign(R * n * elem, 0xEE);
          c.allgather(out[r].data(), gathered[r].data(), n * elem);
          reduced[r] = send[r];
          c.allreduce(reduced[r].data(), R * n, k.dtype, k.op);
        }));
        const std::string what = fmt::format("{} ranks, {} {}, n={}", R, dtype_name(k.dtype), enum_name(k.op), n);
        for (int r = 0; r < R; ++r) {
          const std::vector<uint8_t> want = testing::reduce_in_order(send, rank_order, r * n, n, k.dtype, k.op);
          ASSERT_EQ(out[r], want) << what << ", rank " << r;
          ASSERT_EQ(std::vector<uint8_t>(in_place[r].begin() + r * n * elem, in_place[r].begin() + (r + 1) * n * elem),
                    want)
              << what << ", in place, rank " << r;
          ASSERT_EQ(gathered[r], reduced[r]) << what << ", rank " << r << ": reduce-scatter + all-gather != all-reduce";
        }
      }
    }
  }
}

TEST(ThreadCommunicator, AllgatherBroadcastBarrier) {
  for (int R = 1; R <= 4; ++R) {
    auto comms = make_thread_communicators(R);
    for (size_t bytes : {size_t{0}, size_t{1}, size_t{7}, size_t{100003}}) {
      std::vector<std::vector<uint8_t>> gathered(R), in_place(R);
      auto block = [](int w, size_t k) { return static_cast<uint8_t>(31 * w + k % 251); };
      expect_no_errors(run_ranks(comms, [&](int r, ThreadCommunicator& c) {
        std::vector<uint8_t> send(bytes);
        for (size_t k = 0; k < bytes; ++k) send[k] = block(r, k);
        gathered[r].assign(R * bytes, 0xEE);
        c.allgather(send.data(), gathered[r].data(), bytes);
        in_place[r].assign(R * bytes, 0xEE);  // the send block already in its place in recv
        if (bytes) std::memcpy(in_place[r].data() + r * bytes, send.data(), bytes);  // data() may be null at 0
        c.allgather(in_place[r].data() + r * bytes, in_place[r].data(), bytes);
      }));
      for (int r = 0; r < R; ++r)
        for (int w = 0; w < R; ++w)
          for (size_t k = 0; k < bytes; ++k) {
            ASSERT_EQ(gathered[r][w * bytes + k], block(w, k)) << R << " ranks, rank " << r << " block " << w;
            ASSERT_EQ(in_place[r][w * bytes + k], block(w, k)) << R << " ranks, in place, rank " << r;
          }
    }
    for (int root = 0; root < R; ++root) {
      std::vector<std::vector<int32_t>> b(R);
      expect_no_errors(run_ranks(comms, [&](int r, ThreadCommunicator& c) {
        b[r] = {r, 10 * r, 100 * r};
        c.broadcast(b[r].data(), 3 * sizeof(int32_t), root);
      }));
      for (int r = 0; r < R; ++r) EXPECT_EQ(b[r], (std::vector<int32_t>{root, 10 * root, 100 * root}));
    }
    // Barrier: what every rank did before it is visible to every rank after it.
    std::atomic<int> before{0};
    std::vector<int> seen(R);
    expect_no_errors(run_ranks(comms, [&](int r, ThreadCommunicator& c) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5 * r));
      before.fetch_add(1);
      c.barrier();
      seen[r] = before.load();
    }));
    for (int r = 0; r < R; ++r) EXPECT_EQ(seen[r], R) << R << " ranks, rank " << r;
  }
}

TEST(ThreadCommunicator, ByteCountersFollowTheModel) {
  const int R = 3;
  auto comms = make_thread_communicators(R);
  const int64_t n = 1000;
  expect_no_errors(run_ranks(comms, [&](int, ThreadCommunicator& c) {
    std::vector<float> x(n, 1.f);
    std::vector<uint8_t> send(7), recv(7 * R);
    c.allreduce(x.data(), n, DType::kF32, ReduceOp::kSum);
    c.allgather(send.data(), recv.data(), 7);
    c.broadcast(send.data(), 7, 2);
    c.barrier();
    std::vector<half_bits> h(3 * 10);
    c.reduce_scatter(h.data(), h.data() + 10 * c.rank(), 10, DType::kF16, ReduceOp::kSum);
    const auto sub = c.split(c.rank() == 0 ? -1 : 0, 0);  // set-up: not counted
    EXPECT_EQ(sub == nullptr, c.rank() == 0);
  }));
  for (auto& c : comms) {
    EXPECT_EQ(c->stats().calls, 5u);
    EXPECT_EQ(c->stats().payload_bytes, 4u * n + 7u + 7u + 60u);
    // reduce-scatter: 3 blocks of 20 bytes, 2 of which arrive
    EXPECT_EQ(Communicator::reduce_scatter_moved_bytes(60, R), 40u);
    EXPECT_EQ(c->stats().moved_bytes, Communicator::allreduce_moved_bytes(4 * n, R) + 7u * (R - 1) + 7u + 40u);
  }
}

TEST(ThreadCommunicator, ArgumentErrors) {
  auto comms = make_thread_communicators(2);
  ThreadCommunicator& c = *comms[0];
  float x = 0.f;
  try {
    c.allreduce(&x, 1, DType::kF32, ReduceOp::kSum, Device::cuda(0));
    FAIL() << "a device buffer was accepted";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("local (rank 0 of 2): buffers on cuda:0 are not supported"), std::string::npos) << m;
  }
  half_bits h{0};
  try {
    c.allreduce(&h, 1, DType::kF16, ReduceOp::kMax);
    FAIL() << "f16 max was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("all-reduce max over f16 is not supported (supported: f32 sum, f32 max, "
                                         "f16 sum, bf16 sum, i8 sum, i8 max, i32 sum, i32 max)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(c.broadcast(&x, 4, 2), Error);  // root outside the group
  EXPECT_THROW(make_thread_communicators(0), Error);
}

// Ranks posting different collectives: every rank gets the same error naming both calls, none waits forever.
TEST(ThreadCommunicator, MismatchedCallsFailOnEveryRank) {
  auto comms = make_thread_communicators(3);
  const std::vector<std::string> errors = run_ranks(comms, [&](int r, ThreadCommunicator& c) {
    std::vector<float> x(11, 1.f);
    if (r == 2)
      c.allreduce(x.data(), 11, DType::kF32, ReduceOp::kSum);
    else
      c.allreduce(x.data(), 10, DType::kF32, ReduceOp::kSum);
  });
  for (int r = 0; r < 3; ++r)
    EXPECT_NE(errors[r].find("ranks disagree on the collective: rank 0 called all-reduce sum of 10 f32, rank 2 "
                             "called all-reduce sum of 11 f32"),
              std::string::npos)
        << "rank " << r << ": " << errors[r];
  // The group stays failed.
  EXPECT_THROW(comms[0]->barrier(), Error);
}

// A rank whose thread fails calls abort(): the ranks waiting for it throw (naming it and why) instead of
// hanging, and so does every later call.
TEST(ThreadCommunicator, AbortWakesTheWaitingRanks) {
  auto comms = make_thread_communicators(3);
  const std::vector<std::string> errors = run_ranks(comms, [&](int r, ThreadCommunicator& c) {
    std::vector<float> x(100, 1.f);
    c.allreduce(x.data(), 100, DType::kF32, ReduceOp::kSum);  // one that completes
    if (r == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      c.abort("decoding the batch failed");
      return;
    }
    c.allreduce(x.data(), 100, DType::kF32, ReduceOp::kSum);  // waits for rank 0, which never comes
  });
  EXPECT_EQ(errors[0], "");
  for (int r = 1; r < 3; ++r)
    EXPECT_NE(errors[r].find("all-reduce sum of 100 f32 failed: rank 0 aborted: decoding the batch failed"),
              std::string::npos)
        << "rank " << r << ": " << errors[r];
  try {
    comms[1]->barrier();
    FAIL() << "a failed group accepted a barrier";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("local (rank 1 of 3): barrier failed: rank 0 aborted"), std::string::npos)
        << e.what();
  }
}

// A rank that goes away (its thread unwinds, destroying its communicator) fails the ranks waiting for it.
TEST(ThreadCommunicator, DestroyedRankFailsTheOthers) {
  auto comms = make_thread_communicators(2);
  std::string error;
  std::thread waiter([&] {
    try {
      std::vector<uint8_t> send(4), recv(8);
      comms[0]->allgather(send.data(), recv.data(), 4);
    } catch (const Error& e) {
      error = e.what();
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  comms[1].reset();
  waiter.join();
  EXPECT_NE(error.find("local (rank 0 of 2): all-gather of 4 bytes failed: rank 1's communicator was destroyed"),
            std::string::npos)
      << error;
}

// Split of 5 ranks: colors r % 2 with keys -r (so the new ranks run backwards), rank 4 passing color -1 joins
// none. Each new group's collectives run on other threads than the parent's, at the same time as a parent
// collective, and count their own bytes.
TEST(ThreadCommunicator, SplitMakesIndependentGroupsRankedByKey) {
  const int R = 5;
  auto comms = make_thread_communicators(R);
  std::vector<std::unique_ptr<Communicator>> subs(R);
  std::vector<float> parent_sum(R), sub_sum(R);
  expect_no_errors(run_ranks(comms, [&](int r, ThreadCommunicator& c) {
    subs[r] = c.split(r == 4 ? -1 : r % 2, -r);
    float mine = static_cast<float>(r + 1);
    std::string sub_error;
    std::thread sub_thread([&] {  // the sub-group driven by another thread, concurrently with the parent
      try {
        if (subs[r]) {
          sub_sum[r] = mine;
          subs[r]->allreduce(&sub_sum[r], 1, DType::kF32, ReduceOp::kSum);
        }
      } catch (const std::exception& e) {
        sub_error = e.what();
      }
    });
    parent_sum[r] = mine;
    c.allreduce(&parent_sum[r], 1, DType::kF32, ReduceOp::kSum);
    sub_thread.join();
    if (!sub_error.empty()) throw Error(sub_error);
  }));
  // Even ranks 0, 2 (4 joined none): keys 0, -2: rank 2 first. Odd ranks 1, 3: keys -1, -3: rank 3 first.
  ASSERT_EQ(subs[4], nullptr);
  const int new_rank[4] = {1, 1, 0, 0};
  for (int r = 0; r < 4; ++r) {
    ASSERT_NE(subs[r], nullptr) << r;
    EXPECT_EQ(subs[r]->size(), 2) << r;
    EXPECT_EQ(subs[r]->rank(), new_rank[r]) << r;
    EXPECT_EQ(parent_sum[r], 15.f);
    EXPECT_EQ(sub_sum[r], r % 2 == 0 ? 1.f + 3.f : 2.f + 4.f) << r;
    EXPECT_EQ(subs[r]->stats().calls, 1u);
    EXPECT_EQ(subs[r]->stats().payload_bytes, 4u);
    EXPECT_EQ(comms[r]->stats().calls, 1u);  // split is not counted; the sub-group's call is its own
  }
  // The parent going away leaves the sub-groups working (destruction fails only its own group).
  comms.clear();
  std::vector<int32_t> x = {7, 9};
  std::thread other([&] { subs[1]->allreduce(&x[1], 1, DType::kI32, ReduceOp::kMax); });
  subs[3]->allreduce(&x[0], 1, DType::kI32, ReduceOp::kMax);
  other.join();
  EXPECT_EQ(x, (std::vector<int32_t>{9, 9}));
}

// A rank that aborts its world group frees the ranks waiting in a group split from it (and from that one).
TEST(ThreadCommunicator, AbortReachesTheSplitGroups) {
  auto comms = make_thread_communicators(3);
  std::vector<std::unique_ptr<Communicator>> subs(3), subsubs(3);
  expect_no_errors(run_ranks(comms, [&](int r, ThreadCommunicator& c) {
    subs[r] = c.split(0, r);
    subsubs[r] = static_cast<ThreadCommunicator&>(*subs[r]).split(r == 0 ? -1 : 0, r);
  }));
  ASSERT_EQ(subsubs[0], nullptr);
  const std::vector<std::string> errors = run_ranks(comms, [&](int r, ThreadCommunicator& c) {
    std::vector<float> x(10, 1.f);
    if (r == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      c.abort("the replica's step failed");
      return;
    }
    if (r == 1)
      subs[r]->allreduce(x.data(), 10, DType::kF32, ReduceOp::kSum);  // waits for rank 0 of the split
    else
      subsubs[r]->barrier();  // waits for rank 1 of the split's split, itself waiting
  });
  EXPECT_EQ(errors[0], "");
  EXPECT_NE(errors[1].find("all-reduce sum of 10 f32 failed: rank 0 aborted: the replica's step failed"),
            std::string::npos)
      << errors[1];
  EXPECT_NE(errors[2].find("barrier failed: rank 0 aborted: the replica's step failed"), std::string::npos)
      << errors[2];
}

// Buffers that overlap other than in the in-place forms are refused before anything moves.
TEST(ThreadCommunicator, OverlappingBuffersAreRefused) {
  auto comms = make_thread_communicators(2);
  std::vector<float> x(8, 1.f);
  try {
    comms[1]->reduce_scatter(x.data(), x.data() + 1, 4, DType::kF32, ReduceOp::kSum);  // in place is x + 4
    FAIL() << "an overlapping receive buffer was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("local (rank 1 of 2): reduce-scatter's receive buffer overlaps its send "
                                         "buffer but is not block 1 of it"),
              std::string::npos)
        << e.what();
  }
  try {
    comms[0]->allgather(x.data() + 2, x.data(), 16);
    FAIL() << "an overlapping send buffer was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("all-gather's send buffer overlaps its receive buffer but is not block 0"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(comms[0]->stats().calls, 0u);
}

double thread_cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_THREAD, &u);
  return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + 1e-6 * double(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

// A rank waiting 300 ms for a late peer blocks: its thread uses under 10% of a core meanwhile. The peer's 300 ms
// start when rank 0 is about to enter (not when the threads start), so rank 0 waits them at any speed.
TEST(ThreadCommunicator, WaitingForALatePeerLeavesTheCore) {
  auto comms = make_thread_communicators(2);
  double wall = 0, cpu = 0;
  std::atomic<bool> entering{false};
  expect_no_errors(run_ranks(comms, [&](int r, ThreadCommunicator& c) {
    std::vector<float> x(16, 1.f);
    if (r == 1) {
      while (!entering) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      c.allreduce(x.data(), 16, DType::kF32, ReduceOp::kSum);
      return;
    }
    const double c0 = thread_cpu_seconds();
    const auto t0 = std::chrono::steady_clock::now();
    entering = true;
    c.allreduce(x.data(), 16, DType::kF32, ReduceOp::kSum);
    wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    cpu = thread_cpu_seconds() - c0;
  }));
  EXPECT_GT(wall, 0.25);
  EXPECT_LT(cpu, 0.1 * wall) << "the waiting thread used " << cpu << " s of CPU in " << wall << " s";
}

}  // namespace
}  // namespace tg
