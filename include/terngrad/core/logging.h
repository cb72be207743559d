// Logging setup: spdlog to stdout with a compact pattern; level from a name ("info", "debug", ...). Colour only on
// a terminal, never under an MPI launcher (it gives the ranks a pseudo-terminal and collects their output into
// files) nor with NO_COLOR set.
#pragma once

#include <spdlog/spdlog.h>

#include <string>

namespace tg {

void setup_logging(const std::string& level = "info");

// A result line ("done: ...") logged as info at every level but off: a run with --log_level warn still says how
// it ended.
void log_result(const std::string& line);

}  // namespace tg
