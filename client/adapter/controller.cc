// The adapter's controller logic (see adapter.h): parsing PyTorchJobs,
// building patches, backoff, and the Adapter's list+watch and apply loops.
#include "client/adapter/adapter.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace rescale::adapter {
namespace {

using json = nlohmann::json;

// The value at a path of object keys, or null json when any step is missing.
const json& At(const json& object, std::initializer_list<const char*> keys) {
  static const json kNull;
  const json* node = &object;
  for (const char* key : keys) {
    if (!node->is_object()) return kNull;
    auto it = node->find(key);
    if (it == node->end()) return kNull;
    node = &*it;
  }
  return *node;
}

absl::StatusOr<uint32_t> NonNegative(const json& value, const std::string& where) {
  if (value.is_number_integer() && value.get<int64_t>() >= 0 &&
      value.get<int64_t>() <= int64_t{UINT32_MAX}) {
    return static_cast<uint32_t>(value.get<int64_t>());
  }
  return absl::InvalidArgumentError(absl::StrCat(where, " must be a non-negative integer, got ",
                                                 value.dump()));
}

// A Kubernetes quantity for a countable resource: "4" or 4 (GPUs are whole).
std::optional<uint32_t> WholeQuantity(const json& value) {
  if (value.is_number_integer() && value.get<int64_t>() >= 0) {
    return static_cast<uint32_t>(value.get<int64_t>());
  }
  uint32_t parsed = 0;
  if (value.is_string() && absl::SimpleAtoi(value.get<std::string>(), &parsed)) return parsed;
  return std::nullopt;
}

std::string Describe(const ApiVersion& api, const std::string& id) {
  return absl::StrCat("PyTorchJob ", id, " (", api.group, "/", api.version, ")");
}

// How long a backoff may last at most, to keep a stopping adapter prompt.
constexpr absl::Duration kMaxSleep = absl::Minutes(5);

}  // namespace

std::string ResourcePath(const ApiVersion& api, const std::string& resource, const std::string& ns,
                         const std::string& name) {
  std::string path = api.group.empty() ? absl::StrCat("/api/", api.version)
                                       : absl::StrCat("/apis/", api.group, "/", api.version);
  if (!ns.empty()) absl::StrAppend(&path, "/namespaces/", ns);
  absl::StrAppend(&path, "/", resource);
  if (!name.empty()) absl::StrAppend(&path, "/", name);
  return path;
}

absl::StatusOr<JobInfo> ParsePyTorchJob(const json& object) {
  JobInfo job;
  const json& metadata = At(object, {"metadata"});
  if (!At(metadata, {"name"}).is_string() || !At(metadata, {"namespace"}).is_string()) {
    return absl::InvalidArgumentError("PyTorchJob without metadata.name or metadata.namespace");
  }
  job.name = metadata["name"].get<std::string>();
  job.ns = metadata["namespace"].get<std::string>();
  job.id = absl::StrCat(job.ns, "/", job.name);
  const json& api_version = At(object, {"apiVersion"});
  if (api_version.is_string()) {
    std::string text = api_version.get<std::string>();
    size_t slash = text.find('/');
    if (slash != std::string::npos) job.api = {text.substr(0, slash), text.substr(slash + 1)};
  }
  const std::string what = Describe(job.api, job.id);
  if (At(metadata, {"resourceVersion"}).is_string()) {
    job.resource_version = metadata["resourceVersion"].get<std::string>();
  }

  const json& spec = At(object, {"spec"});
  const json& worker = At(spec, {"pytorchReplicaSpecs", "Worker"});
  if (!worker.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": spec.pytorchReplicaSpecs.Worker is missing"));
  }
  // The operators default a missing replicas to 1.
  job.workers = 1;
  if (!At(worker, {"replicas"}).is_null()) {
    absl::StatusOr<uint32_t> workers =
        NonNegative(worker["replicas"], what + ": spec.pytorchReplicaSpecs.Worker.replicas");
    if (!workers.ok()) return workers.status();
    job.workers = *workers;
  }
  const json& master = At(spec, {"pytorchReplicaSpecs", "Master"});
  if (master.is_object()) {
    job.masters = 1;
    if (!At(master, {"replicas"}).is_null()) {
      absl::StatusOr<uint32_t> masters =
          NonNegative(master["replicas"], what + ": spec.pytorchReplicaSpecs.Master.replicas");
      if (!masters.ok()) return masters.status();
      job.masters = *masters;
    }
  }
  const json& suspend = At(spec, {"runPolicy", "suspend"});
  job.suspended = suspend.is_boolean() && suspend.get<bool>();

  const json& elastic = At(spec, {"elasticPolicy"});
  std::optional<uint32_t> min_replicas;
  std::optional<uint32_t> max_replicas;
  if (!At(elastic, {"minReplicas"}).is_null()) {
    absl::StatusOr<uint32_t> value =
        NonNegative(elastic["minReplicas"], what + ": spec.elasticPolicy.minReplicas");
    if (!value.ok()) return value.status();
    min_replicas = *value;
  }
  if (!At(elastic, {"maxReplicas"}).is_null()) {
    absl::StatusOr<uint32_t> value =
        NonNegative(elastic["maxReplicas"], what + ": spec.elasticPolicy.maxReplicas");
    if (!value.ok()) return value.status();
    max_replicas = *value;
  }
  // Per the operator: one bound set copies it to the other; none = the
  // Worker replicas, i.e. a fixed-size job.
  job.min_replicas = min_replicas.value_or(max_replicas.value_or(job.workers));
  job.max_replicas = max_replicas.value_or(min_replicas.value_or(job.workers));
  if (job.min_replicas > job.max_replicas) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": spec.elasticPolicy.minReplicas (", job.min_replicas,
        ") exceeds maxReplicas (", job.max_replicas, ")"));
  }
  const json& metrics = At(elastic, {"metrics"});
  job.operator_hpa = !metrics.is_null() && !(metrics.is_array() && metrics.empty());

  uint32_t gpus = 0;
  bool has_gpu_limit = false;
  const json& containers = At(worker, {"template", "spec", "containers"});
  if (containers.is_array()) {
    for (const json& container : containers) {
      const json& limit = At(container, {"resources", "limits", kGpuResource});
      if (limit.is_null()) continue;
      std::optional<uint32_t> count = WholeQuantity(limit);
      if (!count) {
        return absl::InvalidArgumentError(absl::StrCat(
            what, ": Worker container resources.limits[\"nvidia.com/gpu\"] is not a whole number: ",
            limit.dump()));
      }
      gpus += *count;
      has_gpu_limit = true;
    }
  }
  if (has_gpu_limit) job.gpus_per_replica = gpus;

  const json& annotations = At(metadata, {"annotations"});
  auto annotation = [&](const char* key) -> std::optional<std::string> {
    const json& value = At(annotations, {key});
    if (value.is_string()) return value.get<std::string>();
    return std::nullopt;
  };
  auto bad = [&](const char* key, const std::string& value, const char* expected) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": annotation ", key, "=\"", value,
                                                   "\" is not ", expected));
  };
  if (auto value = annotation(kPriorityAnnotation)) {
    if (!absl::SimpleAtoi(*value, &job.priority)) return bad(kPriorityAnnotation, *value, "an integer");
  }
  if (auto value = annotation(kRestartCostAnnotation)) {
    double seconds = 0;
    if (!absl::SimpleAtod(*value, &seconds) || !std::isfinite(seconds) || seconds < 0) {
      return bad(kRestartCostAnnotation, *value, "a non-negative number of seconds");
    }
    job.restart_cost_seconds = seconds;
  }
  if (auto value = annotation(kPreemptibleAnnotation)) {
    bool preemptible = false;
    if (!absl::SimpleAtob(*value, &preemptible)) return bad(kPreemptibleAnnotation, *value, "true or false");
    job.preemptible = preemptible;
  }
  if (auto value = annotation(kLocalBatchSizeAnnotation)) {
    if (!absl::SimpleAtoi(*value, &job.local_batch_size)) {
      return bad(kLocalBatchSizeAnnotation, *value, "a non-negative integer");
    }
  }
  if (auto value = annotation(kPolicyAnnotation)) job.policy = *value;
  if (annotations.is_object()) {
    for (const auto& [key, value] : annotations.items()) {
      if (absl::StartsWith(key, kParameterAnnotationPrefix) && value.is_string()) {
        job.parameters[key.substr(sizeof(kParameterAnnotationPrefix) - 1)] = value.get<std::string>();
      }
    }
  }

  const json& conditions = At(object, {"status", "conditions"});
  if (conditions.is_array()) {
    for (const json& condition : conditions) {
      const json& type = At(condition, {"type"});
      const json& status = At(condition, {"status"});
      if (type.is_string() && status.is_string() && status.get<std::string>() == "True" &&
          (type.get<std::string>() == "Succeeded" || type.get<std::string>() == "Failed")) {
        job.finished = true;
      }
    }
  }
  return job;
}

json WorkerPatch(const std::string& resource_version, std::optional<uint32_t> workers,
                 std::optional<bool> suspend) {
  json patch = {{"metadata", {{"resourceVersion", resource_version}}}};
  if (workers) patch["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = *workers;
  if (suspend) patch["spec"]["runPolicy"]["suspend"] = *suspend;
  return patch;
}

json MinMemberPatch(const std::string& resource_version, uint32_t min_member) {
  return {{"metadata", {{"resourceVersion", resource_version}}},
          {"spec", {{"minMember", min_member}}}};
}

uint32_t ClampReplicas(const JobInfo& job, uint32_t recommended, bool* clamped) {
  uint32_t value = std::clamp(recommended, job.min_replicas, job.max_replicas);
  if (clamped != nullptr) *clamped = value != recommended;
  return value;
}

v1::JobSpec ToJobSpec(const JobInfo& job) {
  v1::JobSpec spec;
  spec.set_job_id(job.id);
  spec.set_min_replicas(job.min_replicas);
  spec.set_max_replicas(job.max_replicas);
  if (job.gpus_per_replica) spec.set_gpus_per_replica(*job.gpus_per_replica);
  spec.set_priority(job.priority);
  if (job.preemptible) spec.set_preemptible(*job.preemptible);
  if (job.restart_cost_seconds) spec.set_restart_cost_seconds(*job.restart_cost_seconds);
  spec.set_local_batch_size(job.local_batch_size);
  spec.set_policy(job.policy);
  for (const auto& [key, value] : job.parameters) (*spec.mutable_parameters())[key] = value;
  return spec;
}

uint32_t NodeGpus(const json& node) {
  const json& value = At(node, {"status", "allocatable", kGpuResource});
  if (value.is_null()) return 0;
  return WholeQuantity(value).value_or(0);
}

Backoff::Backoff(BackoffOptions options, std::function<double()> random)
    : options_(options), random_(std::move(random)) {}

absl::Duration Backoff::Next() {
  absl::Duration delay = options_.initial;
  for (int i = 0; i < attempt_ && delay < options_.max; ++i) delay = delay * options_.multiplier;
  delay = std::min(delay, options_.max);
  ++attempt_;
  double factor = 1.0 + options_.jitter * (2.0 * random_() - 1.0);
  return delay * factor;
}

// ---------------------------------------------------------------- Adapter --

Adapter::Adapter(AdapterOptions options, KubeClient* kube, std::shared_ptr<grpc::Channel> channel)
    : options_(std::move(options)),
      kube_(kube),
      channel_(std::move(channel)),
      jobs_stub_(v1::JobService::NewStub(channel_)),
      recs_stub_(v1::RecommendationService::NewStub(channel_)),
      cluster_stub_(v1::ClusterService::NewStub(channel_)),
      random_(options_.random),
      generator_(std::random_device{}()) {}

Adapter::~Adapter() { Stop(); }

void Adapter::Start() {
  for (const ApiVersion& api : options_.job_apis) {
    threads_.emplace_back([this, api] { RunJobs(api); });
  }
  if (options_.capacity_gpus < 0) threads_.emplace_back([this] { RunNodes(); });
  threads_.emplace_back([this] { RunRecommendations(); });
}

void Adapter::Stop() {
  stop_.store(true, std::memory_order_release);
  {
    absl::MutexLock lock(&stop_mu_);
    stopping_flag_ = true;
  }
  kube_->Cancel();
  {
    absl::MutexLock lock(&stream_mu_);
    if (stream_context_ != nullptr) stream_context_->TryCancel();
  }
  for (std::thread& thread : threads_) {
    if (thread.joinable()) thread.join();
  }
  threads_.clear();
}

double Adapter::NextRandom() {
  absl::MutexLock lock(&random_mu_);
  if (random_) return random_();
  return std::uniform_real_distribution<double>(0.0, 1.0)(generator_);
}

bool Adapter::SleepFor(absl::Duration d) {
  absl::MutexLock lock(&stop_mu_);
  stop_mu_.AwaitWithTimeout(absl::Condition(&stopping_flag_), std::min(d, kMaxSleep));
  return !stopping_flag_;
}

void Adapter::Emit(AdapterEvent event) {
  if (options_.observer) options_.observer(event);
}

std::unique_ptr<grpc::ClientContext> Adapter::NewContext() const {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(absl::ToChronoTime(absl::Now() + options_.rpc_timeout));
  return context;
}

void Adapter::ListWatch(const std::string& path, const std::string& selector,
                        const std::function<void(const std::vector<json>&)>& on_list,
                        const std::function<void(const WatchEvent&)>& on_event,
                        AdapterEvent::Kind listed_kind, const std::string& what) {
  Backoff backoff(options_.backoff, [this] { return NextRandom(); });
  bool warned_missing = false;
  while (!stopping()) {
    absl::StatusOr<json> list = kube_->List(path, selector);
    if (!list.ok()) {
      if (list.status().code() == absl::StatusCode::kNotFound) {
        // The CRD is not installed (yet); say so once, keep checking.
        if (!warned_missing) spdlog::warn("{}: not served ({}); will retry", what, std::string(list.status().message()));
        warned_missing = true;
      } else {
        spdlog::warn("list {}: {}", what, list.status().ToString());
      }
      if (!SleepFor(backoff.Next())) return;
      continue;
    }
    warned_missing = false;
    std::string resource_version;
    if (At(*list, {"metadata", "resourceVersion"}).is_string()) {
      resource_version = (*list)["metadata"]["resourceVersion"].get<std::string>();
    }
    std::vector<json> items;
    if (At(*list, {"items"}).is_array()) {
      for (const json& item : (*list)["items"]) items.push_back(item);
    }
    on_list(items);
    Emit({listed_kind, "", items.size(), path});

    // Watch from the list's resourceVersion until the server says it is too
    // old (410: relist) or we stop. Other errors: back off and re-watch from
    // the last version seen, which bookmarks keep recent.
    bool relist = false;
    while (!stopping() && !relist) {
      absl::Status error_event;
      absl::Status status = kube_->Watch(
          path, selector, resource_version,
          [&](const WatchEvent& event) {
            if (event.type == "ERROR") {
              const json& code = At(event.object, {"code"});
              std::string message = At(event.object, {"message"}).is_string()
                                        ? event.object["message"].get<std::string>()
                                        : event.object.dump();
              error_event = code.is_number_integer()
                                ? StatusFromHttp(code.get<long>(), "WATCH " + path, message)
                                : absl::UnknownError("WATCH " + path + ": " + message);
              return false;
            }
            const json& rv = At(event.object, {"metadata", "resourceVersion"});
            if (rv.is_string()) resource_version = rv.get<std::string>();
            if (event.type == "BOOKMARK") {
              Emit({AdapterEvent::Kind::kBookmark, "", 0, resource_version});
              return true;
            }
            on_event(event);
            return true;
          },
          stop_);
      if (status.ok() && !error_event.ok()) status = error_event;
      if (stopping()) return;
      if (status.code() == absl::StatusCode::kOutOfRange) {
        spdlog::info("watch {}: resourceVersion {} is too old (410 Gone); relisting", what,
                     resource_version);
        Emit({AdapterEvent::Kind::kWatchRelisted, "", 0, path});
        relist = true;
      } else if (!status.ok()) {
        spdlog::warn("watch {}: {}", what, status.ToString());
        if (!SleepFor(backoff.Next())) return;
      } else {
        backoff.Reset();
      }
    }
  }
}

void Adapter::RunJobs(const ApiVersion& api) {
  const std::string path = ResourcePath(api, "pytorchjobs", options_.ns);
  auto on_list = [this, api](const std::vector<json>& items) {
    std::set<std::string> seen;
    for (const json& item : items) {
      const json& name = At(item, {"metadata", "name"});
      const json& ns = At(item, {"metadata", "namespace"});
      if (name.is_string() && ns.is_string()) {
        seen.insert(ns.get<std::string>() + "/" + name.get<std::string>());
      }
      OnJobObject(api, item);
    }
    // Jobs deleted while we were not watching.
    std::vector<std::string> gone;
    {
      absl::MutexLock lock(&mu_);
      for (const auto& [id, entry] : jobs_) {
        if (entry.info.api == api && !seen.count(id)) gone.push_back(id);
      }
    }
    for (const std::string& id : gone) OnJobGone(id, "no longer listed");
  };
  auto on_event = [this, api](const WatchEvent& event) {
    if (event.type == "DELETED") {
      const json& name = At(event.object, {"metadata", "name"});
      const json& ns = At(event.object, {"metadata", "namespace"});
      if (name.is_string() && ns.is_string()) {
        OnJobGone(ns.get<std::string>() + "/" + name.get<std::string>(), "deleted");
      }
    } else {
      OnJobObject(api, event.object);
    }
  };
  ListWatch(path, options_.label_selector, on_list, on_event, AdapterEvent::Kind::kJobsListed,
            "pytorchjobs." + api.group);
}

void Adapter::OnJobObject(const ApiVersion& api, const json& object) {
  absl::StatusOr<JobInfo> parsed = ParsePyTorchJob(object);
  if (!parsed.ok()) {
    const json& name = At(object, {"metadata", "name"});
    const json& ns = At(object, {"metadata", "namespace"});
    std::string id = name.is_string() && ns.is_string()
                         ? ns.get<std::string>() + "/" + name.get<std::string>()
                         : std::string();
    {
      absl::MutexLock lock(&mu_);
      if (skipped_[id] != std::string(parsed.status().message())) {
        skipped_[id] = std::string(parsed.status().message());
        spdlog::warn("skipping: {}", std::string(parsed.status().message()));
      }
    }
    Emit({AdapterEvent::Kind::kSkipped, id, 0, std::string(parsed.status().message())});
    if (!id.empty()) OnJobGone(id, "no longer valid");
    return;
  }
  JobInfo job = *std::move(parsed);
  if (job.api.group.empty()) job.api = api;
  if (job.finished) {
    OnJobGone(job.id, "finished");
    return;
  }
  if (job.operator_hpa) {
    std::string reason = absl::StrCat(
        Describe(job.api, job.id),
        ": spec.elasticPolicy.metrics is set, so the operator scales it with its own HPA; "
        "rescale-adapter leaves it alone");
    bool first = false;
    {
      absl::MutexLock lock(&mu_);
      first = skipped_[job.id] != reason;
      skipped_[job.id] = reason;
    }
    if (first) spdlog::warn("skipping {}", reason);
    Emit({AdapterEvent::Kind::kSkipped, job.id, 0, reason});
    OnJobGone(job.id, "operator-managed HPA");
    return;
  }
  {
    absl::MutexLock lock(&mu_);
    skipped_.erase(job.id);
    auto [it, inserted] = jobs_.try_emplace(job.id);
    if (!inserted && !(it->second.info.api == job.api)) {
      spdlog::warn("{} exists in both {} and {}; managing only the first", job.id,
                   it->second.info.api.group, job.api.group);
      return;
    }
    it->second.info = job;
  }
  SyncJob(job.id);
  ApplyLatest(job.id);
}

void Adapter::ApplyLatest(const std::string& id) {
  std::optional<v1::Recommendation> latest;
  {
    absl::MutexLock lock(&mu_);
    auto rec = latest_.find(id);
    auto job = jobs_.find(id);
    if (rec == latest_.end() || job == jobs_.end() || !job->second.registered) return;
    if (rec->second.generation() <= job->second.applied_generation) return;
    latest = rec->second;
  }
  Apply(*latest);
}

void Adapter::OnJobGone(const std::string& id, const std::string& why) {
  absl::MutexLock sync(&sync_mu_);
  bool registered = false;
  {
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return;
    registered = it->second.registered;
    jobs_.erase(it);
  }
  if (registered) {
    v1::DeregisterJobRequest request;
    request.set_job_id(id);
    v1::DeregisterJobResponse response;
    grpc::Status status = jobs_stub_->DeregisterJob(NewContext().get(), request, &response);
    if (!status.ok() && status.error_code() != grpc::StatusCode::NOT_FOUND) {
      // rescaled keeps it until it restarts; harmless, the adapter ignores
      // recommendations for jobs it does not manage.
      spdlog::warn("DeregisterJob {} ({}): {}", id, why, status.error_message());
    }
  }
  spdlog::info("job {} {}: deregistered", id, why);
  Emit({AdapterEvent::Kind::kDeregistered, id, 0, why});
}

void Adapter::SyncJob(const std::string& id) {
  absl::MutexLock sync(&sync_mu_);
  // No apply may run between registering and reporting the initial state:
  // the report would overwrite what the apply reported.
  absl::MutexLock no_apply(&apply_mu_);
  JobInfo info;
  bool registered = false;
  std::optional<std::string> sent;
  {
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return;
    info = it->second.info;
    registered = it->second.registered;
    sent = it->second.sent_spec;
  }
  v1::JobSpec spec = ToJobSpec(info);
  std::string serialized = spec.SerializeAsString();
  if (registered && sent == serialized) return;

  v1::Job job;
  grpc::Status status;
  bool created = false;
  if (!registered) {
    v1::RegisterJobRequest request;
    *request.mutable_spec() = spec;
    status = jobs_stub_->RegisterJob(NewContext().get(), request, &job);
    created = status.ok();
  }
  if (registered || status.error_code() == grpc::StatusCode::ALREADY_EXISTS) {
    v1::UpdateJobRequest request;
    *request.mutable_spec() = spec;
    status = jobs_stub_->UpdateJob(NewContext().get(), request, &job);
  }
  if (!status.ok()) {
    // Retried on the next change of the job or when the recommendation
    // stream reconnects (ResyncAll).
    spdlog::warn("register {} with rescaled: {}", id, status.error_message());
    return;
  }
  {
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return;
    it->second.registered = true;
    it->second.sent_spec = serialized;
  }
  spdlog::info("job {} {} (replicas {}..{}, {} GPU/replica, priority {})", id,
               registered ? "updated" : "registered", info.min_replicas, info.max_replicas,
               info.gpus_per_replica.value_or(1), info.priority);
  if (created) {
    // A job new to rescaled (first sight, or rescaled restarted): tell it
    // what runs now, generation 0 = applied out of band. Read the object
    // afresh: the watch cache may not have caught up with our own last
    // patch yet. When rescaled already had the job (ALREADY_EXISTS) it
    // also has what was applied, which a stale report would overwrite.
    absl::StatusOr<json> fresh = kube_->Get(ResourcePath(info.api, "pytorchjobs", info.ns, info.name));
    if (fresh.ok()) {
      absl::StatusOr<JobInfo> parsed = ParsePyTorchJob(*fresh);
      if (parsed.ok()) info = *std::move(parsed);
    }
    ReportApplied(id, info.suspended ? 0 : info.workers, info.suspended, 0);
  }
  Emit({AdapterEvent::Kind::kRegistered, id, 0, registered ? "updated" : "registered"});
}

void Adapter::ResyncAll() {
  std::vector<std::string> ids;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [id, entry] : jobs_) {
      // rescaled may have restarted and forgotten everything, and its
      // generations restart with it: register again, apply afresh.
      entry.registered = false;
      entry.sent_spec.reset();
      entry.applied_generation = 0;
      ids.push_back(id);
    }
    sent_capacity_.reset();
  }
  for (const std::string& id : ids) SyncJob(id);
  SendCapacity();
}

void Adapter::RunNodes() {
  auto on_list = [this](const std::vector<json>& items) {
    {
      absl::MutexLock lock(&mu_);
      node_gpus_.clear();
      for (const json& node : items) {
        const json& name = At(node, {"metadata", "name"});
        if (name.is_string()) node_gpus_[name.get<std::string>()] = NodeGpus(node);
      }
      nodes_listed_ = true;
    }
    SendCapacity();
  };
  auto on_event = [this](const WatchEvent& event) {
    const json& name = At(event.object, {"metadata", "name"});
    if (!name.is_string()) return;
    {
      absl::MutexLock lock(&mu_);
      if (event.type == "DELETED") {
        node_gpus_.erase(name.get<std::string>());
      } else {
        node_gpus_[name.get<std::string>()] = NodeGpus(event.object);
      }
    }
    SendCapacity();
  };
  ListWatch("/api/v1/nodes", "", on_list, on_event, AdapterEvent::Kind::kNodesListed, "nodes");
}

void Adapter::SendCapacity() {
  uint32_t total = 0;
  {
    absl::MutexLock lock(&mu_);
    if (options_.capacity_gpus >= 0) {
      total = static_cast<uint32_t>(options_.capacity_gpus);
    } else {
      if (!nodes_listed_) return;
      for (const auto& [name, gpus] : node_gpus_) total += gpus;
    }
    if (sent_capacity_ == total) return;
  }
  v1::SetCapacityRequest request;
  request.set_total_gpus(total);
  v1::Cluster cluster;
  grpc::Status status = cluster_stub_->SetCapacity(NewContext().get(), request, &cluster);
  if (!status.ok()) {
    spdlog::warn("SetCapacity({}): {}", total, status.error_message());
    return;
  }
  {
    absl::MutexLock lock(&mu_);
    sent_capacity_ = total;
  }
  spdlog::info("cluster capacity: {} GPUs", total);
  Emit({AdapterEvent::Kind::kCapacitySet, "", total, ""});
}

void Adapter::RunRecommendations() {
  Backoff backoff(options_.backoff, [this] { return NextRandom(); });
  while (!stopping()) {
    grpc::ClientContext context;
    {
      absl::MutexLock lock(&stream_mu_);
      if (stopping()) return;
      stream_context_ = &context;
    }
    v1::WatchRecommendationsRequest request;
    request.set_namespace_(options_.ns);
    std::unique_ptr<grpc::ClientReader<v1::RecommendationEvent>> reader =
        recs_stub_->WatchRecommendations(&context, request);
    {
      absl::MutexLock lock(&mu_);
      latest_.clear();  // generations are per rescaled process
    }
    v1::RecommendationEvent event;
    bool synced = false;
    std::vector<v1::Recommendation> initial;
    while (reader->Read(&event)) {
      if (event.type() == v1::RecommendationEvent::SYNCED) {
        // A (re)connected stream: rescaled may be a new process. Register
        // everything first, then apply what it recommended.
        synced = true;
        backoff.Reset();
        ResyncAll();
        Emit({AdapterEvent::Kind::kRescaledSynced, "", 0, ""});
        for (const v1::Recommendation& recommendation : initial) Apply(recommendation);
        initial.clear();
        continue;
      }
      {
        absl::MutexLock lock(&mu_);
        if (event.type() == v1::RecommendationEvent::DELETED) {
          latest_.erase(event.recommendation().job_id());
        } else {
          latest_[event.recommendation().job_id()] = event.recommendation();
        }
      }
      if (event.type() == v1::RecommendationEvent::DELETED) continue;
      if (!synced) {
        initial.push_back(event.recommendation());
      } else {
        Apply(event.recommendation());
      }
    }
    grpc::Status status = reader->Finish();
    {
      absl::MutexLock lock(&stream_mu_);
      stream_context_ = nullptr;
    }
    if (stopping()) return;
    spdlog::warn("recommendation stream from rescaled ended: {} {}; reconnecting",
                 static_cast<int>(status.error_code()), status.error_message());
    if (!SleepFor(backoff.Next())) return;
  }
}

void Adapter::Apply(const v1::Recommendation& recommendation) {
  absl::MutexLock apply_lock(&apply_mu_);
  const std::string& id = recommendation.job_id();
  JobInfo info;
  {
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(id);
    if (it == jobs_.end()) {
      spdlog::debug("recommendation for {} ignored: not a job this adapter manages", id);
      return;
    }
    if (recommendation.generation() <= it->second.applied_generation) return;
    info = it->second.info;
  }
  const bool suspend = recommendation.suspend();
  uint32_t workers = recommendation.replicas();
  if (!suspend) {
    bool was_clamped = false;
    uint32_t clamped = ClampReplicas(info, workers, &was_clamped);
    if (was_clamped) {
      spdlog::warn("{}: recommended {} replicas is outside [{}, {}]; writing {}", id, workers,
                   info.min_replicas, info.max_replicas, clamped);
      workers = clamped;
    }
  }
  Backoff backoff(options_.backoff, [this] { return NextRandom(); });
  absl::Status status;
  for (int attempt = 1; attempt <= options_.max_apply_attempts && !stopping(); ++attempt) {
    status = ApplyToKube(info, workers, suspend);
    if (status.ok()) break;
    const absl::StatusCode code = status.code();
    const bool retryable = code == absl::StatusCode::kUnavailable ||
                           code == absl::StatusCode::kAborted ||
                           code == absl::StatusCode::kUnknown ||
                           code == absl::StatusCode::kInternal;
    spdlog::warn("apply generation {} to {}: {}{}", recommendation.generation(), id,
                 status.ToString(), retryable ? "; retrying" : "");
    if (!retryable || !SleepFor(backoff.Next())) break;
  }
  if (!status.ok()) {
    spdlog::error("gave up applying generation {} to {}: {}", recommendation.generation(), id,
                  status.ToString());
    return;
  }
  {
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return;
    it->second.applied_generation = recommendation.generation();
  }
  spdlog::info("{}: generation {} {}: {} {} ({})", id, recommendation.generation(),
               options_.dry_run ? "would be applied" : "applied",
               suspend ? "suspended" : "replicas", suspend ? "" : std::to_string(workers),
               recommendation.reason());
  if (!options_.dry_run) {
    ReportApplied(id, suspend ? 0 : workers, suspend, recommendation.generation());
  }
  Emit({AdapterEvent::Kind::kApplied, id, recommendation.generation(),
        suspend ? "suspend" : absl::StrCat("replicas=", workers)});
}

absl::Status Adapter::ApplyToKube(const JobInfo& job, uint32_t workers, bool suspend) {
  // The gang first: lowering minMember before removing workers keeps the
  // survivors admissible; raising it before adding workers makes the
  // scheduler admit the new pods all together. A suspended job has no
  // PodGroup (the operator deletes it).
  if (!suspend) {
    absl::Status gang = PatchPodGroup(job, workers + job.masters);
    if (!gang.ok()) return gang;
  }
  const std::string path = ResourcePath(job.api, "pytorchjobs", job.ns, job.name);
  return PatchWithRetry(path, [&](const json& object) -> absl::StatusOr<json> {
    absl::StatusOr<JobInfo> current = ParsePyTorchJob(object);
    if (!current.ok()) return current.status();
    std::optional<uint32_t> new_workers;
    std::optional<bool> new_suspend;
    if (!suspend && current->workers != workers) new_workers = workers;
    if (current->suspended != suspend) new_suspend = suspend;
    if (!new_workers && !new_suspend) return json();
    return WorkerPatch(current->resource_version, new_workers, new_suspend);
  });
}

absl::Status Adapter::PatchPodGroup(const JobInfo& job, uint32_t min_member) {
  for (const ApiVersion& api : options_.podgroup_apis) {
    const std::string path = ResourcePath(api, "podgroups", job.ns, job.name);
    absl::Status status = PatchWithRetry(path, [&](const json& object) -> absl::StatusOr<json> {
      const json& current = At(object, {"spec", "minMember"});
      if (current.is_number_integer() && current.get<int64_t>() == min_member) return json();
      const json& rv = At(object, {"metadata", "resourceVersion"});
      return MinMemberPatch(rv.is_string() ? rv.get<std::string>() : "", min_member);
    });
    // No PodGroup of this flavour (or its CRD is not installed): try the next.
    if (status.code() == absl::StatusCode::kNotFound) continue;
    return status;
  }
  return absl::OkStatus();
}

absl::Status Adapter::PatchWithRetry(
    const std::string& path,
    const std::function<absl::StatusOr<json>(const json&)>& make_patch) {
  absl::Status last;
  for (int attempt = 0; attempt <= options_.max_conflict_retries; ++attempt) {
    absl::StatusOr<json> object = kube_->Get(path);
    if (!object.ok()) return object.status();
    absl::StatusOr<json> patch = make_patch(*object);
    if (!patch.ok()) return patch.status();
    if (patch->is_null()) return absl::OkStatus();  // already as wanted
    if (options_.dry_run) {
      std::string line = absl::StrCat("PATCH ", path, " ", kMergePatch, " ", patch->dump());
      spdlog::info("dry run: would send {}", line);
      if (options_.dry_run_out != nullptr) *options_.dry_run_out << line << std::endl;
      Emit({AdapterEvent::Kind::kDryRunPatch, "", 0, line});
      return absl::OkStatus();
    }
    absl::StatusOr<json> patched = kube_->Patch(path, kMergePatch, *patch);
    if (patched.ok()) return absl::OkStatus();
    if (patched.status().code() != absl::StatusCode::kAborted) return patched.status();
    // 409: someone else wrote the object since our GET; look again.
    spdlog::info("{}: conflict, re-reading and retrying", path);
    last = patched.status();
  }
  return last;
}

void Adapter::ReportApplied(const std::string& id, uint32_t replicas, bool suspended,
                            uint64_t generation) {
  v1::ReportAppliedRequest request;
  request.set_job_id(id);
  request.set_replicas(replicas);
  request.set_suspended(suspended);
  request.set_generation(generation);
  v1::ReportAppliedResponse response;
  grpc::Status status = recs_stub_->ReportApplied(NewContext().get(), request, &response);
  if (!status.ok()) {
    spdlog::warn("ReportApplied {} generation {}: {}", id, generation, status.error_message());
  }
}

}  // namespace rescale::adapter
