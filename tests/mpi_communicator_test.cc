// Tests of MpiCommunicator with real MPI processes. Run plainly (ctest), every test re-launches this binary
// under `mpirun --allow-run-as-root --oversubscribe -np 2` (3 for the MpiCommunicatorThreeRanks suite) with a
// filter naming itself and checks that every rank ran and passed it (tests/common/mpi_launch.h); under mpirun
// (OMPI_COMM_WORLD_SIZE set) the test bodies run on every rank.
// Without an mpirun on PATH the tests report SKIPPED.
#include "terngrad/comm/mpi_communicator.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <mpi.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "common/mpi_launch.h"
#include "terngrad/backend/backend.h"
#include "terngrad/comm/thread_communicator.h"
#include "terngrad/core/error.h"
#include "terngrad/exchange/gradient_exchange.h"

namespace tg {
namespace {

// The CPU backend the exchanges run their codec ops on (the gradients are host tensors).
Backend& cpu_backend() {
  static std::unique_ptr<Backend> be = make_backend("cpu");
  return *be;
}

constexpr int kRanks = 2;

#define TG_RUN_ON_MPI_RANKS() TG_RUN_ON_N_MPI_RANKS(kRanks)

TEST(MpiCommunicator, CollectivesAndByteCounters) {
  TG_RUN_ON_MPI_RANKS();
  MpiCommunicator c;
  ASSERT_EQ(c.size(), kRanks);
  const int r = c.rank(), N = c.size();
  const int64_t n = 1001;
  auto value = [](int rank, int64_t i) { return static_cast<float>(0.5 * rank - 0.01 * i); };
  std::vector<float> sum(n), mx(n);
  std::vector<int8_t> s8(n);
  std::vector<int32_t> m32(n);
  std::vector<half_bits> h(n);
  for (int64_t i = 0; i < n; ++i) {
    sum[i] = mx[i] = value(r, i);
    s8[i] = static_cast<int8_t>((i + r) % 3 - 1);
    m32[i] = static_cast<int32_t>((r - 1) * i);
    h[i] = float_to_half(value(r, i));
  }
  c.allreduce(sum.data(), n, DType::kF32, ReduceOp::kSum);
  c.allreduce(mx.data(), n, DType::kF32, ReduceOp::kMax);
  c.allreduce(s8.data(), n, DType::kI8, ReduceOp::kSum);
  c.allreduce(m32.data(), n, DType::kI32, ReduceOp::kMax);
  c.allreduce(h.data(), n, DType::kF16, ReduceOp::kSum);
  for (int64_t i = 0; i < n; ++i) {
    float es = 0.f, em = -1e30f, eh = 0.f;
    int e8 = 0, e32 = std::numeric_limits<int>::min();
    for (int w = 0; w < N; ++w) {
      es += value(w, i);
      em = std::max(em, value(w, i));
      e8 += (i + w) % 3 - 1;
      e32 = std::max<int>(e32, static_cast<int>((w - 1) * i));
      eh += half_to_float(float_to_half(value(w, i)));
    }
    ASSERT_EQ(sum[i], es) << i;
    ASSERT_EQ(mx[i], em) << i;
    ASSERT_EQ(s8[i], e8) << i;
    ASSERT_EQ(m32[i], e32) << i;
    ASSERT_EQ(h[i].bits, float_to_half(eh).bits) << i;
  }
  std::vector<uint8_t> send(7), recv(7 * N);
  for (int k = 0; k < 7; ++k) send[k] = static_cast<uint8_t>(10 * r + k);
  c.allgather(send.data(), recv.data(), 7);
  for (int w = 0; w < N; ++w)
    for (int k = 0; k < 7; ++k) ASSERT_EQ(recv[w * 7 + k], 10 * w + k);
  std::vector<int32_t> b = {r, r + 5};
  c.broadcast(b.data(), 8, 1);
  EXPECT_EQ(b, (std::vector<int32_t>{1, 6}));
  c.barrier();
  const uint64_t p4 = 4 * n, p1 = n, p2 = 2 * n;
  EXPECT_EQ(c.stats().calls, 8u);
  EXPECT_EQ(c.stats().payload_bytes, 3 * p4 + p1 + p2 + 7 + 8);
  EXPECT_EQ(c.stats().moved_bytes, 3 * Communicator::allreduce_moved_bytes(p4, N) +
                                       Communicator::allreduce_moved_bytes(p1, N) +
                                       Communicator::allreduce_moved_bytes(p2, N) + 7u * (N - 1) + 8u);
}

TEST(MpiCommunicator, FailedCallNamesIt) {
  TG_RUN_ON_MPI_RANKS();
  int rank = 0;
  try {
    TG_MPI_CHECK(MPI_Comm_rank(MPI_COMM_NULL, &rank));
    FAIL() << "expected an MPI error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("MPI_Comm_rank"), std::string::npos) << e.what();
  }
  MpiCommunicator c;
  float x = 0.f;
  EXPECT_THROW(c.allreduce(&x, 1, DType::kF32, ReduceOp::kSum, Device::cuda(0)), Error);
}

// The same inputs summed by two MPI processes and by two threads of one process (ThreadCommunicator) give the
// same bits, on the MPI_Iallreduce path (4 KB) and on the ring (3 MB), f32 and f16: with two ranks every element
// is one addition, and addition is commutative. With three or more ranks the orders differ (the ring reduces
// block b as (x_b + x_b+1) + x_b+2 ..., starting at a different rank for each block; the threads add in rank
// order; MPI_Iallreduce in Open MPI's order), so float sums are compared for two ranks only.
TEST(MpiCommunicator, TwoRankSumsMatchThreadCommunicator) {
  TG_RUN_ON_MPI_RANKS();
  MpiCommunicator c;
  auto on_two_threads = [](auto& data, int64_t n, DType dtype) {
    auto comms = make_thread_communicators(2);
    std::thread other([&] { comms[1]->allreduce(data[1].data(), n, dtype, ReduceOp::kSum); });
    comms[0]->allreduce(data[0].data(), n, dtype, ReduceOp::kSum);
    other.join();
  };
  for (int64_t n : {int64_t{1001}, int64_t{786439}}) {
    std::vector<std::vector<float>> x(2);
    std::vector<std::vector<half_bits>> h(2);
    for (int w = 0; w < 2; ++w) {
      std::mt19937 rng(5 + w);
      std::uniform_real_distribution<float> d(-1.f, 1.f);
      for (int64_t i = 0; i < n; ++i) {
        x[w].push_back(d(rng) * (1 + i % 7));
        h[w].push_back(float_to_half(d(rng)));
      }
    }
    std::vector<float> mpi = x[c.rank()];
    std::vector<half_bits> mpi_h = h[c.rank()];
    c.allreduce(mpi.data(), n, DType::kF32, ReduceOp::kSum);
    c.allreduce(mpi_h.data(), n, DType::kF16, ReduceOp::kSum);
    on_two_threads(x, n, DType::kF32);
    on_two_threads(h, n, DType::kF16);
    ASSERT_EQ(std::memcmp(mpi.data(), x[0].data(), n * sizeof(float)), 0) << "f32, n=" << n;
    ASSERT_EQ(std::memcmp(mpi_h.data(), h[0].data(), n * sizeof(half_bits)), 0) << "f16, n=" << n;
  }
  // bf16 is the NCCL and thread communicators' addition; MPI refuses it, listing what it supports.
  bf16_bits b{0};
  try {
    c.allreduce(&b, 1, DType::kBf16, ReduceOp::kSum);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(
        std::string(e.what()).find("all-reduce sum over bf16 is not supported (supported: f32 sum, f32 max, f16 sum"),
        std::string::npos)
        << e.what();
  }
}

// Two processes x L local workers (global index = process * L + local). Both ranks build the same deterministic
// workload; each process contributes its L workers' gradients. For every coding, both exchange modes, serial
// and overlapped (several buckets, tensors reported ready one by one as backward would):
// - ternary tensors equal, bit for bit, one process exchanging all workers' gradients alone (integer code
//   sums do not depend on the grouping);
// - fp32/fp16 tensors are sums formed inside each process (worker order), then across the processes: with one
//   worker per process that is the single-process sum; with three it is (w0+w1+w2)+(w3+w4+w5), checked
//   against that grouping explicitly (float addition is not associative).
TEST(MpiGradientExchange, MatchesSingleProcessComputation) {
  TG_RUN_ON_MPI_RANKS();
  MpiCommunicator c;
  const std::vector<ParamInfo> params = {
      {"conv1/weights", 75}, {"conv1/biases", 3}, {"fc/weights", 1000}, {"logits/weights", 20}, {"logits/biases", 2}};
  auto make_grads = [&](int w) {
    std::mt19937 rng(77 + w);
    std::normal_distribution<float> d(0.f, 0.02f);
    std::vector<std::vector<float>> g;
    for (auto& p : params) {
      std::vector<float> v(p.numel);
      for (auto& x : v) x = d(rng);
      g.push_back(std::move(v));
    }
    return g;
  };
  auto views = [](std::vector<std::vector<float>>& g) {
    std::vector<Tensor> v;
    for (auto& x : g) v.emplace_back(x.data(), Shape{static_cast<int64_t>(x.size())}, DType::kF32, Device::cpu());
    return v;
  };
  for (int local : {1, 3}) {
    const int N = c.size() * local;
    for (int bits : {1, 16, 32}) {
      for (const char* mode : {"allgather2", "allreduce8"}) {
        for (bool overlap : {false, true}) {
          CompressionFlags f;
          f.grad_bits = bits;
          f.clip_factor = 2.5f;
          f.size_to_binarize = 4;
          const CompressionPolicy pol(f, params);
          const uint32_t step = 5;
          ExchangeOptions o;
          o.exchange = mode;
          o.seed = 99;
          o.overlap = overlap;
          o.bucket_mb = 1.0 / 1024;  // 1 KiB of fp32 gradient: several buckets
          std::vector<std::vector<std::vector<float>>> mine(local);
          std::vector<std::vector<Tensor>> mine_views;
          for (int l = 0; l < local; ++l) mine[l] = make_grads(c.rank() * local + l);
          for (int l = 0; l < local; ++l) mine_views.push_back(views(mine[l]));
          GradientExchange ex(cpu_backend(), pol, mine_views, {0}, &c, o);
          ASSERT_EQ(ex.num_workers(), N);
          ASSERT_EQ(ex.overlapped(), overlap);
          if (overlap) {
            ASSERT_EQ(ex.num_buckets(), 3);  // {logits}, {fc} (larger than a bucket: alone), {conv1}
          }
          ex.begin(step);
          for (int first = pol.num_tensors(); first >= 0; --first) {  // as backward reports them
            ex.tensors_ready(first);
            ex.progress();
          }
          const ExchangeStats st = ex.finish();
          // The single-process computation of the same step.
          std::vector<std::vector<std::vector<float>>> all(N);
          std::vector<std::vector<Tensor>> all_views;
          for (int w = 0; w < N; ++w) all[w] = make_grads(w);
          for (int w = 0; w < N; ++w) all_views.push_back(views(all[w]));
          o.overlap = false;
          GradientExchange alone(cpu_backend(), pol, all_views, {0}, nullptr, o);
          const ExchangeStats ast = alone.run(step);
          const std::string what =
              fmt::format("{} local, grad_bits {}, {}, {}", local, bits, mode, overlap ? "overlapped" : "serial");
          for (size_t t = 0; t < params.size(); ++t) {
            const GradCoding coding = pol.tensors()[t].coding;
            if (coding == GradCoding::kTernary || local == 1) {
              ASSERT_EQ(mine[0][t], all[0][t]) << what << ", tensor " << params[t].name;
              continue;
            }
            for (size_t i = 0; i < mine[0][t].size(); ++i) {  // grouped sums, as the two processes form them
              float part[2] = {0.f, 0.f};
              for (int p = 0; p < 2; ++p)
                for (int l = 0; l < local; ++l) {
                  const float g = make_grads(p * local + l)[t][i];
                  part[p] += coding == GradCoding::kF16 ? half_to_float(float_to_half(g)) : g;
                }
              float expected = part[0] + part[1];
              if (coding == GradCoding::kF16)
                expected = half_to_float(
                    float_to_half(half_to_float(float_to_half(part[0])) + half_to_float(float_to_half(part[1]))));
              ASSERT_EQ(mine[0][t][i], expected / N) << what << ", tensor " << params[t].name << " element " << i;
            }
          }
          EXPECT_EQ(st.payload_bytes, ast.payload_bytes) << what;
          EXPECT_EQ(st.moved_bytes, ast.moved_bytes) << what;
          EXPECT_GT(st.process_wire_bytes, 0u) << what;
        }
      }
    }
  }
}

// A non-finite gradient on one process stops every process with the same error, in the overlapped path too
// (none is left waiting in a collective).
TEST(MpiGradientExchange, NonFiniteGradientStopsEveryProcess) {
  TG_RUN_ON_MPI_RANKS();
  MpiCommunicator c;
  const std::vector<ParamInfo> params = {{"conv1/weights", 300}, {"fc/weights", 500}, {"logits/weights", 20}};
  CompressionFlags f;
  f.grad_bits = 1;
  const CompressionPolicy pol(f, params);
  std::vector<std::vector<float>> g;
  for (auto& p : params) g.emplace_back(p.numel, 0.01f * (c.rank() + 1));
  if (c.rank() == 1) g[0][7] = std::numeric_limits<float>::infinity();
  std::vector<Tensor> v;
  for (auto& x : g) v.emplace_back(x.data(), Shape{static_cast<int64_t>(x.size())}, DType::kF32, Device::cpu());
  ExchangeOptions o;
  o.bucket_mb = 1.0 / 1024;
  GradientExchange ex(cpu_backend(), pol, {v}, {0}, &c, o);
  try {
    ex.run(11);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("conv1/weights"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("step 11"), std::string::npos) << e.what();
  }
}

// ---- the non-blocking path: large collectives (pipelined ring) against the blocking MPI calls ----------

// fp16 sum as the communicator defines it, for the blocking reference.
void half_sum_reference(void* in, void* inout, int* len, MPI_Datatype*) {
  const half_bits* a = static_cast<const half_bits*>(in);
  half_bits* b = static_cast<half_bits*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = float_to_half(half_to_float(a[i]) + half_to_float(b[i]));
}

// With `specials`, every 1000th fp16 value is one of: subnormals, the largest finite (sums overflow to inf),
// -0, inf, -inf (not NaN: its payload may differ between the software and F16C conversions).
template <typename T>
std::vector<T> random_values(int64_t n, uint32_t seed, double lo, double hi, bool specials = false) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<T> v(n);
  for (auto& x : v) {
    if constexpr (std::is_same_v<T, half_bits>)
      x = float_to_half(static_cast<float>(d(rng)));
    else if constexpr (std::is_floating_point_v<T>)
      x = static_cast<T>(d(rng));
    else
      x = static_cast<T>(std::lround(d(rng)));
  }
  if constexpr (std::is_same_v<T, half_bits>) {
    const uint16_t special[] = {0x0001, 0x8001, 0x03ff, 0x0400, 0x7bff, 0xfbff, 0x8000, 0x7c00, 0xfc00, 0x3c00};
    if (specials)
      for (int64_t i = 0; i < n; i += 1000) v[i].bits = special[(i / 1000 + seed) % 10];
  }
  return v;
}

// Every large all-reduce (f32/i32/i8 sum and max, f16 sum) and all-gather through MpiCommunicator equals the
// blocking MPI_Allreduce/MPI_Allgather of the same data, bit for bit, on every rank (float sums over more than
// two ranks: identical on every rank and within rounding); twice in a row (the second reuses the ring's
// buffers). Counts are odd and not multiples of the ring's 4 MiB segments.
void check_large_collectives_match_blocking_mpi() {
  MpiCommunicator c;
  const int r = c.rank(), N = c.size();
  MPI_Comm ref;
  ASSERT_EQ(MPI_Comm_dup(MPI_COMM_WORLD, &ref), MPI_SUCCESS);
  MPI_Op half_sum;
  ASSERT_EQ(MPI_Op_create(&half_sum_reference, 1, &half_sum), MPI_SUCCESS);
  auto check = [&](auto tag, int64_t n, DType dtype, ReduceOp op, MPI_Datatype type, MPI_Op mop, double lo, double hi) {
    using T = decltype(tag);
    for (int round = 0; round < 2; ++round) {
      const std::vector<T> input =
          random_values<T>(n, 1000u * static_cast<uint32_t>(round) + 17u * r + 1, lo, hi, /*specials=*/N == 2);
      std::vector<T> ours = input, want = input;
      c.allreduce(ours.data(), n, dtype, op);
      ASSERT_EQ(MPI_Allreduce(MPI_IN_PLACE, want.data(), static_cast<int>(n), type, mop, ref), MPI_SUCCESS);
      const std::string what = fmt::format("{} {} n={} round {}", dtype_name(dtype), enum_name(op), n, round);
      // Two ranks, or integers, or max: the reduction is the same whatever the order, so the bits must match.
      // Float sums over more ranks depend on the order (the ring's differs from Open MPI's): every rank must
      // hold the same bits (replicas stay identical) and be within rounding of the blocking result.
      const bool exact = N == 2 || op == ReduceOp::kMax || dtype == DType::kI8 || dtype == DType::kI32;
      if (exact) {
        ASSERT_EQ(std::memcmp(ours.data(), want.data(), n * sizeof(T)), 0) << what;
        continue;
      }
      std::vector<T> rank0 = ours;
      ASSERT_EQ(MPI_Bcast(rank0.data(), static_cast<int>(n * sizeof(T)), MPI_BYTE, 0, ref), MPI_SUCCESS);
      ASSERT_EQ(std::memcmp(ours.data(), rank0.data(), n * sizeof(T)), 0) << what << ": ranks differ";
      const double tol = dtype == DType::kF16 ? 4e-3 * N : 1e-6 * N;  // inputs are within [-2, 2]
      for (int64_t i = 0; i < n; ++i) {
        double a, b;
        if constexpr (std::is_same_v<T, half_bits>) {
          a = half_to_float(ours[i]);
          b = half_to_float(want[i]);
        } else {
          a = ours[i];
          b = want[i];
        }
        ASSERT_NEAR(a, b, tol * std::max(1.0, std::abs(b))) << what << " element " << i;
      }
    }
  };
  const int64_t m = 1 << 20;
  check(float{}, 3 * m / 2 + 3, DType::kF32, ReduceOp::kSum, MPI_FLOAT, MPI_SUM, -1.0, 1.0);  // 6 MB
  check(float{}, 3 * m / 2 + 3, DType::kF32, ReduceOp::kMax, MPI_FLOAT, MPI_MAX, -1.0, 1.0);
  check(int32_t{}, m + 1, DType::kI32, ReduceOp::kSum, MPI_INT32_T, MPI_SUM, -1e6, 1e6);     // 4 MB
  check(int8_t{}, 5 * m + 1, DType::kI8, ReduceOp::kSum, MPI_INT8_T, MPI_SUM, -40.0, 40.0);  // 5 MB
  check(int8_t{}, 5 * m + 1, DType::kI8, ReduceOp::kMax, MPI_INT8_T, MPI_MAX, -127.0, 127.0);
  check(half_bits{}, 5 * m / 2 + 5, DType::kF16, ReduceOp::kSum, MPI_UINT16_T, half_sum, -2.0, 2.0);  // 5 MB
  for (size_t bytes : {size_t{3} * m + 1, size_t{9} * m + 7}) {
    for (int round = 0; round < 2; ++round) {
      const std::vector<uint8_t> send = random_values<uint8_t>(bytes, 31u * r + round, 0.0, 255.0);
      std::vector<uint8_t> ours(N * bytes, 0xEE), want(N * bytes);
      c.allgather(send.data(), ours.data(), bytes);
      ASSERT_EQ(MPI_Allgather(send.data(), static_cast<int>(bytes), MPI_BYTE, want.data(), static_cast<int>(bytes),
                              MPI_BYTE, ref),
                MPI_SUCCESS);
      ASSERT_EQ(ours, want) << "allgather of " << bytes << " bytes, round " << round;
    }
  }
  // The byte counters follow the model whatever the path.
  const uint64_t calls = 2 * 6 + 2 * 2;
  EXPECT_EQ(c.stats().calls, calls);
  MPI_Op_free(&half_sum);
  MPI_Comm_free(&ref);
}

TEST(MpiCommunicator, LargeCollectivesMatchBlockingMpi) {
  TG_RUN_ON_MPI_RANKS();
  check_large_collectives_match_blocking_mpi();
}

// Three ranks: uneven ring blocks, a reduce-scatter of two steps.
TEST(MpiCommunicatorThreeRanks, LargeCollectivesMatchBlockingMpi) {
  TG_RUN_ON_N_MPI_RANKS(3);
  check_large_collectives_match_blocking_mpi();
}

double thread_cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_THREAD, &u);
  return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + 1e-6 * double(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

// Rank 1 enters each collective late; rank 0 waits in it on a separate thread (as the overlapped exchange's
// communication thread does) and must leave the core to others: its thread's CPU time (user + sys) stays
// under 20% of the wait. A blocking Open MPI collective busy-polls and uses ~100% (printed for reference).
// Rank 1's delay starts when rank 0's thread is about to enter (it creates a file; both ranks run on this
// machine), not when the ranks leave the barrier, so rank 0 waits the whole delay at any speed.
TEST(MpiCommunicator, WaitingForALatePeerLeavesTheCore) {
  TG_RUN_ON_MPI_RANKS();
  MpiCommunicator c;
  const int r = c.rank();
  char entering[64] = {};  // rank 0's name for the file, with its pid
  if (r == 0) std::snprintf(entering, sizeof entering, "/tmp/tg_late_peer_%d", static_cast<int>(::getpid()));
  c.broadcast(entering, sizeof entering, 0);
  std::vector<float> big((size_t{4} << 20) / sizeof(float), 1.f), small(16, 1.f);
  std::vector<uint8_t> send(size_t{2} << 20, 1), gathered(2 * send.size());
  struct Case {
    const char* what;
    int late_ms;
    std::function<void()> call;
  };
  const std::vector<Case> cases = {
      {"all-reduce 4 MB (ring)", 1000,
       [&] { c.allreduce(big.data(), int64_t(big.size()), DType::kF32, ReduceOp::kSum); }},
      {"all-reduce 64 B (MPI_Iallreduce)", 500,
       [&] { c.allreduce(small.data(), int64_t(small.size()), DType::kF32, ReduceOp::kSum); }},
      {"all-gather 2 MB (ring)", 500, [&] { c.allgather(send.data(), gathered.data(), send.size()); }},
      {"broadcast 64 B", 500, [&] { c.broadcast(small.data(), 64, 1); }},
      {"barrier", 500, [&] { c.barrier(); }},
  };
  for (const Case& k : cases) {
    c.barrier();
    if (r == 1) {
      for (int i = 0; i < 120000 && ::access(entering, F_OK) != 0; ++i)  // 120 s: rank 0 failed to create it
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      std::this_thread::sleep_for(std::chrono::milliseconds(k.late_ms));
      k.call();
      continue;
    }
    double wall = 0, cpu = 0;
    std::thread waiter([&] {
      const double c0 = thread_cpu_seconds();
      const auto t0 = std::chrono::steady_clock::now();
      if (std::FILE* f = std::fopen(entering, "w")) std::fclose(f);
      k.call();
      wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      cpu = thread_cpu_seconds() - c0;
    });
    waiter.join();
    std::remove(entering);
    EXPECT_GT(wall, 0.8 * k.late_ms / 1e3) << k.what << ": did not wait for the late rank";
    EXPECT_LT(cpu, 0.2 * wall) << k.what << ": the waiting thread used " << cpu << " s of CPU in " << wall << " s";
    std::printf("%s, peer %d ms late: waited %.3f s, waiting thread's CPU %.3f s (%.1f%%)\n", k.what, k.late_ms, wall,
                cpu, 100 * cpu / wall);
  }
  // For reference: the blocking call, in the same conditions.
  c.barrier();
  if (r == 1) std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const double c0 = thread_cpu_seconds();
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(MPI_Allreduce(MPI_IN_PLACE, small.data(), 16, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
  if (r == 0)
    std::printf("blocking MPI_Allreduce, peer 500 ms late: waited %.3f s, CPU %.3f s\n",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                thread_cpu_seconds() - c0);
}

}  // namespace
}  // namespace tg

int main(int argc, char** argv) { return tg::testing_mpi::run_all_tests_under_mpi_if_launched(argc, argv); }
