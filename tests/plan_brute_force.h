// Test helpers shared by the brute-force tests (priors_test.cc,
// point_curve_test.cc, cluster_planner_queues_test.cc): the instance a plan solved, as the planner
// sees it from what the server reports, and the best objective over every plan.
#ifndef RESCALE_TESTS_PLAN_BRUTE_FORCE_H_
#define RESCALE_TESTS_PLAN_BRUTE_FORCE_H_

#include <catch2/catch.hpp>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "rescale/cluster_planner.h"
#include "rescale/types.h"

namespace rescale::testing {

// A registered job as the planner saw it while the capacity is known (its
// range is min to max), with throughput(n) for n = min..max.
inline PlannerJob PlannerJobOf(const JobView& view,
                               const std::function<double(uint32_t)>& throughput) {
  PlannerJob job;
  job.job_id = view.spec.job_id;
  job.min_replicas = view.spec.min_replicas;
  job.max_replicas = view.spec.max_replicas;
  job.gpus_per_replica = view.spec.gpus_per_replica;
  job.priority = view.spec.priority;
  job.restart_cost_seconds = view.spec.restart_cost_seconds;
  job.started_at = view.status.registered_at;
  for (uint32_t n = job.min_replicas; n <= job.max_replicas; ++n)
    job.throughput.push_back(throughput(n));
  return job;
}

// Calls visit(replicas) for every assignment of {0} U [min, max] to each
// job, the first job's size changing fastest.
template <typename Visit>
void ForEachAssignment(const std::vector<PlannerJob>& jobs, Visit visit) {
  std::vector<uint32_t> n(jobs.size(), 0);
  while (true) {
    visit(static_cast<const std::vector<uint32_t>&>(n));
    size_t i = 0;
    for (; i < jobs.size(); ++i) {
      n[i] = n[i] == 0 ? jobs[i].min_replicas : n[i] + 1;
      if (n[i] <= jobs[i].max_replicas) break;
      n[i] = 0;
    }
    if (i == jobs.size()) return;
  }
}

// The best objective over every assignment of {0} U [min, max] to each job
// within the capacity, and the first assignment (in enumeration order) that
// reaches it.
struct BruteForceOptimum {
  PlanObjective value;
  std::vector<uint32_t> replicas;
};
inline BruteForceOptimum BruteForce(const std::vector<PlannerJob>& jobs, uint64_t capacity,
                                    const ClusterPlannerOptions& options) {
  std::optional<PlanObjective> best;
  std::vector<uint32_t> best_replicas;
  ForEachAssignment(jobs, [&](const std::vector<uint32_t>& n) {
    uint64_t gpus = 0;
    for (size_t i = 0; i < jobs.size(); ++i) gpus += uint64_t{n[i]} * jobs[i].gpus_per_replica;
    if (gpus > capacity) return;
    const PlanObjective value = EvaluatePlan(jobs, n, options);
    if (!best || CompareObjectives(value, *best) > 0) {
      best = value;
      best_replicas = n;
    }
  });
  return {*best, best_replicas};
}

}  // namespace rescale::testing

#endif  // RESCALE_TESTS_PLAN_BRUTE_FORCE_H_
