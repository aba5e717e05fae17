// Events for applied changes: their body, the per-job rate limit and the
// recorder thread that POSTs them (see client/adapter/job_events.h).
#include "client/adapter/job_events.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace rescale::adapter {

using json = nlohmann::json;

const char* EventReason(JobChange change) {
  switch (change) {
    case JobChange::kRescaled:
      return "Rescaled";
    case JobChange::kSuspended:
      return "Suspended";
    case JobChange::kResumed:
      return "Resumed";
    case JobChange::kMoved:
      return "Moved";
    case JobChange::kWaitingForKueue:
      return "WaitingForKueue";
  }
  return "Rescaled";
}

const char* EventAction(JobChange change) {
  switch (change) {
    case JobChange::kRescaled:
      return "Rescale";
    case JobChange::kSuspended:
      return "Suspend";
    case JobChange::kResumed:
      return "Resume";
    case JobChange::kMoved:
      return "Move";
    case JobChange::kWaitingForKueue:
      return "Wait";
  }
  return "Rescale";
}

std::string MicroTime(absl::Time time) {
  return absl::FormatTime("%Y-%m-%d%ET%H:%M:%E6SZ", time, absl::UTCTimeZone());
}

json JobEventBody(const JobInfo& job, const std::string& resource_version, JobChange change,
                  const std::string& note, absl::Time at, const std::string& reporting_instance) {
  json regarding = {{"apiVersion", absl::StrCat(job.api.group, "/", job.api.version)},
                    {"kind", job.kind},
                    {"namespace", job.ns},
                    {"name", job.name}};
  if (!job.uid.empty()) regarding["uid"] = job.uid;
  if (!resource_version.empty()) regarding["resourceVersion"] = resource_version;
  const std::string instance = SanitizeText(
      reporting_instance.empty() ? "rescale-adapter" : reporting_instance, kMaxEventFieldLength);
  return {{"apiVersion", kEventsApiVersion},
          {"kind", "Event"},
          // The server appends five random characters; client-go names
          // Events "<object>.<suffix>" too.
          {"metadata", {{"generateName", job.name + "."}, {"namespace", job.ns}}},
          {"eventTime", MicroTime(at)},
          {"reportingController", kReportingController},
          {"reportingInstance", instance},
          {"action", EventAction(change)},
          {"reason", EventReason(change)},
          {"note", SanitizeText(note, kMaxEventNoteBytes)},
          {"type", "Normal"},
          {"regarding", regarding}};
}

bool EventRateLimiter::Allow(const std::string& key, absl::Time now) {
  if (burst_ <= 0) return false;
  auto [it, inserted] = next_free_.try_emplace(key, now);
  const absl::Time next = std::max(it->second, now) + interval_;
  if (next - now > burst_ * interval_) return false;
  it->second = next;
  return true;
}

JobEventRecorder::JobEventRecorder(JobEventOptions options, KubeClient* kube,
                                   OutcomeCallback on_outcome)
    : options_(std::move(options)),
      kube_(kube),
      clock_(options_.clock != nullptr ? options_.clock : Clock::Real()),
      on_outcome_(std::move(on_outcome)),
      limiter_(options_.burst, options_.interval) {}

JobEventRecorder::~JobEventRecorder() { Stop(); }

void JobEventRecorder::Start() {
  thread_ = std::thread([this] { Run(); });
}

void JobEventRecorder::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
  absl::MutexLock lock(&mu_);
  if (!queue_.empty()) spdlog::debug("{} Kubernetes Events not sent: stopping", queue_.size());
  queue_.clear();
}

void JobEventRecorder::Record(const JobInfo& job, const std::string& resource_version,
                              JobChange change, const std::string& note) {
  const absl::Time now = clock_->Now();
  Pending pending{
      job.id, ResourcePath({"events.k8s.io", "v1"}, "events", job.ns), EventReason(change),
      JobEventBody(job, resource_version, change, note, now, options_.reporting_instance)};
  std::optional<Outcome> refused;
  {
    absl::MutexLock lock(&mu_);
    if (!limiter_.Allow(job.id, now)) {
      refused = Outcome::kRateLimited;
    } else if (queue_.size() >= options_.max_queued || stopping_) {
      refused = Outcome::kDropped;
    } else {
      queue_.push_back(std::move(pending));
    }
  }
  if (refused) {
    spdlog::debug("{}: Event {} not recorded: {}", job.id, EventReason(change),
                  *refused == Outcome::kRateLimited ? "rate limited" : "queue full");
    if (on_outcome_) on_outcome_(*refused, job.id, EventReason(change));
  }
}

void JobEventRecorder::Forget(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  limiter_.Forget(job_id);
}

void JobEventRecorder::Run() {
  for (;;) {
    Pending pending;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &JobEventRecorder::HasWorkOrStopping));
      if (stopping_) return;
      pending = std::move(queue_.front());
      queue_.pop_front();
    }
    absl::StatusOr<json> created = kube_->Post(pending.path, pending.body);
    if (created.ok()) {
      if (on_outcome_) on_outcome_(Outcome::kRecorded, pending.job_id, pending.reason);
    } else {
      // Best-effort: the change itself was applied; only its Event is lost.
      spdlog::warn("{}: Event {} not recorded: {}", pending.job_id, pending.reason,
                   created.status().ToString());
      if (on_outcome_)
        on_outcome_(Outcome::kFailed, pending.job_id, std::string(created.status().message()));
    }
  }
}

}  // namespace rescale::adapter
