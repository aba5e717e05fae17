// The simulation's node model: replica placement, Pending pods, eviction
// and the foreign load over time (see node_model.h).
#include "bench/sim/node_model.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"

namespace rescale::sim {

absl::StatusOr<NodeModel> NodeModel::Create(uint32_t node_gpus,
                                            std::span<const uint32_t> capacities,
                                            std::span<const JobDescription> jobs, uint64_t seed,
                                            double foreign_load, double foreign_interval_seconds) {
  const uint32_t n = node_gpus;
  uint32_t largest_capacity = 0;
  for (uint32_t gpus : capacities) {
    if (gpus % n != 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "capacity %d GPUs is not a whole number of nodes of --node-gpus %d", gpus, n));
    }
    largest_capacity = std::max(largest_capacity, gpus);
  }
  std::vector<uint32_t> gpus_per_replica;
  gpus_per_replica.reserve(jobs.size());
  for (const JobDescription& job : jobs) {
    if (job.gpus_per_replica > n) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "job \"%s\" has %d GPUs per replica, more than a node of --node-gpus %d holds", job.id,
          job.gpus_per_replica, n));
    }
    gpus_per_replica.push_back(job.gpus_per_replica);
  }
  NodePool pool(n, largest_capacity / n);
  pool.SetActiveNodes(capacities.empty() ? 0 : capacities.front() / n);
  ForeignLoad foreign(seed, largest_capacity / n, n, foreign_load, foreign_interval_seconds);
  for (uint32_t node = 0; node < pool.node_count(); ++node)
    pool.SetForeign(node, foreign.initial()[node]);
  return NodeModel(std::move(pool), std::move(foreign), jobs.size(), std::move(gpus_per_replica));
}

NodeModel::NodeModel(NodePool pool, ForeignLoad foreign, size_t jobs,
                     std::vector<uint32_t> gpus_per_replica)
    : pool_(std::move(pool)),
      foreign_(std::move(foreign)),
      gpus_per_replica_(std::move(gpus_per_replica)),
      placement_(jobs),
      stalled_(jobs, false) {}

void NodeModel::SetCapacity(uint32_t capacity_gpus) {
  pool_.SetActiveNodes(capacity_gpus / pool_.node_gpus());
}

std::optional<double> NodeModel::NextForeignChange() const {
  if (std::optional<ForeignChange> change = foreign_.Peek()) return change->at_seconds;
  return std::nullopt;
}

void NodeModel::ApplyForeignChanges(double now_seconds) {
  while (std::optional<ForeignChange> change = foreign_.Peek()) {
    if (change->at_seconds > now_seconds) break;
    pool_.SetForeign(change->node, change->gpus);
    foreign_.Pop();
  }
}

uint32_t NodeModel::PendingReplicas(size_t job) const {
  const std::vector<int32_t>& placement = placement_[job];
  return static_cast<uint32_t>(std::count(placement.begin(), placement.end(), kPending));
}

void NodeModel::Unplace(size_t job, size_t replica) {
  int32_t& node = placement_[job][replica];
  if (node == kPending) return;
  pool_.Release(static_cast<uint32_t>(node), gpus_per_replica_[job]);
  node = kPending;
}

void NodeModel::Resize(size_t job, uint32_t replicas) {
  std::vector<int32_t>& placement = placement_[job];
  // The placed ones keep their order, so after the Pending pods the
  // highest-numbered go.
  while (placement.size() > replicas) {
    auto pending = std::find(placement.begin(), placement.end(), kPending);
    if (pending == placement.end()) {
      Unplace(job, placement.size() - 1);
      pending = placement.end() - 1;
    }
    placement.erase(pending);
  }
  placement.resize(replicas, kPending);
}

void NodeModel::Evict() {
  for (uint32_t node = 0; node < pool_.node_count(); ++node) {
    const bool lost = node >= pool_.active_nodes();
    if (pool_.managed(node) == 0) continue;
    for (size_t job = placement_.size(); job-- > 0;) {
      if (!lost && pool_.Overcommit(node) == 0) break;
      std::vector<int32_t>& placement = placement_[job];
      for (size_t r = placement.size(); r-- > 0;) {
        if (placement[r] != static_cast<int32_t>(node)) continue;
        if (!lost && pool_.Overcommit(node) == 0) break;
        Unplace(job, r);
        stalled_[job] = true;
      }
    }
  }
}

bool NodeModel::Place(size_t job) {
  for (int32_t& node : placement_[job]) {
    if (node != kPending) continue;
    if (std::optional<uint32_t> fit = pool_.BestFit(gpus_per_replica_[job])) {
      pool_.Take(*fit, gpus_per_replica_[job]);
      node = static_cast<int32_t>(*fit);
    }
  }
  const bool whole = PendingReplicas(job) == 0;
  const bool rejoined = whole && stalled_[job];
  stalled_[job] = !whole;
  return rejoined;
}

absl::Status NodeModel::Check(std::string_view policy, double now_seconds) const {
  for (uint32_t node = 0; node < pool_.node_count(); ++node) {
    if (pool_.Overcommit(node) > 0 || (node >= pool_.active_nodes() && pool_.managed(node) > 0)) {
      return absl::InternalError(absl::StrFormat(
          "policy %s: node %d holds %d foreign and %d placed GPUs of %d at t=%.3f s", policy, node,
          pool_.foreign(node), pool_.managed(node), pool_.node_gpus(), now_seconds));
    }
  }
  return absl::OkStatus();
}

}  // namespace rescale::sim
