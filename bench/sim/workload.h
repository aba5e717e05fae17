// Workloads for rescale-sim: the jobs to simulate (when each arrives, how
// fast it trains, how much work it has, its scaling range and spec) and the
// cluster (capacity in GPUs and its changes over time).
//
// Three input formats, chosen by the file (documented with examples in
// bench/sim/README.md):
//  * JSON Lines (.jsonl/.json): one object per line; a job line has an `id`,
//    a cluster line has `capacity_gpus` (and `at_seconds`, default 0).
//  * CSV (.csv) with a header naming Rescale's columns (`id`,
//    `arrival_seconds`, `profile`, ...).
//  * The Pollux evaluation workloads (CSV with header
//    `name,time,application,num_replicas,batch_size`), mapped as
//    PolluxMapping documents.
// And one generator: GenerateWorkload follows the Pollux recipe
// (../shared/reference/algorithms.md, section 6) with Poisson arrivals.
#ifndef RESCALE_BENCH_SIM_WORKLOAD_H_
#define RESCALE_BENCH_SIM_WORKLOAD_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/sim/profiles.h"

namespace rescale::sim {

// One job of a workload, with every default resolved.
struct JobDescription {
  std::string id;  // unique within the workload
  double arrival_seconds = 0;
  ProfileSpec profile;
  // Samples to train (epochs x dataset size when given in epochs).
  double work_samples = 0;
  double epochs = 0;  // as given; 0 when the work was given in samples
  uint32_t min_replicas = 1;
  uint32_t max_replicas = 1;
  // The size the job asks for when it cannot scale (fifo and tiresias run it
  // at this size; kubedl-raw and hpa-raw ignore it): the Pollux row's
  // num_replicas, else the optional `requested_replicas` field, default
  // min_replicas; always within [min_replicas, max_replicas].
  uint32_t requested_replicas = 1;
  uint32_t gpus_per_replica = 1;
  int32_t priority = 0;
  bool preemptible = true;
  double restart_cost_seconds = 0;
  uint32_t local_batch_size = 0;
};

// From `at_seconds` on, the cluster has `gpus` GPUs (nodes lost or added).
struct CapacityChange {
  double at_seconds = 0;
  uint32_t gpus = 0;
  friend bool operator==(const CapacityChange&, const CapacityChange&) = default;
};

struct Workload {
  // Jobs ordered by arrival, then id.
  std::vector<JobDescription> jobs;
  // Capacity at time 0 when the file gives one (a JSONL cluster line at
  // at_seconds 0); the command line may override it.
  std::optional<uint32_t> capacity_gpus;
  // Later changes, ordered by time.
  std::vector<CapacityChange> capacity_changes;
};

// How a Pollux workload row becomes a job:
//   id = name, arrival = time, profile = application,
//   work = the application's Pollux epoch budget x its dataset size,
//   min_replicas = 1, requested_replicas = num_replicas,
//   max_replicas = min(max_replicas_cap, max_replicas_factor x num_replicas),
//   local_batch_size = batch_size / num_replicas rounded to the nearest
//     measured local batch (ratio scale; yolov3 capped at 8),
//   restart cost = the profile's, gpus_per_replica 1, priority 0,
//   preemptible.
struct PolluxMapping {
  double max_replicas_factor = 4;
  uint32_t max_replicas_cap = 64;
};

// Reads a workload file in any of the three formats (by extension and, for
// CSV, by header). Errors name the file, line and field.
absl::StatusOr<Workload> LoadWorkload(const std::string& path, const PolluxMapping& pollux = {});
// The same from text; `format` is "jsonl" or "csv" (CSV detects Pollux).
absl::StatusOr<Workload> ParseWorkload(std::string_view text, std::string_view format,
                                       const PolluxMapping& pollux = {});

// Parses "T:GPUS,T:GPUS,..." (seconds:GPUs) into ordered capacity changes.
absl::StatusOr<std::vector<CapacityChange>> ParseCapacityChanges(std::string_view text);

// Serialises in Rescale's formats (every field explicit); reading the
// result back gives the same workload.
std::string WorkloadToJsonl(const Workload& workload);
std::string WorkloadToCsv(const Workload& workload);

// The Pollux recipe (../shared/reference/algorithms.md, section 6), with the Philly trace (not in
// the repo) replaced by its published outcome: Poisson arrivals at
// `jobs_per_hour` for `hours`; each job's application drawn from the mix
// (default: the mix of the Pollux workloads: ncf 39%, cifar10 39%,
// deepspeech2 8.7%, bert 6.7%, yolov3 4.6%, imagenet 2%), its submitted size
// and batch from the ones the Pollux workloads give that application
// (uniformly), then mapped as PolluxMapping says.
struct GenerateOptions {
  double jobs_per_hour = 20;
  double hours = 8;
  // When > 0: exactly this many jobs, arriving as a Poisson process
  // conditioned on the count (sorted uniform times over `hours`);
  // jobs_per_hour is then ignored.
  int jobs = 0;
  uint64_t seed = 1;
  // (profile, weight); empty = the Pollux mix. Weights need not sum to 1.
  std::vector<std::pair<std::string, double>> mix;
  PolluxMapping mapping;
  // (gpus_per_replica, weight); empty = every job 1 GPU per replica, as
  // Pollux's. Otherwise each job's class g is drawn from these weights by a
  // generator of its own (the seed and the job's index: the other fields
  // are those of the run without it), and the job is the Pollux job on
  // g-GPU replicas: requested and max replicas divided by g (rounded up, at
  // least 1), and its work divided by g, so that its GPU-time at a given
  // GPU count stays that of the 1-GPU job (a g-GPU replica steps as one
  // measured worker; the node experiments measure placement, not speed).
  std::vector<std::pair<uint32_t, double>> gpus_per_replica_mix;
};
absl::StatusOr<Workload> GenerateWorkload(const GenerateOptions& options);

// Parses "name=weight,name=weight" for GenerateOptions::mix.
absl::StatusOr<std::vector<std::pair<std::string, double>>> ParseMix(std::string_view text);
// Parses "1=50,4=30,8=20" for GenerateOptions::gpus_per_replica_mix
// (INVALID_ARGUMENT naming the item that is not GPUS=WEIGHT, GPUS >= 1).
absl::StatusOr<std::vector<std::pair<uint32_t, double>>> ParseGpusPerReplicaMix(
    std::string_view text);

}  // namespace rescale::sim

#endif  // RESCALE_BENCH_SIM_WORKLOAD_H_
