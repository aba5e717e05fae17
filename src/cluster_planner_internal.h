// Internal to the cluster planner, not installed: the sanitised problem all
// solvers work on (JobModel, Problem), the objective's per-job terms, and the
// entry points of the parts that live in their own files:
//   cluster_planner.cc          problem model, objective, choice of solver
//   cluster_planner_exact.cc    separable solver and exact DP (solvers 1, 2)
//   cluster_planner_scale.cc    scalable solver and its upper bound (solver 3)
//   cluster_planner_explain.cc  binding constraint and reason per job
//   cluster_planner_slots.cc    node slots
//   cluster_planner_queues.cc   queues, quotas and cohorts
//   cluster_planner_types.cc    GPU types: type and size together
// Only those files include it; the public API is rescale/cluster_planner.h.
#ifndef RESCALE_SRC_CLUSTER_PLANNER_INTERNAL_H_
#define RESCALE_SRC_CLUSTER_PLANNER_INTERNAL_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "rescale/cluster_planner.h"
#include "rescale/job_rules.h"

namespace rescale::planner_internal {

// Utilities this close (relative) count as equal, so exact ties fall through
// to the stated tie rule rather than to rounding noise.
inline constexpr double kTieTolerance = 1e-12;

// U_p(x) of the objective's level 4 (see rescale/cluster_planner.h).
inline double FairUtility(double x, double p) {
  if (p == -1) return 1 - 1 / x;
  if (p == 0) return std::log(x);
  if (p == 1) return x - 1;
  return (std::pow(x, p) - 1) / p;
}

inline bool NearlyEqual(double a, double b) {
  return std::abs(a - b) <= kTieTolerance * std::max({1.0, std::abs(a), std::abs(b)});
}

// One job, sanitised: the sizes it may take and how its utility is computed.
struct JobModel {
  const PlannerJob* job = nullptr;
  uint32_t lo = 1;  // smallest running size
  uint32_t hi = 0;  // largest; hi < lo: cannot run
  uint32_t gpus_per_replica = 1;
  uint32_t current = 0;
  int level = 0;  // index of its priority, 0 = highest
  bool running = false;
  bool guarded = false;  // running and non-preemptible: counted at level 1
  bool cooldown = false;
  bool pinnable = false;   // running in cooldown at a size it may keep
  uint32_t seniority = 0;  // 0 = started (or registered) first
  double restart_factor = 1;
  // The span a restart is weighed over (the horizon, or less: see jct).
  double restart_horizon_seconds = 600;
  // Level-4 weight: 1 for fair; the heSRPT rank weight w_i for jct.
  double weight = 1;
  // jct: the weight the work a restart loses is priced at, max(w_i, the
  // floor in cluster_planner.h); unused by fair.
  double restart_weight = 1;
  // jct: a shrink also pays the restart back to its current size.
  bool return_restart = false;
  double base_throughput = 1;
  bool flat = false;  // no usable curve: no size gains over min
  // The curve sizes are read from: the job's throughput, or with GPU types
  // its curve on the problem's type (cluster_planner_types.cc).
  const std::vector<double>* curve = nullptr;
  // With GPU types: the job runs now on another type, so every size here is
  // a restart and a change (current is 0, running is true).
  bool elsewhere = false;
  bool allowed = true;           // with GPU types: false when it may not use this type
  absl::string_view type_name;   // with GPU types, for the reasons
  absl::string_view moved_from;  // the type it runs on, when elsewhere

  bool CanRun() const { return hi >= lo; }
  uint64_t Gpus(uint32_t n) const { return uint64_t{n} * gpus_per_replica; }
  uint64_t MinGpus() const { return Gpus(lo); }
  uint64_t PinnedGpus() const { return Gpus(current); }

  double Throughput(uint32_t n) const {
    if (flat) return base_throughput;
    const std::vector<double>& t = *curve;
    const size_t index = n > job->min_replicas ? n - job->min_replicas : 0;
    const double v = t[std::min(index, t.size() - 1)];
    return (v > 0 && std::isfinite(v)) ? v : base_throughput;
  }
};

struct Problem {
  std::span<const PlannerJob> jobs;
  std::vector<JobModel> models;
  std::vector<int32_t> priorities;  // distinct, highest first
  PlanObjectiveKind objective = PlanObjectiveKind::kFair;
  double fairness = -1;
  double horizon_seconds = 600;

  size_t size() const { return models.size(); }
  // Level-4 term of job i at n (0 when not running).
  double Utility(size_t i, uint32_t n) const {
    if (n == 0) return 0;
    const JobModel& m = models[i];
    const double s = m.Throughput(n) / m.base_throughput;
    if (!m.running || n == m.current) return Term(m, s);
    if (objective != PlanObjectiveKind::kJct) return Term(m, m.restart_factor * s);
    // jct (cluster_planner.h): the restart's share of the horizon, of the
    // work at n and, for a shrink, of the work at the size it returns to.
    // The term keeps rising with s (at least kMinRestartFactor x w_i x s),
    // so of two restarts the larger size is never worth less.
    const double lost = m.restart_weight * (1 - m.restart_factor);
    const double back =
        m.return_restart && n < m.current ? m.Throughput(m.current) / m.base_throughput : 0;
    return std::max(kMinRestartFactor * m.weight, m.weight - lost) * s - lost * back;
  }
  // The same term as if resizing were free (for the RESTART_COST wording).
  double UtilityWithoutRestart(size_t i, uint32_t n) const {
    const JobModel& m = models[i];
    return Term(m, m.Throughput(n) / m.base_throughput);
  }
  // The level-4 term of a job running at relative speed `speedup`.
  double Term(const JobModel& m, double speedup) const {
    return objective == PlanObjectiveKind::kJct ? m.weight * speedup
                                                : FairUtility(speedup, fairness);
  }
};

// The sanitised problem (cluster_planner.cc); `jobs` must outlive it. With
// `gpu_type`, the problem of that type (PlannerJob::throughput_by_type): a
// job that may not use it cannot run, a job running on another type is
// `elsewhere`, and speedups are over the job's slowest allowed type.
Problem BuildProblem(std::span<const PlannerJob> jobs, const ClusterPlannerOptions& options,
                     std::optional<uint32_t> gpu_type = std::nullopt);
// Whether job j at n replicas leaves a job in cooldown unchanged (level 3).
inline bool Unchanged(const JobModel& m, uint32_t n) { return !m.elsewhere && n == m.current; }
// The objective of a plan; missing entries of `replicas` count as 0.
PlanObjective Evaluate(const Problem& p, std::span<const uint32_t> replicas);

// ---- exact solvers (cluster_planner_exact.cc) ------------------------------

// Weights of the mixed-radix packing of levels 1-3 (see cluster_planner_exact.cc).
struct ScoreWeights {
  int64_t guarded = 0;
  std::vector<int64_t> running, waiting;
  int64_t unchanged = 1;
};

// nullopt when the packed score would overflow int64.
std::optional<ScoreWeights> MakeScoreWeights(const Problem& p);

// The packed levels 1-3 of job m at n replicas, and its tie-rule bit.
int64_t OptionScore(const ScoreWeights& w, const JobModel& m, uint32_t n);
uint64_t SeniorityBit(const JobModel& m);

// Nothing competes for GPUs: every job takes its own best option.
std::vector<uint32_t> SolveSeparable(const Problem& p);

// Multiple-choice knapsack over `cells` capacity cells of `unit` GPUs.
std::vector<uint32_t> SolveExactDp(const Problem& p, const ScoreWeights& weights, uint64_t cells,
                                   uint64_t unit);

// A partial plan's value in the DP: levels 1-3 packed, then level 4, then
// the tie rule (earlier-started jobs running), then fewer GPUs. `valid` is
// false for a cell no plan fills exactly (KnapsackTable with exact_fill).
struct DpValue {
  int64_t score = 0;
  double utility = 0;
  uint64_t seniority_mask = 0;
  uint64_t gpus = 0;
  bool valid = true;
};
bool Better(const DpValue& a, const DpValue& b);

// The DP's table after every job of `p`: best[c] is the best value within c
// cells, or, with exact_fill, of plans using exactly c cells; choice holds
// each job's replicas per cell, for Reconstruct.
struct KnapsackTable {
  size_t width = 0;
  std::vector<DpValue> best;
  std::vector<uint32_t> choice;  // job j, cell c at j * width + c
};
KnapsackTable RunKnapsack(const Problem& p, const ScoreWeights& weights, uint64_t cells,
                          uint64_t unit, bool exact_fill);
// The replicas of the plan behind table.best[cell].
std::vector<uint32_t> Reconstruct(const Problem& p, const KnapsackTable& table, uint64_t cell,
                                  uint64_t unit);

// ---- scalable solver (cluster_planner_scale.cc) ----------------------------

struct ScaleSolution {
  std::vector<uint32_t> replicas;
  // The Lagrangian dual: an upper bound on level 4 for the admitted set.
  double upper_bound = 0;
};
ScaleSolution SolveAtScale(const Problem& p, uint64_t capacity);

// ---- choice of solver (cluster_planner.cc) ---------------------------------

// The packed score and the seniority mask need at most this many jobs.
inline constexpr size_t kMaxExactJobs = 40;

// What a solver returns, before the plan is explained.
struct Solution {
  std::vector<uint32_t> replicas;  // per model of the problem solved
  bool exact = false;
  double bound = 0;         // the scalable solver's upper bound on level 4...
  bool have_bound = false;  // ...when it ran
};
// Today's planner on `p`: the separable solver, the exact DP or the
// scalable one, as PlanCluster's header comment describes.
Solution Solve(const Problem& p, std::optional<uint64_t> capacity,
               const ClusterPlannerOptions& options);
// The plan of `solution`: totals, objective, bound and explanations.
ClusterPlan Finish(const Problem& p, const Solution& solution, std::optional<uint64_t> capacity);

// ---- node slots (cluster_planner_slots.cc) ---------------------------------

// The problem restricted to the models at `indices` (in that order), with
// priorities and seniority re-ranked within the part.
Problem Part(const Problem& p, std::span<const uint32_t> indices);

// PlanCluster with per-class slot limits (non-empty `slots`).
ClusterPlan PlanWithSlots(Problem p, std::optional<uint64_t> capacity,
                          const ClusterPlannerOptions& options,
                          std::span<const ReplicaSlots> slots);

// ---- explanations (cluster_planner_explain.cc) -----------------------------

// Binding constraint, reason, queue position and marginal values of every job
// from its final size; the same for all solvers.
std::vector<PlannedJob> Explain(const Problem& p, std::span<const uint32_t> replicas,
                                std::optional<uint64_t> capacity, uint64_t allocated);

// Rewrites the explanations of the jobs the slots hold back to NODE_SLOTS
// (cluster_planner_explain.cc). `limit_of(g)` is the slot limit of class g
// (nullopt = none); `relaxed` is the plan without slots and `unlimited_hi`
// each job's largest size before the slots capped it.
struct SlotLimits {
  std::vector<std::pair<uint32_t, uint32_t>> limits;  // (gpus_per_replica, replicas), sorted
  std::optional<uint32_t> Of(uint32_t g) const {
    auto it = std::lower_bound(limits.begin(), limits.end(), std::make_pair(g, uint32_t{0}));
    if (it == limits.end() || it->first != g) return std::nullopt;
    return it->second;
  }
};
void ExplainSlots(const Problem& p, std::span<const uint32_t> replicas,
                  std::span<const uint32_t> relaxed, std::span<const uint32_t> unlimited_hi,
                  const SlotLimits& limits, std::optional<uint64_t> capacity, uint64_t allocated,
                  std::vector<PlannedJob>& out);

// ---- queues (cluster_planner_queues.cc) -------------------------------------

// Whether `queues` constrain anything: more than one queue, a cohort, or one
// queue smaller than the capacity. Otherwise PlanCluster ignores them.
bool QueuesMatter(std::span<const QueueSpec> queues, std::span<const PlannerJob> jobs,
                  std::optional<uint64_t> capacity);
// PlanCluster with queues (see "Queues" in rescale/cluster_planner.h).
ClusterPlan PlanWithQueues(Problem p, std::optional<uint64_t> capacity,
                           const ClusterPlannerOptions& options,
                           std::span<const ReplicaSlots> slots, std::span<const QueueSpec> queues);

}  // namespace rescale::planner_internal

#endif  // RESCALE_SRC_CLUSTER_PLANNER_INTERNAL_H_
