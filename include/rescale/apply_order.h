// The order in which a plan is applied to a cluster.
//
// A plan is feasible as a whole, but the cluster goes through it one job at
// a time. Applying a growth before the shrink that makes room for it would
// over-commit the GPUs in between (pods go Pending, gangs deadlock). So every
// controller applies a plan in two phases: first every change that releases
// GPUs (shrinks and suspensions), then every change that acquires them
// (growths, resumes, first starts). The simulator and rescale-adapter both
// order their changes with OrderForApply, so the simulator's results assume
// the controller that ships.
//
// Header-only and free of any RPC type: callers project their own change
// type (a core Recommendation, a protobuf message) onto the two counts.
#ifndef RESCALE_APPLY_ORDER_H_
#define RESCALE_APPLY_ORDER_H_

#include <algorithm>
#include <cstdint>
#include <vector>

namespace rescale {

enum class ApplyPhase {
  kRelease = 0,  // shrink or suspend: frees GPUs, applied first
  kAcquire = 1,  // grow, resume or start: takes GPUs, applied after every release
  kNone = 2,     // no change in the replicas the job holds
};

// The phase of taking a job from `running_replicas` (0 = not running) to
// `target_replicas` (0 = suspended or not started).
inline ApplyPhase PhaseOf(uint32_t running_replicas, uint32_t target_replicas) {
  if (target_replicas < running_replicas) return ApplyPhase::kRelease;
  if (target_replicas > running_replicas) return ApplyPhase::kAcquire;
  return ApplyPhase::kNone;
}

// Sorts `changes` so every release comes before every acquire, keeping the
// input order within a phase (stable: the plan's own order, by job id, is
// kept so logs and replays are deterministic). Changes that change nothing
// go last. `counts(change)` returns {running_replicas, target_replicas}.
template <typename Change, typename Counts>
void OrderForApply(std::vector<Change>& changes, Counts counts) {
  std::stable_sort(changes.begin(), changes.end(), [&](const Change& a, const Change& b) {
    const auto [a_running, a_target] = counts(a);
    const auto [b_running, b_target] = counts(b);
    return PhaseOf(a_running, a_target) < PhaseOf(b_running, b_target);
  });
}

}  // namespace rescale

#endif  // RESCALE_APPLY_ORDER_H_
