// Cluster planner with GPU types and queues (PlanClusterTypes given queues
// that matter): a queue's quotas count its GPUs of every type together.
//
// How. The types are chosen as without queues (the exact DP or the rounds
// of cluster_planner_types_scale.cc). Then each queue's nominal quota is
// placed on the types where its jobs are, at most what they may use there
// and, over all queues, at most what each type holds where that can be had
// (PlaceNominal); what is left goes where GPUs are left. Borrowing limits
// are split as the queue's jobs are, lending limits as its nominal quota.
// Each type is then planned by PlanCluster's queue solvers on its share of
// every quota: guarantees, borrowing within cohorts, fair sharing, as on a
// cluster of one type.
//
// Why every quota holds. Each type's plan keeps its shares, and the shares
// sum to the quotas: U_q = sum_t U_qt <= sum_t (N_qt + L_qt) = N_q + L_q for
// borrowing limit L, a queue without a cohort holds at most sum_t N_qt =
// N_q, and what a cohort's queues borrow on a type is what its members leave
// unused on that type, so at most what they leave unused in all.
//
// What it gives up, so the plan is not exact: a queue's unused share on one
// type is not lent on another, and no job changes type to reach its queue's
// guarantee (the types were chosen before the quotas were looked at).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <span>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cluster_planner_types.h"

namespace rescale::planner_internal {
namespace {

// `total` split in proportion to `weights` (to `fallback` when the weights
// sum to 0), by largest remainders, so the parts sum to `total` exactly.
std::vector<uint64_t> Split(uint64_t total, std::span<const double> weights,
                            std::span<const double> fallback) {
  const double sum = std::accumulate(weights.begin(), weights.end(), 0.0);
  const std::span<const double> w = sum > 0 ? weights : fallback;
  const double w_sum = sum > 0 ? sum : std::accumulate(w.begin(), w.end(), 0.0);
  std::vector<uint64_t> parts(w.size(), 0);
  if (w.empty() || !(w_sum > 0)) {
    if (!parts.empty()) parts[0] = total;
    return parts;
  }
  std::vector<double> remainder(w.size());
  uint64_t given = 0;
  for (size_t t = 0; t < w.size(); ++t) {
    const double exact = double(total) * (w[t] / w_sum);
    parts[t] = static_cast<uint64_t>(std::floor(exact));
    remainder[t] = exact - double(parts[t]);
    given += parts[t];
  }
  std::vector<size_t> order(w.size());
  std::iota(order.begin(), order.end(), 0);
  // Ties to the lower index, so the split is deterministic.
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return remainder[a] > remainder[b]; });
  for (size_t k = 0; given < total; k = (k + 1) % order.size(), ++given) ++parts[order[k]];
  return parts;
}

// Each queue's nominal quota placed on the types as a flow: queue q puts at
// most demand[q][t] on type t, and type t takes at most gpus[t]. The most
// that can be placed is (a maximum flow, by augmenting paths that may move
// another queue's share to a type where it also has jobs), so the
// guarantees on a type add up to more than it holds only when they must.
struct NominalPlacement {
  std::vector<std::vector<uint64_t>> flow;  // [queue][type]
  std::vector<uint64_t> left;               // per queue, not placed
  std::vector<uint64_t> room;               // per type, not taken
};
NominalPlacement PlaceNominal(const std::vector<uint64_t>& nominal,
                              const std::vector<std::vector<uint64_t>>& demand,
                              const std::vector<uint64_t>& gpus) {
  const size_t qs = nominal.size(), k = gpus.size();
  NominalPlacement out{std::vector<std::vector<uint64_t>>(qs, std::vector<uint64_t>(k, 0)), nominal,
                       gpus};
  // Start as the queue's jobs are spread (each type's part of what they may
  // use), each type's total cut to what it holds: a queue keeps a share on
  // every type its jobs run on. The augmenting paths then place the rest.
  for (size_t q = 0; q < qs; ++q) {
    const uint64_t wants = std::accumulate(demand[q].begin(), demand[q].end(), uint64_t{0});
    if (wants == 0) continue;
    const double placed = double(std::min(nominal[q], wants));
    for (size_t t = 0; t < k; ++t)
      out.flow[q][t] = static_cast<uint64_t>(placed * double(demand[q][t]) / double(wants));
  }
  for (size_t t = 0; t < k; ++t) {
    uint64_t taken = 0;
    for (size_t q = 0; q < qs; ++q) taken += out.flow[q][t];
    if (taken > gpus[t]) {
      const double cut = double(gpus[t]) / double(taken);
      taken = 0;
      for (size_t q = 0; q < qs; ++q) {
        out.flow[q][t] = static_cast<uint64_t>(double(out.flow[q][t]) * cut);
        taken += out.flow[q][t];
      }
    }
    out.room[t] = gpus[t] - taken;
  }
  for (size_t q = 0; q < qs; ++q) {
    for (size_t t = 0; t < k; ++t) out.left[q] -= out.flow[q][t];
  }
  constexpr int kNone = -1;
  for (;;) {
    // Breadth first from every queue with quota left: queue -> type along
    // unused demand, type -> queue along a share placed there (moving it).
    std::vector<int> type_from(k, kNone), queue_from(qs, kNone);
    std::vector<bool> seen_type(k, false), seen_queue(qs, false);
    std::vector<size_t> frontier;  // queues
    for (size_t q = 0; q < qs; ++q) {
      if (out.left[q] > 0) {
        seen_queue[q] = true;
        frontier.push_back(q);
      }
    }
    int end = kNone;
    for (size_t at = 0; at < frontier.size() && end == kNone; ++at) {
      const size_t q = frontier[at];
      for (size_t t = 0; t < k && end == kNone; ++t) {
        if (seen_type[t] || out.flow[q][t] >= demand[q][t]) continue;
        seen_type[t] = true;
        type_from[t] = int(q);
        if (out.room[t] > 0) {
          end = int(t);
          break;
        }
        for (size_t r = 0; r < qs; ++r) {
          if (seen_queue[r] || out.flow[r][t] == 0) continue;
          seen_queue[r] = true;
          queue_from[r] = int(t);
          frontier.push_back(r);
        }
      }
    }
    if (end == kNone) return out;
    // The bottleneck along the path, then the path applied.
    uint64_t push = out.room[size_t(end)];
    size_t t = size_t(end), q = size_t(type_from[t]);
    for (;;) {
      push = std::min(push, demand[q][t] - out.flow[q][t]);
      if (queue_from[q] == kNone) {
        push = std::min(push, out.left[q]);
        break;
      }
      t = size_t(queue_from[q]);
      push = std::min(push, out.flow[q][t]);
      q = size_t(type_from[t]);
    }
    t = size_t(end);
    q = size_t(type_from[t]);
    out.room[t] -= push;
    for (;;) {
      out.flow[q][t] += push;
      if (queue_from[q] == kNone) {
        out.left[q] -= push;
        break;
      }
      t = size_t(queue_from[q]);
      out.flow[q][t] -= push;
      q = size_t(type_from[t]);
    }
  }
}

}  // namespace

std::vector<std::vector<QueueSpec>> SplitQueuesOverTypes(const TypedProblem& x,
                                                         const TypedAssignment& a,
                                                         std::span<const QueueSpec> queues) {
  const size_t k = x.types.size();
  // What each queue's jobs may use on each type: their largest sizes there.
  std::vector<std::vector<uint64_t>> demand(queues.size(), std::vector<uint64_t>(k, 0));
  for (size_t i = 0; i < x.size(); ++i) {
    const uint32_t q = x.jobs[i].queue;
    const uint32_t t = a.types[i];
    if (q >= queues.size() || t >= k) continue;
    const JobModel& m = x.Model(i, t);
    if (m.CanRun()) demand[q][t] += m.Gpus(m.hi);
  }
  std::vector<uint64_t> gpus(k, 0);
  for (size_t t = 0; t < k; ++t) gpus[t] = x.types[t].total_gpus.value_or(x.capacity[t]);
  std::vector<uint64_t> nominal(queues.size());
  for (size_t q = 0; q < queues.size(); ++q) nominal[q] = queues[q].nominal_gpus;
  NominalPlacement placed = PlaceNominal(nominal, demand, gpus);
  // What could not be placed where the queue's jobs are (more quota than
  // they may use, or than the types hold) goes where GPUs are left.
  std::vector<double> room(k), all(k);
  for (size_t t = 0; t < k; ++t) {
    room[t] = double(placed.room[t]);
    all[t] = double(gpus[t]);
  }
  std::vector<std::vector<QueueSpec>> shares(k,
                                             std::vector<QueueSpec>(queues.begin(), queues.end()));
  for (size_t q = 0; q < queues.size(); ++q) {
    const QueueSpec& spec = queues[q];
    const std::vector<uint64_t> rest = Split(placed.left[q], room, all);
    std::vector<double> wants(k), holds(k);
    for (size_t t = 0; t < k; ++t) {
      shares[t][q].nominal_gpus = placed.flow[q][t] + rest[t];
      wants[t] = double(demand[q][t]);
      holds[t] = double(shares[t][q].nominal_gpus);
      // The name is what explanations cite: a share is not the quota.
      if (shares[t][q].nominal_gpus != spec.nominal_gpus)
        shares[t][q].name = absl::StrCat(spec.name, " (its ", x.types[t].name, " share)");
    }
    if (spec.borrowing_limit_gpus) {
      // Borrowed where its jobs are.
      const std::vector<uint64_t> limit = Split(*spec.borrowing_limit_gpus, wants, all);
      for (size_t t = 0; t < k; ++t) shares[t][q].borrowing_limit_gpus = limit[t];
    }
    if (spec.lending_limit_gpus) {
      // Lent from what it holds on each type, at most that (a lending limit
      // is at most the nominal quota); the parts sum to at most the limit.
      const std::vector<uint64_t> limit = Split(*spec.lending_limit_gpus, holds, all);
      for (size_t t = 0; t < k; ++t)
        shares[t][q].lending_limit_gpus = std::min(limit[t], shares[t][q].nominal_gpus);
    }
  }
  return shares;
}

ClusterPlan PlanTypesWithQueues(const TypedProblem& x, const TypedAssignment& a,
                                const ClusterPlannerOptions& options,
                                std::span<const QueueSpec> queues) {
  const size_t k = x.types.size();
  const std::vector<std::vector<QueueSpec>> shares = SplitQueuesOverTypes(x, a, queues);
  ClusterPlan plan;
  plan.jobs.resize(x.size());
  plan.queues.assign(queues.size(), PlannedQueue{});
  plan.allocated_gpus_by_type.assign(k, 0);
  TypedAssignment planned = a;
  for (uint32_t t = 0; t < k; ++t) {
    const std::vector<uint32_t> members = Members(x, a, t);
    if (members.empty()) continue;
    const ClusterPlan on_type = PlanWithQueues(Part(x.problems[t], members), x.types[t].total_gpus,
                                               options, x.types[t].slots, shares[t]);
    for (size_t j = 0; j < members.size(); ++j) {
      plan.jobs[members[j]] = on_type.jobs[j];
      plan.jobs[members[j]].gpu_type = t;
      planned.replicas[members[j]] = on_type.jobs[j].replicas;
    }
    for (size_t q = 0; q < on_type.queues.size() && q < plan.queues.size(); ++q) {
      const PlannedQueue& from = on_type.queues[q];
      PlannedQueue& to = plan.queues[q];
      to.in_use_gpus += from.in_use_gpus;
      to.borrowed_gpus += from.borrowed_gpus;
      to.lent_gpus += from.lent_gpus;
      to.guaranteed_gpus += from.guaranteed_gpus;
      to.wanted_gpus += from.wanted_gpus;
      to.running_jobs += from.running_jobs;
      to.waiting_jobs += from.waiting_jobs;
    }
    plan.allocated_gpus_by_type[t] = on_type.allocated_gpus;
    plan.allocated_gpus += on_type.allocated_gpus;
    // The bound within each type, given the types chosen.
    plan.upper_bound += on_type.upper_bound;
  }
  plan.exact = false;
  plan.utility = EvaluateTyped(x, planned).utility;
  plan.upper_bound = std::max(plan.upper_bound, plan.utility);
  const double diff = plan.upper_bound - plan.utility;
  plan.gap = diff > 0 ? diff / std::max(std::abs(plan.upper_bound), 1e-9) : 0;
  return plan;
}

}  // namespace rescale::planner_internal
