// DecisionEngine (see rescale/decision_engine.h).
#include "rescale/decision_engine.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <cstring>

#include "absl/container/flat_hash_map.h"
#include "absl/hash/hash.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "rescale/job_rules.h"
#include "rescale/status_macros.h"
#include "spdlog/spdlog.h"

namespace rescale {
namespace {

// What the cluster must do to go from `status` to `replicas`.
Action ActionFor(const JobStatus& status, uint32_t replicas) {
  const bool running = IsRunning(status);
  if (replicas == 0) return running ? Action::kSuspend : Action::kHold;
  if (!running) return status.suspended ? Action::kResume : Action::kScaleUp;
  if (replicas > status.current_replicas) return Action::kScaleUp;
  if (replicas < status.current_replicas) return Action::kScaleDown;
  return Action::kHold;
}

// A coalesced plan starts no sooner after the last one than this many times
// what the last one took (see RequestReplanLocked).
constexpr int kPlanPacing = 3;

// Hands the board's staged events to its watchers when it goes out of
// scope. Declared before a lock_guard of mu_, it runs after that lock is
// released: plans and removals only stage their events under mu_ (cheap,
// whatever the number of watchers), and the fan-out and the watchers' ready
// callbacks, which start gRPC writes, run without any lock of the engine's.
class DeliverOnExit {
 public:
  explicit DeliverOnExit(RecommendationBoard& board) : board_(board) {}
  ~DeliverOnExit() { board_.Deliver(); }
  DeliverOnExit(const DeliverOnExit&) = delete;
  DeliverOnExit& operator=(const DeliverOnExit&) = delete;

 private:
  RecommendationBoard& board_;
};

}  // namespace

DecisionEngine::JobEntry::JobEntry() = default;

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
    std::lock_guard<std::mutex> lock(engine->mu_);
    RETURN_IF_ERROR(engine->RestoreLocked());
  }
  return engine;
}

absl::Status DecisionEngine::RestoreLocked() {
  StateStore& state = *options_.state;
  ASSIGN_OR_RETURN(StoredState stored, state.Load());
  if (static_cast<int>(stored.jobs.size()) > options_.max_jobs) {
    return absl::FailedPreconditionError(
        absl::StrFormat("%s holds %d jobs, more than --max_jobs (%d); raise --max_jobs",
                        state.Describe(), stored.jobs.size(), options_.max_jobs));
  }
  for (StoredJob& kept : stored.jobs) {
    absl::StatusOr<JobSpec> spec = Normalize(kept.spec);
    if (!spec.ok()) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "%s: the kept spec of job %s is not valid on this server (%s); start with the "
          "limits and policies it was registered under",
          state.Describe(), kept.spec.job_id, spec.status().message()));
    }
    RETURN_IF_ERROR(store_.AddJob(spec->job_id, spec->max_replicas, spec->local_batch_size));
    JobEntry entry;
    FillFromStored(entry, *std::move(spec), kept);
    entry.registration = entry.version = entry.spec_version = ++change_counter_;
    auto it = jobs_.emplace(entry.spec.job_id, std::move(entry)).first;
    MarkChangedLocked(it->first);
    PublishEntryLocked(it->second);
  }
  for (StoredMeasurements& measured : stored.measurements) RestoreMeasurementsLocked(measured);
  if (stored.capacity_gpus.has_value()) capacity_gpus_ = stored.capacity_gpus;
  capacity_slots_ = std::move(stored.capacity_slots);
  capacity_allocatable_gpus_ = stored.capacity_allocatable_gpus;
  // Recommendations of jobs no longer kept (none, unless the file was
  // edited) would have no job to describe.
  std::erase_if(stored.recommendations,
                [&](const Recommendation& rec) { return !jobs_.contains(rec.job_id); });
  board_.Restore(std::move(stored.recommendations), std::move(stored.retired_generations));
  spdlog::info("restored {} jobs from {}", jobs_.size(), state.Describe());
  return absl::OkStatus();
}

void DecisionEngine::FillFromStored(JobEntry& entry, JobSpec spec, StoredJob& kept) {
  entry.spec = std::move(spec);
  entry.status.current_replicas = kept.current_replicas;
  entry.status.suspended = kept.suspended;
  entry.status.last_applied_generation = kept.last_applied_generation;
  entry.status.last_applied_at = kept.last_applied_at;
  entry.status.registered_at = kept.registered_at;
  entry.has_applied = kept.has_applied;
  entry.last_change_at = kept.last_change_at;
  entry.started_at = kept.started_at;
  entry.stopped_at = kept.stopped_at;
  entry.memory.previous_replicas = kept.previous_replicas;
  entry.memory.scale_events = std::move(kept.scale_events);
}

void DecisionEngine::RestoreMeasurementsLocked(StoredMeasurements& measured) {
  auto it = jobs_.find(measured.job_id);
  if (it == jobs_.end()) return;
  it->second.restored = std::make_shared<const std::vector<SizeStats>>(std::move(measured.sizes));
  // The plans' own policy memory: the job's plan slot takes it from the
  // entry when it is created (SyncSlotsLocked), and keeps its own after.
  it->second.memory.exploration_stopped = measured.exploration_stopped;
  it->second.memory.recommendations = std::move(measured.recent_recommendations);
  MarkChangedLocked(it->first);
  PublishEntryLocked(it->second);
}

void DecisionEngine::RemoveJobLocked(const std::string& job_id) {
  jobs_.erase(job_id);
  MarkChangedLocked(job_id);
  UnpublishEntryLocked(job_id);
  store_.RemoveJob(job_id);
  board_.StageRemove(job_id);
}

void DecisionEngine::ApplyReplicated(ReplicatedChange change) {
  const DeliverOnExit deliver(board_);  // after the lock below is released
  std::lock_guard<std::mutex> lock(mu_);
  absl::flat_hash_set<std::string> kept_ids;
  for (StoredJob& kept : change.jobs) {
    absl::StatusOr<JobSpec> spec = Normalize(kept.spec);
    absl::Status added = spec.ok() ? store_.AddJob(spec->job_id, spec->max_replicas,
                                                   spec->local_batch_size)
                                   : spec.status();
    if (!added.ok()) {
      spdlog::error("job {} as the leader recorded it is not valid on this server ({}); left out",
                    kept.spec.job_id, std::string(added.message()));
      continue;
    }
    kept_ids.insert(spec->job_id);
    auto [it, inserted] = jobs_.try_emplace(spec->job_id);
    const bool registered_again =
        !inserted && it->second.status.registered_at != kept.registered_at;
    FillFromStored(it->second, *std::move(spec), kept);
    it->second.version = it->second.spec_version = ++change_counter_;
    if (inserted || registered_again) {
      it->second.registration = it->second.version;
      it->second.restored.reset();
      // The earlier registration's recommendation is not this job's; the
      // leader's own comes with the change (or its next plan).
      if (registered_again) board_.StageRemove(it->first);
    }
    MarkChangedLocked(it->first);
    PublishEntryLocked(it->second);
  }
  if (change.full) {
    std::vector<std::string> gone;
    for (const auto& [id, entry] : jobs_) {
      if (!kept_ids.contains(id)) gone.push_back(id);
    }
    for (const std::string& id : gone) RemoveJobLocked(id);
  }
  for (const std::string& id : change.removed_jobs) {
    if (jobs_.contains(id)) RemoveJobLocked(id);
  }
  if (change.capacity_gpus.has_value()) capacity_gpus_ = change.capacity_gpus;
  if (change.capacity_slots.has_value()) capacity_slots_ = *std::move(change.capacity_slots);
  if (change.capacity_allocatable_gpus.has_value()) {
    capacity_allocatable_gpus_ = *change.capacity_allocatable_gpus;
  }
  for (StoredMeasurements& measured : change.measurements) RestoreMeasurementsLocked(measured);
  std::erase_if(change.recommendations,
                [&](const Recommendation& rec) { return !jobs_.contains(rec.job_id); });
  board_.StageReplicated(std::move(change.recommendations),
                         std::move(change.retired_generations));
}

void DecisionEngine::SetLeading(bool leading) {
  {
    std::lock_guard<std::mutex> plan_lock(plan_mu_);
    if (leading) {
      // What earlier plans kept (their slots, policy memory, checkpoint
      // marks) may be older than the copy a follower kept: plan from the
      // entries alone.
      std::lock_guard<std::mutex> lock(mu_);
      plan_slots_.clear();
      planner_jobs_.clear();
      planner_job_sources_.clear();
      for (const auto& [id, entry] : jobs_) MarkChangedLocked(id);
      last_checkpoint_at_ = absl::InfinitePast();
    }
    leading_.store(leading, std::memory_order_release);
  }
  if (leading) Replan();
}

StoredJob DecisionEngine::StoredJobOf(const JobEntry& entry) {
  StoredJob kept;
  kept.spec = entry.spec;
  kept.current_replicas = entry.status.current_replicas;
  kept.suspended = entry.status.suspended;
  kept.last_applied_generation = entry.status.last_applied_generation;
  kept.last_applied_at = entry.status.last_applied_at;
  kept.has_applied = entry.has_applied;
  kept.registered_at = entry.status.registered_at;
  kept.last_change_at = entry.last_change_at;
  kept.started_at = entry.started_at;
  kept.stopped_at = entry.stopped_at;
  kept.previous_replicas = entry.memory.previous_replicas;
  kept.scale_events = entry.memory.scale_events;
  return kept;
}

absl::Status DecisionEngine::PersistJobLocked(const JobEntry& entry) {
  if (options_.state == nullptr) return absl::OkStatus();
  return options_.state->PutJob(StoredJobOf(entry));
}

DecisionEngine::DecisionEngine(EngineOptions options, Clock* clock)
    : options_(std::move(options)),
      clock_(clock != nullptr ? clock : Clock::Real()),
      store_([&] {
        MetricsStoreOptions store = options_.store;
        store.max_jobs = options_.max_jobs;
        return store;
      }()),
      board_(options_.max_watchers),
      capacity_gpus_(options_.capacity_gpus) {
  leading_.store(options_.start_leading, std::memory_order_relaxed);
}

DecisionEngine::~DecisionEngine() { StopTimer(); }

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

void DecisionEngine::FitInto(PlanSlot& slot, absl::Time now, bool& refitted) const {
  // A new spec refits whatever the statistics say (a default revision).
  if (slot.fitted_spec_version != slot.entry.spec_version) slot.stats_revision = {};
  std::optional<std::vector<SizeStats>> stats =
      store_.StatsIfChanged(slot.entry.spec.job_id, now, slot.stats_revision);
  refitted = stats.has_value() || slot.fitted == nullptr;
  if (!refitted) return;
  if (!stats.has_value()) stats = store_.Stats(slot.entry.spec.job_id, now);
  slot.fitted = std::make_shared<const Fitted>(
      Fit(slot.entry.spec, WithRestored(*std::move(stats), slot.entry), now));
  slot.fitted_spec_version = slot.entry.spec_version;
  ++slot.fit_serial;
}

DecisionEngine::Fitted DecisionEngine::FitNow(const JobEntry& entry) const {
  const absl::Time now = clock_->Now();
  return Fit(entry.spec, WithRestored(store_.Stats(entry.spec.job_id, now), entry), now);
}

std::vector<SizeStats> DecisionEngine::WithRestored(std::vector<SizeStats> live,
                                                    const JobEntry& entry) const {
  if (entry.restored == nullptr) return live;
  for (const SizeStats& kept : *entry.restored) {
    auto same = std::find_if(live.begin(), live.end(),
                             [&](const SizeStats& s) { return s.world_size == kept.world_size; });
    if (same == live.end()) {
      live.push_back(kept);
      continue;
    }
    // Measured again since the restart: the new measurements win once they
    // are enough to fit on; the progress made before counts either way.
    const uint64_t steps_before = kept.steps_processed;
    const uint64_t samples_before = kept.samples_processed;
    if (same->lifetime_count < options_.policy.min_samples) {
      const uint64_t steps_since = same->steps_processed;
      const uint64_t samples_since = same->samples_processed;
      *same = kept;
      same->steps_processed = steps_since;
      same->samples_processed = samples_since;
    }
    same->steps_processed += steps_before;
    same->samples_processed += samples_before;
  }
  std::sort(live.begin(), live.end(),
            [](const SizeStats& a, const SizeStats& b) { return a.world_size < b.world_size; });
  return live;
}

void DecisionEngine::CheckpointMeasurements(absl::Time now) {
  if (options_.state == nullptr || now - last_checkpoint_at_ < options_.plan_interval) return;
  last_checkpoint_at_ = now;
  // In writes of at most this many jobs (the store's choice: SQLite's is
  // one transaction, which a call that writes the state store waits for at
  // most, not for the whole checkpoint).
  const size_t kJobsPerTransaction = options_.state->checkpoint_jobs_per_write();
  const absl::Time started = absl::Now();  // the cost, for the log (not the injected clock)
  std::vector<StoredMeasurements> batch;
  std::vector<PlanSlot*> in_batch;
  size_t written = 0;
  auto flush = [&]() -> bool {
    if (batch.empty()) return true;
    if (absl::Status kept = options_.state->PutMeasurements(batch); !kept.ok()) {
      // Tried again at the next checkpoint; nothing is lost but this window.
      spdlog::error("measurements of {} jobs not checkpointed: {}", batch.size(), kept.ToString());
      return false;
    }
    for (PlanSlot* slot : in_batch) {
      slot->checkpointed_fit = slot->fit_serial;
      slot->checkpointed_exploration_stopped = slot->entry.memory.exploration_stopped;
      slot->checkpointed_recommendations = slot->entry.memory.recommendations;
    }
    written += batch.size();
    batch.clear();
    in_batch.clear();
    return true;
  };
  for (auto& [id, slot] : plan_slots_) {
    const PolicyMemory& memory = slot.entry.memory;
    const bool memory_moved = memory.exploration_stopped != slot.checkpointed_exploration_stopped ||
                              memory.recommendations != slot.checkpointed_recommendations;
    if (slot.fitted == nullptr || (slot.fit_serial == slot.checkpointed_fit && !memory_moved))
      continue;
    batch.push_back({.job_id = id,
                     .sizes = slot.fitted->stats,
                     .exploration_stopped = memory.exploration_stopped,
                     .recent_recommendations = memory.recommendations});
    in_batch.push_back(&slot);
    if (batch.size() == kJobsPerTransaction && !flush()) return;
  }
  if (!flush()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    checkpointed_at_ = now;
  }
  if (written == 0) return;
  spdlog::debug("checkpointed the measurements of {} jobs to {} in {}", written,
                options_.state->Describe(), absl::FormatDuration(absl::Now() - started));
}

DecisionEngine::Fitted DecisionEngine::Fit(const JobSpec& spec, std::span<const SizeStats> stats,
                                           absl::Time now) const {
  Fitted fitted;
  for (const SizeStats& s : stats) {
    Observation o;
    o.replicas = s.world_size;
    o.step_seconds = s.step_seconds;
    o.spread_seconds = s.spread_seconds;
    o.sample_count = s.from_window ? s.sample_count : s.lifetime_count;
    o.lifetime_count = s.lifetime_count;
    o.mean_batch = s.mean_batch;
    o.age_seconds = std::max(0.0, absl::ToDoubleSeconds(now - s.last_sample_at));
    fitted.observations.push_back(o);
  }
  ModelOptions model_options = options_.model;
  model_options.min_samples = options_.policy.min_samples;
  model_options.gpus_per_replica = std::max<uint32_t>(spec.gpus_per_replica, 1);
  if (spec.local_batch_size > 0) model_options.default_local_batch = spec.local_batch_size;
  fitted.model = ThroughputModel::Fit(fitted.observations, spec.prior, model_options);
  for (const SizeStats& s : stats) fitted.samples_processed += s.samples_processed;
  if (options_.state != nullptr) fitted.stats.assign(stats.begin(), stats.end());
  if (!fitted.model.empty()) {
    const uint32_t sizes = std::min(spec.max_replicas, kCachedSizes);
    fitted.samples_per_second.reserve(sizes);
    for (uint32_t n = 1; n <= sizes; ++n)
      fitted.samples_per_second.push_back(fitted.model.SamplesPerSecond(n));
  }
  return fitted;
}

std::vector<CurvePoint> DecisionEngine::CurveOf(const JobSpec& spec, const Fitted& fitted) {
  std::vector<CurvePoint> curve;
  if (fitted.model.empty()) return curve;
  constexpr uint32_t kMaxPoints = 256;
  const uint32_t last = std::min(spec.max_replicas, kMaxPoints);
  for (uint32_t n = 1; n <= last; ++n) {
    CurvePoint p;
    p.replicas = n;
    p.samples_per_second = fitted.model.SamplesPerSecond(n);
    p.uncertainty = fitted.model.Uncertainty(n);
    p.efficiency = fitted.model.Efficiency(n);
    for (const Observation& o : fitted.observations) {
      if (o.replicas != n || o.step_seconds <= 0) continue;
      p.observed = true;
      p.sample_count = o.sample_count;
      p.observed_samples_per_second = ObservedSamplesPerSecond(n, o.mean_batch, o.step_seconds);
    }
    curve.push_back(p);
  }
  return curve;
}
JobStatus DecisionEngine::StatusOf(const JobEntry& entry, const ThroughputModel* model) const {
  JobStatus status = entry.status;
  status.samples_accepted = store_.SamplesAccepted(entry.spec.job_id);
  status.samples_processed = store_.SamplesProcessed(entry.spec.job_id);
  if (entry.restored != nullptr) {
    for (const SizeStats& kept : *entry.restored)
      status.samples_processed += kept.samples_processed;
  }
  // At the size it runs now: the estimate answers "when does it finish if
  // nothing changes", and a job that does not run does not finish. Only then
  // is a curve needed; a caller without one (ReportApplied) pays for a fit
  // only for a running job with a known total.
  if (!entry.spec.total_samples.has_value() || !IsRunning(status)) return status;
  const double rate = model != nullptr
                          ? model->SamplesPerSecond(RunningReplicas(status))
                          : FitNow(entry).model.SamplesPerSecond(RunningReplicas(status));
  if (rate <= 0) return status;
  const uint64_t total = *entry.spec.total_samples;
  const uint64_t left = total > status.samples_processed ? total - status.samples_processed : 0;
  status.estimated_remaining_seconds = static_cast<double>(left) / rate;
  return status;
}

JobView DecisionEngine::ViewOf(const JobEntry& entry) const {
  JobView view;
  view.spec = entry.spec;
  const Fitted fitted = FitNow(entry);
  view.status = StatusOf(entry, &fitted.model);
  view.curve = CurveOf(entry.spec, fitted);
  view.curve_model = fitted.model.Describe();
  view.curve_fit_rms_log_error = fitted.model.rms_log_error();
  view.recommendation = board_.Get(entry.spec.job_id);
  view.pods = store_.Pods(entry.spec.job_id);
  return view;
}

absl::StatusOr<JobView> DecisionEngine::RegisterJob(JobSpec spec) {
  ASSIGN_OR_RETURN(spec, Normalize(std::move(spec)));
  JobEntry registered;
  bool deferred;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ASSIGN_OR_RETURN(JobEntry * entry, AddJobLocked(std::move(spec)));
    deferred = RequestReplanLocked(options_.plan_coalesce);
    registered = *entry;
  }
  if (!deferred) Replan();
  // The reply is built from the copy, without the lock.
  JobView view = ViewOf(registered);
  view.plan_pending = deferred;
  return view;
}

absl::StatusOr<DecisionEngine::JobEntry*> DecisionEngine::AddJobLocked(JobSpec spec) {
  if (jobs_.contains(spec.job_id)) {
    return absl::AlreadyExistsError(absl::StrFormat(
        "job \"%s\" is already registered; use UpdateJob to change its spec", spec.job_id));
  }
  if (static_cast<int>(jobs_.size()) >= options_.max_jobs) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("cannot register \"%s\": %d jobs are registered, the limit (--max_jobs)",
                        spec.job_id, options_.max_jobs));
  }
  RETURN_IF_ERROR(store_.AddJob(spec.job_id, spec.max_replicas, spec.local_batch_size));
  JobEntry entry;
  entry.spec = spec;
  entry.status.registered_at = clock_->Now();
  if (absl::Status kept = PersistJobLocked(entry); !kept.ok()) {
    store_.RemoveJob(spec.job_id);
    return kept;
  }
  entry.registration = entry.version = entry.spec_version = ++change_counter_;
  auto it = jobs_.emplace(spec.job_id, std::move(entry)).first;
  MarkChangedLocked(it->first);
  PublishEntryLocked(it->second);
  return &it->second;
}

DecisionEngine::ReadShard& DecisionEngine::ReadShardOf(std::string_view job_id) const {
  return read_shards_[absl::HashOf(job_id) % kReadShards];
}

void DecisionEngine::PublishEntryLocked(const JobEntry& entry) {
  auto published = std::make_shared<const JobEntry>(entry);
  ReadShard& shard = ReadShardOf(entry.spec.job_id);
  std::lock_guard<std::mutex> lock(shard.mu);
  shard.jobs[entry.spec.job_id] = std::move(published);
}

void DecisionEngine::UnpublishEntryLocked(const std::string& job_id) {
  ReadShard& shard = ReadShardOf(job_id);
  std::lock_guard<std::mutex> lock(shard.mu);
  shard.jobs.erase(job_id);
}

std::shared_ptr<const DecisionEngine::JobEntry> DecisionEngine::FindPublished(
    const std::string& job_id) const {
  ReadShard& shard = ReadShardOf(job_id);
  std::lock_guard<std::mutex> lock(shard.mu);
  auto it = shard.jobs.find(job_id);
  return it == shard.jobs.end() ? nullptr : it->second;
}

absl::StatusOr<JobView> DecisionEngine::UpdateJob(JobSpec spec) {
  ASSIGN_OR_RETURN(spec, Normalize(std::move(spec)));
  JobEntry updated;
  bool deferred;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = jobs_.find(spec.job_id);
    if (it == jobs_.end()) {
      return absl::NotFoundError(
          absl::StrFormat("job \"%s\" is not registered; use RegisterJob to add it", spec.job_id));
    }
    JobEntry changed = it->second;
    changed.spec = spec;
    RETURN_IF_ERROR(PersistJobLocked(changed));
    RETURN_IF_ERROR(store_.AddJob(spec.job_id, spec.max_replicas, spec.local_batch_size));
    it->second.spec = spec;
    it->second.version = it->second.spec_version = ++change_counter_;
    MarkChangedLocked(it->first);
    PublishEntryLocked(it->second);
    deferred = RequestReplanLocked(options_.plan_coalesce);
    updated = it->second;
  }
  if (!deferred) Replan();
  JobView view = ViewOf(updated);
  view.plan_pending = deferred;
  return view;
}

absl::StatusOr<JobView> DecisionEngine::GetJob(const std::string& job_id) const {
  RETURN_IF_ERROR(ValidateJobId(job_id));
  // From the published copy: no lock of the engine's, so a read never
  // waits for a plan's sync or commit.
  const std::shared_ptr<const JobEntry> entry = FindPublished(job_id);
  if (entry == nullptr) {
    return absl::NotFoundError(absl::StrFormat("job \"%s\" is not registered", job_id));
  }
  return ViewOf(*entry);
}

std::vector<JobView> DecisionEngine::ListJobs(const std::string& namespace_filter) const {
  std::vector<std::shared_ptr<const JobEntry>> entries = PublishedEntries(namespace_filter);
  std::vector<JobView> out;
  out.reserve(entries.size());
  for (const auto& entry : entries) out.push_back(ViewOf(*entry));
  return out;
}

std::vector<std::shared_ptr<const DecisionEngine::JobEntry>> DecisionEngine::PublishedEntries(
    const std::string& namespace_filter) const {
  std::vector<std::shared_ptr<const JobEntry>> entries;
  for (ReadShard& shard : read_shards_) {
    std::lock_guard<std::mutex> lock(shard.mu);
    for (const auto& [id, entry] : shard.jobs) {
      if (InNamespace(id, namespace_filter)) entries.push_back(entry);
    }
  }
  std::sort(entries.begin(), entries.end(),
            [](const auto& a, const auto& b) { return a->spec.job_id < b->spec.job_id; });
  return entries;
}

absl::Status DecisionEngine::DeregisterJob(const std::string& job_id) {
  RETURN_IF_ERROR(ValidateJobId(job_id));
  bool deferred;
  {
    const DeliverOnExit deliver(board_);  // after the lock below is released
    std::lock_guard<std::mutex> lock(mu_);
    if (!jobs_.contains(job_id)) {
      return absl::NotFoundError(absl::StrFormat("job \"%s\" is not registered", job_id));
    }
    if (options_.state != nullptr) {
      const std::optional<Recommendation> last = board_.Get(job_id);
      RETURN_IF_ERROR(options_.state->DeleteJob(job_id, last ? last->generation : 0));
    }
    RemoveJobLocked(job_id);
    deferred = RequestReplanLocked(options_.plan_coalesce);
  }
  if (!deferred) Replan();
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
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const StepSample& s : samples) {
      if (s.job_id.empty() || jobs_.contains(std::string(s.job_id))) continue;
      uint32_t& largest = wanted[std::string(s.job_id)];
      largest = std::max(largest, s.world_size);
    }
    for (auto it = wanted.begin(); it != wanted.end();) {
      JobSpec spec;
      spec.job_id = it->first;
      spec.min_replicas = 1;
      spec.max_replicas = std::max(options_.auto_register_max_replicas, it->second);
      absl::StatusOr<JobSpec> normalized = Normalize(std::move(spec));
      if (normalized.ok() && AddJobLocked(*std::move(normalized)).ok()) {
        ++it;
      } else {
        it = wanted.erase(it);  // malformed id or limit: the rejection stands
      }
    }
  }
  if (wanted.empty()) return;
  // Ingest the samples of the new jobs again; they were all rejected before.
  std::vector<StepSample> retry;
  std::vector<uint32_t> original_index;
  for (size_t i = 0; i < samples.size(); ++i) {
    if (wanted.contains(std::string(samples[i].job_id))) {
      retry.push_back(samples[i]);
      original_index.push_back(static_cast<uint32_t>(i));
    }
  }
  IngestResult second = store_.Ingest(retry, clock_->Now());
  IngestResult merged;
  merged.accepted = result.accepted + second.accepted;
  merged.rejected = result.rejected - retry.size();
  merged.duplicates = result.duplicates + second.duplicates;
  merged.rejected_for_limits = result.rejected_for_limits;
  merged.limit_reason = result.limit_reason;
  merged.rejected_unknown_job = result.rejected_unknown_job - retry.size();
  std::vector<SampleRejection> all;
  for (const SampleRejection& r : result.rejections) {
    if (!wanted.contains(std::string(samples[r.index].job_id))) all.push_back(r);
  }
  for (const SampleRejection& r : second.rejections)
    all.push_back({original_index[r.index], r.reason});
  std::sort(all.begin(), all.end(),
            [](const SampleRejection& a, const SampleRejection& b) { return a.index < b.index; });
  for (SampleRejection& r : all) {
    if (merged.rejections.size() >= IngestResult::kMaxReportedRejections) break;
    merged.rejections.push_back(std::move(r));
  }
  merged.rejected += second.rejected;
  merged.rejected_for_limits += second.rejected_for_limits;
  if (merged.limit_reason.empty()) merged.limit_reason = second.limit_reason;
  result = std::move(merged);
  // One plan for every job this batch registered, with their samples in.
  bool deferred;
  {
    std::lock_guard<std::mutex> lock(mu_);
    deferred = RequestReplanLocked(options_.plan_coalesce);
  }
  if (!deferred) Replan();
}

absl::StatusOr<JobStatus> DecisionEngine::ReportApplied(const std::string& job_id,
                                                        uint32_t replicas, bool suspended,
                                                        uint64_t generation) {
  RETURN_IF_ERROR(ValidateJobId(job_id));
  JobEntry applied;
  bool deferred;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ASSIGN_OR_RETURN(applied, ApplyLocked(job_id, replicas, suspended, generation));
    deferred = RequestReplanLocked(options_.applied_debounce);
  }
  if (!deferred) Replan();
  return StatusOf(applied, /*model=*/nullptr);
}

absl::StatusOr<DecisionEngine::JobEntry> DecisionEngine::ApplyLocked(const std::string& job_id,
                                                                     uint32_t replicas,
                                                                     bool suspended,
                                                                     uint64_t generation) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) {
    return absl::NotFoundError(absl::StrFormat("job \"%s\" is not registered", job_id));
  }
  // Changed on a copy, which replaces the entry once it is recorded.
  JobEntry entry = it->second;
  if (replicas > entry.spec.max_replicas) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "replicas %d exceeds the job's max_replicas %d", replicas, entry.spec.max_replicas));
  }
  std::optional<Recommendation> latest = board_.Get(job_id);
  const uint64_t latest_generation = latest ? latest->generation : 0;
  if (generation > latest_generation) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "generation %d is newer than the job's latest recommendation (generation %d)", generation,
        latest_generation));
  }
  const uint32_t running_before = RunningReplicas(entry.status);
  JobStatus after;
  after.current_replicas = replicas;
  after.suspended = suspended;
  const uint32_t running_after = RunningReplicas(after);
  if (entry.has_applied && running_after != running_before) {
    // A change the cluster made: starts the cooldown and feeds the
    // policies' memory (previous size, HPA scale events).
    const absl::Time now = clock_->Now();
    entry.last_change_at = now;
    entry.memory.previous_replicas = running_before;
    entry.memory.scale_events.emplace_back(
        now, static_cast<int32_t>(running_after) - static_cast<int32_t>(running_before));
    auto& events = entry.memory.scale_events;
    if (events.size() > 64) events.erase(events.begin(), events.end() - 64);
  }
  if (running_after > 0 && running_before == 0) entry.started_at = clock_->Now();
  if (running_after == 0 && running_before > 0) entry.stopped_at = clock_->Now();
  entry.has_applied = true;
  entry.status.current_replicas = replicas;
  entry.status.suspended = suspended;
  if (generation != 0) {
    entry.status.last_applied_generation =
        std::max(entry.status.last_applied_generation, generation);
  }
  entry.status.last_applied_at = clock_->Now();
  RETURN_IF_ERROR(PersistJobLocked(entry));
  entry.version = ++change_counter_;
  it->second = entry;
  MarkChangedLocked(it->first);
  PublishEntryLocked(entry);
  return entry;
}

absl::StatusOr<Recommendation> DecisionEngine::GetRecommendation(const std::string& job_id) const {
  RETURN_IF_ERROR(ValidateJobId(job_id));
  std::optional<Recommendation> rec = board_.Get(job_id);
  if (rec) return *rec;
  // Registered but not planned yet (a coalesced plan is pending): a retry,
  // or WatchRecommendations, gets it within the window.
  if (FindPublished(job_id) != nullptr) {
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
  return SetCapacity(CapacityReport{total_gpus, /*slots=*/{}, /*allocatable_gpus=*/0});
}

absl::StatusOr<ClusterView> DecisionEngine::SetCapacity(const CapacityReport& report) {
  RETURN_IF_ERROR(ValidateCapacityReport(report, options_.spec_limits));
  bool deferred;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (options_.state != nullptr) RETURN_IF_ERROR(options_.state->PutCapacity(report));
    capacity_gpus_ = report.total_gpus;
    capacity_slots_ = report.slots;
    capacity_allocatable_gpus_ = report.allocatable_gpus;
    deferred = RequestReplanLocked(options_.plan_coalesce);
  }
  if (!deferred) Replan();
  ClusterView view;
  {
    std::lock_guard<std::mutex> lock(mu_);
    view = PlanSummaryLocked();
  }
  AddAllocations(view);
  view.plan_pending = deferred;
  return view;
}

ClusterView DecisionEngine::GetCluster() const {
  ClusterView view;
  {
    std::lock_guard<std::mutex> lock(mu_);
    view = PlanSummaryLocked();
  }
  AddAllocations(view);
  return view;
}

JobStateCounts DecisionEngine::CountJobStates() const {
  JobStateCounts counts;
  // The published entries and the board, each read shard by shard: a
  // scrape never waits for a plan. A job registered or dropped between the
  // two reads is counted as its entry says.
  for (ReadShard& shard : read_shards_) {
    std::vector<std::shared_ptr<const JobEntry>> entries;
    {
      std::lock_guard<std::mutex> lock(shard.mu);
      entries.reserve(shard.jobs.size());
      for (const auto& [id, entry] : shard.jobs) entries.push_back(entry);
    }
    for (const auto& entry : entries) {
      const std::optional<Recommendation> rec = board_.Get(entry->spec.job_id);
      if (rec.has_value() && rec->replicas > 0) {
        ++counts.running;
      } else if (entry->started_at != absl::InfinitePast()) {
        ++counts.suspended;
      } else {
        ++counts.waiting;
      }
    }
  }
  return counts;
}

ClusterView DecisionEngine::PlanSummaryLocked() const {
  ClusterView view;
  view.total_gpus = capacity_gpus_;
  view.slots = capacity_slots_;
  view.allocatable_gpus = capacity_allocatable_gpus_;
  view.planned_at = planned_at_;
  view.plan_utility = last_plan_utility_;
  view.plan_upper_bound = last_plan_upper_bound_;
  view.optimality_gap = last_plan_gap_;
  view.plans_run = plans_run_;
  if (options_.state != nullptr) view.state_backend = options_.state->Describe();
  view.last_checkpoint_at = checkpointed_at_;
  view.plan_exact = last_plan_exact_;
  return view;
}

void DecisionEngine::AddAllocations(ClusterView& view) const {
  // Without the engine's lock: the board's list is one plan's whole, and
  // the priorities come from the published entries.
  for (const auto& shared : board_.Snapshot()) {
    const Recommendation& rec = *shared;
    const std::shared_ptr<const JobEntry> entry = FindPublished(rec.job_id);
    if (entry == nullptr) continue;  // deregistered meanwhile
    if (rec.replicas == 0) {
      ++view.waiting_jobs;
      continue;
    }
    view.allocated_gpus += rec.gpus;
    view.allocations.push_back({rec.job_id, rec.replicas, rec.gpus, entry->spec.priority});
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
}

// Planning in three steps, so that only the first and the last hold mu_,
// each for time that grows with the jobs changed, not with all of them.
// SyncSlotsLocked (under mu_) copies into the plan's own slots the jobs
// changed since the last plan, and the capacity; ComputePlan (no lock)
// fits, runs the policies and the planner on the slots; CommitLocked (under
// mu_ again) publishes the result. Meanwhile mutations and reads go on: a
// job registered after the sync waits for the next plan (its request asked
// for one), and a job deregistered or changed meanwhile is in dirty_ again
// by the commit, which drops its recommendation when it no longer fits the
// job (see CommitLocked). One plan computes at a time (plan_mu_), so the
// slots need no lock of their own.
void DecisionEngine::Replan() {
  std::lock_guard<std::mutex> plan_lock(plan_mu_);
  if (!leading_.load(std::memory_order_acquire)) return;  // a follower
  const auto started = std::chrono::steady_clock::now();
  std::optional<uint32_t> capacity_gpus;
  {
    std::lock_guard<std::mutex> lock(mu_);
    capacity_gpus = SyncSlotsLocked();
  }
  if (options_.plan_compute_hook) options_.plan_compute_hook();
  const absl::Time now = clock_->Now();
  store_.Tick(now);
  PlanResult result = ComputePlan(plan_slots_, capacity_gpus, now);
  PlanStats stats;
  stats.optimality_gap = result.gap;
  {
    const DeliverOnExit deliver(board_);  // after the lock below is released
    std::lock_guard<std::mutex> lock(mu_);
    CommitLocked(std::move(result), now, stats);
  }
  if (options_.plan_observer) {
    stats.duration = absl::FromChrono(std::chrono::steady_clock::now() - started);
    options_.plan_observer(stats);
  }
  // Without the engine's lock: calls and reads go on while it writes.
  CheckpointMeasurements(now);
}

std::optional<uint32_t> DecisionEngine::SyncSlotsLocked() {
  for (const std::string& job_id : dirty_) {
    auto live = jobs_.find(job_id);
    if (live == jobs_.end()) {
      plan_slots_.erase(job_id);
      continue;
    }
    const JobEntry& entry = live->second;
    PlanSlot& slot = plan_slots_[job_id];
    if (slot.entry.registration != entry.registration) {
      slot = PlanSlot();  // new, or registered again: nothing kept
      slot.entry = entry;
      continue;
    }
    // The plan's own memory stays; the cluster's changes come from the entry.
    PolicyMemory memory = std::move(slot.entry.memory);
    memory.previous_replicas = entry.memory.previous_replicas;
    memory.scale_events = entry.memory.scale_events;
    slot.entry = entry;
    slot.entry.memory = std::move(memory);
  }
  dirty_.clear();
  plan_capacity_slots_ = capacity_slots_;
  return capacity_gpus_;
}

void DecisionEngine::MarkChangedLocked(const std::string& job_id) { dirty_.insert(job_id); }

void DecisionEngine::CommitLocked(PlanResult result, absl::Time now, PlanStats& stats) {
  // The jobs changed since the sync are in dirty_ again. A deregistered
  // one gets no recommendation back; one registered again is planned anew
  // by the next plan; one with a new spec or applied state keeps this
  // recommendation unless its spec now rules it out (its own plan is due).
  if (!dirty_.empty()) {
    std::erase_if(result.recs, [&](const Recommendation& rec) {
      if (!dirty_.contains(rec.job_id)) return false;
      auto live = jobs_.find(rec.job_id);
      if (live == jobs_.end()) return true;
      const auto slot = plan_slots_.find(rec.job_id);
      if (slot == plan_slots_.end() || slot->second.entry.registration != live->second.registration)
        return true;
      const JobSpec& spec = live->second.spec;
      return rec.replicas > spec.max_replicas ||
             (rec.replicas != 0 && rec.replicas < spec.min_replicas);
    });
  }
  if (options_.state != nullptr) {
    // Generations go to the state store before anyone can see them, so a
    // restart never hands out a generation again for another target.
    const std::vector<size_t> changed = board_.AssignGenerations(result.recs);
    if (!changed.empty()) {
      std::vector<Recommendation> kept;
      kept.reserve(changed.size());
      for (size_t i : changed) kept.push_back(result.recs[i]);
      if (absl::Status recorded = options_.state->PutRecommendations(kept); !recorded.ok()) {
        spdlog::error("plan not published: its {} new generations could not be recorded: {}",
                      kept.size(), recorded.ToString());
        // The write may have landed all the same (a timeout, or some of
        // its transactions): those generations are spent.
        board_.ReserveGenerations(kept);
        stats.published = false;
        return;
      }
    }
  }
  last_plan_utility_ = result.utility;
  last_plan_upper_bound_ = result.upper_bound;
  last_plan_gap_ = result.gap;
  last_plan_exact_ = result.exact;
  board_.Stage(std::move(result.recs), &stats.changes_by_action);
  planned_at_ = now;
  ++plans_run_;
}

std::shared_ptr<const DecisionEngine::PlanInput> DecisionEngine::PlanInputOf(
    PlanSlot& slot, bool refitted, bool capacity_known, absl::Time now, PlannerJob& job_out,
    std::shared_ptr<const PlanInput>& source) const {
  JobEntry& entry = slot.entry;
  if (const std::shared_ptr<const PlanInput>& cached = slot.plan_input;
      cached != nullptr && cached->version == entry.version && cached->fitted == slot.fitted &&
      cached->capacity_known == capacity_known) {
    if (source != cached) {
      job_out = cached->job;
      source = cached;
    }
    return cached;
  }
  auto input = std::make_shared<PlanInput>();
  input->version = entry.version;
  input->fitted = slot.fitted;
  input->capacity_known = capacity_known;
  const JobSpec& spec = entry.spec;
  const Fitted& fit = *input->fitted;
  const Policy* policy =
      FindPolicy(spec.policy.empty() ? options_.default_policy : spec.policy);  // validated
  input->policy = policy->name();
  input->planned_by_cluster = input->policy == kPlannerPolicy;
  const PolicyOptions policy_options = ResolvePolicyOptions(options_.policy, spec.parameters);
  input->cooldown = policy_options.cooldown;
  PolicyInput policy_input;
  policy_input.spec = &spec;
  policy_input.status = &entry.status;
  policy_input.model = &fit.model;
  policy_input.observed = fit.observations;
  policy_input.memory = &entry.memory;
  policy_input.last_change_at = entry.last_change_at;
  policy_input.now = now;
  policy_input.options = policy_options;
  policy_input.capacity_known = capacity_known;
  input->wish = policy->Decide(policy_input);
  entry.memory = input->wish.memory;

  PlannerJob& job = input->job;
  job.job_id = spec.job_id;
  job.min_replicas = spec.min_replicas;
  job.max_replicas = std::clamp(input->wish.replicas, spec.min_replicas, spec.max_replicas);
  job.gpus_per_replica = spec.gpus_per_replica;
  job.priority = spec.priority;
  job.preemptible = spec.preemptible;
  const bool running = IsRunning(entry.status);
  job.current_replicas = RunningReplicas(entry.status);
  job.suspended = entry.status.suspended;
  job.restart_cost_seconds = spec.restart_cost_seconds;
  job.started_at = running ? entry.started_at : entry.status.registered_at;
  // What the jct objective ranks jobs by: remaining work when the job
  // declared its size, else the service it has had; both in samples, which
  // the planner turns into seconds with the fitted rate at min_replicas. A
  // job without a fitted curve has no rate to do that with: it counts as
  // having had no service (least attained service puts new jobs first).
  if (!fit.model.empty()) {
    const uint64_t processed = fit.samples_processed;
    job.samples_per_second_at_min = fit.SamplesPerSecond(job.min_replicas);
    job.attained_samples = static_cast<double>(processed);
    if (spec.total_samples.has_value()) {
      job.remaining_samples = static_cast<double>(
          *spec.total_samples > processed ? *spec.total_samples - processed : 0);
    }
  }
  // A planner job with neither data nor prior: the default prior's curve
  // (relative; the objective uses only ratios T(n)/T(min)), so the planner
  // sizes its start by the median scaling of the measured models.
  std::optional<ThroughputModel> default_prior;
  if (input->planned_by_cluster && fit.model.empty()) {
    ModelOptions shape = options_.model;
    shape.gpus_per_replica = std::max<uint32_t>(spec.gpus_per_replica, 1);
    default_prior = ThroughputModel::FromShares(kDefaultPriorShares, shape);
  }
  job.throughput.reserve(job.max_replicas - job.min_replicas + 1);
  for (uint32_t n = job.min_replicas; n <= job.max_replicas; ++n) {
    // Planner jobs: predicted samples/s. Others: any rising curve, so the
    // planner grows them toward their wish when GPUs allow.
    double predicted = 0;
    if (input->planned_by_cluster) {
      predicted = default_prior ? default_prior->SamplesPerSecond(n) : fit.SamplesPerSecond(n);
    }
    job.throughput.push_back(predicted > 0 ? predicted : double(n));
  }
  // Only a planner job's input outlives this plan: the other policies read
  // the clock (windows, cooldowns), so theirs is made afresh each time.
  if (input->planned_by_cluster && !refitted) {
    job_out = input->job;
    slot.plan_input = source = input;
  } else {
    job_out = std::move(input->job);
    slot.plan_input = source = nullptr;
  }
  return input;
}

DecisionEngine::PlanResult DecisionEngine::ComputePlan(SlotMap& slots,
                                                       std::optional<uint32_t> capacity_gpus,
                                                       absl::Time now) {
  PlanResult result;

  // Each job's policy states what it wants; the cluster planner then fits
  // every job into the GPUs at once. A `planner` job offers the planner its
  // whole explorable range with its predicted curve, so the planner chooses
  // its size; any other policy's wish is a ceiling the planner fills in
  // priority order (a rising curve up to the wish) and may only cut for
  // capacity.
  struct Prepared {
    const JobSpec* spec = nullptr;
    std::shared_ptr<const PlanInput> input;
  };
  std::vector<Prepared> prepared;
  std::vector<PlannerJob>& planner_jobs = planner_jobs_;
  planner_jobs.resize(slots.size());
  planner_job_sources_.resize(slots.size());
  prepared.reserve(slots.size());
  size_t index = 0;
  for (auto& [id, slot] : slots) {
    const JobEntry& entry = slot.entry;
    Prepared p;
    p.spec = &entry.spec;
    bool refitted = false;
    FitInto(slot, now, refitted);
    PlannerJob& job = planner_jobs[index];
    p.input = PlanInputOf(slot, refitted, capacity_gpus.has_value(), now, job,
                          planner_job_sources_[index]);
    ++index;
    const PlanInput& input = *p.input;
    // What moves with time alone.
    const bool running = IsRunning(entry.status);
    absl::Duration cooldown = input.cooldown;
    if (input.planned_by_cluster) {
      // The per-job policies steady themselves (restart cost, HPA windows);
      // a planner job is steadied here: the more it changed lately, the
      // longer it stays put (BackedOffCooldown).
      int recent_changes = 0;
      for (const auto& event : entry.memory.scale_events)
        recent_changes += now - event.first < kCooldownMemory * cooldown;
      cooldown = BackedOffCooldown(cooldown, recent_changes);
    }
    job.in_cooldown = running && entry.last_change_at != absl::InfinitePast() &&
                      now - entry.last_change_at < cooldown;
    job.waiting_seconds = 0;
    if (!running) {
      const absl::Time waiting_since = std::max(entry.status.registered_at, entry.stopped_at);
      job.waiting_seconds = std::max(0.0, absl::ToDoubleSeconds(now - waiting_since));
    }
    prepared.push_back(std::move(p));
  }

  ClusterPlannerOptions planner_options = options_.planner;
  planner_options.horizon_seconds = absl::ToDoubleSeconds(options_.policy.horizon);
  std::optional<uint64_t> capacity;
  if (capacity_gpus) capacity = *capacity_gpus;
  // Slots bind only with a known total (SetCapacity sets both).
  const std::span<const ReplicaSlots> node_slots =
      capacity ? std::span<const ReplicaSlots>(plan_capacity_slots_)
               : std::span<const ReplicaSlots>();
  ClusterPlan plan = PlanCluster(planner_jobs, capacity, planner_options, node_slots);
  result.utility = plan.utility;
  result.upper_bound = plan.upper_bound;
  result.gap = plan.gap;
  result.exact = plan.exact;
  if (plan.gap > 0.01) {
    spdlog::warn("plan of {} jobs has an optimality gap of {:.2f}% (utility {:.4f}, bound {:.4f})",
                 planner_jobs.size(), plan.gap * 100, plan.utility, plan.upper_bound);
  } else {
    spdlog::debug("planned {} jobs: {} GPUs allocated, utility {:.4f}, bound {:.4f}, gap {:.3f}%{}",
                  planner_jobs.size(), plan.allocated_gpus, plan.utility, plan.upper_bound,
                  plan.gap * 100, plan.exact ? " (exact)" : "");
  }

  std::vector<Recommendation> recs;
  recs.reserve(prepared.size());
  size_t i = 0;
  for (const auto& [id, slot] : slots) {
    const JobEntry& entry = slot.entry;
    const Prepared& p = prepared[i];
    PlannedJob& planned = plan.jobs[i];  // its reason is moved out
    ++i;
    Recommendation rec;
    rec.job_id = id;
    rec.replicas = planned.replicas;
    rec.suspend = planned.replicas == 0;
    rec.action = ActionFor(entry.status, planned.replicas);
    // The policy's own explanation stands when the planner gave it what it
    // asked for; otherwise the planner's (capacity, priority, cooldown...).
    const bool got_wish =
        planned.replicas != 0 && planned.replicas == planner_jobs[i - 1].max_replicas;
    const bool policy_explains =
        got_wish && (!p.input->planned_by_cluster ||
                     p.input->wish.binding == BindingConstraint::kInsufficientData ||
                     p.input->wish.binding == BindingConstraint::kMinReplicas);
    rec.reason = policy_explains ? p.input->wish.reason : std::move(planned.reason);
    // The planner sized a job without data or prior by the default prior's
    // curve; say so, since nothing of the job's own went into it.
    const Fitted& fitted = *p.input->fitted;
    if (!policy_explains && p.input->planned_by_cluster && fitted.model.empty() &&
        planned.replicas > 0) {
      rec.reason +=
          "; no measurements or prior yet: sized by the default prior (the median "
          "scaling of six measured models)";
    }
    rec.binding_constraint = policy_explains ? p.input->wish.binding : planned.binding;
    rec.current_samples_per_second = fitted.SamplesPerSecond(RunningReplicas(entry.status));
    rec.predicted_samples_per_second = fitted.SamplesPerSecond(planned.replicas);
    rec.queue_position = planned.queue_position;
    rec.decided_at = now;
    rec.policy = std::string(p.input->policy);
    rec.gpus = planned.replicas * p.spec->gpus_per_replica;
    if (p.input->planned_by_cluster && planned.replicas > 0) {
      if (planned.replicas < planner_jobs[i - 1].max_replicas)
        rec.value_one_more = planned.value_one_more;
      if (planned.replicas > p.spec->min_replicas) rec.value_one_fewer = planned.value_one_fewer;
    }
    recs.push_back(std::move(rec));
  }
  result.recs = std::move(recs);
  return result;
}

bool DecisionEngine::RequestReplanLocked(absl::Duration window) {
  if (!timer_running_ || window <= absl::ZeroDuration()) return false;
  {
    std::lock_guard<std::mutex> lock(timer_mu_);
    // One replan covers the whole burst, due when the earliest window ends,
    // and no sooner after the last plan than kPlanPacing times what that
    // plan took: a steady stream of changes (an adapter registering 10,000
    // jobs) then gets a plan every few hundred ms at most, with at most a
    // quarter of the time spent planning, leaving the rest of the machine
    // to the calls themselves.
    const absl::Time due =
        std::max(clock_->Now() + window, last_plan_end_ + kPlanPacing * last_plan_took_);
    if (replan_requested_ && replan_due_ <= due) return true;
    replan_requested_ = true;
    replan_due_ = due;
  }
  timer_cv_.notify_all();
  return true;
}

absl::StatusOr<std::shared_ptr<Subscription>> DecisionEngine::Watch(std::string namespace_filter) {
  return board_.Subscribe(std::move(namespace_filter));
}

void DecisionEngine::Unwatch(const std::shared_ptr<Subscription>& subscription) {
  board_.Unsubscribe(subscription);
}

void DecisionEngine::CloseWatches() { board_.CloseAll(); }

void DecisionEngine::StartTimer() {
  StopTimer();
  {
    std::lock_guard<std::mutex> lock(timer_mu_);
    timer_stop_ = false;
    replan_requested_ = false;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    timer_running_ = true;
  }
  // Registered without timer_mu_ held: the listener takes timer_mu_ under
  // the clock's own lock, so that is the only order the two are taken in.
  clock_listener_ = clock_->OnTimeChange([this] {
    // Taking the lock orders the notify after the timer thread's check of
    // the clock, so a jump between that check and its wait is not lost.
    std::lock_guard<std::mutex> lock(timer_mu_);
    timer_cv_.notify_all();
  });
  // The first tick counts from now, not from when the thread gets to run.
  const absl::Time first_tick = clock_->Now() + options_.plan_interval;
  timer_thread_ = std::thread([this, first_tick] { RunTimer(first_tick); });
}

void DecisionEngine::RunTimer(absl::Time next_tick) {
#ifdef __linux__
  // Plans are background work; the calls are what users wait for. On a
  // busy machine the scheduler gives this thread a small share beside the
  // RPC threads (nice is per thread on Linux), so a plan of 10,000 jobs
  // does not stretch GetJob or RegisterJob latency; on an idle one it runs
  // at full speed.
  if (options_.plan_thread_nice != 0 &&
      setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), options_.plan_thread_nice) != 0) {
    spdlog::warn("could not lower the plan thread's priority (nice {}): {}",
                 options_.plan_thread_nice, std::strerror(errno));
  }
#endif
  const absl::Duration interval = options_.plan_interval;
  std::unique_lock<std::mutex> lock(timer_mu_);
  while (!timer_stop_) {
    const absl::Time now = clock_->Now();
    // The rest of a burst arrives during the first request's window and is
    // planned with it.
    const absl::Time requested_due = replan_requested_ ? replan_due_ : absl::InfiniteFuture();
    const absl::Time deadline = std::min(next_tick, requested_due);
    if (now < deadline) {
      // Wakes for StopTimer, a request, a jump of a ManualClock, or real
      // time reaching the deadline (the real clock).
      const absl::Duration wait = clock_->RealTimeUntil(deadline);
      if (wait == absl::InfiniteDuration()) {
        timer_cv_.wait(lock);
      } else {
        timer_cv_.wait_for(lock, absl::ToChronoNanoseconds(wait));
      }
      continue;
    }
    if (now >= next_tick) next_tick = now + interval;
    // This replan covers any request made so far; later ones start anew.
    replan_requested_ = false;
    lock.unlock();
    const absl::Time started = clock_->Now();
    Replan();
    const absl::Time ended = clock_->Now();
    lock.lock();
    last_plan_end_ = ended;
    last_plan_took_ = ended - started;
  }
}

void DecisionEngine::StopTimer() {
  {
    std::lock_guard<std::mutex> lock(timer_mu_);
    timer_stop_ = true;
  }
  timer_cv_.notify_all();
  if (timer_thread_.joinable()) timer_thread_.join();
  clock_listener_.reset();
  // Without the thread nothing would run a deferred replan: changes plan
  // inline from now on, and those still waiting for their window are
  // planned here. mu_ before timer_mu_, as in RequestReplanLocked, so no
  // change can slip a request in between.
  bool pending;
  {
    std::lock_guard<std::mutex> lock(mu_);
    timer_running_ = false;
    std::lock_guard<std::mutex> timer_lock(timer_mu_);
    pending = replan_requested_;
    replan_requested_ = false;
  }
  if (pending) Replan();
}

}  // namespace rescale
