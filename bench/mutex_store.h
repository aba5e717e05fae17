// MutexStore: the baseline the lock-free MetricsStore is measured against.
//
// What a platform team would write first: one std::mutex around
// std::unordered_maps of jobs, sizes and pods, locked once per batch, with
// the same per-sample validation and the same per-size statistics (octave
// histogram with count, sum and sum of squares). Kept in bench/ only.
#ifndef RESCALE_BENCH_MUTEX_STORE_H_
#define RESCALE_BENCH_MUTEX_STORE_H_

#include <cmath>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>

#include "rescale/types.h"

namespace rescale::bench {

class MutexStore {
 public:
  void AddJob(const std::string& job_id, uint32_t max_replicas, uint32_t local_batch_size) {
    std::lock_guard<std::mutex> lock(mu_);
    Job& job = jobs_[job_id];
    job.max_replicas = max_replicas;
    job.local_batch_size = local_batch_size;
  }

  uint64_t Ingest(std::span<const StepSample> samples, int64_t now_ns) {
    uint64_t accepted = 0;
    std::lock_guard<std::mutex> lock(mu_);
    for (const StepSample& s : samples) {
      auto it = jobs_.find(std::string(s.job_id));
      if (it == jobs_.end()) continue;
      Job& job = it->second;
      if (s.pod.empty() || !(s.step_seconds > 0 && s.step_seconds < 3600) || s.world_size == 0 ||
          s.world_size > job.max_replicas) {
        continue;
      }
      Size& size = job.sizes[s.world_size];
      int octave = std::ilogb(s.step_seconds);
      int bin = std::min(19, std::max(0, octave + 10));
      ++size.count[bin];
      size.sum[bin] += s.step_seconds;
      size.sum_sq[bin] += s.step_seconds * s.step_seconds;
      size.batch_sum += s.batch_size != 0 ? s.batch_size : job.local_batch_size;
      Pod& pod = job.pods[std::string(s.pod)];
      pod.last_seen_ns = s.timestamp_unix_nanos != 0 ? s.timestamp_unix_nanos : now_ns;
      pod.recent_step = 0.9 * pod.recent_step + 0.1 * s.step_seconds;
      ++pod.count;
      ++job.accepted;
      ++accepted;
    }
    return accepted;
  }

  uint64_t Accepted(const std::string& job_id) {
    std::lock_guard<std::mutex> lock(mu_);
    return jobs_[job_id].accepted;
  }

 private:
  struct Size {
    uint64_t count[20] = {};
    double sum[20] = {};
    double sum_sq[20] = {};
    double batch_sum = 0;
  };
  struct Pod {
    int64_t last_seen_ns = 0;
    double recent_step = 0;
    uint64_t count = 0;
  };
  struct Job {
    uint32_t max_replicas = 0;
    uint32_t local_batch_size = 0;
    uint64_t accepted = 0;
    std::unordered_map<uint32_t, Size> sizes;
    std::unordered_map<std::string, Pod> pods;
  };
  std::mutex mu_;
  std::unordered_map<std::string, Job> jobs_;
};

}  // namespace rescale::bench

#endif  // RESCALE_BENCH_MUTEX_STORE_H_
