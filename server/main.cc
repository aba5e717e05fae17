// rescaled: the Rescale decision service.
//
// Usage:
//   rescaled                         # 127.0.0.1:50051, plaintext, defaults
//   rescaled --listen=0.0.0.0:50051 --capacity_gpus=64 --log_format=json
//   rescaled --tls_cert_file=tls.crt --tls_key_file=tls.key
// Flags are parsed here and only here, into ServerOptions. SIGINT or SIGTERM
// shut down cleanly: health turns NOT_SERVING, watch streams end with
// UNAVAILABLE, in-flight calls get --shutdown_grace to finish.
#include <csignal>
#include <cstdlib>
#include <iostream>

#include <spdlog/spdlog.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/time/time.h"
#include "rescale/logging.h"
#include "server/server.h"

namespace {
const rescale::server::ServerOptions kDefaults;
}  // namespace

ABSL_FLAG(std::string, listen, kDefaults.listen, "host:port to serve gRPC on (port 0 = any free port)");
ABSL_FLAG(std::string, log_format, "text", "log format: text or json (one object per line)");
ABSL_FLAG(std::string, log_level, "info", "log level: trace, debug, info, warn, error");
ABSL_FLAG(absl::Duration, plan_interval, kDefaults.plan_interval,
          "time between periodic replans (events also replan at once)");
ABSL_FLAG(int64_t, capacity_gpus, kDefaults.capacity_gpus,
          "GPUs the planner may hand out; -1 = unknown until ClusterService.SetCapacity");
ABSL_FLAG(std::string, default_policy, kDefaults.default_policy,
          "policy for jobs whose spec leaves `policy` empty");
ABSL_FLAG(int, max_jobs, kDefaults.max_jobs, "registered jobs at most");
ABSL_FLAG(int, max_watchers, kDefaults.max_watchers, "concurrent WatchRecommendations streams at most");
ABSL_FLAG(int, max_batch_samples, kDefaults.max_batch_samples, "samples in one SampleBatch at most");
ABSL_FLAG(int, max_message_bytes, kDefaults.max_message_bytes, "largest gRPC message, bytes");
ABSL_FLAG(bool, auto_register, kDefaults.auto_register,
          "samples for unknown jobs register them with defaults instead of being rejected");
ABSL_FLAG(absl::Duration, window, kDefaults.window, "span of the windowed step-time statistics");
ABSL_FLAG(absl::Duration, pod_ttl, kDefaults.pod_ttl, "pods unseen this long are forgotten");
ABSL_FLAG(int, max_pods_per_job, kDefaults.max_pods_per_job,
          "pods tracked per job at most (also at most 4 x max_replicas + 16)");
ABSL_FLAG(int, max_sizes_per_job, kDefaults.max_sizes_per_job,
          "distinct world sizes tracked per job at most");
ABSL_FLAG(double, min_step_seconds, kDefaults.min_step_seconds,
          "samples with a shorter step_seconds are rejected as implausible");
ABSL_FLAG(double, max_step_seconds, kDefaults.max_step_seconds,
          "samples with a longer step_seconds are rejected as implausible");
ABSL_FLAG(absl::Duration, cooldown, kDefaults.cooldown,
          "no replica change for this long after the cluster applied one (per job: "
          "parameters.cooldown_seconds)");
ABSL_FLAG(absl::Duration, horizon, kDefaults.horizon,
          "a scale-up must repay its restart cost within this span");
ABSL_FLAG(uint32_t, gpus_per_node, kDefaults.gpus_per_node,
          "GPUs per node: the throughput model adds an inter-node term for sizes that span "
          "nodes (replicas packed onto the fewest nodes); 0 = unknown, one node assumed");
ABSL_FLAG(absl::Duration, applied_debounce, kDefaults.applied_debounce,
          "a burst of ReportApplied calls is planned once, this long after the first");
ABSL_FLAG(std::string, tls_cert_file, "", "PEM server certificate chain; enables TLS with --tls_key_file");
ABSL_FLAG(std::string, tls_key_file, "", "PEM private key of --tls_cert_file");
ABSL_FLAG(absl::Duration, shutdown_grace, absl::Seconds(5),
          "how long in-flight calls may run after SIGINT/SIGTERM");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "rescaled: elastic-scaling decision service for distributed training.\n"
      "Serves rescale.v1 (Metrics, Job, Recommendation, Cluster), grpc.health.v1 and "
      "reflection.");
  absl::ParseCommandLine(argc, argv);
  if (absl::Status logging = rescale::ConfigureLogging(
          "rescaled", absl::GetFlag(FLAGS_log_format), absl::GetFlag(FLAGS_log_level));
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
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  rescale::server::ServerOptions options;
  options.listen = absl::GetFlag(FLAGS_listen);
  options.plan_interval = absl::GetFlag(FLAGS_plan_interval);
  options.capacity_gpus = absl::GetFlag(FLAGS_capacity_gpus);
  options.default_policy = absl::GetFlag(FLAGS_default_policy);
  options.max_jobs = absl::GetFlag(FLAGS_max_jobs);
  options.max_watchers = absl::GetFlag(FLAGS_max_watchers);
  options.max_batch_samples = absl::GetFlag(FLAGS_max_batch_samples);
  options.max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  options.auto_register = absl::GetFlag(FLAGS_auto_register);
  options.window = absl::GetFlag(FLAGS_window);
  options.pod_ttl = absl::GetFlag(FLAGS_pod_ttl);
  options.max_pods_per_job = absl::GetFlag(FLAGS_max_pods_per_job);
  options.max_sizes_per_job = absl::GetFlag(FLAGS_max_sizes_per_job);
  options.min_step_seconds = absl::GetFlag(FLAGS_min_step_seconds);
  options.max_step_seconds = absl::GetFlag(FLAGS_max_step_seconds);
  options.cooldown = absl::GetFlag(FLAGS_cooldown);
  options.applied_debounce = absl::GetFlag(FLAGS_applied_debounce);
  options.horizon = absl::GetFlag(FLAGS_horizon);
  options.gpus_per_node = absl::GetFlag(FLAGS_gpus_per_node);
  options.tls_cert_file = absl::GetFlag(FLAGS_tls_cert_file);
  options.tls_key_file = absl::GetFlag(FLAGS_tls_key_file);

  auto server = rescale::server::RescaleServer::Start(options);
  if (!server.ok()) {
    spdlog::critical("cannot start: {}", std::string(server.status().message()));
    return 1;
  }
  spdlog::info("rescaled serving on {} ({}; capacity {}; default policy {}; plan interval {})",
               (*server)->address(), options.tls_cert_file.empty() ? "plaintext" : "TLS",
               options.capacity_gpus < 0 ? std::string("unknown")
                                         : std::to_string(options.capacity_gpus) + " GPUs",
               options.default_policy, absl::FormatDuration(options.plan_interval));

  int received = 0;
  sigwait(&signals, &received);
  spdlog::info("received {}; shutting down", received == SIGINT ? "SIGINT" : "SIGTERM");
  (*server)->Shutdown(absl::GetFlag(FLAGS_shutdown_grace));
  spdlog::info("stopped");
  return 0;
}
