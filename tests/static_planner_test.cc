// Tests of rescale::StaticPlanner (the static-min and static-max baselines)
// and InterpolateThroughput. Covers unbounded capacity, gang all-or-nothing
// admission at min_replicas in priority order, queue positions and the
// waiting reason, tie-breaking (running before waiting at equal priority),
// preemption of lower-priority preemptible jobs only, jobs larger than the
// cluster, static-max growth into leftover GPUs, and the invariant that a
// job gets 0 replicas or a count within [min_replicas, max_replicas].
#include "rescale/planner.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace rescale {
namespace {

using Catch::Matchers::Contains;

const absl::Time kT0 = absl::FromUnixSeconds(1'700'000'000);

PlanJob Job(const std::string& id, uint32_t min, uint32_t max, uint32_t gpus_per_replica = 1,
            int32_t priority = 0, const std::string& policy = "static-min") {
  PlanJob job;
  job.spec.job_id = id;
  job.spec.min_replicas = min;
  job.spec.max_replicas = max;
  job.spec.gpus_per_replica = gpus_per_replica;
  job.spec.priority = priority;
  job.spec.policy = policy;
  job.status.registered_at = kT0;
  return job;
}

PlanJob Running(PlanJob job, uint32_t replicas) {
  job.status.current_replicas = replicas;
  job.status.suspended = false;
  return job;
}

PlanInput Input(std::vector<PlanJob> jobs, std::optional<uint32_t> capacity) {
  PlanInput input;
  input.jobs = std::move(jobs);
  input.capacity_gpus = capacity;
  input.now = kT0 + absl::Hours(1);
  return input;
}

std::vector<PlanDecision> Plan(const PlanInput& input) {
  StaticPlanner planner;
  std::vector<PlanDecision> out = planner.Plan(input);
  REQUIRE(out.size() == input.jobs.size());
  for (size_t i = 0; i < out.size(); ++i) REQUIRE(out[i].job_id == input.jobs[i].spec.job_id);
  return out;
}

TEST_CASE("static planner is named static and exposes both policy names") {
  StaticPlanner planner;
  CHECK(planner.name() == "static");
  CHECK(StaticPlanner::kMinPolicy == "static-min");
  CHECK(StaticPlanner::kMaxPolicy == "static-max");
}

TEST_CASE("unbounded capacity runs static-min jobs at min and static-max jobs at max") {
  std::vector<PlanDecision> out =
      Plan(Input({Job("ns/a", 2, 8, 4), Job("ns/b", 3, 6, 2, 0, "static-max"),
                  Job("ns/c", 1, 1, 1, 0, "static-max")},
                 std::nullopt));
  CHECK(out[0].replicas == 2);
  CHECK(out[0].binding == BindingConstraint::kMinReplicas);
  CHECK(out[0].queue_position == 0);
  CHECK(out[0].reason == "static-min runs the job at min_replicas=2 (8 GPUs)");
  CHECK(out[1].replicas == 6);
  CHECK(out[1].binding == BindingConstraint::kMaxReplicas);
  CHECK(out[1].reason == "static-max runs the job at max_replicas=6");
  CHECK(out[2].replicas == 1);
  CHECK(out[2].binding == BindingConstraint::kMaxReplicas);
}

TEST_CASE("admission is gang all-or-nothing at min_replicas in priority order") {
  // 10 GPUs: high (6) fits, mid (6) does not fit whole and gets nothing,
  // low (4) fits into what is left.
  std::vector<PlanDecision> out =
      Plan(Input({Job("ns/low", 4, 4, 1, 1), Job("ns/mid", 3, 3, 2, 5), Job("ns/high", 6, 6, 1, 9)},
                 10));
  CHECK(out[2].replicas == 6);
  CHECK(out[2].queue_position == 0);
  CHECK(out[1].replicas == 0);
  CHECK(out[1].queue_position == 1);
  CHECK(out[1].binding == BindingConstraint::kCapacity);
  CHECK(out[0].replicas == 4);
  CHECK(out[0].queue_position == 0);
}

TEST_CASE("waiting jobs get queue positions 1, 2, ... in admission order") {
  std::vector<PlanDecision> out = Plan(Input(
      {Job("ns/w-low", 4, 4, 1, 1), Job("ns/run", 4, 4, 1, 10), Job("ns/w-high", 4, 4, 1, 5),
       Job("ns/w-mid", 4, 4, 1, 3)},
      4));
  CHECK(out[1].replicas == 4);
  CHECK(out[1].queue_position == 0);
  CHECK(out[2].queue_position == 1);
  CHECK(out[3].queue_position == 2);
  CHECK(out[0].queue_position == 3);
  for (int i : {0, 2, 3}) CHECK(out[i].replicas == 0);
}

TEST_CASE("a waiting job's reason states the GPUs needed, free and held") {
  // 16 GPUs: "ns/first" (priority 10) takes 3 x 4 = 12, "ns/second" needs
  // 4 x 4 = 16 with 4 free.
  std::vector<PlanDecision> out =
      Plan(Input({Job("ns/second", 4, 4, 4, 5), Job("ns/first", 3, 3, 4, 10)}, 16));
  CHECK(out[1].replicas == 3);
  CHECK(out[0].replicas == 0);
  CHECK(out[0].queue_position == 1);
  CHECK(out[0].binding == BindingConstraint::kCapacity);
  CHECK(out[0].reason == "needs 16 GPUs; 4 free; 12 held by jobs of higher or equal priority");
}

TEST_CASE("at equal priority a running job keeps its place over an older waiting job") {
  PlanJob waiting = Job("ns/a-waiting", 4, 4);
  waiting.status.registered_at = kT0;
  PlanJob running = Running(Job("ns/b-running", 4, 4), 4);
  running.status.registered_at = kT0 + absl::Minutes(5);
  std::vector<PlanDecision> out = Plan(Input({waiting, running}, 4));
  CHECK(out[1].replicas == 4);
  CHECK(out[0].replicas == 0);
  CHECK(out[0].queue_position == 1);
  CHECK(out[0].binding == BindingConstraint::kCapacity);
}

TEST_CASE("at equal priority and state the older registration is admitted first") {
  PlanJob young = Job("ns/a", 4, 4);
  young.status.registered_at = kT0 + absl::Minutes(1);
  PlanJob old = Job("ns/b", 4, 4);
  old.status.registered_at = kT0;
  std::vector<PlanDecision> out = Plan(Input({young, old}, 4));
  CHECK(out[1].replicas == 4);
  CHECK(out[0].replicas == 0);

  // Same registration time: job_id breaks the tie.
  young.status.registered_at = kT0;
  out = Plan(Input({old, young}, 4));
  CHECK(out[1].replicas == 4);  // "ns/a"
  CHECK(out[0].replicas == 0);  // "ns/b"
}

TEST_CASE("a higher-priority waiting job preempts a lower-priority running preemptible job") {
  PlanJob low = Running(Job("ns/low", 4, 4, 1, /*priority=*/1), 4);
  low.spec.preemptible = true;
  PlanJob high = Job("ns/high", 4, 4, 1, /*priority=*/9);
  std::vector<PlanDecision> out = Plan(Input({low, high}, 4));
  CHECK(out[1].replicas == 4);
  CHECK(out[1].queue_position == 0);
  CHECK(out[0].replicas == 0);
  CHECK(out[0].queue_position == 1);
  CHECK(out[0].binding == BindingConstraint::kPreempted);
  CHECK(out[0].reason == "needs 4 GPUs; 0 free; 4 held by jobs of higher or equal priority");
}

TEST_CASE("a running non-preemptible low-priority job is not displaced") {
  PlanJob low = Running(Job("ns/low", 4, 4, 1, /*priority=*/1), 4);
  low.spec.preemptible = false;
  PlanJob high = Job("ns/high", 4, 4, 1, /*priority=*/9);
  std::vector<PlanDecision> out = Plan(Input({low, high}, 4));
  CHECK(out[0].replicas == 4);
  CHECK(out[0].queue_position == 0);
  CHECK(out[1].replicas == 0);
  CHECK(out[1].queue_position == 1);
  CHECK(out[1].binding == BindingConstraint::kCapacity);
}

TEST_CASE("a suspended low-priority job does not count as running") {
  PlanJob low = Running(Job("ns/low", 4, 4, 1, 1), 4);
  low.spec.preemptible = false;
  low.status.suspended = true;
  PlanJob high = Job("ns/high", 4, 4, 1, 9);
  std::vector<PlanDecision> out = Plan(Input({low, high}, 4));
  CHECK(out[1].replicas == 4);
  CHECK(out[0].replicas == 0);
  CHECK(out[0].binding == BindingConstraint::kCapacity);
}

TEST_CASE("a job bigger than the cluster waits with a reason naming the cluster size") {
  std::vector<PlanDecision> out = Plan(Input({Job("ns/huge", 5, 5, 8), Job("ns/small", 1, 1)}, 32));
  CHECK(out[0].replicas == 0);
  CHECK(out[0].queue_position == 1);
  CHECK(out[0].binding == BindingConstraint::kCapacity);
  CHECK(out[0].reason == "needs 40 GPUs for min_replicas=5; the cluster has only 32");
  CHECK(out[1].replicas == 1);
}

TEST_CASE("zero capacity makes every job wait") {
  std::vector<PlanDecision> out = Plan(Input({Job("ns/a", 1, 2), Job("ns/b", 1, 2)}, 0));
  CHECK(out[0].replicas == 0);
  CHECK(out[1].replicas == 0);
  CHECK(out[0].queue_position == 1);
  CHECK(out[1].queue_position == 2);
  CHECK_THAT(out[0].reason, Contains("the cluster has only 0"));
}

TEST_CASE("static-max grows with leftover capacity in whole replicas of gpus_per_replica") {
  // 10 GPUs, 3 per replica: min 1 (3 GPUs), then 2 more fit (6 GPUs), 1 left.
  std::vector<PlanDecision> out = Plan(Input({Job("ns/a", 1, 8, 3, 0, "static-max")}, 10));
  CHECK(out[0].replicas == 3);
  CHECK(out[0].binding == BindingConstraint::kCapacity);
  CHECK(out[0].reason ==
        "capacity limits the job to 3 of the 8 replicas its policy wants; 1 GPUs free, 3 per "
        "replica");
}

TEST_CASE("static-max growth comes after every job's admission and in priority order") {
  // 12 GPUs: all three admitted at min (2 + 2 + 2 = 6); the higher-priority
  // static-max job grows first to its max (4 more), the lower-priority one
  // gets the 2 GPUs left (2 more of the 8 it wants).
  std::vector<PlanDecision> out =
      Plan(Input({Job("ns/lo", 2, 10, 1, 1, "static-max"), Job("ns/hi", 2, 6, 1, 5, "static-max"),
                  Job("ns/min", 2, 10, 1, 3, "static-min")},
                 12));
  CHECK(out[1].replicas == 6);
  CHECK(out[1].binding == BindingConstraint::kMaxReplicas);
  CHECK(out[2].replicas == 2);  // static-min never grows
  CHECK(out[0].replicas == 4);
  CHECK(out[0].binding == BindingConstraint::kCapacity);
}

TEST_CASE("static planner predicts throughput from the job's curve at the chosen size") {
  PlanJob job = Job("ns/a", 2, 4, 1, 0, "static-max");
  job.curve = {{1, 100, 0, true, 5}, {2, 180, 0, true, 5}};
  PlanJob waiting = Job("ns/b", 8, 8);
  waiting.curve = {{1, 50, 0, true, 1}};
  std::vector<PlanDecision> out = Plan(Input({job, waiting}, 6));
  CHECK(out[0].replicas == 4);
  CHECK(out[0].predicted_samples_per_second == Approx(360));  // 180 * 4 / 2
  CHECK(out[1].replicas == 0);
  CHECK(out[1].predicted_samples_per_second == 0);
}

TEST_CASE("static planner always gives 0 replicas or a count within [min, max]") {
  std::mt19937 rng(12345);
  auto uniform = [&rng](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  StaticPlanner planner;
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<PlanJob> jobs;
    const int n = uniform(1, 8);
    for (int j = 0; j < n; ++j) {
      const uint32_t min = uniform(1, 6);
      const uint32_t max = min + uniform(0, 6);
      PlanJob job = Job("ns/j" + std::to_string(j), min, max, uniform(1, 4), uniform(0, 3),
                        uniform(0, 1) ? "static-max" : "static-min");
      job.spec.preemptible = uniform(0, 1) == 1;
      job.status.registered_at = kT0 + absl::Seconds(uniform(0, 5));
      if (uniform(0, 1)) job.status.current_replicas = uniform(min, max);
      jobs.push_back(job);
    }
    std::optional<uint32_t> capacity;
    if (uniform(0, 4) != 0) capacity = uniform(0, 60);
    PlanInput input = Input(jobs, capacity);
    std::vector<PlanDecision> out = planner.Plan(input);
    REQUIRE(out.size() == jobs.size());
    uint64_t used = 0;
    uint32_t waiting = 0;
    std::vector<uint32_t> positions;
    for (size_t j = 0; j < out.size(); ++j) {
      CAPTURE(trial, j);
      const JobSpec& spec = jobs[j].spec;
      if (out[j].replicas == 0) {
        ++waiting;
        positions.push_back(out[j].queue_position);
      } else {
        CHECK(out[j].replicas >= spec.min_replicas);
        CHECK(out[j].replicas <= spec.max_replicas);
        CHECK(out[j].queue_position == 0);
        if (spec.policy == "static-min") CHECK(out[j].replicas == spec.min_replicas);
      }
      used += uint64_t{out[j].replicas} * spec.gpus_per_replica;
    }
    if (capacity) CHECK(used <= *capacity);
    // Queue positions are exactly 1..waiting.
    std::sort(positions.begin(), positions.end());
    for (uint32_t k = 0; k < waiting; ++k) CHECK(positions[k] == k + 1);
  }
}

TEST_CASE("InterpolateThroughput reads the curve linearly and extrapolates proportionally") {
  const std::vector<CurvePoint> curve = {
      {2, 200, 0, true, 1}, {4, 360, 0, true, 1}, {8, 560, 0, true, 1}};
  CHECK(InterpolateThroughput({}, 4) == 0);
  CHECK(InterpolateThroughput(curve, 0) == 0);
  CHECK(InterpolateThroughput(curve, 1) == Approx(100));   // 200 * 1/2
  CHECK(InterpolateThroughput(curve, 2) == Approx(200));
  CHECK(InterpolateThroughput(curve, 3) == Approx(280));   // halfway 200..360
  CHECK(InterpolateThroughput(curve, 4) == Approx(360));
  CHECK(InterpolateThroughput(curve, 6) == Approx(460));   // halfway 360..560
  CHECK(InterpolateThroughput(curve, 8) == Approx(560));
  CHECK(InterpolateThroughput(curve, 16) == Approx(1120));  // 560 * 16/8
  const std::vector<CurvePoint> single = {{4, 400, 0, true, 1}};
  CHECK(InterpolateThroughput(single, 2) == Approx(200));
  CHECK(InterpolateThroughput(single, 6) == Approx(600));
}

}  // namespace
}  // namespace rescale
