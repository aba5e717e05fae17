// The checks of a simulation's options and the engine options they imply
// (see sim_options.h).
#include "bench/sim/sim_options.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "bench/sim/baselines.h"

namespace rescale::sim {

EngineOptions EngineOptionsFor(const SimulationOptions& options, uint32_t jobs,
                               uint32_t largest_max_replicas) {
  EngineOptions engine;
  engine.default_policy = EnginePolicyFor(options.policy);
  engine.max_jobs = static_cast<int>(jobs) + 16;
  // Cluster-native schedulers have no planner: with the capacity unknown
  // the planner is separable and hands every job its per-job wish.
  if (KindOf(options.policy) != PolicyKind::kClusterNative)
    engine.capacity_gpus = options.capacity_gpus;
  engine.plan_interval = absl::Seconds(options.plan_interval_seconds);
  engine.policy.cooldown = absl::Seconds(options.cooldown_seconds);
  engine.policy.horizon = absl::Seconds(options.horizon_seconds);
  engine.model.gpus_per_node = options.gpus_per_node;
  engine.planner.objective = options.objective;
  // planner-throughput: the same planner, deciding on throughput alone.
  engine.plan_on_goodput = options.policy != "planner-throughput";
  // Samples are ingested once per interval, stamped inside it: the store
  // must accept samples an interval old, and keep a cell for every size a
  // job may try.
  engine.store.max_sample_age =
      std::max(engine.store.max_sample_age, absl::Seconds(3 * options.plan_interval_seconds));
  engine.store.window =
      std::max(engine.store.window, absl::Seconds(6 * options.plan_interval_seconds));
  engine.store.max_sizes_per_job = std::max(
      engine.store.max_sizes_per_job, static_cast<int>(std::min(largest_max_replicas, 4096u)));
  return engine;
}

absl::Status ValidateSimulationOptions(const SimulationOptions& options) {
  if (!IsSimulatorPolicy(options.policy)) {
    return absl::InvalidArgumentError(absl::StrFormat("unknown policy \"%s\" (known: %s)",
                                                      options.policy,
                                                      absl::StrJoin(SimulatorPolicies(), ", ")));
  }
  if (!(options.size_noise >= 0)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("size_noise must be >= 0, got %g", options.size_noise));
  }
  if (options.node_gpus == 0 && (options.foreign_load != 0 || options.node_aware)) {
    return absl::InvalidArgumentError(
        "--foreign-load and --node-aware need the node model: pass --node-gpus GPUS");
  }
  if (!(options.foreign_load >= 0 && options.foreign_load < 1)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--foreign-load must be in [0, 1), got %g", options.foreign_load));
  }
  if (!(options.foreign_interval_seconds > 0) || std::isinf(options.foreign_interval_seconds)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--foreign-interval must be a positive number of seconds, got %g",
                        options.foreign_interval_seconds));
  }
  return DecisionEngine::ValidateOptions(EngineOptionsFor(options, 0, 1));
}

}  // namespace rescale::sim
