// RunCheckpoints: where a run starts and what it leaves behind. Before the replicas exist, the flags that a
// train_dir's checkpoint (or the weights a new run starts from) fixes; then the start (the latest checkpoint
// resumed, other weights, or fresh parameters, checked alike on every process) and every checkpoint the run writes
// (the replicated parts by process 0, each rank's own state by every process), with the step the run started from,
// the last step saved and its parameter digest.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "src/train/replica_set.h"
#include "terngrad/optim/lr_schedule.h"
#include "terngrad/train/checkpoint_series.h"
#include "terngrad/train/loss_scaler.h"

namespace tg {

class RunCheckpoints {
 public:
  // Before the run's flags are resolved: a train_dir holding a checkpoint is resumed with the flags it was written
  // with (a differing one given on the command line is refused); a new run from other weights takes their
  // --padding_style. rank: this process's (process 0 says what it adopted).
  static void adopt_flags(TrainConfig& cfg, int rank);

  // cfg, set and scaler outlive this object; channels: the data's (a checkpoint's header states them).
  RunCheckpoints(const TrainConfig& cfg, ReplicaSet& set, LossScaler& scaler, int channels);

  // The start: a killed writer's temporary files removed (process 0), then the latest checkpoint in train_dir
  // resumed, or --pretrained_model_checkpoint_path's weights, or fresh parameters; every process must start at the
  // same step with the same parameters. Returns the data cursor to continue from. schedule: the run's (a resume
  // that moves it says so).
  uint64_t start(const LearningRateSchedule& schedule);
  // The checkpoint of step `steps_done`; data_cursor: where the input continues after it. Its parameter digest
  // (process 0's; "" on the others) becomes last_digest().
  void save(int64_t steps_done, uint64_t data_cursor);

  int64_t start_step() const { return start_step_; }
  const std::string& last_digest() const { return last_digest_; }
  int64_t last_saved_step() const { return last_saved_step_; }
  Clock::time_point last_save() const { return last_save_; }  // --save_secs counts from here
  void restart_save_clock() { last_save_ = Clock::now(); }
  const std::string& resumed_path() const { return resumed_path_; }
  bool none_written() const { return series_->empty(); }  // train_dir holds no checkpoint of this run's

 private:
  static void adopt_pretrained_padding(TrainConfig& cfg, int rank);
  static std::string pretrained_checkpoint(const TrainConfig& cfg);  // --pretrained_model_checkpoint_path's file
  void start_from_pretrained();                                      // pretrained_start.cc
  uint64_t resume(const std::string& path, const LearningRateSchedule& schedule);
  bool check_resumable(const CheckpointMeta& m) const;
  void say_schedule_change(const CheckpointMeta& m, const LearningRateSchedule& schedule) const;
  void restore_rank_state(const CheckpointMeta& m);
  static bool rank_state_matches(const std::string& file, const Slab& state);
  void verify_processes_agree();
  CheckpointMeta checkpoint_meta(int64_t steps_done) const;  // the fields every file of a checkpoint shares
  std::vector<NamedTensor> host_snapshot(std::vector<Buffer>& storage);
  void save_rank_state(Replica& r, int64_t steps_done);
  void check_finite_before_save(int64_t steps_done);
  std::string state_name(const Slab& state) const;

  const TrainConfig& cfg_;
  ReplicaSet& set_;
  LossScaler& scaler_;
  int channels_ = 0;
  std::unique_ptr<CheckpointSeries> series_;  // this run's in train_dir
  int64_t start_step_ = 0;
  std::string last_digest_;
  Clock::time_point last_save_ = Clock::now();  // the run's start, then each save
  int64_t last_saved_step_ = -1;
  std::string resumed_path_;  // the checkpoint this run resumed from
};

}  // namespace tg
