// The cluster's GPU capacity as rescale-adapter sends it (see
// client/adapter/adapter.h): list+watch of nodes and of the pods bound to
// them, the honest capacity they leave for the managed jobs
// (client/adapter/node_capacity.h), and SetCapacity when it changes.
#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/adapter/adapter.h"
#include "spdlog/spdlog.h"

namespace rescale::adapter {

using json = nlohmann::json;

void Adapter::RunNodes() {
  auto on_list = [this](const std::vector<json>& items) {
    {
      absl::MutexLock lock(&mu_);
      nodes_.clear();
      for (const json& node : items) {
        const json& name = FieldAt(node, {"metadata", "name"});
        if (name.is_string()) nodes_[name.get<std::string>()] = ParseNode(node);
      }
      nodes_listed_ = true;
    }
    SendCapacity();
  };
  auto on_event = [this](const WatchEvent& event) {
    const json& name = FieldAt(event.object, {"metadata", "name"});
    if (!name.is_string()) return;
    {
      absl::MutexLock lock(&mu_);
      if (event.type == "DELETED") {
        nodes_.erase(name.get<std::string>());
      } else {
        nodes_[name.get<std::string>()] = ParseNode(event.object);
      }
    }
    SendCapacity();
  };
  ListWatch("/api/v1/nodes", {}, on_list, on_event, nullptr, AdapterEvent::Kind::kNodesListed,
            "nodes");
}

void Adapter::RunPods() {
  // Only pods that request GPUs are kept; a pod that stops holding them
  // (finished, or its GPUs gone from a new spec) is dropped.
  auto key_of = [](const json& pod) -> std::string {
    const json& name = FieldAt(pod, {"metadata", "name"});
    const json& ns = FieldAt(pod, {"metadata", "namespace"});
    if (!name.is_string() || !ns.is_string()) return "";
    return ns.get<std::string>() + "/" + name.get<std::string>();
  };
  auto on_list = [this, key_of](const std::vector<json>& items) {
    std::vector<std::string> unpinned;  // TrainJobs whose type their pods tell
    {
      absl::MutexLock lock(&mu_);
      gpu_pods_.clear();
      for (const json& pod : items) {
        const std::string key = key_of(pod);
        std::optional<GpuPod> parsed = ParseGpuPod(pod);
        if (!key.empty() && parsed) gpu_pods_[key] = *std::move(parsed);
      }
      pods_listed_ = true;
      for (const auto& [id, entry] : jobs_) {
        if (UnpinnedTrainJob(entry.info)) unpinned.push_back(id);
      }
    }
    SendCapacity();
    ResumeMovedJobs();
    for (const std::string& id : unpinned) SyncJob(id);
  };
  auto on_event = [this, key_of](const WatchEvent& event) {
    const std::string key = key_of(event.object);
    if (key.empty()) return;
    bool gone = false;
    std::string unpinned;  // a TrainJob whose type this pod may tell
    {
      absl::MutexLock lock(&mu_);
      std::optional<GpuPod> parsed =
          event.type == "DELETED" ? std::nullopt : ParseGpuPod(event.object);
      gone = !parsed;
      if (parsed) {
        // Only a pod newly bound can tell a new type (every later update of
        // it, a status change, cannot).
        const auto job = jobs_.find(parsed->job_id);
        if (!gpu_pods_.contains(key) && job != jobs_.end() && UnpinnedTrainJob(job->second.info))
          unpinned = job->first;
        gpu_pods_[key] = *std::move(parsed);
      } else if (gpu_pods_.erase(key) == 0) {
        return;  // a pod without GPUs: nothing changed
      }
    }
    SendCapacity();
    if (gone) ResumeMovedJobs();               // a moved job's last pod may just have gone
    if (!unpinned.empty()) SyncJob(unpinned);  // sends nothing if its spec is the same
  };
  // Every namespace, even with --namespace: other teams' pods hold GPUs
  // on the same nodes.
  ListWatch("/api/v1/pods", {.labels = {}, .fields = kPodsOnNodesFieldSelector}, on_list, on_event,
            nullptr, AdapterEvent::Kind::kPodsListed, "pods");
}

HonestCapacity Adapter::ComputeCapacityLocked() const {
  // One placement per distinct (size, tolerations): thousands of jobs share
  // a handful, and ComputeCapacity visits every node for each placement on
  // every job, node and pod event.
  std::vector<JobPlacement> placements;
  for (const auto& [id, entry] : jobs_) {
    if (!entry.managed) continue;
    JobPlacement placement{entry.info.gpus_per_replica.value_or(1), entry.info.tolerations};
    if (std::find(placements.begin(), placements.end(), placement) == placements.end()) {
      placements.push_back(std::move(placement));
    }
  }
  std::map<std::string, uint32_t> foreign;
  for (const auto& [key, pod] : gpu_pods_) {
    const auto job = jobs_.find(pod.job_id);
    if (job != jobs_.end() && job->second.managed) continue;
    foreign[pod.node] += pod.gpus;
  }
  return ComputeCapacity(nodes_, foreign, placements);
}

void Adapter::SendCapacity() {
  absl::MutexLock serialized(&capacity_mu_);
  HonestCapacity capacity;
  {
    absl::MutexLock lock(&mu_);
    if (options_.capacity_gpus >= 0) {
      capacity.usable_gpus = static_cast<uint32_t>(options_.capacity_gpus);
    } else {
      if (!nodes_listed_ || !pods_listed_) return;
      capacity = ComputeCapacityLocked();
    }
    if (sent_capacity_ == capacity) return;
  }
  v1::SetCapacityRequest request;
  request.set_total_gpus(capacity.usable_gpus);
  request.set_allocatable_gpus(capacity.allocatable_gpus);
  std::string slots_text;
  for (const ReplicaSlots& slots : capacity.slots) {
    // With types, the slots are given per type (a replica runs on one).
    if (capacity.types.empty()) {
      v1::ReplicaSlots* out = request.add_slots();
      out->set_gpus_per_replica(slots.gpus_per_replica);
      out->set_replicas(slots.replicas);
    }
    absl::StrAppend(&slots_text, slots_text.empty() ? "" : ",", slots.gpus_per_replica, "=",
                    slots.replicas);
  }
  std::string types_text;
  for (const TypeCapacity& type : capacity.types) {
    v1::GpuType* out = request.add_gpu_types();
    out->set_name(type.name);
    out->set_total_gpus(type.usable_gpus);
    out->set_gpus_per_node(type.gpus_per_node);
    for (const ReplicaSlots& slots : type.slots) {
      v1::ReplicaSlots* slot = out->add_slots();
      slot->set_gpus_per_replica(slots.gpus_per_replica);
      slot->set_replicas(slots.replicas);
    }
    absl::StrAppend(&types_text, types_text.empty() ? "" : ", ", type.name, "=", type.usable_gpus);
  }
  v1::Cluster cluster;
  const std::shared_ptr<grpc::Channel> channel = servers_->Current();
  const std::unique_ptr<grpc::ClientContext> context = NewContext();
  grpc::Status status =
      v1::ClusterService::NewStub(channel)->SetCapacity(context.get(), request, &cluster);
  AfterRescaledCall(channel, status, *context);
  if (!status.ok()) {
    spdlog::warn("SetCapacity({} GPUs): {}", capacity.usable_gpus, status.error_message());
    return;
  }
  {
    absl::MutexLock lock(&mu_);
    sent_capacity_ = capacity;
  }
  if (options_.capacity_gpus >= 0) {
    spdlog::info("cluster capacity: {} GPUs (fixed)", capacity.usable_gpus);
  } else {
    spdlog::info("cluster capacity: {} of {} GPUs usable{}{}; replicas that fit per size: {}",
                 capacity.usable_gpus, capacity.allocatable_gpus,
                 types_text.empty() ? "" : " by GPU type: ", types_text,
                 slots_text.empty() ? "(no jobs)" : slots_text);
  }
  // Typed: "4=6;NVIDIA-A100-SXM4-40GB=16, Tesla-T4=8" (slots, then types).
  Emit({AdapterEvent::Kind::kCapacitySet, "", capacity.usable_gpus,
        types_text.empty() ? slots_text : absl::StrCat(slots_text, ";", types_text)});
}

}  // namespace rescale::adapter
