// spdlog configuration shared by the three binaries.
#include "terngrad/core/logging.h"

#include "terngrad/core/error.h"

namespace tg {

void setup_logging(const std::string& level) {
  auto lvl = spdlog::level::from_str(level);
  TG_CHECK(lvl != spdlog::level::off || level == "off",
           "--log_level '{}' is not one of trace, debug, info, warn, error, off", level);
  spdlog::set_level(lvl);
  spdlog::set_pattern("%Y-%m-%d %H:%M:%S.%e %^%L%$ %v");
}

}  // namespace tg
