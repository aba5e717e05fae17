// Logging setup shared by Rescale's binaries (rescaled, rescale-adapter):
// one spdlog logger on stderr, as text or as one JSON object per line.
//
// In JSON format every line is a valid JSON object whatever the message
// holds: quotes, backslashes, newlines and control characters are escaped,
// and bytes that are not UTF-8 become U+FFFD, so log pipelines (Loki, Fluent
// Bit, Cloud Logging) never drop or split a line.
#ifndef RESCALE_LOGGING_H_
#define RESCALE_LOGGING_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "spdlog/logger.h"

namespace rescale {

// A logger named `program` writing to `sink`. `format` is "text" or "json";
// `level` is an spdlog level name (trace, debug, info, warn, error,
// critical, off). INVALID_ARGUMENT naming the bad value otherwise.
absl::StatusOr<std::shared_ptr<spdlog::logger>> MakeLogger(const std::string& program,
                                                           const std::string& format,
                                                           const std::string& level,
                                                           spdlog::sink_ptr sink);

// Makes a stderr logger (MakeLogger) the default. On error nothing changes.
absl::Status ConfigureLogging(const std::string& program, const std::string& format,
                              const std::string& level);

}  // namespace rescale

#endif  // RESCALE_LOGGING_H_
