// Per-policy summary figures (see summary.h).
#include "bench/sim/summary.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace rescale::sim {

double Quantile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const double position = std::clamp(q, 0.0, 1.0) * double(values.size() - 1);
  const size_t lower = static_cast<size_t>(std::floor(position));
  const size_t upper = std::min(lower + 1, values.size() - 1);
  return values[lower] + (values[upper] - values[lower]) * (position - double(lower));
}

PolicySummary Summarize(const SimulationResult& result) {
  PolicySummary s;
  s.policy = result.policy;
  s.jobs = result.jobs.size();
  std::vector<double> jcts;
  double queue_sum = 0;
  uint64_t started = 0;
  double gpu_seconds = 0;
  double restart_gpu_seconds = 0;
  double pending_gpu_seconds = 0;
  for (const JobOutcome& job : result.jobs) {
    if (job.finished()) jcts.push_back(job.jct_seconds());
    if (!std::isnan(job.first_start_seconds)) {
      queue_sum += job.queue_seconds();
      ++started;
    }
    gpu_seconds += job.gpu_seconds;
    restart_gpu_seconds += job.restart_gpu_seconds;
    pending_gpu_seconds += job.pending_gpu_seconds;
    s.rescales += job.rescales;
    s.suspensions += job.suspensions;
    s.resumes += job.resumes;
    s.restarts += job.restarts();
  }
  s.finished = jcts.size();
  s.avg_jct_s =
      jcts.empty() ? 0 : std::accumulate(jcts.begin(), jcts.end(), 0.0) / double(jcts.size());
  s.p50_jct_s = Quantile(jcts, 0.5);
  s.p99_jct_s = Quantile(jcts, 0.99);
  s.makespan_s = result.end_seconds - result.first_arrival_seconds;
  s.avg_queue_s = started == 0 ? 0 : queue_sum / double(started);
  if (result.capacity_gpu_seconds > 0) {
    s.utilization = gpu_seconds / result.capacity_gpu_seconds;
    s.effective_utilization = (gpu_seconds - restart_gpu_seconds) / result.capacity_gpu_seconds;
  }
  s.gpu_hours = gpu_seconds / 3600;
  s.restart_gpu_hours = restart_gpu_seconds / 3600;
  s.samples_rejected = result.samples_rejected;
  s.stopped_early = result.stopped_early;
  s.nodes_modeled = result.nodes_modeled;
  s.pending_gpu_hours = pending_gpu_seconds / 3600;
  s.foreign_gpu_hours = result.foreign_gpu_seconds / 3600;
  return s;
}

}  // namespace rescale::sim
