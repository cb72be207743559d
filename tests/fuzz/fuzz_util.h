// Shared helpers of the libFuzzer targets in tests/fuzz: a per-process scratch file for readers that take a
// path, and quiet logging. The contract every target checks: malformed input may only throw tg::Error (or
// the documented error type of the API); any other exception, a sanitizer report, a timeout or an
// out-of-memory is a finding.
#pragma once

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace tg::fuzz {

// A scratch file of this process (tmpfs when there is one), rewritten with every input.
inline const std::string& scratch_path(const char* suffix) {
  static const std::string path = [suffix] {
    const char* dir = std::getenv("TG_FUZZ_TMPDIR");
    if (!dir) dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    return std::string(dir) + "/tg_fuzz_" + std::to_string(getpid()) + suffix;
  }();
  return path;
}

inline const std::string& write_scratch(const uint8_t* data, size_t size, const char* suffix) {
  const std::string& path = scratch_path(suffix);
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f || (size && std::fwrite(data, 1, size, f) != size) || std::fclose(f) != 0) {
    std::perror(path.c_str());
    std::abort();  // the harness, not the code under test, failed
  }
  return path;
}

// Removes the scratch file (and a folder of the same name + ".dir", if a target made one) at exit.
inline void remove_scratch_at_exit(const char* suffix) {
  static const char* s = suffix;
  scratch_path(s);  // its static string is constructed first, so it is destroyed after this handler runs
  std::atexit([] {
    std::error_code ec;
    std::filesystem::remove(scratch_path(s), ec);
    std::filesystem::remove_all(scratch_path(s) + ".dir", ec);
  });
}

inline void quiet_logging() { spdlog::set_level(spdlog::level::off); }

}  // namespace tg::fuzz
