// The audit log: one line for every call that changes state (RegisterJob,
// UpdateJob, DeregisterJob, ReportApplied, SetCapacity) and for every call
// refused for its credentials, whatever the method: who (user, role), what
// (method, job), and how it ended (outcome, and the error's message).
//
// It goes to rescaled's log stream (stderr) as logger "audit", in the same
// format: with --log_format=json every field is a JSON member of its own,
// so a log pipeline can select and index them:
//   {"time":"…","level":"info","logger":"audit","user":"alice",
//    "role":"controller","method":"rescale.v1.JobService/RegisterJob",
//    "job":"team-a/bert","outcome":"OK"}
// Samples are not audited one by one (millions a second); a batch with
// samples refused for their namespace is.
#ifndef RESCALE_SERVER_AUDIT_H_
#define RESCALE_SERVER_AUDIT_H_

#include <spdlog/logger.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/auth.h"

namespace rescale::server {

class AuditLog {
 public:
  // `format` is "text" or "json" (--log_format); INVALID_ARGUMENT otherwise.
  static absl::StatusOr<std::unique_ptr<AuditLog>> Create(const std::string& format,
                                                          spdlog::sink_ptr sink);

  // `job` may be empty (SetCapacity). `detail` adds what the call did
  // beyond its outcome ("3 samples for namespace team-b refused").
  void Record(const Identity& caller, absl::string_view method, absl::string_view job,
              const absl::Status& outcome, absl::string_view detail = "");

 private:
  AuditLog(std::shared_ptr<spdlog::logger> logger, bool json)
      : logger_(std::move(logger)), json_(json) {}
  std::shared_ptr<spdlog::logger> logger_;
  const bool json_;
};

}  // namespace rescale::server

#endif  // RESCALE_SERVER_AUDIT_H_
