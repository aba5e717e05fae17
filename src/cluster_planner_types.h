// Internal to the cluster planner, not installed: the typed problem that
// PlanClusterTypes works on (one Problem per GPU type over all the jobs),
// shared by its two files:
//   cluster_planner_types.cc        model, objective, exact DP, entry point
//   cluster_planner_types_scale.cc  assignment rounds and the per-type bound
//   cluster_planner_types_queues.cc queues: quotas split over the types
#ifndef RESCALE_SRC_CLUSTER_PLANNER_TYPES_H_
#define RESCALE_SRC_CLUSTER_PLANNER_TYPES_H_

#include <cstdint>
#include <span>
#include <vector>

#include "cluster_planner_internal.h"

namespace rescale::planner_internal {

struct TypedProblem {
  std::span<const PlannerJob> jobs;
  std::span<const GpuTypeCapacity> types;
  // problems[t] holds every job as seen on type t (BuildProblem with t), so
  // priorities, seniority and jct weights are those of the whole cluster.
  std::vector<Problem> problems;
  // Per type: its GPUs, bounded by every job allowed on it at its largest
  // size (an unbounded type holds them all).
  std::vector<uint64_t> capacity;

  size_t size() const { return jobs.size(); }
  // The type job i is judged by when it does not run: the one it runs on now,
  // else type 0 (level 3 then counts it unchanged only if it stays at 0).
  uint32_t Home(size_t i) const {
    const PlannerJob& job = jobs[i];
    return job.current_replicas > 0 && job.current_type < types.size() ? job.current_type : 0;
  }
  const JobModel& Model(size_t i, uint32_t t) const { return problems[t].models[i]; }
  // The type a job left at 0 is reported and explained on: the one it runs
  // on if it may still use it, else the type it may use where it is
  // fastest at its minimum, else (it may use none) its home.
  uint32_t WaitType(size_t i) const {
    const uint32_t home = Home(i);
    if (Model(i, home).running && Model(i, home).allowed) return home;
    int best = -1;
    double speed = 0;
    for (uint32_t t = 0; t < types.size(); ++t) {
      const JobModel& m = Model(i, t);
      if (!m.allowed) continue;
      if (best < 0 || m.Throughput(m.lo) > speed) best = int(t), speed = m.Throughput(m.lo);
    }
    return best >= 0 ? uint32_t(best) : home;
  }
};

// A typed plan: replicas and type per job (type read only where replicas > 0).
struct TypedAssignment {
  std::vector<uint32_t> replicas;
  std::vector<uint32_t> types;
};

TypedProblem BuildTypedProblem(std::span<const PlannerJob> jobs,
                               std::span<const GpuTypeCapacity> types,
                               const ClusterPlannerOptions& options);
PlanObjective EvaluateTyped(const TypedProblem& x, const TypedAssignment& a);
// The indices of the jobs assigned to type t, in input order.
std::vector<uint32_t> Members(const TypedProblem& x, const TypedAssignment& a, uint32_t t);

// The scalable method (cluster_planner_types_scale.cc): the best assignment
// its rounds found, and a Lagrangian upper bound on level 4.
struct TypedScaleSolution {
  TypedAssignment assignment;
  double upper_bound = 0;
};
TypedScaleSolution SolveTypesAtScale(const TypedProblem& x, const ClusterPlannerOptions& options);

// Queues (cluster_planner_types_queues.cc). Every queue's quotas split over
// the types, per type in `queues` order: the nominal quota placed where the
// queue's jobs (a.types) may use it, within the types' GPUs, the rest where
// GPUs are left; borrowing limits as its jobs, lending as its nominal.
std::vector<std::vector<QueueSpec>> SplitQueuesOverTypes(const TypedProblem& x,
                                                         const TypedAssignment& a,
                                                         std::span<const QueueSpec> queues);
// The plan with the types of `a` and each type planned with its share of
// every quota (PlanWithQueues): jobs explained, queues' use summed over the
// types; exact = false, the bound the sum of the types' own.
ClusterPlan PlanTypesWithQueues(const TypedProblem& x, const TypedAssignment& a,
                                const ClusterPlannerOptions& options,
                                std::span<const QueueSpec> queues);

}  // namespace rescale::planner_internal

#endif  // RESCALE_SRC_CLUSTER_PLANNER_TYPES_H_
