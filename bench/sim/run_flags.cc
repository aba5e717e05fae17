// The flags and preparation rescale-sim's run and sweep share (see
// run_flags.h).
#include "bench/sim/run_flags.h"

#include <algorithm>
#include <filesystem>
#include <iostream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "bench/sim/baselines.h"
#include "bench/sim/csv.h"
#include "rescale/read_file.h"

namespace rescale::sim {

void AddRunFlags(CLI::App* cmd, RunFlags& f) {
  cmd->add_option("--capacity", f.capacity,
                  "GPUs in the cluster at time 0 (default: the workload's)");
  cmd->add_option(
      "--capacity-changes", f.capacity_changes,
      "later capacity, SECONDS:GPUS,... (e.g. 3600:48,7200:64: nodes lost, then added)");
  cmd->add_option("--policies", f.policies,
                  "comma-separated policies (default: all known: " +
                      absl::StrJoin(SimulatorPolicies(), ",") + ")");
  cmd->add_option("--out", f.out, "output directory")->capture_default_str();
  cmd->add_option("--seed", f.seed, "seed of the step-time noise")->capture_default_str();
  cmd->add_option("--size-noise", f.size_noise,
                  "sigma of the log-normal factor on the total_samples each job declares "
                  "(0 = exact)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--baseline", f.baseline, "policy the ratios divide by (default: the first)");
  cmd->add_option("--plan-interval", f.plan_interval, "seconds between plans (and sample batches)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--noise", f.noise, "sigma of the log-normal noise on every step (0 = none)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--samples-per-tick", f.samples_per_tick,
                  "step samples per running job per interval")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--cooldown", f.cooldown, "engine cooldown after an applied change, seconds")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--horizon", f.horizon, "engine horizon for restart costs, seconds")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--objective", f.objective,
                  "planner objective (rescaled's --objective): jct or fair")
      ->capture_default_str()
      ->check(CLI::IsMember({"jct", "fair"}));
  cmd->add_option("--gpus-per-node", f.gpus_per_node,
                  "GPUs per node the engine's model assumes (rescaled's --gpus_per_node; 0 = "
                  "unknown)")
      ->capture_default_str();
  cmd->add_option("--node-gpus", f.node_gpus,
                  "simulate nodes of this many GPUs (0 = one pool of GPUs, no nodes): each "
                  "replica on one node, best fit; a replica that fits nowhere is a Pending "
                  "pod and its job does not train")
      ->capture_default_str();
  cmd->add_option("--foreign-load", f.foreign_load,
                  "with --node-gpus: mean fraction of the GPUs held by pods Rescale does not "
                  "manage, whole GPUs per node, from the seed")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--foreign-interval", f.foreign_interval,
                  "with --node-gpus: mean seconds between two changes of the foreign load "
                  "(one node redrawn each time)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--node-aware", f.node_aware,
                  "with --node-gpus: true = the engine is told the free GPUs and the replicas "
                  "of each size that fit on the nodes (SetCapacity slots), false = the "
                  "allocatable total only")
      ->default_str("false");
  cmd->add_option("--efficiency", f.efficiency,
                  "on = statistical efficiency from the Pollux validation traces (a step at "
                  "total batch M counts M x EFF(M) samples at M0; the planner adapts the "
                  "batch), off = every sample counts fully (a larger batch is free)")
      ->capture_default_str()
      ->check(CLI::IsMember({"on", "off"}));
  cmd->add_option("--threads", f.threads, "concurrent runs (0 = one per core)")
      ->capture_default_str();
  cmd->add_option("--max-days", f.max_days, "stop this many virtual days after the last arrival")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--pollux-max-factor", f.max_factor,
                  "Pollux workloads: max_replicas = factor x num_replicas ...")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--pollux-max-cap", f.max_cap, "... capped at this")->capture_default_str();
  cmd->add_option("--queues", f.queues,
                  "queue file (rescale/queues.h; rescalectl queue set -f takes the same): jobs "
                  "go to its queues in turn, and each run reports per queue")
      ->type_name("FILE");
  cmd->add_option("--cluster", f.cluster,
                  "a cluster of GPU types: sia (Sia's 64 GPUs: 6x4 T4, 3x8 RTX 2080 Ti, 2x8 "
                  "A100) or a YAML file of types (name, profile, nodes, gpus_per_node); "
                  "policies planner, planner-typeblind, fifo, tiresias")
      ->type_name("FILE|sia");
  cmd->add_flag("--no-progress", f.no_progress, "no progress bar on stderr");
  cmd->add_flag("--verbose", f.verbose,
                "keep the engine's warnings (e.g. planner optimality gaps)");
}

std::optional<Prepared> PrepareRun(const RunFlags& f) {
  Prepared p;
  const std::vector<std::string> known = SimulatorPolicies();
  if (f.policies.empty()) {
    p.policies = known;
  } else {
    for (absl::string_view name : absl::StrSplit(f.policies, ',', absl::SkipWhitespace())) {
      p.policies.emplace_back(absl::StripAsciiWhitespace(name));
    }
  }
  if (p.policies.empty()) {
    std::cerr << "rescale-sim: --policies names no policy\n";
    return std::nullopt;
  }
  p.baseline = f.baseline.empty() ? p.policies.front() : f.baseline;
  if (std::find(p.policies.begin(), p.policies.end(), p.baseline) == p.policies.end()) {
    std::cerr << "rescale-sim: --baseline \"" << p.baseline << "\" is not among --policies ("
              << absl::StrJoin(p.policies, ", ") << ")\n";
    return std::nullopt;
  }
  absl::StatusOr<std::vector<CapacityChange>> changes = ParseCapacityChanges(f.capacity_changes);
  if (!changes.ok()) {
    std::cerr << "rescale-sim: --capacity-changes: " << changes.status().message() << "\n";
    return std::nullopt;
  }
  p.changes = *changes;
  if (!f.queues.empty()) {
    absl::StatusOr<std::string> text = ReadFileToString(f.queues, "--queues");
    absl::StatusOr<std::vector<QueueSpec>> queues =
        text.ok() ? ParseQueuesYaml(*text, f.queues) : text.status();
    if (!queues.ok()) {
      std::cerr << "rescale-sim: --queues: " << queues.status().message() << "\n";
      return std::nullopt;
    }
    if (queues->empty()) {
      std::cerr << "rescale-sim: --queues: " << f.queues << " defines no queue\n";
      return std::nullopt;
    }
    p.queues = *std::move(queues);
  }
  // The engine checks its options (policy names, interval, horizon...): ask
  // it now, for every policy, rather than fail halfway through the runs.
  for (const std::string& policy : p.policies) {
    if (absl::Status valid = ValidateSimulationOptions(OptionsFor(f, Workload{}, p, policy, 1));
        !valid.ok()) {
      std::cerr << "rescale-sim: " << valid.message() << "\n";
      return std::nullopt;
    }
  }
  return p;
}

SimulationOptions OptionsFor(const RunFlags& f, const Workload& workload, const Prepared& p,
                             const std::string& policy, uint32_t capacity) {
  SimulationOptions o;
  o.policy = policy;
  o.capacity_gpus = capacity;
  o.capacity_changes = workload.capacity_changes;
  o.capacity_changes.insert(o.capacity_changes.end(), p.changes.begin(), p.changes.end());
  std::stable_sort(
      o.capacity_changes.begin(), o.capacity_changes.end(),
      [](const CapacityChange& a, const CapacityChange& b) { return a.at_seconds < b.at_seconds; });
  o.plan_interval_seconds = f.plan_interval;
  o.samples_per_tick = f.samples_per_tick;
  o.step_noise = f.noise;
  o.seed = f.seed;
  o.size_noise = f.size_noise;
  o.cooldown_seconds = f.cooldown;
  o.horizon_seconds = f.horizon;
  o.objective = *ParsePlanObjective(f.objective);  // checked by the flag
  o.gpus_per_node = f.gpus_per_node;
  o.node_gpus = f.node_gpus;
  o.foreign_load = f.foreign_load;
  o.foreign_interval_seconds = f.foreign_interval;
  o.node_aware = f.node_aware;
  o.efficiency = f.efficiency == "on";
  o.max_seconds_after_last_arrival = f.max_days * 86400;
  o.queues = p.queues;
  return o;
}

std::optional<uint32_t> CapacityFor(const RunFlags& f, const Workload& workload,
                                    const std::string& path) {
  if (f.capacity >= 0) return static_cast<uint32_t>(f.capacity);
  if (workload.capacity_gpus) return *workload.capacity_gpus;
  std::cerr << "rescale-sim: " << path << " gives no capacity: pass --capacity GPUS\n";
  return std::nullopt;
}

RunDescription DescribeRun(const RunFlags& f, const std::string& path, const Workload& workload,
                           const Prepared& p, uint32_t capacity, uint64_t seed) {
  RunDescription run;
  run.workload = path;
  run.jobs = workload.jobs.size();
  run.capacity_gpus = capacity;
  run.capacity_changes = OptionsFor(f, workload, p, p.baseline, capacity).capacity_changes;
  run.seed = seed;
  run.plan_interval_seconds = f.plan_interval;
  run.step_noise = f.noise;
  run.size_noise = f.size_noise;
  run.samples_per_tick = f.samples_per_tick;
  run.node_gpus = f.node_gpus;
  run.foreign_load = f.foreign_load;
  run.foreign_interval_seconds = f.foreign_interval;
  run.node_aware = f.node_aware;
  run.efficiency = f.efficiency == "on";
  run.baseline = p.baseline;
  return run;
}

std::string WorkloadTag(const std::string& path) {
  const std::filesystem::path p(path);
  const std::string parent = p.parent_path().filename().string();
  return FileSafe(parent.empty() ? p.stem().string() : parent + "_" + p.stem().string());
}

}  // namespace rescale::sim
