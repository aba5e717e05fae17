// DecisionEngine (see rescale/decision_engine.h).
#include "rescale/decision_engine.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "rescale/status_macros.h"

namespace rescale {
namespace {

bool InNamespace(const std::string& job_id, const std::string& filter) {
  return filter.empty() || JobNamespace(job_id) == filter;
}

// What the cluster must do to go from `status` to `replicas`.
Action ActionFor(const JobStatus& status, uint32_t replicas) {
  const bool running = status.current_replicas > 0 && !status.suspended;
  if (replicas == 0) return running ? Action::kSuspend : Action::kHold;
  if (!running) return status.suspended ? Action::kResume : Action::kScaleUp;
  if (replicas > status.current_replicas) return Action::kScaleUp;
  if (replicas < status.current_replicas) return Action::kScaleDown;
  return Action::kHold;
}

}  // namespace

DecisionEngine::DecisionEngine(EngineOptions options, Clock* clock)
    : options_(std::move(options)),
      clock_(clock != nullptr ? clock : Clock::Real()),
      store_(options_.store),
      board_(options_.max_watchers),
      capacity_gpus_(options_.capacity_gpus) {}

DecisionEngine::~DecisionEngine() { StopTimer(); }

std::vector<std::string> DecisionEngine::KnownPolicies() {
  return {std::string(StaticPlanner::kMinPolicy), std::string(StaticPlanner::kMaxPolicy)};
}

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
  std::sort(spec.prior.begin(), spec.prior.end(),
            [](const CurvePoint& a, const CurvePoint& b) { return a.replicas < b.replicas; });
  return spec;
}

JobView DecisionEngine::ViewLocked(const JobEntry& entry) const {
  JobView view;
  view.spec = entry.spec;
  view.status = entry.status;
  view.status.samples_accepted = store_.SamplesAccepted(entry.spec.job_id);
  for (const SizeStats& s : store_.Stats(entry.spec.job_id)) {
    view.curve.push_back({s.world_size, s.samples_per_second, 0, true, s.sample_count});
  }
  view.recommendation = board_.Get(entry.spec.job_id);
  return view;
}

absl::StatusOr<JobView> DecisionEngine::RegisterJob(JobSpec spec) {
  ASSIGN_OR_RETURN(spec, Normalize(std::move(spec)));
  absl::MutexLock lock(&mu_);
  if (jobs_.contains(spec.job_id)) {
    return absl::AlreadyExistsError(absl::StrFormat(
        "job \"%s\" is already registered; use UpdateJob to change its spec", spec.job_id));
  }
  if (static_cast<int>(jobs_.size()) >= options_.max_jobs) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "cannot register \"%s\": %d jobs are registered, the limit (--max_jobs)", spec.job_id,
        options_.max_jobs));
  }
  JobEntry entry;
  entry.spec = spec;
  entry.status.registered_at = clock_->Now();
  store_.AddJob(spec.job_id, spec.max_replicas, spec.local_batch_size);
  auto it = jobs_.emplace(spec.job_id, std::move(entry)).first;
  ReplanLocked();
  return ViewLocked(it->second);
}

absl::StatusOr<JobView> DecisionEngine::UpdateJob(JobSpec spec) {
  ASSIGN_OR_RETURN(spec, Normalize(std::move(spec)));
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(spec.job_id);
  if (it == jobs_.end()) {
    return absl::NotFoundError(absl::StrFormat(
        "job \"%s\" is not registered; use RegisterJob to add it", spec.job_id));
  }
  it->second.spec = spec;
  store_.AddJob(spec.job_id, spec.max_replicas, spec.local_batch_size);
  ReplanLocked();
  return ViewLocked(it->second);
}

absl::StatusOr<JobView> DecisionEngine::GetJob(const std::string& job_id) const {
  RETURN_IF_ERROR(ValidateJobId(job_id));
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) {
    return absl::NotFoundError(absl::StrFormat("job \"%s\" is not registered", job_id));
  }
  return ViewLocked(it->second);
}

std::vector<JobView> DecisionEngine::ListJobs(const std::string& namespace_filter) const {
  std::vector<JobView> out;
  absl::MutexLock lock(&mu_);
  for (const auto& [id, entry] : jobs_) {
    if (InNamespace(id, namespace_filter)) out.push_back(ViewLocked(entry));
  }
  return out;
}

absl::Status DecisionEngine::DeregisterJob(const std::string& job_id) {
  RETURN_IF_ERROR(ValidateJobId(job_id));
  absl::MutexLock lock(&mu_);
  if (jobs_.erase(job_id) == 0) {
    return absl::NotFoundError(absl::StrFormat("job \"%s\" is not registered", job_id));
  }
  store_.RemoveJob(job_id);
  board_.Remove(job_id);
  ReplanLocked();
  return absl::OkStatus();
}

IngestResult DecisionEngine::Ingest(std::span<const StepSample> samples) {
  return store_.Ingest(samples, clock_->Now());
}

absl::StatusOr<JobStatus> DecisionEngine::ReportApplied(const std::string& job_id,
                                                        uint32_t replicas, bool suspended,
                                                        uint64_t generation) {
  RETURN_IF_ERROR(ValidateJobId(job_id));
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) {
    return absl::NotFoundError(absl::StrFormat("job \"%s\" is not registered", job_id));
  }
  JobEntry& entry = it->second;
  if (replicas > entry.spec.max_replicas) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "replicas %d exceeds the job's max_replicas %d", replicas, entry.spec.max_replicas));
  }
  std::optional<Recommendation> latest = board_.Get(job_id);
  const uint64_t latest_generation = latest ? latest->generation : 0;
  if (generation > latest_generation) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "generation %d is newer than the job's latest recommendation (generation %d)",
        generation, latest_generation));
  }
  entry.status.current_replicas = replicas;
  entry.status.suspended = suspended;
  if (generation != 0) {
    entry.status.last_applied_generation =
        std::max(entry.status.last_applied_generation, generation);
  }
  entry.status.last_applied_at = clock_->Now();
  ReplanLocked();
  JobStatus status = entry.status;
  status.samples_accepted = store_.SamplesAccepted(job_id);
  return status;
}

absl::StatusOr<Recommendation> DecisionEngine::GetRecommendation(const std::string& job_id) const {
  RETURN_IF_ERROR(ValidateJobId(job_id));
  std::optional<Recommendation> rec = board_.Get(job_id);
  if (!rec) {
    return absl::NotFoundError(absl::StrFormat("job \"%s\" is not registered", job_id));
  }
  return *rec;
}

std::vector<Recommendation> DecisionEngine::ListRecommendations(
    const std::string& namespace_filter) const {
  return board_.List(namespace_filter);
}

ClusterView DecisionEngine::SetCapacity(uint32_t total_gpus) {
  absl::MutexLock lock(&mu_);
  capacity_gpus_ = total_gpus;
  ReplanLocked();
  return ClusterLocked();
}

ClusterView DecisionEngine::GetCluster() const {
  absl::MutexLock lock(&mu_);
  return ClusterLocked();
}

ClusterView DecisionEngine::ClusterLocked() const {
  ClusterView view;
  view.total_gpus = capacity_gpus_;
  view.planned_at = planned_at_;
  for (const Recommendation& rec : board_.List()) {
    auto it = jobs_.find(rec.job_id);
    if (it == jobs_.end()) continue;
    if (rec.replicas == 0) {
      ++view.waiting_jobs;
      continue;
    }
    view.allocated_gpus += rec.gpus;
    view.allocations.push_back({rec.job_id, rec.replicas, rec.gpus, it->second.spec.priority});
  }
  return view;
}

void DecisionEngine::Replan() {
  absl::MutexLock lock(&mu_);
  ReplanLocked();
}

void DecisionEngine::ReplanLocked() {
  const absl::Time now = clock_->Now();
  PlanInput input;
  input.capacity_gpus = capacity_gpus_;
  input.now = now;
  input.jobs.reserve(jobs_.size());
  for (const auto& [id, entry] : jobs_) {
    PlanJob job;
    job.spec = entry.spec;
    if (job.spec.policy.empty()) job.spec.policy = options_.default_policy;
    job.status = entry.status;
    for (const SizeStats& s : store_.Stats(id)) {
      job.curve.push_back({s.world_size, s.samples_per_second, 0, true, s.sample_count});
    }
    job.previous = board_.Get(id);
    input.jobs.push_back(std::move(job));
  }
  std::vector<PlanDecision> decisions = static_planner_.Plan(input);

  std::vector<Recommendation> recs;
  recs.reserve(decisions.size());
  for (size_t i = 0; i < decisions.size(); ++i) {
    const PlanJob& job = input.jobs[i];
    const PlanDecision& d = decisions[i];
    Recommendation rec;
    rec.job_id = d.job_id;
    rec.replicas = d.replicas;
    rec.suspend = d.replicas == 0;
    rec.action = ActionFor(job.status, d.replicas);
    rec.reason = d.reason;
    rec.binding_constraint = d.binding;
    rec.current_samples_per_second =
        job.status.suspended ? 0 : InterpolateThroughput(job.curve, job.status.current_replicas);
    rec.predicted_samples_per_second = d.predicted_samples_per_second;
    rec.queue_position = d.queue_position;
    rec.decided_at = now;
    rec.policy = job.spec.policy;
    rec.gpus = d.replicas * job.spec.gpus_per_replica;
    recs.push_back(std::move(rec));
  }
  board_.Publish(std::move(recs));
  planned_at_ = now;
}

void DecisionEngine::StartTimer(absl::Duration interval) {
  StopTimer();
  {
    absl::MutexLock lock(&timer_mu_);
    timer_stop_ = false;
  }
  timer_thread_ = std::thread([this, interval] {
    absl::MutexLock lock(&timer_mu_);
    while (true) {
      // Wakes early only when StopTimer sets timer_stop_.
      timer_mu_.AwaitWithTimeout(absl::Condition(&timer_stop_), interval);
      if (timer_stop_) return;
      timer_mu_.Unlock();
      Replan();
      timer_mu_.Lock();
    }
  });
}

void DecisionEngine::StopTimer() {
  {
    absl::MutexLock lock(&timer_mu_);
    timer_stop_ = true;
  }
  if (timer_thread_.joinable()) timer_thread_.join();
}

}  // namespace rescale
