// Implementations of the rescale.v1 services (see server/services.h): the
// unary handlers, the StreamSamples read reactor, and WatchRecommendations
// on the shared subscription reactor (server/handler_support.h).
#include "server/services.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/convert.h"
#include "server/handler_support.h"

namespace rescale::server {
namespace {

// Method names, as the audit log and refusals name them.
constexpr absl::string_view kStreamSamples = "rescale.v1.MetricsService/StreamSamples";
constexpr absl::string_view kReportSamples = "rescale.v1.MetricsService/ReportSamples";
constexpr absl::string_view kRegisterJob = "rescale.v1.JobService/RegisterJob";
constexpr absl::string_view kUpdateJob = "rescale.v1.JobService/UpdateJob";
constexpr absl::string_view kGetJob = "rescale.v1.JobService/GetJob";
constexpr absl::string_view kListJobs = "rescale.v1.JobService/ListJobs";
constexpr absl::string_view kDeregisterJob = "rescale.v1.JobService/DeregisterJob";
constexpr absl::string_view kGetRecommendation =
    "rescale.v1.RecommendationService/GetRecommendation";
constexpr absl::string_view kListRecommendations =
    "rescale.v1.RecommendationService/ListRecommendations";
constexpr absl::string_view kWatchRecommendations =
    "rescale.v1.RecommendationService/WatchRecommendations";
constexpr absl::string_view kReportApplied = "rescale.v1.RecommendationService/ReportApplied";
constexpr absl::string_view kSetCapacity = "rescale.v1.ClusterService/SetCapacity";
constexpr absl::string_view kGetCluster = "rescale.v1.ClusterService/GetCluster";
constexpr absl::string_view kSetQueues = "rescale.v1.ClusterService/SetQueues";
constexpr absl::string_view kListQueues = "rescale.v1.ClusterService/ListQueues";

// Why this replica cannot take a change or samples (it does not lead), with
// the leader's address added to the trailing metadata; nullopt when it can.
std::optional<grpc::Status> RefuseUnlessLeader(const Leadership* leadership,
                                               grpc::CallbackServerContext* context) {
  if (leadership == nullptr || leadership->IsLeader()) return std::nullopt;
  const std::string leader = leadership->LeaderAddress();
  if (!leader.empty()) context->AddTrailingMetadata(kLeaderMetadataKey, leader);
  return grpc::Status(
      grpc::StatusCode::UNAVAILABLE,
      leader.empty()
          ? absl::StrFormat("this rescaled does not lead and no leader is known (%s); retry",
                            leadership->Describe())
          : absl::StrFormat("this rescaled is a follower; the leader is at %s (trailing metadata "
                            "%s): send changes and samples there",
                            leader, kLeaderMetadataKey));
}

grpc::ServerUnaryReactor* FinishRefused(grpc::CallbackServerContext* context,
                                        const grpc::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(status);
  return reactor;
}

// A change a follower refused, audited like any other outcome.
grpc::Status AuditedRefusal(const CallSecurity& security, const Identity& caller,
                            absl::string_view method, absl::string_view job,
                            const grpc::Status& refused) {
  if (security.audit != nullptr) {
    security.audit->Record(
        caller, method, job,
        absl::Status(static_cast<absl::StatusCode>(refused.error_code()), refused.error_message()));
  }
  return refused;
}

// Records a change's outcome in the audit log and passes it on.
absl::Status Audited(const CallSecurity& security, const Identity& caller, absl::string_view method,
                     absl::string_view job, const absl::Status& outcome) {
  if (security.audit != nullptr) security.audit->Record(caller, method, job, outcome);
  return outcome;
}

// Ingests the samples `caller` may report and refuses the others one by
// one, naming the user, the role, the method and the namespace, in the
// same summary as the store's own rejections. A caller with every
// namespace pays one branch.
IngestResult IngestPermitted(DecisionEngine& engine, const CallSecurity& security,
                             const Identity& caller, absl::string_view method,
                             std::vector<StepSample> samples, bool* stream_audited = nullptr) {
  if (caller.all_namespaces) return engine.Ingest(samples);
  // The usual batch is one pod's, of one job: decide once per run of equal
  // job ids (which FromProto points at the same bytes), and take the batch
  // as it is when every sample may go.
  std::string_view last_job;
  bool last_permitted = false;
  bool all_permitted = true;
  for (size_t i = 0; i < samples.size() && all_permitted; ++i) {
    const std::string_view job = samples[i].job_id;
    if (i == 0 || (job.data() != last_job.data() && job != last_job) ||
        job.size() != last_job.size()) {
      last_job = job;
      last_permitted =
          caller.MayAccessNamespace(NamespaceOfJobId(absl::string_view(job.data(), job.size())));
    }
    all_permitted = last_permitted;
  }
  if (all_permitted) return engine.Ingest(samples);
  std::vector<StepSample> permitted;
  std::vector<uint32_t> original_index;
  IngestResult refused;
  permitted.reserve(samples.size());
  original_index.reserve(samples.size());
  for (uint32_t i = 0; i < samples.size(); ++i) {
    const absl::string_view job(samples[i].job_id.data(), samples[i].job_id.size());
    absl::Status allowed = Authorize(caller, Access::kReportSamples, method, NamespaceOfJobId(job));
    if (allowed.ok()) {
      permitted.push_back(samples[i]);
      original_index.push_back(i);
    } else {
      refused.RejectForPermission(i, absl::StrCat("permission denied: ", allowed.message()));
    }
  }
  IngestResult result = engine.Ingest(permitted);
  if (refused.rejected == 0) return result;
  for (SampleRejection& rejection : result.rejections) {
    rejection.index = original_index[rejection.index];
  }
  // Both sides index the whole batch: the merge keeps its first rejections.
  result.Merge(refused, 0);
  // A stream is audited for its first such batch only: an agent sending
  // another namespace's job id in every batch must not flood the log.
  if (security.audit != nullptr && (stream_audited == nullptr || !*stream_audited)) {
    if (stream_audited != nullptr) *stream_audited = true;
    security.audit->Record(caller, method, "",
                           absl::PermissionDeniedError(refused.rejections.front().reason),
                           absl::StrFormat("%d of %d samples refused for their namespace",
                                           refused.rejected, samples.size()));
  }
  return result;
}

// A sample stream refused before its first read.
class RejectedSampleStreamReactor final : public grpc::ServerReadReactor<v1::SampleBatch> {
 public:
  explicit RejectedSampleStreamReactor(const grpc::Status& status) { Finish(status); }
  void OnDone() override { delete this; }
};

absl::Status BatchTooLarge(int size, int limit) {
  return absl::InvalidArgumentError(absl::StrFormat(
      "samples: the batch has %d samples; the limit is %d (--max_batch_samples); split it", size,
      limit));
}

// Reads SampleBatches until the client half-closes, ingesting each as it
// arrives so memory stays bounded by one batch, then answers one summary.
// An oversized batch is rejected sample by sample (the stream goes on): the
// samples accepted before it must not be lost to one bad batch.
class SampleStreamReactor final : public grpc::ServerReadReactor<v1::SampleBatch> {
 public:
  SampleStreamReactor(DecisionEngine& engine, ServiceLimits limits, CallSecurity security,
                      std::shared_ptr<const Identity> caller, v1::IngestSummary* summary,
                      ServerMetrics* observability)
      : engine_(engine),
        limits_(limits),
        security_(security),
        caller_(std::move(caller)),
        summary_(summary),
        observability_(observability),
        call_(observability) {
    ReactorHandedToGrpc(this);
    StartRead(&batch_);
  }

  void OnReadDone(bool ok) override {
    // Reads complete one at a time, each after the previous StartRead.
    ReactorCallbackFromGrpc(this);
    if (!ok) {  // half-close, or the client went away (then Finish is a no-op)
      ToProto(total_, summary_);
      call_.Finish(grpc::Status::OK);
      ReactorHandedToGrpc(this);
      Finish(grpc::Status::OK);
      return;
    }
    IngestResult result;
    if (batch_.samples_size() > limits_.max_batch_samples) {
      const std::string reason(
          BatchTooLarge(batch_.samples_size(), limits_.max_batch_samples).message());
      for (int i = 0; i < batch_.samples_size(); ++i) result.Reject(i, reason);
      if (observability_ != nullptr) observability_->RecordBatchTooLarge(batch_.samples_size());
    } else {
      result = IngestPermitted(engine_, security_, *caller_, kStreamSamples, FromProto(batch_),
                               &refusal_audited_);
      if (observability_ != nullptr) observability_->RecordIngest(result);
    }
    total_.Merge(result, static_cast<uint32_t>(samples_seen_));
    samples_seen_ += batch_.samples_size();
    ReactorHandedToGrpc(this);
    StartRead(&batch_);
  }

  void OnDone() override {
    ReactorCallbackFromGrpc(this);
    delete this;
  }

 private:
  DecisionEngine& engine_;
  const ServiceLimits limits_;
  const CallSecurity security_;
  const std::shared_ptr<const Identity> caller_;
  bool refusal_audited_ = false;
  v1::IngestSummary* const summary_;
  ServerMetrics* const observability_;
  // This call's grpc_server_* series (the interceptor skips this method).
  ServerMetrics::StreamCall call_;
  v1::SampleBatch batch_;
  IngestResult total_;
  uint64_t samples_seen_ = 0;
};

// Finishes a WatchRecommendations call that could not start.
grpc::ServerWriteReactor<v1::RecommendationEvent>* RejectedWatch(const absl::Status& status) {
  return new RejectedStreamReactor<v1::RecommendationEvent>(ToGrpcStatus(status));
}

}  // namespace

// ---- MetricsService ----------------------------------------------------------

grpc::ServerReadReactor<v1::SampleBatch>* MetricsServiceImpl::StreamSamples(
    grpc::CallbackServerContext* context, v1::IngestSummary* summary) {
  auto caller = Admit(security_, context, Access::kReportSamples, kStreamSamples, "");
  if (!caller.ok()) {
    const grpc::Status refused = ToGrpcStatus(caller.status());
    ServerMetrics::StreamCall(observability_).Finish(refused);
    return new RejectedSampleStreamReactor(refused);
  }
  if (auto refused = RefuseUnlessLeader(leadership_, context)) {
    ServerMetrics::StreamCall(observability_).Finish(*refused);
    return new RejectedSampleStreamReactor(*refused);
  }
  return new SampleStreamReactor(engine_, limits_, security_, *std::move(caller), summary,
                                 observability_);
}

grpc::ServerUnaryReactor* MetricsServiceImpl::ReportSamples(grpc::CallbackServerContext* context,
                                                            const v1::SampleBatch* batch,
                                                            v1::IngestSummary* summary) {
  auto caller = Admit(security_, context, Access::kReportSamples, kReportSamples, "");
  if (!caller.ok()) return FinishUnary(context, caller.status());
  if (auto refused = RefuseUnlessLeader(leadership_, context))
    return FinishRefused(context, *refused);
  if (batch->samples_size() > limits_.max_batch_samples) {
    if (observability_ != nullptr) observability_->RecordBatchTooLarge(batch->samples_size());
    return FinishUnary(context, BatchTooLarge(batch->samples_size(), limits_.max_batch_samples));
  }
  IngestResult result =
      IngestPermitted(engine_, security_, **caller, kReportSamples, FromProto(*batch));
  if (observability_ != nullptr) observability_->RecordIngest(result);
  // The contract (rescale.proto, ReportSamples): a non-OK reply carries no
  // body, so the error's message carries the whole summary.
  if (result.accepted == 0 && result.rejected_for_limits > 0) {
    return FinishUnary(
        context, absl::ResourceExhaustedError(absl::StrFormat(
                     "0 of %d samples accepted: %d refused by a limit (%s), %d rejected for other "
                     "reasons, %d duplicates; nothing was stored: retry later or raise the limit",
                     batch->samples_size(), result.rejected_for_limits, result.limit_reason,
                     result.rejected - result.rejected_for_limits, result.duplicates)));
  }
  ToProto(result, summary);
  return FinishUnary(context, absl::OkStatus());
}

// ---- JobService ---------------------------------------------------------------

grpc::ServerUnaryReactor* JobServiceImpl::RegisterJob(grpc::CallbackServerContext* context,
                                                      const v1::RegisterJobRequest* request,
                                                      v1::Job* response) {
  const std::string& job_id = request->spec().job_id();
  auto caller =
      Admit(security_, context, Access::kWrite, kRegisterJob, NamespaceOfJobId(job_id), job_id);
  if (!caller.ok()) return FinishUnary(context, caller.status());
  if (auto refused = RefuseUnlessLeader(leadership_, context)) {
    return FinishRefused(context,
                         AuditedRefusal(security_, **caller, kRegisterJob, job_id, *refused));
  }
  // Finished once the registration is durable, from the engine's thread:
  // no gRPC thread waits for the state store.
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  engine_.RegisterJobAsync(FromProto(request->spec()), [this, reactor, response, identity = *caller,
                                                        job_id](absl::StatusOr<JobView> job) {
    if (job.ok()) {
      ToProto(*job, response);
      spdlog::info("registered job {} (replicas {}..{}, priority {})", job->spec.job_id,
                   job->spec.min_replicas, job->spec.max_replicas, job->spec.priority);
    }
    reactor->Finish(
        ToGrpcStatus(Audited(security_, *identity, kRegisterJob, job_id, job.status())));
  });
  return reactor;
}

grpc::ServerUnaryReactor* JobServiceImpl::UpdateJob(grpc::CallbackServerContext* context,
                                                    const v1::UpdateJobRequest* request,
                                                    v1::Job* response) {
  const std::string& job_id = request->spec().job_id();
  auto caller =
      Admit(security_, context, Access::kWrite, kUpdateJob, NamespaceOfJobId(job_id), job_id);
  if (!caller.ok()) return FinishUnary(context, caller.status());
  if (auto refused = RefuseUnlessLeader(leadership_, context)) {
    return FinishRefused(context,
                         AuditedRefusal(security_, **caller, kUpdateJob, job_id, *refused));
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  engine_.UpdateJobAsync(FromProto(request->spec()), [this, reactor, response, identity = *caller,
                                                      job_id](absl::StatusOr<JobView> job) {
    if (job.ok()) {
      ToProto(*job, response);
      spdlog::info("updated job {}", job->spec.job_id);
    }
    reactor->Finish(ToGrpcStatus(Audited(security_, *identity, kUpdateJob, job_id, job.status())));
  });
  return reactor;
}

grpc::ServerUnaryReactor* JobServiceImpl::GetJob(grpc::CallbackServerContext* context,
                                                 const v1::GetJobRequest* request,
                                                 v1::Job* response) {
  auto caller = Admit(security_, context, Access::kRead, kGetJob,
                      NamespaceOfJobId(request->job_id()), request->job_id());
  if (!caller.ok()) return FinishUnary(context, caller.status());
  absl::StatusOr<JobView> job = engine_.GetJob(request->job_id());
  if (job.ok()) ToProto(*job, response);
  return FinishUnary(context, job.status());
}

grpc::ServerUnaryReactor* JobServiceImpl::ListJobs(grpc::CallbackServerContext* context,
                                                   const v1::ListJobsRequest* request,
                                                   v1::ListJobsResponse* response) {
  auto caller = Admit(security_, context, Access::kRead, kListJobs, request->namespace_());
  if (!caller.ok()) return FinishUnary(context, caller.status());
  // Every namespace, asked by a caller restricted to some: theirs.
  for (const JobView& job : engine_.ListJobs(request->namespace_())) {
    if ((*caller)->MayAccessNamespace(NamespaceOfJobId(job.spec.job_id))) {
      ToProto(job, response->add_jobs());
    }
  }
  return FinishUnary(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* JobServiceImpl::DeregisterJob(grpc::CallbackServerContext* context,
                                                        const v1::DeregisterJobRequest* request,
                                                        v1::DeregisterJobResponse* response) {
  const std::string& job_id = request->job_id();
  auto caller =
      Admit(security_, context, Access::kWrite, kDeregisterJob, NamespaceOfJobId(job_id), job_id);
  if (!caller.ok()) return FinishUnary(context, caller.status());
  if (auto refused = RefuseUnlessLeader(leadership_, context)) {
    return FinishRefused(context,
                         AuditedRefusal(security_, **caller, kDeregisterJob, job_id, *refused));
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  engine_.DeregisterJobAsync(job_id, [this, reactor, identity = *caller,
                                      job_id](absl::Status status) {
    if (status.ok()) spdlog::info("deregistered job {}", job_id);
    reactor->Finish(ToGrpcStatus(Audited(security_, *identity, kDeregisterJob, job_id, status)));
  });
  return reactor;
}

// ---- RecommendationService ------------------------------------------------------

grpc::ServerUnaryReactor* RecommendationServiceImpl::GetRecommendation(
    grpc::CallbackServerContext* context, const v1::GetRecommendationRequest* request,
    v1::Recommendation* response) {
  auto caller = Admit(security_, context, Access::kRead, kGetRecommendation,
                      NamespaceOfJobId(request->job_id()), request->job_id());
  if (!caller.ok()) return FinishUnary(context, caller.status());
  absl::StatusOr<Recommendation> rec = engine_.GetRecommendation(request->job_id());
  if (rec.ok()) ToProto(*rec, response);
  return FinishUnary(context, rec.status());
}

grpc::ServerUnaryReactor* RecommendationServiceImpl::ListRecommendations(
    grpc::CallbackServerContext* context, const v1::ListRecommendationsRequest* request,
    v1::ListRecommendationsResponse* response) {
  auto caller =
      Admit(security_, context, Access::kRead, kListRecommendations, request->namespace_());
  if (!caller.ok()) return FinishUnary(context, caller.status());
  const std::vector<std::shared_ptr<const Recommendation>> recs =
      engine_.RecommendationSnapshot(request->namespace_());
  response->mutable_recommendations()->Reserve(static_cast<int>(recs.size()));
  for (const auto& rec : recs) {
    if ((*caller)->MayAccessNamespace(NamespaceOfJobId(rec->job_id))) {
      ToProto(*rec, response->add_recommendations());
    }
  }
  return FinishUnary(context, absl::OkStatus());
}

grpc::ServerWriteReactor<v1::RecommendationEvent>* RecommendationServiceImpl::WatchRecommendations(
    grpc::CallbackServerContext* context, const v1::WatchRecommendationsRequest* request) {
  auto caller =
      Admit(security_, context, Access::kRead, kWatchRecommendations, request->namespace_());
  if (!caller.ok()) return RejectedWatch(caller.status());
  std::string ns = request->namespace_();
  if (!ns.empty() && !IsDns1123Label(ns)) {
    return RejectedWatch(absl::InvalidArgumentError(
        absl::StrFormat("namespace \"%s\" is not a DNS-1123 label", ns)));
  }
  // A watch follows one namespace or all: a caller restricted to one
  // watches it; one restricted to several must choose.
  if (ns.empty() && !(*caller)->all_namespaces) {
    if ((*caller)->namespaces.size() != 1) {
      return RejectedWatch(absl::PermissionDeniedError(absl::StrFormat(
          "%s may not call %s for every namespace: watch one of %s", (*caller)->Describe(),
          kWatchRecommendations, (*caller)->NamespacesText())));
    }
    ns = (*caller)->namespaces.front();
  }
  absl::StatusOr<std::shared_ptr<Subscription>> sub = engine_.Watch(ns);
  if (!sub.ok()) return RejectedWatch(sub.status());
  // Initial ADDED events, SYNCED, then every change, each as it is, and
  // each plan's PLAN_END.
  return new SubscriptionStreamReactor<v1::RecommendationEvent>(
      engine_, *std::move(sub),
      [](const RecommendationEvent& event, v1::RecommendationEvent* out, grpc::Status*) {
        ToProto(event, out);
        return StreamStep::kWrite;
      });
}

grpc::ServerUnaryReactor* RecommendationServiceImpl::ReportApplied(
    grpc::CallbackServerContext* context, const v1::ReportAppliedRequest* request,
    v1::ReportAppliedResponse* response) {
  const std::string& job_id = request->job_id();
  auto caller =
      Admit(security_, context, Access::kWrite, kReportApplied, NamespaceOfJobId(job_id), job_id);
  if (!caller.ok()) return FinishUnary(context, caller.status());
  if (auto refused = RefuseUnlessLeader(leadership_, context)) {
    return FinishRefused(context,
                         AuditedRefusal(security_, **caller, kReportApplied, job_id, *refused));
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  engine_.ReportAppliedAsync(
      job_id, request->replicas(), request->suspended(), request->generation(), request->gpu_type(),
      [this, reactor, response, identity = *caller, job_id](absl::StatusOr<JobStatus> status) {
        if (status.ok()) ToProto(*status, response->mutable_status());
        reactor->Finish(
            ToGrpcStatus(Audited(security_, *identity, kReportApplied, job_id, status.status())));
      });
  return reactor;
}

// ---- ClusterService -----------------------------------------------------------------

namespace {

// The cluster as `caller` may see it: every total, and the allocations of
// its namespaces' jobs only.
void ClusterToProto(ClusterView view, const Identity& caller, v1::Cluster* out) {
  if (!caller.all_namespaces) {
    std::erase_if(view.allocations, [&](const JobAllocation& allocation) {
      return !caller.MayAccessNamespace(NamespaceOfJobId(allocation.job_id));
    });
  }
  ToProto(view, out);
}

}  // namespace

grpc::ServerUnaryReactor* ClusterServiceImpl::SetCapacity(grpc::CallbackServerContext* context,
                                                          const v1::SetCapacityRequest* request,
                                                          v1::Cluster* response) {
  auto caller = Admit(security_, context, Access::kClusterWrite, kSetCapacity, "");
  if (!caller.ok()) return FinishUnary(context, caller.status());
  if (auto refused = RefuseUnlessLeader(leadership_, context)) {
    return FinishRefused(context, AuditedRefusal(security_, **caller, kSetCapacity, "", *refused));
  }
  CapacityReport report;
  report.total_gpus = request->total_gpus();
  report.slots.reserve(request->slots_size());
  for (const v1::ReplicaSlots& s : request->slots()) {
    report.slots.push_back({s.gpus_per_replica(), s.replicas()});
  }
  report.allocatable_gpus = request->allocatable_gpus();
  for (const v1::GpuType& type : request->gpu_types()) report.gpu_types.push_back(FromProto(type));
  // The engine checks the slots and the allocatable GPUs (INVALID_ARGUMENT
  // naming slots[i] or allocatable_gpus).
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  engine_.SetCapacityAsync(report, [this, reactor, response, identity = *caller,
                                    report](absl::StatusOr<ClusterView> view) {
    if (view.ok()) {
      ClusterToProto(*std::move(view), *identity, response);
      std::string detail;
      if (report.allocatable_gpus > 0) {
        absl::StrAppend(&detail, " (of ", report.allocatable_gpus, " allocatable)");
      }
      if (!report.slots.empty()) {
        absl::StrAppend(&detail, ", ", report.slots.size(), " slot classes");
      }
      spdlog::info("capacity set to {} GPUs{}", report.total_gpus, detail);
    }
    reactor->Finish(ToGrpcStatus(Audited(security_, *identity, kSetCapacity, "", view.status())));
  });
  return reactor;
}

grpc::ServerUnaryReactor* ClusterServiceImpl::GetCluster(grpc::CallbackServerContext* context,
                                                         const v1::GetClusterRequest* request,
                                                         v1::Cluster* response) {
  // Every role may learn who leads (agents follow the leader with it); the
  // cluster itself is for readers.
  auto caller = Admit(security_, context, Access::kLeadership, kGetCluster, "");
  if (!caller.ok()) return FinishUnary(context, caller.status());
  if (Authorize(**caller, Access::kRead, kGetCluster, "").ok()) {
    ClusterToProto(engine_.GetCluster(), **caller, response);
  }
  response->set_leading(leadership_ == nullptr || leadership_->IsLeader());
  if (leadership_ != nullptr) {
    response->set_leader(leadership_->LeaderAddress());
    response->set_leadership(leadership_->Describe());
  }
  return FinishUnary(context, absl::OkStatus());
}

// Queues are cluster-wide, as the capacity: setting them needs every
// namespace (kClusterWrite); any reader may list them.
grpc::ServerUnaryReactor* ClusterServiceImpl::SetQueues(grpc::CallbackServerContext* context,
                                                        const v1::SetQueuesRequest* request,
                                                        v1::ListQueuesResponse* response) {
  auto caller = Admit(security_, context, Access::kClusterWrite, kSetQueues, "");
  if (!caller.ok()) return FinishUnary(context, caller.status());
  if (auto refused = RefuseUnlessLeader(leadership_, context)) {
    return FinishRefused(context, AuditedRefusal(security_, **caller, kSetQueues, "", *refused));
  }
  std::vector<QueueSpec> queues;
  queues.reserve(request->queues_size());
  for (const v1::Queue& q : request->queues()) queues.push_back(FromProto(q));
  const size_t count = queues.size();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  engine_.SetQueuesAsync(std::move(queues), [this, reactor, response, identity = *caller,
                                             count](absl::StatusOr<ClusterView> view) {
    if (view.ok()) {
      for (const QueueView& q : view->queues) ToProto(q, response->add_queues());
      response->set_plan_pending(view->plan_pending);
      spdlog::info("queues set: {} defined", count);
    }
    reactor->Finish(ToGrpcStatus(Audited(security_, *identity, kSetQueues, "", view.status())));
  });
  return reactor;
}

grpc::ServerUnaryReactor* ClusterServiceImpl::ListQueues(grpc::CallbackServerContext* context,
                                                         const v1::ListQueuesRequest* request,
                                                         v1::ListQueuesResponse* response) {
  auto caller = Admit(security_, context, Access::kRead, kListQueues, "");
  if (!caller.ok()) return FinishUnary(context, caller.status());
  for (const QueueView& q : engine_.GetCluster().queues) ToProto(q, response->add_queues());
  return FinishUnary(context, absl::OkStatus());
}

}  // namespace rescale::server
