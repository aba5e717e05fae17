// Per-job scaling policies: how many workers one job wants, ignoring other
// jobs (the capacity planner fits the wants of all jobs into the cluster).
//
// A policy is a pure function: Decide(input) reads an immutable snapshot —
// the job's spec, its applied state, its fitted throughput model, its
// observed sizes and the policy's memory (the history it needs for
// stabilisation) — and returns the replicas it wants, the reason, and the
// memory to keep for next time. No clock, no I/O: the server's
// DecisionEngine and the simulator run the same code and get the same
// answers.
//
// Policies (names are API: JobSpec.policy):
//   planner      (default) the cluster planner sizes the job together with
//                all others, anywhere in [min_replicas, max_replicas], by
//                the expected value of each size on the job's curve
//   static-min   always min_replicas
//   static-max   always max_replicas
//   kubedl       KubeDL's torch-elastic hill climb (double while aggregate
//                throughput improves, roll back once, stop), with its defects
//                fixed: doubling clamped to max, samples averaged
//   hpa          Kubernetes HPA semantics on scaling efficiency
//   efficiency   the largest n whose marginal efficiency stays >= threshold
// kubedl, hpa and efficiency go through the shared guards: exploration
// (never beyond ExplorationCap in one step: 2x the largest trusted measured
// size or the largest size of the job's prior, whichever is larger; a size
// whose samples aged out of the window is still measured), insufficient data
// (hold until the current size has enough samples), cooldown after each
// applied change, and restart cost (scale up only when RestartPaysOff: the
// predicted gain over the horizon repays the lost progress). planner applies
// only insufficient data; exploration, cooldown and restart cost are part of
// the planner's objective, which values every size by the job's fitted curve
// (or, without data, the default prior kDefaultPriorShares) against the
// restart it costs. The rules are in rescale/job_rules.h.
#ifndef RESCALE_POLICY_H_
#define RESCALE_POLICY_H_

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "rescale/throughput_model.h"
#include "rescale/types.h"

namespace rescale {

// Server-wide defaults; a job overrides them through JobSpec.parameters.
struct PolicyOptions {
  // No change for this long after the cluster applied one (parameter
  // cooldown_seconds).
  absl::Duration cooldown = absl::Seconds(60);
  // Span over which a change must repay its restart cost (parameter
  // horizon_seconds).
  absl::Duration horizon = absl::Seconds(600);
  // Samples a size needs before a policy trusts it.
  uint64_t min_samples = 5;
  // efficiency: smallest marginal efficiency worth a GPU (parameter
  // efficiency_threshold).
  double efficiency_threshold = 0.5;
  // hpa: target scaling efficiency (parameter target_efficiency).
  double hpa_target_efficiency = 0.8;
};

// What a policy remembers about one job between decisions. Owned by the
// caller, changed only by assigning PolicyDecision::memory.
struct PolicyMemory {
  // kubedl: exploration is over (rolled back, or reached max).
  bool exploration_stopped = false;
  // Replicas before the latest applied change (0 = none yet).
  uint32_t previous_replicas = 0;
  // Vectors, not deques: both stay short (windows; at most 64 events), and
  // every plan copies every job's memory, where an empty std::deque still
  // allocates (libstdc++) and a vector does not.
  // hpa: recent raw recommendations, oldest first, for the stabilisation
  // windows.
  std::vector<std::pair<absl::Time, uint32_t>> recommendations;
  // Applied scale events (time, change in replicas), oldest first: hpa's
  // rate policies, the planner's cooldown backoff.
  std::vector<std::pair<absl::Time, int32_t>> scale_events;
  friend bool operator==(const PolicyMemory&, const PolicyMemory&) = default;
};

struct PolicyInput {
  const JobSpec* spec = nullptr;      // policy already resolved
  const JobStatus* status = nullptr;  // what the cluster runs
  const ThroughputModel* model = nullptr;
  // Observed sizes with at least one sample, ordered by replicas.
  std::span<const Observation> observed;
  const PolicyMemory* memory = nullptr;
  // When the cluster last applied a change of replicas (InfinitePast = never;
  // the first applied state of a job is not a change).
  absl::Time last_change_at = absl::InfinitePast();
  absl::Time now;
  PolicyOptions options;  // with the job's parameters applied
  // Whether the cluster's GPU capacity is known. Without it the planner
  // policy explores by ExplorationCap instead of by expected value.
  bool capacity_known = false;
};

struct PolicyDecision {
  uint32_t replicas = 0;  // within [min_replicas, max_replicas]
  BindingConstraint binding = BindingConstraint::kNone;
  std::string reason;
  PolicyMemory memory;
};

class Policy {
 public:
  virtual ~Policy() = default;
  virtual std::string_view name() const = 0;
  // Parameters (JobSpec.parameters keys) this policy reads, besides the
  // shared cooldown_seconds and horizon_seconds (every policy but the static
  // ones takes those).
  virtual std::vector<std::string_view> parameters() const { return {}; }
  virtual PolicyDecision Decide(const PolicyInput& input) const = 0;
};

// Name of Rescale's default policy: the cluster planner sizes the job.
inline constexpr std::string_view kPlannerPolicy = "planner";

// The policy called `name`, or null. The returned object lives forever.
const Policy* FindPolicy(std::string_view name);
std::vector<std::string> PolicyNames();

// Checks a job's parameters against its policy (its own parameters(), plus
// cooldown_seconds and horizon_seconds unless it is static): unknown keys
// and malformed values are INVALID_ARGUMENT naming the key.
absl::Status ValidatePolicyParameters(std::string_view policy,
                                      const std::map<std::string, std::string>& parameters);
// Server defaults with the job's parameters applied (they were validated).
PolicyOptions ResolvePolicyOptions(const PolicyOptions& defaults,
                                   const std::map<std::string, std::string>& parameters);

}  // namespace rescale

#endif  // RESCALE_POLICY_H_
