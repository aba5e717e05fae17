// Cluster planner with GPU types (PlanClusterTypes in rescale/cluster_planner.h):
// the typed problem, its objective, the exact DP over the GPUs used per
// type, and the entry point that picks the exact or the scalable method and
// explains the plan per type.
//
// Why per-type Problems. The objective is a sum over jobs of per-job vectors
// (levels 1-3 packed, level 4), and a job's vector at (t, n) is that of its
// model in type t's Problem: the same priorities, seniority and jct weights
// on every type (BuildProblem over all jobs), the curve and the restart of
// that type. So the exact DP is PlanCluster's multiple-choice knapsack with
// one dimension of capacity per type: a state is the cells used on each
// type, in mixed radix, and an option (t, n) adds n x gpus_per_replica /
// unit_t cells to digit t. It is exact for the same reason the 1-D DP is.
#include "cluster_planner_types.h"

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <optional>
#include <utility>
#include <vector>

namespace rescale {
namespace planner_internal {

TypedProblem BuildTypedProblem(std::span<const PlannerJob> jobs,
                               std::span<const GpuTypeCapacity> types,
                               const ClusterPlannerOptions& options) {
  TypedProblem x;
  x.jobs = jobs;
  x.types = types;
  x.problems.reserve(types.size());
  for (uint32_t t = 0; t < types.size(); ++t) {
    Problem p = BuildProblem(jobs, options, t);
    uint64_t all_at_max = 0;
    for (JobModel& m : p.models) {
      m.type_name = types[t].name;
      if (m.elsewhere) {
        const uint32_t from = m.job->current_type;
        m.moved_from = from < types.size() ? absl::string_view(types[from].name) : "another type";
      }
      if (m.CanRun()) all_at_max += m.Gpus(m.hi);
    }
    const std::optional<uint64_t>& total = types[t].total_gpus;
    x.capacity.push_back(total ? std::min(*total, all_at_max) : all_at_max);
    x.problems.push_back(std::move(p));
  }
  return x;
}

PlanObjective EvaluateTyped(const TypedProblem& x, const TypedAssignment& a) {
  PlanObjective out;
  if (x.problems.empty()) return out;
  const Problem& first = x.problems.front();
  out.levels.assign(2 + 2 * first.priorities.size(), 0);
  for (size_t i = 0; i < x.size(); ++i) {
    const uint32_t n = a.replicas[i];
    const uint32_t t = n > 0 ? a.types[i] : x.Home(i);
    const JobModel& m = x.Model(i, t);
    if (n > 0) {
      if (m.guarded) ++out.levels[0];
      ++out.levels[1 + 2 * m.level + (m.running ? 0 : 1)];
      out.utility += x.problems[t].Utility(i, n);
    }
    if (m.cooldown && !Unchanged(m, n)) --out.levels.back();
  }
  return out;
}

std::vector<uint32_t> Members(const TypedProblem& x, const TypedAssignment& a, uint32_t t) {
  std::vector<uint32_t> out;
  for (uint32_t i = 0; i < x.size(); ++i) {
    if (a.types[i] == t) out.push_back(i);
  }
  return out;
}

namespace {

// The exact DP, or nullopt when the instance is too large for it (the same
// limits as PlanCluster's, with the cells of all types multiplied).
std::optional<TypedAssignment> SolveTypesExactly(const TypedProblem& x,
                                                 const ClusterPlannerOptions& options) {
  const size_t jobs = x.size();
  const size_t k = x.types.size();
  if (jobs > kMaxExactJobs) return std::nullopt;
  std::vector<uint64_t> unit(k, 0), cells(k, 0), stride(k, 1);
  double states = 1;
  uint64_t option_count = 0;
  for (uint32_t t = 0; t < k; ++t) {
    for (const JobModel& m : x.problems[t].models) {
      if (!m.CanRun()) continue;
      unit[t] = std::gcd(unit[t], uint64_t{m.gpus_per_replica});
      option_count += m.hi - m.lo + 1;
    }
    unit[t] = std::max<uint64_t>(unit[t], 1);
    cells[t] = x.capacity[t] / unit[t];
    if (t > 0) stride[t] = stride[t - 1] * (cells[t - 1] + 1);
    states *= double(cells[t] + 1);
  }
  const double work = double(option_count + jobs) * states;
  const bool few_jobs = jobs <= size_t(std::max(0, options.exact_job_limit));
  const double limit = double(options.exact_work_limit);
  if (!((few_jobs && work <= limit) || work <= limit / 16) || states > double(1 << 22)) {
    return std::nullopt;
  }
  const std::optional<ScoreWeights> weights = MakeScoreWeights(x.problems.front());
  if (!weights) return std::nullopt;

  struct Option {
    uint32_t type, replicas;
    uint64_t offset;  // state index delta
    uint64_t cells;
    DpValue value;
  };
  const size_t width = size_t(states);
  std::vector<DpValue> best(width), next(width);
  std::vector<uint32_t> choice(jobs * width, 0);  // option index + 1; 0 = not running
  std::vector<std::vector<Option>> all(jobs);
  std::vector<uint64_t> digit(k);
  for (size_t j = 0; j < jobs; ++j) {
    std::vector<Option>& options_j = all[j];
    for (uint32_t t = 0; t < k; ++t) {
      const JobModel& m = x.Model(j, t);
      if (!m.CanRun()) continue;
      for (uint32_t r = m.lo; r <= m.hi && m.Gpus(r) / unit[t] <= cells[t]; ++r) {
        const uint64_t c = m.Gpus(r) / unit[t];
        options_j.push_back({t,
                             r,
                             c * stride[t],
                             c,
                             {OptionScore(*weights, m, r), x.problems[t].Utility(j, r),
                              SeniorityBit(m), m.Gpus(r)}});
      }
    }
    const int64_t off = OptionScore(*weights, x.Model(j, x.Home(j)), 0);
    uint32_t* row = &choice[j * width];
    std::fill(digit.begin(), digit.end(), 0);
    for (size_t s = 0; s < width; ++s) {
      DpValue top = best[s];
      top.score += off;
      uint32_t top_choice = 0;
      for (size_t o = 0; o < options_j.size(); ++o) {
        const Option& opt = options_j[o];
        if (opt.cells > digit[opt.type]) continue;
        const DpValue& base = best[s - opt.offset];
        DpValue cand{base.score + opt.value.score, base.utility + opt.value.utility,
                     base.seniority_mask | opt.value.seniority_mask, base.gpus + opt.value.gpus};
        if (Better(cand, top)) {
          top = cand;
          top_choice = uint32_t(o + 1);
        }
      }
      next[s] = top;
      row[s] = top_choice;
      // The next state's digits (odometer over the types' cells).
      for (size_t t = 0; t < k; ++t) {
        if (++digit[t] <= cells[t]) break;
        digit[t] = 0;
      }
    }
    best.swap(next);
  }
  TypedAssignment out;
  out.replicas.assign(jobs, 0);
  out.types.resize(jobs);
  for (size_t j = 0; j < jobs; ++j) out.types[j] = x.WaitType(j);
  uint64_t s = width - 1;
  for (size_t j = jobs; j-- > 0;) {
    const uint32_t c = choice[j * width + s];
    if (c == 0) continue;
    const Option& opt = all[j][c - 1];
    out.replicas[j] = opt.replicas;
    out.types[j] = opt.type;
    s -= opt.offset;
  }
  return out;
}

// Whether type t's part of the plan fits its slots.
bool FitsSlots(const TypedProblem& x, const TypedAssignment& a, uint32_t t) {
  for (const ReplicaSlots& slot : x.types[t].slots) {
    if (slot.gpus_per_replica == 0) continue;
    uint64_t used = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      if (a.replicas[i] > 0 && a.types[i] == t &&
          x.Model(i, t).gpus_per_replica == slot.gpus_per_replica) {
        used += a.replicas[i];
      }
    }
    if (used > slot.replicas) return false;
  }
  return true;
}

}  // namespace
}  // namespace planner_internal

using planner_internal::TypedAssignment;
using planner_internal::TypedProblem;

ClusterPlan PlanClusterTypes(std::span<const PlannerJob> jobs,
                             std::span<const GpuTypeCapacity> types,
                             const ClusterPlannerOptions& options,
                             std::span<const QueueSpec> queues) {
  namespace pi = planner_internal;
  if (types.empty()) {
    // Nothing to run on: every job waits, explained as PlanCluster would.
    ClusterPlan plan = PlanCluster(jobs, uint64_t{0}, options, {}, queues);
    return plan;
  }
  const TypedProblem x = pi::BuildTypedProblem(jobs, types, options);
  std::optional<uint64_t> total = uint64_t{0};
  for (const GpuTypeCapacity& type : types) {
    if (!type.total_gpus) total.reset();
    if (total) *total += *type.total_gpus;
  }
  const bool with_queues = pi::QueuesMatter(queues, jobs, total);
  if (types.size() == 1) {
    // One type is PlanCluster's problem on that type's curves.
    const pi::Problem& p = x.problems.front();
    ClusterPlan plan =
        with_queues ? pi::PlanWithQueues(p, types[0].total_gpus, options, types[0].slots, queues)
        : types[0].slots.empty()
            ? pi::Finish(p, pi::Solve(p, types[0].total_gpus, options), types[0].total_gpus)
            : pi::PlanWithSlots(p, types[0].total_gpus, options, types[0].slots);
    plan.allocated_gpus_by_type = {plan.allocated_gpus};
    return plan;
  }

  TypedAssignment a;
  bool exact = false;
  double bound = 0;
  if (std::optional<TypedAssignment> dp = pi::SolveTypesExactly(x, options)) {
    exact = true;
    for (uint32_t t = 0; t < types.size() && exact; ++t) exact = pi::FitsSlots(x, *dp, t);
    if (exact) a = std::move(*dp);
  }
  if (!exact) {
    pi::TypedScaleSolution s = pi::SolveTypesAtScale(x, options);
    a = std::move(s.assignment);
    bound = s.upper_bound;
  }

  if (with_queues) {
    // Jobs left at 0 by the exact DP are planned on the type they wait on.
    for (size_t i = 0; i < x.size(); ++i) {
      if (a.replicas[i] == 0) a.types[i] = x.WaitType(i);
    }
    return pi::PlanTypesWithQueues(x, a, options, queues);
  }

  ClusterPlan plan;
  plan.jobs.resize(x.size());
  plan.allocated_gpus_by_type.assign(types.size(), 0);
  for (uint32_t t = 0; t < types.size(); ++t) {
    const std::vector<uint32_t> members = pi::Members(x, a, t);
    if (members.empty()) continue;
    const pi::Problem part = pi::Part(x.problems[t], members);
    std::vector<uint32_t> replicas;
    uint64_t used = 0;
    for (uint32_t i : members) {
      replicas.push_back(a.replicas[i]);
      used += x.Model(i, t).Gpus(a.replicas[i]);
    }
    const std::vector<PlannedJob> explained =
        pi::Explain(part, replicas, types[t].total_gpus, used);
    for (size_t k = 0; k < members.size(); ++k) {
      plan.jobs[members[k]] = explained[k];
      plan.jobs[members[k]].gpu_type = t;
    }
    plan.allocated_gpus_by_type[t] = used;
    plan.allocated_gpus += used;
  }
  plan.exact = exact;
  plan.utility = pi::EvaluateTyped(x, a).utility;
  plan.upper_bound = exact ? plan.utility : std::max(bound, plan.utility);
  const double diff = plan.upper_bound - plan.utility;
  plan.gap = diff > 0 ? diff / std::max(std::abs(plan.upper_bound), 1e-9) : 0;
  return plan;
}

QueuePlanObjective EvaluateTypedPlan(std::span<const PlannerJob> jobs,
                                     std::span<const uint32_t> replicas,
                                     std::span<const uint32_t> gpu_types,
                                     std::span<const GpuTypeCapacity> types,
                                     const ClusterPlannerOptions& options) {
  QueuePlanObjective out;
  const TypedProblem x = planner_internal::BuildTypedProblem(jobs, types, options);
  TypedAssignment a;
  a.replicas.assign(jobs.size(), 0);
  a.types.assign(jobs.size(), 0);
  out.feasible = !types.empty() ||
                 std::all_of(replicas.begin(), replicas.end(), [](uint32_t r) { return r == 0; });
  if (types.empty()) return out;
  std::vector<uint64_t> used(types.size(), 0);
  for (size_t i = 0; i < jobs.size(); ++i) {
    a.replicas[i] = i < replicas.size() ? replicas[i] : 0;
    a.types[i] = i < gpu_types.size() ? gpu_types[i] : 0;
    if (a.replicas[i] == 0) {
      a.types[i] = x.Home(i);
      continue;
    }
    if (a.types[i] >= types.size()) {
      out.feasible = false;
      a.replicas[i] = 0;
      a.types[i] = x.Home(i);
      continue;
    }
    const planner_internal::JobModel& m = x.Model(i, a.types[i]);
    if (!m.CanRun() || a.replicas[i] < m.lo || a.replicas[i] > jobs[i].max_replicas) {
      out.feasible = false;
    }
    used[a.types[i]] += m.Gpus(a.replicas[i]);
  }
  for (uint32_t t = 0; t < types.size(); ++t) {
    if (types[t].total_gpus && used[t] > *types[t].total_gpus) out.feasible = false;
  }
  out.objective = planner_internal::EvaluateTyped(x, a);
  return out;
}

}  // namespace rescale
