// AtomicFile: writes a file under a temporary name in the same folder and, on commit(), flushes, fsyncs and
// renames it over the final name (then fsyncs the folder). A writer destroyed before commit() removes its
// temporary file, so a failure or a crash never leaves a half-written file under the final name.
#pragma once

#include <cstdio>
#include <string>

namespace tg {

class AtomicFile {
 public:
  explicit AtomicFile(const std::string& path);  // errors name the path
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t bytes);
  void write(const std::string& s) { write(s.data(), s.size()); }
  uint64_t bytes_written() const { return written_; }
  void commit();

 private:
  std::string path_, temp_;
  std::FILE* file_ = nullptr;
  uint64_t written_ = 0;
};

}  // namespace tg
