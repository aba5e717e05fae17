// The PyTorchJob side of rescale-adapter, free of threads and RPCs: the
// Kubeflow and KubeDL PyTorchJob objects it reads, the JSON merge patches it
// writes, and the JobSpec it registers with rescaled.
//
//   ParsePyTorchJob  a PyTorchJob object -> JobInfo (the fields the adapter
//                    needs, min/max per elasticPolicy, rescale.io/*
//                    annotations), errors naming the field;
//   WorkerPatch, MinMemberPatch  the merge patches the adapter sends (a
//                    change carries the rescale.io/* status annotations,
//                    RecommendationAnnotations, in the same patch);
//   ClampReplicas, ToJobSpec, NodeGpus, ResourcePath  small mappings.
//
// Kubeflow Trainer v2 TrainJobs, which the adapter can suspend and resume
// but not resize, are read in client/adapter/trainjob.h into the same
// JobInfo.
#ifndef RESCALE_CLIENT_ADAPTER_PYTORCHJOB_H_
#define RESCALE_CLIENT_ADAPTER_PYTORCHJOB_H_

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/adapter/node_capacity.h"
#include "rescale/v1/rescale.pb.h"

namespace rescale::adapter {

// Label and annotations that opt a job in and describe it to rescaled.
inline constexpr char kManagedLabel[] = "rescale.io/managed";
inline constexpr char kPriorityAnnotation[] = "rescale.io/priority";
inline constexpr char kRestartCostAnnotation[] = "rescale.io/restart-cost-seconds";
inline constexpr char kPreemptibleAnnotation[] = "rescale.io/preemptible";
inline constexpr char kPolicyAnnotation[] = "rescale.io/policy";
// Without Kueue: the Rescale queue a job draws from (rescale/queues.h), for
// queues set by --queues-file or rescalectl queue set.
inline constexpr char kQueueAnnotation[] = "rescale.io/queue";
inline constexpr char kLocalBatchSizeAnnotation[] = "rescale.io/local-batch-size";
// rescale.io/parameter.<key>: one JobSpec.parameters entry each.
inline constexpr char kParameterAnnotationPrefix[] = "rescale.io/parameter.";
// What the adapter last changed on a job, written by it in the same merge
// patch as the change (so `kubectl describe` never shows a change without
// its reason): the replicas rescaled recommended (0 = suspend), the
// recommendation's generation, and its reason as applied.
inline constexpr char kRecommendedReplicasAnnotation[] = "rescale.io/recommended-replicas";
inline constexpr char kGenerationAnnotation[] = "rescale.io/generation";
inline constexpr char kReasonAnnotation[] = "rescale.io/reason";
// A goodput-planned recommendation's batch goes with its change, in the same
// patch: kLocalBatchSizeAnnotation (the one the job declares its batch in,
// so its workers, which read it when they start, and its next registration
// both see the batch they run) and the extra micro-steps per optimizer step
// (Recommendation.accumulation_steps). Left as they are by a recommendation
// without a batch: the workers keep the batch they were last given, and the
// user's declared batch is never removed.
inline constexpr char kAccumulationStepsAnnotation[] = "rescale.io/accumulation-steps";
// The GPU types a job may run on (JobSpec.gpu_types), comma-separated
// nvidia.com/gpu.product values; absent = any type.
inline constexpr char kGpuTypesAnnotation[] = "rescale.io/gpu-types";
// Set by the adapter, with the recommendation's generation, on a job it
// suspended to move it to another GPU type (see Adapter::ApplyToKube): the
// training operator does not recreate running pods when their template
// changes, so the move is suspend + new nodeSelector in one patch, then
// resume once the operator has suspended the job and its pods are gone.
// Removed by the resume and by a later recommendation that suspends the job
// (one that resizes it keeps the move, with its own generation).
inline constexpr char kResumeAfterMoveAnnotation[] = "rescale.io/resume-after-move";
// Set by the adapter, in the same patch, to the nvidia.com/gpu.product value
// it writes as the Worker template's node selector. A selector the adapter
// wrote is its to remove when the plan stops naming a type (the cluster has
// one product left, or none labelled), where it could pin the job to nodes
// that are gone; one the user wrote (no such annotation, or another value)
// is theirs and stays.
inline constexpr char kSelectedGpuTypeAnnotation[] = "rescale.io/selected-gpu-type";
// What Adapter::RunningTypeLocked says of a job whose pods are bound to
// nodes of different products, or to GPU nodes without the product label:
// it runs on no one type, so any type written to it is a move. Not a type
// name (IsGpuTypeName refuses parentheses), and never reported to rescaled.
inline constexpr char kSeveralGpuTypes[] = "(several)";
// Longest rescale.io/reason value written, in bytes: a readable sentence,
// far below the API server's 256 KiB for all annotations together.
inline constexpr size_t kMaxReasonAnnotationBytes = 1024;
// Added to the reason of every recommendation applied to a job that cannot
// be resized (JobInfo::resizable false: a TrainJob).
inline constexpr char kNotResizableNote[] =
    "TrainJob cannot be resized: spec.trainer.numNodes is immutable";
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
// Kubeflow Trainer v2 TrainJob (client/adapter/trainjob.h).
inline const ApiVersion kTrainerV1alpha1{"trainer.kubeflow.org", "v1alpha1"};

// /apis/{group}/{version}[/namespaces/{ns}]/{resource}[/{name}]
std::string ResourcePath(const ApiVersion& api, const std::string& resource,
                         const std::string& ns = "", const std::string& name = "");

// What the adapter reads from a PyTorchJob (or a TrainJob, trainjob.h).
struct JobInfo {
  std::string ns;
  std::string name;
  std::string id;  // "ns/name"
  ApiVersion api;
  std::string kind = "PyTorchJob";  // the object's kind, for Events' `regarding`
  std::string uid;                  // metadata.uid, for Events' `regarding`
  std::string resource_version;
  // False for a TrainJob: its spec.trainer.numNodes is immutable, so the
  // adapter only suspends and resumes it.
  bool resizable = true;
  uint32_t workers = 0;  // spec.pytorchReplicaSpecs.Worker.replicas
  uint32_t masters = 0;  // spec.pytorchReplicaSpecs.Master.replicas (0 if none)
  // The Master template's containers ask for nvidia.com/gpu: rank 0
  // trains on a GPU and must run on the Workers' type.
  bool master_gpus = false;
  bool suspended = false;  // spec.runPolicy.suspend
  // elasticPolicy.minReplicas/maxReplicas; one set copies the other;
  // neither set = both the Worker replicas.
  uint32_t min_replicas = 0;
  uint32_t max_replicas = 0;
  // Sum of the Worker pod's containers' nvidia.com/gpu limits; unset = none.
  std::optional<uint32_t> gpus_per_replica;
  // The Worker template's tolerations: which tainted nodes count toward
  // the capacity (client/adapter/node_capacity.h).
  std::vector<Toleration> tolerations;
  // The GPU type its workers are sent to: the Worker template's
  // nodeSelector["nvidia.com/gpu.product"] ("" = none).
  std::string gpu_type;
  // The selector value the adapter wrote: its rescale.io/selected-gpu-type
  // annotation ("" = none).
  std::string selected_gpu_type;
  // The types it may use: its rescale.io/gpu-types annotation (empty =
  // any); for a job the adapter cannot move (a TrainJob), its gpu_type.
  std::vector<std::string> gpu_types;
  // Its rescale.io/resume-after-move annotation: the adapter suspended it
  // to move it to another type and resumes it once its pods are gone.
  std::string resume_after_move;
  // The training operator says it has suspended the job (a Suspended
  // condition is True): it has deleted the job's pods.
  bool operator_suspended = false;
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
  // The LocalQueue its kueue.x-k8s.io/queue-name label names; non-empty =
  // Kueue admits the job (client/adapter/kueue.h): the adapter never writes
  // its suspend, and sizes it only while it runs.
  std::string kueue_local_queue;
  // The Rescale queue (JobSpec.queue): its rescale.io/queue annotation, or
  // for a Kueue job the ClusterQueue of its LocalQueue (set by the adapter).
  std::string queue;
  bool kueue_managed() const { return !kueue_local_queue.empty(); }
};

// A TrainJob that selects no GPU type itself (spec.podSpecOverrides): the
// adapter cannot move it, so once its pods run on one type it is
// registered with that type only (Adapter::SyncJob).
inline bool UnpinnedTrainJob(const JobInfo& job) {
  return !job.resizable && job.gpu_type.empty() && !job.kueue_managed();
}

// The parts every job kind shares, read into `job`: metadata (name and
// namespace, required; apiVersion, resourceVersion, uid) with `kind` ...
absl::Status ReadJobMetadata(const nlohmann::json& object, const char* kind, JobInfo* job);
// ... and the rescale.io/* annotations (priority, restart cost, preemptible,
// policy, local batch size, parameters). INVALID_ARGUMENT names the job
// and the annotation that does not parse.
absl::Status ReadRescaleAnnotations(const nlohmann::json& object, JobInfo* job);
// Whether a status.conditions entry of one of `types` has status "True".
bool ConditionTrue(const nlohmann::json& object, std::initializer_list<const char*> types);

// Decodes a PyTorchJob object of either flavour. INVALID_ARGUMENT names the
// object and the field (a missing Worker spec, an annotation that does not
// parse, min > max).
absl::StatusOr<JobInfo> ParsePyTorchJob(const nlohmann::json& object);

// The merge patch that sets Worker replicas and/or runPolicy.suspend,
// guarded by `resource_version` (optimistic concurrency), with
// `annotations` (RecommendationAnnotations) merged into
// metadata.annotations in the same patch.
nlohmann::json WorkerPatch(const std::string& resource_version, std::optional<uint32_t> workers,
                           std::optional<bool> suspend,
                           const std::map<std::string, std::string>& annotations = {});

// The GPU type applying `recommendation` writes to `job` ("" = none): only
// to a job the adapter resizes and places (Kueue's flavours set a Kueue
// job's node selector; a TrainJob's is in its podSpecOverrides).
std::string GpuTypeToWrite(const JobInfo& job, const v1::Recommendation& recommendation);

// Whether writing `gpu_type` to a running job whose pods run on `runs_on`
// ("" = unknown, kSeveralGpuTypes = on more than one) moves it to another
// type. A move's first patch suspends the job
// (Adapter::ApplyToKube), so a plan orders it with the releases.
inline bool MovesType(const std::string& runs_on, const std::string& gpu_type) {
  return !gpu_type.empty() && !runs_on.empty() && runs_on != gpu_type;
}

// `patch` (a WorkerPatch) also setting the Worker template's
// nodeSelector["nvidia.com/gpu.product"] to `gpu_type` (other selector
// keys stay: a merge patch merges maps key by key), and the Master's too
// when `master` (a Master on GPUs: one job, one type).
nlohmann::json WithWorkerGpuType(nlohmann::json patch, const std::string& gpu_type, bool master);
// `patch` also removing that selector key (and the Master's, when `master`)
// and the rescale.io/selected-gpu-type annotation (merge patch nulls, RFC
// 7386). Pods already running stay where they are; pods created from then
// on (a restart, a replacement for a lost node) may go to any GPU node.
nlohmann::json WithoutWorkerGpuType(nlohmann::json patch, bool master);

// The rescale.io/recommended-replicas, rescale.io/generation and
// rescale.io/reason annotations for applying `recommendation`, with
// `reason` (the recommendation's reason as applied, see AppliedReason) made
// a valid annotation value by SanitizeText(reason, kMaxReasonAnnotationBytes);
// when the recommendation has a batch (local_batch_size set), also
// rescale.io/local-batch-size and rescale.io/accumulation-steps ("0" when
// unset).
std::map<std::string, std::string> RecommendationAnnotations(
    const v1::Recommendation& recommendation, const std::string& reason);

// `text` as valid UTF-8 of at most `max_bytes` bytes: invalid bytes become
// U+FFFD, control characters other than tab become spaces, and a longer
// text is cut at a character boundary and ends in "...". Recommendations'
// reasons come from rescaled and job names from users; annotations and
// Event notes must be valid strings within the API server's limits.
std::string SanitizeText(const std::string& text, size_t max_bytes);

// The recommendation's reason as the adapter applied it: rescaled's reason,
// plus what the adapter did differently (replicas clamped into the job's
// [min, max]; a TrainJob, which cannot be resized; a Kueue job, whose
// suspend is Kueue's: waiting for admission, or left running).
std::string AppliedReason(const JobInfo& job, const v1::Recommendation& recommendation,
                          uint32_t written_replicas);
// The merge patch that sets a PodGroup's spec.minMember.
nlohmann::json MinMemberPatch(const std::string& resource_version, uint32_t min_member);

// The Worker replicas to write for a recommendation of `recommended`:
// clamped into [min_replicas, max_replicas] (the operator fixed
// PET_NNODES=min:max at creation). Sets *clamped when it had to.
uint32_t ClampReplicas(const JobInfo& job, uint32_t recommended, bool* clamped);

// The JobSpec registered with rescaled for a job.
v1::JobSpec ToJobSpec(const JobInfo& job);

// A Kubernetes quantity of a countable resource: "4" or 4 (GPUs are whole);
// nullopt for anything else ("500m", "1Gi", negative).
std::optional<uint32_t> WholeQuantity(const nlohmann::json& value);

// Sum of nodes' status.allocatable["nvidia.com/gpu"] for one Node object;
// 0 when absent or not an integer quantity.
uint32_t NodeGpus(const nlohmann::json& node);

// "PyTorchJob ns/name (group/version)" ("TrainJob ..." in Trainer's
// group), how messages name a job.
std::string DescribeJob(const ApiVersion& api, const std::string& id);

// The value at a path of object keys, or null json when any step is missing.
const nlohmann::json& FieldAt(const nlohmann::json& object,
                              std::initializer_list<const char*> keys);

}  // namespace rescale::adapter

#endif  // RESCALE_CLIENT_ADAPTER_PYTORCHJOB_H_
