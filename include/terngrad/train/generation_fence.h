// GenerationFence: the generations of an elastic run (scripts/elastic_run.sh) share one train_dir, and a process of a
// generation that is over must never write into it: one that was stopped (SIGSTOP) or cut off while the launcher
// restarted the job on the machines left could come back and overwrite the new generation's checkpoints. The launcher
// writes the generation it starts into <train_dir>/generation (one number) before starting it. A trainer of generation
// g (--generation g) starts only when the file names g: a later one means g is over; an earlier one or none means this
// machine does not see the launcher's train_dir (an elastic run needs one folder shared by every machine: a restarted
// job resumes, on any machine, from the checkpoints every other one wrote). It checks the file again right before
// every rename into the train_dir (a CommitGuard on AtomicFile): a later generation stops the write, and the run, with
// one line naming both. Only the window between that check and the rename is not covered. Generation 0 (the
// default): no fence.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "terngrad/core/atomic_file.h"

namespace tg {

class GenerationFence {
 public:
  static constexpr const char* kFileName = "generation";
  GenerationFence(const std::string& train_dir, int64_t generation);
  // The generation <train_dir>/generation names (0 when there is none); a file that is not one number is an error.
  static int64_t current(const std::string& train_dir);
  // Throws when a later generation owns the train_dir.
  void check() const;

 private:
  void refuse_if_over(int64_t owner) const;  // throws when `owner` (the file's generation) is later than this one
  std::string train_dir_;
  int64_t generation_;
  std::unique_ptr<CommitGuard> guard_;
};

}  // namespace tg
