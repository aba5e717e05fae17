// What one simulation run is told (the flags of `rescale-sim run` land
// here), how those options are checked, and the engine options they imply.
// The model they parameterise is described in simulator.h.
#ifndef RESCALE_BENCH_SIM_SIM_OPTIONS_H_
#define RESCALE_BENCH_SIM_SIM_OPTIONS_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "bench/sim/workload.h"
#include "rescale/decision_engine.h"

namespace rescale::sim {

struct SimulationOptions {
  // One of SimulatorPolicies() (baselines.h): an engine policy, which every
  // job gets as spec.policy, or a cluster-native scheduler.
  std::string policy = "planner";
  // GPUs at time 0 and later changes (ordered by time).
  uint32_t capacity_gpus = 64;
  std::vector<CapacityChange> capacity_changes;
  double plan_interval_seconds = 30;
  // Step samples ingested per running job per plan interval (fewer when the
  // job stepped fewer times, or ran for part of the interval).
  int samples_per_tick = 10;
  // sigma of the log-normal per-step noise; 0 = none.
  double step_noise = 0.05;
  uint64_t seed = 1;
  // sigma of the log-normal factor on each job's JobSpec.total_samples
  // (exp(sigma*z), z standard normal per job from the seed and the job's
  // index); 0 = the exact work. Misestimates only what the engine is told.
  double size_noise = 0;
  // The statistical-efficiency world (pollux_efficiency.h; --efficiency
  // on|off): jobs of the measured applications progress by samples at M0
  // (each step counts M x EFF(M)) and report gradient statistics; the
  // `planner` adapts their batch. false: every sample counts fully, a larger
  // batch is free, and every output is what it was before this world.
  bool efficiency = true;
  // EngineOptions::policy defaults (rescaled's --cooldown and --horizon).
  double cooldown_seconds = 60;
  double horizon_seconds = 600;
  // rescaled's --objective (level 4 of the planner's objective).
  PlanObjectiveKind objective = EngineOptions{}.planner.objective;
  // rescaled's --gpus_per_node: the built-in trace profiles were measured on
  // nodes of 4 GPUs, packed.
  uint32_t gpus_per_node = 4;
  // The node model (see simulator.h and node_model.h); off when node_gpus is 0: the
  // cluster is then one pool of GPUs, and every output is what it was
  // before nodes existed. GPUs per node (--node-gpus; every capacity must
  // be a multiple). Independent of gpus_per_node, which is only what the
  // engine's throughput model assumes.
  uint32_t node_gpus = 0;
  // Mean fraction of the GPUs held by foreign pods (--foreign-load), [0, 1).
  double foreign_load = 0;
  // Mean seconds between two changes of the foreign load, cluster-wide
  // (--foreign-interval).
  double foreign_interval_seconds = 1800;
  // Queues (--queues FILE, rescale/queues.h; empty = one pool): set with
  // SetQueues before the first arrival; each job's queue is QueueOfJob's.
  // Engine policies only: cluster-native schedulers run one pool.
  std::vector<QueueSpec> queues;
  // What an engine policy's engine is told (--node-aware). true: what the
  // node-aware adapter sends, SetCapacity(CapacityReport{total = free GPUs,
  // slots per gpus_per_replica class of the jobs in the system}), sent again
  // whenever it changes (capacity and foreign-load changes, arrivals and
  // completions). false: the allocatable total (foreign GPUs included), as
  // an adapter that does not look at nodes reports it. Cluster-native
  // schedulers see the allocatable total either way.
  bool node_aware = false;
  // The run stops this long after the last arrival; jobs still running are
  // reported unfinished.
  double max_seconds_after_last_arrival = 30 * 86400.0;
  // Incremented once per finished job (progress display); may be null.
  std::atomic<uint64_t>* jobs_finished = nullptr;
};

// The engine options a simulation runs with: rescaled's defaults, with the
// simulation's policy, capacity, interval, cooldown, horizon and node size,
// and a metrics store sized for `jobs` jobs of up to `largest_max_replicas`.
EngineOptions EngineOptionsFor(const SimulationOptions& options, uint32_t jobs,
                               uint32_t largest_max_replicas);
// What DecisionEngine::Create would say of these options (INVALID_ARGUMENT
// naming the option), without building anything: lets rescale-sim refuse
// bad flags before it starts any run.
absl::Status ValidateSimulationOptions(const SimulationOptions& options);

}  // namespace rescale::sim

#endif  // RESCALE_BENCH_SIM_SIM_OPTIONS_H_
