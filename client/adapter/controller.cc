// rescale-adapter's controller (see client/adapter/adapter.h): its threads
// (jobs and nodes through ListWatch, the recommendation stream, the
// applier), registration with rescaled, and the applying of recommendations
// in the safe order. Writing one recommendation to its job (patches,
// annotations, the Event) lives in client/adapter/apply_job.cc.
#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/adapter/adapter.h"
#include "rescale/apply_order.h"
#include "spdlog/spdlog.h"

namespace rescale::adapter {
namespace {

using json = nlohmann::json;

// How long a backoff may last at most, to keep a stopping adapter prompt.
constexpr absl::Duration kMaxSleep = absl::Minutes(5);

}  // namespace

// ---------------------------------------------------------------- Adapter --

Adapter::Adapter(AdapterOptions options, KubeClient* kube, std::shared_ptr<grpc::Channel> channel)
    : Adapter(std::move(options), kube, client::ServerList::Of(std::move(channel))) {}

Adapter::Adapter(AdapterOptions options, KubeClient* kube,
                 std::shared_ptr<client::ServerList> servers)
    : options_(std::move(options)),
      kube_(kube),
      servers_(std::move(servers)),
      random_(options_.random),
      generator_(std::random_device{}()),
      events_(options_.events, kube_,
              [this](JobEventRecorder::Outcome outcome, const std::string& job_id,
                     const std::string& detail) { OnEventOutcome(outcome, job_id, detail); }) {}

void Adapter::OnEventOutcome(JobEventRecorder::Outcome outcome, const std::string& job_id,
                             const std::string& detail) {
  AdapterEvent::Kind kind = AdapterEvent::Kind::kEventRecorded;
  const char* metric = "recorded";
  switch (outcome) {
    case JobEventRecorder::Outcome::kRecorded:
      break;
    case JobEventRecorder::Outcome::kFailed:
      kind = AdapterEvent::Kind::kEventFailed;
      metric = "failed";
      break;
    case JobEventRecorder::Outcome::kRateLimited:
      kind = AdapterEvent::Kind::kEventRateLimited;
      metric = "rate_limited";
      break;
    case JobEventRecorder::Outcome::kDropped:
      kind = AdapterEvent::Kind::kEventRateLimited;
      metric = "dropped";
      break;
  }
  if (options_.metrics != nullptr) options_.metrics->RecordEvent(metric);
  Emit({kind, job_id, 0, detail});
}

void Adapter::AfterRescaledCall(const std::shared_ptr<grpc::Channel>& channel,
                                const grpc::Status& status, const grpc::ClientContext& context) {
  if (status.ok() || !servers_->AfterFailure(channel, status, context)) return;
  spdlog::info(
      "rescaled at {} is the one to call now (the leader, or the next replica); "
      "reconnecting the recommendation stream there",
      servers_->CurrentAddress());
  // The stream reconnects to it and registers every job there again.
  absl::MutexLock lock(&stream_mu_);
  if (stream_context_ != nullptr) stream_context_->TryCancel();
}

Adapter::~Adapter() { Stop(); }

void Adapter::Start() {
  for (const ApiVersion& api : options_.job_apis) {
    threads_.emplace_back([this, api] { RunJobs(api); });
  }
  if (options_.capacity_gpus < 0) {
    threads_.emplace_back([this] { RunNodes(); });
    threads_.emplace_back([this] { RunPods(); });
  }
  if (!options_.queues.has_value() && options_.kueue) {
    threads_.emplace_back([this] { RunKueue("clusterqueues"); });
    threads_.emplace_back([this] { RunKueue("localqueues"); });
  }
  threads_.emplace_back([this] { RunRecommendations(); });
  threads_.emplace_back([this] { RunApplier(); });
  events_.Start();
}

void Adapter::Stop() {
  stop_.store(true, std::memory_order_release);
  {
    absl::MutexLock lock(&stop_mu_);
    stopping_flag_ = true;
  }
  {
    absl::MutexLock lock(&mu_);
    applier_stopping_ = true;
  }
  kube_->Cancel();
  {
    absl::MutexLock lock(&stream_mu_);
    if (stream_context_ != nullptr) stream_context_->TryCancel();
  }
  for (std::thread& thread : threads_) {
    if (thread.joinable()) thread.join();
  }
  threads_.clear();
  // After the applier: nothing records Events any more.
  events_.Stop();
}

double Adapter::NextRandom() {
  absl::MutexLock lock(&random_mu_);
  if (random_) return random_();
  return std::uniform_real_distribution<double>(0.0, 1.0)(generator_);
}

bool Adapter::SleepFor(absl::Duration d) {
  absl::MutexLock lock(&stop_mu_);
  stop_mu_.AwaitWithTimeout(absl::Condition(&stopping_flag_), std::min(d, kMaxSleep));
  return !stopping_flag_;
}

void Adapter::Emit(AdapterEvent event) {
  if (options_.observer) options_.observer(event);
}

std::unique_ptr<grpc::ClientContext> Adapter::NewContext() const {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(absl::ToChronoTime(absl::Now() + options_.rpc_timeout));
  return context;
}

void Adapter::RunJobs(const ApiVersion& api) {
  const std::string path = ResourcePath(api, JobResource(api), options_.ns);
  auto on_list = [this, api](const std::vector<json>& items) {
    std::set<std::string> seen;
    for (const json& item : items) {
      const json& name = FieldAt(item, {"metadata", "name"});
      const json& ns = FieldAt(item, {"metadata", "namespace"});
      if (name.is_string() && ns.is_string()) {
        seen.insert(ns.get<std::string>() + "/" + name.get<std::string>());
      }
      OnJobObject(api, item);
    }
    // Jobs deleted while we were not watching.
    std::vector<std::string> gone;
    {
      absl::MutexLock lock(&mu_);
      for (const auto& [id, entry] : jobs_) {
        if (entry.info.api == api && !seen.count(id)) gone.push_back(id);
      }
    }
    for (const std::string& id : gone) OnJobGone(id, "no longer listed");
    // The jobs' size classes and tolerations shape the capacity, and their
    // pods stop counting as foreign.
    SendCapacity();
    // Applying waits for the first list of every job API (see
    // ApplyGateOpenLocked); from then on, a (re)list is one batch.
    absl::MutexLock lock(&mu_);
    job_apis_listed_.insert(api.group);
    apply_wanted_ = true;
  };
  auto on_list_error = [this, api] {
    // A CRD that is not installed must not hold back the other flavours'
    // jobs: its first attempt counts as its list. Only the first wakes the
    // applier; the retries (every backoff, for as long as the CRD is
    // missing) have nothing new for it.
    absl::MutexLock lock(&mu_);
    if (job_apis_listed_.insert(api.group).second) apply_wanted_ = true;
  };
  auto on_event = [this, api](const WatchEvent& event) {
    if (event.type == "DELETED") {
      const json& name = FieldAt(event.object, {"metadata", "name"});
      const json& ns = FieldAt(event.object, {"metadata", "namespace"});
      if (name.is_string() && ns.is_string()) {
        OnJobGone(ns.get<std::string>() + "/" + name.get<std::string>(), "deleted");
      }
    } else {
      OnJobObject(api, event.object);
    }
    SendCapacity();
    // A job discovered after its recommendation came, or one whose last
    // apply failed: the applier looks again.
    WakeApplier();
  };
  ListWatch(path, {.labels = options_.label_selector, .fields = {}}, on_list, on_event,
            on_list_error, AdapterEvent::Kind::kJobsListed, JobResource(api) + "." + api.group);
}

void Adapter::OnJobObject(const ApiVersion& api, const json& object) {
  absl::StatusOr<JobInfo> parsed = ParseJob(api, object);
  if (!parsed.ok()) {
    const json& name = FieldAt(object, {"metadata", "name"});
    const json& ns = FieldAt(object, {"metadata", "namespace"});
    std::string id = name.is_string() && ns.is_string()
                         ? ns.get<std::string>() + "/" + name.get<std::string>()
                         : std::string();
    {
      absl::MutexLock lock(&mu_);
      if (skipped_[id] != std::string(parsed.status().message())) {
        skipped_[id] = std::string(parsed.status().message());
        spdlog::warn("skipping: {}", std::string(parsed.status().message()));
      }
    }
    Emit({AdapterEvent::Kind::kSkipped, id, 0, std::string(parsed.status().message())});
    if (!id.empty()) OnJobGone(id, "no longer valid");
    return;
  }
  JobInfo job = *std::move(parsed);
  if (job.api.group.empty()) job.api = api;
  if (job.finished) {
    OnJobGone(job.id, "finished");
    return;
  }
  if (job.operator_hpa) {
    std::string reason = absl::StrCat(
        DescribeJob(job.api, job.id),
        ": spec.elasticPolicy.metrics is set, so the operator scales it with its own HPA; "
        "rescale-adapter leaves it alone");
    bool first = false;
    {
      absl::MutexLock lock(&mu_);
      first = skipped_[job.id] != reason;
      skipped_[job.id] = reason;
    }
    if (first) spdlog::warn("skipping {}", reason);
    Emit({AdapterEvent::Kind::kSkipped, job.id, 0, reason});
    OnJobGone(job.id, "operator-managed HPA");
    return;
  }
  // Kueue admitted or evicted the job (the adapter never writes a Kueue
  // job's suspend): rescaled hears of it at once, out of band.
  bool kueue_moved = false;
  {
    absl::MutexLock lock(&mu_);
    skipped_.erase(job.id);
    auto [it, inserted] = jobs_.try_emplace(job.id);
    if (!inserted && !(it->second.info.api == job.api)) {
      spdlog::warn("{} exists in both {} and {}; managing only the first", job.id,
                   it->second.info.api.group, job.api.group);
      return;
    }
    kueue_moved = !inserted && it->second.registered && job.kueue_managed() &&
                  it->second.info.suspended != job.suspended;
    it->second.info = job;
  }
  SyncJob(job.id);
  if (kueue_moved) {
    absl::MutexLock no_apply(&apply_mu_);
    spdlog::info("{}: Kueue {} it", job.id, job.suspended ? "suspended" : "admitted");
    ReportObserved(job);
  }
  if (!job.resume_after_move.empty()) ResumeMovedJobs();
}

void Adapter::OnJobGone(const std::string& id, const std::string& why) {
  absl::MutexLock sync(&sync_mu_);
  bool registered = false;
  {
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return;
    registered = it->second.registered;
    jobs_.erase(it);
  }
  if (registered) {
    v1::DeregisterJobRequest request;
    request.set_job_id(id);
    v1::DeregisterJobResponse response;
    const std::shared_ptr<grpc::Channel> channel = servers_->Current();
    const std::unique_ptr<grpc::ClientContext> context = NewContext();
    grpc::Status status =
        v1::JobService::NewStub(channel)->DeregisterJob(context.get(), request, &response);
    AfterRescaledCall(channel, status, *context);
    if (!status.ok() && status.error_code() != grpc::StatusCode::NOT_FOUND) {
      // rescaled keeps it until it restarts; harmless, the adapter ignores
      // recommendations for jobs it does not manage.
      spdlog::warn("DeregisterJob {} ({}): {}", id, why, status.error_message());
    }
  }
  events_.Forget(id);
  spdlog::info("job {} {}: deregistered", id, why);
  Emit({AdapterEvent::Kind::kDeregistered, id, 0, why});
}

void Adapter::SyncJob(const std::string& id) {
  absl::MutexLock sync(&sync_mu_);
  // No apply may run between registering and reporting the initial state:
  // the report would overwrite what the apply reported.
  absl::MutexLock no_apply(&apply_mu_);
  JobInfo info;
  bool registered = false;
  std::optional<std::string> sent;
  {
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return;
    info = it->second.info;
    info.queue = QueueOfLocked(info);
    // A TrainJob the adapter cannot move: once its pods run on one type,
    // that is the only type it may use, so rescaled plans it where it is
    // (RunPods syncs it again when its pods are bound).
    if (UnpinnedTrainJob(info)) {
      std::string type = ReportedTypeLocked(info);
      const bool allowed =
          info.gpu_types.empty() ||
          std::find(info.gpu_types.begin(), info.gpu_types.end(), type) != info.gpu_types.end();
      if (!type.empty() && allowed) info.gpu_types = {std::move(type)};
    }
    registered = it->second.registered;
    sent = it->second.sent_spec;
  }
  v1::JobSpec spec = ToJobSpec(info);
  std::string serialized = spec.SerializeAsString();
  if (registered && sent == serialized) return;

  v1::Job job;
  grpc::Status status;
  bool created = false;
  const std::shared_ptr<grpc::Channel> channel = servers_->Current();
  const std::unique_ptr<v1::JobService::Stub> jobs = v1::JobService::NewStub(channel);
  std::unique_ptr<grpc::ClientContext> context = NewContext();
  if (!registered) {
    v1::RegisterJobRequest request;
    *request.mutable_spec() = spec;
    status = jobs->RegisterJob(context.get(), request, &job);
    created = status.ok();
  }
  if (registered || status.error_code() == grpc::StatusCode::ALREADY_EXISTS) {
    v1::UpdateJobRequest request;
    *request.mutable_spec() = spec;
    context = NewContext();
    status = jobs->UpdateJob(context.get(), request, &job);
  }
  AfterRescaledCall(channel, status, *context);
  if (!status.ok()) {
    // Retried on the next change of the job or when the recommendation
    // stream reconnects (ResyncAll).
    spdlog::warn("register {} with rescaled: {}", id, status.error_message());
    return;
  }
  {
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return;
    it->second.registered = true;
    it->second.managed = true;
    it->second.sent_spec = serialized;
    if (!created) {
      // rescaled kept the job (it keeps its state across restarts, or
      // another replica took over): it also kept the generation applied
      // last, so that generation is not applied again.
      it->second.applied_generation =
          std::max(it->second.applied_generation, job.status().last_applied_generation());
    }
  }
  spdlog::info("job {} {} (replicas {}..{}, {} GPU/replica, priority {})", id,
               registered ? "updated" : "registered", info.min_replicas, info.max_replicas,
               info.gpus_per_replica.value_or(1), info.priority);
  if (created) {
    // A job new to rescaled (first sight, or rescaled restarted): tell it
    // what runs now, generation 0 = applied out of band. Read the object
    // afresh: the watch cache may not have caught up with our own last
    // patch yet. When rescaled already had the job (ALREADY_EXISTS) it
    // also has what was applied, which a stale report would overwrite.
    absl::StatusOr<json> fresh =
        kube_->Get(ResourcePath(info.api, JobResource(info.api), info.ns, info.name));
    if (fresh.ok()) {
      absl::StatusOr<JobInfo> parsed = ParseJob(info.api, *fresh);
      if (parsed.ok()) info = *std::move(parsed);
    }
    ReportObserved(info);
  }
  Emit({AdapterEvent::Kind::kRegistered, id, 0, registered ? "updated" : "registered"});
}

void Adapter::ResyncAll() {
  std::vector<std::string> ids;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [id, entry] : jobs_) {
      // rescaled may have restarted and forgotten everything (--state
      // memory), and its generations restart with it: register again,
      // apply afresh. A rescaled that kept the job says which generation
      // was applied (SyncJob).
      entry.registered = false;
      entry.sent_spec.reset();
      entry.applied_generation = 0;
      ids.push_back(id);
    }
    sent_capacity_.reset();
    sent_queues_.reset();
  }
  // The queues first: a job registered before its queue exists would wait
  // (and a running one be suspended) for a plan.
  SendQueues();
  for (const std::string& id : ids) SyncJob(id);
  SendCapacity();
}

void Adapter::RunRecommendations() {
  client::Backoff backoff(options_.backoff, [this] { return NextRandom(); });
  while (!stopping()) {
    grpc::ClientContext context;
    {
      absl::MutexLock lock(&stream_mu_);
      if (stopping()) return;
      stream_context_ = &context;
    }
    v1::WatchRecommendationsRequest request;
    request.set_namespace_(options_.ns);
    // With several replicas, the stream goes to the leader: the
    // recommendations are the same on all, but the applied reports and
    // registrations that follow must reach the leader.
    servers_->FindLeader();
    const std::unique_ptr<v1::RecommendationService::Stub> recs =
        v1::RecommendationService::NewStub(servers_->Current());
    std::unique_ptr<grpc::ClientReader<v1::RecommendationEvent>> reader =
        recs->WatchRecommendations(&context, request);
    {
      absl::MutexLock lock(&mu_);
      latest_.clear();  // generations are per rescaled process
      stream_synced_ = false;
    }
    // The plan being received: its changes, newest per job, wait here for
    // its PLAN_END, so the applier never sees part of a plan.
    std::map<std::string, v1::RecommendationEvent> plan;
    bool synced = false;
    v1::RecommendationEvent event;
    while (reader->Read(&event)) {
      if (event.type() == v1::RecommendationEvent::SYNCED) {
        // A (re)connected stream: rescaled may be a new process. Register
        // everything first, then let the applier apply the whole initial
        // snapshot as one batch.
        backoff.Reset();
        ResyncAll();
        Emit({AdapterEvent::Kind::kRescaledSynced, "", 0, ""});
        synced = true;
        absl::MutexLock lock(&mu_);
        stream_synced_ = true;
        apply_wanted_ = true;
        continue;
      }
      if (event.type() == v1::RecommendationEvent::PLAN_END) {
        {
          absl::MutexLock lock(&mu_);
          for (const auto& [id, change] : plan) RecordLocked(change);
        }
        Emit({AdapterEvent::Kind::kPlanReceived, "", event.plan_id(),
              absl::StrCat(plan.size(), " changes")});
        plan.clear();
        continue;
      }
      const std::string& id = event.recommendation().job_id();
      const uint64_t generation = event.recommendation().generation();
      if (synced && event.plan_id() != 0) {
        plan[id] = event;
      } else {
        // The initial list (applied once SYNCED opens the gate), or a
        // rescaled that sends no plan boundaries (plan_id 0): recorded at
        // once, applied in batches of what has arrived, as before.
        absl::MutexLock lock(&mu_);
        RecordLocked(event);
      }
      Emit({AdapterEvent::Kind::kChangeReceived, id, generation, ""});
    }
    grpc::Status status = reader->Finish();
    {
      absl::MutexLock lock(&stream_mu_);
      stream_context_ = nullptr;
    }
    if (stopping()) return;
    spdlog::warn("recommendation stream from rescaled ended: {} {}; reconnecting",
                 static_cast<int>(status.error_code()), status.error_message());
    if (!SleepFor(backoff.Next())) return;
  }
}

void Adapter::RecordLocked(const v1::RecommendationEvent& event) {
  // Only recorded here; the applier thread applies. What arrives while it
  // is busy queues up in latest_ and is ordered as one batch.
  if (event.type() == v1::RecommendationEvent::DELETED) {
    latest_.erase(event.recommendation().job_id());
    return;
  }
  latest_[event.recommendation().job_id()] = event.recommendation();
  apply_wanted_ = true;
}

void Adapter::WakeApplier() {
  absl::MutexLock lock(&mu_);
  apply_wanted_ = true;
}

bool Adapter::ApplyGateOpenLocked() const {
  if (applier_stopping_) return true;
  return apply_wanted_ && stream_synced_ && job_apis_listed_.size() >= options_.job_apis.size();
}

std::vector<Adapter::PendingApply> Adapter::PendingBatchLocked() const {
  std::vector<PendingApply> batch;
  for (const auto& [id, recommendation] : latest_) {
    auto job = jobs_.find(id);
    if (job == jobs_.end() || !job->second.registered) continue;
    if (recommendation.generation() <= job->second.applied_generation) continue;
    const JobInfo& info = job->second.info;
    PendingApply pending;
    pending.recommendation = recommendation;
    // What the job runs as last observed: the watch shows our own patches.
    pending.running = info.suspended ? 0 : info.workers;
    pending.target =
        recommendation.suspend() ? 0 : ClampReplicas(info, recommendation.replicas(), nullptr);
    // A move to another type is a release: its first patch suspends the
    // job, freeing its GPUs on the type it leaves; the resume comes later,
    // once its pods are gone.
    if (pending.target > 0 && pending.running > 0 &&
        MovesType(RunningTypeLocked(info), GpuTypeToWrite(info, recommendation))) {
      pending.target = 0;
    }
    batch.push_back(std::move(pending));
  }
  // latest_ is keyed by job id, so within a phase the batch is in job-id
  // order, as the planner's plan is.
  OrderForApply(batch, [](const PendingApply& p) { return std::pair{p.running, p.target}; });
  return batch;
}

void Adapter::RunApplier() {
  for (;;) {
    std::vector<PendingApply> batch;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &Adapter::ApplyGateOpenLocked));
      if (applier_stopping_) return;
      apply_wanted_ = false;
      batch = PendingBatchLocked();
    }
    bool release_failed = false;
    for (const PendingApply& pending : batch) {
      if (stopping()) return;
      const bool release = PhaseOf(pending.running, pending.target) == ApplyPhase::kRelease;
      if (!release && release_failed) {
        // The GPUs an acquire counts on may still be held: leave the rest
        // of the batch pending until the next event (a job change, a new
        // recommendation) wakes the applier.
        spdlog::warn("{}: generation {} deferred: a release of the same plan failed",
                     pending.recommendation.job_id(), pending.recommendation.generation());
        continue;
      }
      if (!Apply(pending.recommendation) && release) release_failed = true;
    }
  }
}

void Adapter::ReportObserved(const JobInfo& job) {
  std::string type;
  {
    absl::MutexLock lock(&mu_);
    type = ReportedTypeLocked(job);
  }
  ReportApplied(job.id, job.suspended ? 0 : job.workers, job.suspended, 0, type);
}

void Adapter::ReportApplied(const std::string& id, uint32_t replicas, bool suspended,
                            uint64_t generation, const std::string& gpu_type) {
  v1::ReportAppliedRequest request;
  request.set_job_id(id);
  request.set_gpu_type(gpu_type);
  request.set_replicas(replicas);
  request.set_suspended(suspended);
  request.set_generation(generation);
  v1::ReportAppliedResponse response;
  const std::shared_ptr<grpc::Channel> channel = servers_->Current();
  const std::unique_ptr<grpc::ClientContext> context = NewContext();
  grpc::Status status =
      v1::RecommendationService::NewStub(channel)->ReportApplied(context.get(), request, &response);
  AfterRescaledCall(channel, status, *context);
  if (!status.ok()) {
    spdlog::warn("ReportApplied {} generation {}: {}", id, generation, status.error_message());
  }
}

}  // namespace rescale::adapter
