// Trainer: one process's part of data-parallel training (docs/design.md, "One step"). It holds one replica per
// device (backend, parameter store, optimizer, EMA) and `--num_nodes` workers (towers) spread over the
// replicas round-robin; workers on one device share its parameters and optimizer state, each computes the
// gradient of its slice of the batch, one after another. The process's GradientExchange (scalers all-reduce
// MAX, ternary codes, fp32/fp16 remainder, by buckets) leaves the average over all workers of all processes
// in each replica's first worker's gradient; with --overlap it starts inside the last worker's backward.
// Each replica then applies one fused pass of optimizer update and EMA, so replicas stay identical.
//
// Several processes (mpirun) meet through the MPI communicator. Every step is timed by phase (PhaseTimes:
// log line, --metrics_jsonl, TensorBoard) and --timeline traces chosen steps. Checkpoints
// (train/checkpoint.h) are written by process 0 every --save_iter steps and at the end; a train_dir with
// checkpoints is resumed from the latest one, which gives parameters bit-identical to an uninterrupted run.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "terngrad/core/phase_times.h"
#include "terngrad/train/memory_budget.h"
#include "terngrad/train/train_config.h"

namespace tg {

class Communicator;

struct TrainResult {
  int64_t start_step = 0;  // > 0 when resumed
  int64_t steps_done = 0;  // iterations completed in total (the last checkpoint's step)
  bool interrupted = false;
  bool already_finished = false;  // resumed at a step >= --max_steps: nothing ran
  float final_loss = 0.f;
  double median_examples_per_sec = 0;
  uint64_t bytes_moved = 0;       // by worker 0's exchange, all steps of this run
  uint64_t fp32_bytes_moved = 0;  // what fp32 gradients would have moved
  std::string parameter_digest;   // of the final parameters
  PhaseTimes time_per_step;       // process 0's mean phase times per step after the first log window
  double wall_seconds = 0;        // run() from its first step to its last checkpoint
  int evaluations = 0;            // --eval_every/--eval_secs evaluations of this run (process 0)
  double eval_seconds = 0;        // ... and the seconds they took (of wall_seconds)
  std::string last_checkpoint;    // the checkpoint the run ended with
};

class Trainer {
 public:
  // process_comm: the MPI communicator when several processes train together, else nullptr.
  Trainer(const TrainConfig& config, Communicator* process_comm = nullptr);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Trains up to --max_steps; stops early (after saving a checkpoint) when *stop becomes true.
  TrainResult run(const std::atomic<bool>* stop = nullptr);
  // Runs `steps` more steps with nothing else (no logs, checkpoints or stop checks): benchmarks and tests of
  // the step itself. Returns their mean phase times.
  PhaseTimes run_steps(int64_t steps);
  // Host synchronisations so far (Backend::host_syncs) of the replica whose backend made the most.
  int64_t host_syncs() const;
  // Replica 0's memory as planned before anything was allocated (memory_budget.h), and the bytes its backend's
  // allocator holds now (on the CPU: every CPU replica's, one allocator).
  const DeviceMemoryPlan& memory_plan() const;
  size_t device_bytes_in_use() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tg
