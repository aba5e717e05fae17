// Queues: how teams divide the GPUs (issue 33). A queue owns a nominal GPU
// quota; queues in one cohort lend their unused quota to each other and
// borrow from it, within limits; competing borrowers share by weight. The
// model is Kueue's ClusterQueue with one resource (nvidia.com/gpu):
// https://kueue.sigs.k8s.io/docs/concepts/cluster_queue/ (nominalQuota,
// borrowingLimit, lendingLimit, cohort, fairSharing.weight).
//
// What lives here: the queue spec, its validation, the one file format every
// program reads queues from (rescalectl queue set -f, rescale-adapter
// --queues-file, rescale-sim --queues), and the rule for the default queue.
// How the planner honours queues is stated in rescale/cluster_planner.h
// ("Queues").
#ifndef RESCALE_QUEUES_H_
#define RESCALE_QUEUES_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace rescale {

// The queue of a job that names none (JobSpec::queue empty).
inline constexpr std::string_view kDefaultQueueName = "default";

struct QueueSpec {
  std::string name;  // DNS-1123 label, unique
  uint64_t nominal_gpus = 0;
  // Queues with the same non-empty cohort lend and borrow; "" = none: the
  // queue holds at most its nominal quota.
  std::string cohort;
  // At most this many GPUs above nominal, from the cohort; unset = no limit
  // beyond what the cohort lends. Only with a cohort (as in Kueue).
  std::optional<uint64_t> borrowing_limit_gpus;
  // At most this many of its unused nominal GPUs lent to the cohort; unset =
  // all of them. <= nominal_gpus; only with a cohort (as in Kueue).
  std::optional<uint64_t> lending_limit_gpus;
  // Fair-sharing weight between borrowers: GPUs borrowed / weight is
  // balanced. 0 borrows only what no weighted queue wants.
  double weight = 1;
  friend bool operator==(const QueueSpec&, const QueueSpec&) = default;
};

// Beyond these a value is a typo, not a real cluster.
struct QueueLimits {
  size_t max_queues = 1000;
  uint64_t max_gpus = 1'000'000;  // nominal and limits
  double max_weight = 1'000'000;
};

// Checks every queue and the set: names DNS-1123 labels and unique, cohorts
// DNS-1123 labels, quotas and limits <= max_gpus, lending limit <= nominal,
// limits only with a cohort, weight finite in [0, max_weight]. Errors are
// INVALID_ARGUMENT naming the field ("queues[2].lending_limit_gpus") and the
// limit. Nominal quotas adding up to more than the capacity are allowed (as
// in Kueue); ResolveQueues and the planner handle them.
absl::Status ValidateQueues(std::span<const QueueSpec> queues, const QueueLimits& limits = {});

// The queue file (YAML), `source` naming it in errors:
//   queues:
//   - name: team-a
//     nominal_gpus: 32
//     cohort: research          # optional
//     borrowing_limit_gpus: 32  # optional
//     lending_limit_gpus: 16    # optional
//     weight: 1                 # optional, default 1
// Unknown keys are errors (a misspelt limit must not silently mean "none").
// The queues are validated (ValidateQueues). An empty list is allowed: it
// removes every queue.
absl::StatusOr<std::vector<QueueSpec>> ParseQueuesYaml(std::string_view text,
                                                       std::string_view source);
// The same format, for `rescalectl get queues -o yaml` round trips.
std::string QueuesToYaml(std::span<const QueueSpec> queues);

// The queues the planner plans with, given the defined ones and the
// capacity (nullopt = unknown):
//  * none defined: one queue "default" holding the whole capacity, so every
//    job shares one pool exactly as before queues existed;
//  * otherwise the defined queues, plus, unless one is named "default", a
//    queue "default" (no cohort) whose nominal quota is the capacity no
//    defined queue claims (0 when they claim all of it or the capacity is
//    unknown).
// The default queue is last when added.
std::vector<QueueSpec> ResolveQueues(std::span<const QueueSpec> defined,
                                     std::optional<uint64_t> capacity);

// The index in `queues` of the queue a job names ("" = kDefaultQueueName);
// nullopt when no queue has that name (the job waits until it is defined).
std::optional<uint32_t> FindQueue(std::span<const QueueSpec> queues, std::string_view name);

}  // namespace rescale

#endif  // RESCALE_QUEUES_H_
