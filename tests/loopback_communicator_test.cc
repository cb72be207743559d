// Tests of LoopbackCommunicator (ranks sharing one device, stream-ordered collectives behind an AbortGate) on the
// host device, with real threads, one per rank: every all-reduce dtype/op against the plain rank-order reference and
// bit for bit against ThreadCommunicator's (the CPU bits a GPU run is compared with), reduce-scatter (in place too),
// all-gather (in place too), broadcast from every root, barrier, splits (collective and from one thread), mismatched
// calls, a buffer on another device; the failure paths: an abort from another thread while a rank waits in a collective
// its peer never joins, a destroyed peer, and the health watch of connect_loopback_replicas turning a peer's failure in
// one group into an abort of the group another replica waits in. On a GPU (SKIPPED without one): two ranks on two
// streams of cuda:0 give the host's bits.
#include "terngrad/comm/loopback_communicator.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/cuda_devices.h"
#include "common/reduce_reference.h"
#include "terngrad/comm/replica_groups.h"
#include "terngrad/comm/thread_communicator.h"
#include "terngrad/comm/topology.h"
#include "terngrad/core/error.h"

#ifdef TG_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace tg {
namespace {

using testing::random_input_bytes;
using testing::reduce_cases;
using testing::reduce_in_order;

std::vector<std::unique_ptr<LoopbackCommunicator>> host_group(int ranks) {
  std::vector<std::unique_ptr<LoopbackDevice>> devices;
  for (int k = 0; k < ranks; ++k) devices.push_back(make_host_loopback_device());
  return make_loopback_communicators(std::move(devices));
}

// Runs body(rank) on one thread per rank; returns each rank's error message ("" when none).
std::vector<std::string> run_ranks(int ranks, const std::function<void(int)>& body) {
  std::vector<std::string> errors(static_cast<size_t>(ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      try {
        body(r);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

void expect_no_errors(const std::vector<std::string>& errors) {
  for (size_t r = 0; r < errors.size(); ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

// Every dtype/op, 2 and 3 ranks, counts that do not divide evenly: every rank gets the rank-order reference's bits,
// and ThreadCommunicator's on the same inputs.
TEST(LoopbackCommunicator, AllreduceGivesTheRankOrderBitsOfTheThreadCommunicator) {
  for (int ranks : {2, 3}) {
    for (const testing::ReduceCase& c : reduce_cases(/*bf16=*/true)) {
      for (int64_t count : {int64_t{1}, int64_t{1000}, int64_t{70001}}) {
        const size_t elem = dtype_size(c.dtype);
        std::vector<std::vector<uint8_t>> inputs;
        for (int r = 0; r < ranks; ++r) inputs.push_back(random_input_bytes(c.dtype, count, 17u * r + 3));
        std::vector<int> order;
        for (int r = 0; r < ranks; ++r) order.push_back(r);
        const std::vector<uint8_t> want = reduce_in_order(inputs, order, 0, count, c.dtype, c.op);
        auto loop = host_group(ranks);
        auto threads = make_thread_communicators(ranks);
        std::vector<std::vector<uint8_t>> a = inputs, b = inputs;
        expect_no_errors(run_ranks(ranks, [&](int r) {
          loop[static_cast<size_t>(r)]->allreduce(a[static_cast<size_t>(r)].data(), count, c.dtype, c.op);
          threads[static_cast<size_t>(r)]->allreduce(b[static_cast<size_t>(r)].data(), count, c.dtype, c.op);
        }));
        for (int r = 0; r < ranks; ++r) {
          const std::string what = std::string(dtype_name(c.dtype)) + " " + enum_name(c.op) + " ranks " +
                                   std::to_string(ranks) + " count " + std::to_string(count) + " rank " +
                                   std::to_string(r);
          ASSERT_EQ(a[static_cast<size_t>(r)].size(), count * elem);
          EXPECT_EQ(std::memcmp(a[static_cast<size_t>(r)].data(), want.data(), want.size()), 0) << what;
          EXPECT_EQ(std::memcmp(a[static_cast<size_t>(r)].data(), b[static_cast<size_t>(r)].data(), want.size()), 0)
              << what;
        }
      }
    }
  }
}

// Repeated collectives of every kind on one group (the marks and meetings reused), including in-place forms.
TEST(LoopbackCommunicator, ReduceScatterAllgatherBroadcastAndBarrier) {
  const int R = 3;
  const int64_t count = 1001;  // per rank
  auto loop = host_group(R);
  std::vector<std::vector<uint8_t>> inputs;
  for (int r = 0; r < R; ++r) inputs.push_back(random_input_bytes(DType::kF32, R * count, 91u + r));
  std::vector<int> order = {0, 1, 2};
  std::vector<std::vector<float>> scattered(R, std::vector<float>(count)), in_place(R), gathered(R);
  std::vector<std::vector<int32_t>> bcast(R);
  for (int round = 0; round < 3; ++round) {
    for (int r = 0; r < R; ++r) {
      in_place[r].assign(reinterpret_cast<const float*>(inputs[r].data()),
                         reinterpret_cast<const float*>(inputs[r].data()) + R * count);
      gathered[r].assign(static_cast<size_t>(R) * 7, -1.0f);
      for (int i = 0; i < 7; ++i) gathered[r][static_cast<size_t>(r) * 7 + i] = static_cast<float>(100 * r + i);
      bcast[r].assign(5, r * 10 + round);
    }
    expect_no_errors(run_ranks(R, [&](int r) {
      LoopbackCommunicator& c = *loop[static_cast<size_t>(r)];
      c.reduce_scatter(inputs[r].data(), scattered[r].data(), count, DType::kF32, ReduceOp::kSum);
      c.reduce_scatter(in_place[r].data(), in_place[r].data() + r * count, count, DType::kF32, ReduceOp::kSum);
      c.allgather(gathered[r].data() + r * 7, gathered[r].data(), 7 * sizeof(float));  // in place
      c.broadcast(bcast[r].data(), 5 * sizeof(int32_t), round % R);
      c.barrier();
    }));
    for (int r = 0; r < R; ++r) {
      const std::vector<uint8_t> want = reduce_in_order(inputs, order, r * count, count, DType::kF32, ReduceOp::kSum);
      EXPECT_EQ(std::memcmp(scattered[r].data(), want.data(), want.size()), 0) << "rank " << r;
      EXPECT_EQ(std::memcmp(in_place[r].data() + r * count, want.data(), want.size()), 0) << "rank " << r;
      for (int k = 0; k < R; ++k)
        for (int i = 0; i < 7; ++i) EXPECT_EQ(gathered[r][static_cast<size_t>(k) * 7 + i], 100 * k + i);
      for (int i = 0; i < 5; ++i) EXPECT_EQ(bcast[r][i], (round % R) * 10 + round);
    }
  }
  const CommStats& s = loop[0]->stats();
  EXPECT_EQ(s.calls, 3u * 5u);
}

// Splits: collectively (each rank's own thread) and from one thread give the same groups, ranked by (key, rank).
TEST(LoopbackCommunicator, SplitsFormTheGroupsOfTheirColorsAndKeys) {
  const int R = 4;
  auto loop = host_group(R);
  const std::vector<int> colors = {1, 0, 1, -1}, keys = {5, 0, 2, 0};
  std::vector<std::unique_ptr<Communicator>> collective(R);
  expect_no_errors(run_ranks(R, [&](int r) { collective[r] = loop[r]->split(colors[r], keys[r]); }));
  std::vector<LoopbackCommunicator*> parents;
  for (auto& c : loop) parents.push_back(c.get());
  auto direct = split_loopback_communicators(parents, colors, keys);
  ASSERT_EQ(collective[3], nullptr);
  ASSERT_EQ(direct[3], nullptr);
  const int want_rank[] = {1, 0, 0}, want_size[] = {2, 1, 2};
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(collective[r]->rank(), want_rank[r]);
    EXPECT_EQ(collective[r]->size(), want_size[r]);
    EXPECT_EQ(direct[r]->rank(), want_rank[r]);
    EXPECT_EQ(direct[r]->size(), want_size[r]);
  }
  // The color-1 group of the one-thread split works from ranks 0 and 2's threads.
  std::vector<float> x0 = {1, 2}, x2 = {10, 20};
  expect_no_errors(run_ranks(2, [&](int k) {
    (k == 0 ? direct[0] : direct[2])->allreduce(k == 0 ? x0.data() : x2.data(), 2, DType::kF32, ReduceOp::kSum);
  }));
  EXPECT_EQ(x0, (std::vector<float>{11, 22}));
  EXPECT_EQ(x2, (std::vector<float>{11, 22}));
}

TEST(LoopbackCommunicator, MismatchedCallsAndBuffersOfAnotherDeviceAreOneLine) {
  auto loop = host_group(2);
  std::vector<float> a(4, 1.0f), b(5, 1.0f);
  const auto errors = run_ranks(2, [&](int r) {
    if (r == 0)
      loop[0]->allreduce(a.data(), 4, DType::kF32, ReduceOp::kSum);
    else
      loop[1]->allreduce(b.data(), 5, DType::kF32, ReduceOp::kSum);
  });
  for (int r = 0; r < 2; ++r)
    EXPECT_NE(errors[r].find("ranks disagree on the collective: rank 0 called all-reduce sum of 4 f32, rank 1 called "
                             "all-reduce sum of 5 f32"),
              std::string::npos)
        << errors[r];
  auto fresh = host_group(2);
  try {
    fresh[0]->allreduce(a.data(), 4, DType::kF32, ReduceOp::kSum, Device::cuda(0));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "loopback (rank 0 of 2, cpu): buffers on cuda:0 are not supported (memory of cpu only)");
  }
}

// A rank waits in an all-reduce its peer never joins; an abort from a third thread ends the wait with the reason, and
// every later call on the group throws.
TEST(LoopbackCommunicator, AnAbortEndsAWaitForAPeerThatNeverComes) {
  auto loop = host_group(2);
  std::vector<float> x(10, 1.0f);
  std::string error;
  std::thread waiter([&] {
    try {
      loop[0]->allreduce(x.data(), 10, DType::kF32, ReduceOp::kSum);
    } catch (const Error& e) {
      error = e.what();
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  loop[0]->abort("a replica's step failed");
  waiter.join();
  EXPECT_EQ(error,
            "loopback (rank 0 of 2, cpu): all-reduce sum of 10 f32 failed: rank 0 aborted: a replica's step failed");
  EXPECT_THROW(loop[1]->allreduce(x.data(), 10, DType::kF32, ReduceOp::kSum), Error);
  EXPECT_EQ(loop[1]->async_error(),
            "loopback (rank 1 of 2, cpu): the group failed: rank 0 aborted: a replica's step failed");
  EXPECT_EQ(loop[0]->async_error(), "");  // its own abort: nothing new to report
}

TEST(LoopbackCommunicator, ADestroyedPeerFailsTheGroup) {
  auto loop = host_group(2);
  std::vector<float> x(3, 1.0f);
  std::string error;
  std::thread waiter([&] {
    try {
      loop[0]->allreduce(x.data(), 3, DType::kF32, ReduceOp::kSum);
    } catch (const Error& e) {
      error = e.what();
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  loop[1].reset();
  waiter.join();
  EXPECT_EQ(error, "loopback (rank 0 of 2, cpu): all-reduce sum of 3 f32 failed: rank 1's communicator was destroyed");
}

// connect_loopback_replicas: replica 1's world communicator goes (its thread died without aborting) while replica 0
// waits in the local group for replica 1, which never comes; the health watch sees the world group's failure and
// aborts every group of the process, so replica 0's wait ends naming the cause.
TEST(LoopbackReplicaGroups, TheHealthWatchAbortsTheGroupAReplicaWaitsIn) {
  const Topology t = Topology::build(nullptr, 2, {});
  std::vector<std::unique_ptr<LoopbackDevice>> devices;
  devices.push_back(make_host_loopback_device());
  devices.push_back(make_host_loopback_device());
  std::unique_ptr<ReplicaGroups> groups = connect_loopback_replicas(t, std::move(devices));
  ASSERT_NE(groups->replica(0).world, nullptr);
  ASSERT_NE(groups->replica(0).local, nullptr);
  EXPECT_EQ(groups->replica(0).cross, nullptr);
  EXPECT_NE(groups->replica(0).world, groups->replica(0).local);
  // Both groups work first.
  std::vector<std::vector<float>> v = {{1, 2}, {3, 4}};
  expect_no_errors(run_ranks(2, [&](int r) {
    groups->replica(r).world->allreduce(v[r].data(), 2, DType::kF32, ReduceOp::kSum);
    groups->replica(r).local->allreduce(v[r].data(), 2, DType::kF32, ReduceOp::kMax);
  }));
  EXPECT_EQ(v[0], (std::vector<float>{4, 6}));
  EXPECT_EQ(v[1], (std::vector<float>{4, 6}));
  std::string error;
  const auto t0 = std::chrono::steady_clock::now();
  std::thread waiter([&] {
    try {
      groups->replica(0).local->allreduce(v[0].data(), 2, DType::kF32, ReduceOp::kSum);
    } catch (const Error& e) {
      error = e.what();
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  // Replica 1's world communicator fails its group (as its destruction would) without aborting the process's groups.
  static_cast<LoopbackCommunicator*>(groups->replica(1).world)->abort("replica 1's thread ended");
  waiter.join();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(seconds, 30.0);  // the watch probes once a second
  EXPECT_NE(error.find("loopback (rank 0 of 2, cpu): all-reduce sum of 2 f32 failed: rank 0 aborted: loopback (rank 0 "
                       "of 2, cpu): the group failed: rank 1 aborted: replica 1's thread ended"),
            std::string::npos)
      << error;
}

// Two ranks on two streams of one GPU: every dtype/op's all-reduce gives the host's bits on both ranks, and an
// all-gather and a broadcast copy what they should, queued on the streams (read back after synchronize).
TEST(LoopbackCommunicatorCuda, TwoRanksOnOneGpuGiveTheHostsBits) {
#ifndef TG_HAVE_CUDA
  GTEST_SKIP() << "built without CUDA (TG_CUDA=OFF): no CUDA loopback device";
#else
  if (testing::cuda_device_count() < 1) GTEST_SKIP() << "needs 1 CUDA device(s), found 0";
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  cudaStream_t streams[2];
  for (auto& s : streams) ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  std::vector<std::unique_ptr<LoopbackDevice>> devices;
  for (auto& s : streams) devices.push_back(make_cuda_loopback_device(0, s));
  auto gpu = make_loopback_communicators(std::move(devices));
  auto host = host_group(2);
  const int64_t count = 100003;
  for (const testing::ReduceCase& c : reduce_cases(/*bf16=*/true)) {
    const size_t bytes = count * dtype_size(c.dtype);
    std::vector<std::vector<uint8_t>> in = {random_input_bytes(c.dtype, count, 5),
                                            random_input_bytes(c.dtype, count, 6)};
    std::vector<std::vector<uint8_t>> want = in, got(2, std::vector<uint8_t>(bytes));
    void* d[2];
    for (int r = 0; r < 2; ++r) {
      ASSERT_EQ(cudaMalloc(&d[r], bytes), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(d[r], in[r].data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);
    }
    expect_no_errors(run_ranks(2, [&](int r) {
      cudaSetDevice(0);
      gpu[r]->allreduce(d[r], count, c.dtype, c.op, Device::cuda(0));
      gpu[r]->synchronize();
      host[r]->allreduce(want[r].data(), count, c.dtype, c.op);
    }));
    for (int r = 0; r < 2; ++r) {
      ASSERT_EQ(cudaMemcpy(got[r].data(), d[r], bytes, cudaMemcpyDeviceToHost), cudaSuccess);
      EXPECT_EQ(std::memcmp(got[r].data(), want[r].data(), bytes), 0)
          << dtype_name(c.dtype) << " " << enum_name(c.op) << " rank " << r;
      cudaFree(d[r]);
    }
  }
  gpu.clear();
  for (auto& s : streams) cudaStreamDestroy(s);
#endif
}

}  // namespace
}  // namespace tg
