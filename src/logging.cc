// ConfigureLogging (see include/rescale/logging.h).
#include "rescale/logging.h"

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include "absl/strings/str_format.h"

namespace rescale {

absl::Status ConfigureLogging(const std::string& program, const std::string& format,
                              const std::string& level) {
  if (format != "text" && format != "json") {
    return absl::InvalidArgumentError(
        absl::StrFormat("log format must be text or json, got \"%s\"", format));
  }
  const spdlog::level::level_enum parsed = spdlog::level::from_str(level);
  if (parsed == spdlog::level::off && level != "off") {
    return absl::InvalidArgumentError(absl::StrFormat("log level \"%s\" is not a level", level));
  }
  auto logger = spdlog::stderr_logger_mt(program);
  if (format == "json") {
    logger->set_pattern(
        R"({"time":"%Y-%m-%dT%H:%M:%S.%fZ","level":"%l","logger":"%n","message":"%v"})",
        spdlog::pattern_time_type::utc);
  } else {
    logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%L%$ %v");
  }
  logger->set_level(parsed);
  spdlog::set_default_logger(logger);
  return absl::OkStatus();
}

}  // namespace rescale
