// rescaled: the Rescale decision service.
//
// Usage:
//   rescaled                         # 127.0.0.1:50051, plaintext, defaults
//   rescaled --listen=0.0.0.0:50051 --capacity_gpus=64 --log_format=json
//   rescaled --tls_cert_file=tls.crt --tls_key_file=tls.key
//   rescaled --listen=0.0.0.0:50051 --tls_cert_file=tls.crt --tls_key_file=tls.key
//            --tls_client_ca_file=ca.crt --auth_token_file=tokens.csv
//   rescaled --metrics_listen=0.0.0.0:9464   # Prometheus at /metrics; empty = off
// A non-loopback --listen needs TLS and authentication, or --insecure.
// Flags are parsed here and only here, into ServerOptions. SIGHUP re-reads
// --auth_token_file. SIGINT or SIGTERM shut down cleanly: health turns
// NOT_SERVING, watch streams end with UNAVAILABLE, in-flight calls get
// --shutdown_grace to finish.
#include <spdlog/spdlog.h>

#include <csignal>
#include <cstdlib>
#include <iostream>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/time/time.h"
#include "rescale/logging.h"
#include "rescale/state_store.h"
#include "server/observability.h"
#include "server/server.h"

namespace {
// Flag defaults are the options' own defaults, so they are stated once.
const rescale::server::ServerOptions kDefaults;
const rescale::EngineOptions& kEngine = kDefaults.engine;

// How callers reach and prove themselves, for the start-up line.
std::string TransportSecurity(const rescale::server::ServerOptions& options) {
  std::string text = options.tls_cert_file.empty()        ? "plaintext"
                     : options.tls_client_ca_file.empty() ? "TLS"
                     : options.tls_client_certificate_optional
                         ? "TLS with optional client certificates"
                         : "mutual TLS";
  if (!options.auth_token_file.empty()) text += ", tokens";
  if (options.auth_token_file.empty() && options.tls_client_ca_file.empty()) {
    text += ", no authentication";
  }
  return text;
}
}  // namespace

ABSL_FLAG(std::string, listen, kDefaults.listen,
          "host:port to serve gRPC on (port 0 = any free port)");
ABSL_FLAG(std::string, log_format, "text", "log format: text or json (one object per line)");
ABSL_FLAG(std::string, log_level, "info", "log level: trace, debug, info, warn, error");
ABSL_FLAG(absl::Duration, plan_interval, kEngine.plan_interval,
          "time between periodic replans (events also replan at once)");
ABSL_FLAG(int64_t, capacity_gpus, -1,
          "GPUs the planner may hand out; -1 = unknown until ClusterService.SetCapacity");
ABSL_FLAG(std::string, default_policy, kEngine.default_policy,
          "policy for jobs whose spec leaves `policy` empty");
ABSL_FLAG(int, max_jobs, kEngine.max_jobs, "registered jobs at most");
ABSL_FLAG(int, max_watchers, kEngine.max_watchers,
          "concurrent WatchRecommendations streams at most");
ABSL_FLAG(int, max_batch_samples, kDefaults.max_batch_samples,
          "samples in one SampleBatch at most");
ABSL_FLAG(int, max_message_bytes, kDefaults.max_message_bytes, "largest gRPC message, bytes");
ABSL_FLAG(bool, auto_register, kEngine.auto_register,
          "samples for unknown jobs register them with defaults instead of being rejected");
ABSL_FLAG(absl::Duration, window, kEngine.store.window,
          "span of the windowed step-time statistics");
ABSL_FLAG(absl::Duration, pod_ttl, kEngine.store.pod_ttl, "pods unseen this long are forgotten");
ABSL_FLAG(int, max_pods_per_job, kEngine.store.max_pods_per_job,
          "pods tracked per job at most (also at most 4 x max_replicas + 16)");
ABSL_FLAG(int, max_sizes_per_job, kEngine.store.max_sizes_per_job,
          "distinct (GPU type, world size) pairs tracked per job at most");
ABSL_FLAG(double, min_step_seconds, kEngine.store.min_step_seconds,
          "samples with a shorter step_seconds are rejected as implausible");
ABSL_FLAG(double, max_step_seconds, kEngine.store.max_step_seconds,
          "samples with a longer step_seconds are rejected as implausible");
ABSL_FLAG(absl::Duration, cooldown, kEngine.policy.cooldown,
          "no replica change for this long after the cluster applied one (per job: "
          "parameters.cooldown_seconds)");
ABSL_FLAG(absl::Duration, horizon, kEngine.policy.horizon,
          "a scale-up must repay its restart cost within this span");
ABSL_FLAG(std::string, objective,
          std::string(rescale::PlanObjectiveName(kEngine.planner.objective)),
          "what the planner optimises above the gang and priority rules: jct (lowest average "
          "job completion time: GPUs to the jobs with the least work left) or fair (balanced "
          "speedups)");
ABSL_FLAG(uint32_t, gpus_per_node, kEngine.model.gpus_per_node,
          "GPUs per node: the throughput model adds an inter-node term for sizes that span "
          "nodes (replicas packed onto the fewest nodes); 0 = unknown, one node assumed");
ABSL_FLAG(bool, plan_on_measured_points, kEngine.plan_on_measured_points,
          "plan on a job's measured sizes themselves where the throughput model misses one by "
          "more than 10% beyond its noise (prior points always are); off: measurements taken at "
          "varying placements are left to the model");
ABSL_FLAG(absl::Duration, applied_debounce, kEngine.applied_debounce,
          "a burst of ReportApplied calls is planned once, this long after the first");
ABSL_FLAG(absl::Duration, plan_coalesce, kEngine.plan_coalesce,
          "RegisterJob, UpdateJob, DeregisterJob and SetCapacity calls arriving together are "
          "planned once, this long after the first; their replies return before that plan "
          "(plan_pending). 0 = each plans before it replies");
ABSL_FLAG(int, plan_thread_nice, kEngine.plan_thread_nice,
          "nice value of the thread that plans (0-19): plans yield the CPU to calls when the "
          "machine is busy; 0 = the process's own priority");
ABSL_FLAG(std::string, tls_cert_file, "",
          "PEM server certificate chain; enables TLS with --tls_key_file");
ABSL_FLAG(std::string, tls_key_file, "", "PEM private key of --tls_cert_file");
ABSL_FLAG(std::string, tls_client_ca_file, "",
          "mutual TLS: PEM CAs client certificates must chain to; every client must present "
          "one, and a client without a token is identified by it (CN = user, O = role)");
ABSL_FLAG(std::string, tls_client_auth, "require",
          "with --tls_client_ca_file: require (every client presents a certificate) or optional "
          "(a client may present one, verified and then identifying it, or else send a token; "
          "for KEDA, which cannot send tokens, next to clients without certificates)");
ABSL_FLAG(std::string, auth_token_file, "",
          "CSV file of identities, one per line: token,user,role,namespaces (role reporter, "
          "viewer, controller or admin; namespaces * or ns1;ns2); clients send "
          "`authorization: Bearer TOKEN`. Re-read when it changes");
ABSL_FLAG(absl::Duration, credentials_reload_interval, kDefaults.credentials_reload_interval,
          "how often the TLS files and --auth_token_file are checked for changes (>= 1s)");
ABSL_FLAG(bool, insecure, false,
          "allow a non-loopback --listen without TLS and authentication (anyone who can reach "
          "the port may then change anything)");
ABSL_FLAG(std::string, state, "sqlite:rescale-state.db",
          "where jobs, applied state, capacity, recommendations and measurements are kept "
          "across restarts: sqlite:PATH (one SQLite file; the default is rescale-state.db in "
          "the working directory; a file that is damaged, in use or from a newer rescaled "
          "stops start-up), etcd://HOST:PORT[,HOST:PORT...]/PREFIX (high availability: "
          "replicas on the same prefix elect one leader) or memory (nothing is kept: tests, "
          "trials)");
ABSL_FLAG(absl::Duration, lease_ttl, rescale::server::LeadershipOptions().lease_ttl,
          "with --state=etcd://: TTL of the leader's etcd lease, how long a leader that "
          "stopped answering keeps the others from taking over (whole seconds, >= 1s)");
ABSL_FLAG(std::string, advertise_address, "",
          "with --state=etcd://: host:port other replicas send clients to when this one "
          "leads (e.g. the pod's IP and port); empty = the --listen address");
ABSL_FLAG(std::string, metrics_listen, rescale::server::kDefaultMetricsListen,
          "host:port to serve Prometheus metrics on at /metrics (port 0 = any free port; empty "
          "= no metrics). 9464 is OpenTelemetry's Prometheus exporter port; rescale-adapter "
          "defaults to 9465 so both can run on one machine");
ABSL_FLAG(absl::Duration, shutdown_grace, absl::Seconds(5),
          "how long in-flight calls may run after SIGINT/SIGTERM");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "rescaled: elastic-scaling decision service for distributed training.\n"
      "Serves rescale.v1 (Metrics, Job, Recommendation, Cluster), grpc.health.v1 and "
      "reflection.");
  absl::ParseCommandLine(argc, argv);
  if (absl::Status logging = rescale::ConfigureLogging("rescaled", absl::GetFlag(FLAGS_log_format),
                                                       absl::GetFlag(FLAGS_log_level));
      !logging.ok()) {
    std::cerr << "rescaled: --log_format/--log_level: " << logging.message() << "\n";
    return 2;
  }

  // Block the shutdown signals in every thread (gRPC's threads inherit this
  // mask) so that only the sigwait below receives them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  rescale::server::ServerOptions options;
  options.listen = absl::GetFlag(FLAGS_listen);
  options.max_batch_samples = absl::GetFlag(FLAGS_max_batch_samples);
  options.max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  options.tls_cert_file = absl::GetFlag(FLAGS_tls_cert_file);
  options.tls_key_file = absl::GetFlag(FLAGS_tls_key_file);
  options.tls_client_ca_file = absl::GetFlag(FLAGS_tls_client_ca_file);
  const std::string client_auth = absl::GetFlag(FLAGS_tls_client_auth);
  if (client_auth != "require" && client_auth != "optional") {
    std::cerr << "rescaled: --tls_client_auth must be require or optional, got \"" << client_auth
              << "\"\n";
    return 2;
  }
  options.tls_client_certificate_optional = client_auth == "optional";
  options.auth_token_file = absl::GetFlag(FLAGS_auth_token_file);
  options.credentials_reload_interval = absl::GetFlag(FLAGS_credentials_reload_interval);
  options.insecure = absl::GetFlag(FLAGS_insecure);
  options.audit_log_format = absl::GetFlag(FLAGS_log_format);
  options.metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
  rescale::EngineOptions& engine = options.engine;
  engine.plan_interval = absl::GetFlag(FLAGS_plan_interval);
  engine.applied_debounce = absl::GetFlag(FLAGS_applied_debounce);
  engine.plan_coalesce = absl::GetFlag(FLAGS_plan_coalesce);
  engine.plan_on_measured_points = absl::GetFlag(FLAGS_plan_on_measured_points);
  engine.plan_thread_nice = absl::GetFlag(FLAGS_plan_thread_nice);
  const int64_t capacity = absl::GetFlag(FLAGS_capacity_gpus);
  if (capacity < -1 || capacity > UINT32_MAX) {
    std::cerr << "rescaled: --capacity_gpus must be -1 (unknown) or a GPU count up to "
              << UINT32_MAX << ", got " << capacity << "\n";
    return 2;
  }
  if (capacity >= 0) engine.capacity_gpus = static_cast<uint32_t>(capacity);
  engine.default_policy = absl::GetFlag(FLAGS_default_policy);
  engine.max_jobs = absl::GetFlag(FLAGS_max_jobs);
  engine.max_watchers = absl::GetFlag(FLAGS_max_watchers);
  engine.auto_register = absl::GetFlag(FLAGS_auto_register);
  // The window is both the span of the statistics and the age past which a
  // sample no longer counts.
  engine.store.window = engine.store.max_sample_age = absl::GetFlag(FLAGS_window);
  engine.store.pod_ttl = absl::GetFlag(FLAGS_pod_ttl);
  engine.store.max_pods_per_job = absl::GetFlag(FLAGS_max_pods_per_job);
  engine.store.max_sizes_per_job = absl::GetFlag(FLAGS_max_sizes_per_job);
  engine.store.min_step_seconds = absl::GetFlag(FLAGS_min_step_seconds);
  engine.store.max_step_seconds = absl::GetFlag(FLAGS_max_step_seconds);
  engine.policy.cooldown = absl::GetFlag(FLAGS_cooldown);
  engine.policy.horizon = absl::GetFlag(FLAGS_horizon);
  engine.model.gpus_per_node = absl::GetFlag(FLAGS_gpus_per_node);
  const std::string objective = absl::GetFlag(FLAGS_objective);
  if (auto parsed = rescale::ParsePlanObjective(objective)) {
    engine.planner.objective = *parsed;
  } else {
    spdlog::critical("cannot start: --objective \"{}\" is not one of jct, fair", objective);
    return 1;
  }

  const std::string state = absl::GetFlag(FLAGS_state);
  if (state.starts_with("etcd://")) {
    absl::StatusOr<rescale::server::EtcdSpec> spec = rescale::server::ParseEtcdSpec(state);
    const absl::Duration ttl = absl::GetFlag(FLAGS_lease_ttl);
    if (!spec.ok()) {
      std::cerr << "rescaled: --state: " << spec.status().message() << "\n";
      return 2;
    }
    rescale::server::LeadershipOptions leadership;
    leadership.lease_ttl = ttl;
    if (absl::Status valid = rescale::server::ValidateLeadershipOptions(leadership); !valid.ok()) {
      std::cerr << "rescaled: --" << valid.message() << "\n";
      return 2;
    }
    options.etcd_client = std::make_shared<rescale::server::EtcdClient>(spec->endpoints);
    absl::StatusOr<std::unique_ptr<rescale::server::EtcdStateStore>> store =
        rescale::server::EtcdStateStore::Open(state, options.etcd_client, spec->prefix);
    if (!store.ok()) {
      spdlog::critical("cannot start: {}", std::string(store.status().message()));
      return 1;
    }
    options.etcd_state = *std::move(store);
    options.leadership.lease_ttl = ttl;
    options.leadership.advertise_address = absl::GetFlag(FLAGS_advertise_address);
  } else if (state != "memory") {
    absl::StatusOr<std::unique_ptr<rescale::StateStore>> store = rescale::OpenStateStore(state);
    if (!store.ok()) {
      spdlog::critical("cannot start: {}", std::string(store.status().message()));
      return 1;
    }
    engine.state = *std::move(store);
  }

  if (options.insecure) {
    spdlog::warn(
        "--insecure: callers are not required to use TLS and authentication on {}; anyone who can "
        "reach it may change anything",
        options.listen);
  }
  auto server = rescale::server::RescaleServer::Start(options);
  if (!server.ok()) {
    spdlog::critical("cannot start: {}", std::string(server.status().message()));
    return 1;
  }
  // The capacity as the engine has it: a kept one wins over the flag.
  const std::optional<uint32_t> capacity_now = (*server)->engine().GetCluster().total_gpus;
  // With etcd the capacity is the leader's: a follower shows what it loaded.
  spdlog::info(
      "rescaled serving on {} ({}; state {}; capacity {}; default policy {}; objective {}; plan "
      "interval {})",
      (*server)->address(), TransportSecurity(options), state,
      capacity_now ? std::to_string(*capacity_now) + " GPUs" : std::string("unknown"),
      engine.default_policy, rescale::PlanObjectiveName(engine.planner.objective),
      absl::FormatDuration(engine.plan_interval));

  if ((*server)->metrics_port() != 0) {
    spdlog::info("metrics at http://{}:{}/metrics (--metrics_listen={})",
                 options.metrics_listen.substr(0, options.metrics_listen.rfind(':')),
                 (*server)->metrics_port(), options.metrics_listen);
  }

  int received = 0;
  // SIGHUP re-reads the token file at once (it is also checked every
  // --credentials_reload_interval).
  while (sigwait(&signals, &received) == 0 && received == SIGHUP) {
    if (absl::Status reloaded = (*server)->ReloadCredentials(); !reloaded.ok()) {
      spdlog::error("SIGHUP: token file not reloaded, the previous one stays in force: {}",
                    std::string(reloaded.message()));
    }
  }
  spdlog::info("received {}; shutting down", received == SIGINT ? "SIGINT" : "SIGTERM");
  (*server)->Shutdown(absl::GetFlag(FLAGS_shutdown_grace));
  spdlog::info("stopped");
  return 0;
}
