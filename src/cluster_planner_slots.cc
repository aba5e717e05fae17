// Cluster planner, node slots: the plan when the nodes can hold only so many
// replicas of each size (ReplicaSlots), on top of the total GPUs. The method
// and its limits are stated in rescale/cluster_planner.h ("Node slots"); in
// short: the plan without slots when it fits them, else the same with every
// job capped at its class's slots, else classes that still overrun their
// slots are planned alone within them and fixed, and the rest is planned
// again in the GPUs left, until no class overruns.
//
// Every step runs today's solvers (cluster_planner.cc's Solve) on a part of
// the problem: the same models, so the jct weights and the restart factors
// stay those of the whole cluster, with priorities and seniority re-ranked
// within the part (the exact DP packs them into bounded fields).
#include <algorithm>
#include <cstdint>
#include <functional>
#include <numeric>
#include <optional>
#include <utility>
#include <vector>

#include "cluster_planner_internal.h"

namespace rescale::planner_internal {

Problem Part(const Problem& p, std::span<const uint32_t> indices) {
  Problem q;
  q.objective = p.objective;
  q.fairness = p.fairness;
  q.horizon_seconds = p.horizon_seconds;
  q.models.reserve(indices.size());
  for (uint32_t i : indices) q.models.push_back(p.models[i]);
  for (const JobModel& m : q.models) q.priorities.push_back(m.job->priority);
  std::sort(q.priorities.begin(), q.priorities.end(), std::greater<>());
  q.priorities.erase(std::unique(q.priorities.begin(), q.priorities.end()), q.priorities.end());
  std::vector<uint32_t> by_seniority(q.models.size());
  std::iota(by_seniority.begin(), by_seniority.end(), 0);
  std::sort(by_seniority.begin(), by_seniority.end(),
            [&](uint32_t a, uint32_t b) { return q.models[a].seniority < q.models[b].seniority; });
  for (uint32_t rank = 0; rank < by_seniority.size(); ++rank) {
    q.models[by_seniority[rank]].seniority = rank;
  }
  for (JobModel& m : q.models) {
    m.level = static_cast<int>(std::lower_bound(q.priorities.begin(), q.priorities.end(),
                                                m.job->priority, std::greater<>()) -
                               q.priorities.begin());
  }
  return q;
}

namespace {

// Replicas planned per limited class: (class, replicas) for every limit.
std::vector<uint64_t> ClassUse(const Problem& p, std::span<const uint32_t> replicas,
                               const SlotLimits& limits) {
  std::vector<uint64_t> use(limits.limits.size(), 0);
  for (size_t i = 0; i < p.size(); ++i) {
    if (replicas[i] == 0) continue;
    const uint32_t g = p.models[i].gpus_per_replica;
    auto it = std::lower_bound(limits.limits.begin(), limits.limits.end(),
                               std::make_pair(g, uint32_t{0}));
    if (it != limits.limits.end() && it->first == g) use[it - limits.limits.begin()] += replicas[i];
  }
  return use;
}

bool Fits(const std::vector<uint64_t>& use, const SlotLimits& limits) {
  for (size_t k = 0; k < use.size(); ++k) {
    if (use[k] > limits.limits[k].second) return false;
  }
  return true;
}

}  // namespace

ClusterPlan PlanWithSlots(Problem p, std::optional<uint64_t> capacity,
                          const ClusterPlannerOptions& options,
                          std::span<const ReplicaSlots> slots) {
  SlotLimits limits;
  for (const ReplicaSlots& s : slots) {
    if (s.gpus_per_replica > 0) limits.limits.emplace_back(s.gpus_per_replica, s.replicas);
  }
  // Sorted by class, then count: of duplicates the first, the smallest, stays.
  std::sort(limits.limits.begin(), limits.limits.end());
  limits.limits.erase(std::unique(limits.limits.begin(), limits.limits.end(),
                                  [](const auto& a, const auto& b) { return a.first == b.first; }),
                      limits.limits.end());

  // Step 0: the plan without slots, returned as it is when it fits them.
  const Solution relaxed = Solve(p, capacity, options);
  if (Fits(ClassUse(p, relaxed.replicas, limits), limits)) return Finish(p, relaxed, capacity);

  // Step 1: no job of a limited class can run more replicas than its slots.
  const size_t n = p.size();
  std::vector<uint32_t> unlimited_hi(n);
  for (size_t i = 0; i < n; ++i) {
    JobModel& m = p.models[i];
    unlimited_hi[i] = m.hi;
    if (const std::optional<uint32_t> limit = limits.Of(m.gpus_per_replica)) {
      // hi < lo (the limit below min_replicas) means it cannot run.
      m.hi = std::min(m.hi, *limit);
      m.pinnable = m.cooldown && m.running && m.current >= m.lo && m.current <= m.hi;
    }
  }

  // Step 2: fix overrunning classes within their slots, plan the rest.
  std::vector<uint32_t> replicas(n, 0);
  std::vector<bool> fixed(n, false);
  uint64_t fixed_gpus = 0;
  Solution first;  // step 1's, for its exactness and bound
  bool any_fixed = false;
  for (;;) {
    std::vector<uint32_t> rest;
    for (uint32_t i = 0; i < n; ++i) {
      if (!fixed[i]) rest.push_back(i);
    }
    std::optional<uint64_t> left;
    if (capacity) left = *capacity - std::min(*capacity, fixed_gpus);
    const Problem part = Part(p, rest);
    const Solution solved = Solve(part, left, options);
    for (size_t k = 0; k < rest.size(); ++k) replicas[rest[k]] = solved.replicas[k];
    if (!any_fixed) {
      first.exact = solved.exact;
      first.bound = solved.bound;
      first.have_bound = solved.have_bound;
    }
    const std::vector<uint64_t> use = ClassUse(p, replicas, limits);
    if (Fits(use, limits)) break;
    for (size_t c = 0; c < use.size(); ++c) {
      const auto [g, limit] = limits.limits[c];
      if (use[c] <= limit) continue;  // fixed classes never overrun: solved within
      std::vector<uint32_t> members;
      for (uint32_t i : rest) {
        if (p.models[i].gpus_per_replica == g) members.push_back(i);
      }
      uint64_t room = uint64_t{limit} * g;
      if (left) room = std::min(room, *left);
      const Solution alone = Solve(Part(p, members), room, options);
      for (size_t k = 0; k < members.size(); ++k) {
        replicas[members[k]] = alone.replicas[k];
        fixed[members[k]] = true;
        fixed_gpus += p.models[members[k]].Gpus(alone.replicas[k]);
      }
      any_fixed = true;
    }
  }

  Solution combined;
  combined.replicas = std::move(replicas);
  // Only step 1 ran: the caps exclude no allowed plan, so the solver's
  // claim stands, and so does its bound. After step 2 no bound is known.
  if (!any_fixed) {
    combined.exact = first.exact;
    combined.bound = first.bound;
    combined.have_bound = first.have_bound;
  }
  // Explained on the problem as capped, except that a job the caps alone
  // keep from running is explained as the job it is (its max_replicas is
  // fine): ExplainSlots then says when the slots, not the GPUs, hold it back.
  Problem explained = p;
  for (size_t i = 0; i < n; ++i) {
    JobModel& m = explained.models[i];
    if (m.hi < m.lo && unlimited_hi[i] >= m.lo) m.hi = m.lo;
  }
  ClusterPlan plan = Finish(explained, combined, capacity);
  ExplainSlots(explained, combined.replicas, relaxed.replicas, unlimited_hi, limits, capacity,
               plan.allocated_gpus, plan.jobs);
  return plan;
}

}  // namespace rescale::planner_internal
