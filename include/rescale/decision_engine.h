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
// Construction: DecisionEngine::Create validates EngineOptions once (limits,
// durations, default_policy); every caller (rescaled, rescale-sim, tests)
// goes through it, so no caller re-checks options. With options.state it
// also loads the kept jobs, capacity and recommendations.
//
// Thread safety: every public method is thread-safe and returns quickly
// (no I/O, no waiting on other callers beyond short critical sections). A
// plan holds the engine's lock only to copy the jobs changed since the last
// plan and to stage its result; it fits and plans on its copies without it
// (see Replan), so changes never wait for the computation. With the timer
// stopped (or a window of 0), a change's call runs the plan itself after
// releasing the lock, and replies once it is published. Reads take no lock of the
// engine's at all: they read the copies each change publishes (ReadShard)
// and the board's shards. Watchers are fed, and their gRPC writes started,
// only after the engine's lock is released (DeliverOnExit).
// The core uses std::mutex rather than absl::Mutex: Debian's Abseil is not
// built with ThreadSanitizer, which would then miss absl::Mutex's
// synchronisation, while pthread-based std::mutex is intercepted.
#ifndef RESCALE_DECISION_ENGINE_H_
#define RESCALE_DECISION_ENGINE_H_

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/btree_map.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
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
  // after the first; 0 = every report replans inline.
  absl::Duration plan_interval = absl::Seconds(30);
  absl::Duration applied_debounce = absl::Milliseconds(200);
  // While the timer runs, job, spec and capacity changes (RegisterJob,
  // UpdateJob, DeregisterJob, SetCapacity) are planned together,
  // plan_coalesce (>= 0) after the first of a burst, and their replies
  // return at once, before that plan, marked plan_pending (JobView,
  // ClusterView); WatchRecommendations shows the plan when it is published.
  // A burst that keeps coming is planned no more often than plans can run
  // with three quarters of the time left between them (a plan that took
  // 60 ms is followed by the next no sooner than 180 ms after it).
  // Registering N jobs one by one then costs N small steps and a plan per
  // window instead of N plans of up to N jobs. 0 = each change plans inline
  // and its reply carries the new plan.
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
  // the README) and fairness; its horizon is policy.horizon.
  ClusterPlannerOptions planner = {.objective = PlanObjectiveKind::kJct};
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
  absl::StatusOr<JobStatus> ReportApplied(const std::string& job_id, uint32_t replicas,
                                          bool suspended, uint64_t generation);

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
  // never on its own. With options.applied_debounce > 0, ReportApplied no
  // longer replans inline: a burst of reports (a controller reporting many
  // jobs at once) is planned once, applied_debounce after the first. With
  // options.plan_coalesce > 0 the same holds for job, spec and capacity
  // changes, whose replies then say the plan is pending. A request waits for
  // the earliest window among those pending. StopTimer runs a pending replan
  // before it returns, so no accepted change goes unplanned.
  void StartTimer();
  void StopTimer();

 private:
  struct Fitted {
    std::vector<Observation> observations;
    ThroughputModel model;
    // model.SamplesPerSecond(n) at index n - 1, n up to the spec's
    // max_replicas (at most kCachedSizes): what every plan asks of it.
    std::vector<double> samples_per_second;
    // The store's progress of the job with these statistics.
    uint64_t samples_processed = 0;
    // The statistics it was fitted on (with the restored ones, see
    // JobEntry::restored), kept only with a state store: what a checkpoint
    // writes.
    std::vector<SizeStats> stats;
    double SamplesPerSecond(uint32_t n) const {
      return n >= 1 && n <= samples_per_second.size() ? samples_per_second[n - 1]
                                                      : model.SamplesPerSecond(n);
    }
  };
  static constexpr uint32_t kCachedSizes = 256;
  // What a plan derives from one entry that stays put while the entry's
  // `version`, its fit and whether the capacity is known do: its policy's
  // wish and its planner input, less the fields that move with time
  // (cooldown, waiting). Kept only for `planner` jobs, whose policy reads no
  // clock (the per-job policies' windows and cooldowns do).
  struct PlanInput {
    uint64_t version = 0;
    std::shared_ptr<const Fitted> fitted;
    bool capacity_known = false;
    std::string_view policy;  // the spec's, or the default (static storage)
    bool planned_by_cluster = false;
    PolicyDecision wish;
    absl::Duration cooldown;  // the job's, before any backoff
    PlannerJob job;           // in_cooldown and waiting_seconds unset
  };
  // A registered job as mutations leave it (jobs_, under mu_): what the
  // caller and the cluster said. Plans work on their own copies (PlanSlot).
  struct JobEntry {
    // Defined out of line: PlanSlot's map is declared in this class, where
    // the member initialisers below would not be usable yet.
    JobEntry();
    JobSpec spec;
    JobStatus status;
    // The policy memory the cluster's changes write (ReportApplied):
    // previous_replicas and scale_events. The rest of a policy's memory is
    // the plan's (PlanSlot), which takes these two from here.
    PolicyMemory memory;
    // When the cluster last applied a change of replicas; the first applied
    // state is not a change.
    absl::Time last_change_at = absl::InfinitePast();
    bool has_applied = false;
    // When it last started running (tie-break: the most recently started
    // job is suspended first).
    absl::Time started_at = absl::InfinitePast();
    // When it last stopped running (suspended): jct ages a waiting job from
    // then, or from its registration if it never ran.
    absl::Time stopped_at = absl::InfinitePast();
    // Which registration this is, its latest change (spec or applied state)
    // and its spec's: all from change_counter_, so a plan can tell whether
    // the job moved on since it copied it (see Replan).
    uint64_t registration = 0;
    uint64_t version = 0;
    uint64_t spec_version = 0;
    // The measurements a state store kept of this job before the restart
    // (null: none): its curve is fitted on them for the sizes the store has
    // not measured again since (WithRestored).
    std::shared_ptr<const std::vector<SizeStats>> restored;
  };
  using JobMap = absl::btree_map<std::string, JobEntry>;
  // A plan's copy of one job, kept from plan to plan (plan_slots_) and
  // brought up to date only for the jobs changed since (SyncSlotsLocked),
  // with what plans keep between them.
  struct PlanSlot {
    // The job's entry as of the last sync, with the plan's policy memory
    // (exploration_stopped, recommendations) in entry.memory beside the
    // cluster's (previous_replicas, scale_events, from jobs_).
    JobEntry entry;
    // The curve fitted to the store's statistics at `stats_revision` (see
    // MetricsStore::StatsIfChanged) with the spec of `fitted_spec_version`,
    // refitted only when either moved on, so a plan refits only the jobs
    // whose samples, window or spec changed.
    std::shared_ptr<const Fitted> fitted;
    std::shared_ptr<const PlanInput> plan_input;  // see PlanInput
    MetricsStore::StatsRevision stats_revision;
    uint64_t fitted_spec_version = 0;
    // Bumped by every refit; the checkpoint writes the jobs whose fit
    // moved on since the last (checkpointed_fit).
    uint64_t fit_serial = 0;
    uint64_t checkpointed_fit = 0;
    // The plan-written policy memory as last checkpointed: written again
    // when entry.memory's exploration_stopped or recommendations differ.
    bool checkpointed_exploration_stopped = false;
    std::vector<std::pair<absl::Time, uint32_t>> checkpointed_recommendations;
  };
  using SlotMap = absl::btree_map<std::string, PlanSlot>;
  // What a plan computes from the jobs, before it is published.
  struct PlanResult {
    std::vector<Recommendation> recs;
    double utility = 0;
    double upper_bound = 0;
    double gap = 0;
    bool exact = true;
  };
  DecisionEngine(EngineOptions options, Clock* clock);
  // Puts back what options_.state holds (Create). FAILED_PRECONDITION when
  // a kept job no longer fits this server's limits or policies.
  absl::Status RestoreLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A kept job as an entry (RestoreLocked, ApplyReplicated).
  static void FillFromStored(JobEntry& entry, JobSpec spec, StoredJob& kept);
  void RemoveJobLocked(const std::string& job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RestoreMeasurementsLocked(StoredMeasurements& measured) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What options_.state keeps of `entry`.
  static StoredJob StoredJobOf(const JobEntry& entry);
  // options_.state->PutJob, if any.
  absl::Status PersistJobLocked(const JobEntry& entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::StatusOr<JobSpec> Normalize(JobSpec spec) const;
  // Registers the job without planning; the caller replans.
  absl::StatusOr<JobEntry*> AddJobLocked(JobSpec spec) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Registers the unknown jobs of `samples`, ingests their samples again and
  // replans once for all of them.
  void AutoRegister(std::span<const StepSample> samples, IngestResult& result);
  Fitted Fit(const JobSpec& spec, std::span<const SizeStats> stats, absl::Time now) const;
  // The slot's fit, refitted into the slot when its statistics or spec
  // moved on since; `refitted` says whether it was.
  void FitInto(PlanSlot& slot, absl::Time now, bool& refitted) const;
  // A fit of the job's statistics now, for readers.
  Fitted FitNow(const JobEntry& entry) const;
  // `live` (the store's statistics of the job) with the restored ones for
  // the sizes the store has too few samples of, and the progress made
  // before the restart added to each size's.
  std::vector<SizeStats> WithRestored(std::vector<SizeStats> live, const JobEntry& entry) const;
  // Writes the measurements of the jobs refitted since the last checkpoint
  // to options_.state (the plan thread, after a plan).
  void CheckpointMeasurements(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(plan_mu_);
  // The model's curve for n in [1, max_replicas] (at most 256 points).
  static std::vector<CurvePoint> CurveOf(const JobSpec& spec, const Fitted& fitted);
  // The entry's status with the store's counts and the job's progress: samples processed and
  // the time the rest takes at the running size, from `model` (null: fitted here, and only
  // when the estimate needs it). Needs no lock of the engine's: `entry` is
  // the caller's (a copy, or held under mu_) and the store is thread-safe.
  JobStatus StatusOf(const JobEntry& entry, const ThroughputModel* model) const;
  // The job's view: spec, status, fitted curve, pods, recommendation. Like
  // StatusOf; readers copy the entry under mu_ and build this without it.
  JobView ViewOf(const JobEntry& entry) const;
  // The slot's PlanInput: its kept one while it stands, else a new one,
  // kept in the slot for a planner job whose fit did not just change (a
  // job refitted in every plan would only pay for the copy). `job` gets the
  // planner input, copied from a kept one unless `source` says `job`
  // already holds that one's (the last plan's), else moved; `source` is
  // then the kept input `job` holds, or null.
  std::shared_ptr<const PlanInput> PlanInputOf(PlanSlot& slot, bool refitted, bool capacity_known,
                                               absl::Time now, PlannerJob& job,
                                               std::shared_ptr<const PlanInput>& source) const;
  // Fits, runs the policies and the planner on the slots (writing their
  // policy memory and fits); needs no lock of the engine's (the store is
  // thread-safe).
  PlanResult ComputePlan(SlotMap& slots, std::optional<uint32_t> capacity_gpus, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(plan_mu_);
  // Brings plan_slots_ up to date with the jobs changed since the last
  // sync (dirty_), which it clears, and returns the capacity to plan.
  std::optional<uint32_t> SyncSlotsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_, plan_mu_);
  // Publishes a plan computed on the slots as last synced, for the jobs
  // still registered; fills `stats`' published and changes_by_action.
  void CommitLocked(PlanResult result, absl::Time now, PlanStats& stats)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_, plan_mu_);
  // The cluster's capacity and the last plan's figures; AddAllocations adds
  // what the board's recommendations allocate, without mu_.
  ClusterView PlanSummaryLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  void AddAllocations(ClusterView& view) const;
  // ReportApplied's change, under mu_; the entry as changed.
  absl::StatusOr<JobEntry> ApplyLocked(const std::string& job_id, uint32_t replicas, bool suspended,
                                       uint64_t generation) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // What readers see of the jobs (GetJob, ListJobs, GetRecommendation,
  // GetCluster): an immutable copy of each entry, replaced by every change
  // made under mu_ (register, update, applied state) and dropped with the
  // job. Sharded by job id, each shard's lock held for a lookup or a pointer
  // swap: a read never waits for mu_, so never for a plan's sync or
  // commit. Plans' policy memory and fits stay in their slots (readers fit
  // the store's statistics themselves; see FitNow).
  static constexpr int kReadShards = 16;
  struct ReadShard {
    std::mutex mu;
    absl::flat_hash_map<std::string, std::shared_ptr<const JobEntry>> jobs ABSL_GUARDED_BY(mu);
  };
  ReadShard& ReadShardOf(std::string_view job_id) const;
  void PublishEntryLocked(const JobEntry& entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UnpublishEntryLocked(const std::string& job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::shared_ptr<const JobEntry> FindPublished(const std::string& job_id) const;
  // Ordered by job id.
  std::vector<std::shared_ptr<const JobEntry>> PublishedEntries(
      const std::string& namespace_filter) const;

  const EngineOptions options_;
  Clock* const clock_;
  MetricsStore store_;
  RecommendationBoard board_;

  // One plan computes at a time (Replan); taken before mu_, never after.
  std::mutex plan_mu_;
  // The plans' copies of the jobs, ordered by id.
  SlotMap plan_slots_ ABSL_GUARDED_BY(plan_mu_);
  // The node slots the plan runs with, copied with the capacity by
  // SyncSlotsLocked.
  std::vector<ReplicaSlots> plan_capacity_slots_ ABSL_GUARDED_BY(plan_mu_);
  // The planner's input of the last plan, one per slot in the slots'
  // order, and the kept PlanInput each was copied from (null: none): the
  // next plan copies only the jobs whose input changed or moved.
  std::vector<PlannerJob> planner_jobs_ ABSL_GUARDED_BY(plan_mu_);
  std::vector<std::shared_ptr<const PlanInput>> planner_job_sources_ ABSL_GUARDED_BY(plan_mu_);
  // When measurements were last checkpointed (once a plan_interval).
  absl::Time last_checkpoint_at_ ABSL_GUARDED_BY(plan_mu_) = absl::InfinitePast();
  // Guards the jobs and what plans publish; held by mutations and reads
  // only briefly, and by a plan only to sync its copies and to commit.
  mutable std::mutex mu_;
  JobMap jobs_ ABSL_GUARDED_BY(mu_);
  uint64_t change_counter_ ABSL_GUARDED_BY(mu_) = 0;
  // Whether this engine plans (see SetLeading). Read by Replan under
  // plan_mu_; written under plan_mu_ too, so a plan that saw it true runs
  // to its end before SetLeading(false) returns.
  std::atomic<bool> leading_{true};
  // The jobs registered, changed or deregistered since the plan slots were
  // last synced: the next plan copies only these. Between a plan's sync and
  // its commit, the jobs that moved on under it.
  absl::flat_hash_set<std::string> dirty_ ABSL_GUARDED_BY(mu_);
  std::optional<uint32_t> capacity_gpus_ ABSL_GUARDED_BY(mu_);
  // Replicas per size class that fit on the nodes (SetCapacity); empty =
  // unknown.
  std::vector<ReplicaSlots> capacity_slots_ ABSL_GUARDED_BY(mu_);
  // All nodes' GPUs as last reported with the capacity (0 = not reported):
  // shown, never planned with.
  uint32_t capacity_allocatable_gpus_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time planned_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  double last_plan_utility_ ABSL_GUARDED_BY(mu_) = 0;
  double last_plan_upper_bound_ ABSL_GUARDED_BY(mu_) = 0;
  double last_plan_gap_ ABSL_GUARDED_BY(mu_) = 0;
  bool last_plan_exact_ ABSL_GUARDED_BY(mu_) = true;
  uint64_t plans_run_ ABSL_GUARDED_BY(mu_) = 0;
  // When a checkpoint last wrote every job it meant to (GetCluster).
  absl::Time checkpointed_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  mutable std::array<ReadShard, kReadShards> read_shards_;

  // Records that `job_id` changed (dirty_).
  void MarkChangedLocked(const std::string& job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Asks the timer thread for a replan within `window`. False when the
  // timer does not run or the window is 0: the caller then calls Replan
  // itself once it has released mu_, before it replies.
  bool RequestReplanLocked(absl::Duration window) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // The timer thread's loop (StartTimer), first ticking at `next_tick`.
  void RunTimer(absl::Time next_tick);

  std::mutex timer_mu_;
  std::condition_variable timer_cv_;
  bool timer_stop_ ABSL_GUARDED_BY(timer_mu_) = false;
  bool replan_requested_ ABSL_GUARDED_BY(timer_mu_) = false;
  // When the pending replan is due on the injected clock: the earliest
  // window end among the requests it covers.
  absl::Time replan_due_ ABSL_GUARDED_BY(timer_mu_);
  // When the timer's last plan ended and how long it took, on the injected
  // clock: a requested plan waits at least as long after it (see
  // RequestReplanLocked).
  absl::Time last_plan_end_ ABSL_GUARDED_BY(timer_mu_) = absl::InfinitePast();
  absl::Duration last_plan_took_ ABSL_GUARDED_BY(timer_mu_);
  // Whether requests may defer to the timer thread: set while it runs.
  // Read and written under mu_.
  bool timer_running_ ABSL_GUARDED_BY(mu_) = false;
  // Wakes the timer thread when a ManualClock jumps; held while it runs.
  Clock::Listener clock_listener_;
  std::thread timer_thread_;
};

}  // namespace rescale

#endif  // RESCALE_DECISION_ENGINE_H_
