// The per-policy figures rescale-sim reports, computed from one
// SimulationResult. Definitions (also in bench/sim/README.md):
//  * JCT (job completion time) = finish - arrival, over finished jobs;
//    average, median (p50) and p99 with linear interpolation between order
//    statistics (numpy's default).
//  * makespan = the run's end (last completion) - the first arrival.
//  * queueing delay = first start - arrival, averaged over started jobs.
//  * utilization = allocated GPU-seconds / capacity GPU-seconds, both from
//    the first arrival to the end; effective utilization leaves out the
//    GPU-seconds spent restarting.
//  * node model only: pending GPU-hours (GPUs of Pending pods x the time
//    they pended) and foreign GPU-hours (held by pods Rescale does not
//    manage; part of the capacity, so utilization is at most 1 - their
//    share).
//  * rescales (size changes while running), suspensions, resumes, restarts
//    (= rescales + resumes: the changes that cost restart_cost_seconds) and
//    GPU-hours lost to restarts, summed over jobs.
#ifndef RESCALE_BENCH_SIM_SUMMARY_H_
#define RESCALE_BENCH_SIM_SUMMARY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "bench/sim/simulator.h"

namespace rescale::sim {

struct PolicySummary {
  std::string policy;
  uint64_t jobs = 0;
  uint64_t finished = 0;
  double avg_jct_s = 0;
  double p50_jct_s = 0;
  double p99_jct_s = 0;
  double makespan_s = 0;
  double avg_queue_s = 0;
  double utilization = 0;
  double effective_utilization = 0;
  uint64_t rescales = 0;
  uint64_t suspensions = 0;
  uint64_t resumes = 0;
  uint64_t restarts = 0;
  double gpu_hours = 0;
  double restart_gpu_hours = 0;
  uint64_t samples_rejected = 0;
  bool stopped_early = false;
  // The node model ran: the report adds the two columns below.
  bool nodes_modeled = false;
  double pending_gpu_hours = 0;
  double foreign_gpu_hours = 0;
  friend bool operator==(const PolicySummary&, const PolicySummary&) = default;
};

PolicySummary Summarize(const SimulationResult& result);

// The q-quantile (0..1) of `values` by linear interpolation; 0 when empty.
double Quantile(std::vector<double> values, double q);

}  // namespace rescale::sim

#endif  // RESCALE_BENCH_SIM_SUMMARY_H_
