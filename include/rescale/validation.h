// Validation of user input that reaches the core: job ids and job specs.
//
// Every error is INVALID_ARGUMENT with a message that names the field, the
// value given and the limit, so a user can fix the request without reading
// our source.
#ifndef RESCALE_VALIDATION_H_
#define RESCALE_VALIDATION_H_

#include <cstdint>
#include <string_view>

#include "absl/status/status.h"
#include "rescale/names.h"
#include "rescale/types.h"

namespace rescale {

// Upper bounds on a spec; beyond them a value is a typo, not a real job.
struct SpecLimits {
  uint32_t max_replicas = 100'000;
  uint32_t max_gpus_per_replica = 64;
  double max_restart_cost_seconds = 86'400;
  uint32_t max_local_batch_size = 1u << 24;
  size_t max_prior_points = 256;
  uint32_t max_gpus_per_node = 1024;
};

// OK when `job_id` is "namespace/name" with both parts DNS-1123 labels
// (name may be up to 253 chars of a DNS-1123 subdomain, as Kubernetes object
// names are). `field` names the field in the error, e.g. "spec.job_id".
absl::Status ValidateJobId(std::string_view job_id, std::string_view field = "job_id");

// Checks every field of a spec whose defaults have been applied.
absl::Status ValidateJobSpec(const JobSpec& spec, const SpecLimits& limits = {});

// Checks a capacity report (SetCapacity): every slot class in [1,
// max_gpus_per_replica], no class twice, and no class claiming more GPUs
// than the total (slots[i].replicas x slots[i].gpus_per_replica <=
// total_gpus), and allocatable_gpus, when reported (not 0), at least
// total_gpus. Errors name the field (slots[i].replicas, allocatable_gpus)
// and the limit. With gpu_types: at most kMaxGpuTypes, each named
// (IsGpuTypeName) once, its slots checked against its own total, the
// top-level slots empty and total_gpus 0 or the types' sum.
absl::Status ValidateCapacityReport(const CapacityReport& report, const SpecLimits& limits = {});

}  // namespace rescale

#endif  // RESCALE_VALIDATION_H_
