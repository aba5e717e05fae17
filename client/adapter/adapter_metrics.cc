// rescale-adapter's metrics and the metered KubeClient (see
// client/adapter/adapter_metrics.h).
#include "client/adapter/adapter_metrics.h"

#include <prometheus/counter.h>
#include <prometheus/exposer.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <exception>

#include "absl/strings/str_cat.h"

namespace rescale::adapter {

AdapterMetrics::AdapterMetrics() : registry_(std::make_shared<prometheus::Registry>()) {
  prometheus::Registry& registry = *registry_;
  auto& patches = prometheus::BuildCounter()
                      .Name("rescale_adapter_patches_total")
                      .Help(
                          "PATCH requests sent to the Kubernetes API, by outcome: applied, "
                          "conflict (409: re-read and retried), failed.")
                      .Register(registry);
  patches_applied_ = &patches.Add({{"outcome", "applied"}});
  patches_conflict_ = &patches.Add({{"outcome", "conflict"}});
  patches_failed_ = &patches.Add({{"outcome", "failed"}});
  api_errors_ = &prometheus::BuildCounter()
                     .Name("rescale_adapter_kube_api_errors_total")
                     .Help(
                         "Failed Kubernetes API requests by verb and status code (absl code "
                         "names: 404 NOT_FOUND, 409 ABORTED, 410 OUT_OF_RANGE, 5xx and "
                         "transport errors UNAVAILABLE).")
                     .Register(registry);
  auto& applies = prometheus::BuildCounter()
                      .Name("rescale_adapter_applies_total")
                      .Help(
                          "Recommendations applied to their PyTorchJob, or given up on after "
                          "retries (failed).")
                      .Register(registry);
  applies_applied_ = &applies.Add({{"outcome", "applied"}});
  applies_failed_ = &applies.Add({{"outcome", "failed"}});
  // An apply is a GET and a PATCH or two, tens of milliseconds; with
  // retries, seconds.
  apply_duration_ =
      &prometheus::BuildHistogram()
           .Name("rescale_adapter_apply_duration_seconds")
           .Help(
               "Time to apply one recommendation (PodGroup and PyTorchJob), "
               "retries included.")
           .Register(registry)
           .Add({}, prometheus::Histogram::BucketBoundaries{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                            0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60});
  events_ = &prometheus::BuildCounter()
                 .Name("rescale_adapter_events_total")
                 .Help(
                     "Kubernetes Events for applied changes, by outcome: recorded, failed (POST "
                     "failed; the change stands), rate_limited, dropped (queue full).")
                 .Register(registry);
  // Every outcome from the start, so a rate() over them has a baseline.
  for (const char* outcome : {"recorded", "failed", "rate_limited", "dropped"}) {
    events_->Add({{"outcome", outcome}});
  }
}

AdapterMetrics::~AdapterMetrics() = default;

absl::Status AdapterMetrics::Serve(const std::string& listen) {
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos || colon + 1 == listen.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--metrics-listen \"", listen, "\" is not host:port (empty turns metrics off)"));
  }
  try {
    exposer_ = std::make_unique<prometheus::Exposer>(listen, 1);
  } catch (const std::exception& error) {
    return absl::UnavailableError(absl::StrCat("cannot serve metrics on ", listen,
                                               " (--metrics-listen): address invalid or in use (",
                                               error.what(), ")"));
  }
  const std::vector<int> ports = exposer_->GetListeningPorts();
  if (ports.empty() || ports.front() <= 0) {
    exposer_.reset();
    return absl::UnavailableError(
        absl::StrCat("cannot serve metrics on ", listen, " (--metrics-listen): no port was bound"));
  }
  port_ = ports.front();
  exposer_->RegisterCollectable(registry_);
  return absl::OkStatus();
}

void AdapterMetrics::RecordPatch(const absl::Status& status) {
  if (status.ok()) {
    patches_applied_->Increment();
  } else if (status.code() == absl::StatusCode::kAborted) {
    patches_conflict_->Increment();
  } else {
    patches_failed_->Increment();
  }
}

void AdapterMetrics::RecordApiError(std::string_view verb, absl::StatusCode code) {
  // Family::Add finds the series when it exists: errors are rare, a map
  // lookup each is fine.
  api_errors_->Add({{"verb", std::string(verb)}, {"code", absl::StatusCodeToString(code)}})
      .Increment();
}

void AdapterMetrics::RecordApply(bool ok, absl::Duration took) {
  (ok ? applies_applied_ : applies_failed_)->Increment();
  apply_duration_->Observe(absl::ToDoubleSeconds(took));
}

void AdapterMetrics::RecordEvent(std::string_view outcome) {
  events_->Add({{"outcome", std::string(outcome)}}).Increment();
}

std::string AdapterMetrics::Serialize() const {
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

absl::StatusOr<nlohmann::json> MeteredKubeClient::Get(const std::string& path) {
  absl::StatusOr<nlohmann::json> result = inner_->Get(path);
  if (!result.ok()) metrics_->RecordApiError("get", result.status().code());
  return result;
}

absl::StatusOr<nlohmann::json> MeteredKubeClient::List(const std::string& path,
                                                       const Selectors& selectors) {
  absl::StatusOr<nlohmann::json> result = inner_->List(path, selectors);
  if (!result.ok()) metrics_->RecordApiError("list", result.status().code());
  return result;
}

absl::StatusOr<nlohmann::json> MeteredKubeClient::Patch(const std::string& path,
                                                        const std::string& content_type,
                                                        const nlohmann::json& body) {
  absl::StatusOr<nlohmann::json> result = inner_->Patch(path, content_type, body);
  metrics_->RecordPatch(result.status());
  if (!result.ok()) metrics_->RecordApiError("patch", result.status().code());
  return result;
}

absl::StatusOr<nlohmann::json> MeteredKubeClient::Post(const std::string& path,
                                                       const nlohmann::json& body) {
  absl::StatusOr<nlohmann::json> result = inner_->Post(path, body);
  if (!result.ok()) metrics_->RecordApiError("post", result.status().code());
  return result;
}

absl::Status MeteredKubeClient::Watch(const std::string& path, const Selectors& selectors,
                                      const std::string& resource_version,
                                      const std::function<bool(const WatchEvent&)>& on_event,
                                      const std::atomic<bool>& stop) {
  absl::Status status = inner_->Watch(path, selectors, resource_version, on_event, stop);
  // CANCELLED is the adapter stopping its own watch, not an API error.
  if (!status.ok() && status.code() != absl::StatusCode::kCancelled) {
    metrics_->RecordApiError("watch", status.code());
  }
  return status;
}

}  // namespace rescale::adapter
