// The tables of `rescale-sim sweep`: several workloads, policies and seeds,
// reduced to the mean over the seeds per workload and policy and the mean
// over workloads per policy. Pure functions of the runs' summaries, so a
// sweep writes the same bytes whatever order its runs finished in.
//
// Outputs (written by rescale-sim into --out):
//   sweep.md / stdout  a per-policy table (kind, average JCT and its ratio to
//                      the baseline, restarts per job, p99 JCT), then the
//                      average JCT and the restarts per job per workload.
//   sweep.csv          one row per workload, policy and seed: the columns of
//                      summary.csv after `workload`, then seed, kind and
//                      restarts_per_job (added at the end so readers of the
//                      older layout keep working).
//   sweep_means.csv    the means over seeds per workload and policy, and
//                      rows with workload `mean` for the mean over workloads.
// With the node model (--node-gpus) sweep.md ends with a table per
// workload, seed and policy of pending GPU-hours, average JCT and
// utilization, and sweep.csv has summary.csv's node columns.
// Restarts per job = (rescales + resumes) / jobs; both means are plain
// (unweighted) averages.
#ifndef RESCALE_BENCH_SIM_SWEEP_H_
#define RESCALE_BENCH_SIM_SWEEP_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/sim/summary.h"

namespace rescale::sim {

struct SweepInput {
  std::vector<std::string> workloads;  // tags, as in the table
  std::vector<std::string> policies;
  std::vector<uint64_t> seeds;
  std::string baseline;  // one of policies
  // summaries[(w * seeds.size() + s) * policies.size() + p]
  std::vector<PolicySummary> summaries;
};

// The mean over seeds of one workload and policy.
struct SweepCell {
  double avg_jct_s = 0;
  double p99_jct_s = 0;
  double restarts_per_job = 0;
  bool unfinished = false;  // some run left jobs unfinished
};

struct SweepTables {
  // [w][p]: the mean over seeds; overall[p]: the mean of those over w.
  std::vector<std::vector<SweepCell>> cells;
  std::vector<SweepCell> overall;
  std::string markdown;
  std::string csv;
  std::string means_csv;
};

SweepTables MakeSweepTables(const SweepInput& input);

// Parses "1,2,3" into seeds (INVALID_ARGUMENT naming the bad item).
absl::StatusOr<std::vector<uint64_t>> ParseSeeds(std::string_view text);

}  // namespace rescale::sim

#endif  // RESCALE_BENCH_SIM_SWEEP_H_
