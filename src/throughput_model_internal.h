// Internal to the throughput model, not installed: the fitted form's
// constants, placements and basis (throughput_model.cc), and the weighted
// non-negative least-squares fit of its parameters
// (throughput_model_fit.cc). The model and the method are described in
// throughput_model.cc's header comment.
#ifndef RESCALE_SRC_THROUGHPUT_MODEL_INTERNAL_H_
#define RESCALE_SRC_THROUGHPUT_MODEL_INTERNAL_H_

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <vector>

namespace rescale::throughput_internal {

// Near-linear prior: sync costs this share of compute on reaching 2 workers,
// and this much more per worker after that.
inline constexpr double kPriorSyncBaseShare = 0.05;
inline constexpr double kPriorSyncPerWorkerShare = 0.002;
// ...and this much more once it spans more than one node (the slope per
// co-located replica reuses kPriorSyncPerWorkerShare).
inline constexpr double kPriorNodeSyncShare = 0.05;
// Candidate fixed shares of compute tried when the batches vary (midpoints
// of this many equal steps in (0, 1)).
inline constexpr int kFixedShareGrid = 24;
inline constexpr double kMaxRelativeUncertainty = 1.0;
inline constexpr int kGaussNewtonSteps = 8;
inline constexpr int kStepHalvings = 4;

// compute, sync_base, sync_per_worker, node_sync, node_sync_per_colocated
inline constexpr int kParams = 5;
using Vec = std::array<double, kParams>;
using Mat = std::array<Vec, kParams>;

// Where a job's replicas run: the nodes it spans and the replicas on its
// fullest node (who share that node's network link).
struct Placement {
  double nodes = 1;
  double per_node = 1;
};

// The placement a scheduler that packs replicas onto the fewest nodes gives
// n replicas: full nodes first, so the fullest node holds
// min(n, replicas per node). One node when the node size is unknown. Both
// fields are non-decreasing in n, which keeps step time non-decreasing.
inline Placement Packed(double n, uint32_t gpus_per_replica, uint32_t gpus_per_node) {
  if (gpus_per_node == 0) return {1.0, n};
  const double per_replica = std::max<uint32_t>(gpus_per_replica, 1);
  const double replicas_per_node = std::max(1.0, std::floor(gpus_per_node / per_replica));
  return {std::max(1.0, std::ceil(n / replicas_per_node)), std::min(n, replicas_per_node)};
}

// A measured placement with a known node count: its fullest node holds
// `per_node` replicas when known, else at least ceil(n / nodes) (spread
// evenly).
inline Placement Spread(double n, uint32_t nodes, uint32_t per_node = 0) {
  const double even = std::ceil(n / nodes);
  return {static_cast<double>(nodes), per_node > 0 ? std::clamp<double>(per_node, even, n) : even};
}

// d step / d parameters: step = Basis(n, placement) . (compute, sync_base,
// sync_per_worker, node_sync, node_sync_per_colocated).
inline Vec Basis(double n, const Placement& where) {
  if (n < 2) return {1.0, 0.0, 0.0, 0.0, 0.0};
  const double across_nodes = where.nodes > 1 ? 1.0 : 0.0;
  return {1.0, 1.0, n - 2.0, across_nodes, across_nodes * (where.per_node - 1.0)};
}

inline double Dot(const Vec& a, const Vec& b) {
  double sum = 0;
  for (int i = 0; i < kParams; ++i) sum += a[i] * b[i];
  return sum;
}

inline bool Finite(double x) { return std::isfinite(x); }

// One measured or prior step time, in units of the reference step.
struct FitRow {
  double replicas = 0;
  Placement where;
  double step = 0;        // relative to the reference step
  double weight = 0;      // inverse variance of log step, times recency
  bool observed = false;  // from an Observation (false: a prior point)
  // Samples per worker per step it was measured at (0 = unknown or a prior
  // point), and its compute relative to the model's reference batch (1
  // unless the observations span several batches).
  double batch = 0;
  double compute_scale = 1;
};

// Basis() of a row, its compute scaled to the row's batch.
inline Vec RowBasis(const FitRow& row) {
  Vec basis = Basis(row.replicas, row.where);
  basis[0] *= row.compute_scale;
  return basis;
}

// Weighted squared log error of the rows plus the prior rows; +inf when a
// prediction is not positive (throughput_model_fit.cc).
double Objective(const std::vector<FitRow>& rows, const Vec& params);
// Minimises the weighted squared log error of `rows` plus the prior rows
// over params >= lower (lower = {min compute, 0, 0, 0, 0})
// (throughput_model_fit.cc).
Vec FitParameters(const std::vector<FitRow>& rows, const Vec& lower);

}  // namespace rescale::throughput_internal

#endif  // RESCALE_SRC_THROUGHPUT_MODEL_INTERNAL_H_
