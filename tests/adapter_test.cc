// Tests of rescale-adapter. The pure pieces (PyTorchJob parsing, patches,
// clamping, kubeconfig) are tested directly; the controller is
// tested end to end: the real libcurl KubeClient talks real HTTP to the
// in-process FakeKubeApi (tests/fake_kube_api.h), and the adapter talks gRPC
// to a real in-process rescaled. Both bind port 0.
//
// Synchronisation: nothing sleeps. Tests wait, with a deadline, on the
// adapter's observer events (a condition variable in EventLog) or on the
// fake API server's request log (its own condition variable). Retry delays
// are a few milliseconds with a fixed jitter source, so retries are quick
// and repeatable.
#include "client/adapter/adapter.h"

#include <grpcpp/grpcpp.h>
#include <httplib.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/adapter/adapter_metrics.h"
#include "client/adapter/curl_kube_client.h"
#include "client/adapter/kube_config.h"
#include "client/agent/sender.h"
#include "client/common/server_list.h"
#include "rescale/clock.h"
#include "rescale/v1/rescale.grpc.pb.h"
#include "server/server.h"
#include "spdlog/spdlog.h"
#include "tests/adapter_harness.h"
#include "tests/etcd_cluster.h"
#include "tests/fake_kube_api.h"
#include "tests/rescaled_process.h"
#include "tests/test_certificates.h"

namespace {

using namespace adapter_harness;  // NOLINT: the harness is this file's vocabulary

// ---------------------------------------------------------- pure parts --

TEST_CASE("ParsePyTorchJob takes min and max from elasticPolicy as the operator does") {
  JobParams p;
  p.workers = 3;
  p.min_replicas = 2;
  p.max_replicas = 6;
  p.gpus = 4;
  p.master = true;
  p.annotations = {
      {"rescale.io/priority", "7"},          {"rescale.io/restart-cost-seconds", "45.5"},
      {"rescale.io/preemptible", "false"},   {"rescale.io/policy", "planner"},
      {"rescale.io/local-batch-size", "32"}, {"rescale.io/parameter.cooldown_seconds", "120"}};
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
  CHECK_THAT(std::string(job.status().message()),
             Catch::Contains("spec.pytorchReplicaSpecs.Worker"));
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
        json::parse(
            R"({"metadata":{"resourceVersion":"42"},"spec":{"runPolicy":{"suspend":true}}})"));
  CHECK(rescale::adapter::MinMemberPatch("7", 5) ==
        json::parse(R"({"metadata":{"resourceVersion":"7"},"spec":{"minMember":5}})"));
}

TEST_CASE("the annotations of a change are valid strings and go in the change's merge patch") {
  v1::Recommendation recommendation;
  recommendation.set_replicas(4);
  recommendation.set_generation(7);
  recommendation.set_reason("planner: 1.8x the throughput");
  auto annotations = rescale::adapter::RecommendationAnnotations(
      recommendation,
      rescale::adapter::AppliedReason(rescale::adapter::JobInfo{}, recommendation, 4));
  CHECK(rescale::adapter::WorkerPatch("42", 4, std::nullopt, annotations) ==
        json::parse(R"({"metadata":{"resourceVersion":"42",
                          "annotations":{"rescale.io/recommended-replicas":"4",
                                         "rescale.io/generation":"7",
                                         "rescale.io/reason":"planner: 1.8x the throughput"}},
                        "spec":{"pytorchReplicaSpecs":{"Worker":{"replicas":4}}}})"));
  // A suspension recommends 0 replicas, whatever the replicas field says.
  recommendation.set_suspend(true);
  CHECK(rescale::adapter::RecommendationAnnotations(recommendation, "x")
            .at("rescale.io/recommended-replicas") == "0");
  // Replicas clamped into the job's bounds say so in the reason.
  rescale::adapter::JobInfo bounded;
  bounded.min_replicas = 1;
  bounded.max_replicas = 4;
  recommendation.set_suspend(false);
  recommendation.set_replicas(9);
  CHECK(rescale::adapter::AppliedReason(bounded, recommendation, 4) ==
        "planner: 1.8x the throughput; replicas clamped to 4 (the job allows 1..4)");

  // Invalid UTF-8 becomes U+FFFD, control characters spaces; the JSON of
  // the patch can then always be written.
  CHECK(rescale::adapter::SanitizeText("a\xff"
                                       "b\n\tc\xc3\xa9",
                                       100) ==
        "a\xef\xbf\xbd"
        "b \tc\xc3\xa9");
  // A surrogate: each byte of it is a maximal invalid subpart (Unicode's
  // recommended practice), one U+FFFD each.
  CHECK(rescale::adapter::SanitizeText("\xed\xa0\x80", 100) ==
        "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");
  CHECK(rescale::adapter::SanitizeText("\xc0\xaf", 100) == "\xef\xbf\xbd\xef\xbf\xbd");  // overlong
  // Too long: cut at a character boundary, "..." within the limit.
  std::string long_reason(1020, 'x');
  long_reason += "\xc3\xa9\xc3\xa9\xc3\xa9";  // three 2-byte characters: 1026 bytes
  std::string cut = rescale::adapter::SanitizeText(long_reason, 1024);
  CHECK(cut.size() <= 1024);
  CHECK(cut == std::string(1020, 'x') + "...");
  CHECK(rescale::adapter::SanitizeText("\xc3\xa9\xc3\xa9\xc3\xa9", 6) ==
        "\xc3\xa9\xc3\xa9\xc3\xa9");
  CHECK(rescale::adapter::SanitizeText("\xc3\xa9\xc3\xa9\xc3\xa9", 5) == "\xc3\xa9...");
  recommendation.set_reason(std::string(5000, 'r') + "\xff");
  const std::string reason =
      rescale::adapter::RecommendationAnnotations(recommendation, recommendation.reason())
          .at("rescale.io/reason");
  CHECK(reason.size() == 1024);
  CHECK_NOTHROW(json(reason).dump());
}

TEST_CASE("a recommended batch goes in the change's patch, and only when there is one") {
  v1::Recommendation recommendation;
  recommendation.set_replicas(4);
  recommendation.set_generation(7);
  recommendation.set_reason("planner");
  // Planned on throughput: the job's declared rescale.io/local-batch-size is
  // not the adapter's to touch, so the patch names no batch at all.
  auto annotations = rescale::adapter::RecommendationAnnotations(recommendation, "planner");
  CHECK(annotations.count("rescale.io/local-batch-size") == 0);
  CHECK(annotations.count("rescale.io/accumulation-steps") == 0);
  CHECK_FALSE(
      rescale::adapter::WorkerPatch("42", 4, std::nullopt, annotations)["metadata"]["annotations"]
          .contains("rescale.io/local-batch-size"));

  recommendation.set_local_batch_size(64);
  recommendation.set_accumulation_steps(2);
  annotations = rescale::adapter::RecommendationAnnotations(recommendation, "planner");
  CHECK(rescale::adapter::WorkerPatch("42", 4, std::nullopt, annotations) ==
        json::parse(R"({"metadata":{"resourceVersion":"42",
                          "annotations":{"rescale.io/recommended-replicas":"4",
                                         "rescale.io/generation":"7",
                                         "rescale.io/reason":"planner",
                                         "rescale.io/local-batch-size":"64",
                                         "rescale.io/accumulation-steps":"2"}},
                        "spec":{"pytorchReplicaSpecs":{"Worker":{"replicas":4}}}})"));
  // A batch without accumulation says so: workers given 2 before stop.
  recommendation.clear_accumulation_steps();
  CHECK(rescale::adapter::RecommendationAnnotations(recommendation, "planner")
            .at("rescale.io/accumulation-steps") == "0");

  // The job then registers at the batch its workers run.
  JobParams params;
  params.annotations = {{"rescale.io/local-batch-size", "32"}};
  json object = PyTorchJob(params);
  for (const auto& [key, value] : annotations) object["metadata"]["annotations"][key] = value;
  absl::StatusOr<rescale::adapter::JobInfo> job = rescale::adapter::ParsePyTorchJob(object);
  REQUIRE(job.ok());
  CHECK(rescale::adapter::ToJobSpec(*job).local_batch_size() == 64);
}

TEST_CASE("ParseTrainJob registers min and max as numNodes and reads GPUs per node") {
  TrainJobParams p;
  p.num_nodes = 3;
  p.gpus = 2;
  p.annotations = {{"rescale.io/priority", "4"}, {"rescale.io/policy", "planner"}};
  json object = TrainJob(p);
  object["metadata"]["uid"] = "u-1";
  auto job = rescale::adapter::ParseJob(rescale::adapter::kTrainerV1alpha1, object);
  REQUIRE(job.ok());
  CHECK(job->kind == "TrainJob");
  CHECK(job->uid == "u-1");
  CHECK(job->api == rescale::adapter::kTrainerV1alpha1);
  CHECK(job->workers == 3);
  CHECK(job->min_replicas == 3);
  CHECK(job->max_replicas == 3);
  CHECK(job->gpus_per_replica == 2u);
  CHECK(job->priority == 4);
  CHECK_FALSE(job->resizable);
  CHECK_FALSE(job->suspended);
  CHECK_FALSE(job->finished);
  CHECK(rescale::adapter::ToJobSpec(*job).min_replicas() == 3);
  CHECK(rescale::adapter::ToJobSpec(*job).max_replicas() == 3);

  // numNodes unset: one node. GPUs from requests when limits say nothing.
  p.num_nodes.reset();
  p.gpus.reset();
  object = TrainJob(p);
  object["spec"]["trainer"]["resourcesPerNode"] = {{"requests", {{"nvidia.com/gpu", 8}}}};
  object["spec"]["suspend"] = true;
  job = rescale::adapter::ParseTrainJob(object);
  REQUIRE(job.ok());
  CHECK(job->min_replicas == 1);
  CHECK(job->max_replicas == 1);
  CHECK(job->gpus_per_replica == 8u);
  CHECK(job->suspended);
  object["spec"]["trainer"].erase("resourcesPerNode");
  CHECK_FALSE(rescale::adapter::ParseTrainJob(object)->gpus_per_replica.has_value());

  // Complete and Failed mean it is over.
  for (const char* type : {"Complete", "Failed"}) {
    json over = TrainJob(TrainJobParams{});
    over["status"]["conditions"] = json::array({{{"type", type}, {"status", "True"}}});
    CHECK(rescale::adapter::ParseTrainJob(over)->finished);
  }
  json suspended_only = TrainJob(TrainJobParams{});
  suspended_only["status"]["conditions"] =
      json::array({{{"type", "Suspended"}, {"status", "True"}}});
  CHECK_FALSE(rescale::adapter::ParseTrainJob(suspended_only)->finished);

  // Errors name the object and the field.
  json bad = TrainJob(TrainJobParams{});
  bad["spec"]["trainer"]["numNodes"] = 0;
  auto parsed = rescale::adapter::ParseTrainJob(bad);
  REQUIRE_FALSE(parsed.ok());
  CHECK_THAT(std::string(parsed.status().message()),
             Catch::Contains("TrainJob default/llm") && Catch::Contains("spec.trainer.numNodes"));
  bad = TrainJob(TrainJobParams{});
  bad["spec"]["trainer"]["resourcesPerNode"]["limits"]["nvidia.com/gpu"] = "500m";
  parsed = rescale::adapter::ParseTrainJob(bad);
  REQUIRE_FALSE(parsed.ok());
  CHECK_THAT(std::string(parsed.status().message()),
             Catch::Contains("spec.trainer.resourcesPerNode.limits"));

  // The only patch there is: spec.suspend and the annotations.
  CHECK(rescale::adapter::TrainJobSuspendPatch("9", true, {{"rescale.io/generation", "2"}}) ==
        json::parse(R"({"metadata":{"resourceVersion":"9",
                                    "annotations":{"rescale.io/generation":"2"}},
                        "spec":{"suspend":true}})"));
  CHECK(rescale::adapter::JobResource(rescale::adapter::kTrainerV1alpha1) == "trainjobs");
  CHECK(rescale::adapter::JobResource(rescale::adapter::kKubeflowV1) == "pytorchjobs");
}

TEST_CASE("a change's Event is a valid events.k8s.io/v1 Event about the job") {
  rescale::adapter::JobInfo job;
  job.ns = "team-a";
  job.name = "bert";
  job.id = "team-a/bert";
  job.api = rescale::adapter::kKubeflowV1;
  job.uid = "0b3c";
  const absl::Time at = absl::FromUnixMicros(1'700'000'000'123'456);
  CHECK(rescale::adapter::MicroTime(at) == "2023-11-14T22:13:20.123456Z");
  json body = rescale::adapter::JobEventBody(job, "812", rescale::adapter::JobChange::kSuspended,
                                             std::string(2000, 'n'), at, "pod-1");
  CHECK(body == json{{"apiVersion", "events.k8s.io/v1"},
                     {"kind", "Event"},
                     {"metadata", {{"generateName", "bert."}, {"namespace", "team-a"}}},
                     {"eventTime", "2023-11-14T22:13:20.123456Z"},
                     {"reportingController", "rescale.io/rescale-adapter"},
                     {"reportingInstance", "pod-1"},
                     {"action", "Suspend"},
                     {"reason", "Suspended"},
                     {"note", std::string(1021, 'n') + "..."},
                     {"type", "Normal"},
                     {"regarding",
                      {{"apiVersion", "kubeflow.org/v1"},
                       {"kind", "PyTorchJob"},
                       {"namespace", "team-a"},
                       {"name", "bert"},
                       {"uid", "0b3c"},
                       {"resourceVersion", "812"}}}});
  CHECK(std::string(rescale::adapter::EventReason(rescale::adapter::JobChange::kRescaled)) ==
        "Rescaled");
  CHECK(std::string(rescale::adapter::EventAction(rescale::adapter::JobChange::kResumed)) ==
        "Resume");
}

TEST_CASE("the Event rate limit is a burst per job, then one per interval") {
  rescale::adapter::EventRateLimiter limiter(2, absl::Seconds(30));
  const absl::Time t0 = absl::FromUnixSeconds(1'700'000'000);
  CHECK(limiter.Allow("a", t0));
  CHECK(limiter.Allow("a", t0));
  CHECK_FALSE(limiter.Allow("a", t0));
  CHECK(limiter.Allow("b", t0));  // each job has its own bucket
  CHECK_FALSE(limiter.Allow("a", t0 + absl::Seconds(29)));
  CHECK(limiter.Allow("a", t0 + absl::Seconds(30)));
  CHECK_FALSE(limiter.Allow("a", t0 + absl::Seconds(31)));
  // Refills to the burst, no further.
  CHECK(limiter.Allow("a", t0 + absl::Hours(1)));
  CHECK(limiter.Allow("a", t0 + absl::Hours(1)));
  CHECK_FALSE(limiter.Allow("a", t0 + absl::Hours(1)));
  limiter.Forget("a");
  CHECK(limiter.Allow("a", t0 + absl::Hours(1)));
  rescale::adapter::EventRateLimiter none(0, absl::Seconds(30));
  CHECK_FALSE(none.Allow("a", t0));
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

// Found by tests/fuzz/kubeconfig.cc: yaml-cpp throws on subscripting a
// scalar, and the exception used to escape ParseKubeconfig and end the
// adapter.
TEST_CASE("kubeconfig: list entries that are not maps, or not named by a string, are skipped") {
  const std::string yaml = R"(
current-context: prod
contexts:
- just-a-string
- [a, list]
- name: [not, a, string]
- name: prod
  context: {cluster: prodc}
clusters:
- prodc
- name: prodc
  cluster: {server: "https://prod:6443"}
)";
  auto config = rescale::adapter::ParseKubeconfig(yaml, "");
  REQUIRE(config.ok());
  CHECK(config->server == "https://prod:6443");

  auto only_scalars =
      rescale::adapter::ParseKubeconfig("current-context: c\ncontexts: [c]\nclusters: [c]\n", "");
  REQUIRE_FALSE(only_scalars.ok());
  CHECK(only_scalars.status().code() == absl::StatusCode::kNotFound);
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
  auto scaled = (*client)->Patch(JobPath("default", "bert") + "/scale",
                                 "application/merge-patch+json", json{{"spec", {{"replicas", 3}}}});
  REQUIRE(scaled.ok());
  CHECK(Workers(kube.Object(JobPath("default", "bert"))) == 3);
}

TEST_CASE("the curl client sends the bearer token and re-reads a rotated token file") {
  FakeKubeApi kube;
  auto dir =
      std::filesystem::temp_directory_path() / ("adapter_test_token_" + std::to_string(::getpid()) +
                                                "_" + std::to_string(std::random_device{}()));
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
  (void)(*client)->List("/api/v1/nodes", {});
  std::ofstream(token_file) << "second\n";
  (void)(*client)->List("/api/v1/nodes", {});  // within the refresh period: old token
  clock.Advance(absl::Minutes(2));
  (void)(*client)->List("/api/v1/nodes", {});
  auto requests = kube.Requests();
  REQUIRE(requests.size() == 3);
  CHECK(requests[0].authorization == "Bearer first");
  CHECK(requests[1].authorization == "Bearer first");
  CHECK(requests[2].authorization == "Bearer second");
  std::filesystem::remove_all(dir);
}

TEST_CASE("in-cluster config reads the service-account mount and the service environment") {
  auto dir =
      std::filesystem::temp_directory_path() / ("adapter_test_sa_" + std::to_string(::getpid()) +
                                                "_" + std::to_string(std::random_device{}()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "token") << "sa-token\n";
  std::ofstream(dir / "ca.crt") << "PEM";
  std::ofstream(dir / "namespace") << "rescale";
  auto config = rescale::adapter::InClusterConfigFrom("10.0.0.1", "443", dir.string());
  REQUIRE(config.ok());
  CHECK(config->server == "https://10.0.0.1:443");
  CHECK(config->token_file == (dir / "token").string());
  CHECK(config->ca_file == (dir / "ca.crt").string());
  CHECK(config->default_namespace == "rescale");
  CHECK(rescale::adapter::InClusterConfigFrom("fd00::1", "443", dir.string())->server ==
        "https://[fd00::1]:443");
  auto outside = rescale::adapter::InClusterConfigFrom("", "", dir.string());
  REQUIRE_FALSE(outside.ok());
  CHECK(outside.status().code() == absl::StatusCode::kNotFound);
  std::filesystem::remove(dir / "token");
  auto no_token = rescale::adapter::InClusterConfigFrom("10.0.0.1", "443", dir.string());
  REQUIRE_FALSE(no_token.ok());
  CHECK_THAT(std::string(no_token.status().message()), Catch::Contains("token"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("the curl client refuses a CA file it cannot read, naming it") {
  rescale::adapter::CurlKubeClientOptions options;
  options.config.server = "https://127.0.0.1:6443";
  options.config.ca_file = "/nonexistent/ca.crt";
  auto client = rescale::adapter::CurlKubeClient::Create(options);
  REQUIRE_FALSE(client.ok());
  CHECK_THAT(std::string(client.status().message()), Catch::Contains("/nonexistent/ca.crt"));
}

using rescale::testing::kTestCertificate;
using rescale::testing::kTestPrivateKey;

TEST_CASE("over https the curl client verifies the API server against the configured CA") {
  auto dir =
      std::filesystem::temp_directory_path() / ("adapter_test_tls_" + std::to_string(::getpid()) +
                                                "_" + std::to_string(std::random_device{}()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "tls.crt") << kTestCertificate;
  std::ofstream(dir / "tls.key") << kTestPrivateKey;
  {
    FakeKubeApi kube((dir / "tls.crt").string(), (dir / "tls.key").string());
    kube.Put(Node("gpu-a", 8));
    REQUIRE(kube.url().rfind("https://", 0) == 0);

    rescale::adapter::CurlKubeClientOptions options;
    options.config.server = kube.url();
    options.config.ca_file = (dir / "tls.crt").string();
    auto trusted = rescale::adapter::CurlKubeClient::Create(options);
    REQUIRE(trusted.ok());
    auto nodes = (*trusted)->List("/api/v1/nodes", {});
    INFO(nodes.status().ToString());
    REQUIRE(nodes.ok());
    CHECK((*nodes)["items"].size() == 1);

    // The same CA as kubeconfig certificate-authority-data (PEM bytes).
    options.config.ca_file.clear();
    options.config.ca_data = kTestCertificate;
    auto from_data = rescale::adapter::CurlKubeClient::Create(options);
    REQUIRE(from_data.ok());
    CHECK((*from_data)->List("/api/v1/nodes", {}).ok());

    // Without that CA (the system's roots do not know it) it refuses.
    options.config.ca_data.clear();
    auto untrusted = rescale::adapter::CurlKubeClient::Create(options);
    REQUIRE(untrusted.ok());
    auto refused = (*untrusted)->List("/api/v1/nodes", {});
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.status().code() == absl::StatusCode::kUnavailable);
    CHECK(kube.Requests().size() == 2);  // the refused one never reached the server
  }
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

  // Dry run: rescaled's status then shows only the initial report.
  AdapterOptions options = h.Options();
  options.dry_run = true;
  h.StartAdapter(options);
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
  h.kube.Update(JobPath("default", "bert"),
                [](json& job) { job["metadata"]["annotations"]["rescale.io/priority"] = "9"; });
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
  h.kube.Update(
      path, [](json& job) { job["metadata"]["annotations"]["rescale.io/policy"] = "static-min"; });
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

  // Bookmarks and changes that do not move the target re-apply nothing.
  // The priority change is the marker: once rescaled has the update, the
  // adapter has handled every event before it.
  const size_t updates = h.log.CountOf(Kind::kRegistered, "default/bert");
  h.kube.SendBookmarks();
  h.kube.Update(path, [](json& job) { job["metadata"]["annotations"]["note"] = "x"; });
  h.kube.Update(path,
                [](json& job) { job["metadata"]["annotations"]["rescale.io/priority"] = "3"; });
  REQUIRE(h.log.WaitCount(Kind::kRegistered, "default/bert", updates + 1));
  CHECK(h.PatchesTo(path).size() == 2);
  CHECK(h.log.CountOf(Kind::kApplied, "default/bert") == 2);
}

TEST_CASE("a plan is applied releases first: the shrink is patched before the growth") {
  Harness h;
  // "a-grow" runs 1 worker of [1, 4] and static-max recommends 4;
  // "b-shrink" runs 4 and static-min recommends 1. The stream delivers in
  // job-id order, so the growth comes first.
  JobParams grow;
  grow.name = "a-grow";
  grow.workers = 1;
  grow.annotations = {{"rescale.io/policy", "static-max"}};
  JobParams shrink;
  shrink.name = "b-shrink";
  shrink.workers = 4;
  shrink.annotations = {{"rescale.io/policy", "static-min"}};
  const std::string grow_path = JobPath("default", "a-grow");
  const std::string shrink_path = JobPath("default", "b-shrink");
  h.kube.Put(PyTorchJob(grow));
  h.kube.Put(PyTorchJob(shrink));

  // rescaled has the plan before the adapter connects (registered with the
  // very spec the adapter derives), so both changes come in one initial
  // snapshot.
  for (const std::string& path : {grow_path, shrink_path}) {
    auto info = rescale::adapter::ParsePyTorchJob(h.kube.Object(path));
    REQUIRE(info.ok());
    grpc::ClientContext context;
    v1::RegisterJobRequest request;
    *request.mutable_spec() = rescale::adapter::ToJobSpec(*info);
    v1::Job job;
    REQUIRE(h.jobs->RegisterJob(&context, request, &job).ok());
  }
  {
    // The precondition the old adapter failed on: growth first on the wire.
    auto recs = v1::RecommendationService::NewStub(h.test_channel);
    grpc::ClientContext context;
    auto reader = recs->WatchRecommendations(&context, v1::WatchRecommendationsRequest());
    std::vector<std::pair<std::string, uint32_t>> initial;
    v1::RecommendationEvent event;
    while (reader->Read(&event) && event.type() != v1::RecommendationEvent::SYNCED) {
      initial.emplace_back(event.recommendation().job_id(), event.recommendation().replicas());
    }
    context.TryCancel();
    reader->Finish();
    REQUIRE(initial == std::vector<std::pair<std::string, uint32_t>>{{"default/a-grow", 4},
                                                                     {"default/b-shrink", 1}});
  }

  h.StartAdapter();
  REQUIRE(h.log.WaitCount(Kind::kApplied, "default/a-grow", 1));
  REQUIRE(h.log.WaitCount(Kind::kApplied, "default/b-shrink", 1));
  std::vector<std::string> job_patches;
  for (const RecordedRequest& request : h.kube.Writes()) {
    if (request.path == grow_path || request.path == shrink_path)
      job_patches.push_back(request.path);
  }
  CHECK(job_patches == std::vector<std::string>{shrink_path, grow_path});
  CHECK(Workers(h.kube.Object(shrink_path)) == 1);
  CHECK(Workers(h.kube.Object(grow_path)) == 4);
}

TEST_CASE("KubeDL PyTorchJobs are scaled at the same path in their own group") {
  Harness h;
  JobParams p;
  p.api_version = "training.kubedl.io/v1alpha1";
  p.name = "resnet";
  h.kube.Put(PyTorchJob(p));
  h.StartAdapter();
  const std::string path = JobPath("default", "resnet", "training.kubedl.io/v1alpha1");
  REQUIRE(h.log.WaitCount(Kind::kApplied, "default/resnet", 1));
  REQUIRE(h.PatchesTo(path).size() == 1);
  json body = json::parse(h.PatchesTo(path)[0].body);
  CHECK(body["spec"] == json::parse(R"({"pytorchReplicaSpecs":{"Worker":{"replicas":4}}})"));
  CHECK(Workers(h.kube.Object(path)) == 4);
  CHECK(h.GetJob("default/resnet")->status().current_replicas() == 4);
}

TEST_CASE("capacity is the GPUs of Ready nodes and follows node changes") {
  Harness h;
  h.kube.Put(Node("gpu-a", 8));
  h.kube.Put(Node("gpu-b", 4));
  AdapterOptions options = h.Options();
  options.capacity_gpus = -1;
  h.StartAdapter(options);
  REQUIRE(h.log.WaitCount(Kind::kCapacitySet, "", 1, 12));
  h.kube.Put(Node("gpu-c", 2));
  REQUIRE(h.log.WaitCount(Kind::kCapacitySet, "", 1, 14));
  h.kube.Delete("/api/v1/nodes/gpu-a");
  REQUIRE(h.log.WaitCount(Kind::kCapacitySet, "", 1, 6));
  grpc::ClientContext context;
  v1::Cluster cluster;
  REQUIRE(h.cluster->GetCluster(&context, v1::GetClusterRequest(), &cluster).ok());
  CHECK(cluster.total_gpus() == 6);
  CHECK(cluster.capacity_known());
}

TEST_CASE("capacity counts Ready, schedulable nodes whose taints the jobs tolerate", "[capacity]") {
  Harness h;
  JobParams bert;
  bert.gpus = 4;
  bert.tolerations =
      json::parse(R"([{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}])");
  h.kube.Put(PyTorchJob(bert));
  h.kube.Put(Node("ready", 8));
  json not_ready = Node("not-ready", 8);
  not_ready["status"]["conditions"][1]["status"] = "Unknown";
  h.kube.Put(not_ready);
  json cordoned = Node("cordoned", 8);
  cordoned["spec"]["unschedulable"] = true;
  h.kube.Put(cordoned);
  json team = Node("team-vision", 8);
  team["spec"]["taints"] =
      json::parse(R"([{"key": "team", "value": "vision", "effect": "NoSchedule"}])");
  h.kube.Put(team);
  json gpu_tainted = Node("gpu-tainted", 8);
  gpu_tainted["spec"]["taints"] =
      json::parse(R"([{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}])");
  h.kube.Put(gpu_tainted);
  json preferred = Node("preferred", 8);
  preferred["spec"]["taints"] =
      json::parse(R"([{"key": "spot", "value": "true", "effect": "PreferNoSchedule"}])");
  h.kube.Put(preferred);

  AdapterOptions options = h.Options();
  options.capacity_gpus = -1;
  h.StartAdapter(options);
  // ready + gpu-tainted (tolerated) + preferred (only a preference).
  REQUIRE(WaitForCapacity(h, 24, "4=6"));
  v1::Cluster cluster = CurrentCluster(h);
  CHECK(cluster.total_gpus() == 24);
  CHECK(cluster.allocatable_gpus() == 48);  // every node's GPUs
  CHECK(SlotsOf(cluster) == "4=6");

  // The pods are listed and watched across namespaces, bound and unfinished
  // only: exactly the selector the API server can filter on. (The capacity
  // needs only the list; the watch request may still be on its way.)
  REQUIRE(h.kube.WaitForRequests([](const std::vector<RecordedRequest>& requests) {
    return std::count_if(requests.begin(), requests.end(), [](const RecordedRequest& request) {
             return request.path == "/api/v1/pods";
           }) >= 2;
  }));
  std::vector<RecordedRequest> pod_requests;
  for (const RecordedRequest& request : h.kube.Requests()) {
    if (request.path == "/api/v1/pods") pod_requests.push_back(request);
  }
  REQUIRE(pod_requests.size() >= 2);
  CHECK_FALSE(pod_requests[0].is_watch());
  CHECK(pod_requests[1].is_watch());
  for (const RecordedRequest& request : pod_requests) {
    CHECK(request.method == "GET");
    CHECK(request.query.at("fieldSelector") ==
          "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed");
    CHECK(request.query.count("labelSelector") == 0);
  }

  // The node comes back Ready: counted; another is cordoned: not.
  h.kube.Update("/api/v1/nodes/not-ready",
                [](json& node) { node["status"]["conditions"][1]["status"] = "True"; });
  REQUIRE(WaitForCapacity(h, 32, "4=8"));
  h.kube.Update("/api/v1/nodes/ready", [](json& node) { node["spec"]["unschedulable"] = true; });
  REQUIRE(WaitForCapacity(h, 24, "4=6"));
  // The job no longer tolerates the GPU taint: that node drops out.
  h.kube.Update(JobPath("default", "bert"), [](json& job) {
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"].erase("tolerations");
  });
  REQUIRE(WaitForCapacity(h, 16, "4=4"));
  CHECK(CurrentCluster(h).total_gpus() == 16);
}

TEST_CASE("GPUs held by pods Rescale does not manage are taken out of the capacity", "[capacity]") {
  Harness h;
  JobParams bert;
  bert.gpus = 4;
  h.kube.Put(PyTorchJob(bert));
  h.kube.Put(Node("gpu-a", 8));
  h.kube.Put(Node("gpu-b", 8));
  h.kube.Put(Pod("research", "notebook", "gpu-a", 3));
  // The job's own pod: its GPUs are what rescaled plans.
  h.kube.Put(Pod("default", "bert-worker-0", "gpu-b", 4, "Running", "bert"));
  // Not bound yet, or finished: holds nothing on a node.
  h.kube.Put(Pod("research", "queued", "", 8, "Pending"));
  h.kube.Put(Pod("research", "done", "gpu-b", 8, "Succeeded"));
  AdapterOptions options = h.Options();
  options.capacity_gpus = -1;
  h.StartAdapter(options);
  // gpu-a: 8 - 3 = 5 free, one 4-GPU replica; gpu-b: two.
  REQUIRE(WaitForCapacity(h, 13, "4=3"));
  CHECK(CurrentCluster(h).total_gpus() == 13);
  CHECK(CurrentCluster(h).allocatable_gpus() == 16);
  CHECK(SlotsOf(CurrentCluster(h)) == "4=3");

  // The notebook finishes: the selective watch reports it DELETED.
  h.kube.Update(PodPath("research", "notebook"),
                [](json& pod) { pod["status"]["phase"] = "Succeeded"; });
  REQUIRE(WaitForCapacity(h, 16, "4=4"));
  // Another team's pod is bound to gpu-b: 2 GPUs left there.
  h.kube.Put(Pod("research", "sweep", "gpu-b", 6, "Pending"));
  REQUIRE(WaitForCapacity(h, 10, "4=2"));
  h.kube.Delete(PodPath("research", "sweep"));
  REQUIRE(WaitForCapacity(h, 16, "4=4"));
  CHECK(CurrentCluster(h).total_gpus() == 16);
}

TEST_CASE("an 8-GPU replica is not recommended onto two half-free nodes", "[capacity]") {
  Harness h;
  JobParams llm;
  llm.name = "llm";
  llm.gpus = 8;
  llm.workers = 1;
  llm.min_replicas = 1;
  llm.max_replicas = 2;
  llm.annotations = {{"rescale.io/policy", "planner"}};
  h.kube.Put(PyTorchJob(llm));
  h.kube.Put(Node("gpu-a", 8));
  h.kube.Put(Node("gpu-b", 8));
  h.kube.Put(Pod("research", "a", "gpu-a", 4));
  h.kube.Put(Pod("research", "b", "gpu-b", 4));
  AdapterOptions options = h.Options();
  options.capacity_gpus = -1;
  h.StartAdapter(options);
  // 8 GPUs free in total, but no node has 8: the job may not run.
  REQUIRE(WaitForCapacity(h, 8, "8=0"));
  const std::string path = JobPath("default", "llm");
  REQUIRE(WaitForLastApplied(h, "default/llm", "suspend"));
  CHECK(h.kube.Object(path)["spec"]["runPolicy"]["suspend"] == true);
  std::optional<v1::Job> job = h.GetJob("default/llm");
  REQUIRE(job);
  CHECK(job->recommendation().suspend());
  CHECK(job->recommendation().binding_constraint() == v1::NODE_SLOTS);

  // gpu-b frees up: one replica fits, and the job resumes with it.
  h.kube.Delete(PodPath("research", "b"));
  REQUIRE(WaitForCapacity(h, 12, "8=1"));
  REQUIRE(WaitForLastApplied(h, "default/llm", "replicas=1"));
  CHECK(h.kube.Object(path)["spec"]["runPolicy"]["suspend"] == false);
  CHECK(Workers(h.kube.Object(path)) == 1);
}

TEST_CASE("suspend and resume go through spec.runPolicy.suspend") {
  Harness h;
  // Two jobs of 2..4 one-GPU workers, planned by the cluster planner, on 2
  // GPUs: the higher priority one runs, the other is suspended.
  JobParams high;
  high.name = "high";
  high.min_replicas = 2;
  high.max_replicas = 2;
  high.annotations = {{"rescale.io/priority", "10"}, {"rescale.io/policy", "planner"}};
  JobParams low = high;
  low.name = "low";
  low.annotations = {{"rescale.io/priority", "1"}, {"rescale.io/policy", "planner"}};
  h.kube.Put(PyTorchJob(high));
  h.kube.Put(PyTorchJob(low));
  h.kube.Put(Node("gpu-a", 2));
  AdapterOptions options = h.Options();
  options.capacity_gpus = -1;
  h.StartAdapter(options);
  const std::string low_path = JobPath("default", "low");
  REQUIRE(h.log.WaitFor([&](const std::vector<AdapterEvent>& events) {
    for (const AdapterEvent& event : events) {
      if (event.kind == Kind::kApplied && event.job_id == "default/low" &&
          event.detail == "suspend")
        return true;
    }
    return false;
  }));
  REQUIRE(h.PatchesTo(low_path).size() == 1);
  json body = json::parse(h.PatchesTo(low_path)[0].body);
  CHECK(body["spec"] == json::parse(R"({"runPolicy":{"suspend":true}})"));
  CHECK(h.kube.Object(low_path)["spec"]["runPolicy"]["suspend"] == true);
  auto low_job = h.GetJob("default/low");
  // The suspension's annotations are in the suspending patch, its Event
  // says Suspended.
  std::string reason = PatchedReason(h.PatchesTo(low_path)[0]);
  CHECK_FALSE(reason.empty());
  CHECK(body["metadata"]["annotations"] == ChangeAnnotations(low_job->recommendation(), reason));
  REQUIRE(h.WaitForPosts(EventsPath("default"), 1));
  json event = json::parse(h.PostsTo(EventsPath("default"))[0].body);
  CHECK(event["reason"] == "Suspended");
  CHECK(event["action"] == "Suspend");
  CHECK(event["note"] == reason);
  CHECK(event["regarding"]["name"] == "low");
  CHECK(event["regarding"]["kind"] == "PyTorchJob");
  CHECK(low_job->status().suspended());
  CHECK(low_job->status().current_replicas() == 0);
  CHECK(h.PatchesTo(JobPath("default", "high")).empty());  // already right

  // More GPUs arrive: the low job resumes at its size.
  h.kube.Put(Node("gpu-b", 2));
  // An applied resume: after the suspend, an applied event with replicas.
  REQUIRE(h.log.WaitFor([&](const std::vector<AdapterEvent>& events) {
    bool suspended = false;
    for (const AdapterEvent& event : events) {
      if (event.kind != Kind::kApplied || event.job_id != "default/low") continue;
      if (event.detail == "suspend")
        suspended = true;
      else if (suspended)
        return true;
    }
    return false;
  }));
  REQUIRE(h.PatchesTo(low_path).size() == 2);
  body = json::parse(h.PatchesTo(low_path)[1].body);
  CHECK(body["spec"] == json::parse(R"({"runPolicy":{"suspend":false}})"));
  CHECK(h.kube.Object(low_path)["spec"]["runPolicy"]["suspend"] == false);
  low_job = h.GetJob("default/low");
  CHECK_FALSE(low_job->status().suspended());
  CHECK(low_job->status().current_replicas() == 2);
  reason = PatchedReason(h.PatchesTo(low_path)[1]);
  CHECK_FALSE(reason.empty());
  CHECK(body["metadata"]["annotations"] == ChangeAnnotations(low_job->recommendation(), reason));
  REQUIRE(h.WaitForPosts(EventsPath("default"), 2));
  event = json::parse(h.PostsTo(EventsPath("default"))[1].body);
  CHECK(event["reason"] == "Resumed");
  CHECK(event["note"] == reason);
  CHECK(event["action"] == "Resume");
  CHECK(event["regarding"]["name"] == "low");
}

TEST_CASE("PodGroup minMember follows the workers plus master, for both PodGroup flavours") {
  for (const std::string api_version :
       {"scheduling.x-k8s.io/v1alpha1", "scheduling.volcano.sh/v1beta1"}) {
    DYNAMIC_SECTION(api_version) {
      Harness h;
      JobParams p;  // 2 workers + 1 master; static-max -> 4 workers
      p.master = true;
      h.kube.Put(PyTorchJob(p));
      h.kube.Put(PodGroup(api_version, "default", "bert", 3));
      h.StartAdapter();
      const std::string group_path = "/apis/" + api_version + "/namespaces/default/podgroups/bert";
      REQUIRE(h.WaitForPatches(group_path, 1));
      REQUIRE(h.log.WaitCount(Kind::kApplied, "default/bert", 1));
      auto patch = h.PatchesTo(group_path)[0];
      CHECK(patch.content_type == "application/merge-patch+json");
      json body = json::parse(patch.body);
      CHECK(body["spec"] == json::parse(R"({"minMember":5})"));
      CHECK(body["metadata"]["resourceVersion"].is_string());
      CHECK(h.kube.Object(group_path)["spec"]["minMember"] == 5);
      CHECK(Workers(h.kube.Object(JobPath("default", "bert"))) == 4);
      // The gang is widened before the job grows. (The Event for the
      // change is POSTed besides, on its own thread.)
      std::vector<std::string> order;
      for (const RecordedRequest& request : h.kube.Writes()) {
        if (request.method == "PATCH") order.push_back(request.path);
      }
      REQUIRE(order.size() == 2);
      CHECK(order[0] == group_path);
      CHECK(order[1] == JobPath("default", "bert"));
    }
  }
}

TEST_CASE("a 409 Conflict makes the adapter re-GET and retry with the new resourceVersion") {
  Harness h;
  const std::string path = JobPath("default", "bert");
  h.kube.Put(PyTorchJob(JobParams{}));
  h.kube.ConflictOnNextPatch(path, 2);
  h.StartAdapter();
  REQUIRE(h.log.WaitCount(Kind::kApplied, "default/bert", 1));
  auto patches = h.PatchesTo(path);
  REQUIRE(patches.size() == 3);  // two conflicts, then success
  std::string rv0 = json::parse(patches[0].body)["metadata"]["resourceVersion"];
  std::string rv1 = json::parse(patches[1].body)["metadata"]["resourceVersion"];
  std::string rv2 = json::parse(patches[2].body)["metadata"]["resourceVersion"];
  CHECK(rv0 != rv1);
  CHECK(rv1 != rv2);
  CHECK(h.kube.Object(path)["metadata"]["resourceVersion"] != rv2);  // the patch moved it on
  CHECK(Workers(h.kube.Object(path)) == 4);
  // Between the PATCHes, a GET of the object.
  auto requests = h.kube.Requests();
  int gets_between = 0;
  bool after_first = false;
  for (const RecordedRequest& request : requests) {
    if (request.method == "PATCH" && request.path == path) {
      if (after_first) break;
      after_first = true;
    } else if (after_first && request.method == "GET" && request.path == path) {
      ++gets_between;
    }
  }
  CHECK(gets_between == 1);
  CHECK(h.GetJob("default/bert")->status().current_replicas() == 4);
}

TEST_CASE("adapter metrics count patches by outcome and API errors by code and time applies",
          "[metrics]") {
  // Declared before the harness, which stops the adapter that uses them.
  rescale::adapter::AdapterMetrics metrics;
  std::unique_ptr<rescale::adapter::MeteredKubeClient> metered;
  Harness h;
  REQUIRE(metrics.Serve("127.0.0.1:0").ok());
  REQUIRE(metrics.port() > 0);
  metered = std::make_unique<rescale::adapter::MeteredKubeClient>(h.client.get(), &metrics);
  const std::string path = JobPath("default", "bert");
  h.kube.Put(PyTorchJob(JobParams{}));
  h.kube.ConflictOnNextPatch(path, 1);
  AdapterOptions options = h.Options();
  options.metrics = &metrics;
  h.adapter = std::make_unique<rescale::adapter::Adapter>(options, metered.get(), h.channel);
  h.adapter->Start();
  // Recorded before the event is emitted.
  REQUIRE(h.log.WaitCount(Kind::kApplied, "default/bert", 1));
  REQUIRE(Workers(h.kube.Object(path)) == 4);

  httplib::Client client("127.0.0.1", metrics.port());
  httplib::Result scraped = client.Get("/metrics");
  REQUIRE(scraped);
  REQUIRE(scraped->status == 200);
  const std::string& text = scraped->body;
  INFO(text);
  // One 409, then the PATCH that applied; no PodGroup, so no other PATCH.
  CHECK_THAT(text, Catch::Contains("rescale_adapter_patches_total{outcome=\"conflict\"} 1\n"));
  CHECK_THAT(text, Catch::Contains("rescale_adapter_patches_total{outcome=\"applied\"} 1\n"));
  CHECK_THAT(text, Catch::Contains("rescale_adapter_patches_total{outcome=\"failed\"} 0\n"));
  CHECK_THAT(text, Catch::Contains("rescale_adapter_applies_total{outcome=\"applied\"} 1\n"));
  CHECK_THAT(text, Catch::Contains("rescale_adapter_applies_total{outcome=\"failed\"} 0\n"));
  CHECK_THAT(text, Catch::Contains("rescale_adapter_apply_duration_seconds_count 1\n"));
  // The conflict is an API error too, and each PodGroup flavour looked up
  // and not found (the fake API has none) a GET answered 404.
  CHECK_THAT(text,
             Catch::Contains(
                 "rescale_adapter_kube_api_errors_total{code=\"ABORTED\",verb=\"patch\"} 1\n"));
  CHECK_THAT(text, Catch::Contains(
                       "rescale_adapter_kube_api_errors_total{code=\"NOT_FOUND\",verb=\"get\"}"));

  // Debian's promtool finds nothing to say about it.
  REQUIRE(std::filesystem::exists("/usr/bin/promtool"));
  const std::filesystem::path file =
      std::filesystem::temp_directory_path() /
      ("rescale-adapter-metrics-" + std::to_string(::getpid()) + ".txt");
  std::ofstream(file) << text;
  FILE* pipe =
      ::popen(("/usr/bin/promtool check metrics < " + file.string() + " 2>&1").c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::string output;
  char buffer[4096];
  while (size_t n = std::fread(buffer, 1, sizeof buffer, pipe)) output.append(buffer, n);
  const int status = ::pclose(pipe);
  std::filesystem::remove(file);
  INFO(output);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(output.empty());
  h.adapter->Stop();
}

TEST_CASE("a watch answered with 410 Gone relists and catches up") {
  for (bool as_http : {true, false}) {
    DYNAMIC_SECTION((as_http ? "HTTP 410" : "ERROR event with code 410")) {
      Harness h;
      h.kube.Put(PyTorchJob(JobParams{}));
      h.StartAdapter();
      REQUIRE(h.log.WaitCount(Kind::kApplied, "default/bert", 1));
      REQUIRE(h.kube.WaitForOpenWatches(1));
      // History is compacted and, meanwhile, a job appears and one goes.
      h.kube.Compact(as_http);
      JobParams second;
      second.name = "gpt";
      h.kube.Put(PyTorchJob(second));
      h.kube.Delete(JobPath("default", "bert"));
      REQUIRE(h.log.WaitCount(Kind::kWatchRelisted, "", 1));
      REQUIRE(h.log.WaitCount(Kind::kRegistered, "default/gpt", 1));
      REQUIRE(h.log.WaitCount(Kind::kDeregistered, "default/bert", 1));
      CHECK_FALSE(h.GetJob("default/bert"));
      CHECK(h.GetJob("default/gpt"));
      // The relist came after a watch that asked for bookmarks.
      bool bookmarks = false;
      for (const RecordedRequest& request : h.kube.Requests()) {
        if (request.is_watch())
          bookmarks = request.query.count("allowWatchBookmarks") &&
                      request.query.at("allowWatchBookmarks") == "true";
      }
      CHECK(bookmarks);
    }
  }
}

TEST_CASE("an API server restart: the adapter re-watches from its resourceVersion") {
  Harness h;
  // A cluster without Kueue: the job APIs' watches are the only ones, so
  // the bookmarks counted below are theirs.
  h.kube.Unserve("/apis/kueue.x-k8s.io/");
  h.kube.Put(PyTorchJob(JobParams{}));
  h.StartAdapter();
  REQUIRE(h.log.WaitCount(Kind::kApplied, "default/bert", 1));
  // The change's Event is a write too: let it land first.
  REQUIRE(h.log.WaitCount(Kind::kEventRecorded, "default/bert", 1));
  // One watch per job API (PyTorchJobs of both flavours, TrainJobs).
  const size_t job_apis = AdapterOptions().job_apis.size();
  REQUIRE(job_apis == 3);
  REQUIRE(h.kube.WaitForOpenWatches(static_cast<int>(job_apis)));
  // A write the job watches do not see moves the resourceVersion on; a
  // bookmark brings them up to it, so they resume from there.
  const std::string bookmark_rv = h.kube.Put(Node("cpu-only", 0))["metadata"]["resourceVersion"];
  h.kube.SendBookmarks();
  REQUIRE(h.log.WaitCount(Kind::kBookmark, "", job_apis));
  for (const AdapterEvent& event : h.log.Events()) {
    if (event.kind == Kind::kBookmark) CHECK(event.detail == bookmark_rv);
  }
  h.kube.Stop();
  // While it is down, a new job is created (etcd keeps it).
  JobParams second;
  second.name = "gpt";
  h.kube.Put(PyTorchJob(second));
  h.kube.ClearRequests();
  h.kube.Start();
  REQUIRE(h.log.WaitCount(Kind::kApplied, "default/gpt", 1));
  CHECK(Workers(h.kube.Object(JobPath("default", "gpt"))) == 4);
  // It resumed watching from the bookmark; it did not need to relist.
  std::string first_watch_rv;
  bool relisted = false;
  for (const RecordedRequest& request : h.kube.Requests()) {
    if (request.path != "/apis/kubeflow.org/v1/pytorchjobs") continue;
    if (!request.is_watch()) relisted = true;
    if (request.is_watch() && first_watch_rv.empty())
      first_watch_rv = request.query.at("resourceVersion");
  }
  CHECK(first_watch_rv == bookmark_rv);
  CHECK_FALSE(relisted);
}

TEST_CASE("a rescaled restart: the adapter reconnects, re-registers and reapplies") {
  Harness h;
  h.kube.Put(PyTorchJob(JobParams{}));
  h.StartAdapter();
  REQUIRE(h.log.WaitCount(Kind::kApplied, "default/bert", 1));
  REQUIRE(h.log.WaitCount(Kind::kRescaledSynced, "", 1));
  const int port = h.rescaled->port();
  h.rescaled->Shutdown(absl::ZeroDuration());
  h.rescaled.reset();
  // A new, empty rescaled on the same address.
  h.StartRescaled(port);
  REQUIRE(h.log.WaitCount(Kind::kRescaledSynced, "", 2));
  REQUIRE(h.log.WaitCount(Kind::kApplied, "default/bert", 2));
  auto job = h.GetJob("default/bert");
  REQUIRE(job);
  CHECK(job->spec().max_replicas() == 4);
  CHECK(job->status().current_replicas() == 4);
  CHECK(job->status().last_applied_generation() == job->recommendation().generation());
  CHECK(job->status().last_applied_generation() > 0);
  // The cluster already ran 4 workers: nothing more to write.
  CHECK(h.PatchesTo(JobPath("default", "bert")).size() == 1);
}

TEST_CASE("a recommendation that comes before its job is listed is applied once the job is") {
  Harness h;
  // rescaled already knows the job (a previous adapter registered it) and
  // recommends 4; the API server is down when the adapter starts.
  {
    grpc::ClientContext context;
    v1::RegisterJobRequest request;
    request.mutable_spec()->set_job_id("default/bert");
    request.mutable_spec()->set_min_replicas(1);
    request.mutable_spec()->set_max_replicas(4);
    request.mutable_spec()->set_policy("static-max");
    v1::Job job;
    REQUIRE(h.jobs->RegisterJob(&context, request, &job).ok());
  }
  h.kube.Put(PyTorchJob(JobParams{}));
  h.kube.Stop();
  h.StartAdapter();
  REQUIRE(h.log.WaitCount(Kind::kRescaledSynced, "", 1));
  h.kube.Start();
  REQUIRE(h.log.WaitCount(Kind::kApplied, "default/bert", 1));
  CHECK(Workers(h.kube.Object(JobPath("default", "bert"))) == 4);
  CHECK(h.PatchesTo(JobPath("default", "bert")).size() == 1);
  CHECK(h.GetJob("default/bert")->status().current_replicas() == 4);
}

TEST_CASE("dry run prints the exact patches and sends none") {
  Harness h;
  JobParams p;
  p.master = true;
  h.kube.Put(PyTorchJob(p));
  h.kube.Put(PodGroup("scheduling.x-k8s.io/v1alpha1", "default", "bert", 3));
  AdapterOptions options = h.Options();
  options.dry_run = true;
  h.StartAdapter(options);
  REQUIRE(h.log.WaitCount(Kind::kApplied, "default/bert", 1));
  h.adapter->Stop();
  CHECK(h.kube.Writes().empty());
  CHECK(Workers(h.kube.Object(JobPath("default", "bert"))) == 2);
  std::vector<std::string> lines;
  std::istringstream out(h.dry_run_out.str());
  for (std::string line; std::getline(out, line);) lines.push_back(line);
  REQUIRE(lines.size() == 2);
  const std::string group_rv = h.kube.Object(
      "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/default/podgroups/bert")["metadata"]
                                                                             ["resourceVersion"];
  const std::string job_rv =
      h.kube.Object(JobPath("default", "bert"))["metadata"]["resourceVersion"];
  CHECK(lines[0] ==
        "PATCH /apis/scheduling.x-k8s.io/v1alpha1/namespaces/default/podgroups/bert "
        "application/merge-patch+json {\"metadata\":{\"resourceVersion\":\"" +
            group_rv + "\"},\"spec\":{\"minMember\":5}}");
  // The job's patch carries the annotations of the change with it.
  auto job = h.GetJob("default/bert");
  REQUIRE(job);
  const json job_patch = {
      {"metadata",
       {{"resourceVersion", job_rv},
        {"annotations",
         {{"rescale.io/recommended-replicas", "4"},
          {"rescale.io/generation", std::to_string(job->recommendation().generation())},
          {"rescale.io/reason", job->recommendation().reason()}}}}},
      {"spec", {{"pytorchReplicaSpecs", {{"Worker", {{"replicas", 4}}}}}}}};
  CHECK(lines[1] ==
        "PATCH /apis/kubeflow.org/v1/namespaces/default/pytorchjobs/bert "
        "application/merge-patch+json " +
            job_patch.dump());
  // No Event either: nothing changed.
  CHECK(h.log.CountOf(Kind::kEventRecorded) == 0);
  // Nothing was applied, so rescaled still sees the 2 workers that run.
  CHECK(job->status().current_replicas() == 2);
  CHECK(job->status().last_applied_generation() == 0);
}

TEST_CASE("jobs are deregistered when deleted and when they succeed") {
  Harness h;
  JobParams a;
  a.name = "a";
  JobParams b;
  b.name = "b";
  h.kube.Put(PyTorchJob(a));
  h.kube.Put(PyTorchJob(b));
  h.StartAdapter();
  REQUIRE(h.log.WaitCount(Kind::kRegistered, "default/a", 1));
  REQUIRE(h.log.WaitCount(Kind::kRegistered, "default/b", 1));
  REQUIRE(h.GetJob("default/a"));
  h.kube.Delete(JobPath("default", "a"));
  REQUIRE(h.log.WaitCount(Kind::kDeregistered, "default/a", 1));
  CHECK_FALSE(h.GetJob("default/a"));
  h.kube.Update(JobPath("default", "b"), [](json& job) {
    job["status"]["conditions"] = json::array({{{"type", "Succeeded"}, {"status", "True"}}});
  });
  REQUIRE(h.log.WaitCount(Kind::kDeregistered, "default/b", 1));
  CHECK_FALSE(h.GetJob("default/b"));
}

TEST_CASE("an applied change carries its annotations in the same patch and records an Event") {
  Harness h;
  rescale::ManualClock clock;
  h.kube.Put(PyTorchJob(JobParams{}));  // 2 workers in [1, 4], static-max: 4
  h.StartAdapter(h.OptionsWithClock(&clock));
  const std::string path = JobPath("default", "bert");
  REQUIRE(h.log.WaitCount(Kind::kApplied, "default/bert", 1));
  REQUIRE(h.WaitForPosts(EventsPath("default"), 1));
  REQUIRE(h.log.WaitCount(Kind::kEventRecorded, "default/bert", 1));
  const v1::Recommendation recommendation = h.GetJob("default/bert")->recommendation();
  REQUIRE(recommendation.replicas() == 4);

  // One PATCH: the replicas and the three annotations together.
  auto patches = h.PatchesTo(path);
  REQUIRE(patches.size() == 1);
  CHECK(patches[0].content_type == "application/merge-patch+json");
  json body = json::parse(patches[0].body);
  const std::string reason = PatchedReason(patches[0]);
  CHECK_FALSE(reason.empty());
  const json annotations = ChangeAnnotations(recommendation, reason);
  CHECK(body == json{{"metadata",
                      {{"resourceVersion", body["metadata"]["resourceVersion"]},
                       {"annotations", annotations}}},
                     {"spec", {{"pytorchReplicaSpecs", {{"Worker", {{"replicas", 4}}}}}}}});
  // Merged into the job's annotations: its own stay, the label too.
  const json stored = h.kube.Object(path);
  CHECK(stored["metadata"]["annotations"]["rescale.io/policy"] == "static-max");
  for (const auto& [key, value] : annotations.items())
    CHECK(stored["metadata"]["annotations"][key] == value);
  CHECK(stored["metadata"]["labels"]["rescale.io/managed"] == "true");

  // The Event, exactly, about the job as the patch left it.
  auto posts = h.PostsTo(EventsPath("default"));
  REQUIRE(posts.size() == 1);
  CHECK(posts[0].content_type == "application/json");
  CHECK(json::parse(posts[0].body) ==
        ExpectedEvent(stored, "Rescale", "Rescaled", reason, clock.Now()));
  // The API server named it from generateName and stored it.
  auto events = h.client->List(EventsPath("default"), {});
  REQUIRE(events.ok());
  REQUIRE((*events)["items"].size() == 1);
  const json& event = (*events)["items"][0];
  CHECK(event["metadata"]["name"].get<std::string>().rfind("bert.", 0) == 0);
  CHECK(event["metadata"]["name"].get<std::string>().size() == 10);
  CHECK(event["metadata"]["resourceVersion"].is_string());

  // rescaled restarts: the job already runs 4, so no patch and no Event,
  // though the generation is new.
  const int port = h.rescaled->port();
  h.rescaled->Shutdown(absl::ZeroDuration());
  h.rescaled.reset();
  h.StartRescaled(port);
  REQUIRE(h.log.WaitCount(Kind::kApplied, "default/bert", 2));
  CHECK(h.PatchesTo(path).size() == 1);
  CHECK(h.log.CountOf(Kind::kEventRecorded) == 1);
}

TEST_CASE("Events are rate-limited per job on the injected clock") {
  Harness h;
  rescale::ManualClock clock;
  AdapterOptions options = h.OptionsWithClock(&clock);
  options.events.burst = 1;
  options.events.interval = absl::Seconds(60);
  h.kube.Put(PyTorchJob(JobParams{}));  // 2 workers in [1, 4], static-max
  h.StartAdapter(options);
  const std::string path = JobPath("default", "bert");
  // Each lower maxReplicas is a new recommendation, and a shrink.
  auto set_max = [&](int max_replicas) {
    h.kube.Update(path,
                  [&](json& job) { job["spec"]["elasticPolicy"]["maxReplicas"] = max_replicas; });
  };
  // 1: grow to 4, the burst's one Event.
  REQUIRE(h.log.WaitCount(Kind::kApplied, "default/bert", 1));
  REQUIRE(h.log.WaitCount(Kind::kEventRecorded, "default/bert", 1));
  // 2: shrink to 3 in the same minute: applied, annotated, no Event.
  set_max(3);
  REQUIRE(h.log.WaitCount(Kind::kApplied, "default/bert", 2));
  REQUIRE(h.log.WaitCount(Kind::kEventRateLimited, "default/bert", 1));
  REQUIRE(h.PatchesTo(path).size() == 2);
  const v1::Recommendation second = h.GetJob("default/bert")->recommendation();
  CHECK(second.replicas() == 3);
  CHECK(json::parse(h.PatchesTo(path)[1].body)["metadata"]["annotations"] ==
        ChangeAnnotations(second, PatchedReason(h.PatchesTo(path)[1])));
  // 3: 59 s later, shrink to 2: still no token.
  clock.Advance(absl::Seconds(59));
  set_max(2);
  REQUIRE(h.log.WaitCount(Kind::kApplied, "default/bert", 3));
  REQUIRE(h.log.WaitCount(Kind::kEventRateLimited, "default/bert", 2));
  // 4: a minute after the first, shrink to 1: a token is back.
  clock.Advance(absl::Seconds(1));
  set_max(1);
  REQUIRE(h.log.WaitCount(Kind::kApplied, "default/bert", 4));
  REQUIRE(h.WaitForPosts(EventsPath("default"), 2));
  REQUIRE(h.log.WaitCount(Kind::kEventRecorded, "default/bert", 2));
  // Events are POSTed in order, so the held-back ones would have come
  // before this one: exactly two, for the first and fourth changes.
  auto posts = h.PostsTo(EventsPath("default"));
  REQUIRE(posts.size() == 2);
  REQUIRE(h.PatchesTo(path).size() == 4);
  CHECK(Workers(h.kube.Object(path)) == 1);
  const json event = json::parse(posts[1].body);
  CHECK(event["reason"] == "Rescaled");
  CHECK(event["note"] == PatchedReason(h.PatchesTo(path)[3]));
  CHECK(event["eventTime"] ==
        absl::FormatTime("%Y-%m-%dT%H:%M:%E6SZ", clock.Now(), absl::UTCTimeZone()));
  CHECK(h.log.CountOf(Kind::kEventRateLimited) == 2);
}

TEST_CASE("a failed Event POST is logged and counted and the change stands") {
  rescale::adapter::AdapterMetrics metrics;
  Harness h;
  rescale::ManualClock clock;
  h.kube.Put(PyTorchJob(JobParams{}));
  h.kube.RejectNextPosts(403);
  AdapterOptions options = h.OptionsWithClock(&clock);
  options.metrics = &metrics;
  h.StartAdapter(options);
  REQUIRE(h.log.WaitCount(Kind::kApplied, "default/bert", 1));
  REQUIRE(h.log.WaitCount(Kind::kEventFailed, "default/bert", 1));
  CHECK(Workers(h.kube.Object(JobPath("default", "bert"))) == 4);
  auto job = h.GetJob("default/bert");
  CHECK(job->status().current_replicas() == 4);
  CHECK(job->status().last_applied_generation() == job->recommendation().generation());
  const std::string text = metrics.Serialize();
  INFO(text);
  CHECK_THAT(text, Catch::Contains("rescale_adapter_events_total{outcome=\"failed\"} 1"));
  CHECK_THAT(text, Catch::Contains("rescale_adapter_events_total{outcome=\"recorded\"} 0"));
  CHECK_THAT(text, Catch::Contains("rescale_adapter_applies_total{outcome=\"applied\"} 1"));
  h.adapter->Stop();
}

TEST_CASE("TrainJobs are registered at numNodes and suspended and resumed, never resized") {
  Harness h;
  rescale::ManualClock clock;
  // On 2 GPUs the planner runs the higher-priority PyTorchJob (2 fixed
  // one-GPU workers) and suspends the TrainJob (2 one-GPU nodes).
  JobParams high;
  high.name = "high";
  high.min_replicas = 2;
  high.max_replicas = 2;
  high.annotations = {{"rescale.io/priority", "10"}, {"rescale.io/policy", "planner"}};
  h.kube.Put(PyTorchJob(high));
  TrainJobParams low;
  low.annotations = {{"rescale.io/priority", "1"}, {"rescale.io/policy", "planner"}};
  h.kube.Put(TrainJob(low));
  AdapterOptions options = h.OptionsWithClock(&clock);
  options.capacity_gpus = 2;
  h.StartAdapter(options);
  const std::string path = TrainJobPath("default", "llm");
  REQUIRE(h.log.WaitFor([&](const std::vector<AdapterEvent>& events) {
    for (const AdapterEvent& event : events) {
      if (event.kind == Kind::kApplied && event.job_id == "default/llm" &&
          event.detail == "suspend")
        return true;
    }
    return false;
  }));
  auto registered = h.GetJob("default/llm");
  REQUIRE(registered);
  CHECK(registered->spec().min_replicas() == 2);
  CHECK(registered->spec().max_replicas() == 2);
  CHECK(registered->spec().gpus_per_replica() == 1);
  CHECK(registered->spec().priority() == 1);
  // The list went to the TrainJob collection with the managed label.
  bool listed = false;
  for (const RecordedRequest& request : h.kube.Requests()) {
    listed |= request.path == "/apis/trainer.kubeflow.org/v1alpha1/trainjobs" &&
              !request.is_watch() && request.query.count("labelSelector") &&
              request.query.at("labelSelector") == "rescale.io/managed=true";
  }
  CHECK(listed);

  // The suspension: spec.suspend and the annotations, in one patch.
  const v1::Recommendation suspended = registered->recommendation();
  REQUIRE(suspended.suspend());
  const std::string kNotResizable =
      "; TrainJob cannot be resized: spec.trainer.numNodes is immutable";
  REQUIRE(h.PatchesTo(path).size() == 1);
  RecordedRequest patch = h.PatchesTo(path)[0];
  const std::string suspend_reason = PatchedReason(patch);
  // rescaled's reason, then that it cannot be resized.
  CHECK(suspend_reason.size() > kNotResizable.size());
  CHECK_THAT(suspend_reason, Catch::EndsWith(kNotResizable));
  CHECK(patch.content_type == "application/merge-patch+json");
  json body = json::parse(patch.body);
  CHECK(body == json{{"metadata",
                      {{"resourceVersion", body["metadata"]["resourceVersion"]},
                       {"annotations", ChangeAnnotations(suspended, suspend_reason)}}},
                     {"spec", {{"suspend", true}}}});
  CHECK(h.kube.Object(path)["spec"]["suspend"] == true);
  CHECK(registered->status().suspended());
  REQUIRE(h.WaitForPosts(EventsPath("default"), 1));
  auto posts = h.PostsTo(EventsPath("default"));
  REQUIRE(posts.size() == 1);
  CHECK(json::parse(posts[0].body) ==
        ExpectedEvent(h.kube.Object(path), "Suspend", "Suspended", suspend_reason, clock.Now()));
  // The PyTorchJob already ran as planned: no patch, no Event.
  CHECK(h.PatchesTo(JobPath("default", "high")).empty());

  // More GPUs: the TrainJob resumes at its one size.
  clock.Advance(absl::Seconds(5));
  {
    grpc::ClientContext context;
    v1::SetCapacityRequest request;
    request.set_total_gpus(4);
    v1::Cluster cluster;
    REQUIRE(h.cluster->SetCapacity(&context, request, &cluster).ok());
  }
  REQUIRE(h.WaitForPatches(path, 2));
  // The resume applied and reported: after the suspension, an applied
  // event with replicas.
  REQUIRE(h.log.WaitFor([&](const std::vector<AdapterEvent>& events) {
    bool suspended = false;
    for (const AdapterEvent& event : events) {
      if (event.kind != Kind::kApplied || event.job_id != "default/llm") continue;
      if (event.detail == "suspend")
        suspended = true;
      else if (suspended)
        return true;
    }
    return false;
  }));
  const v1::Recommendation resumed = h.GetJob("default/llm")->recommendation();
  REQUIRE_FALSE(resumed.suspend());
  REQUIRE(resumed.replicas() == 2);
  const std::string resume_reason = PatchedReason(h.PatchesTo(path)[1]);
  CHECK(resume_reason.size() > kNotResizable.size());
  CHECK_THAT(resume_reason, Catch::EndsWith(kNotResizable));
  body = json::parse(h.PatchesTo(path)[1].body);
  CHECK(body == json{{"metadata",
                      {{"resourceVersion", body["metadata"]["resourceVersion"]},
                       {"annotations", ChangeAnnotations(resumed, resume_reason)}}},
                     {"spec", {{"suspend", false}}}});
  CHECK(h.kube.Object(path)["spec"]["suspend"] == false);
  CHECK(h.GetJob("default/llm")->status().current_replicas() == 2);
  REQUIRE(h.WaitForPosts(EventsPath("default"), 2));
  posts = h.PostsTo(EventsPath("default"));
  REQUIRE(posts.size() == 2);
  CHECK(json::parse(posts[1].body) ==
        ExpectedEvent(h.kube.Object(path), "Resume", "Resumed", resume_reason, clock.Now()));

  // Never a numNodes patch, never the scale subresource (it has none).
  for (const RecordedRequest& request : h.kube.Requests()) {
    INFO(request.method << " " << request.path << " " << request.body);
    CHECK(request.path.find("/scale") == std::string::npos);
    if (request.path == path && request.method == "PATCH") {
      CHECK_FALSE(json::parse(request.body)["spec"].contains("trainer"));
    }
  }
  CHECK(h.kube.Object(path)["spec"]["trainer"]["numNodes"] == 2);
}

TEST_CASE("a job API whose CRD is not installed is retried with backoff and holds nothing back") {
  Harness h;
  // TrainJobs are in the default job APIs, but Trainer is not installed.
  h.kube.Unserve("/apis/trainer.kubeflow.org/");
  h.kube.Put(PyTorchJob(JobParams{}));
  h.StartAdapter();
  REQUIRE(h.log.WaitCount(Kind::kApplied, "default/bert", 1));
  CHECK(Workers(h.kube.Object(JobPath("default", "bert"))) == 4);
  // It keeps looking (a later install is found), with backoff.
  const std::string trainjobs = "/apis/trainer.kubeflow.org/v1alpha1/trainjobs";
  REQUIRE(h.kube.WaitForRequests([&](const std::vector<RecordedRequest>& requests) {
    int lists = 0;
    for (const RecordedRequest& request : requests) lists += request.path == trainjobs;
    return lists >= 3;
  }));
  for (const AdapterEvent& event : h.log.Events()) {
    if (event.kind == Kind::kJobsListed) CHECK(event.detail != trainjobs);
  }
}

TEST_CASE("the fake API server selects pods by field as the API server does", "[capacity]") {
  FakeKubeApi kube;
  rescale::adapter::CurlKubeClientOptions options;
  options.config.server = kube.url();
  auto client = rescale::adapter::CurlKubeClient::Create(options);
  REQUIRE(client.ok());
  kube.Put(Pod("a", "bound", "node-1", 1));
  kube.Put(Pod("a", "unbound", "", 1, "Pending"));
  const rescale::adapter::Selectors on_nodes{.labels = {},
                                             .fields = rescale::adapter::kPodsOnNodesFieldSelector};
  auto list = (*client)->List("/api/v1/pods", on_nodes);
  REQUIRE(list.ok());
  REQUIRE((*list)["items"].size() == 1);
  CHECK((*list)["items"][0]["metadata"]["name"] == "bound");
  // A field the API server does not index is refused, not ignored.
  auto refused = (*client)->List("/api/v1/pods", {.labels = {}, .fields = "spec.priority=1"});
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(refused.status().message()),
             Catch::Contains("field label not supported: spec.priority"));

  // A selective watch: an object that starts matching is ADDED, one that
  // stops is DELETED with its last matching state.
  const std::string from = (*list)["metadata"]["resourceVersion"].get<std::string>();
  kube.Update(PodPath("a", "unbound"), [](json& pod) { pod["spec"]["nodeName"] = "node-2"; });
  json finished =
      kube.Update(PodPath("a", "bound"), [](json& pod) { pod["status"]["phase"] = "Succeeded"; });
  kube.Update(PodPath("a", "unbound"), [](json& pod) { pod["status"]["phase"] = "Running"; });
  std::vector<rescale::adapter::WatchEvent> seen;
  std::atomic<bool> stop{false};
  absl::Status watched = (*client)->Watch(
      "/api/v1/pods", on_nodes, from,
      [&](const rescale::adapter::WatchEvent& event) {
        if (event.type != "BOOKMARK") seen.push_back(event);
        return seen.size() < 3;
      },
      stop);
  REQUIRE(watched.ok());
  REQUIRE(seen.size() == 3);
  CHECK(seen[0].type == "ADDED");
  CHECK(seen[0].object["metadata"]["name"] == "unbound");
  CHECK(seen[1].type == "DELETED");
  CHECK(seen[1].object["metadata"]["name"] == "bound");
  CHECK(seen[1].object["status"]["phase"] == "Running");
  CHECK(seen[1].object["metadata"]["resourceVersion"] == finished["metadata"]["resourceVersion"]);
  CHECK(seen[2].type == "MODIFIED");
  CHECK(seen[2].object["status"]["phase"] == "Running");
}

TEST_CASE("the fake API server treats TrainJobs as the CRD does: no scale, trainer immutable") {
  FakeKubeApi kube;
  rescale::adapter::CurlKubeClientOptions options;
  options.config.server = kube.url();
  auto client = rescale::adapter::CurlKubeClient::Create(options);
  REQUIRE(client.ok());
  json stored = kube.Put(TrainJob(TrainJobParams{}));
  CHECK(stored["metadata"]["uid"].is_string());
  const std::string path = TrainJobPath("default", "llm");
  auto scale = (*client)->Get(path + "/scale");
  REQUIRE_FALSE(scale.ok());
  CHECK(scale.status().code() == absl::StatusCode::kNotFound);
  auto resize = (*client)->Patch(path, "application/merge-patch+json",
                                 json{{"spec", {{"trainer", {{"numNodes", 4}}}}}});
  REQUIRE_FALSE(resize.ok());
  CHECK(resize.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(resize.status().message()), Catch::Contains("immutable"));
  auto suspend =
      (*client)->Patch(path, "application/merge-patch+json",
                       rescale::adapter::TrainJobSuspendPatch(
                           stored["metadata"]["resourceVersion"].get<std::string>(), true));
  REQUIRE(suspend.ok());
  CHECK((*suspend)["spec"]["suspend"] == true);
  // An Event the API server would refuse is refused (422), naming the field.
  json event = ExpectedEvent(*suspend, "Suspend", "Suspended", "n", absl::UnixEpoch());
  event.erase("reportingInstance");
  auto refused = (*client)->Post(EventsPath("default"), event);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(refused.status().message()), Catch::Contains("reportingInstance"));
  event["reportingInstance"] = "pod";
  auto created = (*client)->Post(EventsPath("default"), event);
  REQUIRE(created.ok());
  CHECK((*created)["metadata"]["name"].get<std::string>().rfind("llm.", 0) == 0);
  CHECK(kube.Object(EventsPath("default") + "/" + (*created)["metadata"]["name"].get<std::string>())
            .is_object());
}

// YAML as the API server would store it in JSON: plain scalars that read
// as integers or booleans become those, quoted ones stay strings.
json YamlToJson(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map: {
      json out = json::object();
      for (const auto& entry : node) out[entry.first.as<std::string>()] = YamlToJson(entry.second);
      return out;
    }
    case YAML::NodeType::Sequence: {
      json out = json::array();
      for (const YAML::Node& item : node) out.push_back(YamlToJson(item));
      return out;
    }
    case YAML::NodeType::Scalar: {
      if (node.Tag() != "!") {
        int64_t integer = 0;
        bool boolean = false;
        if (YAML::convert<int64_t>::decode(node, integer)) return integer;
        if (YAML::convert<bool>::decode(node, boolean)) return boolean;
      }
      return node.as<std::string>();
    }
    default:
      return nullptr;
  }
}

TEST_CASE("two rescaled on etcd: the adapter and the agent follow the leader through a kill -9") {
  Harness h;  // its in-process rescaled is not used here
  rescale::testing::EtcdCluster etcd(1);
  // Not a structured binding: clang 14 cannot capture those in lambdas.
  auto pair = rescale::testing::StartPair(etcd);
  auto& leader = pair.first;
  auto& follower = pair.second;
  h.kube.Put(PyTorchJob(JobParams{}));
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 10);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 10);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 100);
  // The follower first: both clients must find the leader themselves.
  const std::string servers = follower->address + "," + leader->address;
  auto adapter_servers =
      rescale::client::ServerList::Create(servers, grpc::InsecureChannelCredentials(), args);
  REQUIRE(adapter_servers.ok());
  h.adapter =
      std::make_unique<rescale::adapter::Adapter>(h.Options(), h.client.get(), *adapter_servers);
  h.adapter->Start();
  REQUIRE(h.log.WaitCount(Kind::kApplied, "default/bert", 1));
  const size_t synced = h.log.CountOf(Kind::kRescaledSynced);
  auto job_on = [](rescale::testing::Rescaled& rescaled) {
    grpc::ClientContext context;
    v1::GetJobRequest request;
    request.set_job_id("default/bert");
    v1::Job job;
    REQUIRE(rescaled.jobs->GetJob(&context, request, &job).ok());
    return job;
  };
  const v1::Job applied = job_on(*leader);
  REQUIRE(applied.status().current_replicas() == 4);
  REQUIRE(applied.status().last_applied_generation() == applied.recommendation().generation());

  // The agent's samples, at 4 workers, sent through the list.
  auto agent_servers =
      rescale::client::ServerList::Create(servers, grpc::InsecureChannelCredentials(), args);
  REQUIRE(agent_servers.ok());
  rescale::agent::GrpcTransport transport(*agent_servers, absl::Seconds(5));
  // The samples' timestamps must be recent for the real rescaled: the
  // manual clock (which paces the agent's retries) starts at the real now.
  rescale::ManualClock clock(absl::Now());
  rescale::agent::SenderOptions sender_options;
  sender_options.job_id = "default/bert";
  sender_options.pod = "bert-worker-0";
  sender_options.world_size = 4;
  sender_options.max_batch = 10;
  sender_options.initial_backoff = absl::Milliseconds(10);
  sender_options.max_backoff = absl::Milliseconds(100);
  rescale::agent::SampleSender sender(sender_options, &transport, &clock, [] { return 0.5; });
  uint64_t step = 0;
  // Sends what is queued: each failed attempt moves the manual clock past
  // its backoff (the agent's own schedule), at most 200 attempts.
  auto deliver = [&](int samples) {
    for (int i = 0; i < samples; ++i) {
      sender.Add({.seconds = 0.25, .step = ++step, .batch_size = 32, .at = clock.Now()});
    }
    for (int attempt = 0; attempt < 200 && sender.stats().pending > 0; ++attempt) {
      if (!sender.MaybeSend()) {
        clock.Advance(std::max(absl::Milliseconds(1), sender.NextAttempt() - clock.Now()));
      }
    }
  };
  deliver(20);
  INFO(sender.last_error().ToString()
       << " sent " << sender.stats().sent << " acked " << sender.stats().acked << " rejected "
       << sender.stats().rejected << " pending " << sender.stats().pending << " failed "
       << sender.stats().failed_rpcs);
  CHECK(sender.stats().accepted == 20);
  // The leader checkpoints them before it dies.
  leader->AwaitPlanAndCheckpointAfter(absl::Now());

  leader->process->Kill();
  // The adapter's stream breaks; it finds the new leader, registers
  // everything there again, and finds nothing to apply: the generation it
  // applied is still the newest.
  REQUIRE(h.log.WaitCount(Kind::kRescaledSynced, "", synced + 1));
  const v1::Job after = job_on(*follower);
  CHECK(after.status().current_replicas() == 4);
  CHECK(after.recommendation().generation() == applied.recommendation().generation());
  CHECK(after.status().last_applied_generation() == applied.recommendation().generation());
  CHECK(h.PatchesTo(JobPath("default", "bert")).size() == 1);
  // The size measured before the failover is still measured.
  REQUIRE(after.curve().points_size() >= 4);
  CHECK(after.curve().points(3).observed());

  // The agent's next samples go to the new leader; none is lost or dropped.
  deliver(10);
  CHECK(sender.stats().pending == 0);
  CHECK(sender.stats().accepted == 30);
  CHECK(sender.stats().abandoned == 0);
  CHECK(sender.stats().dropped == 0);
  CHECK(h.log.CountOf(Kind::kApplied, "default/bert") == 1);
}

TEST_CASE("the docker/k8s manifests parse and grant exactly the adapter's verbs") {
  const std::filesystem::path dir = std::filesystem::path(RESCALE_SOURCE_DIR) / "docker" / "k8s";
  REQUIRE(std::filesystem::exists(dir));
  std::map<std::string, YAML::Node> by_kind;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    // kustomization.yaml lists manifests; it is not one.
    if (entry.path().extension() != ".yaml" || entry.path().filename() == "kustomization.yaml")
      continue;
    for (const YAML::Node& doc : YAML::LoadAllFromFile(entry.path().string())) {
      if (!doc || doc.IsNull()) continue;
      REQUIRE(doc["kind"]);
      REQUIRE(doc["apiVersion"]);
      by_kind[doc["kind"].as<std::string>() + "/" + doc["metadata"]["name"].as<std::string>()] =
          doc;
    }
  }
  REQUIRE(by_kind.count("ClusterRole/rescale-adapter"));
  std::set<std::string> grants;
  for (const YAML::Node& rule : by_kind["ClusterRole/rescale-adapter"]["rules"]) {
    for (const YAML::Node& group : rule["apiGroups"]) {
      for (const YAML::Node& resource : rule["resources"]) {
        for (const YAML::Node& verb : rule["verbs"]) {
          grants.insert(group.as<std::string>() + "/" + resource.as<std::string>() + ":" +
                        verb.as<std::string>());
        }
      }
    }
  }
  std::set<std::string> expected;
  for (const char* group : {"kubeflow.org", "training.kubedl.io"}) {
    for (const char* verb : {"get", "list", "watch", "patch"})
      expected.insert(std::string(group) + "/pytorchjobs:" + verb);
  }
  for (const char* group : {"scheduling.x-k8s.io", "scheduling.volcano.sh"}) {
    for (const char* verb : {"get", "patch"})
      expected.insert(std::string(group) + "/podgroups:" + verb);
  }
  for (const char* verb : {"get", "list", "watch", "patch"})
    expected.insert("trainer.kubeflow.org/trainjobs:" + std::string(verb));
  expected.insert("events.k8s.io/events:create");
  for (const char* resource : {"/nodes:", "/pods:"}) {
    for (const char* verb : {"list", "watch"}) expected.insert(resource + std::string(verb));
  }
  for (const char* resource : {"clusterqueues", "localqueues"}) {
    for (const char* verb : {"list", "watch"})
      expected.insert(absl::StrCat("kueue.x-k8s.io/", resource, ":", verb));
  }
  CHECK(grants == expected);
  REQUIRE(by_kind.count("PyTorchJob/bert-elastic"));
  YAML::Node job = by_kind["PyTorchJob/bert-elastic"];
  CHECK(job["metadata"]["labels"]["rescale.io/managed"].as<std::string>() == "true");
  // The example is one the adapter manages, with the values it documents.
  auto info = rescale::adapter::ParsePyTorchJob(YamlToJson(job));
  REQUIRE(info.ok());
  CHECK(info->min_replicas == 1);
  CHECK(info->max_replicas == 8);
  CHECK(info->gpus_per_replica == 1u);
  CHECK(info->priority == 10);
  CHECK(info->restart_cost_seconds == 90);
  CHECK_FALSE(info->operator_hpa);
  // rescaled: one replica with its SQLite state on a volume that outlives
  // the pod, at the path its --state names.
  REQUIRE(by_kind.count("StatefulSet/rescaled"));
  YAML::Node rescaled = by_kind["StatefulSet/rescaled"];
  CHECK(rescaled["spec"]["replicas"].as<int>() == 1);
  YAML::Node container = rescaled["spec"]["template"]["spec"]["containers"][0];
  bool state_flag = false;
  for (const YAML::Node& arg : container["args"])
    state_flag |= arg.as<std::string>() == "--state=sqlite:/var/lib/rescale/state.db";
  CHECK(state_flag);
  REQUIRE(container["volumeMounts"][0]["mountPath"].as<std::string>() == "/var/lib/rescale");
  CHECK(container["volumeMounts"][0]["name"].as<std::string>() ==
        rescaled["spec"]["volumeClaimTemplates"][0]["metadata"]["name"].as<std::string>());
  REQUIRE(by_kind.count("Deployment/rescale-adapter"));
  REQUIRE(by_kind.count("Service/rescaled"));

  // docker/k8s/ha: replicas on etcd, each advertising its pod IP, ready
  // only while it leads (the health of a Rescale service), alive always.
  std::map<std::string, YAML::Node> ha;
  for (const YAML::Node& doc : YAML::LoadAllFromFile((dir / "ha" / "rescaled-ha.yaml").string())) {
    if (doc && !doc.IsNull()) ha[doc["kind"].as<std::string>()] = doc;
  }
  REQUIRE(ha.count("Deployment"));
  REQUIRE(ha.count("Service"));
  CHECK(ha["Deployment"]["spec"]["replicas"].as<int>() >= 2);
  YAML::Node ha_container = ha["Deployment"]["spec"]["template"]["spec"]["containers"][0];
  std::set<std::string> ha_args;
  for (const YAML::Node& arg : ha_container["args"]) ha_args.insert(arg.as<std::string>());
  CHECK(ha_args.count("--state=etcd://etcd.rescale.svc:2379/rescale"));
  CHECK(ha_args.count("--advertise_address=$(POD_IP):50051"));
  CHECK(ha_container["env"][0]["name"].as<std::string>() == "POD_IP");
  // Probes run rescalectl over TLS: readiness asks for the leader-only
  // service, liveness for the server as a whole.
  auto probe = [&](const char* which) {
    std::vector<std::string> command;
    for (const YAML::Node& word : ha_container[which]["exec"]["command"]) {
      command.push_back(word.as<std::string>());
    }
    return command;
  };
  const std::vector<std::string> readiness = probe("readinessProbe");
  REQUIRE(readiness.size() >= 3);
  CHECK(readiness.front() == "rescalectl");
  CHECK(std::vector<std::string>(readiness.end() - 3, readiness.end()) ==
        std::vector<std::string>{"health", "--service", "rescale.v1.JobService"});
  const std::vector<std::string> liveness = probe("livenessProbe");
  REQUIRE_FALSE(liveness.empty());
  CHECK(liveness.back() == "health");
  REQUIRE(by_kind.count("ServiceAccount/rescale-adapter"));
  REQUIRE(by_kind.count("ClusterRoleBinding/rescale-adapter"));
}

// The pod template `pod` is scraped (prometheus.io annotations) on `port`,
// which its first container serves metrics on (`flag`) and names "metrics".
void CheckScraped(const YAML::Node& pod, const std::string& what, int port,
                  const std::string& flag) {
  INFO(what);
  const YAML::Node annotations = pod["metadata"]["annotations"];
  REQUIRE(annotations);
  CHECK(annotations["prometheus.io/scrape"].as<std::string>() == "true");
  CHECK(annotations["prometheus.io/port"].as<std::string>() == std::to_string(port));
  CHECK(annotations["prometheus.io/path"].as<std::string>() == "/metrics");
  const YAML::Node container = pod["spec"]["containers"][0];
  bool listens = false;
  for (const YAML::Node& arg : container["args"]) {
    listens |= arg.as<std::string>() == flag + "=0.0.0.0:" + std::to_string(port);
  }
  CHECK(listens);
  bool named = false;
  for (const YAML::Node& container_port : container["ports"]) {
    named |= container_port["name"].as<std::string>() == "metrics" &&
             container_port["containerPort"].as<int>() == port;
  }
  CHECK(named);
}

TEST_CASE("the docker/k8s pods are scraped by annotation on the port their metrics listen on",
          "[metrics]") {
  const std::filesystem::path dir = std::filesystem::path(RESCALE_SOURCE_DIR) / "docker" / "k8s";
  std::map<std::string, YAML::Node> by_kind;
  for (const std::filesystem::path& file :
       {dir / "rescaled.yaml", dir / "adapter.yaml", dir / "ha" / "rescaled-ha.yaml"}) {
    for (const YAML::Node& doc : YAML::LoadAllFromFile(file.string())) {
      if (!doc || doc.IsNull()) continue;
      by_kind[file.filename().string() + ":" + doc["kind"].as<std::string>()] = doc;
    }
  }
  REQUIRE(by_kind.count("rescaled.yaml:StatefulSet"));
  REQUIRE(by_kind.count("rescaled-ha.yaml:Deployment"));
  REQUIRE(by_kind.count("adapter.yaml:Deployment"));
  CheckScraped(by_kind["rescaled.yaml:StatefulSet"]["spec"]["template"], "rescaled.yaml", 9464,
               "--metrics_listen");
  CheckScraped(by_kind["rescaled-ha.yaml:Deployment"]["spec"]["template"], "rescaled-ha.yaml", 9464,
               "--metrics_listen");
  CheckScraped(by_kind["adapter.yaml:Deployment"]["spec"]["template"], "adapter.yaml", 9465,
               "--metrics-listen");
}

TEST_CASE(
    "the Grafana dashboard parses and every query names metrics rescaled or the adapter "
    "export",
    "[metrics]") {
  // The metric names as exported: a rescaled with metrics on, after one
  // call (the grpc_server_* series appear with the first), and the
  // adapter's registry. Histograms add _bucket, _count and _sum.
  rescale::server::ServerOptions options;
  options.listen = "127.0.0.1:0";
  options.metrics_listen = "127.0.0.1:0";
  options.run_plan_timer = false;
  options.engine.capacity_gpus = 8;  // rescale_gpus_capacity is absent while unknown
  auto started = rescale::server::RescaleServer::Start(options);
  REQUIRE(started.ok());
  {
    // rescale_gpus_allocatable is absent until a SetCapacity reports it.
    auto stub = v1::ClusterService::NewStub(
        grpc::CreateChannel((*started)->address(), grpc::InsecureChannelCredentials()));
    grpc::ClientContext context;
    v1::SetCapacityRequest request;
    request.set_total_gpus(8);
    request.set_allocatable_gpus(16);
    v1::Cluster cluster;
    REQUIRE(stub->SetCapacity(&context, request, &cluster).ok());
  }
  httplib::Client client("127.0.0.1", (*started)->metrics_port());
  httplib::Result scraped = client.Get("/metrics");
  REQUIRE(scraped);
  rescale::adapter::AdapterMetrics adapter_metrics;
  adapter_metrics.RecordApiError("get", absl::StatusCode::kNotFound);
  std::set<std::string> exported;
  for (const std::string& text : {scraped->body, adapter_metrics.Serialize()}) {
    std::istringstream lines(text);
    std::string line;
    while (std::getline(lines, line)) {
      if (line.empty() || line[0] == '#') continue;
      exported.insert(line.substr(0, line.find_first_of("{ ")));
    }
  }
  for (const char* name :
       {"rescale_jobs", "rescale_gpus_capacity", "rescale_gpus_allocated",
        "rescale_plan_duration_seconds_bucket", "grpc_server_handled_total",
        "grpc_server_handling_seconds_bucket", "rescale_adapter_patches_total"}) {
    INFO(name);
    CHECK(exported.count(name));
  }

  const std::filesystem::path file = std::filesystem::path(RESCALE_SOURCE_DIR) / "docker" / "k8s" /
                                     "grafana" / "rescale-dashboard.json";
  std::ifstream in(file);
  REQUIRE(in);
  const json dashboard = json::parse(in);  // throws (fails the test) when it does not parse
  REQUIRE(dashboard["panels"].is_array());
  std::set<std::string> titles;
  std::set<std::string> used;
  size_t queries = 0;
  for (const json& panel : dashboard["panels"]) {
    titles.insert(panel["title"].get<std::string>());
    for (const json& target : panel["targets"]) {
      std::string expr = target["expr"].get<std::string>();
      INFO(expr);
      ++queries;
      // Label values ("OK") are not names: drop the quoted strings.
      expr = std::regex_replace(expr, std::regex("\"[^\"]*\""), "\"\"");
      size_t names = 0;
      const std::regex identifier("[a-zA-Z_:][a-zA-Z0-9_:]*");
      for (auto it = std::sregex_iterator(expr.begin(), expr.end(), identifier);
           it != std::sregex_iterator(); ++it) {
        const std::string name = it->str();
        if (!name.starts_with("rescale_") && !name.starts_with("grpc_server_")) continue;
        ++names;
        used.insert(name);
        INFO(name);
        CHECK(exported.count(name));
      }
      CHECK(names > 0);
    }
  }
  CHECK(queries >= 5);
  // What the dashboard is for: jobs, GPUs, plan time, ingest rate, rejections.
  for (const char* title :
       {"Jobs by state", "GPUs", "Plan time", "Ingest rate", "Rejected samples by reason"}) {
    INFO(title);
    CHECK(titles.count(title));
  }
  for (const char* name : {"rescale_jobs", "rescale_gpus_capacity", "rescale_gpus_allocatable",
                           "rescale_samples_accepted_total", "rescale_samples_rejected_total",
                           "rescale_plan_duration_seconds_bucket"}) {
    INFO(name);
    CHECK(used.count(name));
  }
}
}  // namespace
