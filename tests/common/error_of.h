// error_of(f): the message of the tg::Error f throws, or "(no error)"; for tests that compare whole messages.
#pragma once

#include <functional>
#include <string>

#include "terngrad/core/error.h"

namespace tg {

inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace tg
