// Tests of connect_cpu_replicas for the three CPU layouts: 1 process x R replicas (threads only), P processes x 1
// replica and P processes x R replicas (real MPI processes under mpirun, SKIPPED without it). For every replica
// of every process and each of its groups (world, local, cross): the group is nullptr exactly when it would
// hold one rank, its size and this replica's rank in it follow the Topology, an all-gather of the members'
// global ranks lists the Topology's members in order, and an all-reduce of (rank + 1) gives their sum. Also:
// world and local are distinct objects with their own counters, and abort() frees a replica waiting in a group.
#include "terngrad/comm/replica_groups.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <exception>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "common/mpi_launch.h"
#include "terngrad/comm/mpi_communicator.h"
#include "terngrad/core/error.h"

namespace tg {
namespace {

// Checks one group of one replica against the Topology's member list (in the group's rank order).
void check_group(Communicator* c, const std::vector<int>& members, int rank, const char* which) {
  const std::string what = fmt::format("{} group of rank {}", which, rank);
  if (members.size() == 1) {
    if (c != nullptr) throw Error(what + ": a group of one rank is not nullptr");
    return;
  }
  if (c == nullptr) throw Error(what + ": missing");
  const int index = static_cast<int>(std::find(members.begin(), members.end(), rank) - members.begin());
  if (c->size() != static_cast<int>(members.size()) || c->rank() != index)
    throw Error(fmt::format("{}: rank {} of {}, expected {} of {}", what, c->rank(), c->size(), index, members.size()));
  std::vector<int32_t> gathered(members.size());
  const int32_t me = rank;
  c->allgather(&me, gathered.data(), sizeof(me));
  if (std::vector<int>(gathered.begin(), gathered.end()) != members)
    throw Error(fmt::format("{}: members {}, expected {}", what, fmt::join(gathered, ","), fmt::join(members, ",")));
  // Sums of (rank + 1), in f32 (several ranks' sums: shards and a tail in a composite) and i32.
  std::vector<float> x(7, static_cast<float>(rank + 1));
  c->allreduce(x.data(), 7, DType::kF32, ReduceOp::kSum);
  int32_t s = rank + 1;
  c->allreduce(&s, 1, DType::kI32, ReduceOp::kSum);
  const int want = std::accumulate(members.begin(), members.end(), 0) + static_cast<int>(members.size());
  if (s != want || x[6] != static_cast<float>(want) || x[0] != static_cast<float>(want))
    throw Error(fmt::format("{}: sum {} / {}, expected {}", what, s, x[6], want));
}

// Builds the topology and the groups of this process and checks every replica's groups on its own thread.
void check_layout(Communicator* processes, int R, int ranks_per_node, const std::string& expected_topology) {
  TopologyOptions o;
  o.ranks_per_node = ranks_per_node;
  const Topology t = Topology::build(processes, R, o);
  EXPECT_EQ(t.describe(), expected_topology);
  std::unique_ptr<ReplicaGroups> groups = connect_cpu_replicas(t, processes);
  ASSERT_EQ(groups->num_replicas(), R);
  std::vector<std::string> errors(R);
  std::vector<std::thread> threads;
  for (int r = 0; r < R; ++r)
    threads.emplace_back([&, r] {
      try {
        const int rank = t.rank_of(t.process_rank(), r);
        const ReplicaComms& c = groups->replica(r);
        std::vector<int> all(t.num_ranks());
        std::iota(all.begin(), all.end(), 0);
        check_group(c.world, all, rank, "world");
        check_group(c.local, t.node_ranks(t.node_of(rank)), rank, "local");
        check_group(c.cross, t.cross_ranks(t.local_rank_of(rank)), rank, "cross");
        if (c.world != nullptr && c.world == c.local) throw Error("world and local are one object");
      } catch (const std::exception& e) {
        errors[r] = e.what();
        groups->abort(errors[r]);  // the other replicas must not wait for this one
      }
    });
  for (auto& th : threads) th.join();
  for (int r = 0; r < R; ++r) EXPECT_EQ(errors[r], "") << expected_topology << ", replica " << r;
  if (processes) processes->barrier();
}

TEST(ReplicaGroups, OneProcessOfThreads) {
  check_layout(nullptr, 1, 0, "1 node x 1 rank (1 process x 1 replica; auto: one node per host)");
  check_layout(nullptr, 3, 0, "1 node x 3 ranks (1 process x 3 replicas; auto: one node per host)");
}

// A replica thread that fails aborts the groups: a replica waiting in its local group is freed with the reason.
TEST(ReplicaGroups, AbortFreesAWaitingReplica) {
  const Topology t = Topology::build(nullptr, 2, {});
  std::unique_ptr<ReplicaGroups> groups = connect_cpu_replicas(t, nullptr);
  std::string error;
  std::thread waiter([&] {
    try {
      groups->replica(1).local->barrier();
    } catch (const Error& e) {
      error = e.what();
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  groups->abort("replica 0's step failed");
  waiter.join();
  EXPECT_NE(error.find("barrier failed: rank 0 aborted: replica 0's step failed"), std::string::npos) << error;
  EXPECT_THROW(groups->replica(0).world->barrier(), Error);
}

// The teardowns (NCCL's finalize-all-then-wait) run before any communicator goes, in the order added.
TEST(ReplicaGroups, TeardownsRunBeforeTheCommunicatorsGo) {
  const Topology t = Topology::build(nullptr, 2, {});
  std::vector<std::string> seen;
  {
    std::unique_ptr<ReplicaGroups> groups = connect_cpu_replicas(t, nullptr);
    Communicator* world = groups->replica(1).world;
    groups->add_teardown([&seen, world] { seen.push_back(world->name()); });
    groups->add_teardown([&seen] { seen.push_back("second"); });
    EXPECT_TRUE(seen.empty());
  }
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_NE(seen[0].find("rank 1 of 2"), std::string::npos) << seen[0];  // still alive when the teardown ran
  EXPECT_EQ(seen[1], "second");
}

TEST(ReplicaGroupsMpi, ProcessesOfOneReplica) {
  TG_RUN_ON_N_MPI_RANKS(4);
  MpiCommunicator processes;
  check_layout(&processes, 1, 2, "2 nodes x 2 ranks (4 processes x 1 replica; --ranks_per_node 2)");
  check_layout(&processes, 1, 0, "1 node x 4 ranks (4 processes x 1 replica; auto: one node per host)");
  check_layout(&processes, 1, 1, "4 nodes x 1 rank (4 processes x 1 replica; --ranks_per_node 1)");
}

TEST(ReplicaGroupsMpi, TwoProcessesOfTwoReplicas) {
  TG_RUN_ON_N_MPI_RANKS(2);
  MpiCommunicator processes;
  // A node is one process (local: the thread group), then one node of both (local: a composite).
  check_layout(&processes, 2, 2, "2 nodes x 2 ranks (2 processes x 2 replicas; --ranks_per_node 2)");
  check_layout(&processes, 2, 0, "1 node x 4 ranks (2 processes x 2 replicas; auto: one node per host)");
}

// 4 processes x 2 replicas in nodes of two processes: local composites over 2 processes, cross MPI per replica.
TEST(ReplicaGroupsMpi, FourProcessesOfTwoReplicas) {
  TG_RUN_ON_N_MPI_RANKS(4);
  MpiCommunicator processes;
  check_layout(&processes, 2, 4, "2 nodes x 4 ranks (4 processes x 2 replicas; --ranks_per_node 4)");
  check_layout(&processes, 3, 3, "4 nodes x 3 ranks (4 processes x 3 replicas; --ranks_per_node 3)");
}

}  // namespace
}  // namespace tg

int main(int argc, char** argv) { return tg::testing_mpi::run_all_tests_under_mpi_if_launched(argc, argv); }
