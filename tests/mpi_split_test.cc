// Tests of MpiCommunicator::split and of MPI driven from several threads, with real MPI processes (re-launched
// under mpirun --oversubscribe by tests/common/mpi_launch.h; SKIPPED without mpirun):
//   - split by color/key on 4 processes: sizes, ranks by (key, rank), color < 0 joining none, collectives on the
//     new groups and their own byte counters; split_shared_memory (every process of a test runs on this host);
//   - two threads of each process driving two split communicators at once (small and ring collectives,
//     all-gathers, barriers), once with MPI_THREAD_MULTIPLE and once under the process-wide lock
//     (TG_MPI_THREAD_LEVEL=serialized).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include "common/mpi_launch.h"
#include "terngrad/comm/mpi_communicator.h"
#include "terngrad/core/error.h"

namespace tg {
namespace {

TEST(MpiSplit, GroupsRankedByKey) {
  TG_RUN_ON_N_MPI_RANKS(4);
  MpiCommunicator world;
  const int r = world.rank();
  // Even ranks 0, 2 and odd rank 1 (rank 3 joins none); keys -r: the higher rank first.
  std::unique_ptr<Communicator> sub = world.split(r == 3 ? -1 : r % 2, -r);
  if (r == 3) {
    EXPECT_EQ(sub, nullptr);
  } else {
    ASSERT_NE(sub, nullptr);
    const int expected_size[3] = {2, 1, 2}, expected_rank[3] = {1, 0, 0};
    EXPECT_EQ(sub->size(), expected_size[r]);
    EXPECT_EQ(sub->rank(), expected_rank[r]);
    int32_t sum = r + 1;
    sub->allreduce(&sum, 1, DType::kI32, ReduceOp::kSum);
    EXPECT_EQ(sum, r % 2 == 0 ? 1 + 3 : 2);
    std::vector<int32_t> members(sub->size());
    const int32_t me = r;
    sub->allgather(&me, members.data(), sizeof(me));
    EXPECT_EQ(members, r % 2 == 0 ? std::vector<int32_t>({2, 0}) : std::vector<int32_t>({1}));
    EXPECT_EQ(sub->stats().calls, 2u);
  }
  EXPECT_EQ(world.stats().calls, 0u);  // split is set-up, and the sub-group counts its own
  // Every process of this test runs on this host.
  std::unique_ptr<MpiCommunicator> host = world.split_shared_memory();
  EXPECT_EQ(host->size(), 4);
  EXPECT_EQ(host->rank(), r);
  world.barrier();
}

// Each of two threads drives its own split of the world: all-reduces below and above the ring's threshold,
// all-gathers and barriers, at the same time as the other thread. Sums of small integers are exact in any
// order, so every result is checked exactly.
void two_threads_drive_two_splits() {
  MpiCommunicator world;
  const int N = world.size();
  std::unique_ptr<Communicator> split[2] = {world.split(0, world.rank()), world.split(0, -world.rank())};
  std::string errors[2];
  auto drive = [&](int which) {
    Communicator& c = *split[which];
    try {
      for (int round = 0; round < 6; ++round) {
        for (int64_t n : {int64_t{16}, int64_t{300007}}) {
          std::vector<float> x(n);
          for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(c.rank() + 1 + i % 7 + round + which);
          c.allreduce(x.data(), n, DType::kF32, ReduceOp::kSum);
          for (int64_t i = 0; i < n; ++i) {
            const float want = static_cast<float>(N * (N + 1) / 2 + N * (i % 7 + round + which));
            if (x[i] != want)
              throw Error("split " + std::to_string(which) + ": all-reduce element " + std::to_string(i) + " is " +
                          std::to_string(x[i]));
          }
        }
        std::vector<uint8_t> gathered(N * 1000);
        std::vector<uint8_t> mine(1000, static_cast<uint8_t>(c.rank() + 10 * which));
        c.allgather(mine.data(), gathered.data(), 1000);
        for (int w = 0; w < N; ++w)
          if (gathered[w * 1000 + 999] != static_cast<uint8_t>(w + 10 * which))
            throw Error("split " + std::to_string(which) + ": all-gather block " + std::to_string(w));
        c.barrier();
      }
    } catch (const std::exception& e) {
      errors[which] = e.what();
    }
  };
  std::thread other(drive, 1);
  drive(0);
  other.join();
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
  world.barrier();
}

TEST(MpiThreads, TwoThreadsDriveTwoSplitsAtOnce) {
  TG_RUN_ON_N_MPI_RANKS(2);
  std::printf("MPI_THREAD_MULTIPLE provided: %s\n", MpiEnvironment::thread_multiple() ? "yes" : "no");
  two_threads_drive_two_splits();
}

TEST(MpiThreads, TwoThreadsDriveTwoSplitsUnderTheLock) {
  if (!testing_mpi::g_under_mpi) {
    setenv("TG_MPI_THREAD_LEVEL", "serialized", 1);  // the launched processes inherit it
    testing_mpi::launch_current_test_under_mpirun(2);
    unsetenv("TG_MPI_THREAD_LEVEL");
    return;
  }
  EXPECT_FALSE(MpiEnvironment::thread_multiple()) << "TG_MPI_THREAD_LEVEL=serialized was not followed";
  two_threads_drive_two_splits();
}

}  // namespace
}  // namespace tg

int main(int argc, char** argv) { return tg::testing_mpi::run_all_tests_under_mpi_if_launched(argc, argv); }
