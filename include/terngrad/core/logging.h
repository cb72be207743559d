// Logging setup: spdlog to stderr with a compact pattern; level from a name ("info", "debug", ...).
#pragma once

#include <spdlog/spdlog.h>

#include <string>

namespace tg {

void setup_logging(const std::string& level = "info");

}  // namespace tg
