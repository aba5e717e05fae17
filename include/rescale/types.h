// The domain types of Rescale's core: job specs and status, samples,
// throughput curves, recommendations and cluster state.
//
// These mirror the rescale.v1 API but carry no protobuf: server/convert.cc
// translates. Times are absl::Time (InfinitePast = never).
#ifndef RESCALE_TYPES_H_
#define RESCALE_TYPES_H_

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/time/time.h"
#include "rescale/queues.h"

namespace rescale {

// Defaults a spec gets for fields the user left unset.
inline constexpr uint32_t kDefaultGpusPerReplica = 1;
inline constexpr bool kDefaultPreemptible = true;
inline constexpr double kDefaultRestartCostSeconds = 60.0;

// A point of a throughput curve: samples/s of the whole job at `replicas`.
struct CurvePoint {
  uint32_t replicas = 0;
  double samples_per_second = 0;
  double uncertainty = 0;  // half-width of the band, samples/s
  bool observed = false;   // measured (true) or predicted (false)
  uint64_t sample_count = 0;
  double efficiency = 0;                   // samples_per_second / (replicas x 1-replica rate)
  double observed_samples_per_second = 0;  // measured, when observed
  friend bool operator==(const CurvePoint&, const CurvePoint&) = default;
};

// How a job's batch may adapt (goodput: rescale/goodput.h). Totals are
// samples per optimizer step of the whole job; local batches per worker per
// micro-step.
struct BatchLimits {
  uint32_t initial_batch = 0;  // M0, total; > 0
  uint32_t max_batch = 0;      // largest total it accepts; 0 = M0 (no growth)
  uint32_t min_local_batch = 1;
  uint32_t max_local_batch = 0;  // 0 = max_batch
  bool accumulation = false;     // gradient accumulation allowed
  friend bool operator==(const BatchLimits&, const BatchLimits&) = default;
};

// JobSpec::admission of a job Kueue admits.
inline constexpr std::string_view kAdmissionKueue = "kueue";

struct JobSpec {
  std::string job_id;  // "namespace/name"
  uint32_t min_replicas = 0;
  uint32_t max_replicas = 0;
  uint32_t gpus_per_replica = kDefaultGpusPerReplica;
  int32_t priority = 0;  // higher wins
  bool preemptible = kDefaultPreemptible;
  double restart_cost_seconds = kDefaultRestartCostSeconds;
  uint32_t local_batch_size = 0;
  std::string policy;  // empty = the server's default
  std::vector<CurvePoint> prior;
  // Per-job policy settings, e.g. {"cooldown_seconds": "120"}; keys are
  // checked against the policy (ValidatePolicyParameters).
  std::map<std::string, std::string> parameters;
  // Samples the job processes in total (e.g. epochs x dataset size); unset =
  // unknown. Progress and the remaining-time estimate are measured against it.
  std::optional<uint64_t> total_samples;
  // How its batch may adapt; unset = fixed at local_batch_size.
  std::optional<BatchLimits> batch_scaling;
  // The queue it draws GPUs from (rescale/queues.h); empty = "default".
  std::string queue;
  // Who admits the job: "" = rescaled (it may suspend and resume it);
  // kAdmissionKueue = Kueue (the job carries kueue.x-k8s.io/queue-name):
  // rescaled never suspends or resumes it and sizes it only while it runs
  // (see "External admission" in rescale/cluster_planner.h).
  std::string admission;
  // The GPU types the job may run on (GpuType::name, e.g. the nodes'
  // nvidia.com/gpu.product); empty = any type the cluster has.
  std::vector<std::string> gpu_types;
  friend bool operator==(const JobSpec&, const JobSpec&) = default;
};

// What the cluster runs, as reported through ReportApplied.
struct JobStatus {
  uint32_t current_replicas = 0;
  bool suspended = false;
  // The GPU type its replicas run on, as reported (empty = not said; in a
  // cluster of one type, that type).
  std::string gpu_type;
  uint64_t last_applied_generation = 0;
  absl::Time last_applied_at = absl::InfinitePast();
  absl::Time registered_at = absl::InfinitePast();
  uint64_t samples_accepted = 0;
  // Training samples processed, derived from the step samples
  // (MetricsStore::SamplesProcessed).
  uint64_t samples_processed = 0;
  // Progress in samples at the initial batch M0 (JobSpec::batch_scaling),
  // for a job that reports gradient statistics: at each size, the samples
  // processed there times the statistical efficiency of the total batch it
  // ran at, under the noise scale measured now. total_samples then counts
  // samples at M0. Unset for every other job (progress = samples_processed).
  std::optional<uint64_t> progress_samples;
  // (total_samples - progress) / the rate of progress at the running size
  // (the model's throughput, times the running batch's statistical
  // efficiency when progress_samples is set), 0 once done; unset when
  // total_samples is unset, the job is not running or its throughput is
  // unknown.
  std::optional<double> estimated_remaining_seconds;
  // Per-sample gradient noise over |G|^2, in samples, over the recent
  // window of the samples that carried gradient statistics, else over the
  // lifetime (Pollux's phi); unset when none did or |G|^2 is 0.
  std::optional<double> gradient_noise_scale;
  // EFF of the total batch it runs at now (current replicas x the batch per
  // worker its steps report at that size, else local_batch_size) against
  // its initial batch, from the noise scale
  // (rescale/goodput.h); unset without batch_scaling, a noise scale or a
  // running size.
  std::optional<double> statistical_efficiency;
};

enum class Action { kUnspecified, kHold, kScaleUp, kScaleDown, kSuspend, kResume };
// How many Actions there are: arrays indexed by Action (counts per action).
inline constexpr size_t kActionCount = 6;

enum class BindingConstraint {
  kUnspecified,
  kNone,
  kCapacity,
  kMinReplicas,
  kMaxReplicas,
  kEfficiency,
  kCooldown,
  kRestartCost,
  kPreempted,
  kInsufficientData,
  // Held back by the nodes: not enough of them have gpus_per_replica GPUs
  // free for one more replica (ReplicaSlots), though the total would do.
  kNodeSlots,
  // Held back by its queue's quota (rescale/queues.h): nominal plus what its
  // cohort lends, or a queue that is not defined.
  kQuota,
};

std::string_view ActionName(Action action);
std::string_view BindingConstraintName(BindingConstraint constraint);

struct Recommendation {
  std::string job_id;
  uint32_t replicas = 0;  // 0 = do not run
  bool suspend = false;
  Action action = Action::kUnspecified;
  uint64_t generation = 0;  // bumps only when (replicas, suspend) changes
  std::string reason;
  BindingConstraint binding_constraint = BindingConstraint::kUnspecified;
  double current_samples_per_second = 0;
  double predicted_samples_per_second = 0;
  uint32_t queue_position = 0;  // 1-based when waiting; 0 when running
  absl::Time decided_at = absl::InfinitePast();
  std::string policy;
  uint32_t gpus = 0;
  // The GPU type to run on, in a cluster of more than one (empty
  // otherwise). A change of type is a restart, like a resize: it bumps the
  // generation.
  std::string gpu_type;
  // Planner only: utility change from one replica more / fewer.
  std::optional<double> value_one_more;
  std::optional<double> value_one_fewer;
  // Goodput-planned jobs only (spec.batch_scaling set and gradient
  // statistics reported): the batch to run at `replicas` (per worker per
  // micro-step, and extra micro-steps per optimizer step), the progress it
  // is predicted to make (samples at the initial batch M0 per second) and
  // its statistical efficiency EFF(total batch). A batch change at the same
  // replicas (past a 5% gain) keeps the generation: it never on its own
  // restarts a job (src/engine/batch_plan.h).
  std::optional<uint32_t> local_batch_size;
  std::optional<uint32_t> accumulation_steps;
  std::optional<double> predicted_goodput;
  std::optional<double> statistical_efficiency;

  // Whether `other` asks the cluster for the same thing.
  bool SameTarget(const Recommendation& other) const {
    return replicas == other.replicas && suspend == other.suspend && gpu_type == other.gpu_type;
  }
  // Whether a watcher would see a difference worth an event: everything but
  // the decision time and the (noisy) throughput figures.
  bool SameVisibleDecision(const Recommendation& other) const {
    return SameTarget(other) && action == other.action && reason == other.reason &&
           binding_constraint == other.binding_constraint &&
           queue_position == other.queue_position && policy == other.policy && gpus == other.gpus &&
           local_batch_size == other.local_batch_size &&
           accumulation_steps == other.accumulation_steps;
  }
};

// What the metrics store knows about one pod of a job.
struct PodStatus {
  std::string pod;
  uint32_t world_size = 0;         // of its latest sample
  double recent_step_seconds = 0;  // exponentially weighted, recent-biased
  absl::Time last_seen = absl::InfinitePast();
  uint64_t sample_count = 0;
  bool straggler = false;  // much slower than the pods at its size
};

// Everything the API shows about one job.
struct JobView {
  JobSpec spec;
  JobStatus status;
  // The model's prediction for n in [1, max_replicas] (at most 256 points).
  std::vector<CurvePoint> curve;
  std::string curve_model;  // the fitted model, for people
  double curve_fit_rms_log_error = 0;
  // Set when the model misses the job's measured or prior points and plans
  // use the points themselves (rescale/point_curve.h): which, and why.
  std::string curve_planned_on;
  std::optional<Recommendation> recommendation;
  std::vector<PodStatus> pods;
  // Set on the reply of a change whose plan had not run yet (see
  // EngineOptions::plan_coalesce): `recommendation` predates the change.
  bool plan_pending = false;
  // Its curve on each GPU type: the cluster's types in order, then the
  // measured types the cluster does not have. Empty for a job of a
  // one-type cluster whose samples name no type.
  struct TypeCurve {
    std::string gpu_type;
    // "measured", "transferred", "predicted" or "unknown" (see
    // rescale.v1.ThroughputCurve.source).
    std::string source;
    std::vector<CurvePoint> curve;
    std::string model;
    double fit_rms_log_error = 0;
  };
  std::vector<TypeCurve> curves_by_type;
};

// One step measurement after batch-level defaults have been applied. The
// strings are views: the caller keeps them alive for the call that takes the
// sample (the server points them into the request message, saving a copy per
// sample on the ingest path).
struct StepSample {
  std::string_view job_id;
  std::string_view pod;
  uint32_t world_size = 0;
  double step_seconds = 0;
  uint32_t batch_size = 0;           // 0 = the job's local_batch_size
  int64_t timestamp_unix_nanos = 0;  // 0 = time received
  // Training step index. When set, a pod's samples are de-duplicated by it:
  // one whose step is not above the highest step already accepted for its
  // pod is counted in IngestResult::duplicates instead of being stored, so a
  // reporter may resend a batch whose acknowledgement it lost.
  std::optional<uint64_t> step;
  // Gradient statistics of the step (rescale/goodput.h), both or neither:
  // grad_sqr estimates |G|^2, grad_var the variance of the gradient the
  // step averaged over grad_batch samples (0 = world_size x batch_size).
  std::optional<double> grad_sqr;
  std::optional<double> grad_var;
  uint32_t grad_batch = 0;
  // The GPU type it ran on (empty = not said: the job's one curve).
  std::string_view gpu_type;
};

struct SampleRejection {
  uint32_t index = 0;
  std::string reason;
};

// Outcome of ingesting one batch.
struct IngestResult {
  static constexpr size_t kMaxReportedRejections = 16;
  uint64_t accepted = 0;
  uint64_t rejected = 0;
  // Valid samples not stored because their pod already had a sample with the
  // same or a later step (a resend, or out of order). Not a rejection: no
  // reason is reported. accepted + rejected + duplicates = samples.
  uint64_t duplicates = 0;
  std::vector<SampleRejection> rejections;  // first kMaxReportedRejections
  // Samples rejected because a store limit (jobs, pods, sizes) was reached,
  // and the first such reason.
  uint64_t rejected_for_limits = 0;
  std::string limit_reason;
  // Samples rejected because their job is not registered.
  uint64_t rejected_unknown_job = 0;
  // Samples the server refused before the store saw them: their caller may
  // not report for their job's namespace (server/auth.h).
  uint64_t rejected_for_permission = 0;

  void RejectForLimit(uint32_t index, std::string reason) {
    ++rejected_for_limits;
    if (limit_reason.empty()) limit_reason = reason;
    Reject(index, std::move(reason));
  }
  // Refused by the server before the store saw it (rejected_for_permission).
  void RejectForPermission(uint32_t index, std::string reason) {
    ++rejected_for_permission;
    Reject(index, std::move(reason));
  }
  void Reject(uint32_t index, std::string reason) {
    ++rejected;
    if (rejections.size() < kMaxReportedRejections) {
      rejections.push_back({index, std::move(reason)});
    }
  }
  // The one way two results become one: every count added, the first limit
  // reason kept, and the reported rejections the first kMaxReportedRejections
  // by index of both (each side's in index order), `other`'s indices shifted
  // by `index_offset`. Offset: `other` covers the samples after ours (the
  // next batch of a stream); 0: both cover one batch, split between them
  // (the store's samples and those the server refused).
  void Merge(const IngestResult& other, uint32_t index_offset);
  // Folds in the result of ingesting again some of this batch's samples
  // (those at `original_index`, ascending, all rejected here for an unknown
  // job, now registered): their outcome replaces their rejection.
  void MergeRetried(const IngestResult& retried, std::span<const uint32_t> original_index);
};

struct JobAllocation {
  std::string job_id;
  uint32_t replicas = 0;
  uint32_t gpus = 0;
  int32_t priority = 0;
  std::string gpu_type;  // the type it runs on (empty in a one-type cluster)
};

// How many replicas of one size fit on the nodes' free GPUs: a replica needs
// all of its gpus_per_replica GPUs on one node, so 8 free GPUs spread 4+4
// over two nodes hold two 4-GPU replicas but no 8-GPU one. Reported per size
// class g as sum over nodes of floor(free GPUs on the node / g), by whoever
// sees the nodes (the adapter); the planner never plans more replicas of a
// class than this.
struct ReplicaSlots {
  uint32_t gpus_per_replica = 0;
  uint32_t replicas = 0;
  friend bool operator==(const ReplicaSlots&, const ReplicaSlots&) = default;
};

// What SetCapacity is told: the total GPUs, and per size class the replicas
// that fit (empty = no per-node information: the total alone bounds plans).
// allocatable_gpus: all nodes' GPUs before what cannot be used (nodes not
// Ready, cordoned or tainted, GPUs of pods Rescale does not manage) is taken
// out, for people reading the cluster; the planner uses total_gpus only.
// 0 = not reported (a fixed capacity); otherwise at least total_gpus.
// One GPU type of a mixed cluster: its name (the nodes' label value, e.g.
// nvidia.com/gpu.product), its GPUs and slots as CapacityReport has them for
// the whole cluster, and how many GPUs its nodes carry (0 = not said), which
// tells the models where replicas share a node.
struct GpuType {
  std::string name;
  uint32_t total_gpus = 0;
  uint32_t gpus_per_node = 0;
  std::vector<ReplicaSlots> slots;
  friend bool operator==(const GpuType&, const GpuType&) = default;
};

struct CapacityReport {
  uint32_t total_gpus = 0;
  std::vector<ReplicaSlots> slots;
  uint32_t allocatable_gpus = 0;
  // A cluster of more than one GPU type: each type's capacity (total_gpus is
  // then their sum, and slots are per type). Empty = one type.
  std::vector<GpuType> gpu_types;
  friend bool operator==(const CapacityReport&, const CapacityReport&) = default;
};

// The report's GPUs: the types' sum when it has types, else total_gpus.
uint32_t TotalGpus(const CapacityReport& report);

// One size class of the slots and how much of it the current plan uses.
struct ReplicaSlotUse {
  uint32_t gpus_per_replica = 0;
  uint32_t replicas_fit = 0;      // as set (ReplicaSlots::replicas)
  uint32_t replicas_planned = 0;  // replicas the recommendations run of this size
  friend bool operator==(const ReplicaSlotUse&, const ReplicaSlotUse&) = default;
};

// A queue as the last plan used it (rescale/queues.h; the figures are the
// planner's, see PlannedQueue in rescale/cluster_planner.h).
struct QueueView {
  QueueSpec spec;
  bool defined = true;  // false: the default queue the server adds
  uint64_t in_use_gpus = 0;
  uint64_t borrowed_gpus = 0;
  uint64_t lent_gpus = 0;
  uint64_t guaranteed_gpus = 0;
  uint64_t wanted_gpus = 0;
  uint32_t running_jobs = 0;
  uint32_t waiting_jobs = 0;
};

struct ClusterView {
  std::optional<uint32_t> total_gpus;  // nullopt = unknown, unbounded
  // CapacityReport::allocatable_gpus as last set (0 = not reported): of
  // these, total_gpus are usable.
  uint32_t allocatable_gpus = 0;
  // The replicas per size class that fit on the nodes, as last set (empty =
  // unknown), and for each the replicas the recommendations plan of it.
  std::vector<ReplicaSlots> slots;
  std::vector<ReplicaSlotUse> slot_use;
  // The GPU types as last set (empty = one type), and the GPUs the
  // recommendations run of each (same order).
  std::vector<GpuType> gpu_types;
  std::vector<uint32_t> allocated_gpus_by_type;
  uint32_t allocated_gpus = 0;
  uint32_t waiting_jobs = 0;
  std::vector<JobAllocation> allocations;
  // The queues of the last plan: the defined ones, then the default queue
  // when the server added it (ResolveQueues).
  std::vector<QueueView> queues;
  absl::Time planned_at = absl::InfinitePast();
  // The last plan's utility, its upper bound and relative gap.
  double plan_utility = 0;
  double plan_upper_bound = 0;
  double optimality_gap = 0;
  bool plan_exact = true;
  // Plans run since the engine started (inline, timer and debounced ones).
  uint64_t plans_run = 0;
  // Set on the reply of SetCapacity when its plan had not run yet: the
  // allocations predate the new capacity.
  bool plan_pending = false;
  // Where state is kept across restarts ("memory", "sqlite:PATH") and when
  // measurements were last checkpointed there (InfinitePast = never).
  std::string state_backend = "memory";
  absl::Time last_checkpoint_at = absl::InfinitePast();
};

// The namespace of a job_id "namespace/name": the part before the first '/'.
// The one rule for the namespace filters of lists and watches (InNamespace,
// rescale/job_rules.h) and for authorisation (server/auth.h). Valid ids
// (ValidateJobId, rescale/validation.h) always have exactly one '/' and a
// non-empty namespace, so the rule matters only for an id that never passed
// validation (a request naming a job that cannot exist): such an id without
// '/' is its own namespace, never "". "" means "no namespace named, every one
// the caller may see" to a list, a watch and Authorize, so an id that is
// malformed must not map to it; as its own namespace it reaches only callers
// allowed that namespace, and then fails as unknown or invalid.
std::string_view JobNamespace(std::string_view job_id);

}  // namespace rescale

#endif  // RESCALE_TYPES_H_
