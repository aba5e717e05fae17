// Cluster planner (rescale/cluster_planner.h): the lexicographic objective,
// the three solvers that optimise it, and the per-job explanations.
//
// Why the objective decomposes. Every job's choice n_i contributes a vector
//   [kept non-preemptible, kept-running / started-waiting at its priority,
//    unchanged-in-cooldown, U_p(f_i s_i)]
// and the objective is the sum of these vectors compared lexicographically
// (level 3 counted as "cooldown jobs left unchanged", which orders plans the
// same way as "minus changed ones"). Lexicographic order is a total order
// compatible with addition (a >= b implies a + c >= b + c), so anything that
// is exact for a knapsack with additive scalar values is exact here too.
//
// The solvers live in their own files, each with the argument for why it is
// exact where it claims to be: solvers 1 (separable) and 2 (exact DP) in
// cluster_planner_exact.cc, solver 3 (scalable) in cluster_planner_scale.cc,
// the explanations in cluster_planner_explain.cc. This file builds the
// sanitised problem, evaluates the objective and picks the solver.
#include "rescale/cluster_planner.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <numeric>
#include <optional>
#include <utility>
#include <vector>

#include "cluster_planner_internal.h"
#include "rescale/job_rules.h"

namespace rescale {

std::string_view PlanObjectiveName(PlanObjectiveKind kind) {
  return kind == PlanObjectiveKind::kJct ? "jct" : "fair";
}

std::optional<PlanObjectiveKind> ParsePlanObjective(std::string_view name) {
  if (name == "fair") return PlanObjectiveKind::kFair;
  if (name == "jct") return PlanObjectiveKind::kJct;
  return std::nullopt;
}

namespace planner_internal {
namespace {

// Samples/s of a running job where it runs now: on its curve, or with GPU
// types, on the type it runs on (the same on every type's problem).
double CurrentSpeed(const JobModel& m) {
  if (!m.elsewhere) return m.Throughput(m.current);
  const PlannerJob& job = *m.job;
  if (job.current_type < job.throughput_by_type.size()) {
    const std::vector<double>& c = job.throughput_by_type[job.current_type];
    const size_t k = job.current_replicas - std::min(job.current_replicas, job.min_replicas);
    if (!c.empty()) {
      const double v = c[std::min(k, c.size() - 1)];
      if (v > 0 && std::isfinite(v)) return v;
    }
  }
  return m.base_throughput;
}

// jct: each job's remaining work in seconds at its smallest size, D_i (see
// cluster_planner.h), and from the ranks of D_i the heSRPT weights.
void SetCompletionTimeWeights(Problem& p, const ClusterPlannerOptions& options) {
  const size_t n = p.size();
  if (n == 0) return;
  const double floor_seconds = std::max(0.0, options.min_remaining_seconds);
  std::vector<double> remaining(n);
  for (size_t i = 0; i < n; ++i) {
    JobModel& m = p.models[i];
    const PlannerJob& job = *m.job;
    // Samples/s at min_replicas; the curve gives the other sizes relative to it.
    const double rate_at_min =
        job.samples_per_second_at_min > 0 ? job.samples_per_second_at_min : m.base_throughput;
    const double work = job.remaining_samples ? *job.remaining_samples : job.attained_samples;
    double seconds = std::isfinite(work) ? std::max(0.0, work) / rate_at_min : 0;
    if (!m.running) seconds -= std::max(0.0, job.waiting_seconds);
    remaining[i] = std::max(seconds, floor_seconds);
    // A job about to finish never recoups a restart: the restart is weighed
    // over what is left of it at its current size, if that is shorter.
    if (job.remaining_samples && m.running) {
      const double rate = rate_at_min * CurrentSpeed(m) / m.base_throughput;
      const double left = std::max(0.0, *job.remaining_samples) / rate;
      m.restart_horizon_seconds = std::min(p.horizon_seconds, left);
      m.restart_factor = RestartFactor(job.restart_cost_seconds, m.restart_horizon_seconds);
    }
  }
  // Rank 1 = the most remaining work; equal D_i share the rank of the
  // first of them so ties weigh the same whatever the input order.
  std::vector<uint32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](uint32_t a, uint32_t b) { return remaining[a] > remaining[b]; });
  constexpr double c = 2;
  const double jobs = static_cast<double>(n);
  size_t rank = 0;
  for (size_t k = 0; k < n; ++k) {
    if (k == 0 || remaining[order[k]] != remaining[order[k - 1]]) rank = k + 1;
    const double share = std::pow(rank / jobs, c) - std::pow((rank - 1) / jobs, c);
    p.models[order[k]].weight = std::pow(share, 1 / c);
  }
  // A restart idles GPUs that any job could have used, so what it loses is
  // priced at no less than a typical job's weight (cluster_planner.h).
  double mean_weight = 0;
  for (const JobModel& m : p.models) mean_weight += m.weight / jobs;
  for (JobModel& m : p.models) {
    // A shape is not speeds: r_i = w_i and no return restart.
    m.restart_weight =
        m.job->curve_is_shape ? m.weight : std::max(m.weight, kRestartWeightFloor * mean_weight);
    m.return_restart = !m.job->curve_is_shape;
  }
}

}  // namespace

namespace {

// With GPU types: the curve of `job` on type t, nullptr if it may not use t.
const std::vector<double>* TypeCurve(const PlannerJob& job, uint32_t t) {
  if (t >= job.throughput_by_type.size() || job.throughput_by_type[t].empty()) return nullptr;
  return &job.throughput_by_type[t];
}

// A curve's usable value at index k, or 0.
double Usable(const std::vector<double>& curve, size_t k) {
  return k < curve.size() && curve[k] > 0 && std::isfinite(curve[k]) ? curve[k] : 0;
}

}  // namespace

Problem BuildProblem(std::span<const PlannerJob> jobs, const ClusterPlannerOptions& options,
                     std::optional<uint32_t> gpu_type) {
  Problem p;
  p.jobs = jobs;
  p.objective = options.objective;
  p.fairness = std::isfinite(options.fairness) ? options.fairness : -1;
  p.horizon_seconds = options.horizon_seconds;
  const size_t n = jobs.size();
  for (const PlannerJob& job : jobs) p.priorities.push_back(job.priority);
  std::sort(p.priorities.begin(), p.priorities.end(), std::greater<>());
  p.priorities.erase(std::unique(p.priorities.begin(), p.priorities.end()), p.priorities.end());

  std::vector<uint32_t> by_age(n);
  std::iota(by_age.begin(), by_age.end(), 0);
  // Ties in started_at (jobs registered together) are broken by job id.
  // The engine passes its jobs ordered by id, and then the index order is
  // the id order: one pass to check it spares the sort a string comparison
  // per tie.
  const bool ordered_by_id =
      std::is_sorted(jobs.begin(), jobs.end(),
                     [](const PlannerJob& a, const PlannerJob& b) { return a.job_id < b.job_id; });
  std::sort(by_age.begin(), by_age.end(), [&](uint32_t a, uint32_t b) {
    if (jobs[a].started_at != jobs[b].started_at) return jobs[a].started_at < jobs[b].started_at;
    if (!ordered_by_id && jobs[a].job_id != jobs[b].job_id) return jobs[a].job_id < jobs[b].job_id;
    return a < b;
  });

  p.models.resize(n);
  for (uint32_t rank = 0; rank < n; ++rank) p.models[by_age[rank]].seniority = rank;
  const double horizon = options.horizon_seconds;
  for (size_t i = 0; i < n; ++i) {
    const PlannerJob& job = jobs[i];
    JobModel& m = p.models[i];
    m.job = &job;
    m.lo = std::max<uint32_t>(job.min_replicas, 1);
    m.gpus_per_replica = std::max<uint32_t>(job.gpus_per_replica, 1);
    m.current = job.current_replicas;
    m.level = static_cast<int>(
        std::lower_bound(p.priorities.begin(), p.priorities.end(), job.priority, std::greater<>()) -
        p.priorities.begin());
    m.running = m.current > 0;
    m.guarded = m.running && !job.preemptible;
    m.cooldown = job.in_cooldown;
    // The same factor the per-job policies use to judge a restart.
    m.restart_horizon_seconds = horizon;
    m.restart_factor = RestartFactor(job.restart_cost_seconds, horizon);
    const size_t base_index = m.lo - std::min(m.lo, job.min_replicas);
    m.curve = &job.throughput;
    double base = Usable(job.throughput, base_index);
    bool allowed = true;
    if (gpu_type) {
      // Speedups over the slowest allowed type at min (Sia's normalisation);
      // a type without a usable value there gains nothing over it.
      const std::vector<double>* own = TypeCurve(job, *gpu_type);
      double slowest = 0;
      for (uint32_t t = 0; t < job.throughput_by_type.size(); ++t) {
        const std::vector<double>* c = TypeCurve(job, t);
        const double v = c ? Usable(*c, base_index) : 0;
        if (v > 0 && (slowest == 0 || v < slowest)) slowest = v;
      }
      static const std::vector<double> kNone;
      allowed = own != nullptr;
      m.curve = own ? own : &kNone;
      base = slowest;
      m.elsewhere = m.running && job.current_type != *gpu_type;
      if (m.elsewhere) m.current = 0;
    }
    if (base > 0) {
      m.base_throughput = base;
    } else {
      m.flat = true;
      m.base_throughput = 1;
    }
    // Sizes past the end of the curve gain nothing over its last point, so
    // they are only ever worth their current size (no restart): the search
    // stops there, which also bounds the work by the curves' length.
    const uint64_t predicted =
        m.flat || base_index >= m.curve->size() ? 1 : m.curve->size() - base_index;
    const uint64_t useful = std::max<uint64_t>(m.lo + predicted - 1, m.current);
    m.hi = static_cast<uint32_t>(std::min<uint64_t>(job.max_replicas, useful));
    if (!allowed) m.hi = 0;
    m.allowed = allowed;
    m.pinnable = m.cooldown && m.running && m.current >= m.lo && m.current <= m.hi;
  }
  if (p.objective == PlanObjectiveKind::kJct) SetCompletionTimeWeights(p, options);
  return p;
}

PlanObjective Evaluate(const Problem& p, std::span<const uint32_t> replicas) {
  PlanObjective out;
  out.levels.assign(2 + 2 * p.priorities.size(), 0);
  for (size_t i = 0; i < p.size(); ++i) {
    const JobModel& m = p.models[i];
    const uint32_t n = i < replicas.size() ? replicas[i] : 0;
    if (n > 0) {
      if (m.guarded) ++out.levels[0];
      ++out.levels[1 + 2 * m.level + (m.running ? 0 : 1)];
      out.utility += p.Utility(i, n);
    }
    if (m.cooldown && !Unchanged(m, n)) --out.levels.back();
  }
  return out;
}

}  // namespace planner_internal

using planner_internal::BuildProblem;
using planner_internal::Evaluate;
using planner_internal::Problem;

namespace planner_internal {

Solution Solve(const Problem& p, std::optional<uint64_t> capacity,
               const ClusterPlannerOptions& options) {
  uint64_t everything_at_max = 0;
  uint64_t unit = 0;
  for (const JobModel& m : p.models) {
    if (!m.CanRun()) continue;
    everything_at_max += m.Gpus(m.hi);
    unit = std::gcd(unit, uint64_t{m.gpus_per_replica});
  }

  Solution out;
  if (!capacity || *capacity >= everything_at_max) {
    out.replicas = SolveSeparable(p);
    out.exact = true;
  } else {
    const uint64_t cells = *capacity / std::max<uint64_t>(unit, 1);
    uint64_t options_count = 0;
    for (const JobModel& m : p.models) options_count += 1 + (m.CanRun() ? m.hi - m.lo + 1 : 0);
    const double work = double(options_count) * double(cells + 1);
    const bool few_jobs =
        p.size() <= std::min<size_t>(kMaxExactJobs, size_t(std::max(0, options.exact_job_limit)));
    const bool small =
        p.size() <= kMaxExactJobs && ((few_jobs && work <= double(options.exact_work_limit)) ||
                                      work <= double(options.exact_work_limit) / 16);
    std::optional<ScoreWeights> weights;
    if (small) weights = MakeScoreWeights(p);
    if (weights) {
      out.replicas = SolveExactDp(p, *weights, cells, std::max<uint64_t>(unit, 1));
      out.exact = true;
    } else {
      ScaleSolution solution = SolveAtScale(p, *capacity);
      out.replicas = std::move(solution.replicas);
      out.bound = solution.upper_bound;
      out.have_bound = true;
    }
  }
  return out;
}

ClusterPlan Finish(const Problem& p, const Solution& solution, std::optional<uint64_t> capacity) {
  ClusterPlan plan;
  plan.exact = solution.exact;
  const std::vector<uint32_t>& replicas = solution.replicas;
  for (size_t i = 0; i < p.size(); ++i) plan.allocated_gpus += p.models[i].Gpus(replicas[i]);
  plan.utility = Evaluate(p, replicas).utility;
  plan.upper_bound = solution.have_bound ? std::max(solution.bound, plan.utility) : plan.utility;
  const double diff = plan.upper_bound - plan.utility;
  plan.gap = diff > 0 ? diff / std::max(std::abs(plan.upper_bound), 1e-9) : 0;
  plan.jobs = Explain(p, replicas, capacity, plan.allocated_gpus);
  return plan;
}

}  // namespace planner_internal

ClusterPlan PlanCluster(std::span<const PlannerJob> jobs, std::optional<uint64_t> capacity,
                        const ClusterPlannerOptions& options, std::span<const ReplicaSlots> slots,
                        std::span<const QueueSpec> queues) {
  Problem p = BuildProblem(jobs, options);
  if (planner_internal::QueuesMatter(queues, jobs, capacity)) {
    return planner_internal::PlanWithQueues(std::move(p), capacity, options, slots, queues);
  }
  // Without per-node information the plan is exactly the one before slots
  // existed; with it, PlanWithSlots starts from that plan too and returns it
  // unchanged whenever it already fits the slots.
  if (slots.empty())
    return planner_internal::Finish(p, planner_internal::Solve(p, capacity, options), capacity);
  return planner_internal::PlanWithSlots(std::move(p), capacity, options, slots);
}

PlanObjective EvaluatePlan(std::span<const PlannerJob> jobs, std::span<const uint32_t> replicas,
                           const ClusterPlannerOptions& options) {
  return Evaluate(BuildProblem(jobs, options), replicas);
}

int CompareObjectives(const PlanObjective& a, const PlanObjective& b, double relative_tolerance) {
  auto compare = [&](double x, double y) {
    const double scale = std::max({1.0, std::abs(x), std::abs(y)});
    if (std::abs(x - y) <= relative_tolerance * scale) return 0;
    return x < y ? -1 : 1;
  };
  if (a.queue_levels != b.queue_levels) return a.queue_levels < b.queue_levels ? -1 : 1;
  if (int c = compare(a.fair_share, b.fair_share); c != 0) return c;
  if (a.levels != b.levels) return a.levels < b.levels ? -1 : 1;
  return compare(a.utility, b.utility);
}

}  // namespace rescale
