// Validation of job ids and job specs (see rescale/validation.h).
#include "rescale/validation.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "rescale/goodput.h"

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

absl::Status ValidateCapacityReport(const CapacityReport& report, const SpecLimits& limits) {
  // The usable GPUs are taken out of the allocatable ones: fewer allocatable
  // than usable is a report that cannot be true.
  if (report.allocatable_gpus != 0 && report.allocatable_gpus < report.total_gpus) {
    return Invalid(absl::StrFormat(
        "allocatable_gpus %d must be at least total_gpus (%d), the usable GPUs among them, or "
        "0 (not reported)",
        report.allocatable_gpus, report.total_gpus));
  }
  for (size_t i = 0; i < report.slots.size(); ++i) {
    const ReplicaSlots& s = report.slots[i];
    if (s.gpus_per_replica < 1 || s.gpus_per_replica > limits.max_gpus_per_replica) {
      return Invalid(absl::StrFormat("slots[%d].gpus_per_replica must be in [1, %d], got %d", i,
                                     limits.max_gpus_per_replica, s.gpus_per_replica));
    }
    for (size_t j = 0; j < i; ++j) {
      if (report.slots[j].gpus_per_replica == s.gpus_per_replica) {
        return Invalid(absl::StrFormat(
            "slots[%d].gpus_per_replica %d repeats slots[%d]: give each size class once", i,
            s.gpus_per_replica, j));
      }
    }
    // Replicas of one class can hold at most the GPUs there are.
    const uint64_t limit = report.total_gpus / s.gpus_per_replica;
    if (s.replicas > limit) {
      return Invalid(absl::StrFormat(
          "slots[%d].replicas %d of %d GPUs each exceeds the limit of %d (total_gpus %d / %d)", i,
          s.replicas, s.gpus_per_replica, limit, report.total_gpus, s.gpus_per_replica));
    }
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
