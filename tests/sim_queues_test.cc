// Tests of queues in the simulator (bench/sim/queue_report.h): the owner of
// a quota gets it back within one plan interval, jobs alternate between
// queues, and the per-queue results add up.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "bench/sim/queue_report.h"
#include "bench/sim/simulator.h"
#include "bench/sim/workload.h"

namespace rescale::sim {
namespace {

std::vector<QueueSpec> TwoTeams(uint64_t nominal) {
  return {{"team-a", nominal, "research", std::nullopt, std::nullopt, 1},
          {"team-b", nominal, "research", std::nullopt, std::nullopt, 1}};
}

SimulationResult Run(const std::string& jsonl, const std::vector<QueueSpec>& queues,
                     uint32_t capacity) {
  absl::StatusOr<Workload> workload = ParseWorkload(jsonl, "jsonl");
  REQUIRE(workload.ok());
  SimulationOptions options;
  options.policy = "planner";
  options.capacity_gpus = capacity;
  options.step_noise = 0;
  options.queues = queues;
  absl::StatusOr<SimulationResult> result = Simulate(*workload, options);
  INFO(result.status());
  REQUIRE(result.ok());
  return *std::move(result);
}

// GPUs of job `index` at time `t` (after the changes at t).
uint32_t GpusAt(const SimulationResult& r, uint32_t index, double t) {
  uint32_t gpus = 0;
  for (const AllocationChange& a : r.allocations) {
    if (a.job == index && a.time_seconds <= t) gpus = a.gpus;
  }
  return gpus;
}

TEST_CASE("a team borrows the idle quota and its owner has it back within one plan interval",
          "[sim][queues]") {
  // Jobs alternate: "a" goes to team-a, "b" to team-b. Both scale
  // perfectly to 16; the cluster has 16 GPUs, 8 per team.
  const std::string jsonl =
      R"({"id": "a", "arrival_seconds": 0, "profile": "linear", "samples": 3000000,)"
      R"( "min_replicas": 1, "max_replicas": 16, "restart_cost_seconds": 10})"
      "\n"
      R"({"id": "b", "arrival_seconds": 600, "profile": "linear", "samples": 1000000,)"
      R"( "min_replicas": 1, "max_replicas": 16, "restart_cost_seconds": 10})";
  const SimulationResult r = Run(jsonl, TwoTeams(8), 16);
  REQUIRE(r.jobs.size() == 2);
  CHECK(r.jobs[0].queue == "team-a");
  CHECK(r.jobs[1].queue == "team-b");
  // Alone, team-a's job takes all 16: 8 of them borrowed.
  CHECK(GpusAt(r, 0, 500) == 16);
  // Within one plan interval of b's arrival, team-b holds its 8.
  CHECK(GpusAt(r, 1, 600 + 30) == 8);
  CHECK(GpusAt(r, 0, 600 + 30) == 8);
  const std::vector<QueueOutcome> queues = QueueOutcomes(r, TwoTeams(8));
  REQUIRE(queues.size() == 2);
  CHECK(queues[1].longest_short_seconds <= 30);
  CHECK(queues[0].jobs == 1);
  CHECK(queues[0].finished == 1);
  CHECK(queues[0].mean_jct_seconds == r.jobs[0].jct_seconds());
  CHECK(queues[0].gpu_share + queues[1].gpu_share <= 1.0 + 1e-9);
  CHECK(queues[0].gpu_share > queues[1].gpu_share);
  const std::string table = QueueTable(queues);
  CHECK(table.find("team-b") != std::string::npos);
}

TEST_CASE("without a cohort a queue never goes above its quota", "[sim][queues]") {
  const std::string jsonl =
      R"({"id": "a", "arrival_seconds": 0, "profile": "linear", "samples": 500000,)"
      R"( "min_replicas": 1, "max_replicas": 16, "restart_cost_seconds": 10})";
  std::vector<QueueSpec> queues = {{"team-a", 6, "", std::nullopt, std::nullopt, 1},
                                   {"team-b", 10, "", std::nullopt, std::nullopt, 1}};
  const SimulationResult r = Run(jsonl, queues, 16);
  CHECK(r.jobs[0].peak_replicas == 6);
  CHECK(r.jobs[0].finished());
}

}  // namespace
}  // namespace rescale::sim
