// Builders of the messages thrown by the check macros.
#include "terngrad/core/error.h"

namespace tg::detail {

static const char* basename_of(const char* path) {
  const char* base = path;
  for (const char* p = path; *p; ++p)
    if (*p == '/') base = p + 1;
  return base;
}

void throw_check_failed(const char* expr, const char* file, int line, const std::string& msg) {
  throw Error(msg, fmt::format("check `{}` failed at {}:{}", expr, basename_of(file), line));
}

void throw_call_failed(const char* library, const char* call, const std::string& status, const char* file, int line) {
  throw Error(fmt::format("{} error: {} returned {} at {}:{}", library, call, status, basename_of(file), line));
}

}  // namespace tg::detail
