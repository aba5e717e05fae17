// RescaleServer: the gRPC front of rescaled, wired to the core library.
//
// It owns the core components (job registry, metrics store, recommendation
// board, decision engine) and a grpc::Server serving rescale.v1's four
// services, grpc.health.v1.Health and server reflection. main() parses flags
// into ServerOptions; tests start it on port 0 in-process.
#ifndef RESCALE_SERVER_SERVER_H_
#define RESCALE_SERVER_SERVER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "rescale/clock.h"
#include "rescale/decision_engine.h"

namespace rescale::server {

struct ServerOptions {
  // host:port to listen on; port 0 picks a free port (see RescaleServer::port).
  std::string listen = "127.0.0.1:50051";
  // Time between periodic replans; events also trigger a replan.
  absl::Duration plan_interval = absl::Seconds(30);
  // GPUs the planner may hand out; -1 = unknown (unbounded until SetCapacity).
  int64_t capacity_gpus = -1;
  // Policy for jobs whose spec leaves `policy` empty.
  std::string default_policy = "planner";
  // Concurrent WatchRecommendations streams; more get RESOURCE_EXHAUSTED.
  int max_watchers = 1024;
  // Samples in one SampleBatch; a larger batch gets INVALID_ARGUMENT.
  int max_batch_samples = 10000;
  // Largest gRPC message accepted, bytes.
  int max_message_bytes = 4 << 20;
  // Registered jobs; more get RESOURCE_EXHAUSTED.
  int max_jobs = 10000;
  // Samples for unknown jobs register them with defaults instead of being
  // rejected.
  bool auto_register = false;
  // Metrics store: statistics window, pod forgetting, memory limits.
  absl::Duration window = absl::Minutes(10);
  absl::Duration pod_ttl = absl::Minutes(5);
  int max_pods_per_job = 1024;
  int max_sizes_per_job = 64;
  // Plausible step_seconds; samples outside are rejected.
  double min_step_seconds = 1e-6;
  double max_step_seconds = 3600;
  // Policies: no change for `cooldown` after an applied one; a scale-up must
  // repay its restart cost within `horizon`.
  absl::Duration cooldown = absl::Seconds(60);
  absl::Duration horizon = absl::Minutes(10);
  // GPUs per node, so the throughput model knows which sizes span nodes
  // (replicas packed onto the fewest nodes); 0 = unknown, one node assumed.
  uint32_t gpus_per_node = 0;
  // A burst of ReportApplied calls is planned once, this long after the
  // first (needs the plan timer; without it they replan inline).
  absl::Duration applied_debounce = absl::Milliseconds(200);
  // Whether a background thread replans every plan_interval. Tests turn it
  // off and trigger replans through events.
  bool run_plan_timer = true;
  // TLS: PEM files. Empty cert = plaintext.
  std::string tls_cert_file;
  std::string tls_key_file;
  // Injected clock; null = the real clock.
  Clock* clock = nullptr;
};

class RescaleServer {
 public:
  // Builds the core, binds, and starts serving. Errors name the address.
  static absl::StatusOr<std::unique_ptr<RescaleServer>> Start(ServerOptions options);
  ~RescaleServer();

  RescaleServer(const RescaleServer&) = delete;
  RescaleServer& operator=(const RescaleServer&) = delete;

  // The bound port (useful with port 0) and a dialable "host:port".
  int port() const { return port_; }
  std::string address() const;

  // Stops accepting RPCs, closes watch streams with UNAVAILABLE, lets
  // in-flight unary RPCs finish for up to `grace`, stops the plan timer.
  // Idempotent.
  void Shutdown(absl::Duration grace = absl::Seconds(5));
  // Blocks until Shutdown has completed.
  void Wait();

  DecisionEngine& engine() { return *engine_; }

 private:
  struct Impl;
  RescaleServer() = default;

  ServerOptions options_;
  int port_ = 0;
  std::unique_ptr<DecisionEngine> engine_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace rescale::server

#endif  // RESCALE_SERVER_SERVER_H_
