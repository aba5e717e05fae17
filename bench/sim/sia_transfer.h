// How well a job's speed on one GPU type predicts its speed on another
// (issue 34): for each of Sia's applications and each ordered pair of its
// three types, ThroughputModel is fitted to the source type's measured
// placements at a local batch, given the target type's one-GPU step at that
// batch, and asked for the target's step time at every packed multi-GPU
// placement Sia measured there (ThroughputModel::OnOtherType). Five ways
// of carrying the synchronisation over are compared:
//   same seconds  the source's sync seconds as they are (sync_scale 1);
//   sia           Sia's estimator: the source's sync as a share of
//                 compute, so it scales with the one-GPU speed ratio;
//   pair ratio    the source's sync seconds times the median ratio of the
//                 two types' multi-GPU overheads over the other five
//                 applications (what a built-in table per pair of types
//                 could hold; leave-one-out, so the app predicted is not
//                 in it).
//   size ratio    per multi-GPU size: the target's overhead over one GPU
//                 is the source's at that size times the median ratio of
//                 the two types' overheads at that size over the other
//                 five applications' measurements (leave-one-out). When
//                 the source's overhead is under 5% of its one-GPU step
//                 (no sign of the job's synchronisation to scale, as on
//                 A100s), the other applications' median overhead share
//                 on the target at that size instead.
//   planner       what rescaled predicts: engine::ModelOnType, with what
//                 TypeSpeeds learns from the other five applications: the
//                 sync ratios within a node and across nodes, and the
//                 overhead ratio per size, to which the sync is fitted
//                 where the source's overhead is signal.
// Raw traces only (SiaDataDirectory); the figures are in docs/simulator.md.
#ifndef RESCALE_BENCH_SIM_SIA_TRANSFER_H_
#define RESCALE_BENCH_SIM_SIA_TRANSFER_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace rescale::sim {

struct CrossTypeError {
  std::string app, from, to;  // trace suffixes
  size_t points = 0;          // (batch, placement) predictions
  // Median |predicted / measured - 1| of step time per way.
  double same_seconds = 0, sia = 0, pair_ratio = 0, size_ratio = 0;
  // Every point's error, same seconds and size ratio: an app's median over
  // all pairs.
  std::vector<double> same_seconds_errors, size_ratio_errors;
  // The planner's own prediction (engine::ModelOnType with the TypeSpeeds
  // it learns from the other five applications as jobs measured on both
  // types, one per batch): median, and every point's error.
  double planner = 0;
  std::vector<double> planner_errors;
};

absl::StatusOr<std::vector<CrossTypeError>> MeasureCrossType(const std::string& sia_dir);

// The table in Markdown.
std::string CrossTypeTable(const std::vector<CrossTypeError>& errors);

// Per app, the median error over every ordered pair's points.
struct PerApp {
  std::string app;
  double same_seconds = 0, size_ratio = 0, planner = 0;
};
std::vector<PerApp> PooledPerApp(const std::vector<CrossTypeError>& errors);

}  // namespace rescale::sim

#endif  // RESCALE_BENCH_SIM_SIA_TRANSFER_H_
