// Removal of the temporary files killed checkpoint writers leave (see the header).
#include "terngrad/train/stale_files.h"

#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <regex>

namespace tg {

namespace fs = std::filesystem;

bool is_checkpoint_temporary(const std::string& name, long* pid) {
  static const std::regex re("^(model\\.ckpt-[0-9]+(\\.rank-[0-9]+)?|checkpoint)\\.tmp-([0-9]{1,9})$");
  std::smatch m;
  if (!std::regex_match(name, m, re)) return false;
  *pid = std::stol(m[3].str());
  return true;
}

namespace {
// kill(pid, 0) fails with ESRCH only when no such process exists (EPERM: it exists, owned by another user).
bool process_alive(long pid) { return pid > 0 && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH); }
}  // namespace

StaleFiles remove_stale_temporary_files(const std::string& train_dir, bool own_pid_too) {
  StaleFiles removed;
  std::error_code ec;
  if (!fs::is_directory(train_dir, ec)) return removed;
  const long self = static_cast<long>(::getpid());
  for (fs::directory_iterator it(train_dir, ec), end; !ec && it != end; it.increment(ec)) {
    long pid = 0;
    if (!is_checkpoint_temporary(it->path().filename().string(), &pid)) continue;
    if (pid == self ? !own_pid_too : process_alive(pid)) continue;
    std::error_code size_ec, rm_ec;
    const uintmax_t size = fs::file_size(it->path(), size_ec);
    if (fs::remove(it->path(), rm_ec)) {
      ++removed.files;
      removed.bytes += size_ec ? 0 : size;
    } else if (rm_ec) {
      spdlog::warn("cannot remove the stale temporary file {}: {}", it->path().string(), rm_ec.message());
    }
  }
  return removed;
}

}  // namespace tg
