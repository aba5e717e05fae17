// rescaled's Prometheus metrics (--metrics_listen), through prometheus-cpp.
//
// ServerMetrics owns the registry and, once Serve() is called, the HTTP
// exposer serving it at /metrics. Three kinds of figures feed it:
//   - counted where they happen: samples by outcome (RecordIngest, once per
//     batch, never per sample, so the ingest path pays a few atomic adds per
//     batch), plans (OnPlan, the engine's EngineOptions::plan_observer);
//   - gRPC calls, by a server interceptor (InterceptorFactories) following
//     go-grpc-prometheus's names and labels: grpc_server_started_total,
//     grpc_server_handled_total{grpc_type,grpc_service,grpc_method,grpc_code}
//     (grpc_code spelled as Go's codes.Code.String(): OK, NotFound, ...),
//     grpc_server_handling_seconds;
//   - read from the engine at scrape time (WatchEngine): jobs by state,
//     GPUs, watchers, the last plan's optimality gap, leadership.
// The core library knows nothing of this; labels are bounded (no job ids).
#ifndef RESCALE_SERVER_OBSERVABILITY_H_
#define RESCALE_SERVER_OBSERVABILITY_H_

#include <grpcpp/support/server_interceptor.h>
#include <grpcpp/support/status.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "rescale/decision_engine.h"
#include "rescale/types.h"

namespace prometheus {
class Counter;
class Exposer;
class Histogram;
class Registry;
}  // namespace prometheus

namespace rescale::server {

// One method's grpc_server_* series (observability.cc).
struct GrpcMethodMetrics;

// rescaled's --metrics_listen default. Not ServerOptions' default, which is
// off: tests start many servers in one process and on one machine.
inline constexpr char kDefaultMetricsListen[] = "127.0.0.1:9464";

class ServerMetrics {
 public:
  ServerMetrics();
  ~ServerMetrics();
  ServerMetrics(const ServerMetrics&) = delete;
  ServerMetrics& operator=(const ServerMetrics&) = delete;

  // Starts serving /metrics on `listen` (host:port; port 0 = any free
  // port, see port()). UNAVAILABLE naming --metrics_listen and the address
  // when it cannot bind. Call once.
  absl::Status Serve(const std::string& listen);
  // The bound port; 0 before Serve.
  int port() const { return port_; }

  // Reads jobs, GPUs, watchers and the last plan's gap from `engine` at
  // every scrape. `engine` must outlive this object, or StopServing must
  // be called before it goes.
  void WatchEngine(const DecisionEngine* engine);
  // Stops the HTTP server (its threads end); scrapes fail afterwards.
  void StopServing();

  // One batch's outcome, samples refused for their namespace
  // (IngestResult::rejected_for_permission) included.
  void RecordIngest(const IngestResult& result);
  // A batch refused whole for exceeding --max_batch_samples.
  void RecordBatchTooLarge(uint64_t samples);
  // EngineOptions::plan_observer.
  void OnPlan(const PlanStats& stats);

  // For ServerBuilder::experimental().SetInterceptorCreators: counts and
  // times every call but MetricsService.StreamSamples' (see StreamCall).
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
  InterceptorFactories();

  // The registry, text-serialised as a scrape would see it (tests, logs).
  std::string Serialize() const;

  // The sample stream's grpc_server_* series, recorded by its reactor: the
  // interceptor leaves that one method alone (see InterceptorFactories).
  // Counts the call started when constructed, handled with its status on
  // Finish (once), or CANCELLED when destroyed unfinished. A null
  // ServerMetrics records nothing. Not thread-safe: the reactor's callbacks
  // run one at a time.
  class StreamCall {
   public:
    explicit StreamCall(ServerMetrics* metrics);
    ~StreamCall();
    StreamCall(const StreamCall&) = delete;
    StreamCall& operator=(const StreamCall&) = delete;
    void Finish(const grpc::Status& status);

   private:
    GrpcMethodMetrics* const method_;  // null: nothing recorded
    const std::chrono::steady_clock::time_point started_;
    bool finished_ = false;
  };

  // The interceptor's families (defined in observability.cc).
  class GrpcMetrics;

 private:
  class EngineCollector;

  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Counter* samples_accepted_;
  prometheus::Counter* samples_duplicate_;
  prometheus::Counter* rejected_invalid_;
  prometheus::Counter* rejected_unknown_job_;
  prometheus::Counter* rejected_limit_;
  prometheus::Counter* rejected_batch_too_large_;
  prometheus::Counter* rejected_permission_denied_;
  prometheus::Histogram* plan_duration_;
  prometheus::Counter* plans_unpublished_;
  // Indexed by Action; null for kUnspecified.
  std::array<prometheus::Counter*, kActionCount> changes_by_action_{};
  std::shared_ptr<GrpcMetrics> grpc_;
  std::shared_ptr<EngineCollector> engine_collector_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  int port_ = 0;
};

}  // namespace rescale::server

#endif  // RESCALE_SERVER_OBSERVABILITY_H_
