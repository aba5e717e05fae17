// Queues in the simulator (--queues FILE): which queue each job draws from,
// and what each queue got: its jobs' average JCT, its share of the GPUs,
// and the time it spent short of its nominal quota while one of its jobs
// waited that the missing GPUs would have started.
#ifndef RESCALE_BENCH_SIM_QUEUE_REPORT_H_
#define RESCALE_BENCH_SIM_QUEUE_REPORT_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "bench/sim/simulator.h"
#include "bench/sim/workload.h"
#include "rescale/queues.h"

namespace rescale::sim {

// The queue of the index-th job of the workload (arrival order): the
// queues in turn (round-robin, so two queues get the jobs alternately);
// "" without queues.
std::string QueueOfJob(std::span<const QueueSpec> queues, const JobDescription& job, size_t index);

struct QueueOutcome {
  std::string name;
  uint64_t nominal_gpus = 0;
  uint32_t jobs = 0;
  uint32_t finished = 0;
  double mean_jct_seconds = kNever;  // of its finished jobs
  // Its jobs' GPU-seconds over the cluster's (capacity from the first
  // arrival to the end).
  double gpu_share = 0;
  // Time it held fewer GPUs than its nominal quota while one of its jobs
  // waited (arrived, not running) whose min_replicas x gpus_per_replica
  // fit in the difference; and the longest such stretch.
  double short_seconds = 0;
  double longest_short_seconds = 0;
};

// Per queue of `queues` (in their order), from a run's jobs and allocations.
std::vector<QueueOutcome> QueueOutcomes(const SimulationResult& result,
                                        std::span<const QueueSpec> queues);

// A plain-text table of one run's queues: QUEUE, NOMINAL, JOBS, DONE,
// AVG JCT, GPU SHARE, SHORT, LONGEST SHORT.
std::string QueueTable(const std::vector<QueueOutcome>& queues);

}  // namespace rescale::sim

#endif  // RESCALE_BENCH_SIM_QUEUE_REPORT_H_
