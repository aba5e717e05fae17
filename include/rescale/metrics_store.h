// MetricsStore: per-job, per-size step-time statistics built from samples.
//
// The store knows the jobs it may accept samples for (AddJob/RemoveJob) and
// validates every sample against them, returning a reason for each one it
// rejects. Readers get per-size aggregates: count, mean step time and the
// derived job throughput (samples/s of the whole gang).
//
// Thread safety: all methods are safe to call concurrently. This first
// version serialises on one mutex; the lock-free ingest path replaces it
// without changing the interface.
#ifndef RESCALE_METRICS_STORE_H_
#define RESCALE_METRICS_STORE_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "rescale/types.h"

namespace rescale {

struct MetricsStoreOptions {
  // Samples older than this (relative to ingest time) are rejected.
  absl::Duration max_sample_age = absl::Minutes(10);
  // Samples stamped further than this in the future are rejected (clock skew).
  absl::Duration max_future_skew = absl::Minutes(1);
  // Plausible step_seconds; outside is a unit error or a broken reporter.
  double min_step_seconds = 1e-6;
  double max_step_seconds = 3600;
  // Pod names longer than this are rejected (Kubernetes names are <= 253).
  size_t max_pod_name_length = 253;
};

// Aggregate of the samples measured at one world size.
struct SizeStats {
  uint32_t world_size = 0;
  uint64_t sample_count = 0;
  double mean_step_seconds = 0;
  // world_size x mean samples per pod-step / mean step time.
  double samples_per_second = 0;
  absl::Time last_sample_at = absl::InfinitePast();
};

class MetricsStore {
 public:
  explicit MetricsStore(MetricsStoreOptions options = {});

  // Starts (or, for a known job, updates the limits of) accepting samples for
  // `job_id`. Data already held for the job is kept.
  void AddJob(const std::string& job_id, uint32_t max_replicas, uint32_t local_batch_size);
  // Forgets the job and all its data.
  void RemoveJob(const std::string& job_id);

  // Validates and stores samples; `now` stamps samples with timestamp 0 and
  // bounds their age. Never fails as a whole: each sample is accepted or
  // rejected with a reason naming the field and the limit.
  IngestResult Ingest(std::span<const StepSample> samples, absl::Time now);

  // Per-size statistics of a job, ordered by world size. Empty if unknown.
  std::vector<SizeStats> Stats(const std::string& job_id) const;
  // Samples accepted for the job since AddJob (0 if unknown).
  uint64_t SamplesAccepted(const std::string& job_id) const;

 private:
  struct SizeAccumulator {
    uint64_t count = 0;
    double step_seconds_sum = 0;
    double batch_sum = 0;
    absl::Time last_sample_at = absl::InfinitePast();
  };
  struct JobData {
    uint32_t max_replicas = 0;
    uint32_t local_batch_size = 0;
    uint64_t accepted = 0;
    absl::flat_hash_map<uint32_t, SizeAccumulator> sizes;
  };

  // Empty string when acceptable, else the reason.
  std::string RejectReason(const StepSample& sample, const JobData* job,
                           absl::Time now) const;

  const MetricsStoreOptions options_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, JobData> jobs_ ABSL_GUARDED_BY(mu_);
};

}  // namespace rescale

#endif  // RESCALE_METRICS_STORE_H_
