// The simulator's policy names and the cluster schedulers that are not
// Rescale's: baselines as clusters run them, without the cluster planner.
//
// Every policy rescale-sim runs has a kind:
//  * planner          Rescale's cluster planner sizes every job ("planner").
//  * planner-wrapped  an engine per-job policy (static-min, static-max,
//                     kubedl, hpa, efficiency) whose wish the cluster planner
//                     fits into the cluster, as rescaled deploys them.
//  * cluster-native   a scheduler as a cluster runs it, simulated here:
//      fifo        every job at its requested size, admitted in arrival order
//                  when its whole gang fits (strict FIFO: the head blocks the
//                  queue), never resized (Kueue/Volcano without elasticity);
//      tiresias    requested sizes, preemptive two-queue least attained
//                  service as Pollux's evaluation configured it (see
//                  TiresiasScheduler);
//      kubedl-raw, hpa-raw
//                  the engine's kubedl / hpa wish per job (capacity unknown,
//                  so no planner trims it), applied first come first served
//                  against free GPUs (FirstComeFirstServed).
// The schedulers are pure functions of the cluster's state (Tiresias keeps
// its queues between rounds), so the simulator calls them after each event
// and applies the difference.
#ifndef RESCALE_BENCH_SIM_BASELINES_H_
#define RESCALE_BENCH_SIM_BASELINES_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace rescale::sim {

enum class PolicyKind { kPlanner, kPlannerWrapped, kClusterNative };

// The engine's policies (DecisionEngine::KnownPolicies) then the simulator's
// cluster-native ones: what --policies accepts, in the default order.
std::vector<std::string> SimulatorPolicies();
bool IsSimulatorPolicy(std::string_view policy);
PolicyKind KindOf(std::string_view policy);
// "planner", "planner-wrapped" or "cluster-native" (the sweep's kind column).
std::string_view KindName(PolicyKind kind);
// The policy jobs are registered with in the engine: the policy itself, or
// for cluster-native ones the per-job policy whose wish they apply (kubedl,
// hpa; static-min for fifo and tiresias, whose wishes nobody reads).
std::string EnginePolicyFor(std::string_view policy);

// Tiresias as Pollux's evaluation ran it (algorithms.md section 7).
inline constexpr double kTiresiasDemotionGpuSeconds = 16 * 3600.0;

// One job as a cluster scheduler sees it; jobs are passed in arrival order.
struct ClusterJob {
  bool active = false;  // arrived and not finished
  uint32_t min_replicas = 1;
  uint32_t requested_replicas = 1;  // fifo, tiresias
  uint32_t gpus_per_replica = 1;
  uint32_t running_replicas = 0;    // 0 = waiting or suspended
  uint32_t wish = 0;                // kubedl-raw, hpa-raw: the engine's replicas
  double attained_gpu_seconds = 0;  // tiresias: GPUs x running time so far
};

// Each returns the replicas every job runs after the round (0 = not
// running; inactive jobs 0), never more GPUs than `capacity` in total.

// Running jobs keep their size; waiting ones start, in arrival order, while
// the first of them fits. If the capacity shrank below what runs, the latest
// arrivals are suspended until the rest fits (they resume in arrival order).
std::vector<uint32_t> FifoRound(const std::vector<ClusterJob>& jobs, uint32_t capacity);

// Shrinks first (a wish below what runs frees GPUs at once), then in arrival
// order: a running job's scale-up takes what is free (it runs with the
// workers that fit); a waiting job starts at its wish capped by the free
// GPUs if at least min_replicas fit, else waits (a later job that fits may
// start: the cluster does not hold GPUs for an earlier one). If the capacity
// shrank below what runs, the latest arrivals lose workers (down to
// min_replicas, then all) until the rest fits.
std::vector<uint32_t> FirstComeFirstServed(const std::vector<ClusterJob>& jobs, uint32_t capacity);

// Two queues; a job enters queue 0 on arrival and moves to the back of queue
// 1 once its attained service reaches kTiresiasDemotionGpuSeconds; no
// starvation rescue (a demoted job never returns). Each round takes queue 0
// then queue 1, each in order, and gives a job its requested size when that
// many GPUs are still unclaimed (a later, smaller job may start when an
// earlier one does not fit); running jobs not given their size are
// preempted.
class TiresiasScheduler {
 public:
  std::vector<uint32_t> Round(const std::vector<ClusterJob>& jobs, uint32_t capacity);
  bool demoted(size_t job) const { return job < demoted_.size() && demoted_[job]; }

 private:
  std::vector<bool> demoted_;
  std::vector<size_t> queue1_;  // demotion order
};

}  // namespace rescale::sim

#endif  // RESCALE_BENCH_SIM_BASELINES_H_
