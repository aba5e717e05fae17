// RescaleServer: the gRPC front of rescaled, wired to the core library.
//
// It owns the decision engine (which owns the job registry, the metrics store
// and the recommendation board) and a grpc::Server serving rescale.v1's four
// services, grpc.health.v1.Health and server reflection. main() parses flags
// into ServerOptions; tests start it on port 0 in-process.
#ifndef RESCALE_SERVER_SERVER_H_
#define RESCALE_SERVER_SERVER_H_

#include <spdlog/common.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "rescale/clock.h"
#include "rescale/decision_engine.h"
#include "server/etcd/etcd_leadership.h"

namespace rescale::server {

// What rescaled runs with. The engine's options are embedded, not copied:
// their defaults and their checks live in EngineOptions and
// DecisionEngine::Create; these are only the server's own.
struct ServerOptions {
  // host:port to listen on; port 0 picks a free port (see RescaleServer::port).
  std::string listen = "127.0.0.1:50051";
  // Samples in one SampleBatch; a larger batch gets INVALID_ARGUMENT. >= 1.
  int max_batch_samples = 10000;
  // Largest gRPC message accepted, bytes. >= 1024.
  int max_message_bytes = 4 << 20;
  // Whether a background thread replans every engine.plan_interval. Tests
  // turn it off and trigger replans through events.
  bool run_plan_timer = true;
  // TLS: PEM files. Empty cert = plaintext. Re-read when they change
  // (cert-manager rotates them), checked every credentials_reload_interval;
  // connections made before keep the certificate they were made with.
  std::string tls_cert_file;
  std::string tls_key_file;
  // Mutual TLS: PEM CAs that client certificates must chain to. Set, every
  // client must present a valid certificate, and one without a token is
  // identified by it (CN = user, O = role; see server/auth.h).
  std::string tls_client_ca_file;
  // With tls_client_ca_file: a client may also connect without a
  // certificate, and must then send a token; a certificate it presents is
  // still verified (rescaled --tls_client_auth=optional). For deployments
  // where some clients cannot send tokens (KEDA's external scaler client)
  // and others have no certificate (rescale-adapter, agents).
  bool tls_client_certificate_optional = false;
  // Tokens, one identity per line (server/auth.h). Empty, and without
  // client certificates, every caller is anonymous and may do everything.
  std::string auth_token_file;
  // How often the certificate, key, CA and token files are checked for
  // changes. >= 1s.
  absl::Duration credentials_reload_interval = absl::Seconds(10);
  // Serving a non-loopback address without TLS and authentication is
  // refused unless this is set (rescaled --insecure).
  bool insecure = false;
  // The audit log's format (text or json, as --log_format) and where it
  // goes; a null sink is stderr.
  std::string audit_log_format = "text";
  spdlog::sink_ptr audit_sink;
  // host:port to serve Prometheus metrics on at /metrics (port 0 = any
  // free port, see metrics_port()); empty = no metrics. Off here, on in
  // rescaled (--metrics_listen, kDefaultMetricsListen): tests start many
  // servers at once.
  std::string metrics_listen;
  // Injected clock; null = the real clock.
  Clock* clock = nullptr;
  // Jobs, limits, the metrics store, policies, the planner and the plan
  // timer (see rescale/decision_engine.h).
  EngineOptions engine;
  // High availability: the state in etcd, shared with other replicas
  // (rescaled --state=etcd://...). Set, it replaces engine.state; the
  // server starts as a follower and campaigns to lead (EtcdLeadership).
  // An empty leadership.advertise_address advertises address().
  std::shared_ptr<EtcdClient> etcd_client;
  std::shared_ptr<EtcdStateStore> etcd_state;
  LeadershipOptions leadership;
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
  // The port /metrics is served on; 0 when metrics are off.
  int metrics_port() const;
  // The metrics as a scrape would see them; empty when metrics are off.
  std::string MetricsText() const;

  // Stops accepting RPCs, closes watch streams with UNAVAILABLE, lets
  // in-flight unary RPCs finish for up to `grace`, stops the plan timer.
  // Idempotent.
  void Shutdown(absl::Duration grace = absl::Seconds(5));
  // Blocks until Shutdown has completed.
  void Wait();

  // Re-reads --auth_token_file now if it changed (SIGHUP; a thread also
  // checks every credentials_reload_interval). On an error the previous
  // identities stay in force and the error names the file and line.
  absl::Status ReloadCredentials();

  DecisionEngine& engine() { return *engine_; }
  // Null without high availability.
  const Leadership* leadership() const;

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
