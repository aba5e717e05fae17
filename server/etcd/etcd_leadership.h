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
#ifndef RESCALE_SERVER_ETCD_ETCD_LEADERSHIP_H_
#define RESCALE_SERVER_ETCD_ETCD_LEADERSHIP_H_

#include <grpcpp/client_context.h>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "absl/time/time.h"
#include "rescale/decision_engine.h"
#include "server/etcd/etcd_client.h"
#include "server/etcd/etcd_state_store.h"
#include "server/leadership.h"

namespace rescale::server {

struct LeadershipOptions {
  // The election lease's TTL: how long a leader that stopped answering
  // (crashed, paused, cut off) keeps the others from taking over.
  absl::Duration lease_ttl = absl::Seconds(5);
  // What followers tell clients to call instead ("host:port").
  std::string advertise_address;
};

class EtcdLeadership final : public Leadership {
 public:
  EtcdLeadership(LeadershipOptions options, std::shared_ptr<EtcdClient> client,
                 std::shared_ptr<EtcdStateStore> store, DecisionEngine& engine,
                 std::function<void(bool leader)> on_role_change);
  ~EtcdLeadership() override;

  // Before Start: the address followers tell clients to call.
  void SetAdvertiseAddress(std::string address) { options_.advertise_address = std::move(address); }
  // Starts following (watching from the revision the engine's state was
  // loaded at) and campaigning.
  void Start();
  // Resigns (a leader hands over at once instead of after its TTL), revokes
  // the lease and stops the threads. Idempotent.
  void Stop();

  bool IsLeader() const override;
  std::string LeaderAddress() const override;
  std::string Describe() const override;

 private:
  void Campaign();
  void KeepAlive();
  void Watch();
  // Reloads the whole state into the engine; false (and the reason in
  // status_) when etcd cannot be read.
  bool Resync();
  void RefreshLeaderAddress();
  void SetStatus(std::string status);
  // Ends the term of `lease` (if it is still the current one).
  void LoseLease(int64_t lease, const std::string& why);

  LeadershipOptions options_;  // set before Start, read-only after
  const std::shared_ptr<EtcdClient> client_;
  const std::shared_ptr<EtcdStateStore> store_;
  DecisionEngine& engine_;
  const std::function<void(bool)> on_role_change_;

  mutable std::mutex mu_;
  std::condition_variable changed_;
  bool stopping_ = false;                          // guarded by mu_
  int64_t lease_ = 0;                              // guarded by mu_; 0 = none
  absl::Time lease_deadline_ = absl::InfinitePast();  // guarded by mu_
  bool leader_ = false;                            // guarded by mu_
  std::optional<v3electionpb::LeaderKey> leader_key_;  // guarded by mu_
  std::string leader_address_;                     // guarded by mu_
  std::string status_ = "starting";                // guarded by mu_
  grpc::ClientContext* campaign_context_ = nullptr;  // guarded by mu_
  grpc::ClientContext* watch_context_ = nullptr;     // guarded by mu_
  // The newest revision the engine's copy includes; older events are
  // skipped. Guarded by apply_mu_, which also keeps applies in order.
  std::mutex apply_mu_;
  int64_t applied_revision_ = 0;

  std::thread campaign_thread_;
  std::thread keepalive_thread_;
  std::thread watch_thread_;
};

}  // namespace rescale::server

#endif  // RESCALE_SERVER_ETCD_ETCD_LEADERSHIP_H_
