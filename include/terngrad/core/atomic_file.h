// The two ways a file is written.
//
// AtomicFile, for whole files (checkpoints, shards, traces): it writes under a temporary name in the same folder and,
// on commit(), flushes, fsyncs and renames it over the final name (then fsyncs the folder). A writer destroyed before
// commit() removes its temporary file, so a failure or a crash never leaves a half-written file under the final name.
// Every error names the final path (and the temporary one) and the system's reason.
//
// Temporary names: kBeside is "<path>.tmp-<pid>" (what train/stale_files.h cleans up after a killed run);
// kHidden is "<folder>/.<name>.tmp-<pid>-<n>", which no glob of the final names ("<subset>-*") matches, and
// unique within the process (converter threads write several files at once).
//
// AppendFile, for logs read while they grow (JSON lines, TensorBoard events): opened for appending (created
// when missing), each append() one write(2) of a whole record on an O_APPEND descriptor, so two writers'
// records never interleave and a crash loses at most the record being written. Errors name the file (after
// `what`, e.g. "--metrics_jsonl") and the reason.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace tg {

class AtomicFile {
 public:
  enum class TempName { kBeside, kHidden };

  // buffer_bytes: the stdio buffer (0: the default).
  explicit AtomicFile(const std::string& path, TempName temp = TempName::kBeside, size_t buffer_bytes = 0);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t bytes);
  void write(const std::string& s) { write(s.data(), s.size()); }
  uint64_t bytes_written() const { return written_; }
  void commit();
  const std::string& temp_path() const { return temp_; }

 private:
  std::string path_, temp_;
  std::FILE* file_ = nullptr;
  uint64_t written_ = 0;
  std::vector<char> buffer_;
};

// A check that every AtomicFile::commit() into `folder` (or below it) runs right before its rename, for as long as the
// guard lives: it throws to refuse the write, which then leaves nothing under the final name (an elastic run's
// generation fence, train/generation_fence.h, refuses a process of a generation that is over).
class CommitGuard {
 public:
  CommitGuard(const std::string& folder, std::function<void()> check);
  ~CommitGuard();
  CommitGuard(const CommitGuard&) = delete;
  CommitGuard& operator=(const CommitGuard&) = delete;
};

class AppendFile {
 public:
  explicit AppendFile(const std::string& path, const std::string& what = "");
  ~AppendFile();
  AppendFile(const AppendFile&) = delete;
  AppendFile& operator=(const AppendFile&) = delete;

  void append(std::string_view record);

 private:
  std::string name_;  // how errors name the file
  int fd_ = -1;
};

}  // namespace tg
