// Errors: one exception type carrying a one-line message that names what failed and where, and one generic
// family of check macros. Library-specific variants (CUDA, cuDNN, cuBLAS, NCCL, MPI, oneDNN) are built on
// TG_CHECK_CALL in their backends; they record the call's text, the file and the line. Checks are always on
// (never assert): they are how bad input becomes a clear message.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace tg {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what, std::string location = "")
      : std::runtime_error(what), location_(std::move(location)) {}
  // Where a check failed ("check `expr` failed at file.cc:N"), for the debug log; empty for a thrown message.
  const std::string& location() const { return location_; }

 private:
  std::string location_;
};

// A usage error: a flag's value fails its check, or the command line cannot be read. The programs print it in
// one line and exit 2 (other errors: 1).
class UsageError : public Error {
 public:
  explicit UsageError(const std::string& what) : Error(what) {}
};

namespace detail {
[[noreturn]] void throw_check_failed(const char* expr, const char* file, int line, const std::string& msg);
[[noreturn]] void throw_call_failed(const char* library, const char* call, const std::string& status, const char* file,
                                    int line);
}  // namespace detail

}  // namespace tg

// Throws tg::Error with a formatted message (the user-facing line).
#define TG_THROW(...) throw ::tg::Error(::fmt::format(__VA_ARGS__))

// Throws tg::UsageError (exit 2) with a formatted message.
#define TG_USAGE_ERROR(...) throw ::tg::UsageError(::fmt::format(__VA_ARGS__))

// Always-on check: on failure throws tg::Error whose message is the user-facing line; the expression, file and
// line go to Error::location() (the programs log it at debug level).
#define TG_CHECK(cond, ...)                                                                               \
  do {                                                                                                    \
    if (!(cond)) ::tg::detail::throw_check_failed(#cond, __FILE__, __LINE__, ::fmt::format(__VA_ARGS__)); \
  } while (0)

// Generic core for library return codes: `ok` is an expression over `status_`, `describe` turns it into
// text. Variants: TG_CUDA_CHECK, TG_CUDNN_CHECK, TG_CUBLAS_CHECK, TG_NCCL_CHECK, TG_MPI_CHECK.
#define TG_CHECK_CALL(library, call, ok, describe)                                              \
  do {                                                                                          \
    auto status_ = (call);                                                                      \
    if (!(ok)) ::tg::detail::throw_call_failed(library, #call, (describe), __FILE__, __LINE__); \
  } while (0)
