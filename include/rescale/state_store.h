// StateStore: what rescaled keeps across restarts, and where (--state).
//
// Kept: job specs, the queues (SetQueues), each job's applied state and the times its cooldowns and
// the planner's ordering read, the cluster's capacity, each job's newest
// recommendation with its generation (and the last generation of jobs
// deregistered since), so generations never go backwards or repeat across
// restarts, and each job's measurement summaries per size as last
// checkpointed. Every Put returns once the change is durable.
//
// Backends, chosen by OpenStateStore's spec (rescaled's --state):
//   memory       kept in this process only (tests, the simulator); a new
//                engine given the same store sees what an old one put there
//   sqlite:PATH  one SQLite file in WAL mode with synchronous=FULL, the
//                schema versioned in the file (kStateSchemaVersion) and
//                migrated forward on open; a file that is corrupt or from a
//                newer rescaled stops the open with an error naming the
//                file and what to do, and is never rewritten
//
// Thread safety: every method is thread-safe; each is one transaction.
#ifndef RESCALE_STATE_STORE_H_
#define RESCALE_STATE_STORE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "rescale/metrics_store.h"
#include "rescale/queues.h"
#include "rescale/types.h"

namespace rescale {

// The schema version this build writes; files at an older version are
// migrated on open, files at a newer one are refused.
inline constexpr int kStateSchemaVersion = 3;

// One registered job as the engine keeps it between restarts.
struct StoredJob {
  JobSpec spec;
  // What the cluster runs, as last reported (ReportApplied).
  uint32_t current_replicas = 0;
  bool suspended = false;
  std::string gpu_type;  // the type it runs on, as reported (empty = not said)
  uint64_t last_applied_generation = 0;
  absl::Time last_applied_at = absl::InfinitePast();
  bool has_applied = false;
  absl::Time registered_at = absl::InfinitePast();
  // When the cluster last changed its size (cooldowns), last started and
  // stopped running (the planner's tie rules, waiting time).
  absl::Time last_change_at = absl::InfinitePast();
  absl::Time started_at = absl::InfinitePast();
  absl::Time stopped_at = absl::InfinitePast();
  // The policy memory the cluster's changes write: the size before the
  // latest change and the recent changes (time, change in replicas).
  uint32_t previous_replicas = 0;
  std::vector<std::pair<absl::Time, int32_t>> scale_events;
  friend bool operator==(const StoredJob&, const StoredJob&) = default;
};

// What a checkpoint keeps of a job: its measurement summaries per size
// (what its curve is fitted on) and the memory its policy keeps between
// plans.
struct StoredMeasurements {
  std::string job_id;
  std::vector<SizeStats> sizes;  // by world size
  // kubedl: exploration is over; hpa: recent raw recommendations (time,
  // replicas), oldest first (see PolicyMemory).
  bool exploration_stopped = false;
  std::vector<std::pair<absl::Time, uint32_t>> recent_recommendations;
};

// Everything a StateStore holds, as Load returns it.
struct StoredState {
  std::vector<StoredJob> jobs;  // ordered by job id
  std::optional<uint32_t> capacity_gpus;
  // The replicas per size class that fit on the nodes, set with the
  // capacity; empty when none were (or the state predates them).
  std::vector<ReplicaSlots> capacity_slots;
  // All nodes' GPUs, set with the capacity (CapacityReport); 0 when not
  // reported (or the state predates it).
  uint32_t capacity_allocatable_gpus = 0;
  // The GPU types set with the capacity; empty when one type (or the state
  // predates them).
  std::vector<GpuType> capacity_gpu_types;
  // The queues as last set (empty: none, or the state predates them).
  std::vector<QueueSpec> queues;
  // Each job's newest recommendation, ordered by job id.
  std::vector<Recommendation> recommendations;
  // The last generation of each job deregistered since (and not registered
  // again), ordered by job id.
  std::vector<std::pair<std::string, uint64_t>> retired_generations;
  // Each job's last checkpointed measurements, ordered by job id.
  std::vector<StoredMeasurements> measurements;
};

// A change to the kept state made by another rescaled (the leader, with
// high availability): what a follower applies to its copy
// (DecisionEngine::ApplyReplicated). `full`: the whole state, as Load
// returns it; jobs missing from it are gone.
struct ReplicatedChange {
  bool full = false;
  std::vector<StoredJob> jobs;            // new or changed
  std::vector<std::string> removed_jobs;  // deregistered
  std::optional<uint32_t> capacity_gpus;
  // Set when the slots changed (with the capacity); empty = none known.
  std::optional<std::vector<ReplicaSlots>> capacity_slots;
  // Set when the allocatable GPUs changed (with the capacity); 0 = not
  // reported.
  std::optional<uint32_t> capacity_allocatable_gpus;
  // Set when the GPU types changed (with the capacity); empty = one type.
  std::optional<std::vector<GpuType>> capacity_gpu_types;
  // Set when the queues changed (all of them; empty = none defined).
  std::optional<std::vector<QueueSpec>> queues;
  std::vector<Recommendation> recommendations;
  std::vector<std::pair<std::string, uint64_t>> retired_generations;
  std::vector<StoredMeasurements> measurements;
  bool empty() const {
    return !full && jobs.empty() && removed_jobs.empty() && !capacity_gpus && !capacity_slots &&
           !capacity_allocatable_gpus && !capacity_gpu_types && !queues &&
           recommendations.empty() && retired_generations.empty() && measurements.empty();
  }
  static ReplicatedChange Full(StoredState state);
};

// A job forgotten (StateStore::DeleteJob), as one change of a Write.
struct DeletedJob {
  std::string job_id;
  uint64_t last_generation = 0;
};

// The queues as set (StateStore::PutQueues), as one change of a Write.
struct QueueSet {
  std::vector<QueueSpec> queues;
  friend bool operator==(const QueueSet&, const QueueSet&) = default;
};

// One change of a StateStore::Write: a job recorded, a job forgotten, the
// capacity, recommendations, measurements, the queues (as the Put of the
// same type).
using StateChange = std::variant<StoredJob, DeletedJob, CapacityReport, std::vector<Recommendation>,
                                 std::vector<StoredMeasurements>, QueueSet>;

class StateStore {
 public:
  virtual ~StateStore() = default;
  // The backend and where it keeps state: "memory", "sqlite:/path/state.db".
  virtual std::string Describe() const = 0;
  virtual absl::StatusOr<StoredState> Load() = 0;
  // Records the job (a new one, or a new spec or applied state).
  virtual absl::Status PutJob(const StoredJob& job) = 0;
  // Forgets the job, its recommendation and its measurements, keeping
  // `last_generation` (0 = none) so a job registered again under the same
  // id continues from it.
  virtual absl::Status DeleteJob(std::string_view job_id, uint64_t last_generation) = 0;
  // Records the total GPUs, the slots per size class and the allocatable
  // GPUs together (empty slots, or 0 allocatable, replace any kept before).
  virtual absl::Status PutCapacity(const CapacityReport& capacity) = 0;
  // Records the queues, replacing every queue kept before (empty: none).
  virtual absl::Status PutQueues(std::span<const QueueSpec> queues) = 0;
  // Records each job's newest recommendation, replacing the one before; the
  // job's retired generation, if any, is dropped.
  virtual absl::Status PutRecommendations(std::span<const Recommendation> recs) = 0;
  // Records each job's measurements, replacing the ones before (a
  // checkpoint: one transaction for all of them). Jobs no longer kept (a
  // checkpoint racing a deregistration) are skipped.
  virtual absl::Status PutMeasurements(std::span<const StoredMeasurements> jobs) = 0;
  // Records `changes` in their order, durably, as one transaction where
  // the backend has them (SQLite: one transaction, one fsync; etcd: one
  // Txn, in as few as its limits allow): the engine's writer hands it every
  // change waiting at once (group commit). On error none of them may be
  // assumed recorded. The default runs the Puts one by one.
  virtual absl::Status Write(std::span<const StateChange> changes);
  // How many jobs a checkpoint hands PutMeasurements at once.
  virtual size_t checkpoint_jobs_per_write() const { return 128; }
};

// The store `spec` names: "memory" or "sqlite:PATH". INVALID_ARGUMENT for
// any other spec; FAILED_PRECONDITION naming the file and what to do when a
// SQLite file cannot be opened, is corrupt or was written by a newer
// rescaled.
absl::StatusOr<std::unique_ptr<StateStore>> OpenStateStore(std::string_view spec);

}  // namespace rescale

#endif  // RESCALE_STATE_STORE_H_
