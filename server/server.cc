// RescaleServer: builds the core and the grpc::Server (see server/server.h).
#include "server/server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_credentials_options.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "rescale/address.h"
#include "rescale/mutex.h"
#include "rescale/read_file.h"
#include "server/keda_scaler.h"
#include "server/observability.h"
#include "server/services.h"

namespace rescale::server {
namespace {

// A PEM file that holds at least one of `kind` ("CERTIFICATE", "PRIVATE
// KEY"), checked at start-up so a wrong path or file is an error that names
// the flag, not a failed handshake later.
absl::Status CheckPem(const std::string& path, absl::string_view flag, absl::string_view kind) {
  absl::StatusOr<std::string> pem = ReadFileToString(path, flag);
  if (!pem.ok()) return pem.status();
  if (!absl::StrContains(*pem, "-----BEGIN ") || !absl::StrContains(*pem, kind)) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " \"", path, "\" holds no PEM ", absl::AsciiStrToLower(kind)));
  }
  return absl::OkStatus();
}

// Plaintext without a certificate; otherwise TLS whose files a watcher
// re-reads every reload interval, so a rotated certificate (or CA) serves
// new connections without a restart. With a client CA, clients must
// present a certificate that chains to it (or, when certificates are
// optional, may present one).
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> Credentials(const ServerOptions& options) {
  if (options.tls_client_certificate_optional && options.tls_client_ca_file.empty()) {
    return absl::InvalidArgumentError(
        "--tls_client_auth=optional needs --tls_client_ca_file: the CA that client certificates "
        "are verified against");
  }
  if (options.tls_cert_file.empty() && options.tls_key_file.empty()) {
    if (!options.tls_client_ca_file.empty()) {
      return absl::InvalidArgumentError(
          "--tls_client_ca_file needs TLS: set --tls_cert_file and --tls_key_file too");
    }
    return grpc::InsecureServerCredentials();
  }
  if (options.tls_cert_file.empty() || options.tls_key_file.empty()) {
    return absl::InvalidArgumentError("--tls_cert_file and --tls_key_file must be set together");
  }
  if (absl::Status ok = CheckPem(options.tls_cert_file, "--tls_cert_file", "CERTIFICATE");
      !ok.ok()) {
    return ok;
  }
  if (absl::Status ok = CheckPem(options.tls_key_file, "--tls_key_file", "PRIVATE KEY"); !ok.ok()) {
    return ok;
  }
  const bool mutual = !options.tls_client_ca_file.empty();
  if (mutual) {
    if (absl::Status ok =
            CheckPem(options.tls_client_ca_file, "--tls_client_ca_file", "CERTIFICATE");
        !ok.ok()) {
      return ok;
    }
  }
  const auto interval = static_cast<unsigned int>(
      std::max<int64_t>(1, absl::ToInt64Seconds(options.credentials_reload_interval)));
  auto files = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
      options.tls_key_file, options.tls_cert_file, options.tls_client_ca_file, interval);
  grpc::experimental::TlsServerCredentialsOptions tls(files);
  tls.watch_identity_key_cert_pairs();
  if (mutual) {
    tls.watch_root_certs();
    tls.set_cert_request_type(options.tls_client_certificate_optional
                                  ? GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY
                                  : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  } else {
    tls.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  }
  return grpc::experimental::TlsServerCredentials(tls);
}

constexpr const char* kRescaleServices[] = {"rescale.v1.MetricsService", "rescale.v1.JobService",
                                            "rescale.v1.RecommendationService",
                                            "rescale.v1.ClusterService"};

}  // namespace

struct RescaleServer::Impl {
  // Before the services and the server, which use them until they stop.
  std::unique_ptr<Authenticator> auth;
  std::unique_ptr<AuditLog> audit;
  // Stops serving /metrics before the engine it reads goes (Impl is
  // destroyed first, see RescaleServer's members).
  ~Impl() {
    if (observability != nullptr) observability->StopServing();
  }
  // Null when metrics are off.
  std::shared_ptr<ServerMetrics> observability;
  std::unique_ptr<MetricsServiceImpl> metrics;
  std::unique_ptr<JobServiceImpl> jobs;
  std::unique_ptr<RecommendationServiceImpl> recommendations;
  std::unique_ptr<ClusterServiceImpl> cluster;
  std::unique_ptr<ExternalScalerImpl> keda;
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<EtcdLeadership> leadership;
  Mutex shutdown_mu;
  bool shut_down ABSL_GUARDED_BY(shutdown_mu) = false;
  absl::Notification stopped;
};

absl::StatusOr<std::unique_ptr<RescaleServer>> RescaleServer::Start(ServerOptions options) {
  if (options.max_batch_samples < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_batch_samples must be at least 1, got ", options.max_batch_samples));
  }
  if (options.max_message_bytes < 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_message_bytes must be at least 1024, got ", options.max_message_bytes));
  }
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials = Credentials(options);
  if (!credentials.ok()) return credentials.status();
  const bool tls = !options.tls_cert_file.empty();
  const bool authenticated =
      !options.auth_token_file.empty() || !options.tls_client_ca_file.empty();
  if (!IsLocalAddress(options.listen) && !(tls && authenticated) && !options.insecure) {
    return absl::FailedPreconditionError(absl::StrCat(
        "refusing to serve ", options.listen, " without ",
        tls ? "authentication" : (authenticated ? "TLS" : "TLS and authentication"),
        ": anyone who can reach it could deregister every job or set the capacity to 0. Set "
        "--tls_cert_file and --tls_key_file, and --auth_token_file or --tls_client_ca_file; "
        "listen on 127.0.0.1; or pass --insecure to accept the risk"));
  }
  absl::StatusOr<std::unique_ptr<Authenticator>> auth =
      Authenticator::Create({.token_file = options.auth_token_file,
                             .client_certificates = !options.tls_client_ca_file.empty(),
                             .reload_interval = options.credentials_reload_interval});
  if (!auth.ok()) return auth.status();
  absl::StatusOr<std::unique_ptr<AuditLog>> audit = AuditLog::Create(
      options.audit_log_format, options.audit_sink != nullptr
                                    ? options.audit_sink
                                    : std::make_shared<spdlog::sinks::stderr_sink_mt>());
  if (!audit.ok()) return audit.status();
  if (options.etcd_state != nullptr) {
    // A follower until elected: it loads the state, plans nothing.
    options.engine.state = options.etcd_state;
    options.engine.start_leading = false;
  }
  std::shared_ptr<ServerMetrics> observability;
  if (!options.metrics_listen.empty()) {
    observability = std::make_shared<ServerMetrics>();
    options.engine.plan_observer = [observability](const PlanStats& stats) {
      observability->OnPlan(stats);
    };
  }
  absl::StatusOr<std::unique_ptr<DecisionEngine>> engine =
      DecisionEngine::Create(options.engine, options.clock);
  if (!engine.ok()) return engine.status();

  std::unique_ptr<RescaleServer> self(new RescaleServer());
  self->options_ = options;
  self->engine_ = *std::move(engine);

  auto impl = std::make_unique<Impl>();
  if (observability != nullptr) {
    impl->observability = observability;
    observability->WatchEngine(self->engine_.get());
    // Before the gRPC port: a metrics address that cannot be bound stops
    // start-up before anything is served.
    if (absl::Status served = observability->Serve(options.metrics_listen); !served.ok()) {
      return served;
    }
  }
  if (options.etcd_state != nullptr) {
    // Its role changes turn the Rescale services' health on and off, so a
    // Service whose readiness probe asks for one of them routes to the
    // leader only. The overall health ("") stays SERVING: a follower is
    // alive.
    absl::StatusOr<std::unique_ptr<EtcdLeadership>> leadership = EtcdLeadership::Create(
        options.leadership, options.etcd_client, options.etcd_state, *self->engine_,
        [impl = impl.get()](bool leader) {
          MutexLock lock(impl->shutdown_mu);
          if (impl->shut_down || impl->server == nullptr) return;
          for (const char* service : kRescaleServices) {
            impl->server->GetHealthCheckService()->SetServingStatus(service, leader);
          }
        },
        options.clock != nullptr ? options.clock : Clock::Real());
    if (!leadership.ok()) return leadership.status();
    impl->leadership = *std::move(leadership);
  }
  const Leadership* leadership = impl->leadership.get();
  impl->auth = *std::move(auth);
  impl->audit = *std::move(audit);
  impl->auth->StartReloading();
  const CallSecurity security{.auth = impl->auth.get(), .audit = impl->audit.get()};
  impl->metrics = std::make_unique<MetricsServiceImpl>(
      *self->engine_, ServiceLimits{.max_batch_samples = options.max_batch_samples}, leadership,
      security, observability.get());
  impl->jobs = std::make_unique<JobServiceImpl>(*self->engine_, leadership, security);
  impl->recommendations =
      std::make_unique<RecommendationServiceImpl>(*self->engine_, leadership, security);
  impl->cluster = std::make_unique<ClusterServiceImpl>(*self->engine_, leadership, security);
  impl->keda = std::make_unique<ExternalScalerImpl>(*self->engine_, security);

  // Both are process-wide switches; they must be set before building.
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();

  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.listen, *credentials, &self->port_);
  builder.SetMaxReceiveMessageSize(options.max_message_bytes);
  builder.SetMaxSendMessageSize(options.max_message_bytes);
  builder.RegisterService(impl->metrics.get());
  builder.RegisterService(impl->jobs.get());
  builder.RegisterService(impl->recommendations.get());
  builder.RegisterService(impl->cluster.get());
  builder.RegisterService(impl->keda.get());
  if (observability != nullptr) {
    builder.experimental().SetInterceptorCreators(observability->InterceptorFactories());
  }
  impl->server = builder.BuildAndStart();
  if (impl->server == nullptr || self->port_ == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", options.listen,
                                               ": address invalid or in use (--listen)"));
  }
  grpc::HealthCheckServiceInterface* health = impl->server->GetHealthCheckService();
  health->SetServingStatus(true);
  for (const char* service : kRescaleServices) {
    health->SetServingStatus(service, impl->leadership == nullptr);
  }
  // Read-only, so every replica serves it, leader or not.
  health->SetServingStatus(externalscaler::ExternalScaler::service_full_name(), true);
  self->impl_ = std::move(impl);
  self->engine_->Replan();  // nothing on a follower
  if (options.run_plan_timer) {
    self->engine_->StartTimer();
  }
  if (self->impl_->leadership != nullptr) {
    // Not set: what this server can be dialled at, as tests and a single
    // machine see it.
    if (options.leadership.advertise_address.empty()) {
      self->impl_->leadership->SetAdvertiseAddress(self->address());
    }
    self->impl_->leadership->Start();
  }
  return self;
}

RescaleServer::~RescaleServer() { Shutdown(absl::ZeroDuration()); }

std::string RescaleServer::address() const {
  // Keep the host the user asked for; swap in the bound port.
  std::string host = options_.listen.substr(0, options_.listen.rfind(':'));
  if (host.empty() || host == "0.0.0.0" || host == "[::]") host = "127.0.0.1";
  return absl::StrCat(host, ":", port_);
}

void RescaleServer::Shutdown(absl::Duration grace) {
  if (impl_ == nullptr) return;
  {
    MutexLock lock(impl_->shutdown_mu);
    if (impl_->shut_down) return;
    impl_->shut_down = true;
  }
  // A leader resigns first, so a follower takes over at once.
  if (impl_->leadership != nullptr) impl_->leadership->Stop();
  engine_->StopTimer();
  impl_->server->GetHealthCheckService()->Shutdown();
  // Watch streams never end on their own: close them first so Shutdown does
  // not wait out the grace period for them.
  engine_->CloseWatches();
  impl_->server->Shutdown(std::chrono::system_clock::now() + absl::ToChronoNanoseconds(grace));
  impl_->server->Wait();
  impl_->stopped.Notify();
}

absl::Status RescaleServer::ReloadCredentials() {
  if (impl_ == nullptr || impl_->auth == nullptr) return absl::OkStatus();
  return impl_->auth->ReloadIfChanged();
}

std::string RescaleServer::MetricsText() const {
  return impl_ != nullptr && impl_->observability != nullptr ? impl_->observability->Serialize()
                                                             : "";
}

int RescaleServer::metrics_port() const {
  return impl_ != nullptr && impl_->observability != nullptr ? impl_->observability->port() : 0;
}

const Leadership* RescaleServer::leadership() const {
  return impl_ != nullptr ? impl_->leadership.get() : nullptr;
}

void RescaleServer::Wait() {
  if (impl_ != nullptr) impl_->stopped.WaitForNotification();
}

}  // namespace rescale::server
