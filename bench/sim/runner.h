// Runs many simulations (policies x workloads) in parallel: one thread per
// run, at most `threads` at once (default: hardware_concurrency). Each run
// has its own DecisionEngine, ManualClock and random generator, so the
// results are the same whatever the thread count or the order runs finish
// in. Optionally draws a progress bar on stderr (only when stderr is a
// terminal).
#ifndef RESCALE_BENCH_SIM_RUNNER_H_
#define RESCALE_BENCH_SIM_RUNNER_H_

#include <vector>

#include "absl/status/statusor.h"
#include "bench/sim/simulator.h"
#include "bench/sim/workload.h"

namespace rescale::sim {

struct SimulationTask {
  const Workload* workload = nullptr;  // must outlive RunSimulations
  SimulationOptions options;           // jobs_finished is set by the runner
};

struct RunnerOptions {
  // Concurrent runs; 0 = std::thread::hardware_concurrency() (at least 1).
  unsigned threads = 0;
  // Draw a progress bar on stderr when it is a terminal (isatty).
  bool progress = true;
};

// The results in task order.
std::vector<absl::StatusOr<SimulationResult>> RunSimulations(std::vector<SimulationTask> tasks,
                                                             const RunnerOptions& options = {});

}  // namespace rescale::sim

#endif  // RESCALE_BENCH_SIM_RUNNER_H_
