// ReplicaGroups: the communicators of this process's replicas, built from a Topology (topology.h): for replica r
// of this process (rank = process * R + r),
//   world: all ranks;
//   local: the ranks of the replica's node, ranked by local rank;
//   cross: the ranks with the same local rank on every node, ranked by node (one ring per local index).
// A group of one rank is nullptr (no communicator needed). Every communicator is its own object with its own
// byte counters (world and local are distinct even when they hold the same ranks), may be driven by another
// thread than the replica's others, and is driven by one thread at a time.
//
// CPU layouts (connect_cpu_replicas, host memory):
//   1 process x R replicas: world and local are thread groups (ThreadCommunicator); no cross.
//   P processes x 1 replica: world is an MPI dup of `processes`, local and cross MPI splits (by node / by local
//     rank).
//   P processes x R replicas: world is a CompositeCommunicator (a thread group + one MPI dup per replica);
//     local a thread group when a node is one process, else a composite over the node's processes (a thread
//     group + one MPI split per replica); cross one MPI split per replica (the processes at the same index of
//     every node).
// GPU layouts (connect_gpu_replicas, CUDA builds): world is NCCL over all GPUs (make_nccl_communicators, or
// make_nccl_communicators_across_processes when there are several processes); local and cross are ncclCommSplit
// of it, all GPUs of this process in one NCCL group call.
// Both are collective over `processes` (every process calls them, from one thread, in the same order).
// Replicas sharing one device (connect_loopback_replicas: R replicas of one process on one GPU, where NCCL allows one
// rank per device, or on the host): LoopbackCommunicator groups, world over all, local and cross its splits, watched by
// a HealthWatch as the NCCL groups are.
// abort(why): a failed replica thread, or the progress watchdog (a stalled peer), fails every in-process group (thread
// groups, the composites' inner groups, NCCL communicators) and stops every MPI wait of the process
// (MpiCommunicator::abort_waits), so no replica of this process waits forever; the failing process then ends the job
// (MpiEnvironment::abort_all).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "terngrad/comm/communicator.h"
#include "terngrad/comm/loopback_device.h"
#include "terngrad/comm/topology.h"

namespace tg {

struct ReplicaComms {
  Communicator* world = nullptr;
  Communicator* local = nullptr;
  Communicator* cross = nullptr;
};

class ReplicaGroups {
 public:
  ReplicaGroups() = default;
  ~ReplicaGroups();  // the teardowns (add_teardown), then the communicators
  ReplicaGroups(const ReplicaGroups&) = delete;
  ReplicaGroups& operator=(const ReplicaGroups&) = delete;

  int num_replicas() const { return static_cast<int>(replicas_.size()); }
  const ReplicaComms& replica(int r) const;
  // Fails every in-process group (see the file comment); any thread may call it, any number of times.
  void abort(const std::string& why);

  // Building (connect_*_replicas): set the replicas' communicators, hand over the objects and how to abort them.
  void set_replicas(std::vector<ReplicaComms> replicas) { replicas_ = std::move(replicas); }
  Communicator* own(std::unique_ptr<Communicator> c);  // returns c.get()
  // Owns replica r's world[r], local[r] and cross[r] (each may be null: a group of one) and sets them as its groups.
  template <typename C>
  void set_owned_replicas(std::vector<std::unique_ptr<C>> world, std::vector<std::unique_ptr<C>> local,
                          std::vector<std::unique_ptr<C>> cross) {
    std::vector<ReplicaComms> reps(world.size());
    for (size_t r = 0; r < reps.size(); ++r) {
      reps[r].world = own(std::move(world[r]));
      reps[r].local = r < local.size() ? own(std::move(local[r])) : nullptr;
      reps[r].cross = r < cross.size() ? own(std::move(cross[r])) : nullptr;
    }
    set_replicas(std::move(reps));
  }
  void add_abort(std::function<void(const std::string&)> abort) { aborts_.push_back(std::move(abort)); }
  // What must happen to all the communicators together before any is destroyed (NCCL: finalize them all, then wait;
  // finalize_nccl_communicators). Must not throw.
  void add_teardown(std::function<void()> teardown) { teardowns_.push_back(std::move(teardown)); }
  // Device groups (NCCL, loopback): abort() aborts each of `comms`, and a HealthWatch (health_watch.h) asks each one's
  // async_error() every `period_seconds` and on the first error aborts every group of the process, so that no replica
  // waits forever on a collective a failed peer will never join. The watch is stopped first at teardown.
  template <typename C>
  void abort_and_watch(const std::vector<C*>& comms, double period_seconds) {
    add_abort([comms](const std::string& why) {
      for (C* c : comms) c->abort(why);
    });
    std::vector<std::function<std::string()>> probes;
    for (C* c : comms) probes.push_back([c] { return c->async_error(); });
    watch(std::move(probes), period_seconds);
  }
  void watch(std::vector<std::function<std::string()>> probes, double period_seconds);

 private:
  std::vector<ReplicaComms> replicas_;
  std::vector<std::unique_ptr<Communicator>> owned_;
  std::vector<std::function<void(const std::string&)>> aborts_;
  std::vector<std::function<void()>> teardowns_;
};

// processes: the job's process communicator (nullptr: one process), as given to Topology::build.
std::unique_ptr<ReplicaGroups> connect_cpu_replicas(const Topology& t, Communicator* processes);

// devices[r]: replica r's device object (all of one device; loopback_device.h). One process only.
std::unique_ptr<ReplicaGroups> connect_loopback_replicas(const Topology& t,
                                                         std::vector<std::unique_ptr<LoopbackDevice>> devices);

#if TG_HAVE_CUDA
// devices[r], streams[r]: replica r's GPU and the stream its collectives are queued on.
std::unique_ptr<ReplicaGroups> connect_gpu_replicas(const Topology& t, Communicator* processes,
                                                    const std::vector<int>& devices, const std::vector<void*>& streams);
#endif

}  // namespace tg
