// Kubeflow Trainer v2 TrainJobs (trainer.kubeflow.org/v1alpha1, resource
// trainjobs) for rescale-adapter, and the one place that says which job
// kind an API version serves.
//
// What the adapter may do to a TrainJob is less than to a PyTorchJob. Per
// kubeflow/trainer pkg/apis/trainer/v1alpha1/trainjob_types.go:
//   - spec.suspend (*bool, default false) is patchable: the adapter suspends
//     and resumes TrainJobs for priorities and capacity;
//   - spec.trainer carries the rule `self == oldSelf` ("field is
//     immutable"), so spec.trainer.numNodes (*int32, optional) can never be
//     changed, not even while suspended, and the CRD has only the status
//     subresource (no scale). A TrainJob is registered with
//     min = max = numNodes (1 when unset) and never gets a numNodes patch;
//     every recommendation applied to one says so in its reason
//     (kNotResizableNote);
//   - GPUs per node are spec.trainer.resourcesPerNode (a
//     corev1.ResourceRequirements) limits["nvidia.com/gpu"], else requests;
//     unset when neither says (the runtime's template decides then);
//   - status.conditions of type Complete or Failed with status True mean
//     the job is over.
// Labels and rescale.io/* annotations are read as on a PyTorchJob.
#ifndef RESCALE_CLIENT_ADAPTER_TRAINJOB_H_
#define RESCALE_CLIENT_ADAPTER_TRAINJOB_H_

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "client/adapter/pytorchjob.h"

namespace rescale::adapter {

// Whether `api` serves TrainJobs (rather than PyTorchJobs).
bool IsTrainJobApi(const ApiVersion& api);
// The job resource an API version serves: "trainjobs" or "pytorchjobs".
std::string JobResource(const ApiVersion& api);

// Decodes a TrainJob. INVALID_ARGUMENT names the object and the field (a
// numNodes that is not a positive integer, a GPU quantity that is not
// whole, an annotation that does not parse).
absl::StatusOr<JobInfo> ParseTrainJob(const nlohmann::json& object);

// Decodes a job object of the kind `api` serves (ParseTrainJob or
// ParsePyTorchJob).
absl::StatusOr<JobInfo> ParseJob(const ApiVersion& api, const nlohmann::json& object);

// The merge patch that sets a TrainJob's spec.suspend, guarded by
// `resource_version`, with `annotations` in the same patch. There is no
// way to ask it for numNodes: the API server refuses any change of
// spec.trainer.
nlohmann::json TrainJobSuspendPatch(const std::string& resource_version, bool suspend,
                                    const std::map<std::string, std::string>& annotations = {});

}  // namespace rescale::adapter

#endif  // RESCALE_CLIENT_ADAPTER_TRAINJOB_H_
