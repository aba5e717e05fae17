// EtcdStateStore: rescaled's state in etcd (--state=etcd://.../PREFIX), for
// high availability: every rescaled replica reads the same keys; only the
// leader writes them.
//
// Keys, under PREFIX:
//   /schema            the layout's version (kEtcdSchemaVersion)
//   /jobs/<job id>     a StoredJob, JSON (the SQLite backend's records)
//   /recs/<job id>     the job's newest Recommendation, JSON
//   /retired/<job id>  the last generation of a deregistered job
//   /meas/<bucket>     checkpointed measurements and policy memory of the
//                      jobs whose id hashes to that bucket (00..ff), one
//                      line each: a checkpoint of 10,000 jobs writes 256
//                      keys, not 10,000 (etcd's cost is per key)
//   /capacity          the GPUs last set
//   /capacity_slots    their replica slots per size class, "8=3,4=7" ("" =
//                      none; absent before slots existed = none)
//   /capacity_allocatable_gpus
//                      all nodes' GPUs reported with them ("0" = not
//                      reported; absent before they were = not reported)
//   /capacity_gpu_types
//                      their GPU types, JSON ("[]" = one type; absent
//                      before types existed = one type)
//   /election          the leader election (etcd's Election service)
//
// Fencing: every write is one etcd transaction (a large one is split into
// transactions of at most kMaxOpsPerTxn operations) that compares the
// leader's election key against the lease this rescaled won it with
// (SetFence). A rescaled whose lease expired, while it was paused or cut
// off, finds the compare false: nothing is written, the call fails
// UNAVAILABLE, and the fence-lost callback tells the leadership to step
// down. Without a fence (a follower) every write is refused.
//
// Thread safety: every method is thread-safe.
#ifndef RESCALE_SERVER_ETCD_ETCD_STATE_STORE_H_
#define RESCALE_SERVER_ETCD_ETCD_STATE_STORE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "etcd/mvcc/mvccpb/kv.pb.h"
#include "rescale/mutex.h"
#include "rescale/state_store.h"
#include "server/etcd/etcd_client.h"

namespace rescale::server {

inline constexpr int kEtcdSchemaVersion = 1;
// etcd refuses transactions of more than 128 operations (--max-txn-ops).
inline constexpr int kMaxOpsPerTxn = 128;
// Transactions of one write sent at once (see Commit).
inline constexpr int kTxnsInFlight = 8;

class EtcdStateStore : public StateStore {
 public:
  // Checks (or writes, on an empty prefix) the schema version. UNAVAILABLE
  // when no member answers; FAILED_PRECONDITION when the prefix holds state
  // of a newer rescaled.
  static absl::StatusOr<std::unique_ptr<EtcdStateStore>> Open(std::string spec,
                                                              std::shared_ptr<EtcdClient> client,
                                                              std::string prefix);

  std::string Describe() const override { return spec_; }
  absl::StatusOr<StoredState> Load() override;
  absl::Status PutJob(const StoredJob& job) override;
  absl::Status DeleteJob(std::string_view job_id, uint64_t last_generation) override;
  absl::Status PutCapacity(const CapacityReport& capacity) override;
  absl::Status PutQueues(std::span<const QueueSpec> queues) override;
  absl::Status PutRecommendations(std::span<const Recommendation> recs) override;
  absl::Status PutMeasurements(std::span<const StoredMeasurements> jobs) override;
  // Every change waiting in the engine's writer in one Commit: group commit
  // on etcd (one Txn, or as few as kMaxOpsPerTxn allows, each fenced).
  absl::Status Write(std::span<const StateChange> changes) override;
  // A whole checkpoint at once: a bucket is written once per checkpoint.
  size_t checkpoint_jobs_per_write() const override { return 1 << 20; }

  // The etcd revision the last Load read at: a follower watches from the
  // one after it.
  int64_t last_load_revision() const;

  // What writes are fenced on: the leader's election key and the lease it
  // was won with; nullopt refuses every write (a follower).
  struct Fence {
    std::string key;
    int64_t lease = 0;
  };
  void SetFence(std::optional<Fence> fence);
  // Called (on the writing thread) with the fence's lease when a write
  // finds that lease no longer holds the key.
  void SetFenceLostCallback(std::function<void(int64_t lease)> callback);

  // Adds what one watched key change means to `change`. Keys outside the
  // layout (the election's) are ignored; a record that does not decode is
  // an error naming the key.
  absl::Status AddEvent(const mvccpb::Event& event, ReplicatedChange& change) const;

  const std::string& prefix() const { return prefix_; }
  std::string election_name() const { return prefix_ + "/election"; }

 private:
  EtcdStateStore(std::string spec, std::shared_ptr<EtcdClient> client, std::string prefix);
  // Writes `ops` under the fence, in transactions of at most kMaxOpsPerTxn,
  // up to kTxnsInFlight of them at once.
  absl::Status Commit(std::span<const etcdserverpb::RequestOp> ops);
  std::string Key(absl::string_view kind, absl::string_view job_id = "") const;
  // A change as etcd operations (measurements excepted: PutMeasurements),
  // and what the store remembers once they are written.
  void AppendOps(const StateChange& change, std::vector<etcdserverpb::RequestOp>& ops) const;
  void Written(const StateChange& change) ABSL_LOCKS_EXCLUDED(records_mu_);
  absl::Status WriteOne(StateChange change);
  std::string BucketKey(int bucket) const;

  static constexpr int kMeasurementBuckets = 256;

  const std::string spec_;
  const std::shared_ptr<EtcdClient> client_;
  const std::string prefix_;
  mutable Mutex mu_;
  std::optional<Fence> fence_ ABSL_GUARDED_BY(mu_);
  std::function<void(int64_t)> fence_lost_ ABSL_GUARDED_BY(mu_);
  int64_t last_load_revision_ ABSL_GUARDED_BY(mu_) = 0;
  // What each measurement bucket holds (job id -> its line), to rewrite a
  // bucket when some of its jobs changed; and the buckets that lost a job
  // since they were written (rewritten by the next checkpoint).
  // bucket_write_mu_ keeps checkpoints' bucket writes in order; records_mu_
  // guards the records only, so DeleteJob never waits for a checkpoint.
  Mutex bucket_write_mu_ ABSL_ACQUIRED_BEFORE(records_mu_);
  Mutex records_mu_;
  std::vector<std::map<std::string, std::string>> records_ ABSL_GUARDED_BY(records_mu_);
  std::set<int> stale_buckets_ ABSL_GUARDED_BY(records_mu_);
  // The jobs kept (Load, PutJob, DeleteJob): a checkpoint that raced with a
  // deregistration does not put the job's measurements back.
  std::set<std::string> known_jobs_ ABSL_GUARDED_BY(records_mu_);
};

}  // namespace rescale::server

#endif  // RESCALE_SERVER_ETCD_ETCD_STATE_STORE_H_
