// Logging setup shared by Rescale's binaries (rescaled, rescale-adapter):
// one spdlog logger on stderr, as text or as one JSON object per line.
#ifndef RESCALE_LOGGING_H_
#define RESCALE_LOGGING_H_

#include <string>

#include "absl/status/status.h"

namespace rescale {

// Makes a stderr logger named `program` the default. `format` is "text" or
// "json"; `level` is an spdlog level name (trace, debug, info, warn, error,
// critical, off). INVALID_ARGUMENT naming the bad value otherwise; nothing
// changes then.
absl::Status ConfigureLogging(const std::string& program, const std::string& format,
                              const std::string& level);

}  // namespace rescale

#endif  // RESCALE_LOGGING_H_
