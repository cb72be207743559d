// AtomicFile: temporary name, fsync, rename, folder fsync. AppendFile: one write(2) per record.
#include "terngrad/core/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <vector>

#include "terngrad/core/error.h"

namespace tg {

namespace {
// The live guards: (folder, its check), under a mutex (commits come from any thread).
struct Guard {
  const CommitGuard* owner;
  std::string folder;  // weakly canonical, with a trailing separator
  std::function<void()> check;
};
std::mutex& guards_mutex() {
  static std::mutex* m = new std::mutex;  // never destroyed: a guard may be released after statics at exit
  return *m;
}
std::vector<Guard>& guards() {
  static std::vector<Guard>* g = new std::vector<Guard>;
  return *g;
}
std::string canonical_folder(const std::string& path) {
  std::string s = std::filesystem::weakly_canonical(std::filesystem::absolute(path)).string();
  if (s.empty() || s.back() != '/') s += '/';
  return s;
}
// Runs the checks of every guard whose folder holds `path` (outside the lock: a check reads files).
void run_guards(const std::string& path) {
  std::vector<std::function<void()>> checks;
  {
    std::lock_guard<std::mutex> lock(guards_mutex());
    if (guards().empty()) return;
    const std::string dir = canonical_folder(std::filesystem::path(path).parent_path().string());
    for (const Guard& g : guards())
      if (dir.compare(0, g.folder.size(), g.folder) == 0) checks.push_back(g.check);
  }
  for (const auto& c : checks) c();
}
}  // namespace

CommitGuard::CommitGuard(const std::string& folder, std::function<void()> check) {
  std::lock_guard<std::mutex> lock(guards_mutex());
  guards().push_back({this, canonical_folder(folder), std::move(check)});
}

CommitGuard::~CommitGuard() {
  std::lock_guard<std::mutex> lock(guards_mutex());
  auto& g = guards();
  for (size_t i = 0; i < g.size(); ++i)
    if (g[i].owner == this) {
      g.erase(g.begin() + static_cast<std::ptrdiff_t>(i));
      break;
    }
}

namespace {
std::string temp_name(const std::string& path, AtomicFile::TempName kind) {
  const std::string pid = std::to_string(::getpid());
  if (kind == AtomicFile::TempName::kBeside) return path + ".tmp-" + pid;
  static std::atomic<uint64_t> counter{0};
  const std::filesystem::path p(path);
  return (p.parent_path() / ("." + p.filename().string() + ".tmp-" + pid + "-" + std::to_string(counter++))).string();
}
}  // namespace

AtomicFile::AtomicFile(const std::string& path, TempName temp, size_t buffer_bytes)
    : path_(path), temp_(temp_name(path, temp)) {
  file_ = std::fopen(temp_.c_str(), "wb");
  TG_CHECK(file_ != nullptr, "cannot create {} (for {}): {}", temp_, path_, std::strerror(errno));
  if (buffer_bytes > 0) {
    buffer_.resize(buffer_bytes);
    std::setvbuf(file_, buffer_.data(), _IOFBF, buffer_.size());
  }
}

AtomicFile::~AtomicFile() {
  if (file_) {
    std::fclose(file_);
    std::remove(temp_.c_str());
  }
}

void AtomicFile::write(const void* data, size_t bytes) {
  TG_CHECK(file_ != nullptr, "write to {} after commit", path_);
  if (bytes == 0) return;
  if (std::fwrite(data, 1, bytes, file_) != bytes)
    TG_THROW("cannot write {} (temporary file {}): {}", path_, temp_, std::strerror(errno));
  written_ += bytes;
}

void AtomicFile::commit() {
  TG_CHECK(file_ != nullptr, "{} committed twice", path_);
  int err = 0;  // the first failure's errno
  if (std::fflush(file_) != 0 || ::fsync(::fileno(file_)) != 0) err = errno ? errno : EIO;
  if (std::fclose(file_) != 0 && err == 0) err = errno ? errno : EIO;
  file_ = nullptr;
  if (err == 0) {
    try {
      run_guards(path_);  // a guard that refuses: the temporary file goes, the final name is untouched
    } catch (...) {
      std::remove(temp_.c_str());
      throw;
    }
  }
  if (err == 0 && std::rename(temp_.c_str(), path_.c_str()) != 0) err = errno ? errno : EIO;
  if (err != 0) {
    std::remove(temp_.c_str());
    TG_THROW("cannot write {}: {}", path_, std::strerror(err));
  }
  std::string dir = std::filesystem::path(path_).parent_path().string();
  int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

AppendFile::AppendFile(const std::string& path, const std::string& what)
    : name_(what.empty() ? path : what + " " + path) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  TG_CHECK(fd_ >= 0, "{}: cannot open: {}", name_, std::strerror(errno));
}

AppendFile::~AppendFile() {
  if (fd_ >= 0) ::close(fd_);
}

void AppendFile::append(std::string_view record) {
  size_t done = 0;  // a short write (a huge record, a signal) continues where it stopped
  while (done < record.size()) {
    const ssize_t n = ::write(fd_, record.data() + done, record.size() - done);
    if (n < 0 && errno == EINTR) continue;
    TG_CHECK(n > 0, "{}: write failed: {}", name_, n < 0 ? std::strerror(errno) : "nothing written");
    done += static_cast<size_t>(n);
  }
}

}  // namespace tg
