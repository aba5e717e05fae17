// The node model: nodes, best-fit placement, the node-aware capacity
// report and the foreign-load process (see nodes.h).
#include "bench/sim/nodes.h"

#include <algorithm>

namespace rescale::sim {

NodePool::NodePool(uint32_t node_gpus, uint32_t nodes)
    : node_gpus_(node_gpus), active_(nodes), nodes_(nodes) {}

void NodePool::SetActiveNodes(uint32_t active) {
  active_ = std::min<uint32_t>(active, node_count());
}

uint32_t NodePool::Idle(uint32_t node) const {
  const Node& n = nodes_[node];
  const uint32_t busy = n.foreign + n.managed;
  return busy >= node_gpus_ ? 0 : node_gpus_ - busy;
}

uint32_t NodePool::Overcommit(uint32_t node) const {
  const Node& n = nodes_[node];
  const uint32_t busy = n.foreign + n.managed;
  return busy > node_gpus_ ? busy - node_gpus_ : 0;
}

void NodePool::SetForeign(uint32_t node, uint32_t gpus) {
  nodes_[node].foreign = std::min(gpus, node_gpus_);
}

std::optional<uint32_t> NodePool::BestFit(uint32_t gpus) const {
  std::optional<uint32_t> best;
  for (uint32_t node = 0; node < active_; ++node) {
    const uint32_t idle = Idle(node);
    if (idle >= gpus && (!best || idle < Idle(*best))) best = node;
  }
  return best;
}

void NodePool::Take(uint32_t node, uint32_t gpus) { nodes_[node].managed += gpus; }

void NodePool::Release(uint32_t node, uint32_t gpus) {
  nodes_[node].managed -= std::min(gpus, nodes_[node].managed);
}

uint32_t NodePool::ForeignGpus() const {
  uint32_t gpus = 0;
  for (uint32_t node = 0; node < active_; ++node) gpus += nodes_[node].foreign;
  return gpus;
}

CapacityReport NodePool::Report(std::span<const uint32_t> gpus_per_replica) const {
  CapacityReport report;
  std::vector<uint32_t> classes(gpus_per_replica.begin(), gpus_per_replica.end());
  std::sort(classes.begin(), classes.end());
  classes.erase(std::unique(classes.begin(), classes.end()), classes.end());
  for (uint32_t g : classes) {
    if (g > 0) report.slots.push_back({g, 0});
  }
  for (uint32_t node = 0; node < active_; ++node) {
    const uint32_t free = node_gpus_ - nodes_[node].foreign;
    report.total_gpus += free;
    for (ReplicaSlots& s : report.slots) s.replicas += free / s.gpus_per_replica;
  }
  return report;
}

ForeignLoad::ForeignLoad(uint64_t seed, uint32_t nodes, uint32_t node_gpus, double fraction,
                         double mean_interval_seconds)
    : nodes_(std::max(nodes, 1u)),
      busy_(node_gpus, std::clamp(fraction, 0.0, 1.0)),
      gap_(1.0 / mean_interval_seconds),
      active_(fraction > 0) {
  // A stream of its own (the seed and a constant naming this use), so the
  // load is the same whatever the policy or mode draws from the noise.
  std::seed_seq seq{uint32_t(seed), uint32_t(seed >> 32), 0xf0e16u};
  rng_.seed(seq);
  initial_.assign(nodes_, 0);
  if (!active_) return;
  for (uint32_t& gpus : initial_) gpus = busy_(rng_);
  next_.at_seconds = 0;
  Draw();
}

void ForeignLoad::Draw() {
  next_.at_seconds += gap_(rng_);
  next_.node = std::uniform_int_distribution<uint32_t>(0, nodes_ - 1)(rng_);
  next_.gpus = busy_(rng_);
}

std::optional<ForeignChange> ForeignLoad::Peek() const {
  if (!active_) return std::nullopt;
  return next_;
}

void ForeignLoad::Pop() {
  if (active_) Draw();
}

}  // namespace rescale::sim
