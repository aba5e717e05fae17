// The simulation's node model (opt-in, --node-gpus; the rules are in
// simulator.h): the nodes and the foreign load over time (nodes.h) together
// with where each replica of each simulated job sits. Jobs are named by
// their index in the workload; the simulator says how many replicas each
// runs, the model places them (best fit, jobs in index order), keeps the
// ones that fit nowhere Pending, evicts on foreign growth or lost nodes, and
// remembers which gangs broke so the simulator can charge their restart.
#ifndef RESCALE_BENCH_SIM_NODE_MODEL_H_
#define RESCALE_BENCH_SIM_NODE_MODEL_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "bench/sim/nodes.h"
#include "bench/sim/workload.h"
#include "rescale/types.h"

namespace rescale::sim {

class NodeModel {
 public:
  // Nodes of `node_gpus` GPUs for a cluster whose capacity takes the values
  // `capacities` (the first at time 0), the foreign load drawn from `seed`.
  // INVALID_ARGUMENT when a capacity is not a whole number of nodes or a
  // job's replica is larger than a node.
  static absl::StatusOr<NodeModel> Create(uint32_t node_gpus, std::span<const uint32_t> capacities,
                                          std::span<const JobDescription> jobs, uint64_t seed,
                                          double foreign_load, double foreign_interval_seconds);

  // The cluster now has `capacity_gpus` (a whole number of nodes): nodes
  // beyond it are lost, and Evict then empties them.
  void SetCapacity(uint32_t capacity_gpus);
  // Foreign GPUs on active nodes.
  uint32_t ForeignGpus() const { return pool_.ForeignGpus(); }
  // When the foreign load next changes (nullopt: never).
  std::optional<double> NextForeignChange() const;
  // Applies the foreign-load changes due by `now_seconds`.
  void ApplyForeignChanges(double now_seconds);

  // Replicas of job `job` without a node.
  uint32_t PendingReplicas(size_t job) const;
  // Grows (Pending pods) or shrinks the job's placement to `replicas`:
  // Pending pods go first, as a ReplicaSet deletes unscheduled pods first,
  // then the highest-numbered placed ones.
  void Resize(size_t job, uint32_t replicas);
  // Evicts replicas from over-committed nodes (latest-arrived jobs first,
  // their pods being the youngest on the node) and from lost ones; each
  // job that lost one has a broken gang.
  void Evict();
  // Places the job's Pending replicas that fit (best fit). True when its
  // gang is whole again after it broke: the workers restart from their
  // checkpoint.
  bool Place(size_t job);

  // What a node-aware adapter sends SetCapacity for jobs of these
  // gpus_per_replica classes (NodePool::Report).
  CapacityReport Report(std::span<const uint32_t> gpus_per_replica) const {
    return pool_.Report(gpus_per_replica);
  }
  // INTERNAL when a node holds more than its GPUs, or a lost node holds a
  // placed replica (`policy` and `now_seconds` go into the message).
  absl::Status Check(std::string_view policy, double now_seconds) const;

 private:
  static constexpr int32_t kPending = -1;
  NodeModel(NodePool pool, ForeignLoad foreign, size_t jobs,
            std::vector<uint32_t> gpus_per_replica);
  void Unplace(size_t job, size_t replica);

  NodePool pool_;
  ForeignLoad foreign_;
  std::vector<uint32_t> gpus_per_replica_;  // per job
  // Per job: the node of each running replica (kPending = none yet), and
  // whether the gang broke (a replica Pending) since it was last whole.
  std::vector<std::vector<int32_t>> placement_;
  std::vector<bool> stalled_;
};

}  // namespace rescale::sim

#endif  // RESCALE_BENCH_SIM_NODE_MODEL_H_
