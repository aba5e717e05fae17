// Cluster planner: how many replicas every job gets when they share one pool
// of GPUs. This is the decision at the heart of Rescale; the policies feed it
// predicted throughput curves and it returns one gang-feasible size per job,
// with the constraint that bound it, a sentence a person can read, a queue
// position for the jobs left waiting and the marginal value of one replica
// more or fewer.
//
// The problem. For every job i choose n_i in {0} U [min_i, max_i] (0 = waiting
// or suspended) with sum_i n_i x gpus_per_replica_i <= capacity, maximising in
// lexicographic order
//   1. the number of currently running non-preemptible jobs that keep running;
//   2. for each priority level, highest first: the number of currently running
//      jobs of that level that keep running, then the number of waiting jobs
//      of that level that start;
//   3. minus the number of jobs inside their cooldown whose replicas change;
//   4. the objective (ClusterPlannerOptions::objective), a sum over running
//      jobs of a term in s_i = T_i(n_i)/T_i(min_i) and f_i, where f_i =
//      max(0.01, 1 - restart_cost_i / horizon_i) (RestartFactor in
//      rescale/job_rules.h) for a job that runs now with a different size,
//      else 1:
//      fair: U_p(f_i x s_i), U_p(s) = (s^p - 1)/p (U_0 = ln s), horizon_i =
//            the horizon;
//      jct:  w_i x s_i, the rate at which job i's remaining work shrinks,
//            weighted by its rank in remaining work (heSRPT, below); for a
//            job that runs now with a different size, what the restart
//            loses, l_i = r_i x (1 - f_i), is taken off:
//              max(0.01 x w_i, w_i - l_i) x s_i - l_i x b_i,
//            b_i = s_i(current) for a shrink, else 0: a job shrunk to make
//            room grows back when the room returns and pays a second
//            restart at that size. r_i = max(w_i, kRestartWeightFloor x
//            the mean w): a restart idles GPUs any job could have used, and
//            priced at w_i alone the job with the most work left (weighted
//            least) was resized nearly for free (one imagenet job restarted
//            77 times, 47 of its 253 GPU-hours). The 0.01 x w_i keeps the
//            term rising with s_i. horizon_i = min(horizon, the job's
//            remaining seconds at its current size) when its remaining work
//            is known, since a job about to finish never recoups a restart.
//            With r_i = w_i and no b_i, the term is w_i x f_i x s_i, as it
//            is for a job whose curve is only a shape (curve_is_shape: its
//            values are not speeds and its own policy sets its size; with
//            the floor and b_i, the planner-wrapped kubedl, efficiency and
//            hpa baselines took 1.7x, 1.8x and 1.3x as long on the Pollux
//            workloads at 1x, and static-max 0.9x).
// The jct weights. D_i is job i's remaining work in seconds at min_i: its
// remaining samples / T_i(min_i) when known (PlannerJob::remaining_samples),
// otherwise its attained samples / T_i(min_i) (least attained service: with
// heavy-tailed job sizes, a job that has run longer is expected to run
// longer still), at least ClusterPlannerOptions::min_remaining_seconds. A
// waiting job's D_i shrinks by the time it has waited (aging). With the M
// jobs ranked by D_i, largest first (rank k = 1..M), w_i = ((k/M)^c -
// ((k-1)/M)^c)^(1/c), c = 2: the weights under which maximising sum w_i
// s_i(theta_i) for s(theta) = theta^(1/2) gives heSRPT's optimal shares
// (Berg, Vesilo, Harchol-Balter), so shorter jobs get more GPUs, yet every
// running job keeps a positive weight. Weights depend on ranks only, so a
// size misestimated by a constant factor changes nothing unless it reorders
// jobs.
// Starvation: levels 1-3 come first, so the objective never suspends a
// running job nor leaves a job waiting that the gang and priority levels
// would start; it only splits GPUs above the minimums and chooses which of
// equally many waiting jobs start, where aging makes every waiting job
// eventually the shortest.
// Exact ties keep the earlier-started job (suspend the most recently started
// first), then the smaller job_id.
//
// The algorithms, and why each is exact where it claims to be, are described
// in src/cluster_planner.cc and the solver files beside it
// (cluster_planner_exact.cc, cluster_planner_scale.cc). In short:
//  * capacity unknown or larger than every job at max_replicas: the problem
//    separates per job and is solved exactly at any scale;
//  * small instances (ClusterPlannerOptions::exact_job_limit jobs, bounded DP
//    work): an exact knapsack DP over capacity whose values are the whole
//    lexicographic objective (the objective is a sum over jobs of per-job
//    vectors, and lexicographic order is compatible with addition);
//  * otherwise: levels 1-3 by cardinality arguments (cheapest gangs first,
//    then pins/swaps at the least extra GPUs), level 4 by a Lagrangian price
//    on GPUs over each job's concave envelope plus a greedy fill. The plan
//    reports the Lagrangian dual (the LP over the envelopes) as an upper bound
//    on level 4 for the admitted set, and the relative gap to it.
//
// Node slots. A replica needs all its gpus_per_replica GPUs on one node, so
// the total alone can admit sizes the nodes cannot hold (8 free GPUs as 4+4
// hold no 8-GPU replica). When told, per size class g, how many replicas
// fit on the nodes' free GPUs (ReplicaSlots, slots_g), the plan also keeps
//   sum over jobs i with gpus_per_replica g of n_i <= slots_g
// for every class with an entry; a class without one is bounded by the
// total only. The method:
//  0. plan without slots; a plan that fits them is returned as it is (the
//     same plan, bit for bit, as without slots, and as exact as it was);
//  1. otherwise cap every job of a limited class at slots_g replicas (no
//     job alone can use more; a job whose min_replicas exceeds slots_g
//     cannot run) and plan again; if that fits, it is exact whenever the
//     solver was, since the caps exclude no allowed plan;
//  2. while some class g still plans more than slots_g: plan that class's
//     jobs alone in slots_g x g GPUs (which enforces sum n_i <= slots_g,
//     with the priorities and the objective inside the class), fix them,
//     and plan the classes not fixed yet in the GPUs left. A violating
//     class held more than slots_g x g GPUs before, so fixing it only frees
//     GPUs for the others; the fixed set only grows, so there are at most
//     as many rounds as classes.
// Limits: step 2 is a heuristic. A fixed class never gives GPUs back to
// another class (a higher-priority job elsewhere that would start if the
// fixed class shrank below its slots stays waiting, although the relaxed
// plan already preferred the fixed class to it), and the classes share no
// nodes in this model: slots_g are counted independently per class, so a
// plan using both 8-GPU and 4-GPU slots of the same node may still not
// place (the adapter's report is per class, not a node-by-node packing).
// A plan changed by step 2 has exact = false, and no bound is computed for
// it (upper_bound = utility, gap 0). Jobs held back or kept from growing by
// a full class get binding NODE_SLOTS and a reason naming the slots.
//
// Queues (rescale/queues.h). Given queues, every job belongs to one
// (PlannerJob::queue) and the plan also keeps, with U_q the GPUs of queue
// q's jobs, N_q its nominal quota, L_q = min(lending limit, N_q) what it may
// lend and G_q = N_q - L_q what it keeps for itself:
//   U_q <= N_q + borrowing limit of q                       (unset: no limit)
//   sum over q in cohort c of max(0, U_q - G_q) <= sum over q in c of L_q
//   U_q <= N_q for a queue without a cohort
// (Kueue's quota model with one resource), and the objective gains two
// levels after level 1 (kept non-preemptible jobs, which are never suspended,
// even on borrowed GPUs):
//   1a. guarantee: sum_q min(U_q, D_q), D_q = the GPUs queue q's jobs take
//       when planned alone in min(N_q, capacity) GPUs with each running job
//       at most at its current size (what Kueue reclaims for: waiting jobs,
//       and what runs; a running job's growth competes at levels 2-4). GPUs
//       a queue borrows are returned before anything else when their
//       owner's jobs need them: borrowers shrink towards their minimum
//       (level 2 keeps jobs running), then the lowest priority among them
//       is suspended;
//   1b. fair sharing of what exceeds nominal: sum_q w_q ln(1 + b_q / w_q),
//       b_q = min(U_q - N_q, X_q) when positive, X_q = the GPUs above
//       N_q queue q's jobs take when planned alone in all it may hold. Its
//       optimum balances b_q / w_q between borrowers (Kueue's dominant
//       resource share with one resource), and a queue is not credited for
//       GPUs above what its own plan would use. It counts only in a cohort
//       where queues compete: two or more have X_q > 0 and together want
//       more than the cohort's pool has left after every D_q; elsewhere
//       the levels below decide how much a lone borrower takes.
// Then within and across queues, levels 2-4 as above. Jobs of a queue that
// is not defined (queue index out of range) wait, bound by QUOTA. Without
// queues, or with one queue holding the whole capacity and no cohort, the
// plan is exactly the one without queues.
// Solvers with queues (cluster_planner_queues.cc): small instances exactly
// (a DP per queue over its usage, combined per cohort over usage and lent
// GPUs); otherwise per queue: the guarantee D_q, then the cohort's lendable
// GPUs water-filled by weight over the queues' wishes X_q, then each queue
// planned in its share with today's solvers, and a second round for what
// gangs left over (exact = false, no bound). With node slots as well, a plan
// that overruns a class is cut back in that class, lowest priority and
// latest started first (exact = false).
//
// External admission (JobSpec::admission, e.g. Kueue). The engine gives the
// planner such a job as it must be planned, so the planner itself knows
// nothing of it: one the admitter has not started cannot run (max < min:
// planned at 0, the reason says it waits for the admitter, binding QUOTA),
// and one it runs is not preemptible (level 1: kept at least at its
// minimum, resized within its range and its queue).
//
// PlanCluster is a pure, deterministic function; it never throws and never
// fails: malformed jobs (max < min, gpus_per_replica 0, missing or
// non-positive throughput) are planned conservatively, as documented on
// PlannerJob.
#ifndef RESCALE_CLUSTER_PLANNER_H_
#define RESCALE_CLUSTER_PLANNER_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/time/time.h"
#include "rescale/queues.h"
#include "rescale/types.h"

namespace rescale {

// Level 4 of the objective (see above).
enum class PlanObjectiveKind {
  kFair,  // balance speedups (U_p)
  kJct,   // minimise average job completion time (heSRPT / LAS weights)
};
// "fair" / "jct"; ParsePlanObjective is its inverse (nullopt = unknown).
std::string_view PlanObjectiveName(PlanObjectiveKind kind);
std::optional<PlanObjectiveKind> ParsePlanObjective(std::string_view name);

// jct: a restart's lost work is priced at no less than this multiple of the
// mean heSRPT weight (the objective above). Chosen on the Pollux workloads
// (planner mean JCT s, 8 workloads x 3 seeds, 1x / 2x load, docs/simulator.md):
// 1 -> 2740 / 5334, 1.25 -> 2747 / 5324, 1.4 -> 2719 / 5270, 1.5 -> 2755 /
// 5257, 2 -> 2774 at 1x, measured before the 0.01 x w_i clamp (with it,
// 1.4 -> 2705 / 5265); the landscape is flat within about 1%.
inline constexpr double kRestartWeightFloor = 1.4;

struct ClusterPlannerOptions {
  // The planner library defaults to fair; rescaled and the simulator take
  // EngineOptions::planner, whose default is stated in decision_engine.h.
  PlanObjectiveKind objective = PlanObjectiveKind::kFair;
  // Fairness exponent p of U_p: -1 (default) balances speedups, 0 is
  // proportional fairness (log), 1 maximises the total speedup.
  double fairness = -1;
  // Seconds over which a restart's cost is amortised (f = 1 - cost/horizon).
  double horizon_seconds = 600;
  // jct: the least remaining work, in seconds at min_replicas, a job is
  // assumed to have (a job past its declared size, or without any
  // service yet, still has some work left).
  double min_remaining_seconds = 60;
  // The exact DP runs for at most this many jobs (and never more than 40)...
  int exact_job_limit = 12;
  // ...and while its work (jobs x sizes x capacity cells) stays within this.
  // Instances of any job count up to 40 jobs also run exactly when the work
  // is below 1/16 of it. 0 forces the scalable method (used by tests).
  uint64_t exact_work_limit = 10'000'000;  // about 40 ms
};

struct PlannerJob {
  std::string job_id;
  // Sizes the job may run at. min 0 is read as 1 (0 means not running);
  // max < min means the job cannot run at all.
  uint32_t min_replicas = 1;
  uint32_t max_replicas = 1;      // already capped by exploration
  uint32_t gpus_per_replica = 1;  // 0 is read as 1
  int32_t priority = 0;           // higher wins
  bool preemptible = true;
  uint32_t current_replicas = 0;  // 0 = not running (waiting or suspended)
  bool suspended = false;         // was running and got suspended (wording)
  bool in_cooldown = false;
  double restart_cost_seconds = kDefaultRestartCostSeconds;
  // When it last started running; its registration time while waiting. Exact
  // ties suspend the most recently started job first.
  absl::Time started_at = absl::InfinitePast();
  // jct: samples left to process (total_samples - processed); nullopt =
  // unknown, then attained_samples stands in (least attained service).
  std::optional<double> remaining_samples;
  double attained_samples = 0;
  // jct aging: seconds the job has been waiting (0 while running).
  double waiting_seconds = 0;
  // jct: samples/s at min_replicas, to turn samples into seconds, when
  // `throughput` is only a shape (a per-job policy's ceiling); 0 = the
  // curve's own value at min_replicas.
  double samples_per_second_at_min = 0;
  // `throughput` is a per-job policy's ceiling drawn as a rising shape, not
  // predicted speeds: jct prices its restarts as w_i x (1 - f_i) x s_i,
  // without the floor or the return restart (see the objective above).
  bool curve_is_shape = false;
  // Index of its queue in PlanCluster's `queues` (ignored without queues);
  // out of range = a queue that is not defined: the job waits.
  uint32_t queue = 0;
  // Predicted samples/s for n = min_replicas..max_replicas (index n - min).
  // Sizes past the end repeat the last value (no gain, so the planner only
  // keeps a job there when it runs there now); values that are not finite
  // and positive count as no gain over min; an empty curve or an unusable
  // value at min means the job gains nothing from growing.
  std::vector<double> throughput;
  // GPU types (PlanClusterTypes only; PlanCluster ignores both): predicted
  // samples/s on each type, in the order of PlanClusterTypes' `types`, for
  // n = min_replicas..max_replicas as `throughput` is. An empty curve, or a
  // type past the end, is a type the job may not use. The curves are
  // absolute: a job's speedup on every type is measured against its
  // slowest allowed type at min_replicas.
  std::vector<std::vector<double>> throughput_by_type;
  uint32_t current_type = 0;  // the type it runs on, when current_replicas > 0
};

struct PlannedJob {
  uint32_t replicas = 0;
  BindingConstraint binding = BindingConstraint::kNone;
  std::string reason;           // one sentence
  uint32_t queue_position = 0;  // 1-based for jobs left at 0; else 0
  // Change of the level-4 objective from one replica more / one fewer
  // (0 where that size is not allowed: at max, at min, or not running).
  double value_one_more = 0;
  double value_one_fewer = 0;
  // PlanClusterTypes: the type it runs on (index in `types`), or for a job
  // left at 0 the type it runs on now or would start on. 0 otherwise.
  uint32_t gpu_type = 0;
};

// A queue in the plan (only with queues), in PlanCluster's queue order.
struct PlannedQueue {
  uint64_t in_use_gpus = 0;    // U_q
  uint64_t borrowed_gpus = 0;  // max(0, U_q - N_q)
  // Of its unused nominal GPUs, those other queues of its cohort use now
  // (the cohort's borrowed GPUs split between lenders in proportion to what
  // each may lend).
  uint64_t lent_gpus = 0;
  uint64_t guaranteed_gpus = 0;  // D_q (see "Queues")
  uint64_t wanted_gpus = 0;      // its jobs' plan alone in all it may hold
  uint32_t running_jobs = 0;
  uint32_t waiting_jobs = 0;  // its jobs planned at 0
};

struct ClusterPlan {
  std::vector<PlannedJob> jobs;      // input order
  std::vector<PlannedQueue> queues;  // PlanCluster's order; empty without queues
  uint64_t allocated_gpus = 0;
  double utility = 0;      // level-4 objective of the plan
  double upper_bound = 0;  // >= utility; equal when exact
  double gap = 0;          // (upper_bound - utility) / max(|upper_bound|, 1e-9)
  bool exact = false;      // the plan is optimal for the whole objective
  // PlanClusterTypes: GPUs planned per type, in `types` order.
  std::vector<uint64_t> allocated_gpus_by_type;
};

// Plans every job; capacity nullopt = unknown, unbounded. `slots`: the
// replicas per size class that fit on the nodes (see "Node slots" above;
// empty = no per-node information, the total alone bounds the plan).
// Entries with gpus_per_replica 0 are ignored; of duplicate classes the
// smallest count holds (the server refuses both).
// `queues`: see "Queues" (empty = one pool, as before queues existed).
ClusterPlan PlanCluster(std::span<const PlannerJob> jobs, std::optional<uint64_t> capacity,
                        const ClusterPlannerOptions& options = {},
                        std::span<const ReplicaSlots> slots = {},
                        std::span<const QueueSpec> queues = {});

// The lexicographic objective of an assignment, for tests and diagnostics.
// levels = [kept non-preemptible, then per priority (highest first) kept
// running and started waiting, then minus changed cooldown jobs]; the
// priorities are the distinct ones among `jobs`. utility is level 4. With
// queues, queue_levels = [kept non-preemptible, guarantee (1a)] and
// fair_share is level 1b; both compare before `levels`.
struct PlanObjective {
  std::vector<int64_t> queue_levels;
  double fair_share = 0;
  std::vector<int64_t> levels;
  double utility = 0;
};
PlanObjective EvaluatePlan(std::span<const PlannerJob> jobs, std::span<const uint32_t> replicas,
                           const ClusterPlannerOptions& options = {});
// With queues: the objective above, and whether the plan keeps the quota
// constraints and the capacity ("Queues").
struct QueuePlanObjective {
  PlanObjective objective;
  bool feasible = false;
};
QueuePlanObjective EvaluateQueuePlan(std::span<const PlannerJob> jobs,
                                     std::span<const uint32_t> replicas,
                                     std::optional<uint64_t> capacity,
                                     std::span<const QueueSpec> queues,
                                     const ClusterPlannerOptions& options = {});

// -1, 0 or 1 as a is worse than, equal to or better than b: queue levels
// exactly, fair share, levels exactly, then utility; the doubles within
// `relative_tolerance`.
int CompareObjectives(const PlanObjective& a, const PlanObjective& b,
                      double relative_tolerance = 1e-9);

// One kind of GPU (PlanClusterTypes): its name (e.g. the node label
// nvidia.com/gpu.product), its GPUs (nullopt = unbounded) and the replicas
// per size class its nodes hold (see "Node slots"; empty = the total only).
struct GpuTypeCapacity {
  std::string name;
  std::optional<uint64_t> total_gpus;
  std::vector<ReplicaSlots> slots;
};

// Plans type and size together: every job gets a type among those it may use
// (PlannerJob::throughput_by_type) and a size, with the types' GPUs and
// slots kept separately, maximising the same lexicographic objective as
// PlanCluster, where a job's speedup s_i is its samples/s on the chosen type
// over its samples/s at min_replicas on its slowest allowed type (Sia's
// normalisation, so a faster type counts as a larger speedup), and a change
// of type is a restart like a resize (restart factor; level 3 counts it as a
// change of a job in cooldown). A running job that moves to another type
// still counts as kept running (level 2).
//  * Small instances (ClusterPlannerOptions limits, with the work counted
//    over the product of the types' capacities) are solved exactly by a
//    multiple-choice knapsack DP over the GPUs used per type; exact = true
//    unless a type's slots cut the plan (then as below).
//  * Otherwise: each job is given a type (a running job its own; a waiting
//    job the fastest type with room for its minimum), each type is planned
//    with PlanCluster's solvers and slots, and jobs are moved between types
//    where the per-type prices of a GPU say the move gains (one round: a
//    second gained nothing on the benchmark); the better of the two plans
//    is kept. upper_bound is a Lagrangian bound on level 4 with one price
//    per type, over the jobs the plan runs on whichever types they may use,
//    so gap is an honest, if loose, measure of what the heuristic may leave.
// With `queues` (as PlanCluster's, "Queues"), a queue's quotas count its
// GPUs of every type together: the types are chosen as above, then each
// quota is split over the types (the nominal quota where the queue's jobs
// may use it, within what each type holds where it can be), and each type is
// planned with PlanCluster's queue solvers on its share of every quota
// (guarantees, cohorts, fair sharing),
// so every quota holds; exact = false (a queue's unused share on one type is
// not lent on another, and no job changes type to reach its guarantee), and
// the bound is the sum of the types' own, given the types chosen. queues in
// the plan are summed over the types. With one type, the plan is
// PlanCluster's on that type's curves, bit for bit, queues included.
ClusterPlan PlanClusterTypes(std::span<const PlannerJob> jobs,
                             std::span<const GpuTypeCapacity> types,
                             const ClusterPlannerOptions& options = {},
                             std::span<const QueueSpec> queues = {});
// The objective of a typed assignment (replicas and gpu_types per job, in
// input order; gpu_types is read only where replicas > 0), and whether it
// keeps every type's capacity and the jobs' allowed types. Slots are not
// checked. For tests and diagnostics.
QueuePlanObjective EvaluateTypedPlan(std::span<const PlannerJob> jobs,
                                     std::span<const uint32_t> replicas,
                                     std::span<const uint32_t> gpu_types,
                                     std::span<const GpuTypeCapacity> types,
                                     const ClusterPlannerOptions& options = {});

}  // namespace rescale

#endif  // RESCALE_CLUSTER_PLANNER_H_
