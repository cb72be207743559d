// CheckpointSeries: a run's checkpoints, written in a kill-safe order, pruned, and cleaned after a killed run.
#include "terngrad/train/checkpoint_series.h"

#include <spdlog/spdlog.h>

#include <filesystem>
#include <system_error>

#include "terngrad/core/human_units.h"
#include "terngrad/train/stale_files.h"

namespace tg {

namespace fs = std::filesystem;

void CheckpointSeries::clean() const {
  if (!fs::is_directory(dir_)) return;
  const StaleFiles stale = remove_stale_temporary_files(dir_, true);
  if (stale.files > 0)
    spdlog::info("removed {} temporary checkpoint file{} ({}) left in {} by a killed run", stale.files,
                 stale.files == 1 ? "" : "s", human_bytes(static_cast<double>(stale.bytes)), dir_);
  // Rank files are written before their checkpoint: a run killed in between leaves them without one.
  for (const std::string& f : orphan_rank_files(dir_)) {
    std::error_code ec;
    if (fs::remove(f, ec)) spdlog::info("removed {}: per-rank state of a checkpoint a killed run never wrote", f);
  }
}

void CheckpointSeries::write_rank_file(int64_t step, int rank, CheckpointMeta meta,
                                       const std::vector<NamedTensor>& tensors) const {
  meta.step = step;
  meta.rank_files = rank;  // a rank file's header names its rank
  write_checkpoint(checkpoint_rank_path(dir_, step, rank), meta, tensors);
}

std::string CheckpointSeries::write(int64_t step, const CheckpointMeta& meta, const std::vector<NamedTensor>& tensors) {
  const std::string path = checkpoint_path(dir_, step);
  const std::string digest = write_checkpoint(path, meta, tensors);
  if (kept_.empty() || kept_.back() != step) kept_.push_back(step);
  std::vector<int64_t> pruned;
  while (static_cast<int>(kept_.size()) > keep_) {
    pruned.push_back(kept_.front());
    kept_.erase(kept_.begin());
  }
  // The index first: a crash between the two leaves an index naming files that all exist.
  write_checkpoint_index(dir_, kept_);
  for (int64_t s : pruned) {
    fs::remove(checkpoint_path(dir_, s));
    for (int k = 0; k < meta.rank_files; ++k) fs::remove(checkpoint_rank_path(dir_, s, k));
  }
  if (!pruned.empty()) remove_stale_temporary_files(dir_, false);
  spdlog::info("saved {} (step {}, parameter digest {})", path, step, digest);
  return digest;
}

}  // namespace tg
