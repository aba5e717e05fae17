// Queues in the simulator: assignment and per-queue results (see
// queue_report.h).
#include "bench/sim/queue_report.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "absl/strings/str_format.h"

namespace rescale::sim {

std::string QueueOfJob(std::span<const QueueSpec> queues, const JobDescription&, size_t index) {
  return queues.empty() ? std::string() : queues[index % queues.size()].name;
}

std::vector<QueueOutcome> QueueOutcomes(const SimulationResult& result,
                                        std::span<const QueueSpec> queues) {
  std::vector<QueueOutcome> out(queues.size());
  std::map<std::string, size_t> index;
  for (size_t k = 0; k < queues.size(); ++k) {
    out[k].name = queues[k].name;
    out[k].nominal_gpus = queues[k].nominal_gpus;
    index[queues[k].name] = k;
  }
  std::vector<double> jct_sum(queues.size(), 0);
  std::vector<int> of_job(result.jobs.size(), -1);
  for (size_t i = 0; i < result.jobs.size(); ++i) {
    const JobOutcome& job = result.jobs[i];
    auto it = index.find(job.queue);
    if (it == index.end()) continue;
    of_job[i] = static_cast<int>(it->second);
    QueueOutcome& q = out[it->second];
    ++q.jobs;
    q.gpu_share += job.gpu_seconds;
    if (job.finished()) {
      ++q.finished;
      jct_sum[it->second] += job.jct_seconds();
    }
  }
  for (size_t k = 0; k < out.size(); ++k) {
    if (out[k].finished > 0) out[k].mean_jct_seconds = jct_sum[k] / out[k].finished;
    out[k].gpu_share =
        result.capacity_gpu_seconds > 0 ? out[k].gpu_share / result.capacity_gpu_seconds : 0;
  }

  // Replay the allocations with the arrivals and completions, in time
  // order; between two instants every queue's use and waiting jobs stand.
  struct Event {
    double at;
    int kind;  // 0 arrival, 1 allocation, 2 completion: the order at one instant
    size_t job;
    uint32_t gpus;
  };
  std::vector<Event> events;
  for (size_t i = 0; i < result.jobs.size(); ++i) {
    if (of_job[i] < 0) continue;
    events.push_back({result.jobs[i].arrival_seconds, 0, i, 0});
    if (result.jobs[i].finished()) events.push_back({result.jobs[i].finish_seconds, 2, i, 0});
  }
  for (const AllocationChange& a : result.allocations) {
    if (a.job < of_job.size() && of_job[a.job] >= 0)
      events.push_back({a.time_seconds, 1, a.job, a.gpus});
  }
  std::stable_sort(events.begin(), events.end(), [](const Event& a, const Event& b) {
    return a.at != b.at ? a.at < b.at : a.kind < b.kind;
  });
  std::vector<uint32_t> gpus(result.jobs.size(), 0);
  std::vector<bool> present(result.jobs.size(), false);
  std::vector<uint64_t> use(queues.size(), 0);
  std::vector<double> stretch(queues.size(), 0);
  for (size_t e = 0; e < events.size();) {
    const double now = events[e].at;
    for (; e < events.size() && events[e].at == now; ++e) {
      const Event& ev = events[e];
      const size_t k = static_cast<size_t>(of_job[ev.job]);
      if (ev.kind == 0) present[ev.job] = true;
      if (ev.kind == 2) present[ev.job] = false;
      const uint32_t next = ev.kind == 1 ? ev.gpus : (ev.kind == 2 ? 0 : gpus[ev.job]);
      use[k] = use[k] - gpus[ev.job] + next;
      gpus[ev.job] = next;
    }
    const double until = e < events.size() ? events[e].at : result.end_seconds;
    for (size_t k = 0; k < queues.size(); ++k) {
      bool short_now = false;
      if (use[k] < queues[k].nominal_gpus) {
        const uint64_t missing = queues[k].nominal_gpus - use[k];
        for (size_t i = 0; i < result.jobs.size() && !short_now; ++i) {
          const JobOutcome& job = result.jobs[i];
          short_now = of_job[i] == static_cast<int>(k) && present[i] && gpus[i] == 0 &&
                      uint64_t{job.min_replicas} * job.gpus_per_replica <= missing;
        }
      }
      if (short_now) {
        out[k].short_seconds += until - now;
        stretch[k] += until - now;
        out[k].longest_short_seconds = std::max(out[k].longest_short_seconds, stretch[k]);
      } else if (until > now) {
        stretch[k] = 0;
      }
    }
  }
  return out;
}

std::string QueueTable(const std::vector<QueueOutcome>& queues) {
  std::string out =
      absl::StrFormat("%-16s %8s %6s %6s %10s %10s %10s %14s\n", "QUEUE", "NOMINAL", "JOBS", "DONE",
                      "AVG JCT", "GPU SHARE", "SHORT", "LONGEST SHORT");
  for (const QueueOutcome& q : queues) {
    out += absl::StrFormat("%-16s %8d %6d %6d %9.0fs %9.1f%% %9.0fs %13.0fs\n", q.name,
                           q.nominal_gpus, q.jobs, q.finished, q.mean_jct_seconds,
                           100 * q.gpu_share, q.short_seconds, q.longest_short_seconds);
  }
  return out;
}

}  // namespace rescale::sim
