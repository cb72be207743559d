// AtomicFile: temporary name, fsync, rename, folder fsync.
#include "terngrad/core/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "terngrad/core/error.h"

namespace tg {

AtomicFile::AtomicFile(const std::string& path) : path_(path) {
  temp_ = path + ".tmp-" + std::to_string(::getpid());
  file_ = std::fopen(temp_.c_str(), "wb");
  TG_CHECK(file_ != nullptr, "cannot create {}: {}", temp_, std::strerror(errno));
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
  if (std::fwrite(data, 1, bytes, file_) != bytes) TG_THROW("writing {} failed: {}", temp_, std::strerror(errno));
  written_ += bytes;
}

void AtomicFile::commit() {
  TG_CHECK(file_ != nullptr, "{} committed twice", path_);
  bool ok = std::fflush(file_) == 0 && ::fsync(::fileno(file_)) == 0;
  int err = errno;
  ok = (std::fclose(file_) == 0) && ok;
  file_ = nullptr;
  if (!ok || std::rename(temp_.c_str(), path_.c_str()) != 0) {
    if (ok) err = errno;
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

}  // namespace tg
