// connect_loopback_replicas: the replicas of one process that share one device (R replicas on one GPU, or host
// memory) meet through LoopbackCommunicator groups: world over all, local and cross as splits of it by the topology's
// nodes, a health watch over every communicator (a peer's communicator destroyed, a device error on a rank's stream)
// that aborts every group of the process, as connect_gpu_replicas does over NCCL (replica_groups.h).
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "terngrad/comm/loopback_communicator.h"
#include "terngrad/comm/replica_groups.h"
#include "terngrad/core/error.h"

namespace tg {

namespace {
constexpr double kHealthWatchSeconds = 1;  // how often the groups' and devices' own error state is asked
}  // namespace

std::unique_ptr<ReplicaGroups> connect_loopback_replicas(const Topology& t,
                                                         std::vector<std::unique_ptr<LoopbackDevice>> devices) {
  const int R = t.replicas_per_process();
  TG_CHECK(t.num_processes() == 1,
           "replicas sharing one device meet inside one process; the topology has {} processes (give each process "
           "its own GPUs, or run one process)",
           t.num_processes());
  TG_CHECK(static_cast<int>(devices.size()) == R, "replica groups: the topology has {} replicas, {} devices were given",
           R, devices.size());
  auto g = std::make_unique<ReplicaGroups>();
  std::vector<ReplicaComms> reps(static_cast<size_t>(R));
  if (R == 1) {
    g->set_replicas(std::move(reps));
    return g;
  }
  std::vector<std::unique_ptr<LoopbackCommunicator>> world = make_loopback_communicators(std::move(devices));
  std::vector<LoopbackCommunicator*> parents, all;
  for (auto& c : world) parents.push_back(c.get());
  all = parents;
  auto split = [&](bool needed, auto color_of, auto key_of) {
    std::vector<std::unique_ptr<LoopbackCommunicator>> out(static_cast<size_t>(R));
    if (!needed) return out;
    std::vector<int> colors, keys;
    for (int r = 0; r < R; ++r) {
      colors.push_back(color_of(r));
      keys.push_back(key_of(r));
    }
    out = split_loopback_communicators(parents, colors, keys);
    for (auto& c : out)
      if (c) all.push_back(c.get());
    return out;
  };
  auto local = split(
      t.ranks_per_node() > 1, [&](int rank) { return t.node_of(rank); },
      [&](int rank) { return t.local_rank_of(rank); });
  auto cross = split(
      t.num_nodes() > 1, [&](int rank) { return t.local_rank_of(rank); }, [&](int rank) { return t.node_of(rank); });
  g->abort_and_watch(all, kHealthWatchSeconds);
  g->set_owned_replicas(std::move(world), std::move(local), std::move(cross));
  return g;
}

}  // namespace tg
