// Planner: the interface every scaling policy implements, and the static
// baseline policies.
//
// A planner is a pure function from an immutable snapshot of the cluster
// (jobs, their applied state, curves, capacity) to one decision per job with
// its reason. The server's DecisionEngine and the offline simulator run the
// same planners, so a policy behaves identically in both.
#ifndef RESCALE_PLANNER_H_
#define RESCALE_PLANNER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/time/time.h"
#include "rescale/types.h"

namespace rescale {

struct PlanJob {
  JobSpec spec;
  JobStatus status;
  std::vector<CurvePoint> curve;  // predicted throughput by replicas
  std::optional<Recommendation> previous;
  // What the job's own policy wants, ignoring other jobs (0 = derive from
  // the static policy name: max_replicas for static-max, else min).
  uint32_t desired_replicas = 0;
  BindingConstraint desired_binding = BindingConstraint::kNone;
  std::string desired_reason;
};

struct PlanInput {
  std::vector<PlanJob> jobs;
  std::optional<uint32_t> capacity_gpus;  // nullopt = unbounded
  absl::Time now;
};

struct PlanDecision {
  std::string job_id;
  uint32_t replicas = 0;
  BindingConstraint binding = BindingConstraint::kNone;
  std::string reason;
  uint32_t queue_position = 0;
  double predicted_samples_per_second = 0;
};

class Planner {
 public:
  virtual ~Planner() = default;
  virtual std::string_view name() const = 0;
  // One decision per input job, in input order. Deterministic.
  virtual std::vector<PlanDecision> Plan(const PlanInput& input) const = 0;
};

// The baselines "static-min" (every job at min_replicas) and "static-max"
// (as close to max_replicas as capacity allows), chosen per job by its
// spec.policy (already resolved to a concrete name). Admission is gang
// all-or-nothing at min_replicas in priority order (running jobs before
// waiting ones of equal priority, then registration time, then job_id);
// jobs that do not fit wait with a queue position and the GPUs they need.
// Admitted jobs then grow toward what their policy wants (desired_replicas;
// max_replicas for "static-max"), in the same order, with the GPUs left.
class StaticPlanner final : public Planner {
 public:
  static constexpr std::string_view kMinPolicy = "static-min";
  static constexpr std::string_view kMaxPolicy = "static-max";
  std::string_view name() const override { return "static"; }
  std::vector<PlanDecision> Plan(const PlanInput& input) const override;
};

// Throughput at `replicas` read off observed points (linear between them,
// proportional to replicas beyond them); 0 when there are none.
double InterpolateThroughput(const std::vector<CurvePoint>& curve, uint32_t replicas);

}  // namespace rescale

#endif  // RESCALE_PLANNER_H_
