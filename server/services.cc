// Implementations of the rescale.v1 services (see server/services.h): the
// unary handlers, the StreamSamples read reactor and the WatchRecommendations
// write reactor.
#include "server/services.h"

#include <spdlog/spdlog.h>

#include <memory>
#include <mutex>
#include <optional>

#include "absl/strings/str_format.h"
#include "server/convert.h"

namespace rescale::server {
namespace {

grpc::ServerUnaryReactor* FinishUnary(grpc::CallbackServerContext* context,
                                      const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

// gRPC from Debian is not instrumented for ThreadSanitizer, so TSan cannot
// see that gRPC runs a reactor's callbacks, on its own threads, only after
// the method handler returned the reactor (the hand-off goes through atomics
// inside libgrpc). These state that hand-off to TSan: the constructor's end
// releases the reactor, each callback acquires it first. Everything else the
// callbacks share is under the reactor's std::mutex, which TSan sees. They
// are no-ops outside TSan builds.
#if defined(__SANITIZE_THREAD__)
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
void ReactorHandedToGrpc(void* reactor) { __tsan_release(reactor); }
void ReactorCallbackFromGrpc(void* reactor) { __tsan_acquire(reactor); }
#else
void ReactorHandedToGrpc(void*) {}
void ReactorCallbackFromGrpc(void*) {}
#endif

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
  SampleStreamReactor(DecisionEngine& engine, ServiceLimits limits, v1::IngestSummary* summary,
                      ServerMetrics* observability)
      : engine_(engine),
        limits_(limits),
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
      std::vector<StepSample> samples = FromProto(batch_);
      result = engine_.Ingest(samples);
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
  v1::IngestSummary* const summary_;
  ServerMetrics* const observability_;
  // This call's grpc_server_* series (the interceptor skips this method).
  ServerMetrics::StreamCall call_;
  v1::SampleBatch batch_;
  IngestResult total_;
  uint64_t samples_seen_ = 0;
};

// Streams a Subscription: initial ADDED events, SYNCED, then every change.
//
// Events arrive on publishing threads, writes complete on gRPC threads, so the
// reactor's state sits behind `Gate::mu`. The subscription's ready callback
// holds a shared_ptr to the Gate, not to the reactor: OnDone clears
// Gate::reactor under the same mutex before deleting the reactor, so a late
// callback finds null instead of freed memory.
class WatchReactor final : public grpc::ServerWriteReactor<v1::RecommendationEvent> {
 public:
  WatchReactor(DecisionEngine& engine, std::shared_ptr<Subscription> subscription)
      : engine_(engine), subscription_(std::move(subscription)), gate_(std::make_shared<Gate>()) {
    std::lock_guard<std::mutex> lock(gate_->mu);
    gate_->reactor = this;
    subscription_->SetReadyCallback([gate = gate_] {
      std::lock_guard<std::mutex> lock(gate->mu);
      if (gate->reactor != nullptr) gate->reactor->PumpLocked();
    });
    PumpLocked();
    ReactorHandedToGrpc(this);
  }

  void OnWriteDone(bool ok) override {
    ReactorCallbackFromGrpc(this);
    std::lock_guard<std::mutex> lock(gate_->mu);
    writing_ = false;
    if (!ok) {  // the client is gone or the call was cancelled
      FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "watch cancelled"));
      return;
    }
    PumpLocked();
  }

  void OnCancel() override {
    ReactorCallbackFromGrpc(this);
    std::lock_guard<std::mutex> lock(gate_->mu);
    cancelled_ = true;
    // With a write in flight, OnWriteDone(false) follows and finishes.
    if (!writing_) FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "watch cancelled"));
  }

  void OnDone() override {
    ReactorCallbackFromGrpc(this);
    {
      std::lock_guard<std::mutex> lock(gate_->mu);
      gate_->reactor = nullptr;
    }
    // Outside the gate: the board may call the ready callback under its own
    // lock, which takes the gate (lock order board -> gate).
    engine_.Unwatch(subscription_);
    delete this;
  }

 private:
  struct Gate {
    // std::mutex, as in the core: Debian's Abseil is not built with
    // ThreadSanitizer, which would not see absl::Mutex's synchronisation.
    std::mutex mu;
    WatchReactor* reactor ABSL_GUARDED_BY(mu) = nullptr;
  };

  void PumpLocked() {
    if (writing_ || finished_) return;
    if (cancelled_) {
      FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "watch cancelled"));
      return;
    }
    RecommendationEvent event;
    switch (subscription_->Next(&event)) {
      case Subscription::Poll::kEvent:
        out_.Clear();
        ToProto(event, &out_);
        writing_ = true;
        StartWrite(&out_);
        return;
      case Subscription::Poll::kEmpty:
        return;  // the ready callback pumps again
      case Subscription::Poll::kClosed:
        FinishLocked(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                  "rescaled is shutting down; reconnect and watch again"));
        return;
    }
  }

  void FinishLocked(const grpc::Status& status) {
    if (finished_) return;
    finished_ = true;
    Finish(status);
  }

  DecisionEngine& engine_;
  const std::shared_ptr<Subscription> subscription_;
  const std::shared_ptr<Gate> gate_;
  // Guarded by gate_->mu (not annotated: the lock lives in a shared object).
  v1::RecommendationEvent out_;
  bool writing_ = false;
  bool cancelled_ = false;
  bool finished_ = false;
};

// Finishes a streaming call that could not start.
class RejectedWatchReactor final : public grpc::ServerWriteReactor<v1::RecommendationEvent> {
 public:
  explicit RejectedWatchReactor(const absl::Status& status) { Finish(ToGrpcStatus(status)); }
  void OnDone() override { delete this; }
};

}  // namespace

// ---- MetricsService ----------------------------------------------------------

grpc::ServerReadReactor<v1::SampleBatch>* MetricsServiceImpl::StreamSamples(
    grpc::CallbackServerContext* context, v1::IngestSummary* summary) {
  if (auto refused = RefuseUnlessLeader(leadership_, context)) {
    ServerMetrics::StreamCall(observability_).Finish(*refused);
    return new RejectedSampleStreamReactor(*refused);
  }
  return new SampleStreamReactor(engine_, limits_, summary, observability_);
}

grpc::ServerUnaryReactor* MetricsServiceImpl::ReportSamples(grpc::CallbackServerContext* context,
                                                            const v1::SampleBatch* batch,
                                                            v1::IngestSummary* summary) {
  if (auto refused = RefuseUnlessLeader(leadership_, context)) return FinishRefused(context, *refused);
  if (batch->samples_size() > limits_.max_batch_samples) {
    if (observability_ != nullptr) observability_->RecordBatchTooLarge(batch->samples_size());
    return FinishUnary(context, BatchTooLarge(batch->samples_size(), limits_.max_batch_samples));
  }
  std::vector<StepSample> samples = FromProto(*batch);
  IngestResult result = engine_.Ingest(samples);
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
  if (auto refused = RefuseUnlessLeader(leadership_, context)) return FinishRefused(context, *refused);
  absl::StatusOr<JobView> job = engine_.RegisterJob(FromProto(request->spec()));
  if (job.ok()) {
    ToProto(*job, response);
    spdlog::info("registered job {} (replicas {}..{}, priority {})", job->spec.job_id,
                 job->spec.min_replicas, job->spec.max_replicas, job->spec.priority);
  }
  return FinishUnary(context, job.status());
}

grpc::ServerUnaryReactor* JobServiceImpl::UpdateJob(grpc::CallbackServerContext* context,
                                                    const v1::UpdateJobRequest* request,
                                                    v1::Job* response) {
  if (auto refused = RefuseUnlessLeader(leadership_, context)) return FinishRefused(context, *refused);
  absl::StatusOr<JobView> job = engine_.UpdateJob(FromProto(request->spec()));
  if (job.ok()) {
    ToProto(*job, response);
    spdlog::info("updated job {}", job->spec.job_id);
  }
  return FinishUnary(context, job.status());
}

grpc::ServerUnaryReactor* JobServiceImpl::GetJob(grpc::CallbackServerContext* context,
                                                 const v1::GetJobRequest* request,
                                                 v1::Job* response) {
  absl::StatusOr<JobView> job = engine_.GetJob(request->job_id());
  if (job.ok()) ToProto(*job, response);
  return FinishUnary(context, job.status());
}

grpc::ServerUnaryReactor* JobServiceImpl::ListJobs(grpc::CallbackServerContext* context,
                                                   const v1::ListJobsRequest* request,
                                                   v1::ListJobsResponse* response) {
  for (const JobView& job : engine_.ListJobs(request->namespace_())) {
    ToProto(job, response->add_jobs());
  }
  return FinishUnary(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* JobServiceImpl::DeregisterJob(grpc::CallbackServerContext* context,
                                                        const v1::DeregisterJobRequest* request,
                                                        v1::DeregisterJobResponse* response) {
  if (auto refused = RefuseUnlessLeader(leadership_, context)) return FinishRefused(context, *refused);
  absl::Status status = engine_.DeregisterJob(request->job_id());
  if (status.ok()) spdlog::info("deregistered job {}", request->job_id());
  return FinishUnary(context, status);
}

// ---- RecommendationService ------------------------------------------------------

grpc::ServerUnaryReactor* RecommendationServiceImpl::GetRecommendation(
    grpc::CallbackServerContext* context, const v1::GetRecommendationRequest* request,
    v1::Recommendation* response) {
  absl::StatusOr<Recommendation> rec = engine_.GetRecommendation(request->job_id());
  if (rec.ok()) ToProto(*rec, response);
  return FinishUnary(context, rec.status());
}

grpc::ServerUnaryReactor* RecommendationServiceImpl::ListRecommendations(
    grpc::CallbackServerContext* context, const v1::ListRecommendationsRequest* request,
    v1::ListRecommendationsResponse* response) {
  const std::vector<std::shared_ptr<const Recommendation>> recs =
      engine_.RecommendationSnapshot(request->namespace_());
  response->mutable_recommendations()->Reserve(static_cast<int>(recs.size()));
  for (const auto& rec : recs) ToProto(*rec, response->add_recommendations());
  return FinishUnary(context, absl::OkStatus());
}

grpc::ServerWriteReactor<v1::RecommendationEvent>* RecommendationServiceImpl::WatchRecommendations(
    grpc::CallbackServerContext* context, const v1::WatchRecommendationsRequest* request) {
  if (!request->namespace_().empty() && !IsDns1123Label(request->namespace_())) {
    return new RejectedWatchReactor(absl::InvalidArgumentError(
        absl::StrFormat("namespace \"%s\" is not a DNS-1123 label", request->namespace_())));
  }
  absl::StatusOr<std::shared_ptr<Subscription>> sub = engine_.Watch(request->namespace_());
  if (!sub.ok()) return new RejectedWatchReactor(sub.status());
  return new WatchReactor(engine_, *std::move(sub));
}

grpc::ServerUnaryReactor* RecommendationServiceImpl::ReportApplied(
    grpc::CallbackServerContext* context, const v1::ReportAppliedRequest* request,
    v1::ReportAppliedResponse* response) {
  if (auto refused = RefuseUnlessLeader(leadership_, context)) return FinishRefused(context, *refused);
  absl::StatusOr<JobStatus> status = engine_.ReportApplied(
      request->job_id(), request->replicas(), request->suspended(), request->generation());
  if (status.ok()) ToProto(*status, response->mutable_status());
  return FinishUnary(context, status.status());
}

// ---- ClusterService -----------------------------------------------------------------

grpc::ServerUnaryReactor* ClusterServiceImpl::SetCapacity(grpc::CallbackServerContext* context,
                                                          const v1::SetCapacityRequest* request,
                                                          v1::Cluster* response) {
  if (auto refused = RefuseUnlessLeader(leadership_, context)) return FinishRefused(context, *refused);
  absl::StatusOr<ClusterView> view = engine_.SetCapacity(request->total_gpus());
  if (view.ok()) {
    ToProto(*view, response);
    spdlog::info("capacity set to {} GPUs", request->total_gpus());
  }
  return FinishUnary(context, view.status());
}

grpc::ServerUnaryReactor* ClusterServiceImpl::GetCluster(grpc::CallbackServerContext* context,
                                                         const v1::GetClusterRequest* request,
                                                         v1::Cluster* response) {
  ToProto(engine_.GetCluster(), response);
  response->set_leading(leadership_ == nullptr || leadership_->IsLeader());
  if (leadership_ != nullptr) {
    response->set_leader(leadership_->LeaderAddress());
    response->set_leadership(leadership_->Describe());
  }
  return FinishUnary(context, absl::OkStatus());
}

}  // namespace rescale::server
