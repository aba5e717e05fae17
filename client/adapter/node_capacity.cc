// Honest capacity (client/adapter/node_capacity.h): parsing Nodes, Pods and
// tolerations, and the capacity they leave for the managed jobs.
#include "client/adapter/node_capacity.h"

#include <algorithm>
#include <set>

#include "client/adapter/pytorchjob.h"

namespace rescale::adapter {

using json = nlohmann::json;

namespace {

std::string TextAt(const json& object, const char* key) {
  const json& value = FieldAt(object, {key});
  return value.is_string() ? value.get<std::string>() : std::string();
}

bool IsHardEffect(const std::string& effect) {
  return effect == "NoSchedule" || effect == "NoExecute";
}

// One container's GPUs: its requests, which the API server defaults from
// its limits for an extended resource, else its limits.
uint32_t ContainerGpus(const json& container) {
  for (const char* kind : {"requests", "limits"}) {
    const json& quantity = FieldAt(container, {"resources", kind, kGpuResource});
    if (!quantity.is_null()) return WholeQuantity(quantity).value_or(0);
  }
  return 0;
}

// The training job a pod belongs to, as its operator marks it ("" = none).
std::string JobNameOf(const json& pod) {
  const json& owners = FieldAt(pod, {"metadata", "ownerReferences"});
  if (owners.is_array()) {
    for (const json& owner : owners) {
      const json& controller = FieldAt(owner, {"controller"});
      if (!controller.is_boolean() || !controller.get<bool>()) continue;
      const std::string kind = TextAt(owner, "kind");
      if (kind == "PyTorchJob" || kind == "TrainJob") return TextAt(owner, "name");
    }
  }
  const json& labels = FieldAt(pod, {"metadata", "labels"});
  if (!labels.is_object()) return "";
  for (const char* key : {"training.kubeflow.org/job-name", "jobset.sigs.k8s.io/jobset-name"}) {
    const std::string name = TextAt(labels, key);
    if (!name.empty()) return name;
  }
  if (TextAt(labels, "group-name") == "training.kubedl.io") return TextAt(labels, "job-name");
  return "";
}

}  // namespace

bool Tolerates(const Toleration& toleration, const Taint& taint) {
  if (!toleration.effect.empty() && toleration.effect != taint.effect) return false;
  if (!toleration.key.empty() && toleration.key != taint.key) return false;
  if (toleration.op.empty() || toleration.op == "Equal") return toleration.value == taint.value;
  return toleration.op == "Exists";
}

bool ToleratesHardTaints(const std::vector<Toleration>& tolerations,
                         const std::vector<Taint>& taints) {
  return std::all_of(taints.begin(), taints.end(), [&](const Taint& taint) {
    return !IsHardEffect(taint.effect) ||
           std::any_of(tolerations.begin(), tolerations.end(),
                       [&](const Toleration& t) { return Tolerates(t, taint); });
  });
}

std::vector<Toleration> ParseTolerations(const json& pod_spec) {
  std::vector<Toleration> tolerations;
  const json& list = FieldAt(pod_spec, {"tolerations"});
  if (!list.is_array()) return tolerations;
  for (const json& item : list) {
    if (!item.is_object()) continue;
    tolerations.push_back({TextAt(item, "key"), TextAt(item, "operator"), TextAt(item, "value"),
                           TextAt(item, "effect")});
  }
  return tolerations;
}

NodeInfo ParseNode(const json& node) {
  NodeInfo info;
  info.allocatable_gpus = NodeGpus(node);
  const json& conditions = FieldAt(node, {"status", "conditions"});
  if (conditions.is_array()) {
    for (const json& condition : conditions) {
      if (TextAt(condition, "type") == "Ready") info.ready = TextAt(condition, "status") == "True";
    }
  }
  info.gpu_product = TextAt(FieldAt(node, {"metadata", "labels"}), kGpuProductLabel);
  const json& unschedulable = FieldAt(node, {"spec", "unschedulable"});
  info.unschedulable = unschedulable.is_boolean() && unschedulable.get<bool>();
  const json& taints = FieldAt(node, {"spec", "taints"});
  if (taints.is_array()) {
    for (const json& taint : taints) {
      if (!taint.is_object()) continue;
      info.taints.push_back(
          {TextAt(taint, "key"), TextAt(taint, "value"), TextAt(taint, "effect")});
    }
  }
  return info;
}

std::optional<GpuPod> ParseGpuPod(const json& pod) {
  GpuPod result;
  result.node = TextAt(FieldAt(pod, {"spec"}), "nodeName");
  const std::string phase = TextAt(FieldAt(pod, {"status"}), "phase");
  if (result.node.empty() || phase == "Succeeded" || phase == "Failed") return std::nullopt;
  uint32_t containers = 0;
  uint32_t largest_init = 0;
  const json& list = FieldAt(pod, {"spec", "containers"});
  if (list.is_array()) {
    for (const json& container : list) containers += ContainerGpus(container);
  }
  const json& init = FieldAt(pod, {"spec", "initContainers"});
  if (init.is_array()) {
    for (const json& container : init)
      largest_init = std::max(largest_init, ContainerGpus(container));
  }
  result.gpus = std::max(containers, largest_init);
  if (result.gpus == 0) return std::nullopt;
  const std::string name = JobNameOf(pod);
  const std::string ns = TextAt(FieldAt(pod, {"metadata"}), "namespace");
  if (!name.empty() && !ns.empty()) result.job_id = ns + "/" + name;
  return result;
}

HonestCapacity ComputeCapacity(const std::map<std::string, NodeInfo>& nodes,
                               const std::map<std::string, uint32_t>& foreign_gpus,
                               const std::vector<JobPlacement>& jobs) {
  HonestCapacity capacity;
  std::set<uint32_t> classes;
  for (const JobPlacement& job : jobs) classes.insert(std::max<uint32_t>(job.gpus_per_replica, 1));
  // What one pool of nodes (the cluster, or one product's nodes) leaves.
  struct Pool {
    uint32_t usable = 0;
    uint32_t largest_node = 0;
    std::map<uint32_t, uint32_t> fit;  // class -> replicas
  };
  auto new_pool = [&] {
    Pool pool;
    for (const uint32_t g : classes) pool.fit[g] = 0;
    return pool;
  };
  Pool all = new_pool();
  std::map<std::string, Pool> by_product;
  for (const auto& [name, node] : nodes) {
    if (node.allocatable_gpus > 0 && !node.gpu_product.empty() &&
        !by_product.contains(node.gpu_product)) {
      by_product.emplace(node.gpu_product, new_pool());
    }
  }
  const std::vector<Toleration> none;
  for (const auto& [name, node] : nodes) {
    capacity.allocatable_gpus += node.allocatable_gpus;
    auto product = by_product.find(node.gpu_product);
    if (product != by_product.end()) {
      product->second.largest_node = std::max(product->second.largest_node, node.allocatable_gpus);
    }
    if (!node.ready || node.unschedulable) continue;
    const auto foreign = foreign_gpus.find(name);
    const uint32_t taken =
        foreign == foreign_gpus.end() ? 0 : std::min(foreign->second, node.allocatable_gpus);
    const uint32_t free = node.allocatable_gpus - taken;
    bool any_job = jobs.empty() && ToleratesHardTaints(none, node.taints);
    std::set<uint32_t> classes_here;
    for (const JobPlacement& job : jobs) {
      if (!ToleratesHardTaints(job.tolerations, node.taints)) continue;
      any_job = true;
      classes_here.insert(std::max<uint32_t>(job.gpus_per_replica, 1));
    }
    for (Pool* pool : {&all, product == by_product.end() ? nullptr : &product->second}) {
      if (pool == nullptr) continue;
      if (any_job) pool->usable += free;
      for (const uint32_t g : classes_here) pool->fit[g] += free / g;
    }
  }
  auto slots_of = [](const Pool& pool) {
    std::vector<ReplicaSlots> slots;
    for (const auto& [g, replicas] : pool.fit) slots.push_back({g, replicas});
    return slots;
  };
  if (by_product.size() < 2) {
    capacity.usable_gpus = all.usable;
    capacity.slots = slots_of(all);
    return capacity;
  }
  // Typed: the GPUs a node selector can reach, i.e. the labelled nodes'.
  Pool labelled = new_pool();
  for (const auto& [product, pool] : by_product) {
    capacity.types.push_back({product, pool.usable, pool.largest_node, slots_of(pool)});
    labelled.usable += pool.usable;
    for (const auto& [g, replicas] : pool.fit) labelled.fit[g] += replicas;
  }
  capacity.usable_gpus = labelled.usable;
  capacity.slots = slots_of(labelled);
  return capacity;
}

}  // namespace rescale::adapter
