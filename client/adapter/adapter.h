// rescale-adapter's controller: it keeps rescaled's view of the cluster's
// PyTorchJobs (and Trainer v2 TrainJobs) and GPU capacity current, and
// applies rescaled's recommendations to those jobs (and their gang
// PodGroups) through a KubeClient.
//
// The PyTorchJob mapping (parsing, patches) lives in client/adapter/pytorchjob.h,
// the TrainJob one in client/adapter/trainjob.h, Events in
// client/adapter/job_events.h; this is the controller: threads that
// list+watch jobs and nodes, one that watches recommendations and one that
// applies them.
//
// What an apply leaves behind for `kubectl describe`: the patch that
// changes a job also sets its rescale.io/recommended-replicas,
// rescale.io/generation and rescale.io/reason annotations (one write, so
// the change and its reason are never seen apart), and each change records
// an Event (reason Rescaled, Suspended or Resumed; note = the reason as
// applied), rate-limited per job. A recommendation that changes nothing
// (the job already runs as recommended) writes neither.
//
// Applying a plan in the safe order. rescaled's planner publishes a plan's
// changes together, but the WatchRecommendations stream carries them one
// job at a time, in job-id order, then the plan's PLAN_END; applying each
// as it arrives could grow a job before the shrink that makes room for it
// (pods Pending, gangs deadlocked). So the stream thread holds a plan's
// changes until its PLAN_END and then records them together, as the newest
// recommendation per job, and a separate applier thread applies in batches:
// the initial snapshot (up to SYNCED) once every job API has been listed,
// then every whole plan that has arrived while it was busy or asleep. Each
// batch is ordered by OrderForApply (rescale/apply_order.h) from the
// replicas the job runs as last observed (0 when suspended) to the target
// (0 when the recommendation suspends, else the clamped replicas): every
// release (shrink, suspend) is written before any acquire (grow, resume,
// start), the order the simulator assumes. When a release fails for good,
// the batch's acquires wait for the next event instead of over-committing.
// A rescaled older than plan boundaries sends changes with plan_id 0 and no
// PLAN_END: those are recorded as they arrive, as before, so a plan split
// across two batches (the applier woke between two of its changes) is
// ordered batch by batch, not as one; no idle timer guesses the boundary
// (a guess would delay every change and still split a slow plan).
//
// Thread safety: Adapter's public methods may be called from any thread.
// Stop() (and the destructor) joins every thread the adapter started.
#ifndef RESCALE_CLIENT_ADAPTER_ADAPTER_H_
#define RESCALE_CLIENT_ADAPTER_ADAPTER_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/adapter/adapter_metrics.h"
#include "client/adapter/job_events.h"
#include "client/adapter/kube_client.h"
#include "client/adapter/kueue.h"
#include "client/adapter/node_capacity.h"
#include "client/adapter/pytorchjob.h"
#include "client/adapter/trainjob.h"
#include "client/common/backoff.h"
#include "client/common/server_list.h"
#include "rescale/clock.h"
#include "rescale/v1/rescale.grpc.pb.h"

namespace rescale::adapter {

// What the adapter did, for tests and for the log's structure.
struct AdapterEvent {
  enum class Kind {
    kJobsListed,        // a LIST of jobs (one API version) was processed
    kNodesListed,       // a LIST of nodes was processed
    kRegistered,        // job registered or updated with rescaled
    kDeregistered,      // job deregistered (finished or deleted)
    kSkipped,           // job not managed (operator HPA, invalid): detail says why
    kApplied,           // a recommendation's generation applied and reported
    kDryRunPatch,       // dry run: detail is "PATCH path body"
    kCapacitySet,       // SetCapacity sent; value = usable GPUs, detail = slots[;types]
    kPodsListed,        // a LIST of pods holding node GPUs was processed
    kRescaledSynced,    // a WatchRecommendations stream delivered SYNCED
    kWatchRelisted,     // a watch got 410 Gone and relists
    kBookmark,          // a watch moved to a BOOKMARK's resourceVersion (detail)
    kEventRecorded,     // a Kubernetes Event was created; detail = its reason
    kEventFailed,       // an Event's POST failed (the change stands); detail = error
    kEventRateLimited,  // an Event the job's rate limit (or a full queue) held back
    kChangeReceived,    // a change read from the stream; value = its generation
    kPlanReceived,      // a PLAN_END: the plan goes to the applier; value = plan_id
    kQueuesListed,      // a LIST of ClusterQueues or LocalQueues; detail = path
    kQueuesSet,         // SetQueues sent; value = queues, detail = their names
    kKueueWaiting,      // a Kueue job's recommendation waits for Kueue; value = generation
    kMoveResumed,       // a job moved to another GPU type was resumed there; detail = type
    kMoveWaiting,       // a moved job waits: detail "operator" (its Suspended
                        // condition) or "pods"; value = its pods still on nodes
  };
  Kind kind;
  std::string job_id;
  uint64_t value = 0;  // generation for kApplied, usable GPUs for kCapacitySet
  std::string detail;
};

struct AdapterOptions {
  // Only jobs in this namespace; empty = all namespaces.
  std::string ns;
  // Jobs carrying this label selector are managed.
  std::string label_selector = "rescale.io/managed=true";
  // Job APIs to list+watch: PyTorchJobs (Kubeflow, KubeDL) and Trainer v2
  // TrainJobs (trainer.kubeflow.org, suspend/resume only). An API whose CRD
  // is not installed is retried with backoff (and logged once) and does
  // not hold back the others.
  std::vector<ApiVersion> job_apis = {kKubeflowV1, kKubeDlV1alpha1, kTrainerV1alpha1};
  // PodGroup APIs looked up (in order) for a job's gang.
  std::vector<ApiVersion> podgroup_apis = {kCoschedulingV1alpha1, kVolcanoV1beta1};
  // Fixed GPU capacity; -1 = what the nodes and pods leave for the managed
  // jobs, with per-class slots (client/adapter/node_capacity.h), from a
  // watch of every node and of the pods bound to them.
  int64_t capacity_gpus = -1;
  // Print patches to `dry_run_out` (and the log) instead of sending them;
  // ReportApplied is then not called for recommendations (nothing was applied).
  bool dry_run = false;
  std::ostream* dry_run_out = nullptr;
  client::BackoffOptions backoff;
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
  // Events for applied changes: reporting instance, per-job rate limit and
  // the clock it runs on (JobEventOptions documents the defaults). None are
  // recorded in a dry run.
  JobEventOptions events;
  // Queues (rescale/queues.h; client/adapter/kueue.h). Set: these (from
  // --queues-file) are sent with SetQueues once rescaled's stream is synced
  // and after every resync, and Kueue is not read. Unset and `kueue`: while
  // the cluster serves kueue.x-k8s.io, its ClusterQueues are mirrored as
  // Rescale's queues and its LocalQueues place Kueue-labelled jobs. Neither:
  // the adapter leaves rescaled's queues alone (rescalectl queue set).
  std::optional<std::vector<QueueSpec>> queues;
  bool kueue = true;
  // Where applies are counted and timed (null = nowhere); must outlive the
  // adapter. API errors and PATCHes are counted by wrapping the KubeClient
  // in a MeteredKubeClient on the same AdapterMetrics.
  AdapterMetrics* metrics = nullptr;
};

class Adapter {
 public:
  // `kube` must outlive the adapter; `channel` reaches rescaled.
  Adapter(AdapterOptions options, KubeClient* kube, std::shared_ptr<grpc::Channel> channel);
  // With high availability: every rescaled replica; the adapter follows the
  // leader (it watches the leader, and moves to the leader a follower names
  // when a change is refused, then registers everything there again).
  Adapter(AdapterOptions options, KubeClient* kube, std::shared_ptr<client::ServerList> servers);
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
    // Registered once since the adapter saw it, and kept through ResyncAll
    // (which re-registers every job): its pods' GPUs are the managed jobs',
    // so a capacity computed mid-resync does not count them as foreign.
    bool managed = false;
    std::optional<std::string> sent_spec;  // serialized JobSpec last sent
    uint64_t applied_generation = 0;
  };

  // List+watch loop over a collection; `on_list` gets every item of a
  // (re)list, `on_event` every ADDED/MODIFIED/DELETED.
  void ListWatch(const std::string& path, const Selectors& selector,
                 const std::function<void(const std::vector<nlohmann::json>&)>& on_list,
                 const std::function<void(const WatchEvent&)>& on_event,
                 const std::function<void()>& on_list_error, AdapterEvent::Kind listed_kind,
                 const std::string& what);
  void RunJobs(const ApiVersion& api);
  void RunNodes();
  // Watches the pods bound to nodes (every namespace) for the GPUs that
  // pods of unmanaged work hold.
  void RunPods();
  void RunRecommendations();
  // Kueue (client/adapter/kueue_sync.cc): waits until a version of
  // kueue.x-k8s.io serves `resource`, then list+watches it there.
  void RunKueue(const std::string& resource);
  void OnClusterQueues(const std::vector<nlohmann::json>* list, const WatchEvent* event);
  void OnLocalQueues(const std::vector<nlohmann::json>* list, const WatchEvent* event);
  // Sends the queues when they differ from what was sent: options_.queues,
  // or Kueue's ClusterQueues once listed.
  void SendQueues();
  // The Rescale queue of a job: for a Kueue job, the ClusterQueue of its
  // LocalQueue ("" while that LocalQueue is unknown); else its annotation.
  std::string QueueOfLocked(const JobInfo& job) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Re-registers the Kueue jobs whose queue `local_queues` (keys) moved.
  void ResyncKueueJobs(const std::set<std::string>& local_queues);
  // The applier thread: waits for ApplyGateOpenLocked, applies one batch.
  void RunApplier();

  void OnJobObject(const ApiVersion& api, const nlohmann::json& object);
  void OnJobGone(const std::string& id, const std::string& why);
  // Registers (or updates) the job with rescaled if needed; reports the
  // initial applied state after a registration.
  void SyncJob(const std::string& id);
  void ResyncAll();
  // Sends the capacity when it differs from what was sent (a fixed one,
  // or once nodes and pods are both listed, the honest one).
  void SendCapacity();
  // The honest capacity now: nodes_, gpu_pods_ not of a registered job,
  // and the registered jobs' size classes and tolerations.
  HonestCapacity ComputeCapacityLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // One recommendation not yet applied, with the counts that order it.
  struct PendingApply {
    v1::Recommendation recommendation;
    uint32_t running = 0;  // replicas the job runs as last observed; 0 = suspended
    uint32_t target = 0;   // replicas it will run; 0 = suspend
  };
  // Records a change (ADDED, MODIFIED, DELETED) in latest_ for the applier.
  void RecordLocked(const v1::RecommendationEvent& event) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Tells the applier to look for work (a new recommendation, a job
  // discovered or changed, which may also retry a failed apply).
  void WakeApplier();
  // The applier may run: it was woken, the stream is synced and every job
  // API has been listed once; or the adapter is stopping.
  bool ApplyGateOpenLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Every recommendation of latest_ newer than what its (registered) job
  // has applied, releases first (OrderForApply).
  std::vector<PendingApply> PendingBatchLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Applies one recommendation (retrying transient errors) and reports it.
  // False when it gave up; true when applied or nothing was to be done.
  bool Apply(const v1::Recommendation& recommendation);
  // What ApplyToKube changed: the kind of change and the job's
  // resourceVersion after it.
  struct AppliedChange {
    JobChange change;
    std::string resource_version;
    bool event = true;  // false: only the job's annotations were refreshed
  };
  // Writes one job (and its PodGroup) toward the target, with `annotations`
  // in the job's patch: the change once the job (and its PodGroup, if any)
  // say so, nullopt when the job already ran as wanted (or in a dry run),
  // or the error that stopped it.
  // A non-empty `gpu_type` is written as the Worker template's node
  // selector; when the job runs on another type (`running_type`, or its
  // selector), that is a move: suspend, selector and size in one patch,
  // marked rescale.io/resume-after-move for ResumeMovedJobs.
  absl::StatusOr<std::optional<AppliedChange>> ApplyToKube(
      const JobInfo& job, uint32_t workers, bool suspend, const std::string& gpu_type,
      const std::string& running_type, const std::map<std::string, std::string>& annotations);
  // The GPU type `job` runs on: its Worker template's selector, else the
  // product of the nodes its GPU pods are bound to when they all agree;
  // kSeveralGpuTypes when they do not, or one is on a GPU node without the
  // label; "" = unknown (no selector, and no pod seen or one on a node not
  // seen yet).
  std::string RunningTypeLocked(const JobInfo& job) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // RunningTypeLocked while the capacity last sent had GPU types, else ""
  // (what ReportApplied says when no recommendation names a type).
  std::string ReportedTypeLocked(const JobInfo& job) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Resumes the jobs suspended for a move (rescale.io/resume-after-move)
  // whose pods are gone: the operator's Suspended condition is True and,
  // when pods are watched, none of their GPU pods is left on a node.
  // Called after job and pod events.
  void ResumeMovedJobs() ABSL_LOCKS_EXCLUDED(apply_mu_, mu_);
  absl::Status PatchPodGroup(const JobInfo& job, uint32_t min_member);
  // The patch of a Kueue job (`object`, parsed as `current`) toward
  // `workers` (or `suspend`): never its suspend; its size only while Kueue
  // has it admitted (running); else only the rescale.io/* annotations that
  // say why. Null json when nothing is to be written. Sets `change` and
  // `event` (whether the write deserves an Event).
  nlohmann::json KueuePatch(const nlohmann::json& object, const JobInfo& current, uint32_t workers,
                            bool suspend, const std::map<std::string, std::string>& annotations,
                            JobChange& change, bool& event);
  // GETs `path`, builds a patch from the fresh object, PATCHes; on 409
  // re-GETs and retries. `make_patch` returns null when nothing differs.
  // `patched`, when not null, receives the object the PATCH returned (null
  // json when nothing was sent).
  absl::Status PatchWithRetry(
      const std::string& path,
      const std::function<absl::StatusOr<nlohmann::json>(const nlohmann::json&)>& make_patch,
      nlohmann::json* patched = nullptr);
  // PatchWithRetry of `job`'s object, `make_patch` given the fresh object
  // and its parse (a parse error stops the write).
  absl::Status PatchJobWithRetry(
      const JobInfo& job,
      const std::function<absl::StatusOr<nlohmann::json>(const nlohmann::json&, const JobInfo&)>&
          make_patch,
      nlohmann::json* patched = nullptr);
  // `gpu_type` is where it runs ("" = unknown, or the cluster is planned
  // without types).
  void ReportApplied(const std::string& id, uint32_t replicas, bool suspended, uint64_t generation,
                     const std::string& gpu_type);
  // Reports what `job` runs as observed (generation 0: applied out of band).
  void ReportObserved(const JobInfo& job) ABSL_LOCKS_EXCLUDED(mu_);

  void Emit(AdapterEvent event);
  // An Event's outcome (JobEventRecorder): counted and emitted.
  void OnEventOutcome(JobEventRecorder::Outcome outcome, const std::string& job_id,
                      const std::string& detail);
  // Waits `d` or until Stop(); returns false when stopping.
  bool SleepFor(absl::Duration d);
  bool stopping() const { return stop_.load(std::memory_order_acquire); }
  std::unique_ptr<grpc::ClientContext> NewContext() const;
  // After a call to rescaled on `channel`: when the answer points to
  // another replica (the leader), moves there and restarts the stream.
  void AfterRescaledCall(const std::shared_ptr<grpc::Channel>& channel, const grpc::Status& status,
                         const grpc::ClientContext& context);

  const AdapterOptions options_;
  KubeClient* const kube_;
  const std::shared_ptr<client::ServerList> servers_;

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
  // Serializes applying (on the applier thread) with registering.
  // SyncJob holds it too (after sync_mu_) so that an apply cannot slip in
  // between a registration and its initial ReportApplied.
  absl::Mutex apply_mu_ ABSL_ACQUIRED_AFTER(sync_mu_) ABSL_ACQUIRED_BEFORE(mu_);
  absl::Mutex mu_;
  std::map<std::string, JobEntry> jobs_ ABSL_GUARDED_BY(mu_);
  // The current stream's newest recommendation per job.
  std::map<std::string, v1::Recommendation> latest_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string> skipped_ ABSL_GUARDED_BY(mu_);  // id -> reason logged
  std::map<std::string, NodeInfo> nodes_ ABSL_GUARDED_BY(mu_);       // by node name
  // Pods bound to a node that request GPUs, by "namespace/name".
  std::map<std::string, GpuPod> gpu_pods_ ABSL_GUARDED_BY(mu_);
  // Serializes SendCapacity, so that a capacity computed earlier is never
  // sent after a later one.
  absl::Mutex capacity_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  std::optional<HonestCapacity> sent_capacity_ ABSL_GUARDED_BY(mu_);
  // Kueue's ClusterQueues as Rescale queues (by name), and its LocalQueues
  // ("namespace/name" -> ClusterQueue).
  std::map<std::string, QueueSpec> cluster_queues_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string> local_queues_ ABSL_GUARDED_BY(mu_);
  bool cluster_queues_listed_ ABSL_GUARDED_BY(mu_) = false;
  // Serializes SendQueues, as capacity_mu_ does SendCapacity.
  absl::Mutex queues_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  std::optional<std::vector<QueueSpec>> sent_queues_ ABSL_GUARDED_BY(mu_);
  bool nodes_listed_ ABSL_GUARDED_BY(mu_) = false;
  bool pods_listed_ ABSL_GUARDED_BY(mu_) = false;
  // The applier's gate (ApplyGateOpenLocked).
  bool stream_synced_ ABSL_GUARDED_BY(mu_) = false;  // the current stream sent SYNCED
  bool apply_wanted_ ABSL_GUARDED_BY(mu_) = false;
  bool applier_stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::set<std::string> job_apis_listed_ ABSL_GUARDED_BY(mu_);  // groups listed (or tried) once

  absl::Mutex stream_mu_;
  grpc::ClientContext* stream_context_ ABSL_GUARDED_BY(stream_mu_) = nullptr;

  // POSTs the Events of applied changes off the applier's thread.
  JobEventRecorder events_;

  std::vector<std::thread> threads_;
};

}  // namespace rescale::adapter

#endif  // RESCALE_CLIENT_ADAPTER_ADAPTER_H_
