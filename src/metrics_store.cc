// MetricsStore: validation of samples and per-size aggregation (see header).
#include "rescale/metrics_store.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"

namespace rescale {

MetricsStore::MetricsStore(MetricsStoreOptions options) : options_(options) {}

void MetricsStore::AddJob(const std::string& job_id, uint32_t max_replicas,
                          uint32_t local_batch_size) {
  absl::MutexLock lock(&mu_);
  JobData& job = jobs_[job_id];
  job.max_replicas = max_replicas;
  job.local_batch_size = local_batch_size;
}

void MetricsStore::RemoveJob(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  jobs_.erase(job_id);
}

std::string MetricsStore::RejectReason(const StepSample& s, const JobData* job,
                                       absl::Time now) const {
  if (s.job_id.empty()) return "job_id is empty (set it on the sample or the batch)";
  if (job == nullptr) {
    return absl::StrFormat("job_id \"%s\" is not registered (NOT_FOUND)", s.job_id);
  }
  if (s.pod.empty()) return "pod is empty (set it on the sample or the batch)";
  if (s.pod.size() > options_.max_pod_name_length) {
    return absl::StrFormat("pod name has %d characters; the limit is %d", s.pod.size(),
                           options_.max_pod_name_length);
  }
  if (!std::isfinite(s.step_seconds) || s.step_seconds <= 0) {
    return absl::StrFormat("step_seconds must be a positive finite number, got %g",
                           s.step_seconds);
  }
  if (s.step_seconds < options_.min_step_seconds || s.step_seconds > options_.max_step_seconds) {
    return absl::StrFormat("step_seconds %g is outside the plausible range [%g, %g]",
                           s.step_seconds, options_.min_step_seconds, options_.max_step_seconds);
  }
  if (s.world_size == 0) return "world_size must be at least 1 (set it on the sample or the batch)";
  if (s.world_size > job->max_replicas) {
    return absl::StrFormat("world_size %d exceeds the job's max_replicas %d", s.world_size,
                           job->max_replicas);
  }
  if (s.batch_size == 0 && job->local_batch_size == 0) {
    return "batch_size is 0 and the job has no local_batch_size to default to";
  }
  if (s.timestamp_unix_nanos != 0) {
    absl::Time at = absl::FromUnixNanos(s.timestamp_unix_nanos);
    if (at > now + options_.max_future_skew) {
      return absl::StrFormat("timestamp_unix_nanos is %s in the future; the limit is %s",
                             absl::FormatDuration(at - now),
                             absl::FormatDuration(options_.max_future_skew));
    }
    if (at < now - options_.max_sample_age) {
      return absl::StrFormat("timestamp_unix_nanos is %s old; the limit is %s",
                             absl::FormatDuration(now - at),
                             absl::FormatDuration(options_.max_sample_age));
    }
  }
  return "";
}

IngestResult MetricsStore::Ingest(std::span<const StepSample> samples, absl::Time now) {
  IngestResult result;
  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < samples.size(); ++i) {
    const StepSample& s = samples[i];
    auto it = jobs_.find(s.job_id);
    JobData* job = it == jobs_.end() ? nullptr : &it->second;
    std::string reason = RejectReason(s, job, now);
    if (!reason.empty()) {
      result.Reject(static_cast<uint32_t>(i), std::move(reason));
      continue;
    }
    SizeAccumulator& acc = job->sizes[s.world_size];
    ++acc.count;
    acc.step_seconds_sum += s.step_seconds;
    acc.batch_sum += s.batch_size != 0 ? s.batch_size : job->local_batch_size;
    absl::Time at = s.timestamp_unix_nanos == 0 ? now : absl::FromUnixNanos(s.timestamp_unix_nanos);
    acc.last_sample_at = std::max(acc.last_sample_at, at);
    ++job->accepted;
    ++result.accepted;
  }
  return result;
}

std::vector<SizeStats> MetricsStore::Stats(const std::string& job_id) const {
  std::vector<SizeStats> out;
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return out;
  for (const auto& [size, acc] : it->second.sizes) {
    SizeStats stats;
    stats.world_size = size;
    stats.sample_count = acc.count;
    stats.mean_step_seconds = acc.step_seconds_sum / static_cast<double>(acc.count);
    stats.samples_per_second = size * (acc.batch_sum / acc.count) / stats.mean_step_seconds;
    stats.last_sample_at = acc.last_sample_at;
    out.push_back(stats);
  }
  std::sort(out.begin(), out.end(),
            [](const SizeStats& a, const SizeStats& b) { return a.world_size < b.world_size; });
  return out;
}

uint64_t MetricsStore::SamplesAccepted(const std::string& job_id) const {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  return it == jobs_.end() ? 0 : it->second.accepted;
}

}  // namespace rescale
