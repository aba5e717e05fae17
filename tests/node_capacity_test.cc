// Tests of the adapter's honest capacity (client/adapter/node_capacity.h):
// toleration matching as Kubernetes does it, the GPUs a pod holds, and the
// capacity and per-class slots nodes and pods leave for the managed jobs.
// The controller's use of them, against the fake API server, is in
// tests/adapter_test.cc ([capacity]).
#include "client/adapter/node_capacity.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "client/adapter/pytorchjob.h"
#include "client/adapter/trainjob.h"

namespace {

using json = nlohmann::json;
using rescale::ReplicaSlots;
using rescale::adapter::ComputeCapacity;
using rescale::adapter::GpuPod;
using rescale::adapter::HonestCapacity;
using rescale::adapter::JobPlacement;
using rescale::adapter::NodeInfo;
using rescale::adapter::ParseGpuPod;
using rescale::adapter::ParseNode;
using rescale::adapter::ParseTolerations;
using rescale::adapter::Taint;
using rescale::adapter::Tolerates;
using rescale::adapter::ToleratesHardTaints;
using rescale::adapter::Toleration;
using rescale::adapter::TypeCapacity;

NodeInfo ReadyNode(uint32_t gpus, std::vector<Taint> taints = {}) {
  NodeInfo node;
  node.allocatable_gpus = gpus;
  node.ready = true;
  node.taints = std::move(taints);
  return node;
}

TEST_CASE("tolerations match taints as Kubernetes matches them", "[capacity]") {
  const Taint gpu{"nvidia.com/gpu", "present", "NoSchedule"};
  CHECK(Tolerates({"nvidia.com/gpu", "Exists", "", ""}, gpu));
  CHECK(Tolerates({"nvidia.com/gpu", "Exists", "", "NoSchedule"}, gpu));
  CHECK_FALSE(Tolerates({"nvidia.com/gpu", "Exists", "", "NoExecute"}, gpu));
  // Equal is the default operator, and compares the value.
  CHECK(Tolerates({"nvidia.com/gpu", "", "present", ""}, gpu));
  CHECK(Tolerates({"nvidia.com/gpu", "Equal", "present", ""}, gpu));
  CHECK_FALSE(Tolerates({"nvidia.com/gpu", "Equal", "absent", ""}, gpu));
  // An empty key with Exists tolerates everything; with Equal, nothing keyed.
  CHECK(Tolerates({"", "Exists", "", ""}, gpu));
  CHECK_FALSE(Tolerates({"", "Equal", "", ""}, gpu));
  CHECK_FALSE(Tolerates({"other", "Exists", "", ""}, gpu));
  // PreferNoSchedule does not keep pods off; the others must be tolerated.
  CHECK(ToleratesHardTaints({}, {{"spot", "true", "PreferNoSchedule"}}));
  CHECK_FALSE(ToleratesHardTaints({}, {{"drain", "", "NoExecute"}}));
  CHECK(ToleratesHardTaints({{"drain", "Exists", "", ""}, {"nvidia.com/gpu", "Exists", "", ""}},
                            {{"drain", "", "NoExecute"}, gpu}));
  CHECK_FALSE(
      ToleratesHardTaints({{"drain", "Exists", "", ""}}, {{"drain", "", "NoExecute"}, gpu}));

  json spec = json::parse(R"({"tolerations": [
      {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
      "not an object",
      {"key": "team", "value": "vision"}]})");
  CHECK(ParseTolerations(spec) ==
        std::vector<Toleration>{{"nvidia.com/gpu", "Exists", "", "NoSchedule"},
                                {"team", "", "vision", ""}});
  CHECK(ParseTolerations(json::object()).empty());
}

TEST_CASE("a job's tolerations are its workers' ones", "[capacity]") {
  json pytorchjob = json::parse(R"({
      "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
      "metadata": {"name": "bert", "namespace": "ml"},
      "spec": {"pytorchReplicaSpecs": {
        "Master": {"replicas": 1, "template": {"spec": {"tolerations": [{"key": "master-only"}]}}},
        "Worker": {"replicas": 2, "template": {"spec": {
          "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
          "containers": [{"resources": {"limits": {"nvidia.com/gpu": "4"}}}]}}}}}})");
  auto job = rescale::adapter::ParsePyTorchJob(pytorchjob);
  REQUIRE(job.ok());
  CHECK(job->tolerations == std::vector<Toleration>{{"nvidia.com/gpu", "Exists", "", ""}});

  // A TrainJob's trainer nodes run as the runtime's "node" job; overrides
  // for other jobs (the dataset initializer) do not apply to them.
  json trainjob = json::parse(R"({
      "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
      "metadata": {"name": "llm", "namespace": "ml"},
      "spec": {"trainer": {"numNodes": 2},
               "podSpecOverrides": [
                 {"targetJobs": [{"name": "dataset-initializer"}],
                  "tolerations": [{"key": "storage", "operator": "Exists"}]},
                 {"targetJobs": [{"name": "node"}],
                  "tolerations": [{"key": "team", "value": "nlp", "effect": "NoSchedule"}]}]}})");
  auto train = rescale::adapter::ParseTrainJob(trainjob);
  REQUIRE(train.ok());
  CHECK(train->tolerations == std::vector<Toleration>{{"team", "", "nlp", "NoSchedule"}});
}

TEST_CASE("a node counts when Ready and schedulable, with its taints", "[capacity]") {
  json node = json::parse(R"({
      "metadata": {"name": "gpu-a"},
      "spec": {"unschedulable": true,
               "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
      "status": {"allocatable": {"nvidia.com/gpu": "8"},
                 "conditions": [{"type": "Ready", "status": "True"}]}})");
  NodeInfo info = ParseNode(node);
  CHECK(info.allocatable_gpus == 8);
  CHECK(info.ready);
  CHECK(info.unschedulable);
  CHECK(info.taints == std::vector<Taint>{{"nvidia.com/gpu", "present", "NoSchedule"}});
  node["status"]["conditions"][0]["status"] = "Unknown";
  CHECK_FALSE(ParseNode(node).ready);
  node["status"].erase("conditions");
  CHECK_FALSE(ParseNode(node).ready);
}

TEST_CASE("a pod holds the GPUs the scheduler counts for it, on its node", "[capacity]") {
  json pod = json::parse(R"({
      "metadata": {"name": "w-0", "namespace": "ml",
                   "labels": {"training.kubeflow.org/job-name": "bert"}},
      "spec": {"nodeName": "gpu-a",
               "initContainers": [{"resources": {"limits": {"nvidia.com/gpu": "6"}}}],
               "containers": [{"resources": {"requests": {"nvidia.com/gpu": "2"},
                                             "limits": {"nvidia.com/gpu": "2"}}},
                              {"resources": {"limits": {"nvidia.com/gpu": 3}}},
                              {"resources": {"requests": {"cpu": "1"}}}]},
      "status": {"phase": "Running"}})");
  // max(2 + 3, 6): the init container needs more than the containers.
  CHECK(ParseGpuPod(pod) == GpuPod{"gpu-a", 6, "ml/bert"});
  pod["spec"]["initContainers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "1";
  CHECK(ParseGpuPod(pod)->gpus == 5);
  // Which job: the controller owner first, then the operators' labels.
  pod["metadata"]["ownerReferences"] =
      json::parse(R"([{"kind": "PyTorchJob", "name": "owner", "controller": true}])");
  CHECK(ParseGpuPod(pod)->job_id == "ml/owner");
  pod["metadata"].erase("ownerReferences");
  pod["metadata"]["labels"] = {{"jobset.sigs.k8s.io/jobset-name", "llm"}};
  CHECK(ParseGpuPod(pod)->job_id == "ml/llm");
  pod["metadata"]["labels"] = {{"job-name", "resnet"}, {"group-name", "training.kubedl.io"}};
  CHECK(ParseGpuPod(pod)->job_id == "ml/resnet");
  // A batch Job's job-name label is not a training job's.
  pod["metadata"]["labels"] = {{"job-name", "resnet"}};
  CHECK(ParseGpuPod(pod)->job_id.empty());
  // Finished, unbound or GPU-less pods hold nothing.
  pod["status"]["phase"] = "Succeeded";
  CHECK_FALSE(ParseGpuPod(pod));
  pod["status"]["phase"] = "Pending";
  CHECK(ParseGpuPod(pod));
  pod["spec"].erase("nodeName");
  CHECK_FALSE(ParseGpuPod(pod));
  CHECK_FALSE(ParseGpuPod(json::parse(
      R"({"spec": {"nodeName": "n", "containers": [{"resources": {}}]}, "status": {"phase": "Running"}})")));
}

TEST_CASE("capacity and slots are what the nodes leave free for the jobs", "[capacity]") {
  const Taint team{"team", "vision", "NoSchedule"};
  std::map<std::string, NodeInfo> nodes = {
      {"a", ReadyNode(8)}, {"b", ReadyNode(8)}, {"vision", ReadyNode(8, {team})}};
  NodeInfo down = ReadyNode(8);
  down.ready = false;
  nodes["down"] = down;
  NodeInfo cordoned = ReadyNode(8);
  cordoned.unschedulable = true;
  nodes["cordoned"] = cordoned;
  // 3 GPUs of other work on a, more than the node has on b (clamped).
  const std::map<std::string, uint32_t> foreign = {{"a", 3}, {"b", 9}};

  // No job yet: untainted nodes count.
  CHECK(ComputeCapacity(nodes, foreign, {}) == HonestCapacity{40, 5, {}, {}});
  // 1-, 4- and 8-GPU replicas: a has 5 free (5, 1, 0 replicas).
  CHECK(ComputeCapacity(nodes, foreign, {{1, {}}, {4, {}}, {8, {}}, {4, {}}}) ==
        HonestCapacity{40, 5, {ReplicaSlots{1, 5}, {4, 1}, {8, 0}}, {}});
  // The 8-GPU jobs tolerate the vision taint: that node counts, for them.
  const std::vector<Toleration> vision = {{"team", "Equal", "vision", "NoSchedule"}};
  CHECK(ComputeCapacity(nodes, foreign, {{1, {}}, {8, vision}}) ==
        HonestCapacity{40, 13, {ReplicaSlots{1, 5}, {8, 1}}, {}});
  // No foreign load: every usable GPU is free.
  CHECK(ComputeCapacity(nodes, {}, {{4, {}}}) == HonestCapacity{40, 16, {ReplicaSlots{4, 4}}, {}});
}

TEST_CASE("with two GPU products the capacity is also counted per product", "[capacity][types]") {
  auto labelled = [](uint32_t gpus, const std::string& product) {
    NodeInfo node = ReadyNode(gpus);
    node.gpu_product = product;
    return node;
  };
  const std::string t4 = "Tesla-T4";
  const std::string a100 = "NVIDIA-A100-SXM4-40GB";
  std::map<std::string, NodeInfo> nodes = {
      {"t4-a", labelled(4, t4)},     {"t4-b", labelled(4, t4)},     {"t4-c", labelled(4, t4)},
      {"a100-a", labelled(8, a100)}, {"a100-b", labelled(8, a100)}, {"cpu", ReadyNode(0)}};
  nodes["t4-b"].ready = false;
  nodes["t4-c"].unschedulable = true;
  const std::map<std::string, uint32_t> foreign = {{"a100-a", 2}};
  const std::vector<JobPlacement> jobs = {{1, {}}, {4, {}}};
  // NotReady and cordoned nodes are allocatable but usable for no type;
  // a type's node size is its largest node's, counted or not.
  HonestCapacity expected{
      28,
      18,
      {ReplicaSlots{1, 18}, {4, 4}},
      {TypeCapacity{a100, 14, 8, {{1, 14}, {4, 3}}}, TypeCapacity{t4, 4, 4, {{1, 4}, {4, 1}}}}};
  CHECK(ComputeCapacity(nodes, foreign, jobs) == expected);

  // A GPU node without the label: no selector reaches it, so the typed
  // capacity leaves it out (its GPUs are still allocatable).
  nodes["new"] = ReadyNode(8);
  expected.allocatable_gpus += 8;
  CHECK(ComputeCapacity(nodes, foreign, jobs) == expected);

  // Every T4 node down: the type stays, with nothing usable.
  nodes["t4-a"].ready = false;
  HonestCapacity down = ComputeCapacity(nodes, foreign, jobs);
  REQUIRE(down.types.size() == 2);
  CHECK(down.types[1] == TypeCapacity{t4, 0, 4, {{1, 0}, {4, 0}}});
  CHECK(down.usable_gpus == 14);

  // One product (and unlabelled nodes): one pool, as without labels.
  std::map<std::string, NodeInfo> one = {{"a", labelled(8, a100)}, {"b", ReadyNode(8)}};
  CHECK(ComputeCapacity(one, {}, jobs) ==
        HonestCapacity{16, 16, {ReplicaSlots{1, 16}, {4, 4}}, {}});
}

TEST_CASE("a node's GPU product is its nvidia.com/gpu.product label", "[capacity][types]") {
  json node = json::parse(R"({"metadata": {"name": "n", "labels": {
      "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB", "nvidia.com/gpu.count": "8"}},
      "status": {"allocatable": {"nvidia.com/gpu": "8"}}})");
  CHECK(ParseNode(node).gpu_product == "NVIDIA-A100-SXM4-40GB");
  node["metadata"].erase("labels");
  CHECK(ParseNode(node).gpu_product.empty());
}

}  // namespace
