// Tests of MpiCommunicator's reduce-scatter and in-place all-gather with real MPI processes (2, 3 and 4, re-
// launched under mpirun --oversubscribe by tests/common/mpi_launch.h; SKIPPED without mpirun). Every dtype/op
// MPI reduces, out of place and in place, on the small path (MPI_Ireduce_scatter_block) and on the ring:
//   - the ring's blocks equal, bit for bit, the order the header documents (block b: x[b+1], x[b+2], ..., x[b]),
//     and an all-gather of them gives the ring all-reduce's bits;
//   - the small path equals the rank-order reference bit for bit where the order cannot matter (two ranks,
//     integers, max) and within rounding otherwise (Open MPI's order).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "common/mpi_launch.h"
#include "common/reduce_reference.h"
#include "terngrad/comm/mpi_communicator.h"
#include "terngrad/core/error.h"

namespace tg {
namespace {

using testing::ReduceCase;

double element_as_double(const std::vector<uint8_t>& v, int64_t i, DType dtype) {
  double out = 0;
  testing::with_type(dtype, [&](auto tag) {
    using T = decltype(tag);
    T x;
    std::memcpy(&x, v.data() + i * sizeof(T), sizeof(T));
    if constexpr (std::is_same_v<T, half_bits>)
      out = half_to_float(x);
    else if constexpr (std::is_same_v<T, bf16_bits>)
      out = bf16_to_float(x);
    else
      out = static_cast<double>(x);
  });
  return out;
}

// Block r of every rank's input, as this rank's reduce-scatter must produce it.
void check_reduce_scatter(MpiCommunicator& c, const ReduceCase& k, int64_t n, bool ring) {
  const int N = c.size(), r = c.rank();
  const size_t elem = dtype_size(k.dtype);
  std::vector<std::vector<uint8_t>> inputs(N);
  for (int w = 0; w < N; ++w)
    inputs[w] = testing::random_input_bytes(k.dtype, N * n, 41u * w + static_cast<uint32_t>(n));
  std::vector<uint8_t> out(n * elem, 0xEE), in_place = inputs[r];
  c.reduce_scatter(inputs[r].data(), out.data(), n, k.dtype, k.op);
  c.reduce_scatter(in_place.data(), in_place.data() + r * n * elem, n, k.dtype, k.op);
  const std::vector<uint8_t> placed(in_place.begin() + r * n * elem, in_place.begin() + (r + 1) * n * elem);
  const std::string what = fmt::format("{} ranks, {} {}, n={}, {} path, rank {}", N, dtype_name(k.dtype),
                                       enum_name(k.op), n, ring ? "ring" : "small", r);
  EXPECT_EQ(out, placed) << what << ": in place differs";
  std::vector<int> order;
  if (ring)
    for (int s = 1; s <= N; ++s) order.push_back((r + s) % N);
  else
    for (int w = 0; w < N; ++w) order.push_back(w);
  const std::vector<uint8_t> want = testing::reduce_in_order(inputs, order, r * n, n, k.dtype, k.op);
  const bool exact = ring || N == 2 || k.op == ReduceOp::kMax || k.dtype == DType::kI8 || k.dtype == DType::kI32;
  if (exact) {
    ASSERT_EQ(out, want) << what;
    return;
  }
  const double tol = k.dtype == DType::kF16 ? 2e-3 * N : 1e-6 * N;
  for (int64_t i = 0; i < n; ++i) {
    double scale = 0;
    for (int w = 0; w < N; ++w) scale += std::abs(element_as_double(inputs[w], r * n + i, k.dtype));
    const double got = element_as_double(out, i, k.dtype), expected = element_as_double(want, i, k.dtype);
    if (got == expected || (std::isnan(got) && std::isnan(expected))) continue;  // infinities and NaN too
    ASSERT_NEAR(got, expected, tol * std::max(scale, 1.0)) << what << " element " << i;
  }
}

void check_reduce_scatter_every_case() {
  MpiCommunicator c;
  const int N = c.size();
  uint64_t payload = 0, moved = 0, calls = 0;
  for (const ReduceCase& k : testing::reduce_cases(/*bf16=*/false)) {
    const int64_t elem = static_cast<int64_t>(dtype_size(k.dtype));
    // Small: under 256 KiB in all. Ring: about 1.25 MiB in all, not a multiple of the 4 MiB segments.
    for (int64_t n : {int64_t{1}, int64_t{1001}, (int64_t{5} << 20) / 4 / elem / N + 3}) {
      const bool ring = n * N * elem >= (int64_t{256} << 10);
      check_reduce_scatter(c, k, n, ring);
      calls += 2;
      payload += 2 * static_cast<uint64_t>(N * n * elem);
      moved += 2 * Communicator::reduce_scatter_moved_bytes(static_cast<uint64_t>(N * n * elem), N);
    }
  }
  EXPECT_EQ(c.stats().calls, calls);
  EXPECT_EQ(c.stats().payload_bytes, payload);
  EXPECT_EQ(c.stats().moved_bytes, moved);
  // bf16 is refused, listing what MPI reduces.
  bf16_bits b[4] = {};
  try {
    c.reduce_scatter(b, b + c.rank(), 1, DType::kBf16, ReduceOp::kSum);
    FAIL() << "bf16 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("reduce-scatter sum over bf16 is not supported (supported: f32 sum"),
              std::string::npos)
        << e.what();
  }
}

TEST(MpiReduceScatter, MatchesTheReferenceOnTwoRanks) {
  TG_RUN_ON_N_MPI_RANKS(2);
  check_reduce_scatter_every_case();
}

TEST(MpiReduceScatter, MatchesTheReferenceOnThreeRanks) {
  TG_RUN_ON_N_MPI_RANKS(3);
  check_reduce_scatter_every_case();
}

TEST(MpiReduceScatter, MatchesTheReferenceOnFourRanks) {
  TG_RUN_ON_N_MPI_RANKS(4);
  check_reduce_scatter_every_case();
}

// On the ring, reduce-scatter then all-gather is the all-reduce, bit for bit (float sums over 3 ranks, whose
// order matters); all-gather in place on both of its paths.
TEST(MpiReduceScatter, RingReduceScatterThenAllgatherIsTheAllreduce) {
  TG_RUN_ON_N_MPI_RANKS(3);
  MpiCommunicator c;
  const int N = c.size(), r = c.rank();
  for (DType dtype : {DType::kF32, DType::kF16}) {
    const size_t elem = dtype_size(dtype);
    const int64_t n = 200003;  // per rank: 2.4 MB of f32 in all
    const std::vector<uint8_t> input = testing::random_input_bytes(dtype, N * n, 7u + r);
    std::vector<uint8_t> reduced = input, gathered(N * n * elem, 0xEE);
    c.allreduce(reduced.data(), N * n, dtype, ReduceOp::kSum);
    c.reduce_scatter(input.data(), gathered.data() + r * n * elem, n, dtype, ReduceOp::kSum);
    c.allgather(gathered.data() + r * n * elem, gathered.data(), n * elem);  // in place, ring path
    EXPECT_EQ(gathered, reduced) << dtype_name(dtype);
  }
  for (size_t bytes : {size_t{5}, size_t{300001}}) {  // small path (MPI_IN_PLACE) and ring
    std::vector<uint8_t> all(N * bytes, 0xEE);
    for (size_t k = 0; k < bytes; ++k) all[r * bytes + k] = static_cast<uint8_t>(13 * r + k);
    c.allgather(all.data() + r * bytes, all.data(), bytes);
    for (int w = 0; w < N; ++w)
      for (size_t k = 0; k < bytes; ++k)
        ASSERT_EQ(all[w * bytes + k], static_cast<uint8_t>(13 * w + k)) << bytes << " bytes, block " << w;
  }
}

}  // namespace
}  // namespace tg

int main(int argc, char** argv) { return tg::testing_mpi::run_all_tests_under_mpi_if_launched(argc, argv); }
