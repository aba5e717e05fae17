// PyTorchJob parsing, the merge patches and the small mappings (see
// client/adapter/pytorchjob.h).
#include "client/adapter/pytorchjob.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "rescale/names.h"

namespace rescale::adapter {
namespace {

using json = nlohmann::json;

}  // namespace

const json& FieldAt(const json& object, std::initializer_list<const char*> keys) {
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

namespace {

absl::StatusOr<uint32_t> NonNegative(const json& value, const std::string& where) {
  if (value.is_number_integer() && value.get<int64_t>() >= 0 &&
      value.get<int64_t>() <= int64_t{UINT32_MAX}) {
    return static_cast<uint32_t>(value.get<int64_t>());
  }
  return absl::InvalidArgumentError(
      absl::StrCat(where, " must be a non-negative integer, got ", value.dump()));
}

}  // namespace

std::optional<uint32_t> WholeQuantity(const json& value) {
  if (value.is_number_integer() && value.get<int64_t>() >= 0) {
    return static_cast<uint32_t>(value.get<int64_t>());
  }
  uint32_t parsed = 0;
  if (value.is_string() && absl::SimpleAtoi(value.get<std::string>(), &parsed)) return parsed;
  return std::nullopt;
}

std::string DescribeJob(const ApiVersion& api, const std::string& id) {
  const char* kind = api.group == kTrainerV1alpha1.group ? "TrainJob " : "PyTorchJob ";
  return absl::StrCat(kind, id, " (", api.group, "/", api.version, ")");
}

std::string ResourcePath(const ApiVersion& api, const std::string& resource, const std::string& ns,
                         const std::string& name) {
  std::string path = api.group.empty() ? absl::StrCat("/api/", api.version)
                                       : absl::StrCat("/apis/", api.group, "/", api.version);
  if (!ns.empty()) absl::StrAppend(&path, "/namespaces/", ns);
  absl::StrAppend(&path, "/", resource);
  if (!name.empty()) absl::StrAppend(&path, "/", name);
  return path;
}

absl::Status ReadJobMetadata(const json& object, const char* kind, JobInfo* job) {
  job->kind = kind;
  const json& metadata = FieldAt(object, {"metadata"});
  if (!FieldAt(metadata, {"name"}).is_string() || !FieldAt(metadata, {"namespace"}).is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat(kind, " without metadata.name or metadata.namespace"));
  }
  job->name = metadata["name"].get<std::string>();
  job->ns = metadata["namespace"].get<std::string>();
  job->id = absl::StrCat(job->ns, "/", job->name);
  const json& api_version = FieldAt(object, {"apiVersion"});
  if (api_version.is_string()) {
    std::string text = api_version.get<std::string>();
    size_t slash = text.find('/');
    if (slash != std::string::npos) job->api = {text.substr(0, slash), text.substr(slash + 1)};
  }
  if (FieldAt(metadata, {"resourceVersion"}).is_string()) {
    job->resource_version = metadata["resourceVersion"].get<std::string>();
  }
  if (FieldAt(metadata, {"uid"}).is_string()) job->uid = metadata["uid"].get<std::string>();
  // Kueue reads its queue from this label only (jobframework's
  // QueueNameForObject).
  if (const json& queue = FieldAt(metadata, {"labels", "kueue.x-k8s.io/queue-name"});
      queue.is_string()) {
    job->kueue_local_queue = queue.get<std::string>();
  }
  return absl::OkStatus();
}

absl::StatusOr<JobInfo> ParsePyTorchJob(const json& object) {
  JobInfo job;
  if (absl::Status read = ReadJobMetadata(object, "PyTorchJob", &job); !read.ok()) return read;
  const std::string what = DescribeJob(job.api, job.id);

  const json& spec = FieldAt(object, {"spec"});
  const json& worker = FieldAt(spec, {"pytorchReplicaSpecs", "Worker"});
  if (!worker.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": spec.pytorchReplicaSpecs.Worker is missing"));
  }
  // The operators default a missing replicas to 1.
  job.workers = 1;
  if (!FieldAt(worker, {"replicas"}).is_null()) {
    absl::StatusOr<uint32_t> workers =
        NonNegative(worker["replicas"], what + ": spec.pytorchReplicaSpecs.Worker.replicas");
    if (!workers.ok()) return workers.status();
    job.workers = *workers;
  }
  const json& master = FieldAt(spec, {"pytorchReplicaSpecs", "Master"});
  if (master.is_object()) {
    job.masters = 1;
    if (!FieldAt(master, {"replicas"}).is_null()) {
      absl::StatusOr<uint32_t> masters =
          NonNegative(master["replicas"], what + ": spec.pytorchReplicaSpecs.Master.replicas");
      if (!masters.ok()) return masters.status();
      job.masters = *masters;
    }
    // Whether rank 0 trains on a GPU: then it goes where the Workers go
    // (a limit that is not a whole number counts as asking).
    const json& master_containers = FieldAt(master, {"template", "spec", "containers"});
    if (master_containers.is_array()) {
      for (const json& container : master_containers) {
        const json& limit = FieldAt(container, {"resources", "limits", kGpuResource});
        if (!limit.is_null() && WholeQuantity(limit).value_or(1) > 0) job.master_gpus = true;
      }
    }
  }
  const json& suspend = FieldAt(spec, {"runPolicy", "suspend"});
  job.suspended = suspend.is_boolean() && suspend.get<bool>();

  const json& elastic = FieldAt(spec, {"elasticPolicy"});
  std::optional<uint32_t> min_replicas;
  std::optional<uint32_t> max_replicas;
  if (!FieldAt(elastic, {"minReplicas"}).is_null()) {
    absl::StatusOr<uint32_t> value =
        NonNegative(elastic["minReplicas"], what + ": spec.elasticPolicy.minReplicas");
    if (!value.ok()) return value.status();
    min_replicas = *value;
  }
  if (!FieldAt(elastic, {"maxReplicas"}).is_null()) {
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
    return absl::InvalidArgumentError(absl::StrCat(what, ": spec.elasticPolicy.minReplicas (",
                                                   job.min_replicas, ") exceeds maxReplicas (",
                                                   job.max_replicas, ")"));
  }
  const json& metrics = FieldAt(elastic, {"metrics"});
  job.operator_hpa = !metrics.is_null() && !(metrics.is_array() && metrics.empty());

  uint32_t gpus = 0;
  bool has_gpu_limit = false;
  const json& containers = FieldAt(worker, {"template", "spec", "containers"});
  if (containers.is_array()) {
    for (const json& container : containers) {
      const json& limit = FieldAt(container, {"resources", "limits", kGpuResource});
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
  job.tolerations = ParseTolerations(FieldAt(worker, {"template", "spec"}));
  // A value rescaled would refuse as a type name (the API server accepts
  // any string in a nodeSelector) is no type of ours.
  if (const json& product = FieldAt(worker, {"template", "spec", "nodeSelector", kGpuProductLabel});
      product.is_string() && IsGpuTypeName(product.get<std::string>())) {
    job.gpu_type = product.get<std::string>();
  }
  // The training operator's JobSuspended condition (kubeflow/training-
  // operator pkg/apis/kubeflow.org/v1 common_types.go: JobConditionType
  // "Suspended"), set once it has deleted a suspended job's pods.
  job.operator_suspended = ConditionTrue(object, {"Suspended"});

  if (absl::Status read = ReadRescaleAnnotations(object, &job); !read.ok()) return read;
  job.finished = ConditionTrue(object, {"Succeeded", "Failed"});
  return job;
}

absl::Status ReadRescaleAnnotations(const json& object, JobInfo* job) {
  const std::string what = DescribeJob(job->api, job->id);
  const json& annotations = FieldAt(object, {"metadata", "annotations"});
  auto annotation = [&](const char* key) -> std::optional<std::string> {
    const json& value = FieldAt(annotations, {key});
    if (value.is_string()) return value.get<std::string>();
    return std::nullopt;
  };
  auto bad = [&](const char* key, const std::string& value, const char* expected) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": annotation ", key, "=\"", value, "\" is not ", expected));
  };
  if (auto value = annotation(kPriorityAnnotation)) {
    if (!absl::SimpleAtoi(*value, &job->priority))
      return bad(kPriorityAnnotation, *value, "an integer");
  }
  if (auto value = annotation(kRestartCostAnnotation)) {
    double seconds = 0;
    if (!absl::SimpleAtod(*value, &seconds) || !std::isfinite(seconds) || seconds < 0) {
      return bad(kRestartCostAnnotation, *value, "a non-negative number of seconds");
    }
    job->restart_cost_seconds = seconds;
  }
  if (auto value = annotation(kPreemptibleAnnotation)) {
    bool preemptible = false;
    if (!absl::SimpleAtob(*value, &preemptible))
      return bad(kPreemptibleAnnotation, *value, "true or false");
    job->preemptible = preemptible;
  }
  if (auto value = annotation(kLocalBatchSizeAnnotation)) {
    if (!absl::SimpleAtoi(*value, &job->local_batch_size)) {
      return bad(kLocalBatchSizeAnnotation, *value, "a non-negative integer");
    }
  }
  if (auto value = annotation(kPolicyAnnotation)) job->policy = *value;
  if (auto value = annotation(kGpuTypesAnnotation)) {
    job->gpu_types.clear();
    for (absl::string_view name : absl::StrSplit(*value, ',', absl::SkipWhitespace())) {
      const std::string type(absl::StripAsciiWhitespace(name));
      if (!IsGpuTypeName(type)) {
        return bad(kGpuTypesAnnotation, *value,
                   "a comma-separated list of GPU types (nvidia.com/gpu.product label values)");
      }
      if (std::find(job->gpu_types.begin(), job->gpu_types.end(), type) != job->gpu_types.end())
        continue;  // rescaled refuses a type listed twice
      if (job->gpu_types.size() == kMaxGpuTypes) {
        return bad(kGpuTypesAnnotation, *value,
                   absl::StrCat("a list of at most ", kMaxGpuTypes, " GPU types").c_str());
      }
      job->gpu_types.push_back(type);
    }
  }
  if (auto value = annotation(kResumeAfterMoveAnnotation)) job->resume_after_move = *value;
  if (auto value = annotation(kSelectedGpuTypeAnnotation)) job->selected_gpu_type = *value;
  if (auto value = annotation(kQueueAnnotation)) {
    if (!IsDns1123Label(*value)) return bad(kQueueAnnotation, *value, "a DNS-1123 label");
    job->queue = *value;
  }
  if (annotations.is_object()) {
    for (const auto& [key, value] : annotations.items()) {
      if (absl::StartsWith(key, kParameterAnnotationPrefix) && value.is_string()) {
        job->parameters[key.substr(sizeof(kParameterAnnotationPrefix) - 1)] =
            value.get<std::string>();
      }
    }
  }

  return absl::OkStatus();
}

bool ConditionTrue(const json& object, std::initializer_list<const char*> types) {
  const json& conditions = FieldAt(object, {"status", "conditions"});
  if (!conditions.is_array()) return false;
  for (const json& condition : conditions) {
    const json& type = FieldAt(condition, {"type"});
    const json& status = FieldAt(condition, {"status"});
    if (!type.is_string() || !status.is_string() || status.get<std::string>() != "True") continue;
    for (const char* wanted : types) {
      if (type.get<std::string>() == wanted) return true;
    }
  }
  return false;
}

json WorkerPatch(const std::string& resource_version, std::optional<uint32_t> workers,
                 std::optional<bool> suspend,
                 const std::map<std::string, std::string>& annotations) {
  json patch = {{"metadata", {{"resourceVersion", resource_version}}}};
  // A merge patch merges maps key by key: the job's other annotations stay.
  for (const auto& [key, value] : annotations) patch["metadata"]["annotations"][key] = value;
  if (workers) patch["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = *workers;
  if (suspend) patch["spec"]["runPolicy"]["suspend"] = *suspend;
  return patch;
}

std::string GpuTypeToWrite(const JobInfo& job, const v1::Recommendation& recommendation) {
  if (!job.resizable || job.kueue_managed()) return "";
  return recommendation.gpu_type();
}

json WithWorkerGpuType(json patch, const std::string& gpu_type, bool master) {
  auto select = [&](const char* replica) {
    patch["spec"]["pytorchReplicaSpecs"][replica]["template"]["spec"]["nodeSelector"]
         [kGpuProductLabel] = gpu_type;
  };
  select("Worker");
  if (master) select("Master");
  patch["metadata"]["annotations"][kSelectedGpuTypeAnnotation] = gpu_type;
  return patch;
}

json WithoutWorkerGpuType(json patch, bool master) {
  auto unselect = [&](const char* replica) {
    patch["spec"]["pytorchReplicaSpecs"][replica]["template"]["spec"]["nodeSelector"]
         [kGpuProductLabel] = nullptr;
  };
  unselect("Worker");
  if (master) unselect("Master");
  patch["metadata"]["annotations"][kSelectedGpuTypeAnnotation] = nullptr;
  return patch;
}

std::map<std::string, std::string> RecommendationAnnotations(
    const v1::Recommendation& recommendation, const std::string& reason) {
  std::map<std::string, std::string> annotations = {
      {kRecommendedReplicasAnnotation,
       std::to_string(recommendation.suspend() ? 0 : recommendation.replicas())},
      {kGenerationAnnotation, std::to_string(recommendation.generation())},
      {kReasonAnnotation, SanitizeText(reason, kMaxReasonAnnotationBytes)}};
  if (recommendation.has_local_batch_size()) {
    annotations[kLocalBatchSizeAnnotation] = std::to_string(recommendation.local_batch_size());
    // Written with the batch even when 0: a stale value from an earlier
    // batch would otherwise make the workers accumulate.
    annotations[kAccumulationStepsAnnotation] = std::to_string(recommendation.accumulation_steps());
  }
  return annotations;
}

namespace {

// Length of the valid UTF-8 sequence at text[i], or 0 when it is not one
// (overlong forms, surrogates and code points above U+10FFFF included).
size_t Utf8SequenceLength(const std::string& text, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char lead = byte(i);
  if (lead < 0x80) return 1;
  size_t length = 0;
  uint32_t code_point = 0;
  if ((lead & 0xE0) == 0xC0) {
    length = 2;
    code_point = lead & 0x1F;
  } else if ((lead & 0xF0) == 0xE0) {
    length = 3;
    code_point = lead & 0x0F;
  } else if ((lead & 0xF8) == 0xF0) {
    length = 4;
    code_point = lead & 0x07;
  } else {
    return 0;
  }
  if (i + length > text.size()) return 0;
  for (size_t k = 1; k < length; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
    code_point = (code_point << 6) | (byte(i + k) & 0x3F);
  }
  static constexpr uint32_t kSmallest[] = {0, 0, 0x80, 0x800, 0x10000};
  if (code_point < kSmallest[length] || code_point > 0x10FFFF ||
      (code_point >= 0xD800 && code_point <= 0xDFFF)) {
    return 0;
  }
  return length;
}

}  // namespace

std::string SanitizeText(const std::string& text, size_t max_bytes) {
  static constexpr char kReplacement[] = "\xEF\xBF\xBD";  // U+FFFD
  static constexpr char kEllipsis[] = "...";
  std::string out;
  out.reserve(std::min(text.size(), max_bytes));
  // Where `out` was last at a character boundary with room for the
  // ellipsis: a text that turns out too long is cut back to there.
  size_t cut = 0;
  for (size_t i = 0; i < text.size();) {
    const size_t length = Utf8SequenceLength(text, i);
    std::string piece;
    if (length == 0) {
      piece = kReplacement;
      i += 1;
    } else if (length == 1 && (static_cast<unsigned char>(text[i]) < 0x20 || text[i] == 0x7F) &&
               text[i] != '\t') {
      piece = " ";
      i += 1;
    } else {
      piece = text.substr(i, length);
      i += length;
    }
    if (out.size() + piece.size() + sizeof(kEllipsis) - 1 <= max_bytes)
      cut = out.size() + piece.size();
    if (out.size() + piece.size() > max_bytes) {
      out.resize(cut);
      if (cut + sizeof(kEllipsis) - 1 <= max_bytes) out += kEllipsis;
      return out;
    }
    out += piece;
  }
  return out;
}

std::string AppliedReason(const JobInfo& job, const v1::Recommendation& recommendation,
                          uint32_t written_replicas) {
  std::string reason = recommendation.reason();
  auto append = [&](const std::string& note) {
    if (!reason.empty()) reason += "; ";
    reason += note;
  };
  if (!recommendation.suspend() && written_replicas != recommendation.replicas() && job.resizable) {
    append(absl::StrCat("replicas clamped to ", written_replicas, " (the job allows ",
                        job.min_replicas, "..", job.max_replicas, ")"));
  }
  if (!job.resizable) append(kNotResizableNote);
  if (job.kueue_managed() && job.suspended && !recommendation.suspend()) {
    append(absl::StrCat("waits for Kueue to admit the job (LocalQueue ", job.kueue_local_queue,
                        "): Kueue alone resumes it"));
  } else if (job.kueue_managed() && !job.suspended && recommendation.suspend()) {
    append("left running: Kueue owns suspend and preemption of the job");
  }
  return reason;
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
  spec.set_queue(job.queue);
  for (const std::string& type : job.gpu_types) spec.add_gpu_types(type);
  if (job.kueue_managed()) spec.set_admission("kueue");
  return spec;
}

uint32_t NodeGpus(const json& node) {
  const json& value = FieldAt(node, {"status", "allocatable", kGpuResource});
  if (value.is_null()) return 0;
  return WholeQuantity(value).value_or(0);
}

}  // namespace rescale::adapter
