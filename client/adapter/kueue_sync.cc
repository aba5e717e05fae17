// rescale-adapter and Kueue (see client/adapter/adapter.h and
// client/adapter/kueue.h): finding which kueue.x-k8s.io version the cluster
// serves, list+watch of ClusterQueues (mirrored as Rescale's queues) and
// LocalQueues (which place Kueue-labelled jobs in them), and SetQueues, for
// those or for --queues-file.
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "client/adapter/adapter.h"
#include "client/common/queues_request.h"
#include "rescale/names.h"
#include "spdlog/spdlog.h"

namespace rescale::adapter {

using json = nlohmann::json;

void Adapter::RunKueue(const std::string& resource) {
  // The newest version that serves the resource; a 404 on every version
  // means Kueue is not installed (yet): look again with backoff, quietly.
  client::Backoff backoff(options_.backoff, [this] { return NextRandom(); });
  std::optional<ApiVersion> served;
  bool said = false;
  while (!stopping()) {
    for (const ApiVersion& api : kKueueVersions) {
      absl::StatusOr<json> probe = kube_->List(ResourcePath(api, resource), {});
      if (probe.ok()) {
        served = api;
        break;
      }
      if (probe.status().code() != absl::StatusCode::kNotFound) {
        spdlog::warn("list {}.{}: {}", resource, api.group, probe.status().ToString());
        break;
      }
    }
    if (served.has_value()) break;
    if (!said)
      spdlog::info("Kueue's {} are not served; rescaled's queues are left alone", resource);
    said = true;
    if (!SleepFor(backoff.Next())) return;
  }
  if (!served.has_value()) return;
  spdlog::info("Kueue serves {} at {}/{}: mirroring them", resource, served->group,
               served->version);
  const bool cluster_queues = resource == "clusterqueues";
  auto on_list = [this, cluster_queues](const std::vector<json>& items) {
    cluster_queues ? OnClusterQueues(&items, nullptr) : OnLocalQueues(&items, nullptr);
  };
  auto on_event = [this, cluster_queues](const WatchEvent& event) {
    cluster_queues ? OnClusterQueues(nullptr, &event) : OnLocalQueues(nullptr, &event);
  };
  ListWatch(ResourcePath(*served, resource), {}, on_list, on_event, nullptr,
            AdapterEvent::Kind::kQueuesListed, resource + "." + served->group);
}

void Adapter::OnClusterQueues(const std::vector<json>* list, const WatchEvent* event) {
  // Parsed outside the lock; a ClusterQueue Rescale cannot represent is
  // left out (its jobs then name a queue that is not defined, and wait).
  std::map<std::string, QueueSpec> parsed;
  std::vector<std::string> gone;
  auto take = [&](const json& object) {
    absl::StatusOr<QueueSpec> queue = ParseClusterQueue(object);
    if (queue.ok()) {
      parsed[queue->name] = *std::move(queue);
      return;
    }
    spdlog::warn("skipping: {}", std::string(queue.status().message()));
    Emit({AdapterEvent::Kind::kSkipped, "", 0, std::string(queue.status().message())});
    // On a watch event an unusable ClusterQueue replaces a usable one; a
    // relist leaves it out by itself.
    const json& name = FieldAt(object, {"metadata", "name"});
    if (list == nullptr && name.is_string()) gone.push_back(name.get<std::string>());
  };
  if (list != nullptr) {
    for (const json& item : *list) take(item);
  } else if (event->type == "DELETED") {
    const json& name = FieldAt(event->object, {"metadata", "name"});
    if (name.is_string()) gone.push_back(name.get<std::string>());
  } else {
    take(event->object);
  }
  {
    absl::MutexLock lock(&mu_);
    if (list != nullptr) {
      cluster_queues_ = std::move(parsed);
      cluster_queues_listed_ = true;
    } else {
      for (auto& [name, queue] : parsed) cluster_queues_[name] = std::move(queue);
      for (const std::string& name : gone) cluster_queues_.erase(name);
    }
  }
  SendQueues();
}

void Adapter::OnLocalQueues(const std::vector<json>* list, const WatchEvent* event) {
  // Parsed outside the lock. A LocalQueue Rescale cannot read counts as
  // not there (its jobs are registered without a queue, and wait).
  struct Change {
    std::string key;  // namespace/name
    std::string cluster_queue;
    bool deleted = false;
  };
  std::vector<Change> changes;
  auto take = [&changes](const json& object, bool deleted) {
    absl::StatusOr<LocalQueueRef> ref = ParseLocalQueue(object);
    if (ref.ok()) {
      changes.push_back({std::move(ref->key), std::move(ref->cluster_queue), deleted});
      return;
    }
    const json& name = FieldAt(object, {"metadata", "name"});
    const json& ns = FieldAt(object, {"metadata", "namespace"});
    if (name.is_string() && ns.is_string())
      changes.push_back({ns.get<std::string>() + "/" + name.get<std::string>(), "", true});
  };
  if (list != nullptr) {
    for (const json& item : *list) take(item, false);
  } else {
    take(event->object, event->type == "DELETED");
  }
  std::set<std::string> moved;  // LocalQueues whose ClusterQueue changed
  // local_queues_ is passed in so that the thread-safety analysis sees it
  // used under mu_.
  auto apply = [&](std::map<std::string, std::string>& queues) {
    if (list != nullptr) {  // a relist: what it does not hold is gone
      std::set<std::string> listed;
      for (const Change& c : changes) {
        if (!c.deleted) listed.insert(c.key);
      }
      for (auto it = queues.begin(); it != queues.end();) {
        if (listed.count(it->first)) {
          ++it;
        } else {
          moved.insert(it->first);
          it = queues.erase(it);
        }
      }
    }
    for (const Change& c : changes) {
      auto it = queues.find(c.key);
      if (c.deleted) {
        if (it != queues.end()) {
          queues.erase(it);
          moved.insert(c.key);
        }
      } else if (it == queues.end() || it->second != c.cluster_queue) {
        queues[c.key] = c.cluster_queue;
        moved.insert(c.key);
      }
    }
  };
  {
    absl::MutexLock lock(&mu_);
    apply(local_queues_);
  }
  if (!moved.empty()) ResyncKueueJobs(moved);
}

std::string Adapter::QueueOfLocked(const JobInfo& job) const {
  if (!job.kueue_managed()) return job.queue;
  auto it = local_queues_.find(job.ns + "/" + job.kueue_local_queue);
  // A ClusterQueue whose name is not a Rescale queue name is not mirrored;
  // "" keeps the job registrable (it waits for Kueue all the same).
  if (it == local_queues_.end() || !IsDns1123Label(it->second)) return "";
  return it->second;
}

void Adapter::ResyncKueueJobs(const std::set<std::string>& local_queues) {
  std::vector<std::string> ids;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, entry] : jobs_) {
      const JobInfo& info = entry.info;
      if (info.kueue_managed() && local_queues.count(info.ns + "/" + info.kueue_local_queue))
        ids.push_back(id);
    }
  }
  // SyncJob sends an UpdateJob only when the job's queue did change.
  for (const std::string& id : ids) SyncJob(id);
}

void Adapter::SendQueues() {
  absl::MutexLock serialized(&queues_mu_);
  std::vector<QueueSpec> wanted;
  {
    absl::MutexLock lock(&mu_);
    if (options_.queues.has_value()) {
      wanted = *options_.queues;
    } else if (options_.kueue && cluster_queues_listed_) {
      absl::StatusOr<std::vector<QueueSpec>> set = QueueSetOf(cluster_queues_);
      if (!set.ok()) {
        spdlog::warn("Kueue's ClusterQueues are not a valid queue set: {}",
                     std::string(set.status().message()));
        return;
      }
      wanted = *std::move(set);
    } else {
      return;  // the queues are not the adapter's to set
    }
    if (sent_queues_ == wanted) return;
  }
  const v1::SetQueuesRequest request = client::SetQueuesRequestOf(wanted);
  v1::ListQueuesResponse response;
  const std::shared_ptr<grpc::Channel> channel = servers_->Current();
  const std::unique_ptr<grpc::ClientContext> context = NewContext();
  grpc::Status status =
      v1::ClusterService::NewStub(channel)->SetQueues(context.get(), request, &response);
  AfterRescaledCall(channel, status, *context);
  if (!status.ok()) {
    // Sent again on the next ClusterQueue event, or when the stream resyncs.
    spdlog::warn("SetQueues ({} queues): {}", wanted.size(), status.error_message());
    return;
  }
  std::vector<std::string> names;
  for (const QueueSpec& queue : wanted) names.push_back(queue.name);
  const std::string text = absl::StrJoin(names, ",");
  spdlog::info("queues set from {}: {}", options_.queues.has_value() ? "the queue file" : "Kueue",
               text.empty() ? "(none: one pool)" : text);
  {
    absl::MutexLock lock(&mu_);
    sent_queues_ = std::move(wanted);
  }
  Emit({AdapterEvent::Kind::kQueuesSet, "", names.size(), text});
}

}  // namespace rescale::adapter
