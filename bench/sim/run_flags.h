// What `rescale-sim run` and `sweep` share: their flags (RunFlags,
// AddRunFlags), the checks made before any run starts (PrepareRun), and the
// options, capacity and description each run gets from them.
#ifndef RESCALE_BENCH_SIM_RUN_FLAGS_H_
#define RESCALE_BENCH_SIM_RUN_FLAGS_H_

#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "bench/sim/report.h"
#include "bench/sim/simulator.h"
#include "bench/sim/workload.h"
#include "rescale/decision_engine.h"
#include "rescale/queues.h"

namespace rescale::sim {

// Flags shared by run and sweep.
struct RunFlags {
  std::string workload;
  std::vector<std::string> workloads;
  int64_t capacity = -1;
  std::string capacity_changes;
  std::string policies;
  std::string out = "sim-out";
  uint64_t seed = 1;
  std::string seeds;  // sweep: "1,2,3" (empty = --seed alone)
  double size_noise = 0;
  std::string baseline;
  double plan_interval = 30;
  double noise = 0.05;
  int samples_per_tick = 10;
  double cooldown = 60;
  double horizon = 600;
  std::string objective{PlanObjectiveName(EngineOptions{}.planner.objective)};
  uint32_t gpus_per_node = 4;
  uint32_t node_gpus = 0;
  double foreign_load = 0;
  double foreign_interval = 1800;
  bool node_aware = false;
  std::string efficiency = "on";
  std::string queues;  // --queues FILE
  // --cluster FILE|sia: a cluster of GPU types (typed_cluster.h); runs
  // then go through the typed simulation (typed_sim.h).
  std::string cluster;
  unsigned threads = 0;
  double max_days = 30;
  double max_factor = 4;
  uint32_t max_cap = 64;
  bool no_progress = false;
  bool verbose = false;
};

void AddRunFlags(CLI::App* cmd, RunFlags& f);

struct Prepared {
  std::vector<QueueSpec> queues;
  std::vector<std::string> policies;
  std::string baseline;
  std::vector<CapacityChange> changes;
};

// Validates the policy list and the capacity flags; prints the error and
// returns nullopt on bad usage.
std::optional<Prepared> PrepareRun(const RunFlags& f);
SimulationOptions OptionsFor(const RunFlags& f, const Workload& workload, const Prepared& p,
                             const std::string& policy, uint32_t capacity);
// The capacity to use, or nullopt (error printed).
std::optional<uint32_t> CapacityFor(const RunFlags& f, const Workload& workload,
                                    const std::string& path);
// What one run's report says it ran.
RunDescription DescribeRun(const RunFlags& f, const std::string& path, const Workload& workload,
                           const Prepared& p, uint32_t capacity, uint64_t seed);
// A file-safe tag of a workload path: "philly_workload-1".
std::string WorkloadTag(const std::string& path);

// run and sweep with --cluster: the cluster of GPU types (typed_main.cc).
int RunTyped(const RunFlags& f);
int SweepTyped(const RunFlags& f);

}  // namespace rescale::sim

#endif  // RESCALE_BENCH_SIM_RUN_FLAGS_H_
