// Topology: the shape of a job's ranks, built once from how it was launched. A rank is one replica (a GPU, or
// a --cpu_replicas thread) of one process; with P processes of R replicas each, rank = process * R + replica.
// Ranks are grouped into nodes of equal size, each node whole processes:
//   - auto (ranks_per_node = 0): the processes sharing one host (MPI_Comm_split_type MPI_COMM_TYPE_SHARED for
//     an MpiCommunicator; the host name for another process communicator) with all their replicas form a
//     node; every host must run the same number of processes. Nodes are numbered by their lowest process rank;
//     a node's processes need not be consecutive ranks (mpirun --map-by node).
//   - explicit ranks_per_node = L (emulated nodes, --ranks_per_node): node = rank / L; L must be a multiple of
//     R (whole processes) and divide P * R.
// Inside a node, ranks are numbered by local rank = (index of the process among the node's processes, in
// process order) * R + replica. The cross group of local rank l is the ranks with local rank l on every node,
// in node order (one ring per local index, so every node's link carries traffic).
// Errors: one line naming the values and the fix. build() gathers every process's view first and decides on
// the gathered data, so every process reaches the same verdict and throws the same error (none is left
// waiting in a collective).
#pragma once

#include <string>
#include <vector>

namespace tg {

class Communicator;

struct TopologyOptions {
  int ranks_per_node = 0;  // 0: auto, one node per host (see the file comment)
};

class Topology {
 public:
  // Collective over `processes` (the job's process communicator, e.g. an MpiCommunicator; nullptr: this
  // process alone). replicas_per_process: this process's GPUs or --cpu_replicas (the same on every process:
  // checked, the error names the values).
  static Topology build(Communicator* processes, int replicas_per_process, const TopologyOptions& o);

  // The decision itself, on gathered data (what build() runs on every process): host_of_process[p] says which
  // processes share a host (equal values: the same host; used by auto only), replicas_of_process[p] each
  // process's replica count.
  static Topology from_layout(const std::vector<int>& host_of_process, const std::vector<int>& replicas_of_process,
                              int process_rank, const TopologyOptions& o);

  int num_ranks() const { return num_processes_ * replicas_; }
  int num_nodes() const { return num_nodes_; }
  int ranks_per_node() const { return ranks_per_node_; }  // the same on every node
  int node_of(int rank) const;
  int local_rank_of(int rank) const;  // index inside its node
  int process_rank() const { return process_rank_; }
  int num_processes() const { return num_processes_; }
  int replicas_per_process() const { return replicas_; }
  int processes_per_node() const { return ranks_per_node_ / replicas_; }

  int process_of(int rank) const;
  int replica_of(int rank) const;
  int rank_of(int process, int replica) const { return process * replicas_ + replica; }
  // The rank with local rank `local` on node `node`.
  int rank_at(int node, int local) const;
  // The ranks of node `node` by local rank; the cross group of local rank `local` by node.
  std::vector<int> node_ranks(int node) const;
  std::vector<int> cross_ranks(int local) const;
  // This process's node and its index among the node's processes.
  int node_of_process(int process) const { return node_of_process_[static_cast<size_t>(process)]; }
  int index_in_node_of_process(int process) const { return index_in_node_[static_cast<size_t>(process)]; }

  // "2 nodes x 2 ranks (4 processes x 1 replica; --ranks_per_node 2)", "1 node x 4 ranks (1 process x 4
  // replicas; auto: one node per host)".
  std::string describe() const;

 private:
  Topology() = default;
  void check_rank(int rank) const;

  int num_processes_ = 1;
  int process_rank_ = 0;
  int replicas_ = 1;
  int num_nodes_ = 1;
  int ranks_per_node_ = 1;
  int explicit_ranks_per_node_ = 0;     // the option as given (0: auto)
  std::vector<int> node_of_process_;    // [process]
  std::vector<int> index_in_node_;      // [process]: position among its node's processes
  std::vector<int> processes_of_node_;  // [node * processes_per_node + index]: process rank
};

}  // namespace tg
