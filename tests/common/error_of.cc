// The message of the tg::Error a piece of code throws (error_of.h).
#include "common/error_of.h"

#include "terngrad/core/error.h"

namespace tg::testing {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace tg::testing
