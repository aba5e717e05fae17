// rescale-sim's outputs: the comparison table (console and Markdown), the
// CSV files, the SVG plots and the one-page report.md that shows them. All
// are pure functions of the simulation results, so identical runs write
// byte-identical files.
//
// Files written by WriteRunReport into DIR:
//   summary.csv      one row per policy (summary.h gives the definitions)
//   jobs.csv         one row per job per policy
//   timeline.csv     the cluster after each change, per policy (step function)
//   allocations.csv  every change of a job's replicas, per policy
//   jct_cdf.svg      JCT CDF, one line per policy
//   utilization.svg  allocated GPUs over time, one line per policy
//   allocation-POLICY.svg  GPUs per job over time, stacked, one per policy
//   report.md        the table and the plots on one page
// With the node model (--node-gpus) the table, summary.csv, jobs.csv and
// timeline.csv gain columns at the end (pending and foreign GPU-hours, or
// GPUs); without it every file is as it was before nodes existed.
#ifndef RESCALE_BENCH_SIM_REPORT_H_
#define RESCALE_BENCH_SIM_REPORT_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "bench/sim/simulator.h"
#include "bench/sim/summary.h"

namespace rescale::sim {

// What was run, for the headers of the table and the report.
struct RunDescription {
  std::string workload;  // file name
  size_t jobs = 0;
  uint32_t capacity_gpus = 0;
  std::vector<CapacityChange> capacity_changes;
  uint64_t seed = 0;
  double plan_interval_seconds = 0;
  double step_noise = 0;
  double size_noise = 0;  // --size-noise
  int samples_per_tick = 0;
  // The node model (0 GPUs per node = off).
  uint32_t node_gpus = 0;
  double foreign_load = 0;
  double foreign_interval_seconds = 0;
  bool node_aware = false;
  bool efficiency = true;  // --efficiency on
  std::string baseline;    // policy the ratios divide by
};

// The comparison table: one row per policy, times in seconds with their
// ratio to the baseline's. Plain text for a terminal, or Markdown.
std::string ComparisonTable(const std::vector<PolicySummary>& summaries,
                            const std::string& baseline, bool markdown);

std::string SummaryCsv(const std::vector<PolicySummary>& summaries);
std::string JobsCsv(const std::vector<SimulationResult>& results);
std::string TimelineCsv(const std::vector<SimulationResult>& results);
std::string AllocationsCsv(const std::vector<SimulationResult>& results);

std::string JctCdfSvg(const std::vector<SimulationResult>& results);
std::string UtilizationSvg(const std::vector<SimulationResult>& results);
std::string AllocationSvg(const SimulationResult& result);

std::string ReportMarkdown(const RunDescription& run, const std::vector<PolicySummary>& summaries,
                           const std::vector<SimulationResult>& results);

// Creates `dir` if needed and writes every file listed above.
absl::Status WriteRunReport(const std::string& dir, const RunDescription& run,
                            const std::vector<SimulationResult>& results);

// File-name-safe form of a policy name.
std::string FileSafe(std::string_view name);

}  // namespace rescale::sim

#endif  // RESCALE_BENCH_SIM_REPORT_H_
