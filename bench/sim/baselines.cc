// The simulator's policy names and kinds, and the cluster-native schedulers
// fifo, tiresias and first come first served (see baselines.h).
#include "bench/sim/baselines.h"

#include <algorithm>
#include <array>

#include "rescale/decision_engine.h"

namespace rescale::sim {
namespace {

constexpr std::array<std::string_view, 4> kClusterNative = {"fifo", "tiresias", "kubedl-raw",
                                                            "hpa-raw"};

uint64_t Gpus(const ClusterJob& job, uint32_t replicas) {
  return uint64_t{replicas} * job.gpus_per_replica;
}

uint64_t Allocated(const std::vector<ClusterJob>& jobs, const std::vector<uint32_t>& replicas) {
  uint64_t gpus = 0;
  for (size_t i = 0; i < jobs.size(); ++i) gpus += Gpus(jobs[i], replicas[i]);
  return gpus;
}

// After a capacity loss: the latest arrivals give up GPUs first, as the
// nodes that vanished took their pods with them and the oldest jobs are the
// ones a cluster operator protects. Elastic jobs first drop to min_replicas.
void ShedToCapacity(const std::vector<ClusterJob>& jobs, uint32_t capacity, bool elastic,
                    std::vector<uint32_t>& replicas) {
  uint64_t allocated = Allocated(jobs, replicas);
  for (size_t i = jobs.size(); i-- > 0 && allocated > capacity;) {
    if (replicas[i] == 0) continue;
    const uint64_t over = allocated - capacity;
    if (elastic && replicas[i] > jobs[i].min_replicas) {
      const uint64_t spare = replicas[i] - jobs[i].min_replicas;
      const uint64_t drop = std::min<uint64_t>(
          spare, (over + jobs[i].gpus_per_replica - 1) / jobs[i].gpus_per_replica);
      replicas[i] -= static_cast<uint32_t>(drop);
      allocated -= drop * jobs[i].gpus_per_replica;
      if (allocated <= capacity) break;
    }
    allocated -= Gpus(jobs[i], replicas[i]);
    replicas[i] = 0;
  }
}

std::vector<uint32_t> Running(const std::vector<ClusterJob>& jobs) {
  std::vector<uint32_t> replicas(jobs.size(), 0);
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (jobs[i].active) replicas[i] = jobs[i].running_replicas;
  }
  return replicas;
}

}  // namespace

std::vector<std::string> SimulatorPolicies() {
  std::vector<std::string> names = DecisionEngine::KnownPolicies();
  // The planner deciding on throughput alone (EngineOptions::plan_on_goodput
  // false): the ablation of goodput planning.
  names.emplace_back("planner-throughput");
  for (std::string_view name : kClusterNative) names.emplace_back(name);
  return names;
}

bool IsSimulatorPolicy(std::string_view policy) {
  const std::vector<std::string> names = SimulatorPolicies();
  return std::find(names.begin(), names.end(), policy) != names.end();
}

PolicyKind KindOf(std::string_view policy) {
  if (std::find(kClusterNative.begin(), kClusterNative.end(), policy) != kClusterNative.end())
    return PolicyKind::kClusterNative;
  return policy == "planner" || policy == "planner-throughput" ? PolicyKind::kPlanner
                                                               : PolicyKind::kPlannerWrapped;
}

std::string_view KindName(PolicyKind kind) {
  switch (kind) {
    case PolicyKind::kPlanner:
      return "planner";
    case PolicyKind::kPlannerWrapped:
      return "planner-wrapped";
    case PolicyKind::kClusterNative:
      return "cluster-native";
  }
  return "?";
}

std::string EnginePolicyFor(std::string_view policy) {
  if (policy == "kubedl-raw") return "kubedl";
  if (policy == "hpa-raw") return "hpa";
  if (policy == "fifo" || policy == "tiresias") return "static-min";
  if (policy == "planner-throughput") return "planner";
  return std::string(policy);
}

std::vector<uint32_t> FifoRound(const std::vector<ClusterJob>& jobs, uint32_t capacity) {
  std::vector<uint32_t> replicas = Running(jobs);
  ShedToCapacity(jobs, capacity, /*elastic=*/false, replicas);
  uint64_t free = capacity - Allocated(jobs, replicas);
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (!jobs[i].active || replicas[i] > 0) continue;
    const uint64_t need = Gpus(jobs[i], jobs[i].requested_replicas);
    if (need > free) break;  // the head of the queue blocks everyone behind it
    replicas[i] = jobs[i].requested_replicas;
    free -= need;
  }
  return replicas;
}

std::vector<uint32_t> FirstComeFirstServed(const std::vector<ClusterJob>& jobs, uint32_t capacity) {
  std::vector<uint32_t> replicas = Running(jobs);
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (replicas[i] > 0 && jobs[i].wish < replicas[i])
      replicas[i] = std::max(jobs[i].wish, jobs[i].min_replicas);
  }
  ShedToCapacity(jobs, capacity, /*elastic=*/true, replicas);
  uint64_t free = capacity - Allocated(jobs, replicas);
  for (size_t i = 0; i < jobs.size(); ++i) {
    const ClusterJob& job = jobs[i];
    if (!job.active || job.wish <= replicas[i]) continue;
    const uint64_t fit = free / job.gpus_per_replica;
    const uint32_t target = static_cast<uint32_t>(std::min<uint64_t>(job.wish, replicas[i] + fit));
    if (replicas[i] == 0 && target < job.min_replicas) continue;  // waits
    free -= Gpus(job, target - replicas[i]);
    replicas[i] = target;
  }
  return replicas;
}

std::vector<uint32_t> TiresiasScheduler::Round(const std::vector<ClusterJob>& jobs,
                                               uint32_t capacity) {
  demoted_.resize(jobs.size(), false);
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (jobs[i].active && !demoted_[i] &&
        jobs[i].attained_gpu_seconds >= kTiresiasDemotionGpuSeconds) {
      demoted_[i] = true;
      queue1_.push_back(i);
    }
  }
  // Queue 0 in arrival order (jobs enter it on arrival), then queue 1 in
  // demotion order.
  std::vector<size_t> order;
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (jobs[i].active && !demoted_[i]) order.push_back(i);
  }
  for (size_t i : queue1_) {
    if (jobs[i].active) order.push_back(i);
  }
  std::vector<uint32_t> replicas(jobs.size(), 0);
  uint64_t free = capacity;
  for (size_t i : order) {
    const uint64_t need = Gpus(jobs[i], jobs[i].requested_replicas);
    if (need > free) continue;
    replicas[i] = jobs[i].requested_replicas;
    free -= need;
  }
  return replicas;
}

}  // namespace rescale::sim
