// The per-job rules every part of Rescale must agree on, each in one place:
// what "running" means, namespace filtering, observed throughput, how far a
// job may explore beyond its measurements, and whether a restart pays for
// itself. The engine, the policies, the planner, the simulator and the
// adapter call these instead of restating them, so they cannot drift apart.
//
// All functions are pure and thread-safe.
#ifndef RESCALE_JOB_RULES_H_
#define RESCALE_JOB_RULES_H_

#include <cstdint>
#include <optional>
#include <string_view>

#include "absl/time/time.h"
#include "rescale/types.h"

namespace rescale {

// A job runs when the cluster applied at least one replica and did not
// suspend it. A suspended job keeps its last replica count for resuming.
bool IsRunning(const JobStatus& status);
// Replicas that hold GPUs now: the current count while running, else 0.
uint32_t RunningReplicas(const JobStatus& status);

// True when `job_id` ("namespace/name") is in `namespace_filter`; an empty
// filter matches every job. The namespace is JobNamespace's (rescale/types.h):
// an id without '/' is its own namespace, never "".
bool InNamespace(std::string_view job_id, std::string_view namespace_filter);

// What a job is doing, from its current recommendation and the status the
// cluster last applied (the one rule for rescalectl's STATE column and the
// rescale_jobs gauge):
//   kPending    no recommendation yet (never planned)
//   kStarting   the plan gives it replicas; none run yet (or it is suspended)
//   kRunning    the plan gives it replicas and some run
//   kSuspended  the plan gives it none and the cluster suspended it
//   kWaiting    the plan gives it none and it is not suspended (queued, or
//               still running until the cluster applies the stop)
// The rescale_jobs gauge groups these with GaugeStateOf.
enum class JobState { kPending, kStarting, kRunning, kSuspended, kWaiting };
// `recommended_replicas`: what the job's recommendation gives it, 0 when it
// suspends it or gives it nothing; nullopt when the job has none.
JobState JobStateOf(const JobStatus& status, std::optional<uint32_t> recommended_replicas);
// "Pending", "Starting", "Running", "Suspended", "Waiting".
std::string_view JobStateName(JobState state);

// The rescale_jobs gauge's states: running = kStarting + kRunning (the plan
// gives it GPUs); otherwise suspended when it ran before (preempted or
// suspended since, whether or not the cluster applied the stop yet), and
// waiting when it never ran (queued, or not planned yet). `ran_before` is
// what only the engine knows (it started running at some point).
enum class JobGaugeState { kRunning, kWaiting, kSuspended };
JobGaugeState GaugeStateOf(JobState state, bool ran_before);

// Whole-job samples/s measured at `replicas` workers that each process
// `mean_local_batch` samples per step of `step_seconds`. 0 when the step time
// is not positive (nothing measured).
double ObservedSamplesPerSecond(uint32_t replicas, double mean_local_batch, double step_seconds);

// The largest size a job's evidence lets it take: the larger of twice the
// largest size measured with enough samples (`largest_trusted`, 0 = none;
// samples that aged out of the window still count) and the largest size of
// its prior (LargestPriorSize), never below min_replicas nor the size it runs
// at (`running_replicas`), never above max_replicas. Priors count like
// measurements: the job may go anywhere in its prior's range at once. Twice,
// beyond a measured size, because that is how far the throughput model's
// extrapolation is validated (its band covers the actual error at 2x the
// largest fitted size in all six Pollux apps, at 4x in five of six; see
// src/throughput_model.cc). Without any evidence this is min_replicas. The
// per-job policies (kubedl, hpa, efficiency) explore within it; the planner
// policy does not: its planner values every size by expected throughput
// (see rescale/policy.h).
uint32_t ExplorationCap(const JobSpec& spec, uint32_t largest_trusted, uint32_t running_replicas);

// The largest replica count among the job's usable prior points (a positive,
// finite samples/s), 0 when it has none. Points a measurement contradicts
// count (see job_rules.cc).
uint32_t LargestPriorSize(const JobSpec& spec);

// A planner job that keeps changing size waits longer before the next
// change: the cooldown doubles for each change beyond the first within the
// last kCooldownMemory cooldowns, at most kMaxCooldownDoublings times. A job
// resized once waits the plain cooldown; one that flaps (given GPUs, then
// losing them to a short job, then getting them back) settles, since each
// change costs it a restart.
inline constexpr int kCooldownMemory = 10;
inline constexpr int kMaxCooldownDoublings = 2;
absl::Duration BackedOffCooldown(absl::Duration cooldown, int recent_changes);

// The smallest share of a resized job's throughput still counted over the
// horizon, so a huge restart cost makes a resize nearly worthless rather than
// negative (which would break the planner's concave utilities).
inline constexpr double kMinRestartFactor = 0.01;

// Share of the planning horizon a resized job still makes progress in:
// 1 - restart_cost/horizon, clamped to [kMinRestartFactor, 1]. A horizon
// that is not positive leaves no time to recoup a restart; a negative
// restart cost counts as 0.
double RestartFactor(double restart_cost_seconds, double horizon_seconds);

// Whether resizing from `rate_now` to `rate_new` samples/s repays the restart
// over the horizon: the work done at the new size in (horizon - restart)
// beats the work at the current size in the whole horizon. Unlike
// RestartFactor this has no floor: a restart as long as the horizon (or a
// horizon that is not positive) never pays off, whatever the speedup. A
// negative restart cost counts as 0. The planner weighs the same restart on
// any resize through its utility, with RestartFactor (see cluster_planner.h).
bool RestartPaysOff(double rate_now, double rate_new, double restart_cost_seconds,
                    double horizon_seconds);

}  // namespace rescale

#endif  // RESCALE_JOB_RULES_H_
