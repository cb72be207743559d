// The Trainer's private parts, shared by its files: trainer.cc (building the replicas, workers, groups and
// exchanges; the step), trainer_checkpoint.cc (resume, checkpoints with their per-rank files, agreement checks)
// and trainer_run.cc (the run loop, log lines, metrics, summaries, timeline).
#pragma once

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <thread>

#include "src/train/step_exchange.h"
#include "terngrad/backend/backend.h"
#include "terngrad/comm/communicator.h"
#include "terngrad/comm/progress_watchdog.h"
#include "terngrad/comm/replica_groups.h"
#include "terngrad/comm/topology.h"
#include "terngrad/core/atomic_file.h"
#include "terngrad/core/cpu_cores.h"
#include "terngrad/core/human_units.h"
#include "terngrad/core/phase_times.h"
#include "terngrad/core/timeline.h"
#include "terngrad/data/crc32c.h"
#include "terngrad/data/input_pipeline.h"
#include "terngrad/exchange/gradient_exchange.h"
#include "terngrad/exchange/scheme_registry.h"
#include "terngrad/models/registry.h"
#include "terngrad/optim/lr_schedule.h"
#include "terngrad/optim/moving_average.h"
#include "terngrad/optim/optimizer.h"
#include "terngrad/train/batch_source.h"
#include "terngrad/train/batch_upload.h"
#include "terngrad/train/checkpoint.h"
#include "terngrad/train/checkpoint_series.h"
#include "terngrad/train/event_writer.h"
#include "terngrad/train/generation_fence.h"
#include "terngrad/train/loss_scaler.h"
#include "terngrad/train/memory_budget.h"
#include "terngrad/train/metrics.h"
#include "terngrad/train/replica_threads.h"
#include "terngrad/train/run_report.h"
#include "terngrad/train/stale_files.h"
#include "terngrad/train/throughput_meter.h"
#include "terngrad/train/train_flags.h"
#include "terngrad/train/trainer.h"

namespace tg {

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
  std::vector<int> workers;             // indices into Impl::workers
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

// The replica's slab that a checkpoint part holds (trainer_checkpoint.cc).
Slab& checkpoint_slab(Replica& r, CheckpointLayout::Part part);

struct Worker {
  int replica = 0;
  int global_index = 0;  // (process * replicas + replica) * workers per replica + index in the replica
  std::unique_ptr<Net> net;
  std::vector<Tensor> grad_views;  // views of its gradient slab (on its device) for the exchange, in parameter order
  int track = -1;                  // its timeline track
  double forward_backward = 0;     // seconds in the last step, exchange work inside backward excluded
};

using Clock = std::chrono::steady_clock;
inline double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

struct Trainer::Impl {
  ~Impl() {
    if (process_comm) process_comm->set_watchdog(nullptr);  // it outlives the trainer, the watchdog does not
  }
  TrainConfig cfg;
  DatasetInfo data;  // cfg.data_info(), read once in build() (a custom folder's comes from its dataset.json)
  Communicator* process_comm = nullptr;
  int rank = 0, num_processes = 1;
  int64_t worker_batch = 0, process_batch = 0;
  // The job's shape and the replicas' communicators (declared first: they outlive the exchanges using them).
  std::unique_ptr<Topology> topology;
  std::unique_ptr<ReplicaGroups> groups;
  // --collective_timeout: ends a run that stops making progress (a peer gone without an error); null when off or
  // alone. Destroyed after the replicas (their exchanges' threads) and before the groups it aborts.
  std::unique_ptr<ProgressWatchdog> watchdog;
  std::unique_ptr<GenerationFence> fence;  // --generation: no write into train_dir once a later generation owns it
  std::vector<Replica> replicas;
  std::vector<Worker> workers;
  std::unique_ptr<Timeline> timeline;       // --timeline
  bool timeline_written = false;            // its window's events are in the file
  std::unique_ptr<ReplicaThreads> threads;  // one host thread per replica
  PhaseTimes step_times;                    // of the last step (replica 0's, plus the input wait and other)
  ExchangeStats last_stats;
  std::unique_ptr<LearningRateSchedule> schedule;
  // The schedule's rate at step t, scaled with the workers under --elastic_batch per_worker.
  float learning_rate(int64_t t) const { return static_cast<float>(cfg.learning_rate_scale() * (*schedule)(t)); }
  std::unique_ptr<BatchSource> source;
  CompressionPolicy policy;
  CompressionPolicy fp32_policy;         // Replica::fp32's: everything fp32
  std::unique_ptr<BatchUpload> batches;  // staging host batches, device batches, uploads
  int64_t start_step = 0;
  std::unique_ptr<CheckpointSeries> checkpoints;  // this run's in train_dir
  std::string last_digest;
  Clock::time_point last_save = Clock::now();  // --save_secs counts from here (the run's start, then each save)
  int64_t last_saved_step = -1;
  Clock::time_point last_eval = Clock::now();  // --eval_secs counts from here
  int64_t last_eval_step = -1;
  std::string resumed_path;            // the checkpoint this run resumed from
  std::unique_ptr<LossScaler> scaler;  // --precision fp16: dynamic loss scaling (disabled otherwise)

  // Construction: adopt_checkpoint_flags(), build() (replicas, workers, exchange, schedule), then
  // resume_or_initialize().
  void build();
  void place_workers(int n_replicas);
  void build_replicas();
  void build_replica(Replica& r, const ModelConfig& mc);
  TrainingLayout layout() const;
  void check_memory_fits(Replica& r);
  void connect_replicas();
  void watch_progress();
  void build_timeline();
  void build_exchanges();
  void build_schedule();
  void allocate_host_batch();
  void adopt_checkpoint_flags();
  void adopt_pretrained_padding();            // a new run from other weights takes their --padding_style
  std::string pretrained_checkpoint() const;  // --pretrained_model_checkpoint_path's file
  void start_from_pretrained();               // trainer_pretrained.cc
  void resume_or_initialize();
  uint64_t resume(const std::string& path);
  bool check_resumable(const CheckpointMeta& m) const;
  void restore_rank_state(const CheckpointMeta& m);
  void warn_if_machine_is_busy() const;
  void say_schedule_change(const CheckpointMeta& m) const;
  static bool rank_state_matches(const std::string& file, const Slab& state);
  CheckpointMeta checkpoint_meta(int64_t steps_done) const;  // the fields every file of a checkpoint shares
  void save_rank_state(Replica& r, int64_t steps_done);
  void check_finite_before_save(int64_t steps_done);
  std::string state_name(const Slab& state) const;
  void create_ema(Replica& r);
  void open_batch_source(uint64_t cursor);
  void warm_up_gpus();

  // A step.
  void step(int64_t t, float lr);
  void replica_step(Replica& r, uint32_t step, float lr, int64_t t);
  bool agree_on_overflow(Replica& r);

  // run()'s phases: configuration lines, timed steps, log windows (their output is RunReport's), what follows a
  // step, the end of the run.
  TrainResult already_finished() const;
  void open_run(RunReport& report);
  void log_configuration() const;
  void write_flags_file() const;
  // Whether step t (0-based) ends a log window (--log_every, the last step).
  bool ends_window(int64_t t) const { return (t + 1) % cfg.log_every == 0 || t + 1 == cfg.max_steps; }
  bool timed_step(int64_t t, float lr, RunReport& report);
  void log_window(int64_t done, float lr, RunReport& report);
  void after_step(int64_t done);
  void log_device_memory_used();
  void finish_run(int64_t t, RunReport& report, TrainResult& result);

  void write_timeline();
  std::vector<PhaseTimes> gather_times(const PhaseTimes& mine);
  std::string save(int64_t steps_done);
  void check_replicas(int64_t steps_done);
  uint32_t parameter_crc(Replica& r);
  std::string parameter_digest(Replica& r);  // as a checkpoint's header states it (write_checkpoint)
  void verify_processes_agree();
  bool between_steps(const std::atomic<bool>* stop, int64_t done, RunReport& report);
  void evaluate(int64_t done, RunReport& report);
  std::vector<NamedTensor> host_snapshot(std::vector<Buffer>& storage);
  bool is_chief() const { return rank == 0; }
};

}  // namespace tg
