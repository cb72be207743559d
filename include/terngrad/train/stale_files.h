// Temporary files a killed writer leaves behind. Checkpoints and the index are written to
// "<name>.tmp-<pid>" and renamed (core/atomic_file.h); a process killed between the two (kill -9, power loss)
// leaves that temporary file. The chief removes them at start and whenever it prunes old checkpoints: every
// "model.ckpt-*.tmp-<pid>" and "checkpoint.tmp-<pid>" in the train_dir whose pid is not a live process (or is
// this process's own, which has not started writing yet at start). A live writer's file is never touched.
#pragma once

#include <cstdint>
#include <string>

namespace tg {

struct StaleFiles {
  int files = 0;
  uint64_t bytes = 0;
};

// Removes the stale temporary files of train_dir (see above); `own_pid_too`: also this process's (at start).
// A folder that does not exist has none. Files that cannot be removed are left (and named in a warning).
StaleFiles remove_stale_temporary_files(const std::string& train_dir, bool own_pid_too);

// Whether `name` (a file name, no folder) is a checkpoint or index temporary file; *pid receives its pid.
bool is_checkpoint_temporary(const std::string& name, long* pid);

}  // namespace tg
