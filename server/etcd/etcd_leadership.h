// EtcdLeadership: one leader among the rescaled replicas that share an
// etcd prefix, elected through etcd's Election service on a lease; the
// others follow, keeping a warm copy of the state by watching the prefix.
//
// The leader plans, takes writes and ingests samples; its writes are
// fenced on its lease (EtcdStateStore::SetFence). It stops leading as soon
// as it cannot show the lease holds: when a renewal says it expired, when
// renewals have failed for a whole TTL (etcd down, or without quorum), when
// a fenced write fails, and — checked on every call — when its local
// deadline (the last renewal sent + the TTL) has passed, as after SIGSTOP
// and SIGCONT. It then becomes a follower: its engine stops planning,
// reloads the whole state, and it campaigns again on a new lease.
//
// A follower applies every watched change to its engine
// (DecisionEngine::ApplyReplicated), in revision order, skipping what a
// full reload already covered. When it wins the election it reloads the
// whole state first (so it has everything the old leader wrote, all of
// which was fenced on a lease that has ended), then starts planning.
//
// Threads: one campaigns (blocking in etcd's Campaign), one renews the
// lease, one watches. on_role_change runs on the campaigning thread.
//
// Time: the lease's local deadline and the renewal schedule are on the
// injected Clock (a test moves a ManualClock past the deadline instead of
// pausing a process); RPC timeouts and the pause before retrying etcd are
// real time, as etcd's own lease is.
#ifndef RESCALE_SERVER_ETCD_ETCD_LEADERSHIP_H_
#define RESCALE_SERVER_ETCD_ETCD_LEADERSHIP_H_

#include <grpcpp/client_context.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "rescale/clock.h"
#include "rescale/decision_engine.h"
#include "rescale/mutex.h"
#include "server/etcd/etcd_client.h"
#include "server/etcd/etcd_state_store.h"
#include "server/leadership.h"

namespace rescale::server {

struct LeadershipOptions {
  // The election lease's TTL: how long a leader that stopped answering
  // (crashed, paused, cut off) keeps the others from taking over. Between
  // kMinLeaseTtl and kMaxLeaseTtl (ValidateLeadershipOptions).
  absl::Duration lease_ttl = absl::Seconds(5);
  // What followers tell clients to call instead ("host:port"); empty: the
  // address the server listens on.
  std::string advertise_address;

  // etcd grants leases in whole seconds, at least one.
  static constexpr absl::Duration kMinLeaseTtl = absl::Seconds(1);
  // A crashed leader holds the others off for a whole TTL: longer than an
  // hour is a mistake of units, not a choice.
  static constexpr absl::Duration kMaxLeaseTtl = absl::Hours(1);
};

// INVALID_ARGUMENT naming the option and its limit when `options` cannot be
// used (rescaled checks its flags with it before connecting to etcd).
absl::Status ValidateLeadershipOptions(const LeadershipOptions& options);

class EtcdLeadership final : public Leadership {
 public:
  // Validates `options` (ValidateLeadershipOptions) and that client, store
  // and clock are given. Nothing runs before Start. `clock` must outlive
  // the leadership.
  static absl::StatusOr<std::unique_ptr<EtcdLeadership>> Create(
      LeadershipOptions options, std::shared_ptr<EtcdClient> client,
      std::shared_ptr<EtcdStateStore> store, DecisionEngine& engine,
      std::function<void(bool leader)> on_role_change, Clock* clock = Clock::Real());
  ~EtcdLeadership() override;

  // Before Start: the address followers tell clients to call.
  void SetAdvertiseAddress(std::string address) { options_.advertise_address = std::move(address); }
  // Starts following (watching from the revision the engine's state was
  // loaded at) and campaigning.
  void Start();
  // Resigns (a leader hands over at once instead of after its TTL), revokes
  // the lease and stops the threads. Idempotent.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);

  bool IsLeader() const ABSL_LOCKS_EXCLUDED(mu_) override;
  std::string LeaderAddress() const ABSL_LOCKS_EXCLUDED(mu_) override;
  std::string Describe() const ABSL_LOCKS_EXCLUDED(mu_) override;

 private:
  EtcdLeadership(LeadershipOptions options, std::shared_ptr<EtcdClient> client,
                 std::shared_ptr<EtcdStateStore> store, DecisionEngine& engine,
                 std::function<void(bool leader)> on_role_change, Clock* clock);

  void Campaign() ABSL_LOCKS_EXCLUDED(mu_, apply_mu_);
  void KeepAlive() ABSL_LOCKS_EXCLUDED(mu_);
  void Watch() ABSL_LOCKS_EXCLUDED(mu_, apply_mu_);
  // Reloads the whole state into the engine; false (and the reason in
  // status_) when etcd cannot be read.
  bool Resync() ABSL_LOCKS_EXCLUDED(mu_, apply_mu_);
  void RefreshLeaderAddress() ABSL_LOCKS_EXCLUDED(mu_);
  void SetStatus(std::string status) ABSL_LOCKS_EXCLUDED(mu_);
  // Ends the term of `lease` (if it is still the current one).
  void LoseLease(int64_t lease, const std::string& why) ABSL_LOCKS_EXCLUDED(mu_);
  // One wait on changed_, until a Signal, a jump of clock_ (its listener
  // signals) or, at the latest, `deadline` on clock_. May return early:
  // callers wait in a loop on their condition.
  void WaitOnClock(absl::Time deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Waits kRetryPause of real time (etcd's pace), or until stopping_.
  void PauseBeforeRetry() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  LeadershipOptions options_;  // set before Start, read-only after
  const std::shared_ptr<EtcdClient> client_;
  const std::shared_ptr<EtcdStateStore> store_;
  DecisionEngine& engine_;
  const std::function<void(bool)> on_role_change_;
  Clock* const clock_;
  // Signals changed_ when clock_ jumps (a ManualClock); set in Start.
  Clock::Listener clock_listener_;

  mutable Mutex mu_;
  CondVar changed_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  int64_t lease_ ABSL_GUARDED_BY(mu_) = 0;  // 0 = none
  // Last renewal sent + TTL, on clock_.
  absl::Time lease_deadline_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  bool leader_ ABSL_GUARDED_BY(mu_) = false;
  // Counts this replica's elections and step-downs: a leader read sent
  // before one of them is stale when it returns (RefreshLeaderAddress).
  uint64_t role_changes_ ABSL_GUARDED_BY(mu_) = 0;
  std::optional<v3electionpb::LeaderKey> leader_key_ ABSL_GUARDED_BY(mu_);
  std::string leader_address_ ABSL_GUARDED_BY(mu_);
  std::string status_ ABSL_GUARDED_BY(mu_) = "starting";
  grpc::ClientContext* campaign_context_ ABSL_GUARDED_BY(mu_) = nullptr;
  grpc::ClientContext* watch_context_ ABSL_GUARDED_BY(mu_) = nullptr;
  // Keeps applies to the engine in order (taken before mu_, never after).
  Mutex apply_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  // The newest revision the engine's copy includes; older events are
  // skipped.
  int64_t applied_revision_ ABSL_GUARDED_BY(apply_mu_) = 0;

  std::thread campaign_thread_;
  std::thread keepalive_thread_;
  std::thread watch_thread_;
};

}  // namespace rescale::server

#endif  // RESCALE_SERVER_ETCD_ETCD_LEADERSHIP_H_
