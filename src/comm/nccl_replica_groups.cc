// connect_gpu_replicas: NCCL world over every GPU of every process, local and cross groups as ncclCommSplit of
// it (see replica_groups.h); replicas that all share one GPU: loopback groups on it (loopback_replica_groups.cc).
// Compiled only in CUDA builds.
#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "terngrad/comm/loopback_device.h"
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
  // Several replicas on one GPU (NCCL allows one rank per device): they meet through loopback groups on the device.
  if (R > 1 && std::all_of(devices.begin(), devices.end(), [&](int d) { return d == devices[0]; })) {
    TG_CHECK(P == 1,
             "{} replicas share cuda:{} in each of {} processes: replicas sharing a GPU exchange inside one process "
             "only (run one process, or give each replica its own GPU)",
             R, devices[0], P);
    std::vector<std::unique_ptr<LoopbackDevice>> loopback;
    for (int r = 0; r < R; ++r) loopback.push_back(make_cuda_loopback_device(devices[r], streams[r]));
    return connect_loopback_replicas(t, std::move(loopback));
  }
  for (size_t a = 0; a < devices.size(); ++a)
    for (size_t b = a + 1; b < devices.size(); ++b)
      TG_CHECK(devices[a] != devices[b],
               "replicas {} and {} are both on cuda:{}: replicas share a GPU only when all of them do", a, b,
               devices[a]);
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
  // Aborts from the failing replica's thread while the others may be inside NCCL calls: each takes its communicator's
  // gate (nccl_communicator.h), so none runs beside a call on the same GPU. NCCL's own errors (a peer's connection
  // lost) abort every communicator of the process: without the watch a replica could wait on its stream forever.
  g->abort_and_watch(all, kHealthWatchSeconds);
  // This thread's communicators finalized together before any is destroyed (a finalize may wait for a peer's).
  g->add_teardown([all] { finalize_nccl_communicators(all); });
  g->set_owned_replicas(std::move(world), std::move(local), std::move(cross));
  return g;
}

}  // namespace tg
