// ReplicaSet: this process's replicas and what they share. The job's shape (Topology), one replica per device
// (--num_gpus GPUs, or --cpu_replicas shares of the CPU) with its backend, parameters, optimizer and moving
// averages, the workers placed on them round-robin, the replicas' groups, one host thread per replica, the
// compression policies with each replica's step exchange, and the watchdog over their collectives. Built once;
// the trainer's step runs on it and the run's checkpoints restore and read it.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "terngrad/backend/backend.h"
#include "terngrad/comm/communicator.h"
#include "terngrad/comm/progress_watchdog.h"
#include "terngrad/comm/replica_groups.h"
#include "terngrad/comm/topology.h"
#include "terngrad/core/phase_times.h"
#include "terngrad/core/timeline.h"
#include "terngrad/exchange/gradient_exchange.h"
#include "terngrad/exchange/step_exchange.h"
#include "terngrad/models/registry.h"
#include "terngrad/optim/moving_average.h"
#include "terngrad/optim/optimizer.h"
#include "terngrad/train/batch_upload.h"
#include "terngrad/train/checkpoint.h"
#include "terngrad/train/memory_budget.h"
#include "terngrad/train/replica_threads.h"
#include "terngrad/train/train_config.h"

namespace tg {

using Clock = std::chrono::steady_clock;
inline double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// One device's model copy and everything that runs on it: its workers (virtual nodes) compute one after
// another on the replica's thread, and its exchange meets the other replicas (of this and other processes)
// through its groups (the Topology's world, node and cross-node communicators).
struct Replica {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<ParameterStore> store;
  std::unique_ptr<Optimizer> optimizer;
  std::unique_ptr<ExponentialMovingAverage> ema;
  std::shared_ptr<StepArena> arena;     // its workers' step buffers (they run one after another)
  DeviceMemoryPlan memory;              // what it holds, planned before it allocated anything
  size_t free_before_build = SIZE_MAX;  // its device's free memory then (GPUs; SIZE_MAX: not known)
  std::vector<int> workers;             // indices into ReplicaSet::workers()
  int rank = 0;                         // in the world group: process * replicas + replica
  ReplicaComms comms;                   // world / local / cross groups; nullptr where it is alone
  // Its workers' exchange of a step: the run's, the fp32 one of a warm-up, the probe and the dump around them.
  std::unique_ptr<StepExchange> exchanges;
  PhaseTimes times;         // of the last step
  ExchangeStats stats;      // of the last step
  Buffer overflow_flag;     // i32 (1) on the device: fp16 gradients held Inf/NaN on some worker (all-reduced MAX)
  Buffer overflow_host;     // its staging copy (read once per fp16 step)
  bool overflowed = false;  // the last step's flag, the same on every replica of every process: skipped
};

// The replica's slab that a checkpoint part holds.
Slab& checkpoint_slab(Replica& r, CheckpointLayout::Part part);

struct Worker {
  int replica = 0;
  int global_index = 0;  // (process * replicas + replica) * workers per replica + index in the replica
  std::unique_ptr<Net> net;
  std::vector<Tensor> grad_views;  // views of its gradient slab (on its device) for the exchange, in parameter order
  int track = -1;                  // its timeline track
  double forward_backward = 0;     // seconds in the last step, exchange work inside backward excluded
};

class ReplicaSet {
 public:
  // The replicas, their workers and groups, and the watchdog (--collective_timeout). `cfg` (resolved and validated)
  // outlives the set; process_comm: null for a single process.
  ReplicaSet(const TrainConfig& cfg, Communicator* process_comm);
  ~ReplicaSet();
  ReplicaSet(const ReplicaSet&) = delete;
  ReplicaSet& operator=(const ReplicaSet&) = delete;

  // Each replica's step exchange (after the timeline's tracks exist: the exchanges record into it). loss_scaled:
  // --precision fp16's dynamic loss scaling (the step's overflow is agreed on before any gradient is encoded).
  void build_exchanges(Timeline* timeline, bool loss_scaled);
  // Several GPUs in this process: one untimed forward and backward on each (their state restored) before the first
  // collective.
  void warm_up_gpus(BatchUpload& batches, float loss_scale);
  // --check_replicas_every: every replica of every process holds the same parameter bits (else one line, thrown).
  void check_replicas(int64_t steps_done);
  // The moving average of the replica's parameters and statistics, starting from their present values.
  void create_ema(Replica& r) const;
  // The CRC of a replica's parameter slab, and the digest write_checkpoint gives the parameters (the params part's
  // tensors in order, no padding).
  static uint32_t parameter_crc(Replica& r);
  static std::string parameter_digest(Replica& r);

  std::vector<Replica>& replicas() { return replicas_; }
  const std::vector<Replica>& replicas() const { return replicas_; }
  Replica& first() { return replicas_[0]; }
  const Replica& first() const { return replicas_[0]; }
  std::vector<Worker>& workers() { return workers_; }
  const std::vector<Worker>& workers() const { return workers_; }
  ReplicaThreads& threads() { return *threads_; }
  const Topology& topology() const { return *topology_; }
  ProgressWatchdog* watchdog() { return watchdog_.get(); }
  const CompressionPolicy& policy() const { return policy_; }
  Communicator* process_comm() const { return process_comm_; }
  int rank() const { return rank_; }  // this process's
  int num_processes() const { return num_processes_; }
  bool is_chief() const { return rank_ == 0; }
  int64_t worker_batch() const { return worker_batch_; }
  int64_t process_batch() const { return process_batch_; }
  TrainingLayout layout() const;

 private:
  void place_workers(int n_replicas);
  void build_replicas();
  void build_replica(Replica& r, const ModelConfig& mc);
  void check_memory_fits(Replica& r);
  void connect_replicas();
  void watch_progress();

  const TrainConfig& cfg_;
  Communicator* process_comm_ = nullptr;
  int rank_ = 0, num_processes_ = 1;
  int64_t worker_batch_ = 0, process_batch_ = 0;
  // The job's shape and the replicas' communicators (declared first: they outlive the exchanges using them).
  std::unique_ptr<Topology> topology_;
  std::unique_ptr<ReplicaGroups> groups_;
  // --collective_timeout: ends a run that stops making progress (a peer gone without an error); null when off or
  // alone. Destroyed after the replicas (their exchanges' threads) and before the groups it aborts.
  std::unique_ptr<ProgressWatchdog> watchdog_;
  CompressionPolicy policy_;       // the run's exchanges read it: declared before them
  CompressionPolicy fp32_policy_;  // the fp32 exchange's (warm-up, probe): everything fp32
  std::vector<Replica> replicas_;
  std::vector<Worker> workers_;
  std::unique_ptr<ReplicaThreads> threads_;  // one host thread per replica
};

}  // namespace tg
