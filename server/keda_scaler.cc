// The KEDA external scaler's handlers (see server/keda_scaler.h): each
// resolves the ScaledObject's job, admits the caller as a reader of the
// job's namespace, and answers from the job's recommendation.
#include "server/keda_scaler.h"

#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "rescale/status_macros.h"
#include "rescale/validation.h"
#include "server/convert.h"
#include "server/handler_support.h"

namespace rescale::server {
namespace {

// Method names, as the audit log and refusals name them.
constexpr absl::string_view kIsActive = "externalscaler.ExternalScaler/IsActive";
constexpr absl::string_view kStreamIsActive = "externalscaler.ExternalScaler/StreamIsActive";
constexpr absl::string_view kGetMetricSpec = "externalscaler.ExternalScaler/GetMetricSpec";
constexpr absl::string_view kGetMetrics = "externalscaler.ExternalScaler/GetMetrics";

std::string MetadataValue(const externalscaler::ScaledObjectRef& ref, const char* key) {
  const auto it = ref.scalermetadata().find(key);
  return it == ref.scalermetadata().end() ? std::string() : it->second;
}

// KEDA logs the message of a failed call and retries on its polling
// interval: a NOT_FOUND says what to do about it.
absl::Status ExplainNotFound(const absl::Status& status, const std::string& job_id) {
  if (status.code() != absl::StatusCode::kNotFound) return status;
  return absl::NotFoundError(absl::StrFormat(
      "job \"%s\" is not registered with rescaled: register it (rescalectl apply, or the agent "
      "with auto-registration), or set the trigger's metadata %s to the job's NAMESPACE/NAME",
      job_id, kKedaJobKey));
}

// The job a call is about, and its caller admitted as a reader of it.
absl::StatusOr<std::string> AdmitForJob(const CallSecurity& security,
                                        grpc::CallbackServerContext* context,
                                        const externalscaler::ScaledObjectRef& ref,
                                        absl::string_view method) {
  absl::StatusOr<std::string> job = KedaJobId(ref);
  if (!job.ok()) return job.status();
  auto caller = Admit(security, context, Access::kRead, method, NamespaceOfJobId(*job), *job);
  if (!caller.ok()) return caller.status();
  return job;
}

}  // namespace

absl::StatusOr<std::string> KedaJobId(const externalscaler::ScaledObjectRef& ref) {
  const std::string named = MetadataValue(ref, kKedaJobKey);
  if (!named.empty()) {
    RETURN_IF_ERROR(ValidateJobId(named, absl::StrCat("scalerMetadata.", kKedaJobKey)));
    return named;
  }
  if (ref.namespace_().empty() || ref.name().empty()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "scaledObjectRef needs a namespace and a name, or scalerMetadata.%s "
        "(NAMESPACE/NAME): got namespace \"%s\", name \"%s\"",
        kKedaJobKey, ref.namespace_(), ref.name()));
  }
  std::string id = absl::StrCat(ref.namespace_(), "/", ref.name());
  RETURN_IF_ERROR(ValidateJobId(id, "scaledObjectRef namespace/name"));
  return id;
}

std::string KedaMetricName(const externalscaler::ScaledObjectRef& ref) {
  std::string name = MetadataValue(ref, kKedaMetricNameKey);
  return name.empty() ? std::string(kDefaultKedaMetricName) : name;
}

bool KedaActive(const Recommendation& recommendation) {
  return recommendation.replicas > 0 && !recommendation.suspend;
}

int64_t KedaReplicas(const Recommendation& recommendation) {
  return KedaActive(recommendation) ? recommendation.replicas : 0;
}

grpc::ServerUnaryReactor* ExternalScalerImpl::IsActive(
    grpc::CallbackServerContext* context, const externalscaler::ScaledObjectRef* ref,
    externalscaler::IsActiveResponse* response) {
  absl::StatusOr<std::string> job = AdmitForJob(security_, context, *ref, kIsActive);
  if (!job.ok()) return FinishUnary(context, job.status());
  absl::StatusOr<Recommendation> rec = engine_.GetRecommendation(*job);
  if (!rec.ok()) return FinishUnary(context, ExplainNotFound(rec.status(), *job));
  response->set_result(KedaActive(*rec));
  return FinishUnary(context, absl::OkStatus());
}

grpc::ServerWriteReactor<externalscaler::IsActiveResponse>* ExternalScalerImpl::StreamIsActive(
    grpc::CallbackServerContext* context, const externalscaler::ScaledObjectRef* ref) {
  using Reactor = SubscriptionStreamReactor<externalscaler::IsActiveResponse>;
  using Rejected = RejectedStreamReactor<externalscaler::IsActiveResponse>;
  absl::StatusOr<std::string> job = AdmitForJob(security_, context, *ref, kStreamIsActive);
  if (!job.ok()) return new Rejected(ToGrpcStatus(job.status()));
  absl::StatusOr<std::shared_ptr<Subscription>> sub =
      engine_.Watch(std::string(NamespaceOfJobId(*job)));
  if (!sub.ok()) return new Rejected(ToGrpcStatus(sub.status()));
  // Checked once watching, so that a job deregistered from here on shows
  // as a DELETED event rather than a stream that never says anything.
  if (absl::Status known = engine_.GetJob(*job).status(); !known.ok()) {
    engine_.Unwatch(*sub);
    return new Rejected(ToGrpcStatus(ExplainNotFound(known, *job)));
  }
  // The job's activity when first seen (in the watch's snapshot, or in the
  // first plan that includes it), then each change of it.
  return new Reactor(
      engine_, *std::move(sub),
      [job = *job, sent = std::optional<bool>()](const RecommendationEvent& event,
                                                  externalscaler::IsActiveResponse* out,
                                                  grpc::Status* end) mutable {
        // SYNCED and PLAN_END carry no job: KEDA follows one job's
        // activity, not plans.
        if (event.type == RecommendationEvent::Type::kSynced ||
            event.type == RecommendationEvent::Type::kPlanEnd ||
            event.recommendation.job_id != job) {
          return StreamStep::kSkip;
        }
        if (event.type == RecommendationEvent::Type::kDeleted) {
          *end = grpc::Status(grpc::StatusCode::NOT_FOUND,
                              absl::StrFormat("job \"%s\" was deregistered", job));
          return StreamStep::kFinish;
        }
        const bool active = KedaActive(event.recommendation);
        if (sent == active) return StreamStep::kSkip;
        sent = active;
        out->set_result(active);
        return StreamStep::kWrite;
      });
}

grpc::ServerUnaryReactor* ExternalScalerImpl::GetMetricSpec(
    grpc::CallbackServerContext* context, const externalscaler::ScaledObjectRef* ref,
    externalscaler::GetMetricSpecResponse* response) {
  // Not required to be registered yet: KEDA asks when it creates the HPA,
  // which may be before the job's first sample or apply registers it.
  absl::StatusOr<std::string> job = AdmitForJob(security_, context, *ref, kGetMetricSpec);
  if (!job.ok()) return FinishUnary(context, job.status());
  externalscaler::MetricSpec* spec = response->add_metricspecs();
  spec->set_metricname(KedaMetricName(*ref));
  spec->set_targetsize(1);
  spec->set_targetsizefloat(1.0);
  return FinishUnary(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* ExternalScalerImpl::GetMetrics(
    grpc::CallbackServerContext* context, const externalscaler::GetMetricsRequest* request,
    externalscaler::GetMetricsResponse* response) {
  const externalscaler::ScaledObjectRef& ref = request->scaledobjectref();
  absl::StatusOr<std::string> job = AdmitForJob(security_, context, ref, kGetMetrics);
  if (!job.ok()) return FinishUnary(context, job.status());
  const std::string metric = KedaMetricName(ref);
  // KEDA strips the "sN-" prefix it adds to the HPA's metric name before
  // asking, so the name is the one GetMetricSpec gave.
  if (!request->metricname().empty() && request->metricname() != metric) {
    return FinishUnary(context, absl::NotFoundError(absl::StrFormat(
                                    "metricName \"%s\" is not served for job \"%s\": its metric "
                                    "is \"%s\"",
                                    request->metricname(), *job, metric)));
  }
  absl::StatusOr<Recommendation> rec = engine_.GetRecommendation(*job);
  if (!rec.ok()) return FinishUnary(context, ExplainNotFound(rec.status(), *job));
  externalscaler::MetricValue* value = response->add_metricvalues();
  value->set_metricname(metric);
  value->set_metricvalue(KedaReplicas(*rec));
  value->set_metricvaluefloat(static_cast<double>(KedaReplicas(*rec)));
  return FinishUnary(context, absl::OkStatus());
}

}  // namespace rescale::server
