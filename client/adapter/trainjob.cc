// TrainJob parsing and its suspend patch, and the job kind of an API
// version (see client/adapter/trainjob.h for what a TrainJob allows).
#include "client/adapter/trainjob.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "rescale/names.h"

namespace rescale::adapter {

using json = nlohmann::json;

bool IsTrainJobApi(const ApiVersion& api) { return api.group == kTrainerV1alpha1.group; }

std::string JobResource(const ApiVersion& api) {
  return IsTrainJobApi(api) ? "trainjobs" : "pytorchjobs";
}

absl::StatusOr<JobInfo> ParseTrainJob(const json& object) {
  JobInfo job;
  if (absl::Status read = ReadJobMetadata(object, "TrainJob", &job); !read.ok()) return read;
  if (job.api.group.empty()) job.api = kTrainerV1alpha1;
  const std::string what = DescribeJob(job.api, job.id);
  job.resizable = false;

  const json& trainer = FieldAt(object, {"spec", "trainer"});
  // numNodes is optional; Trainer's runtimes default it to 1 node.
  job.workers = 1;
  const json& num_nodes = FieldAt(trainer, {"numNodes"});
  if (!num_nodes.is_null()) {
    if (!num_nodes.is_number_integer() || num_nodes.get<int64_t>() < 1 ||
        num_nodes.get<int64_t>() > int64_t{INT32_MAX}) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": spec.trainer.numNodes must be a positive integer, got ", num_nodes.dump()));
    }
    job.workers = static_cast<uint32_t>(num_nodes.get<int64_t>());
  }
  // Immutable, so the only sizes rescaled may choose are this one or none.
  job.min_replicas = job.workers;
  job.max_replicas = job.workers;

  const json& suspend = FieldAt(object, {"spec", "suspend"});
  job.suspended = suspend.is_boolean() && suspend.get<bool>();

  // Per node, as resourcesPerNode is: limits win, else requests (for
  // extended resources such as GPUs the API server requires them equal).
  for (const char* kind : {"limits", "requests"}) {
    const json& quantity = FieldAt(trainer, {"resourcesPerNode", kind, kGpuResource});
    if (quantity.is_null()) continue;
    std::optional<uint32_t> gpus = WholeQuantity(quantity);
    if (!gpus) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": spec.trainer.resourcesPerNode.", kind,
                                                     "[\"nvidia.com/gpu\"] is not a whole "
                                                     "number: ",
                                                     quantity.dump()));
    }
    job.gpus_per_replica = *gpus;
    break;
  }

  // The trainer's nodes run as the runtime's replicated job "node"; a
  // TrainJob adds tolerations to it through spec.podSpecOverrides (those
  // of the runtime itself are not read).
  const json& overrides = FieldAt(object, {"spec", "podSpecOverrides"});
  if (overrides.is_array()) {
    for (const json& override_entry : overrides) {
      const json& targets = FieldAt(override_entry, {"targetJobs"});
      if (!targets.is_array()) continue;
      const bool for_nodes = std::any_of(targets.begin(), targets.end(), [](const json& target) {
        const json& name = FieldAt(target, {"name"});
        return name.is_string() && name.get<std::string>() == "node";
      });
      if (!for_nodes) continue;
      std::vector<Toleration> more = ParseTolerations(override_entry);
      job.tolerations.insert(job.tolerations.end(), more.begin(), more.end());
      const json& product = FieldAt(override_entry, {"nodeSelector", kGpuProductLabel});
      if (product.is_string() && IsGpuTypeName(product.get<std::string>()))
        job.gpu_type = product.get<std::string>();
    }
  }

  if (absl::Status read = ReadRescaleAnnotations(object, &job); !read.ok()) return read;
  // The adapter cannot move a TrainJob (it would have to rewrite
  // podSpecOverrides, and the JobSet's pods): one pinned to a type stays.
  if (job.gpu_types.empty() && !job.gpu_type.empty()) job.gpu_types = {job.gpu_type};
  job.finished = ConditionTrue(object, {"Complete", "Failed"});
  return job;
}

absl::StatusOr<JobInfo> ParseJob(const ApiVersion& api, const json& object) {
  return IsTrainJobApi(api) ? ParseTrainJob(object) : ParsePyTorchJob(object);
}

json TrainJobSuspendPatch(const std::string& resource_version, bool suspend,
                          const std::map<std::string, std::string>& annotations) {
  json patch = {{"metadata", {{"resourceVersion", resource_version}}},
                {"spec", {{"suspend", suspend}}}};
  for (const auto& [key, value] : annotations) patch["metadata"]["annotations"][key] = value;
  return patch;
}

}  // namespace rescale::adapter
