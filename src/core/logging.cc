// spdlog configuration shared by the binaries.
#include "terngrad/core/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <cstdlib>
#include <memory>

#include "terngrad/core/error.h"
#include "terngrad/core/launcher.h"

namespace tg {

void setup_logging(const std::string& level) {
  auto lvl = spdlog::level::from_str(level);
  if (lvl == spdlog::level::off && level != "off")
    TG_USAGE_ERROR("--log_level '{}' is not one of trace, debug, info, warn, error, off", level);
  const auto mode =
      launched_by_mpi() || std::getenv("NO_COLOR") ? spdlog::color_mode::never : spdlog::color_mode::automatic;
  auto logger =
      std::make_shared<spdlog::logger>("terngrad", std::make_shared<spdlog::sinks::stdout_color_sink_mt>(mode));
  spdlog::set_default_logger(logger);
  spdlog::set_level(lvl);
  spdlog::set_pattern("%Y-%m-%d %H:%M:%S.%e %^%L%$ %v");
}

void log_result(const std::string& line) {
  const auto logger = spdlog::default_logger();
  if (logger->level() == spdlog::level::off) return;
  if (logger->should_log(spdlog::level::info)) {
    logger->info("{}", line);
    return;
  }
  // Above info: straight to the sinks (their own level is trace), as an info line.
  const spdlog::details::log_msg msg(logger->name(), spdlog::level::info, line);
  for (const auto& sink : logger->sinks()) {
    sink->log(msg);
    sink->flush();
  }
}

}  // namespace tg
