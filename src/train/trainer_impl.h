// The Trainer's private parts, shared by its files: trainer.cc (building; the step) and trainer_run.cc (the run loop,
// log lines, metrics, summaries, timeline). The replicas are a ReplicaSet (replica_set.h), the run's start and
// checkpoints a RunCheckpoints (run_checkpoints.h).
#pragma once

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>

#include "src/train/replica_set.h"
#include "src/train/run_checkpoints.h"
#include "terngrad/core/atomic_file.h"
#include "terngrad/core/human_units.h"
#include "terngrad/core/phase_times.h"
#include "terngrad/core/timeline.h"
#include "terngrad/data/input_pipeline.h"
#include "terngrad/models/registry.h"
#include "terngrad/optim/lr_schedule.h"
#include "terngrad/train/batch_source.h"
#include "terngrad/train/batch_upload.h"
#include "terngrad/train/generation_fence.h"
#include "terngrad/train/loss_scaler.h"
#include "terngrad/train/run_report.h"
#include "terngrad/train/train_flags.h"
#include "terngrad/train/trainer.h"

namespace tg {

// The trainer's own state: its configuration, the replicas (ReplicaSet), the run's checkpoints (RunCheckpoints),
// and what a step and the run loop need beside them.
struct Trainer::Impl {
  TrainConfig cfg;
  DatasetInfo data;  // cfg.data_info(), read once in build() (a custom folder's comes from its dataset.json)
  std::unique_ptr<GenerationFence> fence;  // --generation: no write into train_dir once a later generation owns it
  std::unique_ptr<Timeline> timeline;      // --timeline (declared before the replicas: their exchanges record into it)
  bool timeline_written = false;           // its window's events are in the file
  std::unique_ptr<LossScaler> scaler;      // --precision fp16: dynamic loss scaling (disabled otherwise)
  std::unique_ptr<ReplicaSet> set;
  std::unique_ptr<RunCheckpoints> checkpoints;
  std::unique_ptr<LearningRateSchedule> schedule;
  std::unique_ptr<BatchSource> source;
  std::unique_ptr<BatchUpload> batches;  // staging host batches, device batches, uploads
  PhaseTimes step_times;                 // of the last step (replica 0's, plus the input wait and other)
  ExchangeStats last_stats;
  struct {
    Clock::time_point at = Clock::now();  // --eval_secs counts from here
    int64_t step = -1;
  } last_eval;
  int64_t next_step = 0;  // run_steps()'s

  // Construction: RunCheckpoints::adopt_flags, build() (replicas, timeline, exchanges, schedule, host batch), then
  // start().
  void build();
  void build_timeline();
  void build_schedule();
  void allocate_host_batch();
  void start();
  void open_batch_source(uint64_t cursor);
  void warn_if_machine_is_busy() const;
  // The schedule's rate at step t, scaled with the workers under --elastic_batch per_worker.
  float learning_rate(int64_t t) const { return static_cast<float>(cfg.learning_rate_scale() * (*schedule)(t)); }
  bool is_chief() const { return set->is_chief(); }
  void save(int64_t steps_done) { checkpoints->save(steps_done, source->cursor()); }

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
  bool between_steps(const std::atomic<bool>* stop, int64_t done, RunReport& report);
  void evaluate(int64_t done, RunReport& report);
};

}  // namespace tg
