// rescale-adapter: applies rescaled's recommendations to PyTorchJobs (and
// suspends and resumes Kubeflow Trainer v2 TrainJobs).
//
// Usage:
//   rescale-adapter --server rescaled.rescale:50051              # in a pod
//   rescale-adapter --server 127.0.0.1:50051 --kubeconfig ~/.kube/config --dry-run
//   rescale-adapter ... --metrics-listen=0.0.0.0:9465   # Prometheus at /metrics; empty = off
//   rescale-adapter ... --event-burst=3 --event-interval=30  # Events per job; burst 0 = none
// Events name the adapter's pod as their reportingInstance: $POD_NAME (the
// Deployment sets it from the downward API), else the host name.
// Kubernetes credentials: --kubeconfig, else in-cluster (service-account
// token and CA) when KUBERNETES_SERVICE_HOST is set, else $KUBECONFIG, else
// ~/.kube/config. TLS to the API server is always verified; an http://
// server URL (in a kubeconfig) is honoured only because it is explicit, and
// is meant for tests. Flags are parsed here and only here; SIGINT or SIGTERM
// stop the adapter cleanly.
#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>

#include "client/adapter/adapter.h"
#include "client/adapter/adapter_metrics.h"
#include "client/adapter/curl_kube_client.h"
#include "client/adapter/kube_config.h"
#include "client/common/credentials.h"
#include "rescale/logging.h"
#include "rescale/queues.h"
#include "rescale/read_file.h"

int main(int argc, char** argv) {
  rescale::adapter::AdapterOptions options;
  std::string server;
  std::string kubeconfig;
  std::string context;
  rescale::client::SecurityFlags security;
  std::string log_format = "text";
  std::string log_level = "info";
  std::vector<std::string> job_apis;
  double backoff_initial = absl::ToDoubleSeconds(options.backoff.initial);
  double backoff_max = absl::ToDoubleSeconds(options.backoff.max);
  std::string metrics_listen = rescale::adapter::kDefaultAdapterMetricsListen;
  double event_interval = absl::ToDoubleSeconds(options.events.interval);

  CLI::App app{
      "rescale-adapter: applies Rescale's recommendations to Kubeflow and KubeDL "
      "PyTorchJobs (and their gang PodGroups) and Kubeflow Trainer TrainJobs (suspend and "
      "resume only) labelled rescale.io/managed=true"};
  app.add_option("--server", server,
                 "Address of rescaled, host:port; with high availability every replica's, "
                 "comma-separated (the adapter follows the leader)")
      ->required();
  app.add_option("--kubeconfig", kubeconfig,
                 "kubeconfig file (default: in-cluster service account, else $KUBECONFIG, else "
                 "~/.kube/config)");
  app.add_option("--context", context, "kubeconfig context (default: current-context)");
  app.add_flag("--dry-run", options.dry_run,
               "Print the patches that would be sent (stdout) and send none");
  app.add_option("--namespace", options.ns, "Only jobs in this namespace (default: all)");
  app.add_option("--label-selector", options.label_selector, "Jobs to manage")
      ->capture_default_str();
  app.add_option("--capacity-gpus", options.capacity_gpus,
                 "Fixed GPU capacity to report; -1 = from the nodes and pods: Ready, "
                 "schedulable nodes the jobs tolerate, minus GPUs of unmanaged pods, with "
                 "the replicas of each size that fit")
      ->capture_default_str();
  app.add_option("--job-apis", job_apis,
                 "Job APIs to watch, group/version: PyTorchJobs (kubeflow.org/v1, "
                 "training.kubedl.io/v1alpha1) and TrainJobs (trainer.kubeflow.org/v1alpha1). "
                 "Default: all three; one whose CRD is not installed is retried with backoff");
  std::string queues_file;
  app.add_option("--queues-file", queues_file,
                 "Rescale's queues from this YAML file (the format of `rescalectl queue set -f`, "
                 "docs/queues.md), set when rescaled is reached; Kueue's ClusterQueues are then "
                 "not read. Jobs name their queue with the rescale.io/queue annotation");
  app.add_option("--kueue", options.kueue,
                 "Without --queues-file: while the cluster serves kueue.x-k8s.io, mirror its "
                 "ClusterQueues as Rescale's queues and place Kueue-labelled jobs through their "
                 "LocalQueues (docs/kueue.md). Such jobs' admission is Kueue's either way: "
                 "their suspend is never written")
      ->capture_default_str();
  app.add_option("--event-burst", options.events.burst,
                 "Kubernetes Events per job at once for applied changes (0 = record none)")
      ->capture_default_str();
  app.add_option("--event-interval", event_interval,
                 "Seconds per further Event per job once its burst is spent")
      ->capture_default_str();
  rescale::client::AddSecurityFlags(app, security, "Connection to rescaled");
  app.add_option("--backoff-initial", backoff_initial, "First retry delay, seconds")
      ->capture_default_str();
  app.add_option("--backoff-max", backoff_max, "Longest retry delay, seconds")
      ->capture_default_str();
  app.add_option("--max-conflict-retries", options.max_conflict_retries,
                 "409 Conflicts retried per write")
      ->capture_default_str();
  app.add_option("--metrics-listen,--metrics_listen", metrics_listen,
                 "host:port to serve Prometheus metrics on at /metrics (port 0 = any free port; "
                 "empty = no metrics). Not rescaled's 9464, so both can run with their defaults "
                 "on one machine")
      ->capture_default_str();
  app.add_option("--log-format", log_format, "text or json")->capture_default_str();
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (absl::Status logging = rescale::ConfigureLogging("rescale-adapter", log_format, log_level);
      !logging.ok()) {
    std::cerr << "rescale-adapter: --log-format/--log-level: " << logging.message() << "\n";
    return 2;
  }
  if (options.events.burst < 0 || !(event_interval >= 0)) {
    std::cerr << "rescale-adapter: --event-burst and --event-interval must not be negative\n";
    return 2;
  }
  options.events.interval = absl::Seconds(event_interval);
  if (const char* pod = std::getenv("POD_NAME"); pod != nullptr && *pod != '\0') {
    options.events.reporting_instance = pod;
  } else {
    char host[256] = {};
    if (gethostname(host, sizeof host - 1) == 0) options.events.reporting_instance = host;
  }
  options.backoff.initial = absl::Seconds(backoff_initial);
  options.backoff.max = absl::Seconds(backoff_max);
  if (!job_apis.empty()) {
    options.job_apis.clear();
    for (const std::string& text : job_apis) {
      size_t slash = text.find('/');
      if (slash == std::string::npos) {
        std::cerr << "rescale-adapter: --job-apis \"" << text << "\" is not group/version\n";
        return 2;
      }
      options.job_apis.push_back({text.substr(0, slash), text.substr(slash + 1)});
    }
  }

  if (!queues_file.empty()) {
    absl::StatusOr<std::string> text = rescale::ReadFileToString(queues_file, "--queues-file");
    absl::StatusOr<std::vector<rescale::QueueSpec>> queues =
        text.ok() ? rescale::ParseQueuesYaml(*text, queues_file)
                  : absl::StatusOr<std::vector<rescale::QueueSpec>>(text.status());
    if (!queues.ok()) {
      std::cerr << "rescale-adapter: --queues-file: " << queues.status().message() << "\n";
      return 2;
    }
    options.queues = *std::move(queues);
  }

  absl::StatusOr<rescale::adapter::KubeConfig> config;
  if (!kubeconfig.empty()) {
    config = rescale::adapter::LoadKubeconfig(kubeconfig, context);
  } else {
    config = rescale::adapter::InClusterConfig();
    if (!config.ok() && config.status().code() == absl::StatusCode::kNotFound) {
      std::string path = rescale::adapter::DefaultKubeconfigPath();
      if (path.empty()) {
        std::cerr << "rescale-adapter: not in a cluster and no kubeconfig (--kubeconfig, "
                     "$KUBECONFIG, ~/.kube/config)\n";
        return 2;
      }
      config = rescale::adapter::LoadKubeconfig(path, context);
    }
  }
  if (!config.ok()) {
    std::cerr << "rescale-adapter: " << config.status().message() << "\n";
    return 2;
  }
  rescale::adapter::CurlKubeClientOptions kube_options;
  kube_options.config = *config;
  auto kube = rescale::adapter::CurlKubeClient::Create(kube_options);
  if (!kube.ok()) {
    std::cerr << "rescale-adapter: " << kube.status().message() << "\n";
    return 2;
  }

  auto connection =
      rescale::client::RescaledConnection::Create(security, std::getenv("RESCALE_TOKEN"));
  if (!connection.ok()) {
    std::cerr << "rescale-adapter: " << connection.status().message() << "\n";
    return 2;
  }
  grpc::ChannelArguments channel_args;
  // Reconnect to a restarted rescaled within seconds, not gRPC's default
  // two minutes at most.
  channel_args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 5000);
  auto servers = rescale::client::ServerList::Create(server, *std::move(connection), channel_args);
  if (!servers.ok()) {
    std::cerr << "rescale-adapter: --server: " << servers.status().message() << "\n";
    return 2;
  }

  if (options.dry_run) options.dry_run_out = &std::cout;

  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  spdlog::info("rescale-adapter: rescaled {} ; Kubernetes {} ; selector {}{}", server,
               config->server, options.label_selector, options.dry_run ? " ; DRY RUN" : "");
  // The metrics wrap the Kubernetes client to count its errors and
  // PATCHes; off, the adapter talks to the client directly.
  rescale::adapter::AdapterMetrics metrics;
  rescale::adapter::MeteredKubeClient metered(kube->get(), &metrics);
  rescale::adapter::KubeClient* kube_client = kube->get();
  if (!metrics_listen.empty()) {
    if (absl::Status served = metrics.Serve(metrics_listen); !served.ok()) {
      std::cerr << "rescale-adapter: " << served.message() << "\n";
      return 2;
    }
    spdlog::info("metrics at http://{}:{}/metrics (--metrics-listen={})",
                 metrics_listen.substr(0, metrics_listen.rfind(':')), metrics.port(),
                 metrics_listen);
    options.metrics = &metrics;
    kube_client = &metered;
  }
  rescale::adapter::Adapter adapter(options, kube_client, *servers);
  adapter.Start();
  int signal = 0;
  sigwait(&signals, &signal);
  spdlog::info("signal {}: stopping", signal);
  adapter.Stop();
  return 0;
}
