// Internal to the cluster planner's queues, not installed: the queues'
// model (quotas, cohorts, what each queue is guaranteed and wants) shared by
// cluster_planner_queues.cc (the solvers) and cluster_planner_queues_model.cc
// (building the model, and the per-queue accounting of a plan).
#ifndef RESCALE_SRC_CLUSTER_PLANNER_QUEUES_H_
#define RESCALE_SRC_CLUSTER_PLANNER_QUEUES_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "cluster_planner_internal.h"

namespace rescale::planner_internal {

// Quotas above this are "the whole cluster": keeps sums from overflowing.
inline constexpr uint64_t kHuge = uint64_t{1} << 50;
// A weight of 0 borrows only what weighted queues leave.
inline constexpr double kMinWeight = 1e-6;

struct QueueModel {
  uint64_t nominal = 0;
  uint64_t lendable = 0;  // L_q
  uint64_t kept = 0;      // G_q = N_q - L_q
  uint64_t cap = 0;       // most it may hold: N_q + borrowing limit, <= capacity
  size_t cohort = 0;      // index into Queues::pool
  double weight = 1;
  std::vector<uint32_t> members;  // job indices
  uint64_t guaranteed = 0;        // D_q
  uint64_t wanted = 0;            // A_q
  bool shares = true;             // fair sharing counts (its cohort competes)
  uint64_t Wish() const { return wanted > nominal ? wanted - nominal : 0; }
  // What it draws from its cohort's pool at usage u.
  uint64_t Draw(uint64_t u) const { return u > kept ? u - kept : 0; }
  double Fair(uint64_t u) const {
    if (!shares) return 0;
    const uint64_t borrowed = std::min(u > nominal ? u - nominal : 0, Wish());
    return weight * std::log1p(static_cast<double>(borrowed) / weight);
  }
};

struct Queues {
  std::vector<QueueModel> queues;
  std::vector<uint64_t> pool;                  // P_c per cohort
  std::vector<std::vector<uint32_t>> cohorts;  // queue indices per cohort
  uint64_t capacity = 0;                       // effective total
};

uint64_t UsedGpus(const Problem& p, std::span<const uint32_t> replicas);

// The queues' model of `p` (see "Queues" in rescale/cluster_planner.h).
Queues BuildQueues(const Problem& p, std::optional<uint64_t> capacity,
                   std::span<const QueueSpec> specs, const ClusterPlannerOptions& options);

// Per-queue accounting of the plan, and the jobs whose queue, not the
// cluster, bound them: their binding becomes QUOTA with the queue's figures.
void ExplainQueues(const Problem& p, const Queues& qs, std::span<const QueueSpec> specs,
                   std::span<const uint32_t> replicas, ClusterPlan& plan);

}  // namespace rescale::planner_internal

#endif  // RESCALE_SRC_CLUSTER_PLANNER_QUEUES_H_
