// JobRegistry: the registered jobs, their applied state and the cluster's
// capacity, as callers and the cluster changed them; the copies readers see;
// and the changes since the last plan.
//
// Durability without I/O under the lock: a mutation checks and prepares its
// change under mu_, hands it to the StateWriter before releasing mu_, and
// waits for it without any lock. The change enters memory only once it is
// durable, in the change's completion, which the writing caller runs (one
// group at a time, in the queue's order, which is the order the registry
// decided them in; see StateWriter); a write that fails leaves memory as it
// was, and the call fails with the store's error (UNAVAILABLE). While a
// job's change is in flight, the next change of the same job waits for it
// (each is decided on the state the one before left), and the capacity
// likewise; changes of different jobs go on and share one commit.
// Without a state store, changes enter memory at once, under mu_.
//
// Readers never take mu_: each change publishes an immutable copy of the
// entry into a read shard (its lock held for a pointer swap), which GetJob,
// ListJobs and GetCluster read.
#ifndef RESCALE_SRC_ENGINE_JOB_REGISTRY_H_
#define RESCALE_SRC_ENGINE_JOB_REGISTRY_H_

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "rescale/clock.h"
#include "rescale/metrics_store.h"
#include "rescale/mutex.h"
#include "rescale/recommendation_board.h"
#include "rescale/state_store.h"
#include "rescale/types.h"
#include "src/engine/job_entry.h"
#include "src/engine/state_writer.h"

namespace rescale::engine {

// The capacity as last set: total (nullopt = unknown), slots per size class
// (empty = unknown) and all nodes' GPUs (0 = not reported); and the queues
// as last set (empty = none defined: one pool).
struct CapacityState {
  std::optional<uint32_t> total_gpus;
  std::vector<ReplicaSlots> slots;
  uint32_t allocatable_gpus = 0;
  std::vector<QueueSpec> queues;
  // A cluster of several GPU types (CapacityReport::gpu_types; total_gpus
  // is then their sum and `slots` empty); empty = one type.
  std::vector<GpuType> gpu_types;
};

// What changed since the last plan's sync: each job changed (nullopt: gone),
// and the capacity.
struct RegistryChanges {
  std::vector<std::pair<std::string, std::optional<JobEntry>>> jobs;
  CapacityState capacity;
};

class JobRegistry {
 public:
  using Normalizer = std::function<absl::StatusOr<JobSpec>(JobSpec)>;
  // An asynchronous mutation's continuation: runs once the change is
  // durable and in memory (or refused), never under a lock of the
  // registry's or the writer's; on the caller's thread when the answer
  // needs no write (a refusal, or no state store).
  template <typename T>
  using Then = std::function<void(absl::StatusOr<T>)>;
  // `writer` null: no state store. `normalize` validates a kept spec.
  JobRegistry(int max_jobs, Clock& clock, MetricsStore& store, RecommendationBoard& board,
              StateWriter* writer, Normalizer normalize, std::optional<uint32_t> capacity_gpus);

  // Mutations; `spec` is normalised. Each returns once its change is durable
  // and in memory, with the entry as changed.
  absl::StatusOr<JobEntry> Register(JobSpec spec);
  // Registers those of `specs` that are not registered yet, in one group
  // commit (auto-registration); the ids registered.
  std::vector<std::string> RegisterAll(std::vector<JobSpec> specs);
  absl::StatusOr<JobEntry> Update(JobSpec spec);
  absl::Status Deregister(const std::string& job_id);
  // `gpu_type`: where the replicas run (empty = not said: the type it had
  // stays). A change of type while it runs is a change like a resize.
  absl::StatusOr<JobEntry> Apply(const std::string& job_id, uint32_t replicas, bool suspended,
                                 uint64_t generation, const std::string& gpu_type = {});
  absl::Status SetCapacity(const CapacityReport& report);
  // Replaces every queue (validated by the caller).
  absl::Status SetQueues(std::vector<QueueSpec> queues);
  // The same, for callers that must not block (see Then).
  void RegisterAsync(JobSpec spec, Then<JobEntry> then);
  void UpdateAsync(JobSpec spec, Then<JobEntry> then);
  void DeregisterAsync(const std::string& job_id, Then<std::monostate> then);
  void ApplyAsync(const std::string& job_id, uint32_t replicas, bool suspended, uint64_t generation,
                  const std::string& gpu_type, Then<JobEntry> then);
  void SetCapacityAsync(const CapacityReport& report, Then<std::monostate> then);
  void SetQueuesAsync(std::vector<QueueSpec> queues, Then<std::monostate> then);
  CapacityState Capacity() const;

  // Puts back what a state store held (at creation).
  absl::Status Restore(StoredState& stored, std::string_view described);
  // What the leader recorded (a follower's copy; see DecisionEngine).
  void ApplyReplicated(ReplicatedChange& change);
  // Every job counts as changed: the next plan copies them all.
  void MarkAllChanged();

  // A plan's sync: what changed since the last (which it clears).
  RegistryChanges TakeChanges();
  // Publishes a plan: drops the recommendations of jobs that moved on since
  // the sync in a way that rules them out (deregistered, registered again,
  // a spec that no longer allows the size, a deregistration in flight),
  // records the new generations through the writer, and stages them on the
  // board once durable. `registrations[i]` is the registration recs[i] was
  // planned for. `done(published)` runs once it is staged, or refused;
  // the ticket (null without a state store: done already ran) tells when.
  std::shared_ptr<WriteTicket> CommitPlan(std::vector<Recommendation> recs,
                                          const std::vector<uint64_t>& registrations,
                                          std::array<uint64_t, kActionCount>* changes_by_action,
                                          std::function<void(bool)> done);

  // Reads, without mu_.
  std::shared_ptr<const JobEntry> Find(const std::string& job_id) const;
  // Ordered by job id; `namespace_filter` empty = all.
  std::vector<std::shared_ptr<const JobEntry>> Published(const std::string& namespace_filter) const;
  // Every published entry, shard by shard, unordered (counting).
  void ForEachPublished(const std::function<void(const JobEntry&)>& visit) const;

 private:
  static constexpr int kReadShards = 16;
  struct ReadShard {
    Mutex mu;
    absl::flat_hash_map<std::string, std::shared_ptr<const JobEntry>> jobs ABSL_GUARDED_BY(mu);
  };
  enum class InFlight { kChange, kDelete };

  ReadShard& ShardOf(std::string_view job_id) const;
  void PublishLocked(const JobEntry& entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UnpublishLocked(const std::string& job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Waits (releasing mu_) until no change of `job_id` is in flight.
  void AwaitIdleLocked(const std::string& job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A mutation as decided under mu_: its answer when it needs no write
  // (`immediate`: a refusal, or applied at once without a state store), else
  // the change to write and `apply`, which enters it into memory under mu_
  // once written (or undoes what the decision reserved, when the write
  // failed) and gives the call's answer.
  template <typename T>
  using Applier = std::function<absl::StatusOr<T>(const absl::Status& written)>;
  template <typename T>
  struct Decision {
    Decision() = default;
    // An immediate answer (implicit, so a decision returns `{status}`).
    Decision(absl::StatusOr<T> answer) : immediate(std::move(answer)) {}  // NOLINT
    std::optional<absl::StatusOr<T>> immediate;
    StateChange change;
    Applier<T> apply;
  };
  Decision<JobEntry> DecideRegisterLocked(JobSpec spec) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Decision<JobEntry> DecideUpdateLocked(JobSpec spec) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Decision<std::monostate> DecideDeregisterLocked(const std::string& job_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Decision<JobEntry> DecideApplyLocked(const std::string& job_id, uint32_t replicas, bool suspended,
                                       uint64_t generation, const std::string& gpu_type)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Decision<std::monostate> DecideCapacityLocked(const CapacityReport& report)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Decision<std::monostate> DecideQueuesLocked(std::vector<QueueSpec> queues)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sets capacity_ to `next` once `change` is written (one capacity or
  // queue change in flight at a time, so neither overwrites the other).
  Decision<std::monostate> DecideClusterLocked(CapacityState next, StateChange change)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The completion of a decided change: `apply` under mu_, into `result`.
  template <typename T>
  std::function<void(const absl::Status&)> Completion(
      Applier<T> apply, std::shared_ptr<std::optional<absl::StatusOr<T>>> result);
  // Decides under mu_ (`decide` runs with it held), submits, and waits for
  // the change (writing its group when nobody else does).
  template <typename T>
  absl::StatusOr<T> Execute(const std::function<Decision<T>()>& decide);
  // As Execute, but hands the write to the writer's thread and returns.
  template <typename T>
  void ExecuteAsync(const std::function<Decision<T>()>& decide, Then<T> then);
  void InsertLocked(JobEntry& entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Replaces a registered job's entry with `entry`, a new version.
  void ReplaceLocked(JobEntry& entry, bool spec_changed) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RemoveLocked(const std::string& job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RestoreMeasurementsLocked(StoredMeasurements& measured) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  const int max_jobs_;
  Clock& clock_;
  MetricsStore& store_;
  RecommendationBoard& board_;
  StateWriter* const writer_;
  const Normalizer normalize_;

  mutable Mutex mu_;
  CondVar idle_cv_;
  absl::btree_map<std::string, JobEntry> jobs_ ABSL_GUARDED_BY(mu_);
  uint64_t change_counter_ ABSL_GUARDED_BY(mu_) = 0;
  // Jobs with a change in the writer's queue, and registrations among them
  // (counted against max_jobs).
  absl::flat_hash_map<std::string, InFlight> in_flight_ ABSL_GUARDED_BY(mu_);
  int registrations_in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  // A capacity or queue change in the writer's queue.
  bool capacity_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  // The jobs registered, changed or deregistered since the last sync.
  // Between a plan's sync and its commit, the jobs that moved on under it.
  absl::flat_hash_set<std::string> dirty_ ABSL_GUARDED_BY(mu_);
  CapacityState capacity_ ABSL_GUARDED_BY(mu_);
  mutable std::array<ReadShard, kReadShards> read_shards_;
};

}  // namespace rescale::engine

#endif  // RESCALE_SRC_ENGINE_JOB_REGISTRY_H_
