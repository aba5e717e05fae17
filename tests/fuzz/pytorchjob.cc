// Fuzz target: rescale-adapter's reading of PyTorchJob and TrainJob objects
// (client/adapter/pytorchjob.h ParsePyTorchJob, trainjob.h ParseTrainJob),
// the text it writes into annotations and Event notes (SanitizeText: valid
// UTF-8 within its limit, so the patch's JSON can always be written), then
// the JobSpec it
// registers (ToJobSpec) as rescaled would see it (server/convert.h FromProto,
// rescale/validation.h). Job objects, their annotations above all, are
// written by the users whose jobs the adapter manages.
//
// Invariants checked: a job that parses has min_replicas <= max_replicas,
// ClampReplicas stays within them, and its JobSpec is either valid or
// rejected with INVALID_ARGUMENT (the adapter then reports the error on the
// job) -- never a crash.
#include "client/adapter/pytorchjob.h"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "absl/status/status.h"
#include "client/adapter/trainjob.h"
#include "rescale/validation.h"
#include "server/convert.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::string clean = rescale::adapter::SanitizeText(text, 1024);
  if (clean.size() > 1024) std::abort();
  (void)nlohmann::json(clean).dump();  // throws (a crash) on invalid UTF-8

  // The adapter gets objects from the API server as JSON.
  const nlohmann::json object = nlohmann::json::parse(data, data + size, /*cb=*/nullptr,
                                                      /*allow_exceptions=*/false);
  if (object.is_discarded()) return 0;

  (void)rescale::adapter::NodeGpus(object);
  absl::StatusOr<rescale::adapter::JobInfo> train = rescale::adapter::ParseTrainJob(object);
  if (train.ok() && (train->resizable || train->min_replicas != train->max_replicas)) std::abort();
  absl::StatusOr<rescale::adapter::JobInfo> job = rescale::adapter::ParsePyTorchJob(object);
  if (!job.ok()) return 0;
  if (job->min_replicas > job->max_replicas) std::abort();
  for (uint32_t recommended : {0u, 1u, job->workers, job->max_replicas + 1, 0xffffffffu}) {
    bool clamped = false;
    const uint32_t replicas = rescale::adapter::ClampReplicas(*job, recommended, &clamped);
    if (replicas < job->min_replicas || replicas > job->max_replicas) std::abort();
    if (clamped != (replicas != recommended)) std::abort();
  }
  (void)rescale::adapter::WorkerPatch(job->resource_version, job->workers, job->suspended).dump();

  const rescale::v1::JobSpec proto = rescale::adapter::ToJobSpec(*job);
  const absl::Status valid = rescale::ValidateJobSpec(rescale::server::FromProto(proto));
  if (!valid.ok() && valid.code() != absl::StatusCode::kInvalidArgument) std::abort();
  return 0;
}
