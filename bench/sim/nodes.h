// rescale-sim's node model (opt-in, --node-gpus): the cluster as nodes of a
// fixed number of GPUs, some of them held by foreign pods (pods Rescale does
// not manage), and where each replica of a simulated job sits.
//
//  * NodePool: per node its foreign GPUs and the GPUs of placed replicas;
//    best-fit placement of one replica (all of its gpus_per_replica GPUs on
//    one node: a pod cannot span nodes); and the CapacityReport a
//    node-aware adapter sends (total = free GPUs summed over nodes, per size
//    class g the slots sum over nodes of floor(free / g), free = node GPUs -
//    foreign GPUs; replicas Rescale placed itself count as free, since the
//    planner plans every managed replica anew).
//  * ForeignLoad: the foreign pods over time, a deterministic process from
//    its own generator seeded by the run's seed, so both modes (node-aware
//    and not) and every policy see the same foreign load and the noise
//    stream is untouched. At time 0 every node holds Binomial(node GPUs, F)
//    foreign GPUs (each GPU busy with probability F, so F is the mean
//    fraction); changes come as a Poisson process (mean interval
//    --foreign-interval, cluster-wide), each giving one node, chosen
//    uniformly, a fresh Binomial(node GPUs, F) draw: stationary mean F, each
//    node changing every nodes x interval on average.
#ifndef RESCALE_BENCH_SIM_NODES_H_
#define RESCALE_BENCH_SIM_NODES_H_

#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <vector>

#include "rescale/types.h"

namespace rescale::sim {

class NodePool {
 public:
  // `nodes` nodes of `node_gpus` GPUs each, all active, none busy.
  NodePool(uint32_t node_gpus, uint32_t nodes);

  uint32_t node_gpus() const { return node_gpus_; }
  uint32_t node_count() const { return static_cast<uint32_t>(nodes_.size()); }
  // Nodes [0, active) are in the cluster; the rest were lost (capacity
  // changes) and hold nothing placed.
  uint32_t active_nodes() const { return active_; }
  void SetActiveNodes(uint32_t active);

  uint32_t foreign(uint32_t node) const { return nodes_[node].foreign; }
  uint32_t managed(uint32_t node) const { return nodes_[node].managed; }
  // GPUs neither foreign nor held by a placed replica.
  uint32_t Idle(uint32_t node) const;
  // GPUs by which the node is over-committed (foreign + managed - node GPUs;
  // 0 when it holds what it has).
  uint32_t Overcommit(uint32_t node) const;
  void SetForeign(uint32_t node, uint32_t gpus);

  // Best fit: the active node with the fewest idle GPUs that still has
  // `gpus` idle (the lowest index among equals), keeping whole nodes free
  // for large replicas; nullopt when none has (the pod stays Pending).
  std::optional<uint32_t> BestFit(uint32_t gpus) const;
  void Take(uint32_t node, uint32_t gpus);
  void Release(uint32_t node, uint32_t gpus);

  // Foreign GPUs on active nodes.
  uint32_t ForeignGpus() const;
  // What a node-aware adapter sends SetCapacity: the total free GPUs (node
  // GPUs - foreign, over active nodes) and, for each class in
  // `gpus_per_replica` (sorted, without duplicates, in the report), the
  // replicas that fit: sum over active nodes of floor(free / g).
  CapacityReport Report(std::span<const uint32_t> gpus_per_replica) const;

 private:
  struct Node {
    uint32_t foreign = 0;
    uint32_t managed = 0;
  };
  uint32_t node_gpus_;
  uint32_t active_;
  std::vector<Node> nodes_;
};

// A change of the foreign load: from `at_seconds` on, `node` holds `gpus`
// foreign GPUs.
struct ForeignChange {
  double at_seconds = 0;
  uint32_t node = 0;
  uint32_t gpus = 0;
};

class ForeignLoad {
 public:
  // `fraction` in [0, 1); `mean_interval_seconds` > 0; `nodes` >= 1.
  ForeignLoad(uint64_t seed, uint32_t nodes, uint32_t node_gpus, double fraction,
              double mean_interval_seconds);
  // Foreign GPUs per node at time 0.
  const std::vector<uint32_t>& initial() const { return initial_; }
  // The next change (never before the previous one); none when fraction is 0.
  std::optional<ForeignChange> Peek() const;
  void Pop();

 private:
  void Draw();
  std::mt19937_64 rng_;
  uint32_t nodes_;
  std::binomial_distribution<uint32_t> busy_;
  std::exponential_distribution<double> gap_;
  bool active_;
  std::vector<uint32_t> initial_;
  ForeignChange next_;
};

}  // namespace rescale::sim

#endif  // RESCALE_BENCH_SIM_NODES_H_
