// CheckpointSeries: the checkpoints of one run in its train_dir, owned in one place: which steps are kept (the
// newest --keep_checkpoints, named by the index file), the order a step's files are written in so that a kill at
// any moment leaves the previous checkpoint whole (every rank file first, then the checkpoint, then the index, then
// the pruned files), and what a killed run left behind (temporary files, rank files without their checkpoint).
// The tensors and headers are the trainer's; the files' format is checkpoint.h's.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "terngrad/train/checkpoint.h"

namespace tg {

class CheckpointSeries {
 public:
  CheckpointSeries(std::string train_dir, int keep) : dir_(std::move(train_dir)), keep_(keep) {}

  // Process 0 at the start of a run: removes the temporary files of a killed writer and the rank files of a
  // checkpoint it never wrote (each said in a log line).
  void clean() const;
  // A resumed run: the steps the folder holds are the series so far.
  void adopt_existing() { kept_ = list_checkpoint_steps(dir_); }

  // Rank `rank`'s per-rank state of `step` in its own file beside the checkpoint (its header names its rank).
  void write_rank_file(int64_t step, int rank, CheckpointMeta meta, const std::vector<NamedTensor>& tensors) const;
  // The checkpoint of `step` (after every rank file of it); `meta.rank_files` says how many there are. Keeps the
  // newest `keep` checkpoints and removes the others with their rank files. Returns the parameter digest.
  std::string write(int64_t step, const CheckpointMeta& meta, const std::vector<NamedTensor>& tensors);

  bool empty() const { return kept_.empty(); }
  // The newest checkpoint's path, or "none".
  std::string last() const { return kept_.empty() ? std::string("none") : checkpoint_path(dir_, kept_.back()); }

 private:
  std::string dir_;
  int keep_;
  std::vector<int64_t> kept_;  // oldest first
};

}  // namespace tg
