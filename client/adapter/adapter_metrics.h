// rescale-adapter's Prometheus metrics (--metrics-listen), through
// prometheus-cpp, and MeteredKubeClient, the KubeClient decorator that
// feeds them.
//
// Series (labels bounded: no job ids):
//   rescale_adapter_patches_total{outcome}   PATCHes sent to the API server:
//       applied, conflict (409, re-read and retried), failed
//   rescale_adapter_kube_api_errors_total{verb,code}   failed API requests
//       by verb (get, list, patch, watch, post) and absl code (see kube_client.h:
//       404 NOT_FOUND, 409 ABORTED, 410 OUT_OF_RANGE, 401/403
//       UNAUTHENTICATED/PERMISSION_DENIED, 422/400 INVALID_ARGUMENT, 429,
//       5xx and transport errors UNAVAILABLE). A 404 for a PodGroup flavour
//       that is not installed counts too: the adapter then tries the next.
//   rescale_adapter_applies_total{outcome}   recommendations applied or given
//       up on (applied, failed)
//   rescale_adapter_apply_duration_seconds   time to apply one
//       recommendation, retries included
//   rescale_adapter_events_total{outcome}   Kubernetes Events for applied
//       changes: recorded, failed (the POST failed; the change stands),
//       rate_limited (the job's limit held it back), dropped (queue full)
#ifndef RESCALE_CLIENT_ADAPTER_ADAPTER_METRICS_H_
#define RESCALE_CLIENT_ADAPTER_ADAPTER_METRICS_H_

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "client/adapter/kube_client.h"

namespace prometheus {
class Counter;
template <typename T>
class Family;
class Exposer;
class Histogram;
class Registry;
}  // namespace prometheus

namespace rescale::adapter {

// rescale-adapter's --metrics-listen default: rescaled's 9464 plus one, so
// both can run with their defaults on one machine (make run, a laptop).
inline constexpr char kDefaultAdapterMetricsListen[] = "127.0.0.1:9465";

class AdapterMetrics {
 public:
  AdapterMetrics();
  ~AdapterMetrics();
  AdapterMetrics(const AdapterMetrics&) = delete;
  AdapterMetrics& operator=(const AdapterMetrics&) = delete;

  // Serves /metrics on `listen` (host:port, port 0 = any free port, see
  // port()). UNAVAILABLE naming --metrics-listen and the address when it
  // cannot bind.
  absl::Status Serve(const std::string& listen);
  int port() const { return port_; }

  // One PATCH's answer.
  void RecordPatch(const absl::Status& status);
  // A failed API request.
  void RecordApiError(std::string_view verb, absl::StatusCode code);
  // One recommendation applied (ok) or given up on, and how long it took.
  void RecordApply(bool ok, absl::Duration took);
  // One Event's outcome: "recorded", "failed", "rate_limited", "dropped".
  void RecordEvent(std::string_view outcome);

  // The registry, text-serialised as a scrape would see it.
  std::string Serialize() const;

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Counter* patches_applied_;
  prometheus::Counter* patches_conflict_;
  prometheus::Counter* patches_failed_;
  prometheus::Family<prometheus::Counter>* api_errors_;
  prometheus::Counter* applies_applied_;
  prometheus::Counter* applies_failed_;
  prometheus::Histogram* apply_duration_;
  prometheus::Family<prometheus::Counter>* events_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  int port_ = 0;
};

// Forwards every call to `inner` and records its failures (and every
// PATCH) in `metrics`. Both must outlive it.
class MeteredKubeClient final : public KubeClient {
 public:
  MeteredKubeClient(KubeClient* inner, AdapterMetrics* metrics)
      : inner_(inner), metrics_(metrics) {}

  absl::StatusOr<nlohmann::json> Get(const std::string& path) override;
  absl::StatusOr<nlohmann::json> List(const std::string& path, const Selectors& selectors) override;
  absl::StatusOr<nlohmann::json> Patch(const std::string& path, const std::string& content_type,
                                       const nlohmann::json& body) override;
  absl::StatusOr<nlohmann::json> Post(const std::string& path, const nlohmann::json& body) override;
  absl::Status Watch(const std::string& path, const Selectors& selectors,
                     const std::string& resource_version,
                     const std::function<bool(const WatchEvent&)>& on_event,
                     const std::atomic<bool>& stop) override;
  void Cancel() override { inner_->Cancel(); }

 private:
  KubeClient* const inner_;
  AdapterMetrics* const metrics_;
};

}  // namespace rescale::adapter

#endif  // RESCALE_CLIENT_ADAPTER_ADAPTER_METRICS_H_
