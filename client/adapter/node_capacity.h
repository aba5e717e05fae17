// Honest capacity: what of a cluster's GPUs the jobs Rescale manages can
// really get, from the Nodes and Pods the adapter watches.
//
// Summing every node's allocatable GPUs (what the adapter did first) counts
// nodes that are NotReady or cordoned, nodes whose taints the training pods
// do not tolerate, and GPUs other teams' pods hold; rescaled then
// recommends sizes whose pods stay Pending. Here:
//  * a node counts when its Ready condition is True, it is not
//    unschedulable, and its NoSchedule/NoExecute taints are all tolerated
//    by the worker template of at least one managed job (of the job's size
//    class, for that class's slots);
//  * its free GPUs are its allocatable GPUs minus those requested by the
//    pods on it that Rescale does not manage ("foreign" pods: any pod not
//    of a managed job, Running or Pending, in any namespace);
//  * per size class g (a managed job's gpus_per_replica), the replicas that
//    fit are the sum over nodes of floor(free GPUs / g), since a replica
//    needs all its GPUs on one node (rescale::ReplicaSlots).
// Pods of managed jobs are not subtracted: their GPUs are what the planner
// hands out.
//
// GPU types: with nodes of two or more GPU products (the
// nvidia.com/gpu.product label GPU Feature Discovery sets), the same is
// counted per product too -- usable GPUs, the largest node, and slots per
// size class within the product -- for SetCapacityRequest.gpu_types. GPU
// nodes without the label are then left out of the typed capacity (no node
// selector can send a replica to them): GPU Feature Discovery labels every
// GPU node it has seen, so such a node is one it has not reached yet.
//
// One capacity serves every job, so a node only some jobs tolerate counts
// for all of them (within their size class); a cluster whose node pools
// are tainted per team is better served by one adapter (--namespace) and
// one rescaled per pool. Tolerations added by admission (for instance the
// ExtendedResourceToleration plugin) are not in the template and are not
// seen.
//
// Everything here is a pure function of JSON objects, for the controller
// (client/adapter/controller.cc) and its tests.
#ifndef RESCALE_CLIENT_ADAPTER_NODE_CAPACITY_H_
#define RESCALE_CLIENT_ADAPTER_NODE_CAPACITY_H_

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "rescale/types.h"

namespace rescale::adapter {

// The field selector of the adapter's pod watch: pods bound to a node that
// have not finished (the pods that hold a node's GPUs), as the cluster
// autoscaler selects them. GPU requests cannot be selected on; pods
// without any are dropped as they arrive.
inline constexpr char kPodsOnNodesFieldSelector[] =
    "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed";

// The node label that names a node's GPU product ("Tesla-T4",
// "NVIDIA-A100-SXM4-40GB"), set by NVIDIA's GPU Feature Discovery; the
// adapter selects a job's GPU type with it in the worker template's
// nodeSelector.
inline constexpr char kGpuProductLabel[] = "nvidia.com/gpu.product";

// A node taint (spec.taints[]).
struct Taint {
  std::string key;
  std::string value;
  std::string effect;  // NoSchedule, PreferNoSchedule or NoExecute
  friend bool operator==(const Taint&, const Taint&) = default;
};

// A pod toleration (spec.tolerations[]).
struct Toleration {
  std::string key;  // empty with operator Exists = every key
  std::string op;   // "Exists" or "Equal" (the default when empty)
  std::string value;
  std::string effect;  // empty = every effect
  friend bool operator==(const Toleration&, const Toleration&) = default;
};

// Kubernetes' matching of one toleration to one taint (k8s.io/api core/v1
// Toleration.ToleratesTaint).
bool Tolerates(const Toleration& toleration, const Taint& taint);
// Whether `tolerations` tolerate every NoSchedule and NoExecute taint of
// `taints` (PreferNoSchedule only steers the scheduler).
bool ToleratesHardTaints(const std::vector<Toleration>& tolerations,
                         const std::vector<Taint>& taints);

// A pod spec's tolerations; entries that are not objects are skipped (the
// API server validated the template already).
std::vector<Toleration> ParseTolerations(const nlohmann::json& pod_spec);

// What the capacity needs of a Node object.
struct NodeInfo {
  uint32_t allocatable_gpus = 0;  // status.allocatable["nvidia.com/gpu"]
  bool ready = false;             // a Ready condition with status "True"
  bool unschedulable = false;     // spec.unschedulable (cordoned)
  std::vector<Taint> taints;
  std::string gpu_product;  // metadata.labels["nvidia.com/gpu.product"]
  friend bool operator==(const NodeInfo&, const NodeInfo&) = default;
};
NodeInfo ParseNode(const nlohmann::json& node);

// A pod that holds GPUs on a node.
struct GpuPod {
  std::string node;  // spec.nodeName
  uint32_t gpus = 0;
  // "namespace/name" of the training job the pod belongs to, by its
  // controller ownerReference (PyTorchJob) or the labels the operators set
  // (training.kubeflow.org/job-name; jobset.sigs.k8s.io/jobset-name, which
  // Trainer v2 names after the TrainJob; KubeDL's job-name with group-name
  // training.kubedl.io); empty when none says.
  std::string job_id;
  friend bool operator==(const GpuPod&, const GpuPod&) = default;
};
// The GPUs a pod requests, as the scheduler counts them: the larger of the
// sum over its containers and the largest init container (each container's
// requests, else its limits, of nvidia.com/gpu). nullopt for a pod without
// GPUs, without a node, or finished (Succeeded, Failed).
std::optional<GpuPod> ParseGpuPod(const nlohmann::json& pod);

// What a managed job needs of a node.
struct JobPlacement {
  uint32_t gpus_per_replica = 1;
  std::vector<Toleration> tolerations;  // of its worker template
  friend bool operator==(const JobPlacement&, const JobPlacement&) = default;
};

// The honest capacity of one GPU product.
struct TypeCapacity {
  std::string name;                 // the nodes' nvidia.com/gpu.product
  uint32_t usable_gpus = 0;         // free GPUs on its nodes that count
  uint32_t gpus_per_node = 0;       // the largest allocatable of its nodes
  std::vector<ReplicaSlots> slots;  // per size class, within the product
  friend bool operator==(const TypeCapacity&, const TypeCapacity&) = default;
};

struct HonestCapacity {
  uint32_t allocatable_gpus = 0;  // every node's allocatable GPUs
  // Free GPUs on the nodes that count; with `types`, their sum (GPU nodes
  // without a product label are left out).
  uint32_t usable_gpus = 0;
  // One entry per size class of the jobs, ascending (with `types`, the sum
  // of theirs).
  std::vector<ReplicaSlots> slots;
  // Per GPU product, by name, when the GPU nodes carry two or more (every
  // product a GPU node carries, counted or not, so a type whose nodes are
  // all down is sent with 0 GPUs rather than dropped); else empty.
  std::vector<TypeCapacity> types;
  friend bool operator==(const HonestCapacity&, const HonestCapacity&) = default;
};

// The capacity of `nodes` (by name) for `jobs`, with `foreign_gpus` (by
// node name) held by pods Rescale does not manage. With no jobs, a node
// counts when it has no hard taint.
HonestCapacity ComputeCapacity(const std::map<std::string, NodeInfo>& nodes,
                               const std::map<std::string, uint32_t>& foreign_gpus,
                               const std::vector<JobPlacement>& jobs);

}  // namespace rescale::adapter

#endif  // RESCALE_CLIENT_ADAPTER_NODE_CAPACITY_H_
