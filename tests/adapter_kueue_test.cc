// Tests of rescale-adapter with Kueue (client/adapter/kueue.h, docs/kueue.md):
// ClusterQueues mirrored as Rescale's queues and followed through their
// watch, LocalQueues placing Kueue-labelled jobs, Kueue-labelled jobs never
// suspended or resumed by the adapter, and the queue file without Kueue.
//
// The API server is the fake of tests/fake_kube_api.h, serving Kueue's
// objects shaped as Kueue v0.19.2 (kubernetes-sigs/kueue 8eab68778fc1)
// serves them: ClusterQueue from apis/kueue/v1beta2/clusterqueue_types.go
// (spec.cohortName, spec.resourceGroups[].coveredResources and
// .flavors[].resources[].{name, nominalQuota, borrowingLimit, lendingLimit}
// as int-or-string quantities, spec.fairSharing.weight,
// spec.namespaceSelector), v1beta1's spec.cohort
// (apis/kueue/v1beta1/clusterqueue_types.go), LocalQueue spec.clusterQueue
// (localqueue_types.go), and the queue label kueue.x-k8s.io/queue-name
// (pkg/controller/constants/constants.go). A job Kueue has not admitted is
// suspended (its webhook sets suspend on create, and only admission clears
// it: pkg/controller/jobframework/reconciler.go); the tests play Kueue's
// part by writing the job's suspend. rescaled is real and in-process; the
// harness is tests/adapter_harness.h. Nothing sleeps.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "client/adapter/kueue.h"
#include "tests/adapter_harness.h"

namespace {

using namespace adapter_harness;  // NOLINT: the harness is this file's vocabulary
using rescale::QueueSpec;
using rescale::adapter::ParseClusterQueue;
using rescale::adapter::ParseLocalQueue;
using rescale::adapter::ParseQuantity;

struct CqParams {
  std::string name = "team-a";
  json nominal = 32;
  std::string cohort;
  json borrowing;  // null = unset
  json lending;
  json weight;
  std::string version = "v1beta2";
};

// A ClusterQueue with a CPU and a GPU quota in one flavor, as Kueue's
// examples (site/content/en/docs/concepts/cluster_queue.md) write them.
json ClusterQueue(const CqParams& p) {
  json gpu = {{"name", "nvidia.com/gpu"}, {"nominalQuota", p.nominal}};
  if (!p.borrowing.is_null()) gpu["borrowingLimit"] = p.borrowing;
  if (!p.lending.is_null()) gpu["lendingLimit"] = p.lending;
  json spec = {{"namespaceSelector", json::object()},
               {"resourceGroups",
                {{{"coveredResources", {"cpu", "nvidia.com/gpu"}},
                  {"flavors",
                   {{{"name", "a100"},
                     {"resources", {{{"name", "cpu"}, {"nominalQuota", "512"}}, gpu}}}}}}}}};
  if (!p.cohort.empty()) spec[p.version == "v1beta1" ? "cohort" : "cohortName"] = p.cohort;
  if (!p.weight.is_null()) spec["fairSharing"] = {{"weight", p.weight}};
  return {{"apiVersion", "kueue.x-k8s.io/" + p.version},
          {"kind", "ClusterQueue"},
          {"metadata", {{"name", p.name}}},
          {"spec", spec}};
}

json LocalQueue(const std::string& ns, const std::string& name, const std::string& cluster_queue,
                const std::string& version = "v1beta2") {
  return {{"apiVersion", "kueue.x-k8s.io/" + version},
          {"kind", "LocalQueue"},
          {"metadata", {{"name", name}, {"namespace", ns}}},
          {"spec", {{"clusterQueue", cluster_queue}}}};
}

std::string ClusterQueuePath(const std::string& name, const std::string& version = "v1beta2") {
  return "/apis/kueue.x-k8s.io/" + version + "/clusterqueues/" + name;
}
std::string LocalQueuePath(const std::string& ns, const std::string& name) {
  return "/apis/kueue.x-k8s.io/v1beta2/namespaces/" + ns + "/localqueues/" + name;
}

// A planner-sized PyTorchJob in Kueue's LocalQueue `local_queue`.
json KueueJob(JobParams p, const std::string& local_queue) {
  p.annotations = {{"rescale.io/policy", "planner"}};
  json job = PyTorchJob(p);
  job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = local_queue;
  return job;
}

std::vector<v1::QueueStatus> RescaledQueues(Harness& h) {
  grpc::ClientContext context;
  v1::ListQueuesResponse response;
  REQUIRE(h.cluster->ListQueues(&context, v1::ListQueuesRequest(), &response).ok());
  return {response.queues().begin(), response.queues().end()};
}

// The defined queue `name` as rescaled has it; nullopt when it has none.
std::optional<v1::Queue> RescaledQueue(Harness& h, const std::string& name) {
  for (const v1::QueueStatus& q : RescaledQueues(h)) {
    if (q.queue().name() == name && q.defined()) return q.queue();
  }
  return std::nullopt;
}

// Whether any write to `path` set a suspend field (PyTorchJob's
// spec.runPolicy.suspend).
bool AnyPatchSuspends(Harness& h, const std::string& path) {
  for (const RecordedRequest& request : h.PatchesTo(path)) {
    const json body = json::parse(request.body);
    if (body.contains("spec") && body["spec"].contains("runPolicy")) return true;
  }
  return false;
}

// ---------------------------------------------------------- pure parts --

TEST_CASE("ParseQuantity reads Kubernetes quantities: numbers, strings, SI and binary suffixes") {
  CHECK(ParseQuantity(json(8)) == 8);
  CHECK(ParseQuantity(json("8")) == 8);
  CHECK(ParseQuantity(json("8000m")) == Approx(8));
  CHECK(ParseQuantity(json("0.5")) == Approx(0.5));
  CHECK(ParseQuantity(json("1k")) == 1000);
  CHECK(ParseQuantity(json("2Ki")) == 2048);
  CHECK(ParseQuantity(json("1e3")) == 1000);
  CHECK(ParseQuantity(json("1.5E2")) == 150);
  CHECK_FALSE(ParseQuantity(json("8 GPUs")).has_value());
  CHECK_FALSE(ParseQuantity(json("inf")).has_value());
  CHECK_FALSE(ParseQuantity(json("0x10")).has_value());
  CHECK_FALSE(ParseQuantity(json("")).has_value());
  CHECK_FALSE(ParseQuantity(json(true)).has_value());
}

TEST_CASE("a ClusterQueue of either version becomes a Rescale queue; errors name the field") {
  CqParams p;
  p.cohort = "research";
  p.borrowing = "32";
  p.lending = 16;
  p.weight = "0.5";
  for (const std::string version : {"v1beta2", "v1beta1"}) {
    DYNAMIC_SECTION(version) {
      p.version = version;
      absl::StatusOr<QueueSpec> queue = ParseClusterQueue(ClusterQueue(p));
      REQUIRE(queue.ok());
      CHECK(*queue == QueueSpec{.name = "team-a",
                                .nominal_gpus = 32,
                                .cohort = "research",
                                .borrowing_limit_gpus = 32,
                                .lending_limit_gpus = 16,
                                .weight = 0.5});
    }
  }
  SECTION("GPUs of every flavor add up; a limit unset on one flavor is unset for the queue") {
    json object = ClusterQueue(p);
    json& flavors = object["spec"]["resourceGroups"][0]["flavors"];
    json h100 = json::parse(R"({"name": "h100", "resources": [
        {"name": "cpu", "nominalQuota": "64"}, {"name": "nvidia.com/gpu", "nominalQuota": "8"}]})");
    flavors.push_back(h100);
    absl::StatusOr<QueueSpec> queue = ParseClusterQueue(object);
    REQUIRE(queue.ok());
    CHECK(queue->nominal_gpus == 40);
    CHECK_FALSE(queue->borrowing_limit_gpus.has_value());  // h100 sets none: no limit
    CHECK(queue->lending_limit_gpus == 24u);               // 16 + all 8 of h100
  }
  SECTION("without a cohort, limits mean nothing; without GPUs, the quota is 0") {
    CqParams alone;
    alone.nominal = "4";
    absl::StatusOr<QueueSpec> queue = ParseClusterQueue(ClusterQueue(alone));
    REQUIRE(queue.ok());
    CHECK(*queue == QueueSpec{.name = "team-a",
                              .nominal_gpus = 4,
                              .cohort = "",
                              .borrowing_limit_gpus = std::nullopt,
                              .lending_limit_gpus = std::nullopt,
                              .weight = 1});
    json cpu_only = ClusterQueue(alone);
    cpu_only["spec"]["resourceGroups"][0]["flavors"][0]["resources"].erase(1);
    queue = ParseClusterQueue(cpu_only);
    REQUIRE(queue.ok());
    CHECK(queue->nominal_gpus == 0);
  }
  SECTION("errors") {
    CqParams bad = p;
    bad.nominal = "lots";
    absl::StatusOr<QueueSpec> queue = ParseClusterQueue(ClusterQueue(bad));
    REQUIRE_FALSE(queue.ok());
    CHECK(queue.status().message() ==
          "ClusterQueue team-a: spec.resourceGroups[0].flavors[0].resources[1].nominalQuota "
          "\"lots\" is not a non-negative quantity");
    bad = p;
    bad.name = "team.a";
    queue = ParseClusterQueue(ClusterQueue(bad));
    REQUIRE_FALSE(queue.ok());
    CHECK(absl::StrContains(queue.status().message(), "is not a DNS-1123 label"));
    bad = p;
    bad.weight = "-1";
    queue = ParseClusterQueue(ClusterQueue(bad));
    REQUIRE_FALSE(queue.ok());
    CHECK(absl::StrContains(queue.status().message(), "spec.fairSharing.weight"));
  }
  absl::StatusOr<rescale::adapter::LocalQueueRef> local =
      ParseLocalQueue(LocalQueue("ml", "lq-a", "team-a"));
  REQUIRE(local.ok());
  CHECK(local->key == "ml/lq-a");
  CHECK(local->cluster_queue == "team-a");
  json no_target = LocalQueue("ml", "lq-a", "");
  CHECK_FALSE(ParseLocalQueue(no_target).ok());
}

// ---------------------------------------------------------- end to end --

TEST_CASE("rescaled's queues follow Kueue's ClusterQueues, each edit within one watch event") {
  Harness h;
  CqParams a;
  a.cohort = "research";
  CqParams b = a;
  b.name = "team-b";
  b.lending = "16";
  b.weight = 2;
  h.kube.Put(ClusterQueue(a));
  h.kube.Put(ClusterQueue(b));
  h.StartAdapter();
  // Waits, woken by the adapter's events, until rescaled's queues satisfy
  // `state`.
  auto wait_for_queues = [&](const std::function<bool()>& state) {
    return h.log.WaitFor([&](const std::vector<AdapterEvent>&) { return state(); });
  };
  REQUIRE(wait_for_queues([&] { return RescaledQueue(h, "team-b").has_value(); }));
  std::optional<v1::Queue> queue_b = RescaledQueue(h, "team-b");
  REQUIRE(queue_b.has_value());
  CHECK(queue_b->nominal_gpus() == 32);
  CHECK(queue_b->cohort() == "research");
  CHECK(queue_b->lending_limit_gpus() == 16);
  CHECK_FALSE(queue_b->has_borrowing_limit_gpus());
  CHECK(queue_b->weight() == 2);

  // Each write of a ClusterQueue reaches rescaled through its one watch
  // event: no LIST (relist) of ClusterQueues happens meanwhile.
  h.kube.ClearRequests();
  h.kube.Update(ClusterQueuePath("team-a"), [](json& cq) {
    cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][1]["nominalQuota"] = "16";
  });
  REQUIRE(wait_for_queues([&] { return RescaledQueue(h, "team-a")->nominal_gpus() == 16; }));
  // A new ClusterQueue, then a deleted one.
  CqParams c;
  c.name = "team-c";
  c.nominal = 8;
  h.kube.Put(ClusterQueue(c));
  REQUIRE(wait_for_queues([&] {
    std::optional<v1::Queue> queue = RescaledQueue(h, "team-c");
    return queue.has_value() && queue->nominal_gpus() == 8;
  }));
  h.kube.Delete(ClusterQueuePath("team-b"));
  REQUIRE(wait_for_queues([&] { return !RescaledQueue(h, "team-b").has_value(); }));
  for (const RecordedRequest& request : h.kube.Requests()) {
    if (absl::StrContains(request.path, "/clusterqueues")) CHECK(request.is_watch());
  }
  // A ClusterQueue Rescale cannot name is left out, and says why.
  CqParams dotted;
  dotted.name = "team.d";
  h.kube.Put(ClusterQueue(dotted));
  REQUIRE(h.log.WaitFor([](const std::vector<AdapterEvent>& events) {
    for (const AdapterEvent& e : events) {
      if (e.kind == Kind::kSkipped && absl::StrContains(e.detail, "ClusterQueue team.d"))
        return true;
    }
    return false;
  }));
  for (const RecordedRequest& write : h.kube.Writes()) {
    CHECK_FALSE(absl::StartsWith(write.path, "/apis/kueue.x-k8s.io/"));
  }
}

TEST_CASE("a Kueue-labelled job is never patched with suspend; an un-labelled one still is") {
  Harness h;
  // 6 GPUs: Kueue's team-a owns 4, the default queue holds the other 2.
  CqParams a;
  a.nominal = 4;
  h.kube.Put(ClusterQueue(a));
  h.kube.Put(LocalQueue("ml", "lq-a", "team-a"));
  JobParams running;
  running.ns = "ml";
  running.name = "admitted";
  running.workers = 2;
  running.suspend = false;  // Kueue admitted it
  JobParams waiting = running;
  waiting.name = "queued";
  waiting.workers = 1;
  waiting.suspend = true;  // Kueue's webhook suspended it; not admitted yet
  h.kube.Put(KueueJob(running, "lq-a"));
  h.kube.Put(KueueJob(waiting, "lq-a"));
  // Two plain jobs of 2 GPUs in the default queue's 2: the lower priority
  // one is suspended by the adapter, as always.
  JobParams high;
  high.name = "plain-high";
  high.min_replicas = 2;
  high.max_replicas = 2;
  high.annotations = {{"rescale.io/priority", "10"}, {"rescale.io/policy", "planner"}};
  JobParams low = high;
  low.name = "plain-low";
  low.annotations = {{"rescale.io/priority", "1"}, {"rescale.io/policy", "planner"}};
  h.kube.Put(PyTorchJob(high));
  h.kube.Put(PyTorchJob(low));
  AdapterOptions options = h.Options();
  options.capacity_gpus = 6;
  h.StartAdapter(options);

  const std::string queued_path = JobPath("ml", "queued");
  const std::string admitted_path = JobPath("ml", "admitted");
  // The plain job is suspended through its suspend field.
  REQUIRE(h.log.WaitFor([](const std::vector<AdapterEvent>& events) {
    for (const AdapterEvent& e : events) {
      if (e.kind == Kind::kApplied && e.job_id == "default/plain-low" && e.detail == "suspend")
        return true;
    }
    return false;
  }));
  CHECK(AnyPatchSuspends(h, JobPath("default", "plain-low")));
  CHECK(h.kube.Object(JobPath("default", "plain-low"))["spec"]["runPolicy"]["suspend"] == true);

  // The job Kueue has not admitted: registered in its ClusterQueue's queue,
  // recommended 0 with the reason, and the reason and an Event on the job;
  // its suspend is not touched.
  REQUIRE(h.log.WaitCount(Kind::kKueueWaiting, "ml/queued", 1));
  std::optional<v1::Job> queued = h.GetJob("ml/queued");
  REQUIRE(queued.has_value());
  CHECK(queued->spec().queue() == "team-a");
  CHECK(queued->spec().admission() == "kueue");
  CHECK(queued->recommendation().suspend());
  CHECK(queued->recommendation().binding_constraint() == v1::QUOTA);
  CHECK(absl::StrContains(queued->recommendation().reason(),
                          "waits for Kueue to admit it (queue team-a)"));
  REQUIRE(h.WaitForPatches(queued_path, 1));
  const json wait_patch = json::parse(h.PatchesTo(queued_path)[0].body);
  CHECK_FALSE(wait_patch.contains("spec"));
  CHECK(wait_patch["metadata"]["annotations"]["rescale.io/recommended-replicas"] == "0");
  CHECK(absl::StrContains(
      wait_patch["metadata"]["annotations"]["rescale.io/reason"].get<std::string>(),
      "waits for Kueue to admit it"));
  REQUIRE(h.kube.WaitForRequests([&](const std::vector<RecordedRequest>& requests) {
    for (const RecordedRequest& r : requests) {
      if (r.method == "POST" && r.path == EventsPath("ml") &&
          json::parse(r.body)["reason"] == "WaitingForKueue")
        return true;
    }
    return false;
  }));
  // The admitted job runs within team-a's 4 GPUs, resized but never
  // suspended.
  std::optional<v1::Job> admitted = h.GetJob("ml/admitted");
  REQUIRE(admitted.has_value());
  CHECK_FALSE(admitted->recommendation().suspend());
  CHECK(admitted->recommendation().replicas() <= 4);

  // Kueue admits the queued job (it clears suspend): rescaled hears at once
  // and sizes it, within team-a with the other one.
  h.kube.Update(queued_path, [](json& job) { job["spec"]["runPolicy"]["suspend"] = false; });
  REQUIRE(h.log.WaitFor([&](const std::vector<AdapterEvent>&) {
    std::optional<v1::Job> job = h.GetJob("ml/queued");
    return job.has_value() && !job->status().suspended() && !job->recommendation().suspend();
  }));
  REQUIRE(h.log.WaitFor([&](const std::vector<AdapterEvent>&) {
    std::optional<v1::Job> one = h.GetJob("ml/queued");
    std::optional<v1::Job> two = h.GetJob("ml/admitted");
    return one->recommendation().replicas() + two->recommendation().replicas() <= 4 &&
           !two->recommendation().suspend();
  }));
  // Kueue evicts the admitted one (sets suspend): it waits again, and the
  // adapter does not resume it.
  h.kube.Update(admitted_path, [](json& job) { job["spec"]["runPolicy"]["suspend"] = true; });
  REQUIRE(h.log.WaitCount(Kind::kKueueWaiting, "ml/admitted", 1));
  CHECK(h.kube.Object(admitted_path)["spec"]["runPolicy"]["suspend"] == true);
  CHECK(absl::StrContains(h.GetJob("ml/admitted")->recommendation().reason(), "waits for Kueue"));

  CHECK_FALSE(AnyPatchSuspends(h, queued_path));
  CHECK_FALSE(AnyPatchSuspends(h, admitted_path));
}

TEST_CASE("a Kueue job's queue comes through its LocalQueue and follows LocalQueue edits") {
  Harness h;
  CqParams a;
  CqParams b;
  b.name = "team-b";
  h.kube.Put(ClusterQueue(a));
  h.kube.Put(ClusterQueue(b));
  h.kube.Put(LocalQueue("ml", "lq", "team-a"));
  JobParams job;
  job.ns = "ml";
  job.name = "bert";
  job.suspend = true;
  h.kube.Put(KueueJob(job, "lq"));
  h.StartAdapter();
  REQUIRE(h.log.WaitFor([&](const std::vector<AdapterEvent>&) {
    std::optional<v1::Job> j = h.GetJob("ml/bert");
    return j.has_value() && j->spec().queue() == "team-a";
  }));
  h.kube.Update(LocalQueuePath("ml", "lq"),
                [](json& lq) { lq["spec"]["clusterQueue"] = "team-b"; });
  REQUIRE(h.log.WaitFor([&](const std::vector<AdapterEvent>&) {
    return h.GetJob("ml/bert")->spec().queue() == "team-b";
  }));
  // A LocalQueue that goes away leaves the job in no Kueue queue ("" =
  // the default queue); it waits for Kueue all the same.
  h.kube.Delete(LocalQueuePath("ml", "lq"));
  REQUIRE(h.log.WaitFor([&](const std::vector<AdapterEvent>&) {
    return h.GetJob("ml/bert")->spec().queue().empty();
  }));
  CHECK(h.GetJob("ml/bert")->recommendation().suspend());
}

TEST_CASE("Kueue serving only v1beta1 (up to v0.15) is read there, spec.cohort and all") {
  Harness h;
  h.kube.Unserve("/apis/kueue.x-k8s.io/v1beta2/");
  CqParams a;
  a.version = "v1beta1";
  a.cohort = "research";
  a.borrowing = 8;
  h.kube.Put(ClusterQueue(a));
  h.StartAdapter();
  REQUIRE(h.log.WaitCount(Kind::kQueuesSet, "", 1, 1));
  std::optional<v1::Queue> queue = RescaledQueue(h, "team-a");
  REQUIRE(queue.has_value());
  CHECK(queue->cohort() == "research");
  CHECK(queue->borrowing_limit_gpus() == 8);
}

TEST_CASE("without Kueue, queues come from --queues-file and jobs name them by annotation") {
  Harness h;
  JobParams job;
  job.annotations = {{"rescale.io/policy", "planner"}, {"rescale.io/queue", "team-a"}};
  h.kube.Put(PyTorchJob(job));
  AdapterOptions options = h.Options();
  options.queues = std::vector<QueueSpec>{{.name = "team-a",
                                           .nominal_gpus = 8,
                                           .cohort = "",
                                           .borrowing_limit_gpus = std::nullopt,
                                           .lending_limit_gpus = std::nullopt,
                                           .weight = 1}};
  h.StartAdapter(options);
  REQUIRE(h.log.WaitCount(Kind::kQueuesSet, "", 1, 1));
  CHECK(RescaledQueue(h, "team-a")->nominal_gpus() == 8);
  REQUIRE(h.log.WaitFor([&](const std::vector<AdapterEvent>&) {
    std::optional<v1::Job> j = h.GetJob("default/bert");
    return j.has_value() && j->spec().queue() == "team-a" && j->spec().admission().empty();
  }));
  // The queue file wins: Kueue is not even looked for.
  for (const RecordedRequest& request : h.kube.Requests()) {
    CHECK_FALSE(absl::StartsWith(request.path, "/apis/kueue.x-k8s.io/"));
  }
}

TEST_CASE("with neither Kueue nor a queue file, the adapter leaves rescaled's queues alone") {
  Harness h;
  {
    grpc::ClientContext context;
    v1::SetQueuesRequest request;
    v1::Queue* queue = request.add_queues();
    queue->set_name("set-by-rescalectl");
    queue->set_nominal_gpus(4);
    v1::ListQueuesResponse response;
    REQUIRE(h.cluster->SetQueues(&context, request, &response).ok());
  }
  h.kube.Unserve("/apis/kueue.x-k8s.io/");  // not installed
  h.kube.Put(PyTorchJob(JobParams()));
  h.StartAdapter();
  REQUIRE(h.log.WaitCount(Kind::kRegistered, "default/bert", 1));
  REQUIRE(h.log.WaitCount(Kind::kRescaledSynced, "", 1));
  // Kueue was looked for (404), and nothing was set.
  CHECK(h.kube.WaitForRequests([](const std::vector<RecordedRequest>& requests) {
    for (const RecordedRequest& r : requests) {
      if (absl::StartsWith(r.path, "/apis/kueue.x-k8s.io/v1beta1/clusterqueues")) return true;
    }
    return false;
  }));
  CHECK(h.log.CountOf(Kind::kQueuesSet) == 0);
  CHECK(RescaledQueue(h, "set-by-rescalectl").has_value());
}

}  // namespace
