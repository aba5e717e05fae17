// rescale-adapter with more than one GPU type, end to end against the fake
// API server (tests/fake_kube_api.h) and a real in-process rescaled: the
// capacity per nvidia.com/gpu.product, a job placed on a type through its
// Worker template's node selector in one patch, and a running job moved
// between types (suspend with the new selector, resume once its pods are
// gone, as kubeflow/training-operator's runPolicy.suspend semantics need:
// "If a Job is suspended after creation ... the Job controller will delete
// all active Pods and PodGroups", and it does not recreate running pods for
// a changed template).
#include <algorithm>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/adapter_harness.h"

namespace {

using namespace adapter_harness;  // NOLINT: the harness is this file's vocabulary

constexpr char kT4[] = "Tesla-T4";
constexpr char kA100[] = "NVIDIA-A100-SXM4-40GB";

// A Ready node of `gpus` GPUs of `product`, labelled as GPU Feature
// Discovery labels it.
json TypedNode(const std::string& name, int gpus, const std::string& product) {
  json node = Node(name, gpus);
  node["metadata"]["labels"] = {{"nvidia.com/gpu.product", product},
                                {"nvidia.com/gpu.count", std::to_string(gpus)}};
  return node;
}

std::string SelectorOf(const json& job) {
  const json& selector = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"].value(
      "nodeSelector", json::object());
  return selector.value("nvidia.com/gpu.product", "");
}

// PyTorchJob bert allowed only T4s, its workers selected by `selector`.
json JobOnT4(const json& selector) {
  JobParams bert;
  bert.annotations["rescale.io/gpu-types"] = kT4;
  json object = PyTorchJob(bert);
  object["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["nodeSelector"] = selector;
  return object;
}

const v1::GpuType* TypeOf(const v1::Cluster& cluster, const std::string& name) {
  for (const v1::GpuType& type : cluster.gpu_types()) {
    if (type.name() == name) return &type;
  }
  return nullptr;
}

TEST_CASE("capacity is sent per GPU product, without NotReady or cordoned nodes", "[types]") {
  Harness h;
  JobParams bert;
  bert.gpus = 4;
  h.kube.Put(PyTorchJob(bert));
  h.kube.Put(TypedNode("t4-a", 4, kT4));
  h.kube.Put(TypedNode("t4-b", 4, kT4));
  h.kube.Put(TypedNode("a100-a", 8, kA100));
  json down = TypedNode("a100-b", 8, kA100);
  down["status"]["conditions"][1]["status"] = "False";
  h.kube.Put(down);
  json cordoned = TypedNode("t4-c", 4, kT4);
  cordoned["spec"]["unschedulable"] = true;
  h.kube.Put(cordoned);
  AdapterOptions options = h.Options();
  options.capacity_gpus = -1;
  h.StartAdapter(options);

  REQUIRE(WaitForCapacity(h, 16, "4=4;NVIDIA-A100-SXM4-40GB=8, Tesla-T4=8"));
  v1::Cluster cluster = CurrentCluster(h);
  CHECK(cluster.total_gpus() == 16);
  CHECK(cluster.allocatable_gpus() == 28);
  REQUIRE(cluster.gpu_types_size() == 2);
  const v1::GpuType* a100 = TypeOf(cluster, kA100);
  const v1::GpuType* t4 = TypeOf(cluster, kT4);
  REQUIRE(a100 != nullptr);
  REQUIRE(t4 != nullptr);
  CHECK(a100->total_gpus() == 8);
  CHECK(a100->gpus_per_node() == 8);
  REQUIRE(a100->slots_size() == 1);
  CHECK(a100->slots(0).gpus_per_replica() == 4);
  CHECK(a100->slots(0).replicas() == 2);
  CHECK(t4->total_gpus() == 8);
  CHECK(t4->gpus_per_node() == 4);
  REQUIRE(t4->slots_size() == 1);
  CHECK(t4->slots(0).replicas() == 2);

  // The A100 node comes back; a T4 node is cordoned.
  h.kube.Update("/api/v1/nodes/a100-b",
                [](json& node) { node["status"]["conditions"][1]["status"] = "True"; });
  REQUIRE(WaitForCapacity(h, 24, "4=6;NVIDIA-A100-SXM4-40GB=16, Tesla-T4=8"));
  h.kube.Update("/api/v1/nodes/t4-a", [](json& node) { node["spec"]["unschedulable"] = true; });
  REQUIRE(WaitForCapacity(h, 20, "4=5;NVIDIA-A100-SXM4-40GB=16, Tesla-T4=4"));
  CHECK(TypeOf(CurrentCluster(h), kT4)->total_gpus() == 4);
  CHECK(TypeOf(CurrentCluster(h), kA100)->total_gpus() == 16);
}

TEST_CASE("a job recommended onto the second type gets its node selector in the same patch",
          "[types]") {
  Harness h;
  JobParams bert;
  bert.suspend = true;  // not started yet
  bert.annotations["rescale.io/gpu-types"] = kA100;
  h.kube.Put(TypedNode("t4-a", 4, kT4));
  h.kube.Put(TypedNode("a100-a", 8, kA100));
  AdapterOptions options = h.Options();
  options.capacity_gpus = -1;
  h.StartAdapter(options);
  // The job comes once rescaled knows the types (before, it would be
  // started untyped, then given its type: two patches).
  REQUIRE(WaitForCapacity(h, 12, ";NVIDIA-A100-SXM4-40GB=8, Tesla-T4=4"));
  h.kube.Put(PyTorchJob(bert));

  const std::string path = JobPath("default", "bert");
  REQUIRE(WaitForLastApplied(h, "default/bert", "replicas=4 gpu-type=NVIDIA-A100-SXM4-40GB"));
  std::optional<v1::Job> job = h.GetJob("default/bert");
  REQUIRE(job);
  REQUIRE(job->spec().gpu_types_size() == 1);
  CHECK(job->spec().gpu_types(0) == kA100);
  CHECK(job->recommendation().gpu_type() == kA100);
  CHECK(job->status().gpu_type() == kA100);  // as the adapter reported it

  // Exactly one write of the job: resume, size and type together.
  std::vector<RecordedRequest> patches = h.PatchesTo(path);
  REQUIRE(patches.size() == 1);
  const json body = json::parse(patches[0].body);
  CHECK(body["spec"]["runPolicy"]["suspend"] == false);
  CHECK(body["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 4);
  CHECK(body["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["nodeSelector"] ==
        json{{"nvidia.com/gpu.product", kA100}});
  CHECK_FALSE(body["metadata"]["annotations"].contains("rescale.io/resume-after-move"));
  const json stored = h.kube.Object(path);
  CHECK(SelectorOf(stored) == kA100);
  // The merge patch kept the rest of the template.
  CHECK(stored["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"].size() ==
        1);
}

TEST_CASE(
    "a running job moves type: suspended with the new selector, resumed once its pods are gone",
    "[types]") {
  Harness h;
  h.kube.Put(JobOnT4({{"nvidia.com/gpu.product", kT4}, {"topology.kubernetes.io/zone", "a"}}));
  h.kube.Put(TypedNode("t4-a", 4, kT4));
  h.kube.Put(TypedNode("t4-b", 4, kT4));
  h.kube.Put(TypedNode("a100-a", 8, kA100));
  h.kube.Put(Pod("default", "bert-worker-0", "t4-a", 1, "Running", "bert"));
  h.kube.Put(Pod("default", "bert-worker-1", "t4-b", 1, "Running", "bert"));
  AdapterOptions options = h.Options();
  options.capacity_gpus = -1;
  h.StartAdapter(options);
  const std::string path = JobPath("default", "bert");
  REQUIRE(WaitForLastApplied(h, "default/bert", "replicas=4 gpu-type=Tesla-T4"));
  CHECK(Workers(h.kube.Object(path)) == 4);
  CHECK(h.GetJob("default/bert")->status().gpu_type() == kT4);

  // The user allows only A100s now: rescaled moves the job there.
  h.kube.ClearRequests();
  h.kube.Update(path,
                [](json& job) { job["metadata"]["annotations"]["rescale.io/gpu-types"] = kA100; });
  REQUIRE(WaitForLastApplied(h, "default/bert", "replicas=4 gpu-type=NVIDIA-A100-SXM4-40GB"));
  std::vector<RecordedRequest> patches = h.PatchesTo(path);
  REQUIRE(patches.size() == 1);
  json body = json::parse(patches[0].body);
  CHECK(body["spec"]["runPolicy"]["suspend"] == true);
  CHECK(body["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["nodeSelector"] ==
        json{{"nvidia.com/gpu.product", kA100}});
  const std::string generation =
      body["metadata"]["annotations"]["rescale.io/generation"].get<std::string>();
  CHECK(body["metadata"]["annotations"]["rescale.io/resume-after-move"] == generation);
  json stored = h.kube.Object(path);
  CHECK(stored["spec"]["runPolicy"]["suspend"] == true);
  CHECK(SelectorOf(stored) == kA100);
  // The merge patch kept the user's other selector key.
  CHECK(stored["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["nodeSelector"]
              ["topology.kubernetes.io/zone"] == "a");
  // rescaled heard where it will run.
  CHECK(h.GetJob("default/bert")->status().gpu_type() == kA100);

  // Until the operator has acted on the suspend, the adapter waits (it
  // sees the mark on the job's own watch event).
  auto waiting = [&](const std::string& detail, uint64_t pods_left) {
    return h.log.WaitFor([&](const std::vector<AdapterEvent>& events) {
      for (const AdapterEvent& event : events) {
        if (event.kind == Kind::kMoveWaiting && event.detail == detail &&
            event.value == pods_left) {
          return true;
        }
      }
      return false;
    });
  };
  REQUIRE(waiting("operator", 2));
  // The operator says it has suspended the job, and deletes the pods one
  // by one; only when the last is gone does the adapter resume the job.
  h.kube.Update(path, [](json& job) {
    job["status"]["conditions"] =
        json::array({{{"type", "Suspended"}, {"status", "True"}, {"reason", "JobSuspended"}}});
  });
  REQUIRE(waiting("pods", 2));
  h.kube.Delete(PodPath("default", "bert-worker-0"));
  REQUIRE(waiting("pods", 1));
  CHECK(h.log.CountOf(Kind::kMoveResumed) == 0);
  CHECK(h.PatchesTo(path).size() == 1);
  h.kube.Delete(PodPath("default", "bert-worker-1"));
  REQUIRE(h.log.WaitCount(Kind::kMoveResumed, "default/bert", 1));
  patches = h.PatchesTo(path);
  REQUIRE(patches.size() == 2);
  body = json::parse(patches[1].body);
  CHECK(body["spec"] == json{{"runPolicy", {{"suspend", false}}}});
  CHECK(body["metadata"]["annotations"] == json{{"rescale.io/resume-after-move", nullptr}});
  stored = h.kube.Object(path);
  CHECK(stored["spec"]["runPolicy"]["suspend"] == false);
  CHECK_FALSE(stored["metadata"]["annotations"].contains("rescale.io/resume-after-move"));
  CHECK(SelectorOf(stored) == kA100);
  CHECK(Workers(stored) == 4);

  // The Events say what happened: moved, then resumed (after the
  // Rescaled of the first apply, whose POST may come after ClearRequests).
  auto reasons = [](const std::vector<RecordedRequest>& requests) {
    std::vector<std::string> out;
    for (const RecordedRequest& request : requests) {
      if (request.method == "POST" && request.path == EventsPath("default"))
        out.push_back(json::parse(request.body)["reason"].get<std::string>());
    }
    if (!out.empty() && out.front() == "Rescaled") out.erase(out.begin());
    return out;
  };
  REQUIRE(h.kube.WaitForRequests(
      [&](const std::vector<RecordedRequest>& requests) { return reasons(requests).size() >= 2; }));
  CHECK(reasons(h.kube.Requests()) == std::vector<std::string>{"Moved", "Resumed"});
}

TEST_CASE("a move waits for the operator's Suspended condition when pods are not watched",
          "[types]") {
  Harness h;
  h.kube.Put(JobOnT4({{"nvidia.com/gpu.product", kT4}}));
  // A fixed capacity (--capacity-gpus): no node or pod watch. The types
  // are then given to rescaled by hand, once the adapter has synced (it
  // sends its own capacity on every sync, before kRescaledSynced).
  h.StartAdapter();
  const std::string path = JobPath("default", "bert");
  REQUIRE(h.log.WaitCount(Kind::kRescaledSynced, "", 1));
  {
    grpc::ClientContext context;
    v1::SetCapacityRequest request;
    for (const char* name : {kT4, kA100}) {
      v1::GpuType* type = request.add_gpu_types();
      type->set_name(name);
      type->set_total_gpus(8);
      type->set_gpus_per_node(8);
    }
    v1::Cluster cluster;
    REQUIRE(h.cluster->SetCapacity(&context, request, &cluster).ok());
  }
  REQUIRE(WaitForLastApplied(h, "default/bert", "replicas=4 gpu-type=Tesla-T4"));
  h.kube.Update(path,
                [](json& job) { job["metadata"]["annotations"]["rescale.io/gpu-types"] = kA100; });
  REQUIRE(WaitForLastApplied(h, "default/bert", "replicas=4 gpu-type=NVIDIA-A100-SXM4-40GB"));
  CHECK(h.kube.Object(path)["spec"]["runPolicy"]["suspend"] == true);
  // The adapter has seen the marked job and waits for the operator.
  REQUIRE(h.log.WaitFor([](const std::vector<AdapterEvent>& events) {
    return std::any_of(events.begin(), events.end(), [](const AdapterEvent& event) {
      return event.kind == Kind::kMoveWaiting && event.detail == "operator";
    });
  }));
  CHECK(h.log.CountOf(Kind::kMoveResumed) == 0);
  // The operator has deleted the pods and says so.
  h.kube.Update(path, [](json& job) {
    job["status"]["conditions"] =
        json::array({{{"type", "Suspended"}, {"status", "True"}, {"reason", "JobSuspended"}}});
  });
  REQUIRE(h.log.WaitCount(Kind::kMoveResumed, "default/bert", 1));
  CHECK(h.kube.Object(path)["spec"]["runPolicy"]["suspend"] == false);
}

TEST_CASE("PyTorchJobs read their type and allowed types; a bad list names the annotation",
          "[types]") {
  JobParams bert;
  bert.annotations["rescale.io/gpu-types"] = " Tesla-T4, NVIDIA-A100-SXM4-40GB ";
  json object = PyTorchJob(bert);
  object["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["nodeSelector"] = {
      {"nvidia.com/gpu.product", kT4}};
  auto job = rescale::adapter::ParsePyTorchJob(object);
  REQUIRE(job.ok());
  CHECK(job->gpu_type == kT4);
  CHECK(job->gpu_types == std::vector<std::string>{kT4, kA100});
  v1::JobSpec spec = rescale::adapter::ToJobSpec(*job);
  REQUIRE(spec.gpu_types_size() == 2);
  CHECK(spec.gpu_types(1) == kA100);

  object["metadata"]["annotations"]["rescale.io/gpu-types"] = "Tesla T4";
  auto bad = rescale::adapter::ParsePyTorchJob(object);
  REQUIRE_FALSE(bad.ok());
  CHECK(std::string(bad.status().message()) ==
        "PyTorchJob default/bert (kubeflow.org/v1): annotation rescale.io/gpu-types=\"Tesla T4\" "
        "is not a comma-separated list of GPU types (nvidia.com/gpu.product label values)");

  // Listed twice: once (rescaled refuses repeats). A selector value that
  // is no type name is no type.
  object["metadata"]["annotations"]["rescale.io/gpu-types"] = "Tesla-T4,Tesla-T4";
  CHECK(rescale::adapter::ParsePyTorchJob(object)->gpu_types == std::vector<std::string>{kT4});
  object["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["nodeSelector"] = {
      {"nvidia.com/gpu.product", "Tesla T4"}};
  CHECK(rescale::adapter::ParsePyTorchJob(object)->gpu_type.empty());

  // Without the annotation: any type (the selector is only where it runs).
  object["metadata"]["annotations"].erase("rescale.io/gpu-types");
  CHECK(rescale::adapter::ParsePyTorchJob(object)->gpu_types.empty());

  // A Master is given the type only when it trains on a GPU: a CPU-only
  // rank 0 (a rendezvous host) may run on any node.
  CHECK_FALSE(rescale::adapter::ParsePyTorchJob(object)->master_gpus);
  json& master = object["spec"]["pytorchReplicaSpecs"]["Master"];
  master = {{"replicas", 1},
            {"template",
             {{"spec", {{"containers", json::array({{{"name", "pytorch"}, {"image", "x"}}})}}}}}};
  CHECK_FALSE(rescale::adapter::ParsePyTorchJob(object)->master_gpus);
  master["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = 1;
  CHECK(rescale::adapter::ParsePyTorchJob(object)->master_gpus);
  const json patch = rescale::adapter::WithWorkerGpuType(json::object(), kA100, true);
  CHECK(patch["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["nodeSelector"] ==
        json{{"nvidia.com/gpu.product", kA100}});
  CHECK_FALSE(rescale::adapter::WithWorkerGpuType(json::object(), kA100,
                                                  false)["spec"]["pytorchReplicaSpecs"]
                  .contains("Master"));
}

TEST_CASE("a TrainJob that selects no type is registered on the type its pods run on", "[types]") {
  Harness h;
  h.kube.Put(TypedNode("t4-a", 4, kT4));
  h.kube.Put(TypedNode("a100-a", 8, kA100));
  TrainJobParams llm;  // 2 nodes of 1 GPU; no nodeSelector in podSpecOverrides
  h.kube.Put(TrainJob(llm));
  AdapterOptions options = h.Options();
  options.capacity_gpus = -1;
  h.StartAdapter(options);
  REQUIRE(h.log.WaitCount(Kind::kApplied, "default/llm", 1));
  // Not running yet: any type (the adapter cannot write one: where its
  // pods go is the TrainJob's own spec.podSpecOverrides).
  std::optional<v1::Job> job = h.GetJob("default/llm");
  REQUIRE(job);
  CHECK(job->spec().gpu_types_size() == 0);

  // Its JobSet's pods are bound to a T4 node: from then on it may use the
  // T4s only, so rescaled plans it where it is instead of on a type it
  // would never reach.
  h.kube.Put(Pod("default", "llm-node-0-0", "t4-a", 1, "Running", "llm"));
  h.kube.Put(Pod("default", "llm-node-0-1", "t4-a", 1, "Running", "llm"));
  // (kRegistered is emitted once rescaled has the spec: each is a moment
  // to look again.)
  REQUIRE(h.log.WaitFor([&](const std::vector<AdapterEvent>&) {
    job = h.GetJob("default/llm");
    return job && job->spec().gpu_types_size() > 0;
  }));
  CHECK(std::vector<std::string>(job->spec().gpu_types().begin(), job->spec().gpu_types().end()) ==
        std::vector<std::string>{kT4});
  // Its spec is never patched with a type (nor anything else here).
  for (const RecordedRequest& patch : h.PatchesTo(TrainJobPath("default", "llm"))) {
    CHECK_FALSE(json::parse(patch.body).contains("spec"));
  }
}

TEST_CASE("one labelled product is one pool: no types sent, none reported", "[types]") {
  Harness h;
  h.kube.Put(TypedNode("t4-a", 4, kT4));
  h.kube.Put(TypedNode("t4-b", 4, kT4));
  h.kube.Put(Pod("default", "bert-worker-0", "t4-a", 1, "Running", "bert"));
  JobParams bert;
  h.kube.Put(PyTorchJob(bert));
  AdapterOptions options = h.Options();
  options.capacity_gpus = -1;
  h.StartAdapter(options);
  REQUIRE(WaitForCapacity(h, 8, "1=8"));
  REQUIRE(WaitForLastApplied(h, "default/bert", "replicas=4"));
  CHECK(CurrentCluster(h).gpu_types_size() == 0);
  std::optional<v1::Job> job = h.GetJob("default/bert");
  REQUIRE(job);
  // Exactly as on unlabelled nodes: rescaled hears of no type.
  CHECK(job->status().gpu_type().empty());
  CHECK(job->recommendation().gpu_type().empty());
  CHECK(SelectorOf(h.kube.Object(JobPath("default", "bert"))).empty());
}

TEST_CASE("a selector the adapter wrote goes when the cluster loses its types; the user's stays",
          "[types]") {
  Harness h;
  h.kube.Put(TypedNode("t4-a", 4, kT4));
  h.kube.Put(TypedNode("a100-a", 8, kA100));
  AdapterOptions options = h.Options();
  options.capacity_gpus = -1;
  h.StartAdapter(options);
  REQUIRE(WaitForCapacity(h, 12, ";NVIDIA-A100-SXM4-40GB=8, Tesla-T4=4"));
  // bert is placed on the A100s by the adapter; gpt's user selects the
  // T4s in gpt's own template.
  JobParams bert;
  bert.suspend = true;
  bert.annotations["rescale.io/gpu-types"] = kA100;
  h.kube.Put(PyTorchJob(bert));
  JobParams gpt = bert;
  gpt.name = "gpt";
  gpt.annotations["rescale.io/gpu-types"] = kT4;
  json object = PyTorchJob(gpt);
  object["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["nodeSelector"] = {
      {"nvidia.com/gpu.product", kT4}};
  h.kube.Put(object);
  const std::string bert_path = JobPath("default", "bert");
  const std::string gpt_path = JobPath("default", "gpt");
  REQUIRE(WaitForLastApplied(h, "default/bert", "replicas=4 gpu-type=NVIDIA-A100-SXM4-40GB"));
  REQUIRE(WaitForLastApplied(h, "default/gpt", "replicas=4 gpu-type=Tesla-T4"));
  CHECK(h.kube.Object(bert_path)["metadata"]["annotations"]["rescale.io/selected-gpu-type"] ==
        kA100);
  CHECK_FALSE(
      h.kube.Object(gpt_path)["metadata"]["annotations"].contains("rescale.io/selected-gpu-type"));

  // The T4 node is retired: one product is left, and rescaled plans
  // without types. bert's selector, which the adapter wrote, goes in a
  // patch that restarts nothing; gpt's, which its user wrote, stays.
  h.kube.ClearRequests();
  h.kube.Delete("/api/v1/nodes/t4-a");
  REQUIRE(WaitForCapacity(h, 8, "1=8"));
  REQUIRE(WaitForLastApplied(h, "default/bert", "replicas=4"));
  REQUIRE(WaitForLastApplied(h, "default/gpt", "replicas=4"));
  CHECK(CurrentCluster(h).gpu_types_size() == 0);
  std::vector<RecordedRequest> patches = h.PatchesTo(bert_path);
  REQUIRE(patches.size() == 1);
  const json body = json::parse(patches[0].body);
  CHECK(body["spec"] ==
        json{{"pytorchReplicaSpecs",
              {{"Worker",
                {{"template",
                  {{"spec", {{"nodeSelector", {{"nvidia.com/gpu.product", nullptr}}}}}}}}}}}});
  CHECK(body["metadata"]["annotations"]["rescale.io/selected-gpu-type"] == nullptr);
  const json stored = h.kube.Object(bert_path);
  CHECK(SelectorOf(stored).empty());
  CHECK_FALSE(stored["metadata"]["annotations"].contains("rescale.io/selected-gpu-type"));
  CHECK(stored["spec"]["runPolicy"]["suspend"] == false);
  CHECK(Workers(stored) == 4);
  CHECK(SelectorOf(h.kube.Object(gpt_path)) == kT4);
  for (const RecordedRequest& patch : h.PatchesTo(gpt_path)) {
    CHECK_FALSE(json::parse(patch.body).contains("spec"));
  }
}

TEST_CASE("a job whose pods run on two products, or on an unlabelled node, is moved onto one",
          "[types]") {
  // Such a job runs on no one type. Before, it counted as of unknown type:
  // its selector was written without a restart, and the pods already
  // running elsewhere stayed there (the operator does not recreate running
  // pods for a changed template).
  const bool unlabelled = GENERATE(false, true);
  INFO((unlabelled ? "a worker on a GPU node without the label" : "workers on two products"));
  Harness h;
  h.kube.Put(TypedNode("t4-a", 4, kT4));
  h.kube.Put(TypedNode("a100-a", 8, kA100));
  h.kube.Put(Node("plain-a", 4));
  h.kube.Put(Pod("default", "bert-worker-0", "a100-a", 1, "Running", "bert"));
  h.kube.Put(
      Pod("default", "bert-worker-1", unlabelled ? "plain-a" : "t4-a", 1, "Running", "bert"));
  AdapterOptions options = h.Options();
  options.capacity_gpus = -1;
  h.StartAdapter(options);
  // The job comes once rescaled plans with types (before, it would be
  // resized untyped first).
  REQUIRE(h.log.WaitFor([](const std::vector<AdapterEvent>& events) {
    return std::any_of(events.begin(), events.end(), [](const AdapterEvent& event) {
      return event.kind == Kind::kCapacitySet && event.detail.find(';') != std::string::npos;
    });
  }));
  JobParams bert;  // 2 workers running, no selector
  bert.annotations["rescale.io/gpu-types"] = kA100;
  h.kube.Put(PyTorchJob(bert));
  const std::string path = JobPath("default", "bert");
  REQUIRE(WaitForLastApplied(h, "default/bert", "replicas=4 gpu-type=NVIDIA-A100-SXM4-40GB"));
  // One patch, and it is a move: suspend, selector and size together.
  std::vector<RecordedRequest> patches = h.PatchesTo(path);
  REQUIRE(patches.size() == 1);
  const json body = json::parse(patches[0].body);
  CHECK(body["spec"]["runPolicy"]["suspend"] == true);
  CHECK(body["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 4);
  CHECK(body["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["nodeSelector"] ==
        json{{"nvidia.com/gpu.product", kA100}});
  CHECK(body["metadata"]["annotations"].contains("rescale.io/resume-after-move"));
  CHECK(h.GetJob("default/bert")->status().gpu_type() == kA100);  // where it will run
}

}  // namespace
