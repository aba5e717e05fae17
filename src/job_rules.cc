// The shared per-job rules (see rescale/job_rules.h).
#include "rescale/job_rules.h"

#include <algorithm>
#include <cmath>

namespace rescale {

bool IsRunning(const JobStatus& status) { return status.current_replicas > 0 && !status.suspended; }

uint32_t RunningReplicas(const JobStatus& status) {
  return IsRunning(status) ? status.current_replicas : 0;
}

bool InNamespace(std::string_view job_id, std::string_view namespace_filter) {
  return namespace_filter.empty() || JobNamespace(job_id) == namespace_filter;
}

JobState JobStateOf(const JobStatus& status, std::optional<uint32_t> recommended_replicas) {
  if (!recommended_replicas.has_value()) return JobState::kPending;
  if (*recommended_replicas > 0) {
    return RunningReplicas(status) > 0 ? JobState::kRunning : JobState::kStarting;
  }
  return status.suspended ? JobState::kSuspended : JobState::kWaiting;
}

JobGaugeState GaugeStateOf(JobState state, bool ran_before) {
  if (state == JobState::kStarting || state == JobState::kRunning) return JobGaugeState::kRunning;
  return ran_before ? JobGaugeState::kSuspended : JobGaugeState::kWaiting;
}

std::string_view JobStateName(JobState state) {
  switch (state) {
    case JobState::kPending:
      return "Pending";
    case JobState::kStarting:
      return "Starting";
    case JobState::kRunning:
      return "Running";
    case JobState::kSuspended:
      return "Suspended";
    case JobState::kWaiting:
      return "Waiting";
  }
  return "Unknown";
}

double ObservedSamplesPerSecond(uint32_t replicas, double mean_local_batch, double step_seconds) {
  return step_seconds > 0 ? replicas * mean_local_batch / step_seconds : 0;
}

uint32_t LargestPriorSize(const JobSpec& spec) {
  uint32_t largest = 0;
  for (const CurvePoint& p : spec.prior) {
    // A point the fit cannot use (no positive, finite rate) is no evidence.
    // One a measurement contradicts still opens the range: the fit drops it,
    // so the curve there follows the measurements and the planner goes
    // there only if they make it worthwhile.
    if (std::isfinite(p.samples_per_second) && p.samples_per_second > 0)
      largest = std::max(largest, p.replicas);
  }
  return largest;
}

uint32_t ExplorationCap(const JobSpec& spec, uint32_t largest_trusted, uint32_t running_replicas) {
  const uint64_t explored = largest_trusted == 0 ? 0 : 2 * uint64_t{largest_trusted};
  const uint64_t cap =
      std::max<uint64_t>({spec.min_replicas, running_replicas, explored, LargestPriorSize(spec)});
  return static_cast<uint32_t>(std::min<uint64_t>(cap, spec.max_replicas));
}

absl::Duration BackedOffCooldown(absl::Duration cooldown, int recent_changes) {
  return cooldown * (1 << std::clamp(recent_changes - 1, 0, kMaxCooldownDoublings));
}

double RestartFactor(double restart_cost_seconds, double horizon_seconds) {
  if (!(horizon_seconds > 0)) return kMinRestartFactor;
  const double cost = std::max(0.0, restart_cost_seconds);
  return std::clamp(1 - cost / horizon_seconds, kMinRestartFactor, 1.0);
}

bool RestartPaysOff(double rate_now, double rate_new, double restart_cost_seconds,
                    double horizon_seconds) {
  // Not rate_new * RestartFactor(...) > rate_now: the factor's floor exists to
  // keep the planner's utilities positive, and would let a 100x speedup
  // "repay" a restart longer than the horizon.
  if (!(horizon_seconds > 0)) return false;
  const double cost = std::max(0.0, restart_cost_seconds);
  return rate_new * std::max(0.0, horizon_seconds - cost) > rate_now * horizon_seconds;
}

}  // namespace rescale
