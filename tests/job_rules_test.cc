// Tests of the shared per-job rules (rescale/job_rules.h), tag [rules]: what
// running means, namespace filtering, observed throughput, the exploration
// cap (including the cases where the two formulas it replaced, the policies'
// guard and the planner policy's cap, agreed), the restart factor and when a
// restart pays off.
#include "rescale/job_rules.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <limits>
#include <optional>

namespace rescale {
namespace {

JobSpec Spec(uint32_t min, uint32_t max) {
  JobSpec spec;
  spec.job_id = "ns/job";
  spec.min_replicas = min;
  spec.max_replicas = max;
  return spec;
}

JobStatus Status(uint32_t replicas, bool suspended = false) {
  JobStatus status;
  status.current_replicas = replicas;
  status.suspended = suspended;
  return status;
}

TEST_CASE("a job runs when it has replicas and is not suspended", "[rules]") {
  CHECK_FALSE(IsRunning(Status(0)));
  CHECK(RunningReplicas(Status(0)) == 0);
  CHECK(IsRunning(Status(3)));
  CHECK(RunningReplicas(Status(3)) == 3);
  // A suspended job keeps its count for resuming but holds no GPUs.
  CHECK_FALSE(IsRunning(Status(3, /*suspended=*/true)));
  CHECK(RunningReplicas(Status(3, /*suspended=*/true)) == 0);
}

TEST_CASE("namespace filters match the part before the slash, empty matches all", "[rules]") {
  CHECK(InNamespace("team-a/bert", ""));
  CHECK(InNamespace("no-namespace", ""));
  CHECK(InNamespace("team-a/bert", "team-a"));
  CHECK_FALSE(InNamespace("team-a/bert", "team-b"));
  CHECK_FALSE(InNamespace("team-ab/bert", "team-a"));  // whole segment, not a prefix
  // An id without '/' is its own namespace (JobNamespace), as authorisation
  // sees it: only a filter of that name, or none, shows it.
  CHECK(InNamespace("no-namespace", "no-namespace"));
  CHECK_FALSE(InNamespace("no-namespace", "team-a"));
}

TEST_CASE("a job's state follows from its recommendation and its applied status", "[rules]") {
  const auto state = [](uint32_t current, bool suspended, std::optional<uint32_t> recommended) {
    return JobStateOf(Status(current, suspended), recommended);
  };
  CHECK(state(0, false, std::nullopt) == JobState::kPending);
  CHECK(state(4, true, std::nullopt) == JobState::kPending);  // not planned since restored
  CHECK(state(4, false, 4) == JobState::kRunning);
  CHECK(state(2, false, 4) == JobState::kRunning);  // resizing, but running
  CHECK(state(0, false, 4) == JobState::kStarting);
  CHECK(state(4, true, 4) == JobState::kStarting);  // resuming: a suspended job runs nothing
  CHECK(state(4, true, 0) == JobState::kSuspended);
  CHECK(state(0, false, 0) == JobState::kWaiting);
  CHECK(state(4, false, 0) == JobState::kWaiting);  // told to stop, not stopped yet
  CHECK(JobStateName(JobState::kPending) == "Pending");
  CHECK(JobStateName(JobState::kStarting) == "Starting");
  CHECK(JobStateName(JobState::kRunning) == "Running");
  CHECK(JobStateName(JobState::kSuspended) == "Suspended");
  CHECK(JobStateName(JobState::kWaiting) == "Waiting");
}

TEST_CASE("observed samples/s is replicas x local batch / step time, 0 without a step", "[rules]") {
  CHECK(ObservedSamplesPerSecond(4, 32, 0.5) == Approx(256));
  CHECK(ObservedSamplesPerSecond(1, 10, 2) == Approx(5));
  CHECK(ObservedSamplesPerSecond(4, 32, 0) == 0);
  CHECK(ObservedSamplesPerSecond(4, 32, -1) == 0);
}

TEST_CASE("exploration cap: 2x the largest trusted size within [min, max], never below current",
          "[rules]") {
  // A running job at its largest trusted size may go to twice it.
  CHECK(ExplorationCap(Spec(1, 64), 4, 4) == 8);
  // No trusted data: it starts at min_replicas (not running) or stays put.
  CHECK(ExplorationCap(Spec(2, 64), 0, 0) == 2);
  CHECK(ExplorationCap(Spec(2, 64), 0, 3) == 3);
  // Never above max_replicas, never below min_replicas or the current size.
  CHECK(ExplorationCap(Spec(1, 6), 4, 4) == 6);
  CHECK(ExplorationCap(Spec(16, 64), 2, 0) == 16);
  CHECK(ExplorationCap(Spec(1, 64), 4, 12) == 12);
  CHECK(ExplorationCap(Spec(1, 64), 4, 200) == 64);
  // 2 x largest does not overflow 32 bits.
  const uint32_t huge = std::numeric_limits<uint32_t>::max();
  CHECK(ExplorationCap(Spec(1, huge), huge, 0) == huge);
}

TEST_CASE("exploration cap: a prior counts like a measured size, up to its largest point",
          "[rules]") {
  JobSpec spec = Spec(1, 64);
  spec.prior = {{.replicas = 2, .samples_per_second = 200},
                {.replicas = 16, .samples_per_second = 1600}};
  CHECK(LargestPriorSize(spec) == 16);
  // Without measurements the job may go anywhere in the prior's range at once.
  CHECK(ExplorationCap(spec, 0, 0) == 16);
  // Whichever reaches further: the prior, or 2x the largest measured size.
  CHECK(ExplorationCap(spec, 4, 4) == 16);
  CHECK(ExplorationCap(spec, 12, 12) == 24);
  // Still within [min, max].
  spec.max_replicas = 8;
  CHECK(ExplorationCap(spec, 0, 0) == 8);
  // A point the model ignores (no positive, finite rate) is no evidence.
  JobSpec unusable = Spec(1, 64);
  unusable.prior = {
      {.replicas = 32, .samples_per_second = 0},
      {.replicas = 48, .samples_per_second = std::numeric_limits<double>::quiet_NaN()}};
  CHECK(LargestPriorSize(unusable) == 0);
  CHECK(ExplorationCap(unusable, 0, 0) == 1);
}

TEST_CASE("exploration cap agrees with both formulas it replaced where they agreed", "[rules]") {
  // The guard of kubedl/hpa/efficiency capped a running job at
  // min(max(min, 2 max(largest, 1)), max); the planner policy at
  // clamp(max(current, 2 largest), min, max) when running and
  // clamp(2 largest, min, max) when not. Running at its largest trusted size
  // (the only state in which the guard ran: a policy decides only once the
  // current size is trusted) and not running with data, all three agree.
  for (uint32_t min = 0; min <= 6; ++min) {
    for (uint32_t max = std::max(min, 1u); max <= 12; ++max) {
      const JobSpec spec = Spec(min, max);
      for (uint32_t largest = 1; largest <= 8; ++largest) {
        INFO("min " << min << " max " << max << " largest " << largest);
        const uint32_t guard = std::min(std::max(min, 2 * largest), max);
        const uint32_t planner_running = std::clamp(std::max(largest, 2 * largest), min, max);
        const uint32_t planner_waiting = std::clamp(2 * largest, min, max);
        REQUIRE(guard == planner_running);
        CHECK(ExplorationCap(spec, largest, largest) == guard);
        CHECK(ExplorationCap(spec, largest, 0) == planner_waiting);
      }
    }
  }
}

TEST_CASE("restart factor is 1 - cost/horizon, floored at kMinRestartFactor", "[rules]") {
  CHECK(RestartFactor(30, 600) == Approx(0.95));
  CHECK(RestartFactor(0, 600) == 1);
  CHECK(RestartFactor(-30, 600) == 1);  // a negative cost counts as 0
  CHECK(RestartFactor(600, 600) == kMinRestartFactor);
  CHECK(RestartFactor(6000, 600) == kMinRestartFactor);
  CHECK(RestartFactor(30, 0) == kMinRestartFactor);  // no time to recoup anything
  CHECK(RestartFactor(30, -1) == kMinRestartFactor);
}

TEST_CASE("a restart pays off when the new rate over horizon - restart beats the old rate",
          "[rules]") {
  // 110 x 570 = 62700 > 100 x 600; 104 x 570 = 59280 < 60000.
  CHECK(RestartPaysOff(100, 110, 30, 600));
  CHECK_FALSE(RestartPaysOff(100, 104, 30, 600));
  // Exactly repaying is not enough: 120 x 500 = 100 x 600.
  CHECK_FALSE(RestartPaysOff(100, 120, 100, 600));
  // A free restart pays off for any gain, never for none.
  CHECK(RestartPaysOff(100, 100.5, 0, 600));
  CHECK_FALSE(RestartPaysOff(100, 100, 0, 600));
  // A negative cost counts as 0, so equal rates still do not pay off.
  CHECK_FALSE(RestartPaysOff(100, 100, -60, 600));
  // A restart as long as the horizon never pays off, whatever the speedup
  // (RestartFactor's floor is for the planner's utilities, not for this).
  CHECK_FALSE(RestartPaysOff(1, 1e6, 600, 600));
  CHECK_FALSE(RestartPaysOff(1, 1e6, 30, 0));
}

TEST_CASE("below the floor, RestartPaysOff is rate_new x RestartFactor > rate_now", "[rules]") {
  for (double cost : {0.0, 10.0, 30.0, 120.0, 300.0, 590.0}) {
    for (double gain : {0.5, 0.9, 1.0, 1.01, 1.1, 2.0, 10.0}) {
      INFO("cost " << cost << " gain " << gain);
      const double now = 100, next = 100 * gain;
      CHECK(RestartPaysOff(now, next, cost, 600) == (next * RestartFactor(cost, 600) > now));
    }
  }
}

TEST_CASE("the cooldown doubles for each recent change beyond the first, at most 4x", "[rules]") {
  const absl::Duration base = absl::Seconds(60);
  CHECK(BackedOffCooldown(base, 0) == base);
  CHECK(BackedOffCooldown(base, 1) == base);
  CHECK(BackedOffCooldown(base, 2) == 2 * base);
  CHECK(BackedOffCooldown(base, 3) == 4 * base);
  CHECK(BackedOffCooldown(base, 50) == 4 * base);
  CHECK(BackedOffCooldown(absl::ZeroDuration(), 5) == absl::ZeroDuration());
}

}  // namespace
}  // namespace rescale
