// Validation of job ids and job specs (see rescale/validation.h).
#include "rescale/validation.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <span>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "rescale/goodput.h"
#include "rescale/status_macros.h"

namespace rescale {
namespace {

// DNS-1123 subdomain: labels of [a-z0-9-] joined by '.', at most 253 chars.
bool IsDns1123Subdomain(std::string_view s) {
  if (s.empty() || s.size() > 253) return false;
  size_t start = 0;
  while (true) {
    size_t dot = s.find('.', start);
    std::string_view label = s.substr(start, dot == std::string_view::npos ? s.npos : dot - start);
    if (!IsDns1123Label(label)) return false;
    if (dot == std::string_view::npos) return true;
    start = dot + 1;
  }
}

absl::Status Invalid(std::string message) { return absl::InvalidArgumentError(std::move(message)); }

}  // namespace

absl::Status ValidateJobId(std::string_view job_id, std::string_view field) {
  if (job_id.empty()) {
    return Invalid(absl::StrCat(std::string(field), " is required (\"namespace/name\")"));
  }
  size_t slash = job_id.find('/');
  if (slash == std::string_view::npos || job_id.find('/', slash + 1) != std::string_view::npos) {
    return Invalid(absl::StrFormat("%s \"%s\" must be \"namespace/name\" with exactly one '/'",
                                   field, job_id));
  }
  std::string_view ns = job_id.substr(0, slash);
  std::string_view name = job_id.substr(slash + 1);
  if (!IsDns1123Label(ns)) {
    return Invalid(
        absl::StrFormat("%s \"%s\": namespace \"%s\" is not a DNS-1123 label (1-63 characters of "
                        "a-z, 0-9 and '-', starting and ending with a letter or digit)",
                        field, job_id, ns));
  }
  if (!IsDns1123Subdomain(name)) {
    return Invalid(absl::StrFormat(
        "%s \"%s\": name \"%s\" is not a DNS-1123 subdomain (at most 253 characters "
        "of a-z, 0-9, '-' and '.', each part starting and ending with a letter or digit)",
        field, job_id, name));
  }
  return absl::OkStatus();
}

namespace {

// The slots of a total (the cluster's, or one GPU type's): `field` names
// them in errors ("slots", "gpu_types[1].slots").
absl::Status ValidateSlots(std::span<const ReplicaSlots> slots, uint32_t total_gpus,
                           std::string_view field, std::string_view total_field,
                           const SpecLimits& limits) {
  for (size_t i = 0; i < slots.size(); ++i) {
    const ReplicaSlots& s = slots[i];
    if (s.gpus_per_replica < 1 || s.gpus_per_replica > limits.max_gpus_per_replica) {
      return Invalid(absl::StrFormat("%s[%d].gpus_per_replica must be in [1, %d], got %d", field, i,
                                     limits.max_gpus_per_replica, s.gpus_per_replica));
    }
    for (size_t j = 0; j < i; ++j) {
      if (slots[j].gpus_per_replica == s.gpus_per_replica) {
        return Invalid(
            absl::StrFormat("%s[%d].gpus_per_replica %d repeats %s[%d]: give each size class once",
                            field, i, s.gpus_per_replica, field, j));
      }
    }
    // Replicas of one class can hold at most the GPUs there are.
    const uint64_t limit = total_gpus / s.gpus_per_replica;
    if (s.replicas > limit) {
      return Invalid(absl::StrFormat(
          "%s[%d].replicas %d of %d GPUs each exceeds the limit of %d (%s %d / %d)", field, i,
          s.replicas, s.gpus_per_replica, limit, total_field, total_gpus, s.gpus_per_replica));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateCapacityReport(const CapacityReport& report, const SpecLimits& limits) {
  // The usable GPUs are taken out of the allocatable ones: fewer allocatable
  // than usable is a report that cannot be true.
  if (report.allocatable_gpus != 0 && report.allocatable_gpus < TotalGpus(report)) {
    return Invalid(absl::StrFormat(
        "allocatable_gpus %d must be at least total_gpus (%d), the usable GPUs among them, or "
        "0 (not reported)",
        report.allocatable_gpus, TotalGpus(report)));
  }
  if (report.gpu_types.empty())
    return ValidateSlots(report.slots, report.total_gpus, "slots", "total_gpus", limits);
  if (report.gpu_types.size() > kMaxGpuTypes) {
    return Invalid(absl::StrFormat("gpu_types has %d types; the limit is %d",
                                   report.gpu_types.size(), kMaxGpuTypes));
  }
  if (!report.slots.empty()) {
    return Invalid(
        "slots must be empty when gpu_types is set: give each type's slots in "
        "gpu_types[i].slots (a replica runs on one type)");
  }
  uint64_t sum = 0;
  for (size_t i = 0; i < report.gpu_types.size(); ++i) {
    const GpuType& type = report.gpu_types[i];
    const std::string field = absl::StrFormat("gpu_types[%d]", i);
    if (!IsGpuTypeName(type.name)) return Invalid(GpuTypeNameError(field + ".name", type.name));
    for (size_t j = 0; j < i; ++j) {
      if (report.gpu_types[j].name == type.name) {
        return Invalid(absl::StrFormat("%s.name \"%s\" repeats gpu_types[%d]: give each type once",
                                       field, type.name, j));
      }
    }
    if (type.gpus_per_node > limits.max_gpus_per_node) {
      return Invalid(absl::StrFormat("%s.gpus_per_node %d exceeds the limit of %d", field,
                                     type.gpus_per_node, limits.max_gpus_per_node));
    }
    RETURN_IF_ERROR(ValidateSlots(type.slots, type.total_gpus, field + ".slots",
                                  field + ".total_gpus", limits));
    sum += type.total_gpus;
  }
  if (sum > std::numeric_limits<uint32_t>::max()) {
    return Invalid(absl::StrFormat("gpu_types[*].total_gpus sum to %d, beyond the limit of %d", sum,
                                   std::numeric_limits<uint32_t>::max()));
  }
  if (report.total_gpus != 0 && report.total_gpus != sum) {
    return Invalid(
        absl::StrFormat("total_gpus %d must be 0 or the sum of gpu_types[*].total_gpus (%d)",
                        report.total_gpus, sum));
  }
  return absl::OkStatus();
}

absl::Status ValidateJobSpec(const JobSpec& spec, const SpecLimits& limits) {
  if (absl::Status s = ValidateJobId(spec.job_id, "spec.job_id"); !s.ok()) return s;
  if (spec.min_replicas < 1) {
    return Invalid(
        absl::StrFormat("spec.min_replicas must be at least 1, got %d", spec.min_replicas));
  }
  if (spec.max_replicas > limits.max_replicas) {
    return Invalid(absl::StrFormat("spec.max_replicas %d exceeds the limit of %d",
                                   spec.max_replicas, limits.max_replicas));
  }
  if (spec.min_replicas > spec.max_replicas) {
    return Invalid(absl::StrFormat("spec.min_replicas (%d) must not exceed spec.max_replicas (%d)",
                                   spec.min_replicas, spec.max_replicas));
  }
  if (spec.gpus_per_replica < 1 || spec.gpus_per_replica > limits.max_gpus_per_replica) {
    return Invalid(absl::StrFormat("spec.gpus_per_replica must be in [1, %d], got %d",
                                   limits.max_gpus_per_replica, spec.gpus_per_replica));
  }
  if (!std::isfinite(spec.restart_cost_seconds) || spec.restart_cost_seconds < 0 ||
      spec.restart_cost_seconds > limits.max_restart_cost_seconds) {
    return Invalid(absl::StrFormat("spec.restart_cost_seconds must be in [0, %g], got %g",
                                   limits.max_restart_cost_seconds, spec.restart_cost_seconds));
  }
  if (spec.local_batch_size > limits.max_local_batch_size) {
    return Invalid(absl::StrFormat("spec.local_batch_size %d exceeds the limit of %d",
                                   spec.local_batch_size, limits.max_local_batch_size));
  }
  if (spec.batch_scaling.has_value()) {
    const BatchLimits& batch = *spec.batch_scaling;
    if (absl::Status s = ValidateBatchLimits(batch); !s.ok()) return s;
    // Totals are sums over workers and accumulation steps: bounded so that
    // replicas x local x steps stays far from overflow anywhere.
    constexpr uint32_t kMaxTotalBatch = 1u << 30;
    if (batch.initial_batch > kMaxTotalBatch || batch.max_batch > kMaxTotalBatch) {
      return Invalid(absl::StrFormat(
          "spec.batch_scaling.%s %d exceeds the limit of %d",
          batch.initial_batch > kMaxTotalBatch ? "initial_batch_size" : "max_batch_size",
          std::max(batch.initial_batch, batch.max_batch), kMaxTotalBatch));
    }
    if (batch.max_local_batch > limits.max_local_batch_size) {
      return Invalid(
          absl::StrFormat("spec.batch_scaling.max_local_batch_size %d exceeds the limit "
                          "of %d",
                          batch.max_local_batch, limits.max_local_batch_size));
    }
    if (batch.min_local_batch > limits.max_local_batch_size) {
      return Invalid(
          absl::StrFormat("spec.batch_scaling.min_local_batch_size %d exceeds the limit "
                          "of %d",
                          batch.min_local_batch, limits.max_local_batch_size));
    }
  }
  if (!spec.queue.empty() && !IsDns1123Label(spec.queue)) {
    return Invalid(absl::StrFormat(
        "spec.queue \"%s\" is not a DNS-1123 label (1-63 characters of a-z, 0-9 and '-', "
        "starting and ending with a letter or digit); empty = the default queue",
        spec.queue));
  }
  if (!spec.admission.empty() && spec.admission != kAdmissionKueue) {
    return Invalid(absl::StrFormat(
        "spec.admission \"%s\" is not known: \"\" (rescaled admits the job) or \"%s\"",
        spec.admission, kAdmissionKueue));
  }
  if (spec.gpu_types.size() > kMaxGpuTypes) {
    return Invalid(absl::StrFormat("spec.gpu_types has %d types; the limit is %d",
                                   spec.gpu_types.size(), kMaxGpuTypes));
  }
  for (size_t i = 0; i < spec.gpu_types.size(); ++i) {
    const std::string field = absl::StrFormat("spec.gpu_types[%d]", i);
    if (!IsGpuTypeName(spec.gpu_types[i]))
      return Invalid(GpuTypeNameError(field, spec.gpu_types[i]));
    for (size_t j = 0; j < i; ++j) {
      if (spec.gpu_types[j] == spec.gpu_types[i]) {
        return Invalid(
            absl::StrFormat("%s \"%s\" repeats spec.gpu_types[%d]", field, spec.gpu_types[i], j));
      }
    }
  }
  if (spec.total_samples.has_value() && *spec.total_samples == 0) {
    return Invalid("spec.total_samples must be greater than 0 when set (unset = unknown), got 0");
  }
  if (spec.prior.size() > limits.max_prior_points) {
    return Invalid(absl::StrFormat("spec.prior has %d points; the limit is %d", spec.prior.size(),
                                   limits.max_prior_points));
  }
  for (size_t i = 0; i < spec.prior.size(); ++i) {
    const CurvePoint& p = spec.prior[i];
    if (p.replicas < 1 || p.replicas > spec.max_replicas) {
      return Invalid(
          absl::StrFormat("spec.prior[%d].replicas must be in [1, %d] (max_replicas), got %d", i,
                          spec.max_replicas, p.replicas));
    }
    if (!std::isfinite(p.samples_per_second) || p.samples_per_second <= 0) {
      return Invalid(absl::StrFormat(
          "spec.prior[%d].samples_per_second must be a positive finite number, got %g", i,
          p.samples_per_second));
    }
    for (size_t j = 0; j < i; ++j) {
      if (spec.prior[j].replicas == p.replicas) {
        return Invalid(
            absl::StrFormat("spec.prior[%d].replicas %d repeats spec.prior[%d]", i, p.replicas, j));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace rescale
