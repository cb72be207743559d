// connect_gpu_replicas: NCCL world over every GPU of every process, local and cross groups as ncclCommSplit of
// it (see replica_groups.h). Compiled only in CUDA builds.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "terngrad/comm/health_watch.h"
#include "terngrad/comm/nccl_communicator.h"
#include "terngrad/comm/replica_groups.h"
#include "terngrad/core/error.h"

namespace tg {

namespace {
constexpr double kHealthWatchSeconds = 1;  // how often NCCL's own error state is asked (a cheap host-side read)
}  // namespace

std::unique_ptr<ReplicaGroups> connect_gpu_replicas(const Topology& t, Communicator* processes,
                                                    const std::vector<int>& devices,
                                                    const std::vector<void*>& streams) {
  const int P = t.num_processes(), R = t.replicas_per_process(), p = t.process_rank();
  TG_CHECK((processes ? processes->size() : 1) == P && (processes ? processes->rank() : 0) == p,
           "replica groups: the topology has {} processes (this one {}), the process communicator {}", P, p,
           processes ? processes->name() : std::string("is none"));
  TG_CHECK(static_cast<int>(devices.size()) == R,
           "replica groups: the topology has {} replicas per process, {} GPUs were given", R, devices.size());
  auto g = std::make_unique<ReplicaGroups>();
  std::vector<ReplicaComms> reps(static_cast<size_t>(R));
  if (P * R == 1) {  // one GPU alone: no communicator
    g->set_replicas(std::move(reps));
    return g;
  }
  std::vector<std::unique_ptr<NcclCommunicator>> world =
      processes ? make_nccl_communicators_across_processes(*processes, devices, streams)
                : make_nccl_communicators(devices, streams);
  std::vector<NcclCommunicator*> parents;
  for (auto& c : world) parents.push_back(c.get());
  std::vector<NcclCommunicator*> all = parents;  // every communicator made here, for abort
  auto split = [&](bool needed, auto color_of, auto key_of) {
    std::vector<std::unique_ptr<NcclCommunicator>> out(static_cast<size_t>(R));
    if (!needed) return out;  // the same on every process: every rank splits, or none
    std::vector<int> colors, keys;
    for (int r = 0; r < R; ++r) {
      const int rank = t.rank_of(p, r);
      colors.push_back(color_of(rank));
      keys.push_back(key_of(rank));
    }
    out = split_nccl_communicators(parents, colors, keys);
    for (auto& c : out) all.push_back(c.get());
    return out;
  };
  // A failed split aborts every communicator made so far: their destructors would otherwise each wait (up to the
  // teardown bound) for a finalize of peers that are being destroyed one after another.
  std::vector<std::unique_ptr<NcclCommunicator>> local, cross;
  try {
    local = split(
        t.ranks_per_node() > 1, [&](int rank) { return t.node_of(rank); },
        [&](int rank) { return t.local_rank_of(rank); });
    cross = split(
        t.num_nodes() > 1, [&](int rank) { return t.local_rank_of(rank); }, [&](int rank) { return t.node_of(rank); });
  } catch (const Error& e) {
    for (NcclCommunicator* c : all) c->abort(std::string("setting up the replica groups failed: ") + e.what());
    throw;
  }
  for (int r = 0; r < R; ++r) {
    ReplicaComms& c = reps[static_cast<size_t>(r)];
    c.world = g->own(std::move(world[static_cast<size_t>(r)]));
    c.local = g->own(std::move(local[static_cast<size_t>(r)]));
    c.cross = g->own(std::move(cross[static_cast<size_t>(r)]));
  }
  // From the failing replica's thread while the others may be inside NCCL calls: each abort takes its
  // communicator's gate (nccl_communicator.h), so none runs beside a call on the same communicator.
  g->add_abort([all](const std::string& why) {
    for (NcclCommunicator* c : all) c->abort(why);
  });
  // NCCL's own errors (a peer's connection lost) abort every communicator of the process: without it a replica could
  // wait on its stream forever (health_watch.h). Stopped first at teardown, before anything it probes goes.
  std::vector<HealthWatch::Probe> probes;
  for (NcclCommunicator* c : all) probes.push_back([c] { return c->async_error(); });
  ReplicaGroups* groups = g.get();
  auto watch = std::make_shared<HealthWatch>(std::move(probes), kHealthWatchSeconds,
                                             [groups](const std::string& why) { groups->abort(why); });
  g->add_teardown([watch] { watch->stop(); });
  // This thread's communicators finalized together before any is destroyed (a finalize may wait for a peer's).
  g->add_teardown([all] { finalize_nccl_communicators(all); });
  g->set_replicas(std::move(reps));
  return g;
}

}  // namespace tg
