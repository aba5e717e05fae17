// DecisionEngine: the heart of rescaled, free of any RPC types.
//
// It owns the registered jobs and their applied state, the metrics store, the
// GPU capacity and the recommendation board, and hands none of them out:
// callers use the methods below (Watch for the board's change stream). Every
// mutation that can change a decision (register, update, deregister, applied
// state, capacity) asks for a replan: at once when no timer runs, otherwise
// on the timer thread after a short window that gathers a burst of them
// into one plan (plan_coalesce, applied_debounce); a timer replans every
// plan interval so new samples are taken in. A replan brings its own copy of
// the jobs up to date with those that changed, runs the planner (a pure
// function) and publishes the result to the board, whose watchers see each
// change.
//
// The engine is a facade over rooms that each own their state and lock
// (src/engine/, private to the core; docs/architecture.md has the map):
//   JobRegistry    the jobs, applied state, capacity, read copies, and the
//                  changes since the last plan
//   StateWriter    the ordered queue to the state store, with group commit
//   PlanPipeline   the plans' copies of the jobs, fits, compute and commit,
//                  the measurements' checkpoint
//   PlanScheduler  the timer: intervals, coalescing, pacing
//   JobViews       fits, status and progress, the views readers get
//
// Construction: DecisionEngine::Create validates EngineOptions once (limits,
// durations, default_policy); every caller (rescaled, rescale-sim, tests)
// goes through it, so no caller re-checks options. With options.state it
// also loads the kept jobs, capacity and recommendations.
//
// Thread safety: every public method is thread-safe. No lock of the
// engine's is held during I/O: a change is decided under the registry's
// lock, handed to the state writer's queue, and awaited without any lock; a
// call that changes state replies once its change is durable (with a state
// store), which is the only thing it waits for besides short critical
// sections, and, with plan_coalesce 0, the plan that includes it. Reads take
// no lock of the engine's at all: they read the copies each change
// publishes and the board's shards. While the timer runs, plans run only on
// its thread; without it, the caller of a change runs the plan after its
// change is in. Watchers are fed, and their gRPC writes started, only after
// the registry's lock is released.
// The core uses std::mutex (rescale::Mutex, annotated for Clang's
// thread-safety analysis) rather than absl::Mutex: Debian's Abseil is not
// built with ThreadSanitizer, which would then miss absl::Mutex's
// synchronisation, while pthread-based std::mutex is intercepted.
#ifndef RESCALE_DECISION_ENGINE_H_
#define RESCALE_DECISION_ENGINE_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "rescale/clock.h"
#include "rescale/cluster_planner.h"
#include "rescale/metrics_store.h"
#include "rescale/policy.h"
#include "rescale/recommendation_board.h"
#include "rescale/state_store.h"
#include "rescale/throughput_model.h"
#include "rescale/types.h"
#include "rescale/validation.h"

namespace rescale {

namespace engine {
class JobRegistry;
struct JobEntry;
class JobViews;
class PlanPipeline;
class PlanScheduler;
class StateWriter;
}  // namespace engine

// What one plan did, for monitoring (EngineOptions::plan_observer): rescaled
// turns it into Prometheus metrics without the core knowing of them.
struct PlanStats {
  // Wall time (steady clock, not the injected one: this is a measurement,
  // not logic) from the sync of the jobs to the commit of the result.
  absl::Duration duration;
  // The plan's relative gap to its upper bound (ClusterView::optimality_gap).
  double optimality_gap = 0;
  // False when the state store refused its generations (nothing published).
  bool published = true;
  // Recommendations whose target (replicas, suspend) this plan changed, new
  // jobs' first ones included, by the new one's action (index: Action).
  std::array<uint64_t, kActionCount> changes_by_action{};
};

// Registered jobs by what they do now (rescaled's rescale_jobs{state}).
// running: the current recommendation gives it replicas. Otherwise
// suspended when it ran before (preempted or suspended since), waiting when
// it never ran (queued, or not planned yet).
struct JobStateCounts {
  uint64_t running = 0;
  uint64_t waiting = 0;
  uint64_t suspended = 0;
};

// Every option of the engine, with its default. rescaled's flags of the same
// names set them (ServerOptions embeds this struct); the simulator fills the
// same struct. Create() checks them.
struct EngineOptions {
  // Policy for specs that leave `policy` empty. Must be one of
  // KnownPolicies().
  std::string default_policy = "planner";
  // Registered jobs; RegisterJob beyond it is RESOURCE_EXHAUSTED. >= 1.
  int max_jobs = 10'000;
  // GPUs to plan; nullopt = unknown (unbounded) until SetCapacity.
  std::optional<uint32_t> capacity_gpus;
  // Concurrent watchers of the board (Watch beyond it is
  // RESOURCE_EXHAUSTED). >= 1.
  int max_watchers = 1024;
  // The plan timer (StartTimer): a replan every `plan_interval` (> 0), and a
  // burst of ReportApplied calls planned once, `applied_debounce` (>= 0)
  // after the first; 0 = every report is planned at once (on the timer's
  // thread, the report's reply waiting for that plan).
  absl::Duration plan_interval = absl::Seconds(30);
  absl::Duration applied_debounce = absl::Milliseconds(200);
  // While the timer runs, job, spec and capacity changes (RegisterJob,
  // UpdateJob, DeregisterJob, SetCapacity) are planned together,
  // plan_coalesce (>= 0) after the first of a burst, and their replies
  // return at once, before that plan, marked plan_pending (JobView,
  // ClusterView); WatchRecommendations shows the plan when it is published.
  // A burst that keeps coming is planned no more often than plans can run
  // with nine tenths of the time left between them (a plan that took
  // 60 ms is followed by the next no sooner than 600 ms after it).
  // Registering N jobs one by one then costs N small steps and a plan per
  // window instead of N plans of up to N jobs. 0 = each change is planned
  // at once (on the timer's thread) and its reply waits for and carries
  // the new plan.
  absl::Duration plan_coalesce = absl::Milliseconds(5);
  // The plan timer thread's nice value (Linux; 0 = as the process): plans
  // are background work, so by default they yield the CPU to the threads
  // serving calls when the machine is busy. 0 to 19.
  int plan_thread_nice = 10;
  // Samples for unregistered jobs register them (min 1, max
  // auto_register_max_replicas or the largest world_size seen, defaults for
  // the rest) instead of being rejected.
  bool auto_register = false;
  uint32_t auto_register_max_replicas = 64;
  SpecLimits spec_limits;
  // The metrics store's window, pod TTL, per-job limits and plausible step
  // times; store.max_jobs is overridden by max_jobs.
  MetricsStoreOptions store;
  // Defaults of the per-job policies (cooldown >= 0, horizon > 0,
  // thresholds).
  PolicyOptions policy;
  // The cluster planner: its objective (rescaled's --objective; jct, the
  // objective with the lowest average completion time in the simulator, see
  // docs/policies.md) and fairness; its horizon is policy.horizon.
  ClusterPlannerOptions planner = {.objective = PlanObjectiveKind::kJct};
  // Plan jobs that allow batch scaling (JobSpec::batch_scaling) and report
  // gradient statistics on goodput, with a recommended batch; false plans
  // every job on throughput (the ablation rescale-sim's planner-throughput
  // runs).
  bool plan_on_goodput = true;
  // Plans use a job's points themselves where the model misses one of them
  // (rescale/point_curve.h). A prior point always counts; a measured size
  // counts only when this is set. Off by default: a size is measured at
  // whatever placement the scheduler gave it (spread over nodes, beside
  // other jobs), which the model's packed curve deliberately does not
  // follow; in rescale-sim's Pollux workloads, where placements vary, it
  // lengthened the planner's average JCT (docs/policies.md). Set it where
  // placements are steady (one node per job, a dedicated pool). Measured
  // sizes always join the points once a prior triggers them.
  bool plan_on_measured_points = false;
  ModelOptions model;
  // Where the jobs, their applied state, the capacity and the generations
  // are kept across restarts (see StateStore); null = nowhere. Create loads
  // what it holds; every acknowledged change is written through before its
  // call returns, and each changed recommendation (with its generation)
  // before it is published.
  // A write that fails fails the call (UNAVAILABLE) and changes nothing;
  // a plan whose generations cannot be recorded is not published.
  std::shared_ptr<StateStore> state;
  // False: the engine starts as a follower of another rescaled on the same
  // state (high availability): it plans and checkpoints nothing until
  // SetLeading(true), and its copy of the state comes from
  // ApplyReplicated.
  bool start_leading = true;
  // Tests only: called by Replan after it copied the changed jobs, while it computes
  // without the engine's lock, so a test can hold a plan there and check
  // what goes on meanwhile. Empty in production.
  std::function<void()> plan_compute_hook;
  // Called after every plan (on the thread that planned, with no lock of
  // the engine's held) with what it did; must be quick and thread-safe.
  // Empty = nothing is measured.
  std::function<void(const PlanStats&)> plan_observer;
};

class DecisionEngine {
 public:
  // An engine with `options`, or INVALID_ARGUMENT naming the first option
  // out of range and its limit. `clock` must outlive the engine; null = the
  // real clock.
  static absl::StatusOr<std::unique_ptr<DecisionEngine>> Create(EngineOptions options,
                                                                Clock* clock = nullptr);
  // INVALID_ARGUMENT naming the first option of `options` out of range.
  static absl::Status ValidateOptions(const EngineOptions& options);
  ~DecisionEngine();
  DecisionEngine(const DecisionEngine&) = delete;
  DecisionEngine& operator=(const DecisionEngine&) = delete;

  // Names of the policies a spec may ask for.
  static std::vector<std::string> KnownPolicies();

  // Jobs. Specs are validated (INVALID_ARGUMENT naming the field); unknown
  // jobs are NOT_FOUND; registering a known job is ALREADY_EXISTS.
  absl::StatusOr<JobView> RegisterJob(JobSpec spec);
  absl::StatusOr<JobView> UpdateJob(JobSpec spec);
  absl::StatusOr<JobView> GetJob(const std::string& job_id) const;
  // Ordered by job_id; `namespace_filter` empty = all namespaces.
  std::vector<JobView> ListJobs(const std::string& namespace_filter = "") const;
  absl::Status DeregisterJob(const std::string& job_id);

  // Samples, validated one by one (see MetricsStore::Ingest). Lock-free
  // unless auto_register has a job to register.
  IngestResult Ingest(std::span<const StepSample> samples);

  // What the cluster runs now. `generation` 0 = applied out of band; a
  // generation newer than the job's latest recommendation is INVALID_ARGUMENT.
  // `gpu_type`: the GPU type the replicas run on (empty = not said; the
  // type last reported stays); not a GPU type name is INVALID_ARGUMENT.
  absl::StatusOr<JobStatus> ReportApplied(const std::string& job_id, uint32_t replicas,
                                          bool suspended, uint64_t generation,
                                          const std::string& gpu_type = {});

  absl::StatusOr<Recommendation> GetRecommendation(const std::string& job_id) const;
  std::vector<Recommendation> ListRecommendations(const std::string& namespace_filter = "") const;
  // As ListRecommendations, without copying them (immutable once recorded):
  // what ListRecommendations' RPC serialises from.
  std::vector<std::shared_ptr<const Recommendation>> RecommendationSnapshot(
      const std::string& namespace_filter = "") const;

  // UNAVAILABLE when options.state cannot record it (nothing changes).
  // The total alone: any slots set before are dropped (no per-node
  // information), and so is allocatable_gpus (not reported).
  absl::StatusOr<ClusterView> SetCapacity(uint32_t total_gpus);
  // The total and, per size class, the replicas that fit on the nodes'
  // free GPUs (ReplicaSlots; empty = unknown), which the planner then never
  // exceeds, and all nodes' GPUs (allocatable_gpus, shown by GetCluster,
  // never planned with). INVALID_ARGUMENT naming the field when
  // ValidateCapacityReport refuses it (options.spec_limits); UNAVAILABLE as
  // above.
  absl::StatusOr<ClusterView> SetCapacity(const CapacityReport& report);
  // Replaces every queue (rescale/queues.h; empty = none: one pool). Jobs
  // name theirs in JobSpec::queue; one naming a queue that is not defined
  // waits (QUOTA). INVALID_ARGUMENT naming the field when ValidateQueues
  // refuses them; UNAVAILABLE as above.
  absl::StatusOr<ClusterView> SetQueues(std::vector<QueueSpec> queues);
  ClusterView GetCluster() const;
  // Registered jobs by state (see JobStateCounts); O(jobs), no engine lock
  // (a metrics scrape).
  JobStateCounts CountJobStates() const;
  // Open WatchRecommendations streams.
  int watcher_count() const { return board_.subscription_count(); }

  // A stream of recommendation changes: ADDED for every current job in
  // `namespace_filter` (empty = all), SYNCED, then every change (see
  // RecommendationBoard). RESOURCE_EXHAUSTED beyond max_watchers,
  // UNAVAILABLE after CloseWatches.
  absl::StatusOr<std::shared_ptr<Subscription>> Watch(std::string namespace_filter = "");
  // Ends one watch (its reader then sees kClosed).
  void Unwatch(const std::shared_ptr<Subscription>& subscription);
  // Ends every watch and refuses new ones (shutdown).
  void CloseWatches();

  // The mutations above for callers that must not block, such as gRPC's
  // callback handlers: each returns at once, and `done` gets the same
  // answer the waiting form would have returned, once the change is durable
  // and in memory (and, with plan_coalesce 0, planned). `done` runs on the
  // caller's thread when the answer needs no write (a refusal, or no state
  // store), else on a thread of the engine's; never under a lock of the
  // engine's. It must be quick and must not block.
  template <typename T>
  using Done = std::function<void(absl::StatusOr<T>)>;
  void RegisterJobAsync(JobSpec spec, Done<JobView> done);
  void UpdateJobAsync(JobSpec spec, Done<JobView> done);
  void DeregisterJobAsync(const std::string& job_id, std::function<void(absl::Status)> done);
  void ReportAppliedAsync(const std::string& job_id, uint32_t replicas, bool suspended,
                          uint64_t generation, Done<JobStatus> done);
  void ReportAppliedAsync(const std::string& job_id, uint32_t replicas, bool suspended,
                          uint64_t generation, const std::string& gpu_type, Done<JobStatus> done);
  void SetCapacityAsync(const CapacityReport& report, Done<ClusterView> done);
  void SetQueuesAsync(std::vector<QueueSpec> queues, Done<ClusterView> done);

  // Plans every job now and publishes the decisions. Does nothing while the
  // engine is not leading.
  void Replan();

  // High availability (rescaled --state=etcd://). A follower plans and
  // checkpoints nothing; the server refuses it changes and samples. It keeps
  // a copy of the leader's state through ApplyReplicated. SetLeading(true)
  // forgets what earlier plans kept (a follower's copy is the truth now)
  // and plans at once; SetLeading(false) stops planning (a plan already
  // running publishes nothing its state store refuses).
  void SetLeading(bool leading);
  bool leading() const { return leading_.load(std::memory_order_acquire); }
  // Applies what the leader recorded: jobs added, changed and removed,
  // capacity, recommendations (watchers see them as the leader's did) and
  // measurements. A kept job this server cannot take is logged and left
  // out (a follower does not stop for it).
  void ApplyReplicated(ReplicatedChange change);

  // Replans every options.plan_interval on a background thread until
  // StopTimer (or destruction). The timer waits on the injected clock: with
  // a ManualClock it fires when the test advances time past its deadline,
  // never on its own. While it runs, plans run only on its thread: a change
  // asks for one (see PlanScheduler). With options.applied_debounce > 0, a
  // burst of reports (a controller reporting many jobs at once) is planned
  // once, applied_debounce after the first. With
  // options.plan_coalesce > 0 the same holds for job, spec and capacity
  // changes, whose replies then say the plan is pending. A request waits for
  // the earliest window among those pending. StopTimer runs a pending replan
  // before it returns, so no accepted change goes unplanned.
  void StartTimer();
  void StopTimer();

 private:
  DecisionEngine(EngineOptions options, Clock* clock);
  absl::StatusOr<JobSpec> Normalize(JobSpec spec) const;
  // Asks for the plan that takes in a change made with `window`: runs it
  // here when no timer runs, waits for it when the window is 0, and returns
  // whether it is still pending (the reply's plan_pending).
  bool PlanAfterChange(absl::Duration window);
  // As PlanAfterChange, without waiting: `then(plan_pending)` runs once the
  // plan it would wait for is published (at once when it waits for none).
  void PlanAfterChangeAsync(absl::Duration window, std::function<void(bool)> then);
  // RegisterJobAsync's and UpdateJobAsync's continuation: once the entry
  // is in, the plan it asks for, then the job's view to `done`.
  std::function<void(absl::StatusOr<engine::JobEntry>)> ViewOnceDurable(Done<JobView> done);
  // The job's view, with its curve on each of the cluster's GPU types.
  JobView ViewOf(const engine::JobEntry& entry) const;
  // Registers the unknown jobs of `samples`, ingests their samples again and
  // asks for one plan for all of them.
  void AutoRegister(std::span<const StepSample> samples, IngestResult& result);
  // The cluster's capacity and the last plan's figures, with what the
  // board's recommendations allocate.
  ClusterView ClusterViewNow() const;
  // After a change of the cluster (capacity, queues) is in: the plan it asks
  // for, then the view, with whether that plan is still pending. The second
  // is the asynchronous form, as the registry's continuation.
  ClusterView ClusterViewAfterChange();
  std::function<void(absl::StatusOr<std::monostate>)> ClusterViewOnceDurable(
      Done<ClusterView> done);

  const EngineOptions options_;
  Clock* const clock_;
  MetricsStore store_;
  RecommendationBoard board_;
  // Whether this engine plans (see SetLeading); read by plans at their start.
  std::atomic<bool> leading_{true};
  // Declared in the order they are built; the destructor stops the
  // scheduler and drains the writer before any room goes.
  std::unique_ptr<engine::StateWriter> writer_;  // null without options.state
  std::unique_ptr<engine::JobViews> views_;
  std::unique_ptr<engine::JobRegistry> registry_;
  std::unique_ptr<engine::PlanPipeline> pipeline_;
  std::unique_ptr<engine::PlanScheduler> scheduler_;
};

}  // namespace rescale

#endif  // RESCALE_DECISION_ENGINE_H_
