// MakeLogger and ConfigureLogging (see include/rescale/logging.h).
#include "rescale/logging.h"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"

namespace rescale {
namespace {

// The %j flag: the message as a JSON string literal, quotes included.
// nlohmann's serializer does the escaping (and replaces invalid UTF-8), so
// the rules are the JSON standard's, not ours.
class JsonMessageFlag final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    const std::string quoted = nlohmann::json(std::string(msg.payload.data(), msg.payload.size()))
                                   .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    dest.append(quoted.data(), quoted.data() + quoted.size());
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<JsonMessageFlag>();
  }
};

}  // namespace

absl::StatusOr<std::shared_ptr<spdlog::logger>> MakeLogger(const std::string& program,
                                                           const std::string& format,
                                                           const std::string& level,
                                                           spdlog::sink_ptr sink) {
  if (format != "text" && format != "json") {
    return absl::InvalidArgumentError(
        absl::StrFormat("log format must be text or json, got \"%s\"", format));
  }
  const spdlog::level::level_enum parsed = spdlog::level::from_str(level);
  if (parsed == spdlog::level::off && level != "off") {
    return absl::InvalidArgumentError(absl::StrFormat("log level \"%s\" is not a level", level));
  }
  auto logger = std::make_shared<spdlog::logger>(program, std::move(sink));
  if (format == "json") {
    // The program name is ours (no characters to escape); the level names
    // are spdlog's fixed words.
    auto formatter = std::make_unique<spdlog::pattern_formatter>(spdlog::pattern_time_type::utc);
    formatter->add_flag<JsonMessageFlag>('j').set_pattern(
        R"({"time":"%Y-%m-%dT%H:%M:%S.%fZ","level":"%l","logger":"%n","message":%j})");
    logger->set_formatter(std::move(formatter));
  } else {
    logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%L%$ %v");
  }
  logger->set_level(parsed);
  return logger;
}

absl::Status ConfigureLogging(const std::string& program, const std::string& format,
                              const std::string& level) {
  absl::StatusOr<std::shared_ptr<spdlog::logger>> logger =
      MakeLogger(program, format, level, std::make_shared<spdlog::sinks::stderr_sink_mt>());
  if (!logger.ok()) return logger.status();
  spdlog::set_default_logger(*std::move(logger));
  return absl::OkStatus();
}

}  // namespace rescale
