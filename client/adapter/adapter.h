// rescale-adapter's controller: it keeps rescaled's view of the cluster's
// PyTorchJobs and GPU capacity current, and applies rescaled's
// recommendations to those jobs (and their gang PodGroups) through a
// KubeClient.
//
// Pieces, each usable alone:
//   ParsePyTorchJob  a Kubeflow or KubeDL PyTorchJob object -> JobInfo (the
//                    fields the adapter needs, min/max per elasticPolicy,
//                    rescale.io/* annotations), errors naming the field;
//   WorkerPatch, MinMemberPatch  the JSON merge patches the adapter sends;
//   Backoff          exponential backoff with injected jitter;
//   Adapter          the controller: threads that list+watch jobs and nodes
//                    and one that watches recommendations and applies them.
//
// Thread safety: Adapter's public methods may be called from any thread.
// Stop() (and the destructor) joins every thread the adapter started.
#ifndef RESCALE_CLIENT_ADAPTER_ADAPTER_H_
#define RESCALE_CLIENT_ADAPTER_ADAPTER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <nlohmann/json.hpp>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/adapter/kube_client.h"
#include "rescale/clock.h"
#include "rescale/v1/rescale.grpc.pb.h"

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
  uint32_t workers = 0;  // spec.pytorchReplicaSpecs.Worker.replicas
  uint32_t masters = 0;  // spec.pytorchReplicaSpecs.Master.replicas (0 if none)
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

struct BackoffOptions {
  absl::Duration initial = absl::Milliseconds(500);
  absl::Duration max = absl::Seconds(30);
  double multiplier = 2.0;
  // Each delay is scaled by a factor drawn uniformly from [1-jitter, 1+jitter]
  // so many adapters (or many jobs) do not retry in lockstep.
  double jitter = 0.2;
};

// Exponential backoff. Not thread-safe; one per retry loop.
class Backoff {
 public:
  // `random` returns uniform values in [0, 1); it is injected so tests get
  // a fixed sequence.
  Backoff(BackoffOptions options, std::function<double()> random);
  absl::Duration Next();
  void Reset() { attempt_ = 0; }

 private:
  BackoffOptions options_;
  std::function<double()> random_;
  int attempt_ = 0;
};

// What the adapter did, for tests and for the log's structure.
struct AdapterEvent {
  enum class Kind {
    kJobsListed,       // a LIST of jobs (one API version) was processed
    kNodesListed,      // a LIST of nodes was processed
    kRegistered,       // job registered or updated with rescaled
    kDeregistered,     // job deregistered (finished or deleted)
    kSkipped,          // job not managed (operator HPA, invalid): detail says why
    kApplied,          // a recommendation's generation applied and reported
    kDryRunPatch,      // dry run: detail is "PATCH path body"
    kCapacitySet,      // SetCapacity sent; value = GPUs
    kRescaledSynced,   // a WatchRecommendations stream delivered SYNCED
    kWatchRelisted,    // a watch got 410 Gone and relists
    kBookmark,         // a watch moved to a BOOKMARK's resourceVersion (detail)
  };
  Kind kind;
  std::string job_id;
  uint64_t value = 0;  // generation for kApplied, GPUs for kCapacitySet
  std::string detail;
};

struct AdapterOptions {
  // Only jobs in this namespace; empty = all namespaces.
  std::string ns;
  // Jobs carrying this label selector are managed.
  std::string label_selector = "rescale.io/managed=true";
  // PyTorchJob APIs to list+watch; an API whose CRD is not installed is
  // retried with backoff (and logged once).
  std::vector<ApiVersion> job_apis = {kKubeflowV1, kKubeDlV1alpha1};
  // PodGroup APIs looked up (in order) for a job's gang.
  std::vector<ApiVersion> podgroup_apis = {kCoschedulingV1alpha1, kVolcanoV1beta1};
  // Fixed GPU capacity; -1 = the sum of nodes' allocatable nvidia.com/gpu.
  int64_t capacity_gpus = -1;
  // Print patches to `dry_run_out` (and the log) instead of sending them;
  // ReportApplied is then not called for recommendations (nothing was applied).
  bool dry_run = false;
  std::ostream* dry_run_out = nullptr;
  BackoffOptions backoff;
  // 409 Conflicts retried (re-GET, recompute, re-PATCH) per write.
  int max_conflict_retries = 5;
  // Attempts at applying one recommendation on transient errors.
  int max_apply_attempts = 5;
  // Deadline of each unary RPC to rescaled.
  absl::Duration rpc_timeout = absl::Seconds(10);
  // Uniform [0,1) source for jitter; null = a generator seeded from
  // std::random_device.
  std::function<double()> random;
  // Receives every AdapterEvent, on the adapter's threads; must not block.
  std::function<void(const AdapterEvent&)> observer;
};

class Adapter {
 public:
  // `kube` must outlive the adapter; `channel` reaches rescaled.
  Adapter(AdapterOptions options, KubeClient* kube, std::shared_ptr<grpc::Channel> channel);
  ~Adapter();
  Adapter(const Adapter&) = delete;
  Adapter& operator=(const Adapter&) = delete;

  // Starts the threads. Call once.
  void Start();
  // Stops and joins them; cancels the watches in flight. Idempotent.
  void Stop();

 private:
  struct JobEntry {
    JobInfo info;
    bool registered = false;  // with the rescaled of the current stream
    std::optional<std::string> sent_spec;  // serialized JobSpec last sent
    uint64_t applied_generation = 0;
  };

  // List+watch loop over a collection; `on_list` gets every item of a
  // (re)list, `on_event` every ADDED/MODIFIED/DELETED.
  void ListWatch(const std::string& path, const std::string& selector,
                 const std::function<void(const std::vector<nlohmann::json>&)>& on_list,
                 const std::function<void(const WatchEvent&)>& on_event,
                 AdapterEvent::Kind listed_kind, const std::string& what);
  void RunJobs(const ApiVersion& api);
  void RunNodes();
  void RunRecommendations();

  void OnJobObject(const ApiVersion& api, const nlohmann::json& object);
  void OnJobGone(const std::string& id, const std::string& why);
  // Registers (or updates) the job with rescaled if needed; reports the
  // initial applied state after a registration.
  void SyncJob(const std::string& id);
  void ResyncAll();
  void SendCapacity();
  void Apply(const v1::Recommendation& recommendation);
  // Applies the stream's latest recommendation for `id` if it is newer than
  // what was applied: for a job discovered after its recommendation came,
  // and to retry one whose application failed.
  void ApplyLatest(const std::string& id);
  // Writes one job (and its PodGroup) toward the target; returns the
  // replicas it now runs.
  absl::Status ApplyToKube(const JobInfo& job, uint32_t workers, bool suspend);
  absl::Status PatchPodGroup(const JobInfo& job, uint32_t min_member);
  // GETs `path`, builds a patch from the fresh object, PATCHes; on 409
  // re-GETs and retries. `make_patch` returns null when nothing differs.
  absl::Status PatchWithRetry(
      const std::string& path,
      const std::function<absl::StatusOr<nlohmann::json>(const nlohmann::json&)>& make_patch);
  void ReportApplied(const std::string& id, uint32_t replicas, bool suspended, uint64_t generation);

  void Emit(AdapterEvent event);
  // Waits `d` or until Stop(); returns false when stopping.
  bool SleepFor(absl::Duration d);
  bool stopping() const { return stop_.load(std::memory_order_acquire); }
  std::unique_ptr<grpc::ClientContext> NewContext() const;

  const AdapterOptions options_;
  KubeClient* const kube_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::JobService::Stub> jobs_stub_;
  std::unique_ptr<v1::RecommendationService::Stub> recs_stub_;
  std::unique_ptr<v1::ClusterService::Stub> cluster_stub_;

  std::atomic<bool> stop_{false};
  absl::Mutex stop_mu_;
  bool stopping_flag_ ABSL_GUARDED_BY(stop_mu_) = false;

  absl::Mutex random_mu_;
  std::function<double()> random_ ABSL_GUARDED_BY(random_mu_);
  std::mt19937_64 generator_ ABSL_GUARDED_BY(random_mu_);
  double NextRandom();

  // Serializes the rescaled-side syncing of jobs (register, update,
  // deregister), which happens from the job watchers and the
  // recommendation thread.
  absl::Mutex sync_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  // Serializes applying, which happens on the recommendation thread and
  // (ApplyLatest) on the job watchers.
  // SyncJob holds it too (after sync_mu_) so that an apply cannot slip in
  // between a registration and its initial ReportApplied.
  absl::Mutex apply_mu_ ABSL_ACQUIRED_AFTER(sync_mu_) ABSL_ACQUIRED_BEFORE(mu_);
  absl::Mutex mu_;
  std::map<std::string, JobEntry> jobs_ ABSL_GUARDED_BY(mu_);
  // The current stream's newest recommendation per job.
  std::map<std::string, v1::Recommendation> latest_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string> skipped_ ABSL_GUARDED_BY(mu_);  // id -> reason logged
  std::map<std::string, uint32_t> node_gpus_ ABSL_GUARDED_BY(mu_);
  std::optional<uint32_t> sent_capacity_ ABSL_GUARDED_BY(mu_);
  bool nodes_listed_ ABSL_GUARDED_BY(mu_) = false;

  absl::Mutex stream_mu_;
  grpc::ClientContext* stream_context_ ABSL_GUARDED_BY(stream_mu_) = nullptr;

  std::vector<std::thread> threads_;
};

}  // namespace rescale::adapter

#endif  // RESCALE_CLIENT_ADAPTER_ADAPTER_H_
