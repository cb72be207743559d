// Topology: nodes of whole processes, local ranks and cross groups, decided on every process's view (see the
// header).
#include "terngrad/comm/topology.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <map>
#include <memory>

#include "terngrad/comm/communicator.h"
#include "terngrad/comm/mpi_communicator.h"
#include "terngrad/core/error.h"

namespace tg {

namespace {

std::string count_of(int n, const char* one, const char* many) { return fmt::format("{} {}", n, n == 1 ? one : many); }

std::string layout_text(int processes, int replicas) {
  return fmt::format("{} x {}", count_of(processes, "process", "processes"), count_of(replicas, "replica", "replicas"));
}

// "2 or 4", "1, 2 or 4": the node sizes that fit (multiples of `replicas` dividing `ranks`).
std::string fitting_node_sizes(int ranks, int replicas) {
  std::vector<int> sizes;
  for (int l = replicas; l <= ranks; l += replicas)
    if (ranks % l == 0) sizes.push_back(l);
  std::string text;
  for (size_t i = 0; i < sizes.size(); ++i)
    text += fmt::format("{}{}", i == 0 ? "" : (i + 1 == sizes.size() ? " or " : ", "), sizes[i]);
  return text;
}

// This process's host, as the lowest process rank on it: every process sharing the host gets the same value.
int32_t host_leader(Communicator& processes) {
  const int32_t me = processes.rank();
  if (auto* mpi = dynamic_cast<MpiCommunicator*>(&processes)) {
    std::unique_ptr<MpiCommunicator> host = mpi->split_shared_memory();
    int32_t leader = -me;  // the max of -rank is -(lowest rank)
    host->allreduce(&leader, 1, DType::kI32, ReduceOp::kMax);
    return -leader;
  }
  // Another process communicator (e.g. threads standing in for processes): compare host names.
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) std::strcpy(name, "unknown");
  std::vector<char> all(sizeof(name) * static_cast<size_t>(processes.size()));
  processes.allgather(name, all.data(), sizeof(name));
  for (int q = 0; q < processes.size(); ++q)
    if (std::strncmp(all.data() + sizeof(name) * static_cast<size_t>(q), name, sizeof(name)) == 0) return q;
  return me;
}

}  // namespace

Topology Topology::build(Communicator* processes, int replicas_per_process, const TopologyOptions& o) {
  const int P = processes ? processes->size() : 1, p = processes ? processes->rank() : 0;
  // Every process's replica count and option, so that every process decides on the same data.
  const int32_t mine[2] = {replicas_per_process, o.ranks_per_node};
  std::vector<int32_t> all(2 * static_cast<size_t>(P));
  if (processes)
    processes->allgather(mine, all.data(), sizeof(mine));
  else
    std::copy(mine, mine + 2, all.begin());
  for (int q = 1; q < P; ++q)
    if (all[2 * static_cast<size_t>(q) + 1] != all[1])
      TG_THROW(
          "--ranks_per_node differs between processes (process 0: {}, process {}: {}): give every process the "
          "same flags",
          all[1], q, all[2 * static_cast<size_t>(q) + 1]);
  std::vector<int> replicas(static_cast<size_t>(P)), hosts(static_cast<size_t>(P), 0);
  for (int q = 0; q < P; ++q) replicas[static_cast<size_t>(q)] = all[2 * static_cast<size_t>(q)];
  if (o.ranks_per_node == 0 && P > 1) {  // the same on every process (checked above): all take part or none
    const int32_t leader = host_leader(*processes);
    std::vector<int32_t> leaders(static_cast<size_t>(P));
    processes->allgather(&leader, leaders.data(), sizeof(leader));
    std::copy(leaders.begin(), leaders.end(), hosts.begin());
  }
  return from_layout(hosts, replicas, p, o);
}

Topology Topology::from_layout(const std::vector<int>& host_of_process, const std::vector<int>& replicas_of_process,
                               int process_rank, const TopologyOptions& o) {
  const int P = static_cast<int>(replicas_of_process.size());
  TG_CHECK(P >= 1 && host_of_process.size() == replicas_of_process.size(), "topology: {} host entries for {} processes",
           host_of_process.size(), replicas_of_process.size());
  TG_CHECK(process_rank >= 0 && process_rank < P, "topology: process rank {} outside [0, {})", process_rank, P);
  const int R = replicas_of_process[0];
  for (int q = 1; q < P; ++q)
    if (replicas_of_process[static_cast<size_t>(q)] != R)
      TG_THROW(
          "process 0 runs {}, process {} runs {}: every process must run the same number of replicas (GPUs or "
          "--cpu_replicas)",
          count_of(R, "replica", "replicas"), q,
          count_of(replicas_of_process[static_cast<size_t>(q)], "replica", "replicas"));
  if (R < 1) TG_THROW("{} replicas per process: every process needs at least one", R);
  const int N = P * R;
  Topology t;
  t.num_processes_ = P;
  t.process_rank_ = process_rank;
  t.replicas_ = R;
  t.explicit_ranks_per_node_ = o.ranks_per_node;
  t.node_of_process_.assign(static_cast<size_t>(P), 0);
  if (o.ranks_per_node < 0)
    TG_THROW("--ranks_per_node {}: expected 0 (one node per host) or a number of ranks per node", o.ranks_per_node);
  if (o.ranks_per_node > 0) {
    const int L = o.ranks_per_node;
    if (N % L != 0)
      TG_THROW("--ranks_per_node {} does not divide the {} ranks ({}): use {}", L, N, layout_text(P, R),
               fitting_node_sizes(N, R));
    if (L % R != 0)
      TG_THROW(
          "--ranks_per_node {} would split a process's {} replicas between nodes ({} ranks: {}; a node is whole "
          "processes): use {}",
          L, R, N, layout_text(P, R), fitting_node_sizes(N, R));
    t.ranks_per_node_ = L;
    t.num_nodes_ = N / L;
    for (int q = 0; q < P; ++q) t.node_of_process_[static_cast<size_t>(q)] = q * R / L;
  } else {
    // One node per host, numbered by its lowest process rank; every host must run the same number of processes.
    std::map<int, int> node_of_host;
    std::vector<int> processes_on(static_cast<size_t>(P), 0);
    for (int q = 0; q < P; ++q) {
      const int host = host_of_process[static_cast<size_t>(q)];
      auto it = node_of_host.emplace(host, static_cast<int>(node_of_host.size())).first;
      t.node_of_process_[static_cast<size_t>(q)] = it->second;
      ++processes_on[static_cast<size_t>(it->second)];
    }
    t.num_nodes_ = static_cast<int>(node_of_host.size());
    for (int n = 1; n < t.num_nodes_; ++n)
      if (processes_on[static_cast<size_t>(n)] != processes_on[0]) {
        int first = 0;  // the first process on node n
        while (t.node_of_process_[static_cast<size_t>(first)] != n) ++first;
        TG_THROW(
            "the hosts run unequal numbers of processes (process 0's host: {}, process {}'s host: {}; {} each): "
            "run as many processes on every host, or set --ranks_per_node to one of {}",
            count_of(processes_on[0], "process", "processes"), first,
            count_of(processes_on[static_cast<size_t>(n)], "process", "processes"), count_of(R, "replica", "replicas"),
            fitting_node_sizes(N, R));
      }
    t.ranks_per_node_ = processes_on[0] * R;
  }
  const int per_node = t.ranks_per_node_ / R;
  t.index_in_node_.assign(static_cast<size_t>(P), 0);
  t.processes_of_node_.assign(static_cast<size_t>(P), 0);
  std::vector<int> filled(static_cast<size_t>(t.num_nodes_), 0);
  for (int q = 0; q < P; ++q) {  // in process order: a node's processes are indexed by rank
    const int n = t.node_of_process_[static_cast<size_t>(q)];
    const int i = filled[static_cast<size_t>(n)]++;
    t.index_in_node_[static_cast<size_t>(q)] = i;
    t.processes_of_node_[static_cast<size_t>(n * per_node + i)] = q;
  }
  return t;
}

void Topology::check_rank(int rank) const {
  TG_CHECK(rank >= 0 && rank < num_ranks(), "topology: rank {} outside [0, {})", rank, num_ranks());
}

int Topology::process_of(int rank) const {
  check_rank(rank);
  return rank / replicas_;
}

int Topology::replica_of(int rank) const {
  check_rank(rank);
  return rank % replicas_;
}

int Topology::node_of(int rank) const { return node_of_process_[static_cast<size_t>(process_of(rank))]; }

int Topology::local_rank_of(int rank) const {
  return index_in_node_[static_cast<size_t>(process_of(rank))] * replicas_ + rank % replicas_;
}

int Topology::rank_at(int node, int local) const {
  TG_CHECK(node >= 0 && node < num_nodes_ && local >= 0 && local < ranks_per_node_,
           "topology: node {} local rank {} outside {} nodes x {} ranks", node, local, num_nodes_, ranks_per_node_);
  const int process = processes_of_node_[static_cast<size_t>(node * processes_per_node() + local / replicas_)];
  return process * replicas_ + local % replicas_;
}

std::vector<int> Topology::node_ranks(int node) const {
  std::vector<int> ranks;
  for (int l = 0; l < ranks_per_node_; ++l) ranks.push_back(rank_at(node, l));
  return ranks;
}

std::vector<int> Topology::cross_ranks(int local) const {
  std::vector<int> ranks;
  for (int n = 0; n < num_nodes_; ++n) ranks.push_back(rank_at(n, local));
  return ranks;
}

std::string Topology::describe() const {
  return fmt::format("{} x {} ({}; {})", count_of(num_nodes_, "node", "nodes"),
                     count_of(ranks_per_node_, "rank", "ranks"), layout_text(num_processes_, replicas_),
                     explicit_ranks_per_node_ > 0 ? fmt::format("--ranks_per_node {}", explicit_ranks_per_node_)
                                                  : std::string("auto: one node per host"));
}

}  // namespace tg
