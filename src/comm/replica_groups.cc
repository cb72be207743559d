// ReplicaGroups and connect_cpu_replicas: the world, local and cross communicators of this process's CPU
// replicas (see the header; the GPU layout is in nccl_replica_groups.cc).
#include "terngrad/comm/replica_groups.h"

#include <fmt/format.h>

#include "terngrad/comm/composite_communicator.h"
#include "terngrad/comm/health_watch.h"
#include "terngrad/comm/mpi_communicator.h"
#include "terngrad/comm/thread_communicator.h"
#include "terngrad/core/error.h"

namespace tg {

const ReplicaComms& ReplicaGroups::replica(int r) const {
  TG_CHECK(r >= 0 && r < num_replicas(), "replica groups: replica {} outside [0, {})", r, num_replicas());
  return replicas_[static_cast<size_t>(r)];
}

ReplicaGroups::~ReplicaGroups() {
  for (auto& t : teardowns_) t();
}

void ReplicaGroups::abort(const std::string& why) {
  for (auto& a : aborts_) a(why);
}

void ReplicaGroups::watch(std::vector<std::function<std::string()>> probes, double period_seconds) {
  auto health =
      std::make_shared<HealthWatch>(std::move(probes), period_seconds, [this](const std::string& why) { abort(why); });
  add_teardown([health] { health->stop(); });  // before anything it probes goes
}

Communicator* ReplicaGroups::own(std::unique_ptr<Communicator> c) {
  Communicator* raw = c.get();
  if (c) owned_.push_back(std::move(c));
  return raw;
}

namespace {

// One thread group of R ranks whose abort ReplicaGroups::abort reaches; rank r at index r (not yet owned).
std::vector<std::unique_ptr<ThreadCommunicator>> thread_group(ReplicaGroups& g, int R) {
  auto comms = make_thread_communicators(R);
  ThreadCommunicator* first = comms[0].get();  // aborting one rank fails the whole group
  g.add_abort([first](const std::string& why) { first->abort(why); });
  return comms;
}

// R communicators over the processes, one per replica, from R collective splits (every process makes them in
// the same order): replica r's is the r-th. color < 0 on every process makes none.
std::vector<std::unique_ptr<Communicator>> splits_per_replica(Communicator& processes, int R, int color, int key) {
  std::vector<std::unique_ptr<Communicator>> out;
  for (int r = 0; r < R; ++r) out.push_back(processes.split(color, key));
  return out;
}

// Replica r's composite of thread group `inner` and its outer communicator outers[r], owned by g.
std::vector<Communicator*> composites(ReplicaGroups& g, std::vector<std::unique_ptr<ThreadCommunicator>> inner,
                                      std::vector<std::unique_ptr<Communicator>> outers) {
  std::vector<Communicator*> out;
  for (size_t r = 0; r < inner.size(); ++r)
    out.push_back(g.own(std::make_unique<CompositeCommunicator>(std::move(inner[r]), std::move(outers[r]))));
  return out;
}

}  // namespace

std::unique_ptr<ReplicaGroups> connect_cpu_replicas(const Topology& t, Communicator* processes) {
  const int P = t.num_processes(), R = t.replicas_per_process(), p = t.process_rank();
  TG_CHECK((processes ? processes->size() : 1) == P && (processes ? processes->rank() : 0) == p,
           "replica groups: the topology has {} processes (this one {}), the process communicator {}", P, p,
           processes ? processes->name() : std::string("is none"));
  auto g = std::make_unique<ReplicaGroups>();
  // Several processes: every MPI wait of this one stops on an abort (a stalled peer: progress_watchdog.h).
  if (P > 1) g->add_abort([](const std::string& why) { MpiCommunicator::abort_waits(why); });
  std::vector<ReplicaComms> reps(static_cast<size_t>(R));
  const int node = t.node_of_process(p), index = t.index_in_node_of_process(p);
  const bool many_nodes = t.num_nodes() > 1, node_spans_processes = t.processes_per_node() > 1;
  if (P == 1) {
    // One process is one node: world and local are thread groups (distinct objects with their own counters).
    if (R > 1) {
      auto world = thread_group(*g, R), local = thread_group(*g, R);
      for (int r = 0; r < R; ++r) {
        reps[static_cast<size_t>(r)].world = g->own(std::move(world[static_cast<size_t>(r)]));
        reps[static_cast<size_t>(r)].local = g->own(std::move(local[static_cast<size_t>(r)]));
      }
    }
  } else if (R == 1) {
    ReplicaComms& c = reps[0];
    c.world = g->own(processes->split(0, p));
    if (node_spans_processes) c.local = g->own(processes->split(node, index));
    if (many_nodes) c.cross = g->own(processes->split(index, node));
  } else {
    const std::vector<Communicator*> world =
        composites(*g, thread_group(*g, R), splits_per_replica(*processes, R, 0, p));
    std::vector<Communicator*> local(static_cast<size_t>(R), nullptr);
    if (node_spans_processes) {
      local = composites(*g, thread_group(*g, R), splits_per_replica(*processes, R, node, index));
    } else {
      auto threads = thread_group(*g, R);
      for (int r = 0; r < R; ++r) local[static_cast<size_t>(r)] = g->own(std::move(threads[static_cast<size_t>(r)]));
    }
    std::vector<std::unique_ptr<Communicator>> cross;
    if (many_nodes) cross = splits_per_replica(*processes, R, index, node);
    for (int r = 0; r < R; ++r) {
      ReplicaComms& c = reps[static_cast<size_t>(r)];
      c.world = world[static_cast<size_t>(r)];
      c.local = local[static_cast<size_t>(r)];
      if (many_nodes) c.cross = g->own(std::move(cross[static_cast<size_t>(r)]));
    }
  }
  g->set_replicas(std::move(reps));
  return g;
}

}  // namespace tg
