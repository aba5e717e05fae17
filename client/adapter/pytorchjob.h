// The PyTorchJob side of rescale-adapter, free of threads and RPCs: the
// Kubeflow and KubeDL PyTorchJob objects it reads, the JSON merge patches it
// writes, and the JobSpec it registers with rescaled.
//
//   ParsePyTorchJob  a PyTorchJob object -> JobInfo (the fields the adapter
//                    needs, min/max per elasticPolicy, rescale.io/*
//                    annotations), errors naming the field;
//   WorkerPatch, MinMemberPatch  the merge patches the adapter sends;
//   ClampReplicas, ToJobSpec, NodeGpus, ResourcePath  small mappings.
#ifndef RESCALE_CLIENT_ADAPTER_PYTORCHJOB_H_
#define RESCALE_CLIENT_ADAPTER_PYTORCHJOB_H_

#include <cstdint>
#include <initializer_list>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "rescale/v1/rescale.pb.h"

namespace rescale::adapter {

// Label and annotations that opt a job in and describe it to rescaled.
inline constexpr char kManagedLabel[] = "rescale.io/managed";
inline constexpr char kPriorityAnnotation[] = "rescale.io/priority";
inline constexpr char kRestartCostAnnotation[] = "rescale.io/restart-cost-seconds";
inline constexpr char kPreemptibleAnnotation[] = "rescale.io/preemptible";
inline constexpr char kPolicyAnnotation[] = "rescale.io/policy";
inline constexpr char kLocalBatchSizeAnnotation[] = "rescale.io/local-batch-size";
// rescale.io/parameter.<key>: one JobSpec.parameters entry each.
inline constexpr char kParameterAnnotationPrefix[] = "rescale.io/parameter.";
inline constexpr char kGpuResource[] = "nvidia.com/gpu";
inline constexpr char kMergePatch[] = "application/merge-patch+json";

// An API group/version serving a namespaced resource.
struct ApiVersion {
  std::string group;
  std::string version;
  bool operator==(const ApiVersion&) const = default;
};
inline const ApiVersion kKubeflowV1{"kubeflow.org", "v1"};
inline const ApiVersion kKubeDlV1alpha1{"training.kubedl.io", "v1alpha1"};
inline const ApiVersion kCoschedulingV1alpha1{"scheduling.x-k8s.io", "v1alpha1"};
inline const ApiVersion kVolcanoV1beta1{"scheduling.volcano.sh", "v1beta1"};

// /apis/{group}/{version}[/namespaces/{ns}]/{resource}[/{name}]
std::string ResourcePath(const ApiVersion& api, const std::string& resource,
                         const std::string& ns = "", const std::string& name = "");

// What the adapter reads from a PyTorchJob.
struct JobInfo {
  std::string ns;
  std::string name;
  std::string id;  // "ns/name"
  ApiVersion api;
  std::string resource_version;
  uint32_t workers = 0;    // spec.pytorchReplicaSpecs.Worker.replicas
  uint32_t masters = 0;    // spec.pytorchReplicaSpecs.Master.replicas (0 if none)
  bool suspended = false;  // spec.runPolicy.suspend
  // elasticPolicy.minReplicas/maxReplicas; one set copies the other;
  // neither set = both the Worker replicas.
  uint32_t min_replicas = 0;
  uint32_t max_replicas = 0;
  // Sum of the Worker pod's containers' nvidia.com/gpu limits; unset = none.
  std::optional<uint32_t> gpus_per_replica;
  int32_t priority = 0;
  std::optional<bool> preemptible;
  std::optional<double> restart_cost_seconds;
  uint32_t local_batch_size = 0;
  std::string policy;
  std::map<std::string, std::string> parameters;
  // elasticPolicy.metrics is set: the operator owns an HPA for the job.
  bool operator_hpa = false;
  // A Succeeded or Failed condition is True.
  bool finished = false;
};

// Decodes a PyTorchJob object of either flavour. INVALID_ARGUMENT names the
// object and the field (a missing Worker spec, an annotation that does not
// parse, min > max).
absl::StatusOr<JobInfo> ParsePyTorchJob(const nlohmann::json& object);

// The merge patch that sets Worker replicas and/or runPolicy.suspend,
// guarded by `resource_version` (optimistic concurrency).
nlohmann::json WorkerPatch(const std::string& resource_version, std::optional<uint32_t> workers,
                           std::optional<bool> suspend);
// The merge patch that sets a PodGroup's spec.minMember.
nlohmann::json MinMemberPatch(const std::string& resource_version, uint32_t min_member);

// The Worker replicas to write for a recommendation of `recommended`:
// clamped into [min_replicas, max_replicas] (the operator fixed
// PET_NNODES=min:max at creation). Sets *clamped when it had to.
uint32_t ClampReplicas(const JobInfo& job, uint32_t recommended, bool* clamped);

// The JobSpec registered with rescaled for a job.
v1::JobSpec ToJobSpec(const JobInfo& job);

// Sum of nodes' status.allocatable["nvidia.com/gpu"] for one Node object;
// 0 when absent or not an integer quantity.
uint32_t NodeGpus(const nlohmann::json& node);

// "PyTorchJob ns/name (group/version)", how messages name a job.
std::string DescribeJob(const ApiVersion& api, const std::string& id);

// The value at a path of object keys, or null json when any step is missing.
const nlohmann::json& FieldAt(const nlohmann::json& object,
                              std::initializer_list<const char*> keys);

}  // namespace rescale::adapter

#endif  // RESCALE_CLIENT_ADAPTER_PYTORCHJOB_H_
