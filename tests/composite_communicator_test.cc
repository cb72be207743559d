// Tests of CompositeCommunicator: 2 MPI processes (re-launched under mpirun by tests/common/mpi_launch.h;
// SKIPPED without mpirun) x R = 2 and 3 threads as one group of 2R ranks. Every dtype/op MPI reduces, against a
// host reference of the documented order: each process's ranks in rank order, then the two processes' partial
// results combined (two operands: any order gives the same bits), so every element is compared bit for bit:
// all-reduce (counts that R divides and that it does not, below and above the MPI ring's threshold),
// reduce-scatter (in place too), all-gather (in place too), broadcast from every root, barrier; the byte
// counters (the composite's flat model, the inner and outer communicators' own), refusals.
#include "terngrad/comm/composite_communicator.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <atomic>
#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "common/mpi_launch.h"
#include "common/reduce_reference.h"
#include "terngrad/comm/mpi_communicator.h"
#include "terngrad/comm/thread_communicator.h"
#include "terngrad/core/error.h"

namespace tg {
namespace {

using testing::ReduceCase;

// This process's R composites (replica r: inner rank r of a thread group, outer its own dup of the world).
std::vector<std::unique_ptr<CompositeCommunicator>> make_composites(MpiCommunicator& world, int R) {
  auto inner = make_thread_communicators(R);
  std::vector<std::unique_ptr<CompositeCommunicator>> out;
  for (int r = 0; r < R; ++r)
    out.push_back(std::make_unique<CompositeCommunicator>(std::move(inner[r]), world.split(0, world.rank())));
  return out;
}

// Runs body(r, composite r) on one thread per in-process rank; rethrows the first error.
void run_replicas(std::vector<std::unique_ptr<CompositeCommunicator>>& comms,
                  const std::function<void(int, CompositeCommunicator&)>& body) {
  std::vector<std::string> errors(comms.size());
  std::vector<std::thread> threads;
  for (size_t r = 0; r < comms.size(); ++r)
    threads.emplace_back([&, r] {
      try {
        body(static_cast<int>(r), *comms[r]);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (size_t r = 0; r < errors.size(); ++r) ASSERT_EQ(errors[r], "") << "replica " << r;
}

// The composite's reduction of elements [first, first + n) of every rank's input (rank p*R + q at p*R + q).
std::vector<uint8_t> reference(const std::vector<std::vector<uint8_t>>& inputs, int R, int64_t first, int64_t n,
                               const ReduceCase& k) {
  std::vector<int> p0, p1;
  for (int q = 0; q < R; ++q) {
    p0.push_back(q);
    p1.push_back(R + q);
  }
  std::vector<uint8_t> a = testing::reduce_in_order(inputs, p0, first, n, k.dtype, k.op);
  const std::vector<uint8_t> b = testing::reduce_in_order(inputs, p1, first, n, k.dtype, k.op);
  testing::combine_bytes(a.data(), b.data(), n, k.dtype, k.op);
  return a;
}

void check_collectives(int R) {
  MpiCommunicator world;
  ASSERT_EQ(world.size(), 2);
  const int p = world.rank(), N = 2 * R;
  auto comms = make_composites(world, R);
  for (int r = 0; r < R; ++r) {
    EXPECT_EQ(comms[r]->rank(), p * R + r);
    EXPECT_EQ(comms[r]->size(), N);
  }
  EXPECT_EQ(comms[R - 1]->name(),
            fmt::format("composite (rank {} of {}: process {} of 2, local {} of {})", p * R + R - 1, N, p, R - 1, R));
  uint64_t payload = 0, moved = 0, calls = 0;  // what the composite's counters must say
  for (const ReduceCase& k : testing::reduce_cases(/*bf16=*/false)) {
    const size_t elem = dtype_size(k.dtype);
    // 1 and 2: all in the tail (fewer than R); R * 1000 + 1: shards and a tail; the last: ring-sized shards.
    for (int64_t n : {int64_t{1}, int64_t{2}, int64_t{R * 1000 + 1}, int64_t{R * 90001}}) {
      std::vector<std::vector<uint8_t>> inputs(N);
      for (int w = 0; w < N; ++w)
        inputs[w] = testing::random_input_bytes(k.dtype, n, 53u * w + static_cast<uint32_t>(n));
      std::vector<std::vector<uint8_t>> got(R);
      run_replicas(comms, [&](int r, CompositeCommunicator& c) {
        got[r] = inputs[p * R + r];
        c.allreduce(got[r].data(), n, k.dtype, k.op);
      });
      const std::vector<uint8_t> want = reference(inputs, R, 0, n, k);
      for (int r = 0; r < R; ++r)
        ASSERT_EQ(got[r], want) << fmt::format("all-reduce {} {} n={} R={}, rank {}", dtype_name(k.dtype),
                                               enum_name(k.op), n, R, p * R + r);
      calls += 1;
      payload += n * elem;
      moved += Communicator::allreduce_moved_bytes(n * elem, N);
    }
    for (int64_t n : {int64_t{1}, int64_t{1001}, int64_t{40003}}) {  // per rank
      std::vector<std::vector<uint8_t>> inputs(N);
      for (int w = 0; w < N; ++w)
        inputs[w] = testing::random_input_bytes(k.dtype, N * n, 59u * w + static_cast<uint32_t>(n));
      std::vector<std::vector<uint8_t>> got(R), in_place(R);
      run_replicas(comms, [&](int r, CompositeCommunicator& c) {
        const int me = p * R + r;
        got[r].assign(n * elem, 0xEE);
        c.reduce_scatter(inputs[me].data(), got[r].data(), n, k.dtype, k.op);
        in_place[r] = inputs[me];
        c.reduce_scatter(in_place[r].data(), in_place[r].data() + me * n * elem, n, k.dtype, k.op);
      });
      for (int r = 0; r < R; ++r) {
        const int me = p * R + r;
        const std::vector<uint8_t> want = reference(inputs, R, me * n, n, k);
        const std::string what =
            fmt::format("reduce-scatter {} {} n={} R={}, rank {}", dtype_name(k.dtype), enum_name(k.op), n, R, me);
        ASSERT_EQ(got[r], want) << what;
        ASSERT_EQ(std::vector<uint8_t>(in_place[r].begin() + me * n * elem, in_place[r].begin() + (me + 1) * n * elem),
                  want)
            << what << ", in place";
      }
      calls += 2;
      payload += 2 * N * n * elem;
      moved += 2 * Communicator::reduce_scatter_moved_bytes(N * n * elem, N);
    }
  }
  // All-gather (separate and in place), broadcast from every root, barrier.
  for (size_t bytes : {size_t{1}, size_t{777}, size_t{150001}}) {
    auto block = [](int w, size_t i) { return static_cast<uint8_t>(37 * w + i % 241); };
    std::vector<std::vector<uint8_t>> gathered(R), in_place(R);
    run_replicas(comms, [&](int r, CompositeCommunicator& c) {
      const int me = p * R + r;
      std::vector<uint8_t> mine(bytes);
      for (size_t i = 0; i < bytes; ++i) mine[i] = block(me, i);
      gathered[r].assign(N * bytes, 0xEE);
      c.allgather(mine.data(), gathered[r].data(), bytes);
      in_place[r].assign(N * bytes, 0xEE);
      std::copy(mine.begin(), mine.end(), in_place[r].begin() + me * bytes);
      c.allgather(in_place[r].data() + me * bytes, in_place[r].data(), bytes);
    });
    for (int r = 0; r < R; ++r)
      for (int w = 0; w < N; ++w)
        for (size_t i = 0; i < bytes; ++i) {
          ASSERT_EQ(gathered[r][w * bytes + i], block(w, i)) << bytes << " bytes, replica " << r << ", block " << w;
          ASSERT_EQ(in_place[r][w * bytes + i], block(w, i)) << bytes << " bytes, in place, replica " << r;
        }
    calls += 2;
    payload += 2 * bytes;
    moved += 2 * Communicator::allgather_moved_bytes(bytes, N);
  }
  for (int root = 0; root < N; ++root) {
    std::vector<std::vector<int32_t>> b(R);
    run_replicas(comms, [&](int r, CompositeCommunicator& c) {
      const int me = p * R + r;
      b[r] = {me, 100 + me};
      c.broadcast(b[r].data(), 8, root);
      c.barrier();
    });
    for (int r = 0; r < R; ++r) EXPECT_EQ(b[r], (std::vector<int32_t>{root, 100 + root})) << "root " << root;
    calls += 2;
    payload += 8;
    moved += 8;
  }
  for (int r = 0; r < R; ++r) {
    EXPECT_EQ(comms[r]->stats().calls, calls);
    EXPECT_EQ(comms[r]->stats().payload_bytes, payload);
    EXPECT_EQ(comms[r]->stats().moved_bytes, moved);
  }
}

TEST(CompositeCommunicator, TwoProcessesTimesTwoThreads) {
  TG_RUN_ON_N_MPI_RANKS(2);
  check_collectives(2);
}

TEST(CompositeCommunicator, TwoProcessesTimesThreeThreads) {
  TG_RUN_ON_N_MPI_RANKS(2);
  check_collectives(3);
}

// One f32 all-reduce of 3000 elements on 2 x 3 ranks: the inner group carries the reduce-scatter and all-gather
// of the whole buffer, each outer communicator one shard of 1000; the composite counts a flat ring over 6.
// Refusals: bf16 (MPI cannot reduce it), device buffers, split.
TEST(CompositeCommunicator, CountersAndRefusals) {
  TG_RUN_ON_N_MPI_RANKS(2);
  MpiCommunicator world;
  const int R = 3;
  auto comms = make_composites(world, R);
  run_replicas(comms, [&](int, CompositeCommunicator& c) {
    std::vector<float> x(3000, 1.f);
    c.allreduce(x.data(), 3000, DType::kF32, ReduceOp::kSum);
    if (x[2999] != 6.f) throw Error("sum " + std::to_string(x[2999]));
  });
  for (auto& c : comms) {
    EXPECT_EQ(c->stats().moved_bytes, Communicator::allreduce_moved_bytes(12000, 6));
    EXPECT_EQ(c->inner().stats().calls, 2u);
    EXPECT_EQ(c->inner().stats().moved_bytes,
              Communicator::reduce_scatter_moved_bytes(12000, 3) + Communicator::allgather_moved_bytes(4000, 3));
    EXPECT_EQ(c->outer().stats().calls, 1u);
    EXPECT_EQ(c->outer().stats().payload_bytes, 4000u);
    EXPECT_EQ(c->outer().stats().moved_bytes, Communicator::allreduce_moved_bytes(4000, 2));
  }
  CompositeCommunicator& c = *comms[0];
  bf16_bits b{0};
  try {
    c.allreduce(&b, 1, DType::kBf16, ReduceOp::kSum);
    FAIL() << "bf16 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("all-reduce sum over bf16 is not supported (supported: f32 sum, f32 max, "
                                         "f16 sum, i8 sum, i8 max, i32 sum, i32 max)"),
              std::string::npos)
        << e.what();
  }
  float x = 0.f;
  EXPECT_THROW(c.allreduce(&x, 1, DType::kF32, ReduceOp::kSum, Device::cuda(0)), Error);
  try {
    c.split(0, 0);
    FAIL() << "split was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("split is not offered by the composite communicator"), std::string::npos)
        << e.what();
  }
  world.barrier();
}

}  // namespace
}  // namespace tg

int main(int argc, char** argv) { return tg::testing_mpi::run_all_tests_under_mpi_if_launched(argc, argv); }
