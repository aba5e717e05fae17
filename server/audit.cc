// AuditLog (see server/audit.h).
#include "server/audit.h"

#include <spdlog/pattern_formatter.h>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"

namespace rescale::server {

absl::StatusOr<std::unique_ptr<AuditLog>> AuditLog::Create(const std::string& format,
                                                           spdlog::sink_ptr sink) {
  if (format != "text" && format != "json") {
    return absl::InvalidArgumentError(
        absl::StrFormat("log format must be text or json, got \"%s\"", format));
  }
  auto logger = std::make_shared<spdlog::logger>("audit", std::move(sink));
  if (format == "json") {
    // The payload is the record's members, already JSON (Record), so the
    // line is one object with them at the top level.
    logger->set_formatter(std::make_unique<spdlog::pattern_formatter>(
        R"({"time":"%Y-%m-%dT%H:%M:%S.%fZ","level":"%l","logger":"%n",%v})",
        spdlog::pattern_time_type::utc));
  } else {
    logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%L%$ audit: %v");
  }
  logger->set_level(spdlog::level::info);
  // Every line is flushed: an audit trail that dies with the process in a
  // buffer is no trail.
  logger->flush_on(spdlog::level::info);
  return std::unique_ptr<AuditLog>(new AuditLog(std::move(logger), format == "json"));
}

void AuditLog::Record(const Identity& caller, absl::string_view method, absl::string_view job,
                      const absl::Status& outcome, absl::string_view detail) {
  const std::string role = caller.anonymous ? "none" : std::string(RoleName(caller.role));
  const std::string code = absl::StatusCodeToString(outcome.code());
  const spdlog::level::level_enum level = outcome.ok() ? spdlog::level::info : spdlog::level::warn;
  if (json_) {
    nlohmann::ordered_json record = {{"user", caller.user},
                                     {"role", role},
                                     {"method", std::string(method)},
                                     {"job", std::string(job)},
                                     {"outcome", code}};
    if (!caller.peer.empty()) record["peer"] = caller.peer;
    if (!outcome.ok()) record["error"] = std::string(outcome.message());
    if (!detail.empty()) record["detail"] = std::string(detail);
    std::string members = record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    // "{...}" -> "..."; the formatter supplies the braces.
    members = members.substr(1, members.size() - 2);
    logger_->log(level, "{}", members);
    return;
  }
  // Every value a caller chose (user from a certificate's CN, job from the
  // request, messages quoting them) is quoted with C escapes, so no value
  // can end its field or the line and forge another record.
  auto quoted = [](absl::string_view value) {
    return absl::StrCat("\"", absl::CEscape(value), "\"");
  };
  std::string line =
      absl::StrFormat("user=%s role=%s method=%s job=%s outcome=%s", quoted(caller.user), role,
                      method, job.empty() ? "-" : quoted(job), code);
  if (!caller.peer.empty()) absl::StrAppend(&line, " peer=", quoted(caller.peer));
  if (!outcome.ok()) absl::StrAppend(&line, " error=", quoted(outcome.message()));
  if (!detail.empty()) absl::StrAppend(&line, " detail=", quoted(detail));
  logger_->log(level, "{}", line);
}

}  // namespace rescale::server
