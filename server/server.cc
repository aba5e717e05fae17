// RescaleServer: builds the core and the grpc::Server (see server/server.h).
#include "server/server.h"

#include <fstream>
#include <sstream>

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>
#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "server/services.h"

namespace rescale::server {
namespace {

absl::StatusOr<std::string> ReadFile(const std::string& path, const char* flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat(flag, ": cannot read \"", path, "\""));
  std::stringstream content;
  content << in.rdbuf();
  return content.str();
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> Credentials(const ServerOptions& options) {
  if (options.tls_cert_file.empty() && options.tls_key_file.empty()) {
    return grpc::InsecureServerCredentials();
  }
  if (options.tls_cert_file.empty() || options.tls_key_file.empty()) {
    return absl::InvalidArgumentError("--tls_cert_file and --tls_key_file must be set together");
  }
  absl::StatusOr<std::string> cert = ReadFile(options.tls_cert_file, "--tls_cert_file");
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = ReadFile(options.tls_key_file, "--tls_key_file");
  if (!key.ok()) return key.status();
  grpc::SslServerCredentialsOptions ssl;
  ssl.pem_key_cert_pairs.push_back({*key, *cert});
  return grpc::SslServerCredentials(ssl);
}

}  // namespace

struct RescaleServer::Impl {
  std::unique_ptr<MetricsServiceImpl> metrics;
  std::unique_ptr<JobServiceImpl> jobs;
  std::unique_ptr<RecommendationServiceImpl> recommendations;
  std::unique_ptr<ClusterServiceImpl> cluster;
  std::unique_ptr<grpc::Server> server;
  absl::Mutex shutdown_mu;
  bool shut_down ABSL_GUARDED_BY(shutdown_mu) = false;
  absl::Notification stopped;
};

absl::StatusOr<std::unique_ptr<RescaleServer>> RescaleServer::Start(ServerOptions options) {
  if (options.max_batch_samples < 1 || options.max_watchers < 1 || options.max_jobs < 1 ||
      options.max_pods_per_job < 1 || options.max_sizes_per_job < 1 ||
      options.max_message_bytes < 1024) {
    return absl::InvalidArgumentError(
        "limits must be positive: --max_batch_samples, --max_watchers, --max_jobs, "
        "--max_pods_per_job, --max_sizes_per_job >= 1 and --max_message_bytes >= 1024");
  }
  if (options.window <= absl::ZeroDuration() || options.pod_ttl <= absl::ZeroDuration() ||
      options.horizon <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--window, --pod_ttl and --horizon must be positive");
  }
  if (options.cooldown < absl::ZeroDuration() || options.applied_debounce < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--cooldown and --applied_debounce must not be negative");
  }
  if (!(options.min_step_seconds > 0 && options.min_step_seconds < options.max_step_seconds)) {
    return absl::InvalidArgumentError(
        "--min_step_seconds must be positive and below --max_step_seconds");
  }
  if (options.plan_interval <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--plan_interval must be positive");
  }
  if (options.capacity_gpus < -1 || options.capacity_gpus > UINT32_MAX) {
    return absl::InvalidArgumentError("--capacity_gpus must be -1 (unknown) or a GPU count");
  }
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials = Credentials(options);
  if (!credentials.ok()) return credentials.status();

  std::unique_ptr<RescaleServer> self(new RescaleServer());
  self->options_ = options;

  EngineOptions engine_options;
  engine_options.default_policy = options.default_policy;
  engine_options.max_jobs = options.max_jobs;
  engine_options.max_watchers = options.max_watchers;
  engine_options.auto_register = options.auto_register;
  engine_options.store.window = options.window;
  engine_options.store.max_sample_age = options.window;
  engine_options.store.pod_ttl = options.pod_ttl;
  engine_options.store.max_pods_per_job = options.max_pods_per_job;
  engine_options.store.max_sizes_per_job = options.max_sizes_per_job;
  engine_options.store.min_step_seconds = options.min_step_seconds;
  engine_options.store.max_step_seconds = options.max_step_seconds;
  engine_options.policy.cooldown = options.cooldown;
  engine_options.policy.horizon = options.horizon;
  engine_options.model.gpus_per_node = options.gpus_per_node;
  if (options.capacity_gpus >= 0) {
    engine_options.capacity_gpus = static_cast<uint32_t>(options.capacity_gpus);
  }
  {
    std::vector<std::string> known = DecisionEngine::KnownPolicies();
    if (std::find(known.begin(), known.end(), options.default_policy) == known.end()) {
      return absl::InvalidArgumentError(absl::StrCat("--default_policy \"", options.default_policy,
                                                     "\" is not a known policy"));
    }
  }
  self->engine_ = std::make_unique<DecisionEngine>(engine_options, options.clock);

  auto impl = std::make_unique<Impl>();
  impl->metrics = std::make_unique<MetricsServiceImpl>(
      *self->engine_, ServiceLimits{.max_batch_samples = options.max_batch_samples});
  impl->jobs = std::make_unique<JobServiceImpl>(*self->engine_);
  impl->recommendations = std::make_unique<RecommendationServiceImpl>(*self->engine_);
  impl->cluster = std::make_unique<ClusterServiceImpl>(*self->engine_);

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
  impl->server = builder.BuildAndStart();
  if (impl->server == nullptr || self->port_ == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", options.listen,
                                               ": address invalid or in use (--listen)"));
  }
  grpc::HealthCheckServiceInterface* health = impl->server->GetHealthCheckService();
  health->SetServingStatus(true);
  for (const char* service : {"rescale.v1.MetricsService", "rescale.v1.JobService",
                              "rescale.v1.RecommendationService", "rescale.v1.ClusterService"}) {
    health->SetServingStatus(service, true);
  }
  self->impl_ = std::move(impl);
  self->engine_->Replan();
  if (options.run_plan_timer) {
    self->engine_->StartTimer(options.plan_interval, options.applied_debounce);
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
    absl::MutexLock lock(&impl_->shutdown_mu);
    if (impl_->shut_down) return;
    impl_->shut_down = true;
  }
  engine_->StopTimer();
  impl_->server->GetHealthCheckService()->Shutdown();
  // Watch streams never end on their own: close them first so Shutdown does
  // not wait out the grace period for them.
  engine_->board().CloseAll();
  impl_->server->Shutdown(std::chrono::system_clock::now() + absl::ToChronoNanoseconds(grace));
  impl_->server->Wait();
  impl_->stopped.Notify();
}

void RescaleServer::Wait() {
  if (impl_ != nullptr) impl_->stopped.WaitForNotification();
}

}  // namespace rescale::server
