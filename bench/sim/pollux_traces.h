// The Pollux artifact's measured step times (tests/data/pollux/APP/
// {placements,scalability}.csv, Apache-2.0, petuum/adaptdl osdi21-artifact),
// embedded in the binary at compile time so rescale-sim needs no data files
// at run time, and read into per-replica-count tables for the built-in
// profiles.
//
// Packed placement. The traces measure each replica count at several
// placements (e.g. 8 GPUs as "44" on two nodes, or as "2222" on four). A
// scheduler packs a job onto as few nodes as it can, so for each replica
// count we keep the measurements of the placement with the fewest nodes;
// among those with equally few nodes, the most concentrated one (digits
// sorted descending, compared lexicographically: "41" before "32").
// scalability.csv rows, (num_nodes, num_replicas), compete under the same
// rule; they add the counts above 16 (20, 24, ..., 64), whose fewest
// measured nodes are 6 to 16. Repeated rows of one (placement, local batch)
// are averaged.
#ifndef RESCALE_BENCH_SIM_POLLUX_TRACES_H_
#define RESCALE_BENCH_SIM_POLLUX_TRACES_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace rescale::sim {

// The six measured applications, in the order the artifact lists them.
inline constexpr std::string_view kPolluxApps[] = {"bert",     "cifar10", "deepspeech2",
                                                   "imagenet", "ncf",     "yolov3"};

// One application's measurements at packed placements.
struct MeasuredApp {
  std::string name;
  // replicas -> (local batch -> seconds per step), replicas ascending.
  std::map<uint32_t, std::map<uint32_t, double>> step_seconds;
  // The placement kept for each replica count, e.g. "44" or "6 nodes".
  std::map<uint32_t, std::string> placement;
  // Every local batch measured at one replica (the reference for
  // extrapolating compute time to other batches).
  std::vector<uint32_t> local_batches;

  // Seconds per step with `replicas` workers at local batch `local_batch`:
  // linear in replicas between measured counts (from the nearest measured
  // counts on either side), and at each count linear in the local batch
  // between measured batches. A batch outside a count's measured range takes
  // the nearest measured batch plus the single-GPU compute difference between
  // the two batches (compute grows with the batch; synchronisation does
  // not). Beyond the largest measured count, throughput stays flat (step
  // time grows in proportion to replicas): no invented speedup.
  double StepSeconds(uint32_t replicas, double local_batch) const;

  // The same at a measured replica count (precondition: it is measured).
  double StepSecondsAtMeasured(uint32_t replicas, double local_batch) const;
};

// The embedded CSV text of one application's file ("placements" or
// "scalability"); empty if unknown.
std::string_view EmbeddedTrace(std::string_view app, std::string_view file);

// Parses the two CSVs of one application into packed-placement tables.
// INVALID_ARGUMENT naming the file and line for malformed input.
absl::StatusOr<MeasuredApp> ParseMeasuredApp(std::string_view name, std::string_view placements_csv,
                                             std::string_view scalability_csv);

// The embedded measurements of `app` (parsed once, then cached; thread-safe).
// NOT_FOUND for an app outside kPolluxApps.
absl::StatusOr<const MeasuredApp*> LoadMeasuredApp(std::string_view app);

}  // namespace rescale::sim

#endif  // RESCALE_BENCH_SIM_POLLUX_TRACES_H_
