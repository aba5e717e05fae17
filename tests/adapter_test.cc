// Tests of rescale-adapter. The pure pieces (PyTorchJob parsing, patches,
// clamping, backoff, kubeconfig) are tested directly; the controller is
// tested end to end: the real libcurl KubeClient talks real HTTP to the
// in-process FakeKubeApi (tests/fake_kube_api.h), and the adapter talks gRPC
// to a real in-process rescaled. Both bind port 0.
//
// Synchronisation: nothing sleeps. Tests wait, with a deadline, on the
// adapter's observer events (a condition variable in EventLog) or on the
// fake API server's request log (its own condition variable). Retry delays
// are a few milliseconds with a fixed jitter source, so retries are quick
// and repeatable.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <grpcpp/grpcpp.h>
#include <nlohmann/json.hpp>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include "client/adapter.h"
#include "client/curl_kube_client.h"
#include "client/kube_config.h"
#include "rescale/clock.h"
#include "rescale/v1/rescale.grpc.pb.h"
#include "server/server.h"
#include "spdlog/spdlog.h"
#include "tests/fake_kube_api.h"

namespace {

using json = nlohmann::json;
using rescale::adapter::AdapterEvent;
using rescale::adapter::AdapterOptions;
using rescale::testing::FakeKubeApi;
using rescale::testing::RecordedRequest;
using Kind = AdapterEvent::Kind;
namespace v1 = rescale::v1;

constexpr auto kDeadline = std::chrono::seconds(20);

// ------------------------------------------------------------- builders --

struct JobParams {
  std::string ns = "default";
  std::string name = "bert";
  std::string api_version = "kubeflow.org/v1";
  int workers = 2;
  std::optional<int> min_replicas = 1;
  std::optional<int> max_replicas = 4;
  int gpus = 1;
  bool managed = true;
  bool master = false;
  bool hpa_metrics = false;
  std::optional<bool> suspend;
  std::map<std::string, std::string> annotations = {{"rescale.io/policy", "static-max"}};
};

json PyTorchJob(const JobParams& p) {
  json worker = {
      {"replicas", p.workers},
      {"template",
       {{"spec",
         {{"containers",
           json::array({{{"name", "pytorch"},
                         {"image", "example/train:1"},
                         {"resources", {{"limits", {{"nvidia.com/gpu", std::to_string(p.gpus)}}}}}}})}}}}}};
  json job = {{"apiVersion", p.api_version},
              {"kind", "PyTorchJob"},
              {"metadata", {{"name", p.name}, {"namespace", p.ns}, {"annotations", p.annotations}}},
              {"spec", {{"pytorchReplicaSpecs", {{"Worker", worker}}}}}};
  if (p.managed) job["metadata"]["labels"] = {{"rescale.io/managed", "true"}};
  if (p.master) job["spec"]["pytorchReplicaSpecs"]["Master"] = {{"replicas", 1}};
  json elastic = json::object();
  if (p.min_replicas) elastic["minReplicas"] = *p.min_replicas;
  if (p.max_replicas) elastic["maxReplicas"] = *p.max_replicas;
  if (p.hpa_metrics) {
    elastic["metrics"] = json::array(
        {{{"type", "Resource"},
          {"resource", {{"name", "cpu"}, {"target", {{"type", "Utilization"}, {"averageUtilization", 80}}}}}}});
  }
  if (!elastic.empty()) job["spec"]["elasticPolicy"] = elastic;
  if (p.suspend) job["spec"]["runPolicy"] = {{"suspend", *p.suspend}};
  return job;
}

json PodGroup(const std::string& api_version, const std::string& ns, const std::string& name,
              int min_member) {
  return {{"apiVersion", api_version},
          {"kind", "PodGroup"},
          {"metadata", {{"name", name}, {"namespace", ns}}},
          {"spec", {{"minMember", min_member}}}};
}

json Node(const std::string& name, int gpus) {
  return {{"apiVersion", "v1"},
          {"kind", "Node"},
          {"metadata", {{"name", name}}},
          {"status", {{"allocatable", {{"cpu", "64"}, {"nvidia.com/gpu", std::to_string(gpus)}}}}}};
}

std::string JobPath(const std::string& ns, const std::string& name,
                    const std::string& group_version = "kubeflow.org/v1") {
  return "/apis/" + group_version + "/namespaces/" + ns + "/pytorchjobs/" + name;
}

int Workers(const json& job) { return job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"].get<int>(); }

// ------------------------------------------------------------- harness --

// The adapter's events, waitable.
class EventLog {
 public:
  void Add(const AdapterEvent& event) {
    {
      std::lock_guard lock(mu_);
      events_.push_back(event);
    }
    cv_.notify_all();
  }
  bool WaitFor(const std::function<bool(const std::vector<AdapterEvent>&)>& predicate) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, kDeadline, [&] { return predicate(events_); });
  }
  // Waits until at least `count` events of `kind` (for `job_id`, when not
  // empty; with `value`, when given) have been seen.
  bool WaitCount(Kind kind, const std::string& job_id, size_t count,
                 std::optional<uint64_t> value = std::nullopt) {
    return WaitFor([&](const std::vector<AdapterEvent>& events) {
      return Count(events, kind, job_id, value) >= count;
    });
  }
  size_t CountOf(Kind kind, const std::string& job_id = "") {
    std::lock_guard lock(mu_);
    return Count(events_, kind, job_id, std::nullopt);
  }
  std::vector<AdapterEvent> Events() {
    std::lock_guard lock(mu_);
    return events_;
  }

 private:
  static size_t Count(const std::vector<AdapterEvent>& events, Kind kind, const std::string& job_id,
                      std::optional<uint64_t> value) {
    size_t n = 0;
    for (const AdapterEvent& event : events) {
      if (event.kind == kind && (job_id.empty() || event.job_id == job_id) &&
          (!value || event.value == *value)) {
        ++n;
      }
    }
    return n;
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<AdapterEvent> events_;
};

// A fake API server, a real rescaled, and an adapter between them.
class Harness {
 public:
  Harness() {
    spdlog::set_level(spdlog::level::warn);
    StartRescaled(0);
    rescale::adapter::CurlKubeClientOptions options;
    options.config.server = kube.url();
    options.watch_timeout = std::chrono::seconds(60) == std::chrono::seconds(60) ? absl::Minutes(1)
                                                                                 : absl::Minutes(1);
    auto created = rescale::adapter::CurlKubeClient::Create(options);
    REQUIRE(created.ok());
    client = std::move(created).value();
  }
  ~Harness() {
    if (adapter) adapter->Stop();
    if (rescaled) rescaled->Shutdown(absl::ZeroDuration());
  }

  void StartRescaled(int port) {
    rescale::server::ServerOptions options;
    options.listen = "127.0.0.1:" + std::to_string(port);
    options.run_plan_timer = false;
    auto started = rescale::server::RescaleServer::Start(options);
    REQUIRE(started.ok());
    rescaled = std::move(started).value();
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 10);
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 10);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 100);
    if (!channel) {
      channel = grpc::CreateCustomChannel(rescaled->address(), grpc::InsecureChannelCredentials(), args);
    }
    test_channel = grpc::CreateCustomChannel(rescaled->address(), grpc::InsecureChannelCredentials(), args);
    jobs = v1::JobService::NewStub(test_channel);
    cluster = v1::ClusterService::NewStub(test_channel);
  }

  // Options every test starts from: fast deterministic retries, fixed
  // capacity (tests about nodes set -1), the observer wired to `log`.
  AdapterOptions Options() {
    AdapterOptions options;
    options.backoff.initial = absl::Milliseconds(5);
    options.backoff.max = absl::Milliseconds(50);
    options.random = [] { return 0.5; };
    options.capacity_gpus = 64;
    options.observer = [this](const AdapterEvent& event) { log.Add(event); };
    options.dry_run_out = &dry_run_out;
    return options;
  }

  void StartAdapter(AdapterOptions options) {
    adapter = std::make_unique<rescale::adapter::Adapter>(std::move(options), client.get(), channel);
    adapter->Start();
  }
  void StartAdapter() { StartAdapter(Options()); }

  std::optional<v1::Job> GetJob(const std::string& id) {
    grpc::ClientContext context;
    v1::GetJobRequest request;
    request.set_job_id(id);
    v1::Job job;
    if (!jobs->GetJob(&context, request, &job).ok()) return std::nullopt;
    return job;
  }

  std::vector<RecordedRequest> PatchesTo(const std::string& path) {
    std::vector<RecordedRequest> out;
    for (const RecordedRequest& request : kube.Writes()) {
      if (request.path == path) out.push_back(request);
    }
    return out;
  }
  bool WaitForPatches(const std::string& path, size_t count) {
    return kube.WaitForRequests([&](const std::vector<RecordedRequest>& requests) {
      size_t n = 0;
      for (const RecordedRequest& request : requests) n += request.method == "PATCH" && request.path == path;
      return n >= count;
    });
  }

  FakeKubeApi kube;
  std::unique_ptr<rescale::server::RescaleServer> rescaled;
  std::shared_ptr<grpc::Channel> channel;
  std::shared_ptr<grpc::Channel> test_channel;
  std::unique_ptr<v1::JobService::Stub> jobs;
  std::unique_ptr<v1::ClusterService::Stub> cluster;
  std::unique_ptr<rescale::adapter::CurlKubeClient> client;
  EventLog log;
  std::ostringstream dry_run_out;
  std::unique_ptr<rescale::adapter::Adapter> adapter;
};

// ---------------------------------------------------------- pure parts --

TEST_CASE("ParsePyTorchJob takes min and max from elasticPolicy as the operator does") {
  JobParams p;
  p.workers = 3;
  p.min_replicas = 2;
  p.max_replicas = 6;
  p.gpus = 4;
  p.master = true;
  p.annotations = {{"rescale.io/priority", "7"},
                   {"rescale.io/restart-cost-seconds", "45.5"},
                   {"rescale.io/preemptible", "false"},
                   {"rescale.io/policy", "planner"},
                   {"rescale.io/local-batch-size", "32"},
                   {"rescale.io/parameter.cooldown_seconds", "120"}};
  auto job = rescale::adapter::ParsePyTorchJob(PyTorchJob(p));
  REQUIRE(job.ok());
  CHECK(job->id == "default/bert");
  CHECK(job->api == rescale::adapter::kKubeflowV1);
  CHECK(job->workers == 3);
  CHECK(job->masters == 1);
  CHECK(job->min_replicas == 2);
  CHECK(job->max_replicas == 6);
  CHECK(job->gpus_per_replica == 4u);
  CHECK(job->priority == 7);
  CHECK(job->restart_cost_seconds == 45.5);
  CHECK(job->preemptible == false);
  CHECK(job->policy == "planner");
  CHECK(job->local_batch_size == 32);
  CHECK(job->parameters.at("cooldown_seconds") == "120");
  CHECK_FALSE(job->operator_hpa);

  p.min_replicas.reset();  // only max: min copies it
  job = rescale::adapter::ParsePyTorchJob(PyTorchJob(p));
  REQUIRE(job.ok());
  CHECK(job->min_replicas == 6);
  CHECK(job->max_replicas == 6);

  p.max_replicas.reset();  // neither: both are the Worker replicas
  job = rescale::adapter::ParsePyTorchJob(PyTorchJob(p));
  REQUIRE(job.ok());
  CHECK(job->min_replicas == 3);
  CHECK(job->max_replicas == 3);
}

TEST_CASE("ParsePyTorchJob errors name the object and the field") {
  JobParams p;
  p.annotations = {{"rescale.io/priority", "high"}};
  auto job = rescale::adapter::ParsePyTorchJob(PyTorchJob(p));
  REQUIRE_FALSE(job.ok());
  CHECK(job.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(job.status().message()),
             Catch::Contains("default/bert") && Catch::Contains("rescale.io/priority"));

  p.annotations = {};
  p.min_replicas = 5;
  p.max_replicas = 2;
  job = rescale::adapter::ParsePyTorchJob(PyTorchJob(p));
  REQUIRE_FALSE(job.ok());
  CHECK_THAT(std::string(job.status().message()), Catch::Contains("minReplicas"));

  json no_worker = PyTorchJob(JobParams{});
  no_worker["spec"]["pytorchReplicaSpecs"].erase("Worker");
  job = rescale::adapter::ParsePyTorchJob(no_worker);
  REQUIRE_FALSE(job.ok());
  CHECK_THAT(std::string(job.status().message()), Catch::Contains("spec.pytorchReplicaSpecs.Worker"));
}

TEST_CASE("ParsePyTorchJob marks operator-HPA jobs and finished jobs") {
  JobParams p;
  p.hpa_metrics = true;
  auto job = rescale::adapter::ParsePyTorchJob(PyTorchJob(p));
  REQUIRE(job.ok());
  CHECK(job->operator_hpa);

  json finished = PyTorchJob(JobParams{});
  finished["status"]["conditions"] = json::array(
      {{{"type", "Running"}, {"status", "False"}}, {{"type", "Succeeded"}, {"status", "True"}}});
  job = rescale::adapter::ParsePyTorchJob(finished);
  REQUIRE(job.ok());
  CHECK(job->finished);
}

TEST_CASE("replicas written are clamped into the job's [min, max]") {
  rescale::adapter::JobInfo job;
  job.min_replicas = 2;
  job.max_replicas = 4;
  bool clamped = false;
  CHECK(rescale::adapter::ClampReplicas(job, 9, &clamped) == 4);
  CHECK(clamped);
  CHECK(rescale::adapter::ClampReplicas(job, 1, &clamped) == 2);
  CHECK(clamped);
  CHECK(rescale::adapter::ClampReplicas(job, 3, &clamped) == 3);
  CHECK_FALSE(clamped);
}

TEST_CASE("the patches are JSON merge patches guarded by resourceVersion") {
  CHECK(rescale::adapter::WorkerPatch("42", 3, std::nullopt) ==
        json::parse(R"({"metadata":{"resourceVersion":"42"},
                        "spec":{"pytorchReplicaSpecs":{"Worker":{"replicas":3}}}})"));
  CHECK(rescale::adapter::WorkerPatch("42", std::nullopt, true) ==
        json::parse(R"({"metadata":{"resourceVersion":"42"},"spec":{"runPolicy":{"suspend":true}}})"));
  CHECK(rescale::adapter::MinMemberPatch("7", 5) ==
        json::parse(R"({"metadata":{"resourceVersion":"7"},"spec":{"minMember":5}})"));
}

TEST_CASE("backoff doubles up to its cap, scaled by the injected jitter") {
  rescale::adapter::BackoffOptions options;
  options.initial = absl::Milliseconds(100);
  options.max = absl::Milliseconds(500);
  options.jitter = 0.2;
  std::vector<double> draws = {0.5, 0.0, 0.5, 0.5, 0.99};
  size_t i = 0;
  rescale::adapter::Backoff backoff(options, [&] { return draws[i++ % draws.size()]; });
  CHECK(backoff.Next() == absl::Milliseconds(100));  // factor 1
  CHECK(backoff.Next() == absl::Milliseconds(160));  // 200 * 0.8
  CHECK(backoff.Next() == absl::Milliseconds(400));
  CHECK(backoff.Next() == absl::Milliseconds(500));  // capped
  CHECK(backoff.Next() > absl::Milliseconds(590));   // 500 * ~1.2
  backoff.Reset();
  CHECK(backoff.Next() == absl::Milliseconds(100));
}

TEST_CASE("kubeconfig: current context, base64 data, relative paths, no insecure mode") {
  const std::string yaml = R"(
apiVersion: v1
kind: Config
current-context: prod
contexts:
- name: dev
  context: {cluster: devc, user: devu}
- name: prod
  context: {cluster: prodc, user: produ, namespace: training}
clusters:
- name: devc
  cluster: {server: "https://dev:6443", insecure-skip-tls-verify: true}
- name: prodc
  cluster: {server: "https://prod:6443", certificate-authority-data: "Q0EtUEVN"}
users:
- name: devu
  user: {token: dev-token}
- name: produ
  user: {client-certificate: certs/client.crt, client-key-data: "S0VZ"}
)";
  auto config = rescale::adapter::ParseKubeconfig(yaml, "/home/u/.kube");
  REQUIRE(config.ok());
  CHECK(config->server == "https://prod:6443");
  CHECK(config->ca_data == "CA-PEM");
  CHECK(config->client_cert_file == "/home/u/.kube/certs/client.crt");
  CHECK(config->client_key_data == "KEY");
  CHECK(config->default_namespace == "training");

  auto dev = rescale::adapter::ParseKubeconfig(yaml, "/home/u/.kube", "dev");
  REQUIRE_FALSE(dev.ok());
  CHECK_THAT(std::string(dev.status().message()), Catch::Contains("insecure-skip-tls-verify"));

  auto missing = rescale::adapter::ParseKubeconfig(yaml, "", "nope");
  REQUIRE_FALSE(missing.ok());
  CHECK_THAT(std::string(missing.status().message()), Catch::Contains("nope"));
}

TEST_CASE("the curl client refuses plain URLs that are not http(s) and maps HTTP statuses") {
  rescale::adapter::CurlKubeClientOptions options;
  options.config.server = "ftp://example";
  CHECK_FALSE(rescale::adapter::CurlKubeClient::Create(options).ok());

  FakeKubeApi kube;
  options.config.server = kube.url();
  auto client = rescale::adapter::CurlKubeClient::Create(options);
  REQUIRE(client.ok());
  auto missing = (*client)->Get(JobPath("default", "absent"));
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().code() == absl::StatusCode::kNotFound);
  CHECK_THAT(std::string(missing.status().message()),
             Catch::Contains("GET /apis/kubeflow.org/v1/namespaces/default/pytorchjobs/absent") &&
                 Catch::Contains("404"));

  json stored = kube.Put(PyTorchJob(JobParams{}));
  auto stale = (*client)->Patch(JobPath("default", "bert"), "application/merge-patch+json",
                                rescale::adapter::WorkerPatch("1", 3, std::nullopt));
  REQUIRE_FALSE(stale.ok());
  CHECK(stale.status().code() == absl::StatusCode::kAborted);

  // The scale subresource speaks autoscaling/v1 Scale.
  auto scale = (*client)->Get(JobPath("default", "bert") + "/scale");
  REQUIRE(scale.ok());
  CHECK((*scale)["spec"]["replicas"] == 2);
  auto scaled = (*client)->Patch(JobPath("default", "bert") + "/scale", "application/merge-patch+json",
                                 json{{"spec", {{"replicas", 3}}}});
  REQUIRE(scaled.ok());
  CHECK(Workers(kube.Object(JobPath("default", "bert"))) == 3);
}

TEST_CASE("the curl client sends the bearer token and re-reads a rotated token file") {
  FakeKubeApi kube;
  auto dir = std::filesystem::temp_directory_path() /
             ("adapter_test_token_" + std::to_string(::getpid()) + "_" + std::to_string(std::random_device{}()));
  std::filesystem::create_directories(dir);
  const std::string token_file = (dir / "token").string();
  std::ofstream(token_file) << "first\n";
  rescale::ManualClock clock;
  rescale::adapter::CurlKubeClientOptions options;
  options.config.server = kube.url();
  options.config.token_file = token_file;
  options.token_refresh = absl::Minutes(1);
  options.clock = &clock;
  auto client = rescale::adapter::CurlKubeClient::Create(options);
  REQUIRE(client.ok());
  (void)(*client)->List("/api/v1/nodes", "");
  std::ofstream(token_file) << "second\n";
  (void)(*client)->List("/api/v1/nodes", "");  // within the refresh period: old token
  clock.Advance(absl::Minutes(2));
  (void)(*client)->List("/api/v1/nodes", "");
  auto requests = kube.Requests();
  REQUIRE(requests.size() == 3);
  CHECK(requests[0].authorization == "Bearer first");
  CHECK(requests[1].authorization == "Bearer first");
  CHECK(requests[2].authorization == "Bearer second");
  std::filesystem::remove_all(dir);
}

// ----------------------------------------------------------- end to end --

TEST_CASE("discovery registers labelled jobs with their spec and skips unlabelled and HPA jobs") {
  Harness h;
  JobParams p;
  p.workers = 2;
  p.min_replicas = 1;
  p.max_replicas = 8;
  p.gpus = 4;
  p.annotations = {{"rescale.io/priority", "5"},
                   {"rescale.io/restart-cost-seconds", "90"},
                   {"rescale.io/policy", "static-min"}};
  h.kube.Put(PyTorchJob(p));
  JobParams unlabelled;
  unlabelled.name = "other";
  unlabelled.managed = false;
  h.kube.Put(PyTorchJob(unlabelled));
  JobParams hpa;
  hpa.name = "hpa";
  hpa.hpa_metrics = true;
  h.kube.Put(PyTorchJob(hpa));

  h.StartAdapter();
  REQUIRE(h.log.WaitCount(Kind::kRegistered, "default/bert", 1));
  REQUIRE(h.log.WaitCount(Kind::kSkipped, "default/hpa", 1));
  auto job = h.GetJob("default/bert");
  REQUIRE(job);
  CHECK(job->spec().min_replicas() == 1);
  CHECK(job->spec().max_replicas() == 8);
  CHECK(job->spec().gpus_per_replica() == 4);
  CHECK(job->spec().priority() == 5);
  CHECK(job->spec().restart_cost_seconds() == 90);
  CHECK(job->spec().policy() == "static-min");
  // The initial state was reported: 2 workers run.
  CHECK(job->status().current_replicas() == 2);
  CHECK_FALSE(h.GetJob("default/other"));
  CHECK_FALSE(h.GetJob("default/hpa"));
  // The list asked for the managed label only.
  bool selected = false;
  for (const RecordedRequest& request : h.kube.Requests()) {
    if (request.path == "/apis/kubeflow.org/v1/pytorchjobs" && !request.is_watch()) {
      selected = request.query.count("labelSelector") &&
                 request.query.at("labelSelector") == "rescale.io/managed=true";
    }
  }
  CHECK(selected);

  // A change of the job updates rescaled.
  h.kube.Update(JobPath("default", "bert"), [](json& job) {
    job["metadata"]["annotations"]["rescale.io/priority"] = "9";
  });
  REQUIRE(h.log.WaitFor([](const std::vector<AdapterEvent>& events) {
    for (const AdapterEvent& event : events) {
      if (event.kind == Kind::kRegistered && event.detail == "updated") return true;
    }
    return false;
  }));
  CHECK(h.GetJob("default/bert")->spec().priority() == 9);
}

TEST_CASE("scale up and down send exact merge patches and each generation is applied once") {
  Harness h;
  JobParams p;  // 2 workers in [1, 4], static-max: rescaled recommends 4
  h.kube.Put(PyTorchJob(p));
  h.StartAdapter();
  const std::string path = JobPath("default", "bert");
  REQUIRE(h.WaitForPatches(path, 1));
  REQUIRE(h.log.WaitCount(Kind::kApplied, "default/bert", 1));
  auto patches = h.PatchesTo(path);
  REQUIRE(patches.size() == 1);
  CHECK(patches[0].method == "PATCH");
  CHECK(patches[0].content_type == "application/merge-patch+json");
  json body = json::parse(patches[0].body);
  CHECK(body["spec"] == json::parse(R"({"pytorchReplicaSpecs":{"Worker":{"replicas":4}}})"));
  CHECK(body["metadata"]["resourceVersion"].is_string());
  CHECK(Workers(h.kube.Object(path)) == 4);

  // rescaled saw it applied, with the generation.
  auto job = h.GetJob("default/bert");
  REQUIRE(job);
  CHECK(job->status().current_replicas() == 4);
  const uint64_t generation = job->recommendation().generation();
  CHECK(job->status().last_applied_generation() == generation);

  // Scale down: the policy annotation changes, rescaled recommends min.
  h.kube.Update(path, [](json& job) { job["metadata"]["annotations"]["rescale.io/policy"] = "static-min"; });
  REQUIRE(h.WaitForPatches(path, 2));
  REQUIRE(h.log.WaitCount(Kind::kApplied, "default/bert", 2));
  patches = h.PatchesTo(path);
  body = json::parse(patches[1].body);
  CHECK(body["spec"] == json::parse(R"({"pytorchReplicaSpecs":{"Worker":{"replicas":1}}})"));
  CHECK(Workers(h.kube.Object(path)) == 1);
  job = h.GetJob("default/bert");
  CHECK(job->status().current_replicas() == 1);
  CHECK(job->status().last_applied_generation() == job->recommendation().generation());
  CHECK(job->recommendation().generation() > generation);

  // Bookmarks and unrelated changes of the job do not re-apply anything.
  h.kube.SendBookmarks();
  h.kube.Update(path, [](json& job) { job["metadata"]["annotations"]["note"] = "x"; });
  h.kube.Update(path, [](json& job) { job["metadata"]["annotations"]["note"] = "y"; });
  REQUIRE(h.log.WaitFor([&](const std::vector<AdapterEvent>&) {
    // The adapter has seen the last change once its watch moved past it:
    // the last GET it made is not needed; what matters is no new PATCH.
    return true;
  }));
  CHECK(h.PatchesTo(path).size() == 2);
}
}  // namespace
