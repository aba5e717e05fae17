// DecisionEngine (see rescale/decision_engine.h): options, construction,
// and the public API as a facade over the rooms in src/engine/.
#include "rescale/decision_engine.h"

#include <algorithm>
#include <variant>

#include "absl/container/btree_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "rescale/job_rules.h"
#include "rescale/names.h"
#include "rescale/status_macros.h"
#include "src/engine/job_registry.h"
#include "src/engine/job_views.h"
#include "src/engine/plan_pipeline.h"
#include "src/engine/plan_scheduler.h"
#include "src/engine/state_writer.h"

namespace rescale {

absl::Status DecisionEngine::ValidateOptions(const EngineOptions& options) {
  auto at_least = [](std::string_view name, int64_t value, int64_t limit) {
    return value >= limit ? absl::OkStatus()
                          : absl::InvalidArgumentError(absl::StrFormat(
                                "%s must be at least %d, got %d", name, limit, value));
  };
  auto positive = [](std::string_view name, absl::Duration value) {
    return value > absl::ZeroDuration()
               ? absl::OkStatus()
               : absl::InvalidArgumentError(absl::StrFormat("%s must be positive, got %s", name,
                                                            absl::FormatDuration(value)));
  };
  auto not_negative = [](std::string_view name, absl::Duration value) {
    return value >= absl::ZeroDuration()
               ? absl::OkStatus()
               : absl::InvalidArgumentError(absl::StrFormat("%s must not be negative, got %s", name,
                                                            absl::FormatDuration(value)));
  };
  const std::vector<std::string> known = KnownPolicies();
  if (std::find(known.begin(), known.end(), options.default_policy) == known.end()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("default_policy \"%s\" is not a known policy; known: %s",
                        options.default_policy, absl::StrJoin(known, ", ")));
  }
  RETURN_IF_ERROR(at_least("max_jobs", options.max_jobs, 1));
  RETURN_IF_ERROR(at_least("max_watchers", options.max_watchers, 1));
  RETURN_IF_ERROR(at_least("max_pods_per_job", options.store.max_pods_per_job, 1));
  RETURN_IF_ERROR(at_least("max_sizes_per_job", options.store.max_sizes_per_job, 1));
  if (options.store.max_sizes_per_job > kMaxSizesPerJob) {
    return absl::InvalidArgumentError(
        absl::StrFormat("max_sizes_per_job must be at most %d, got %d", kMaxSizesPerJob,
                        options.store.max_sizes_per_job));
  }
  RETURN_IF_ERROR(at_least("auto_register_max_replicas", options.auto_register_max_replicas, 1));
  RETURN_IF_ERROR(positive("plan_interval", options.plan_interval));
  RETURN_IF_ERROR(not_negative("applied_debounce", options.applied_debounce));
  RETURN_IF_ERROR(not_negative("plan_coalesce", options.plan_coalesce));
  if (options.plan_thread_nice < 0 || options.plan_thread_nice > 19) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "plan_thread_nice must be between 0 and 19, got %d", options.plan_thread_nice));
  }
  RETURN_IF_ERROR(positive("window", options.store.window));
  RETURN_IF_ERROR(positive("pod_ttl", options.store.pod_ttl));
  RETURN_IF_ERROR(positive("horizon", options.policy.horizon));
  RETURN_IF_ERROR(not_negative("cooldown", options.policy.cooldown));
  if (!(options.store.min_step_seconds > 0 &&
        options.store.min_step_seconds < options.store.max_step_seconds)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "min_step_seconds must be positive and below max_step_seconds, got %g and %g",
        options.store.min_step_seconds, options.store.max_step_seconds));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<DecisionEngine>> DecisionEngine::Create(EngineOptions options,
                                                                       Clock* clock) {
  RETURN_IF_ERROR(ValidateOptions(options));
  std::unique_ptr<DecisionEngine> engine(new DecisionEngine(std::move(options), clock));
  if (engine->options_.state != nullptr) {
    StateStore& state = *engine->options_.state;
    ASSIGN_OR_RETURN(StoredState stored, state.Load());
    RETURN_IF_ERROR(engine->registry_->Restore(stored, state.Describe()));
  }
  return engine;
}

DecisionEngine::DecisionEngine(EngineOptions options, Clock* clock)
    : options_(std::move(options)),
      clock_(clock != nullptr ? clock : Clock::Real()),
      store_([&] {
        MetricsStoreOptions store = options_.store;
        store.max_jobs = options_.max_jobs;
        return store;
      }()),
      board_(options_.max_watchers) {
  leading_.store(options_.start_leading, std::memory_order_relaxed);
  if (options_.state != nullptr) writer_ = std::make_unique<engine::StateWriter>(*options_.state);
  views_ = std::make_unique<engine::JobViews>(
      engine::JobViewsOptions{.model = options_.model,
                              .min_samples = options_.policy.min_samples,
                              .keep_stats = options_.state != nullptr,
                              .measured_points = options_.plan_on_measured_points},
      store_, board_, *clock_);
  registry_ = std::make_unique<engine::JobRegistry>(
      options_.max_jobs, *clock_, store_, board_, writer_.get(),
      [this](JobSpec spec) { return Normalize(std::move(spec)); }, options_.capacity_gpus);
  pipeline_ = std::make_unique<engine::PlanPipeline>(options_, *clock_, store_, *registry_, *views_,
                                                     writer_.get());
  scheduler_ = std::make_unique<engine::PlanScheduler>(
      *clock_, options_.plan_interval, options_.plan_thread_nice, [this] { Replan(); });
}

DecisionEngine::~DecisionEngine() {
  // The timer's last plan, then every change still queued, while every
  // room they touch is alive.
  scheduler_->Stop();
  writer_.reset();
}

std::vector<std::string> DecisionEngine::KnownPolicies() { return PolicyNames(); }

absl::StatusOr<JobSpec> DecisionEngine::Normalize(JobSpec spec) const {
  RETURN_IF_ERROR(ValidateJobSpec(spec, options_.spec_limits));
  if (!spec.policy.empty()) {
    std::vector<std::string> known = KnownPolicies();
    if (std::find(known.begin(), known.end(), spec.policy) == known.end()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "spec.policy \"%s\" is not a known policy; known: %s (empty = the server's "
          "default, %s)",
          spec.policy, absl::StrJoin(known, ", "), options_.default_policy));
    }
  }
  RETURN_IF_ERROR(ValidatePolicyParameters(
      spec.policy.empty() ? options_.default_policy : spec.policy, spec.parameters));
  std::sort(spec.prior.begin(), spec.prior.end(),
            [](const CurvePoint& a, const CurvePoint& b) { return a.replicas < b.replicas; });
  return spec;
}

bool DecisionEngine::PlanAfterChange(absl::Duration window) {
  const std::optional<uint64_t> request = scheduler_->Request(window);
  if (!request.has_value()) {
    Replan();
    return false;
  }
  if (window > absl::ZeroDuration()) return true;
  scheduler_->WaitFor(*request);
  return false;
}

void DecisionEngine::PlanAfterChangeAsync(absl::Duration window, std::function<void(bool)> then) {
  const std::optional<uint64_t> request = scheduler_->Request(window);
  if (!request.has_value()) {
    Replan();  // no timer (tests, the simulator): the caller's thread plans
    then(false);
    return;
  }
  if (window > absl::ZeroDuration()) {
    then(true);
    return;
  }
  scheduler_->WhenCovered(*request, [then = std::move(then)] { then(false); });
}

std::function<void(absl::StatusOr<engine::JobEntry>)> DecisionEngine::ViewOnceDurable(
    Done<JobView> done) {
  return [this, done = std::move(done)](absl::StatusOr<engine::JobEntry> e) {
    if (!e.ok()) return done(e.status());
    PlanAfterChangeAsync(options_.plan_coalesce, [this, entry = *std::move(e), done](bool pending) {
      JobView view = ViewOf(entry);
      view.plan_pending = pending;
      done(std::move(view));
    });
  };
}

void DecisionEngine::RegisterJobAsync(JobSpec spec, Done<JobView> done) {
  absl::StatusOr<JobSpec> normalized = Normalize(std::move(spec));
  if (!normalized.ok()) return done(normalized.status());
  registry_->RegisterAsync(*std::move(normalized), ViewOnceDurable(std::move(done)));
}

void DecisionEngine::UpdateJobAsync(JobSpec spec, Done<JobView> done) {
  absl::StatusOr<JobSpec> normalized = Normalize(std::move(spec));
  if (!normalized.ok()) return done(normalized.status());
  registry_->UpdateAsync(*std::move(normalized), ViewOnceDurable(std::move(done)));
}

void DecisionEngine::DeregisterJobAsync(const std::string& job_id,
                                        std::function<void(absl::Status)> done) {
  if (absl::Status valid = ValidateJobId(job_id); !valid.ok()) return done(valid);
  registry_->DeregisterAsync(
      job_id, [this, done = std::move(done)](absl::StatusOr<std::monostate> removed) {
        if (!removed.ok()) return done(removed.status());
        PlanAfterChangeAsync(options_.plan_coalesce, [done](bool) { done(absl::OkStatus()); });
      });
}

namespace {

// What a job's view needs of the cluster for its curve on each GPU type:
// the types and the speed ratios the last plan learned (empty: one type).
struct ViewTypes {
  std::vector<GpuType> types;
  engine::TypeSpeeds speeds;
};
ViewTypes TypesForViews(const engine::JobRegistry& registry, const engine::PlanPipeline& pipeline) {
  ViewTypes out;
  out.types = registry.Capacity().gpu_types;
  if (!out.types.empty()) out.speeds = pipeline.Summary().type_speeds;
  return out;
}

// What ReportApplied checks before the registry sees it.
absl::Status ValidateApplied(const std::string& job_id, const std::string& gpu_type) {
  RETURN_IF_ERROR(ValidateJobId(job_id));
  if (!gpu_type.empty() && !IsGpuTypeName(gpu_type))
    return absl::InvalidArgumentError(GpuTypeNameError("gpu_type", gpu_type));
  return absl::OkStatus();
}

}  // namespace

void DecisionEngine::ReportAppliedAsync(const std::string& job_id, uint32_t replicas,
                                        bool suspended, uint64_t generation, Done<JobStatus> done) {
  ReportAppliedAsync(job_id, replicas, suspended, generation, /*gpu_type=*/{}, std::move(done));
}

void DecisionEngine::ReportAppliedAsync(const std::string& job_id, uint32_t replicas,
                                        bool suspended, uint64_t generation,
                                        const std::string& gpu_type, Done<JobStatus> done) {
  if (absl::Status valid = ValidateApplied(job_id, gpu_type); !valid.ok()) return done(valid);
  registry_->ApplyAsync(job_id, replicas, suspended, generation, gpu_type,
                        [this, done = std::move(done)](absl::StatusOr<engine::JobEntry> e) {
                          if (!e.ok()) return done(e.status());
                          PlanAfterChangeAsync(options_.applied_debounce,
                                               [this, entry = *std::move(e), done](bool) {
                                                 done(views_->StatusOf(entry, /*fitted=*/nullptr));
                                               });
                        });
}

void DecisionEngine::SetCapacityAsync(const CapacityReport& report, Done<ClusterView> done) {
  if (absl::Status valid = ValidateCapacityReport(report, options_.spec_limits); !valid.ok()) {
    return done(valid);
  }
  registry_->SetCapacityAsync(report, ClusterViewOnceDurable(std::move(done)));
}

ClusterView DecisionEngine::ClusterViewAfterChange() {
  const bool pending = PlanAfterChange(options_.plan_coalesce);
  ClusterView view = ClusterViewNow();
  view.plan_pending = pending;
  return view;
}

std::function<void(absl::StatusOr<std::monostate>)> DecisionEngine::ClusterViewOnceDurable(
    Done<ClusterView> done) {
  return [this, done = std::move(done)](absl::StatusOr<std::monostate> set) {
    if (!set.ok()) return done(set.status());
    PlanAfterChangeAsync(options_.plan_coalesce, [this, done](bool pending) {
      ClusterView view = ClusterViewNow();
      view.plan_pending = pending;
      done(std::move(view));
    });
  };
}

JobView DecisionEngine::ViewOf(const engine::JobEntry& entry) const {
  const ViewTypes types = TypesForViews(*registry_, *pipeline_);
  return views_->ViewOf(entry, types.types, &types.speeds);
}

absl::StatusOr<JobView> DecisionEngine::RegisterJob(JobSpec spec) {
  ASSIGN_OR_RETURN(spec, Normalize(std::move(spec)));
  ASSIGN_OR_RETURN(const engine::JobEntry registered, registry_->Register(std::move(spec)));
  const bool pending = PlanAfterChange(options_.plan_coalesce);
  // The reply is built from the copy, without any lock.
  JobView view = ViewOf(registered);
  view.plan_pending = pending;
  return view;
}

absl::StatusOr<JobView> DecisionEngine::UpdateJob(JobSpec spec) {
  ASSIGN_OR_RETURN(spec, Normalize(std::move(spec)));
  ASSIGN_OR_RETURN(const engine::JobEntry updated, registry_->Update(std::move(spec)));
  const bool pending = PlanAfterChange(options_.plan_coalesce);
  JobView view = ViewOf(updated);
  view.plan_pending = pending;
  return view;
}

absl::StatusOr<JobView> DecisionEngine::GetJob(const std::string& job_id) const {
  RETURN_IF_ERROR(ValidateJobId(job_id));
  // From the published copy: no lock of the engine's, so a read never
  // waits for a change, a plan's sync or its commit.
  const std::shared_ptr<const engine::JobEntry> entry = registry_->Find(job_id);
  if (entry == nullptr) {
    return absl::NotFoundError(absl::StrFormat("job \"%s\" is not registered", job_id));
  }
  return ViewOf(*entry);
}

std::vector<JobView> DecisionEngine::ListJobs(const std::string& namespace_filter) const {
  std::vector<std::shared_ptr<const engine::JobEntry>> entries =
      registry_->Published(namespace_filter);
  std::vector<JobView> out;
  out.reserve(entries.size());
  const ViewTypes types = TypesForViews(*registry_, *pipeline_);  // once for the list
  for (const auto& entry : entries)
    out.push_back(views_->ViewOf(*entry, types.types, &types.speeds));
  return out;
}

absl::Status DecisionEngine::DeregisterJob(const std::string& job_id) {
  RETURN_IF_ERROR(ValidateJobId(job_id));
  RETURN_IF_ERROR(registry_->Deregister(job_id));
  PlanAfterChange(options_.plan_coalesce);
  return absl::OkStatus();
}

IngestResult DecisionEngine::Ingest(std::span<const StepSample> samples) {
  IngestResult result = store_.Ingest(samples, clock_->Now());
  if (options_.auto_register && result.rejected_unknown_job > 0) AutoRegister(samples, result);
  return result;
}

void DecisionEngine::AutoRegister(std::span<const StepSample> samples, IngestResult& result) {
  // Which jobs to register, and the largest size each reported.
  absl::btree_map<std::string, uint32_t> wanted;
  for (const StepSample& s : samples) {
    if (s.job_id.empty()) continue;
    uint32_t& largest = wanted[std::string(s.job_id)];
    largest = std::max(largest, s.world_size);
  }
  std::vector<JobSpec> specs;
  for (const auto& [id, largest] : wanted) {
    JobSpec spec;
    spec.job_id = id;
    spec.min_replicas = 1;
    spec.max_replicas = std::max(options_.auto_register_max_replicas, largest);
    absl::StatusOr<JobSpec> normalized = Normalize(std::move(spec));
    if (normalized.ok()) specs.push_back(*std::move(normalized));  // else the rejection stands
  }
  // Known jobs are skipped; the rest share one commit.
  const std::vector<std::string> registered = registry_->RegisterAll(std::move(specs));
  if (registered.empty()) return;
  const absl::flat_hash_set<std::string_view> added(registered.begin(), registered.end());
  // Ingest the samples of the new jobs again; they were all rejected before.
  std::vector<StepSample> retry;
  std::vector<uint32_t> original_index;
  for (size_t i = 0; i < samples.size(); ++i) {
    if (added.contains(samples[i].job_id)) {
      retry.push_back(samples[i]);
      original_index.push_back(static_cast<uint32_t>(i));
    }
  }
  const IngestResult second = store_.Ingest(retry, clock_->Now());
  result.MergeRetried(second, original_index);
  // One plan for every job this batch registered, with their samples in;
  // never run here (an ingest call's thread), and never waited for.
  if (!scheduler_->Request(options_.plan_coalesce).has_value()) Replan();
}

absl::StatusOr<JobStatus> DecisionEngine::ReportApplied(const std::string& job_id,
                                                        uint32_t replicas, bool suspended,
                                                        uint64_t generation,
                                                        const std::string& gpu_type) {
  RETURN_IF_ERROR(ValidateApplied(job_id, gpu_type));
  ASSIGN_OR_RETURN(const engine::JobEntry applied,
                   registry_->Apply(job_id, replicas, suspended, generation, gpu_type));
  PlanAfterChange(options_.applied_debounce);
  return views_->StatusOf(applied, /*fitted=*/nullptr);
}

absl::StatusOr<Recommendation> DecisionEngine::GetRecommendation(const std::string& job_id) const {
  RETURN_IF_ERROR(ValidateJobId(job_id));
  std::optional<Recommendation> rec = board_.Get(job_id);
  if (rec) return *rec;
  // Registered but not planned yet (a coalesced plan is pending): a retry,
  // or WatchRecommendations, gets it within the window.
  if (registry_->Find(job_id) != nullptr) {
    return absl::UnavailableError(absl::StrFormat(
        "job \"%s\" has no recommendation yet: the plan that includes it is pending; retry "
        "or watch WatchRecommendations",
        job_id));
  }
  return absl::NotFoundError(absl::StrFormat("job \"%s\" is not registered", job_id));
}

std::vector<Recommendation> DecisionEngine::ListRecommendations(
    const std::string& namespace_filter) const {
  return board_.List(namespace_filter);
}

std::vector<std::shared_ptr<const Recommendation>> DecisionEngine::RecommendationSnapshot(
    const std::string& namespace_filter) const {
  return board_.Snapshot(namespace_filter);
}

absl::StatusOr<ClusterView> DecisionEngine::SetCapacity(uint32_t total_gpus) {
  return SetCapacity(
      CapacityReport{total_gpus, /*slots=*/{}, /*allocatable_gpus=*/0, /*gpu_types=*/{}});
}

absl::StatusOr<ClusterView> DecisionEngine::SetCapacity(const CapacityReport& report) {
  RETURN_IF_ERROR(ValidateCapacityReport(report, options_.spec_limits));
  RETURN_IF_ERROR(registry_->SetCapacity(report));
  return ClusterViewAfterChange();
}

absl::StatusOr<ClusterView> DecisionEngine::SetQueues(std::vector<QueueSpec> queues) {
  RETURN_IF_ERROR(ValidateQueues(queues));
  RETURN_IF_ERROR(registry_->SetQueues(std::move(queues)));
  return ClusterViewAfterChange();
}

void DecisionEngine::SetQueuesAsync(std::vector<QueueSpec> queues, Done<ClusterView> done) {
  if (absl::Status valid = ValidateQueues(queues); !valid.ok()) return done(valid);
  registry_->SetQueuesAsync(std::move(queues), ClusterViewOnceDurable(std::move(done)));
}

ClusterView DecisionEngine::GetCluster() const { return ClusterViewNow(); }

JobStateCounts DecisionEngine::CountJobStates() const {
  JobStateCounts counts;
  // The published entries and the board, each read shard by shard: a
  // scrape never waits for a plan. A job registered or dropped between the
  // two reads is counted as its entry says.
  registry_->ForEachPublished([&](const engine::JobEntry& entry) {
    const std::optional<Recommendation> rec = board_.Get(entry.spec.job_id);
    const JobState state =
        JobStateOf(entry.status, rec ? std::optional<uint32_t>(rec->replicas) : std::nullopt);
    switch (GaugeStateOf(state, entry.started_at != absl::InfinitePast())) {
      case JobGaugeState::kRunning:
        ++counts.running;
        break;
      case JobGaugeState::kSuspended:
        ++counts.suspended;
        break;
      case JobGaugeState::kWaiting:
        ++counts.waiting;
        break;
    }
  });
  return counts;
}

ClusterView DecisionEngine::ClusterViewNow() const {
  ClusterView view;
  const engine::CapacityState capacity = registry_->Capacity();
  const engine::PlanSummary plan = pipeline_->Summary();
  view.total_gpus = capacity.total_gpus;
  view.slots = capacity.slots;
  view.gpu_types = capacity.gpu_types;
  view.allocated_gpus_by_type.assign(view.gpu_types.size(), 0);
  view.allocatable_gpus = capacity.allocatable_gpus;
  view.planned_at = plan.planned_at;
  view.plan_utility = plan.utility;
  view.plan_upper_bound = plan.upper_bound;
  view.optimality_gap = plan.gap;
  view.plans_run = plan.plans_run;
  if (options_.state != nullptr) view.state_backend = options_.state->Describe();
  view.last_checkpoint_at = plan.checkpointed_at;
  view.plan_exact = plan.exact;
  // Before the first plan (or on a follower, which does not plan) the
  // queues as set, without use.
  const std::vector<QueueSpec>& queues = plan.queues.empty() ? capacity.queues : plan.queues;
  for (size_t k = 0; k < queues.size(); ++k) {
    QueueView q;
    q.spec = queues[k];
    q.defined = FindQueue(capacity.queues, q.spec.name).has_value();
    if (k < plan.queue_use.size()) {
      const PlannedQueue& use = plan.queue_use[k];
      q.in_use_gpus = use.in_use_gpus;
      q.borrowed_gpus = use.borrowed_gpus;
      q.lent_gpus = use.lent_gpus;
      q.guaranteed_gpus = use.guaranteed_gpus;
      q.wanted_gpus = use.wanted_gpus;
      q.running_jobs = use.running_jobs;
      q.waiting_jobs = use.waiting_jobs;
    }
    view.queues.push_back(std::move(q));
  }

  // Without the engine's lock: the board's list is one plan's whole, and
  // the priorities come from the published entries.
  for (const auto& shared : board_.Snapshot()) {
    const Recommendation& rec = *shared;
    const std::shared_ptr<const engine::JobEntry> entry = registry_->Find(rec.job_id);
    if (entry == nullptr) continue;  // deregistered meanwhile
    if (rec.replicas == 0) {
      ++view.waiting_jobs;
      continue;
    }
    view.allocated_gpus += rec.gpus;
    view.allocations.push_back(
        {rec.job_id, rec.replicas, rec.gpus, entry->spec.priority, rec.gpu_type});
    for (size_t t = 0; t < view.gpu_types.size(); ++t)
      if (view.gpu_types[t].name == rec.gpu_type) view.allocated_gpus_by_type[t] += rec.gpus;
  }
  // Per slot class, the replicas the recommendations run of that size.
  for (const ReplicaSlots& s : view.slots) {
    ReplicaSlotUse use{s.gpus_per_replica, s.replicas, 0};
    for (const JobAllocation& a : view.allocations) {
      if (a.replicas > 0 && a.gpus == a.replicas * s.gpus_per_replica) {
        use.replicas_planned += a.replicas;
      }
    }
    view.slot_use.push_back(use);
  }
  return view;
}

void DecisionEngine::Replan() { pipeline_->Replan(leading_); }

void DecisionEngine::SetLeading(bool leading) {
  // What earlier plans kept (their slots, policy memory, checkpoint marks)
  // may be older than the copy a follower kept: plan from the entries alone.
  if (leading) pipeline_->Reset();
  leading_.store(leading, std::memory_order_release);
  if (leading) Replan();
}

void DecisionEngine::ApplyReplicated(ReplicatedChange change) {
  registry_->ApplyReplicated(change);
}

absl::StatusOr<std::shared_ptr<Subscription>> DecisionEngine::Watch(std::string namespace_filter) {
  return board_.Subscribe(std::move(namespace_filter));
}

void DecisionEngine::Unwatch(const std::shared_ptr<Subscription>& subscription) {
  board_.Unsubscribe(subscription);
}

void DecisionEngine::CloseWatches() { board_.CloseAll(); }

void DecisionEngine::StartTimer() { scheduler_->Start(); }

void DecisionEngine::StopTimer() { scheduler_->Stop(); }

}  // namespace rescale
