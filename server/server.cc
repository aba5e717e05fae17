// RescaleServer: builds the core and the grpc::Server (see server/server.h).
#include "server/server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>
#include <spdlog/spdlog.h>

#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "rescale/read_file.h"
#include "server/observability.h"
#include "server/services.h"

namespace rescale::server {
namespace {

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> Credentials(const ServerOptions& options) {
  if (options.tls_cert_file.empty() && options.tls_key_file.empty()) {
    return grpc::InsecureServerCredentials();
  }
  if (options.tls_cert_file.empty() || options.tls_key_file.empty()) {
    return absl::InvalidArgumentError("--tls_cert_file and --tls_key_file must be set together");
  }
  absl::StatusOr<std::string> cert = ReadFileToString(options.tls_cert_file, "--tls_cert_file");
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = ReadFileToString(options.tls_key_file, "--tls_key_file");
  if (!key.ok()) return key.status();
  grpc::SslServerCredentialsOptions ssl;
  ssl.pem_key_cert_pairs.push_back({*key, *cert});
  return grpc::SslServerCredentials(ssl);
}

constexpr const char* kRescaleServices[] = {
    "rescale.v1.MetricsService", "rescale.v1.JobService", "rescale.v1.RecommendationService",
    "rescale.v1.ClusterService"};

}  // namespace

struct RescaleServer::Impl {
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
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<EtcdLeadership> leadership;
  std::mutex shutdown_mu;
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
    impl->leadership = std::make_unique<EtcdLeadership>(
        options.leadership, options.etcd_client, options.etcd_state, *self->engine_,
        [impl = impl.get()](bool leader) {
          std::lock_guard<std::mutex> lock(impl->shutdown_mu);
          if (impl->shut_down || impl->server == nullptr) return;
          for (const char* service : kRescaleServices) {
            impl->server->GetHealthCheckService()->SetServingStatus(service, leader);
          }
        });
  }
  const Leadership* leadership = impl->leadership.get();
  impl->metrics = std::make_unique<MetricsServiceImpl>(
      *self->engine_, ServiceLimits{.max_batch_samples = options.max_batch_samples}, leadership,
      observability.get());
  impl->jobs = std::make_unique<JobServiceImpl>(*self->engine_, leadership);
  impl->recommendations =
      std::make_unique<RecommendationServiceImpl>(*self->engine_, leadership);
  impl->cluster = std::make_unique<ClusterServiceImpl>(*self->engine_, leadership);

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
    std::lock_guard<std::mutex> lock(impl_->shutdown_mu);
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
