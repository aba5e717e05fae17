// The end-to-end harness of rescale-adapter's tests (adapter_test.cc,
// adapter_kueue_test.cc): builders of the Kubernetes objects the adapter
// reads, a waitable log of its events, and Harness, which runs the fake API
// server (tests/fake_kube_api.h), a real in-process rescaled and the adapter
// between them, all on port 0.
#ifndef RESCALE_TESTS_ADAPTER_HARNESS_H_
#define RESCALE_TESTS_ADAPTER_HARNESS_H_

#include <grpcpp/grpcpp.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/adapter/adapter.h"
#include "client/adapter/curl_kube_client.h"
#include "rescale/v1/rescale.grpc.pb.h"
#include "server/server.h"
#include "spdlog/spdlog.h"
#include "tests/fake_kube_api.h"

namespace adapter_harness {

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
  // The Worker template's spec.tolerations; null = none.
  json tolerations;
};

inline json PyTorchJob(const JobParams& p) {
  json worker = {
      {"replicas", p.workers},
      {"template",
       {{"spec",
         {{"containers",
           json::array(
               {{{"name", "pytorch"},
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
          {"resource",
           {{"name", "cpu"}, {"target", {{"type", "Utilization"}, {"averageUtilization", 80}}}}}}});
  }
  if (!elastic.empty()) job["spec"]["elasticPolicy"] = elastic;
  if (p.suspend) job["spec"]["runPolicy"] = {{"suspend", *p.suspend}};
  if (!p.tolerations.is_null()) {
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["tolerations"] = p.tolerations;
  }
  return job;
}

struct TrainJobParams {
  std::string ns = "default";
  std::string name = "llm";
  std::optional<int> num_nodes = 2;
  // Per node, in spec.trainer.resourcesPerNode.limits; unset = none.
  std::optional<int> gpus = 1;
  std::optional<bool> suspend;
  std::map<std::string, std::string> annotations = {{"rescale.io/policy", "planner"}};
};

// A Kubeflow Trainer v2 TrainJob as kubeflow/trainer's
// pkg/apis/trainer/v1alpha1/trainjob_types.go defines it.
inline json TrainJob(const TrainJobParams& p) {
  json trainer = {{"image", "example/train:1"}};
  if (p.num_nodes) trainer["numNodes"] = *p.num_nodes;
  if (p.gpus) {
    trainer["resourcesPerNode"] = {{"limits", {{"nvidia.com/gpu", std::to_string(*p.gpus)}}}};
  }
  json job = {{"apiVersion", "trainer.kubeflow.org/v1alpha1"},
              {"kind", "TrainJob"},
              {"metadata",
               {{"name", p.name},
                {"namespace", p.ns},
                {"labels", {{"rescale.io/managed", "true"}}},
                {"annotations", p.annotations}}},
              {"spec", {{"runtimeRef", {{"name", "torch-distributed"}}}, {"trainer", trainer}}}};
  if (p.suspend) job["spec"]["suspend"] = *p.suspend;
  return job;
}

inline std::string TrainJobPath(const std::string& ns, const std::string& name) {
  return "/apis/trainer.kubeflow.org/v1alpha1/namespaces/" + ns + "/trainjobs/" + name;
}

inline std::string EventsPath(const std::string& ns) {
  return "/apis/events.k8s.io/v1/namespaces/" + ns + "/events";
}

// The three annotations an applied change carries, for `recommendation`
// with `reason` as applied.
inline json ChangeAnnotations(const v1::Recommendation& recommendation, const std::string& reason) {
  return {{"rescale.io/recommended-replicas",
           std::to_string(recommendation.suspend() ? 0 : recommendation.replicas())},
          {"rescale.io/generation", std::to_string(recommendation.generation())},
          {"rescale.io/reason", reason}};
}

// The rescale.io/reason a job PATCH carried. rescaled's reason for the
// same generation can change later (it explains the current state: "needs
// 2 GPUs" becomes "suspended: needs 2 GPUs"), so tests take the one that
// was applied from the patch and check the Event says the same.
inline std::string PatchedReason(const RecordedRequest& patch) {
  const json body = json::parse(patch.body);
  const json& reason = body["metadata"]["annotations"]["rescale.io/reason"];
  return reason.is_string() ? reason.get<std::string>() : "";
}

// The Event the adapter must POST for a change of `job` (the stored object
// after the change) at the test clock's `at`.
inline json ExpectedEvent(const json& job, const std::string& action, const std::string& reason,
                          const std::string& note, absl::Time at) {
  return {{"apiVersion", "events.k8s.io/v1"},
          {"kind", "Event"},
          {"metadata",
           {{"generateName", job["metadata"]["name"].get<std::string>() + "."},
            {"namespace", job["metadata"]["namespace"]}}},
          {"eventTime", absl::FormatTime("%Y-%m-%dT%H:%M:%E6SZ", at, absl::UTCTimeZone())},
          {"reportingController", "rescale.io/rescale-adapter"},
          {"reportingInstance", "rescale-adapter-7d9f8-xk2lp"},
          {"action", action},
          {"reason", reason},
          {"note", note},
          {"type", "Normal"},
          {"regarding",
           {{"apiVersion", job["apiVersion"]},
            {"kind", job["kind"]},
            {"namespace", job["metadata"]["namespace"]},
            {"name", job["metadata"]["name"]},
            {"uid", job["metadata"]["uid"]},
            {"resourceVersion", job["metadata"]["resourceVersion"]}}}};
}

inline json PodGroup(const std::string& api_version, const std::string& ns, const std::string& name,
                     int min_member) {
  return {{"apiVersion", api_version},
          {"kind", "PodGroup"},
          {"metadata", {{"name", name}, {"namespace", ns}}},
          {"spec", {{"minMember", min_member}}}};
}

// A Ready, schedulable node without taints, as the kubelet reports one.
inline json Node(const std::string& name, int gpus) {
  return {{"apiVersion", "v1"},
          {"kind", "Node"},
          {"metadata", {{"name", name}}},
          {"spec", json::object()},
          {"status",
           {{"allocatable", {{"cpu", "64"}, {"nvidia.com/gpu", std::to_string(gpus)}}},
            {"conditions",
             {{{"type", "MemoryPressure"}, {"status", "False"}},
              {{"type", "Ready"}, {"status", "True"}}}}}}};
}

// A pod bound to `node` (none when empty) requesting `gpus` GPUs, as the
// API server stores one: requests defaulted from limits. `job` names the
// PyTorchJob whose operator made it (its training.kubeflow.org/job-name
// label), empty for other work.
inline json Pod(const std::string& ns, const std::string& name, const std::string& node, int gpus,
                const std::string& phase = "Running", const std::string& job = "") {
  json gpu = {{"nvidia.com/gpu", std::to_string(gpus)}};
  json pod = {
      {"apiVersion", "v1"},
      {"kind", "Pod"},
      {"metadata", {{"name", name}, {"namespace", ns}}},
      {"spec",
       {{"containers", json::array({{{"name", "main"},
                                     {"image", "example/work:1"},
                                     {"resources", {{"limits", gpu}, {"requests", gpu}}}}})}}},
      {"status", {{"phase", phase}}}};
  if (!node.empty()) pod["spec"]["nodeName"] = node;
  if (!job.empty()) pod["metadata"]["labels"] = {{"training.kubeflow.org/job-name", job}};
  return pod;
}

inline std::string PodPath(const std::string& ns, const std::string& name) {
  return "/api/v1/namespaces/" + ns + "/pods/" + name;
}

inline std::string JobPath(const std::string& ns, const std::string& name,
                           const std::string& group_version = "kubeflow.org/v1") {
  return "/apis/" + group_version + "/namespaces/" + ns + "/pytorchjobs/" + name;
}

inline int Workers(const json& job) {
  return job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"].get<int>();
}

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
    // RESCALE_TEST_LOG=info (or debug) shows what the adapter does.
    const char* level = std::getenv("RESCALE_TEST_LOG");
    spdlog::set_level(level ? spdlog::level::from_str(level) : spdlog::level::warn);
    StartRescaled(0);
    rescale::adapter::CurlKubeClientOptions options;
    options.config.server = kube.url();
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
      channel =
          grpc::CreateCustomChannel(rescaled->address(), grpc::InsecureChannelCredentials(), args);
    }
    test_channel =
        grpc::CreateCustomChannel(rescaled->address(), grpc::InsecureChannelCredentials(), args);
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
    adapter =
        std::make_unique<rescale::adapter::Adapter>(std::move(options), client.get(), channel);
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

  // Options with Events on the test's clock, from a named pod.
  AdapterOptions OptionsWithClock(rescale::Clock* clock) {
    AdapterOptions options = Options();
    options.events.clock = clock;
    options.events.reporting_instance = "rescale-adapter-7d9f8-xk2lp";
    return options;
  }

  std::vector<RecordedRequest> PostsTo(const std::string& path) {
    std::vector<RecordedRequest> out;
    for (const RecordedRequest& request : kube.Writes()) {
      if (request.method == "POST" && request.path == path) out.push_back(request);
    }
    return out;
  }
  bool WaitForPosts(const std::string& path, size_t count) {
    return kube.WaitForRequests([&](const std::vector<RecordedRequest>& requests) {
      size_t n = 0;
      for (const RecordedRequest& request : requests)
        n += request.method == "POST" && request.path == path;
      return n >= count;
    });
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
      for (const RecordedRequest& request : requests)
        n += request.method == "PATCH" && request.path == path;
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

// ------------------------------------------------------------ waiting --

// The capacity rescaled holds now.
inline v1::Cluster CurrentCluster(Harness& h) {
  grpc::ClientContext context;
  v1::Cluster cluster;
  REQUIRE(h.cluster->GetCluster(&context, v1::GetClusterRequest(), &cluster).ok());
  return cluster;
}

inline std::string SlotsOf(const v1::Cluster& cluster) {
  std::string out;
  for (const v1::ReplicaSlots& s : cluster.slots()) {
    absl::StrAppend(&out, out.empty() ? "" : ",", s.gpus_per_replica(), "=", s.replicas());
  }
  return out;
}

// Waits until the adapter's last SetCapacity was of `usable` GPUs with
// `slots` ("4=6"; typed: "4=6;NVIDIA-A100-SXM4-40GB=16, Tesla-T4=8").
inline bool WaitForCapacity(Harness& h, uint64_t usable, const std::string& slots) {
  return h.log.WaitFor([&](const std::vector<AdapterEvent>& events) {
    for (auto it = events.rbegin(); it != events.rend(); ++it) {
      if (it->kind == Kind::kCapacitySet) return it->value == usable && it->detail == slots;
    }
    return false;
  });
}

// Waits until the adapter applied `detail` ("suspend", "replicas=1") to `job`
// as its latest change.
inline bool WaitForLastApplied(Harness& h, const std::string& job, const std::string& detail) {
  return h.log.WaitFor([&](const std::vector<AdapterEvent>& events) {
    for (auto it = events.rbegin(); it != events.rend(); ++it) {
      if (it->kind == Kind::kApplied && it->job_id == job) return it->detail == detail;
    }
    return false;
  });
}

}  // namespace adapter_harness

#endif  // RESCALE_TESTS_ADAPTER_HARNESS_H_
