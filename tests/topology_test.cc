// Tests of Topology: the decision on gathered data (from_layout: auto nodes from hosts, consecutive or
// interleaved; --ranks_per_node; local ranks, node and cross groups; describe()), every bad layout's one-line
// error naming the values and the fix, and build() over a real process communicator: threads standing in for
// processes (the host-name path: one host), and MPI processes (mpirun, SKIPPED without it) where every process
// reaches the same verdict, a failing one included, and none is left waiting.
#include "terngrad/comm/topology.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "common/error_of.h"
#include "common/mpi_launch.h"
#include "terngrad/comm/mpi_communicator.h"
#include "terngrad/comm/thread_communicator.h"
#include "terngrad/core/error.h"

namespace tg {
namespace {

using testing::error_of;

TopologyOptions per_node(int l) {
  TopologyOptions o;
  o.ranks_per_node = l;
  return o;
}

TEST(Topology, OneProcessIsOneNode) {
  const Topology t = Topology::build(nullptr, 4, {});
  EXPECT_EQ(t.num_ranks(), 4);
  EXPECT_EQ(t.num_nodes(), 1);
  EXPECT_EQ(t.ranks_per_node(), 4);
  EXPECT_EQ(t.num_processes(), 1);
  EXPECT_EQ(t.process_rank(), 0);
  EXPECT_EQ(t.replicas_per_process(), 4);
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_EQ(t.node_of(rank), 0);
    EXPECT_EQ(t.local_rank_of(rank), rank);
  }
  EXPECT_EQ(t.cross_ranks(2), (std::vector<int>{2}));
  EXPECT_EQ(t.describe(), "1 node x 4 ranks (1 process x 4 replicas; auto: one node per host)");
  EXPECT_EQ(Topology::build(nullptr, 4, per_node(4)).describe(),
            "1 node x 4 ranks (1 process x 4 replicas; --ranks_per_node 4)");
  EXPECT_EQ(Topology::build(nullptr, 1, {}).describe(),
            "1 node x 1 rank (1 process x 1 replica; auto: one node per host)");
}

// 4 processes x 2 replicas, two per host, hosts consecutive: 2 nodes x 4 ranks.
TEST(Topology, AutoNodesFromHosts) {
  const Topology t = Topology::from_layout({7, 7, 3, 3}, {2, 2, 2, 2}, 2, {});
  EXPECT_EQ(t.num_ranks(), 8);
  EXPECT_EQ(t.num_nodes(), 2);
  EXPECT_EQ(t.ranks_per_node(), 4);
  EXPECT_EQ(t.processes_per_node(), 2);
  EXPECT_EQ(t.describe(), "2 nodes x 4 ranks (4 processes x 2 replicas; auto: one node per host)");
  EXPECT_EQ(t.node_ranks(0), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(t.node_ranks(1), (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(t.cross_ranks(3), (std::vector<int>{3, 7}));
  EXPECT_EQ(t.node_of(5), 1);
  EXPECT_EQ(t.local_rank_of(5), 1);
  EXPECT_EQ(t.process_of(5), 2);
  EXPECT_EQ(t.replica_of(5), 1);
  EXPECT_EQ(t.node_of_process(2), 1);
  EXPECT_EQ(t.index_in_node_of_process(2), 0);
}

// mpirun --map-by node: hosts alternate. Nodes are numbered by their lowest process; local ranks follow the
// processes' order inside the node.
TEST(Topology, AutoNodesOfInterleavedProcesses) {
  const Topology t = Topology::from_layout({5, 9, 5, 9, 5, 9}, {1, 1, 1, 1, 1, 1}, 3, {});
  EXPECT_EQ(t.num_nodes(), 2);
  EXPECT_EQ(t.ranks_per_node(), 3);
  EXPECT_EQ(t.node_ranks(0), (std::vector<int>{0, 2, 4}));
  EXPECT_EQ(t.node_ranks(1), (std::vector<int>{1, 3, 5}));
  EXPECT_EQ(t.cross_ranks(1), (std::vector<int>{2, 3}));
  for (int rank = 0; rank < 6; ++rank) {
    EXPECT_EQ(t.node_of(rank), rank % 2) << rank;
    EXPECT_EQ(t.local_rank_of(rank), rank / 2) << rank;
    EXPECT_EQ(t.rank_at(t.node_of(rank), t.local_rank_of(rank)), rank);
  }
}

// --ranks_per_node emulates nodes on one host: node = rank / L, whatever the hosts say.
TEST(Topology, ExplicitRanksPerNode) {
  const Topology t = Topology::from_layout({0, 0, 0, 0}, {1, 1, 1, 1}, 1, per_node(2));
  EXPECT_EQ(t.describe(), "2 nodes x 2 ranks (4 processes x 1 replica; --ranks_per_node 2)");
  EXPECT_EQ(t.node_ranks(1), (std::vector<int>{2, 3}));
  EXPECT_EQ(t.cross_ranks(0), (std::vector<int>{0, 2}));
  const Topology u = Topology::from_layout({0, 0, 0}, {2, 2, 2}, 0, per_node(2));
  EXPECT_EQ(u.describe(), "3 nodes x 2 ranks (3 processes x 2 replicas; --ranks_per_node 2)");
  EXPECT_EQ(u.cross_ranks(1), (std::vector<int>{1, 3, 5}));
}

TEST(Topology, BadLayoutsAreOneLineErrors) {
  auto one_line = [](const std::string& m) { return m.find('\n') == std::string::npos ? m : "(several lines) " + m; };
  EXPECT_EQ(one_line(error_of([] {
              Topology::from_layout({0, 0}, {2, 2}, 0, per_node(3));
            })),
            "--ranks_per_node 3 does not divide the 4 ranks (2 processes x 2 replicas): use 2 or 4");
  EXPECT_EQ(one_line(error_of([] {
              Topology::from_layout({0, 0, 0}, {2, 2, 2}, 0, per_node(3));
            })),
            "--ranks_per_node 3 would split a process's 2 replicas between nodes (6 ranks: 3 processes x 2 replicas; a "
            "node is whole processes): use 2 or 6");
  EXPECT_EQ(one_line(error_of([] {
              Topology::from_layout({0, 0, 0, 0}, {1, 1, 1, 1}, 0, per_node(3));
            })),
            "--ranks_per_node 3 does not divide the 4 ranks (4 processes x 1 replica): use 1, 2 or 4");
  EXPECT_EQ(one_line(error_of([] {
              Topology::from_layout({0, 0}, {2, 2}, 0, per_node(-1));
            })),
            "--ranks_per_node -1: expected 0 (one node per host) or a number of ranks per node");
  EXPECT_EQ(one_line(error_of([] {
              Topology::from_layout({0, 0, 0}, {2, 2, 3}, 1, {});
            })),
            "process 0 runs 2 replicas, process 2 runs 3 replicas: every process must run the same number of "
            "replicas (GPUs or --cpu_replicas)");
  EXPECT_EQ(one_line(error_of([] {
              Topology::from_layout({4, 4, 4, 8}, {2, 2, 2, 2}, 0, {});
            })),
            "the hosts run unequal numbers of processes (process 0's host: 3 processes, process 3's host: 1 process; "
            "2 replicas each): run as many processes on every host, or set --ranks_per_node to one of 2, 4 or 8");
  EXPECT_EQ(one_line(error_of([] { Topology::from_layout({0}, {0}, 0, {}); })),
            "0 replicas per process: every process needs at least one");
}

// Threads standing in for 4 processes of 2 replicas (host names: one host): build() agrees on 1 node x 8 ranks,
// or, with a process bringing 3 replicas, every "process" gets the same error.
TEST(Topology, BuildOverAProcessCommunicator) {
  for (bool unequal : {false, true}) {
    auto processes = make_thread_communicators(4);
    std::vector<std::string> outcome(4);
    std::vector<std::thread> threads;
    for (int p = 0; p < 4; ++p)
      threads.emplace_back([&, p] {
        try {
          const Topology t = Topology::build(processes[p].get(), unequal && p == 2 ? 3 : 2, {});
          outcome[p] = t.describe() + ", process " + std::to_string(t.process_rank());
        } catch (const Error& e) {
          outcome[p] = e.what();
        }
      });
    for (auto& t : threads) t.join();
    for (int p = 0; p < 4; ++p) {
      if (unequal)
        EXPECT_EQ(outcome[p],
                  "process 0 runs 2 replicas, process 2 runs 3 replicas: every process must run the same number of "
                  "replicas (GPUs or --cpu_replicas)");
      else
        EXPECT_EQ(outcome[p],
                  "1 node x 8 ranks (4 processes x 2 replicas; auto: one node per host), process " + std::to_string(p));
    }
  }
}

// Real processes on this one host: auto makes one node; --ranks_per_node 2 two; a bad value or unequal replicas
// fail on every process with the same line, after which the processes still meet (nobody hangs).
TEST(TopologyMpi, EveryProcessReachesTheSameVerdict) {
  TG_RUN_ON_N_MPI_RANKS(4);
  MpiCommunicator processes;
  const int p = processes.rank();
  EXPECT_EQ(Topology::build(&processes, 1, {}).describe(),
            "1 node x 4 ranks (4 processes x 1 replica; auto: one node per host)");
  const Topology two = Topology::build(&processes, 2, per_node(4));
  EXPECT_EQ(two.describe(), "2 nodes x 4 ranks (4 processes x 2 replicas; --ranks_per_node 4)");
  EXPECT_EQ(two.node_of(two.rank_of(p, 1)), p / 2);
  EXPECT_EQ(error_of([&] { Topology::build(&processes, 2, per_node(3)); }),
            "--ranks_per_node 3 does not divide the 8 ranks (4 processes x 2 replicas): use 2, 4 or 8");
  EXPECT_EQ(error_of([&] { Topology::build(&processes, p == 1 ? 1 : 2, {}); }),
            "process 0 runs 2 replicas, process 1 runs 1 replica: every process must run the same number of replicas "
            "(GPUs or --cpu_replicas)");
  EXPECT_EQ(error_of([&] { Topology::build(&processes, 1, per_node(p == 3 ? 2 : 4)); }),
            "--ranks_per_node differs between processes (process 0: 4, process 3: 2): give every process the same "
            "flags");
  processes.barrier();
}

}  // namespace
}  // namespace tg

int main(int argc, char** argv) { return tg::testing_mpi::run_all_tests_under_mpi_if_launched(argc, argv); }
