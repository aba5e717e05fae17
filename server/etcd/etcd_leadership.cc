// EtcdLeadership: the election, the lease and the follower's watch (see
// etcd_leadership.h for the rules).
#include "server/etcd/etcd_leadership.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "rescale/status_macros.h"

namespace rescale::server {
namespace {

// How long to wait before trying etcd again after it failed.
constexpr absl::Duration kRetryPause = absl::Milliseconds(250);

}  // namespace

absl::Status ValidateLeadershipOptions(const LeadershipOptions& options) {
  if (options.lease_ttl < LeadershipOptions::kMinLeaseTtl ||
      options.lease_ttl > LeadershipOptions::kMaxLeaseTtl) {
    return absl::InvalidArgumentError(absl::StrCat(
        "lease_ttl must be between ", absl::FormatDuration(LeadershipOptions::kMinLeaseTtl),
        " and ", absl::FormatDuration(LeadershipOptions::kMaxLeaseTtl), ", got ",
        absl::FormatDuration(options.lease_ttl)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<EtcdLeadership>> EtcdLeadership::Create(
    LeadershipOptions options, std::shared_ptr<EtcdClient> client,
    std::shared_ptr<EtcdStateStore> store, DecisionEngine& engine,
    std::function<void(bool leader)> on_role_change, Clock* clock) {
  RETURN_IF_ERROR(ValidateLeadershipOptions(options));
  if (client == nullptr) return absl::InvalidArgumentError("leadership: no etcd client given");
  if (store == nullptr) return absl::InvalidArgumentError("leadership: no etcd state store given");
  if (clock == nullptr) return absl::InvalidArgumentError("leadership: no clock given");
  return std::unique_ptr<EtcdLeadership>(new EtcdLeadership(std::move(options), std::move(client),
                                                            std::move(store), engine,
                                                            std::move(on_role_change), clock));
}

EtcdLeadership::EtcdLeadership(LeadershipOptions options, std::shared_ptr<EtcdClient> client,
                               std::shared_ptr<EtcdStateStore> store, DecisionEngine& engine,
                               std::function<void(bool)> on_role_change, Clock* clock)
    : options_(std::move(options)),
      client_(std::move(client)),
      store_(std::move(store)),
      engine_(engine),
      on_role_change_(std::move(on_role_change)),
      clock_(clock) {
  applied_revision_ = store_->last_load_revision();
  // A write refused for want of the lease means another replica may lead
  // already: stop leading now, not at the next renewal.
  store_->SetFenceLostCallback(
      [this](int64_t lease) { LoseLease(lease, "a write found the lease no longer held"); });
}

EtcdLeadership::~EtcdLeadership() { Stop(); }

void EtcdLeadership::Start() {
  // Taking mu_ orders the signal after a waiter's look at the clock, so a
  // jump between that look and its wait is not lost. Registered without
  // mu_ held: the listener takes mu_ under the clock's own lock, so that is
  // the only order the two are taken in.
  clock_listener_ = clock_->OnTimeChange([this] {
    MutexLock lock(mu_);
    changed_.SignalAll();
  });
  RefreshLeaderAddress();
  watch_thread_ = std::thread([this] { Watch(); });
  keepalive_thread_ = std::thread([this] { KeepAlive(); });
  campaign_thread_ = std::thread([this] { Campaign(); });
}

void EtcdLeadership::Stop() {
  int64_t lease = 0;
  {
    MutexLock lock(mu_);
    if (stopping_) return;
    stopping_ = true;
    lease = lease_;
    if (campaign_context_ != nullptr) campaign_context_->TryCancel();
    if (watch_context_ != nullptr) watch_context_->TryCancel();
    changed_.SignalAll();
  }
  if (campaign_thread_.joinable()) campaign_thread_.join();
  if (keepalive_thread_.joinable()) keepalive_thread_.join();
  if (watch_thread_.joinable()) watch_thread_.join();
  clock_listener_.reset();
  // Revoking the lease deletes the election key: a follower takes over at
  // once instead of after the TTL.
  if (lease != 0) {
    if (absl::Status revoked = client_->LeaseRevoke(lease); !revoked.ok()) {
      spdlog::warn("could not revoke the etcd lease {:x} ({}); it expires in {}", lease,
                   revoked.ToString(), absl::FormatDuration(options_.lease_ttl));
    }
  }
}

bool EtcdLeadership::IsLeader() const {
  MutexLock lock(mu_);
  // The deadline too: right after a pause (SIGSTOP, a long GC of the
  // machine) the renewing thread may not have run yet.
  return leader_ && clock_->Now() < lease_deadline_;
}

std::string EtcdLeadership::LeaderAddress() const {
  MutexLock lock(mu_);
  // A leader whose lease's deadline passed (paused, cut off) may already
  // have been replaced: it does not name itself until it knows.
  if (leader_ && clock_->Now() >= lease_deadline_) return "";
  return leader_address_;
}

std::string EtcdLeadership::Describe() const {
  MutexLock lock(mu_);
  return status_;
}

void EtcdLeadership::SetStatus(std::string status) {
  MutexLock lock(mu_);
  if (status != status_) spdlog::info("leadership: {}", status);
  status_ = std::move(status);
}

void EtcdLeadership::LoseLease(int64_t lease, const std::string& why) {
  MutexLock lock(mu_);
  // A write fenced on an earlier lease (slow, retried across members) must
  // not end the term of the current one.
  if (lease_ == 0 || lease_ != lease) return;
  spdlog::warn("leadership: lost the etcd lease {:x}: {}", lease_, why);
  status_ = absl::StrCat("not leading: ", why);
  lease_ = 0;
  lease_deadline_ = absl::InfinitePast();
  if (campaign_context_ != nullptr) campaign_context_->TryCancel();
  changed_.SignalAll();
}

void EtcdLeadership::RefreshLeaderAddress() {
  uint64_t role_changes = 0;
  {
    MutexLock lock(mu_);
    role_changes = role_changes_;
  }
  absl::StatusOr<std::string> leader = client_->Leader(store_->election_name());
  MutexLock lock(mu_);
  if (leader_) return;
  // This replica was elected or stepped down while the read was in flight:
  // it may describe the time before (and a refresh follows the step-down).
  if (role_changes != role_changes_) return;
  // A replica that does not lead never names itself: a read sent before it
  // stepped down (paused past its lease, say) may still name it, and a
  // client sent here would only be refused again.
  if (leader.ok() && *leader == options_.advertise_address) return;
  if (leader.ok()) {
    leader_address_ = *leader;
    if (lease_ != 0) status_ = absl::StrCat("follower of ", *leader);
  } else if (absl::IsNotFound(leader.status())) {
    leader_address_.clear();
  }
}

bool EtcdLeadership::Resync() {
  MutexLock apply(apply_mu_);
  {
    // A leader's engine is ahead of any snapshot (its writes go to etcd
    // before they are acknowledged, but a snapshot read before them would
    // undo them): it reloads nothing, and its watch starts afresh from now.
    MutexLock lock(mu_);
    if (leader_) {
      applied_revision_ = 0;
      return true;
    }
  }
  absl::StatusOr<StoredState> state = store_->Load();
  if (!state.ok()) {
    SetStatus(absl::StrCat("not leading: ", state.status().message()));
    return false;
  }
  engine_.ApplyReplicated(ReplicatedChange::Full(*std::move(state)));
  applied_revision_ = store_->last_load_revision();
  return true;
}

void EtcdLeadership::Campaign() {
  bool synced = true;  // the engine was loaded at start
  while (true) {
    {
      MutexLock lock(mu_);
      if (stopping_) return;
    }
    if (!synced) synced = Resync();
    RefreshLeaderAddress();  // who leads now (after a step-down, not us)
    int64_t lease = 0;
    {
      MutexLock lock(mu_);
      lease = lease_;
    }
    if (lease == 0) {
      const absl::Time asked = clock_->Now();
      absl::StatusOr<int64_t> granted = client_->LeaseGrant(options_.lease_ttl);
      if (!granted.ok()) {
        SetStatus(absl::StrCat("not leading: no etcd lease (", granted.status().message(), ")"));
        MutexLock lock(mu_);
        PauseBeforeRetry();
        continue;
      }
      lease = *granted;
      MutexLock lock(mu_);
      lease_ = lease;
      lease_deadline_ = asked + options_.lease_ttl;
      status_ =
          leader_address_.empty() ? "campaigning" : absl::StrCat("follower of ", leader_address_);
      changed_.SignalAll();  // the renewing thread takes the new lease
    }

    grpc::ClientContext context;
    // Bounded, then campaigned again (the same lease keeps its place): a
    // member cut off from quorum would otherwise hold the campaign forever.
    // An RPC's timeout is real time (gRPC's), not clock_'s.
    context.set_deadline(
        std::chrono::system_clock::now() +
        absl::ToChronoNanoseconds(std::max(absl::Seconds(10), 2 * options_.lease_ttl)));
    {
      MutexLock lock(mu_);
      if (stopping_ || lease_ != lease) continue;
      campaign_context_ = &context;
    }
    absl::StatusOr<v3electionpb::LeaderKey> won =
        client_->Campaign(store_->election_name(), lease, options_.advertise_address, &context);
    {
      MutexLock lock(mu_);
      campaign_context_ = nullptr;
    }
    if (!won.ok()) {
      // The lease ended (LoseLease cancelled us), we are stopping, or etcd
      // failed: a new lease or the same one again, after a pause.
      spdlog::debug("campaign ended: {}", won.status().ToString());
      MutexLock lock(mu_);
      PauseBeforeRetry();
      continue;
    }

    // Elected. Everything the last leader wrote was fenced on a lease that
    // has ended, so the state read now is complete.
    store_->SetFence(EtcdStateStore::Fence{won->key(), lease});
    if (!Resync()) {
      store_->SetFence(std::nullopt);
      client_->Resign(*won).IgnoreError();
      synced = false;
      continue;
    }
    {
      MutexLock lock(mu_);
      if (stopping_ || lease_ != lease) {
        store_->SetFence(std::nullopt);
        synced = false;
        // Leave the election key to nobody: the others need not wait out
        // its TTL.
        std::thread([client = client_, key = *won] { client->Resign(key).IgnoreError(); }).detach();
        continue;
      }
      leader_ = true;
      ++role_changes_;
      leader_key_ = *won;
      leader_address_ = options_.advertise_address;
      status_ = "leader";
    }
    spdlog::info("leadership: elected leader (lease {:x}, key {})", lease, won->key());
    // Ready for traffic first (it takes writes from now on), then the
    // first plan, which may take a while for many jobs.
    if (on_role_change_) on_role_change_(true);
    engine_.SetLeading(true);

    {
      MutexLock lock(mu_);
      while (!stopping_ && lease_ == lease) changed_.Wait(mu_);
    }
    // Step down: no write gets through from here on, and the engine stops
    // planning (a plan under way publishes nothing it cannot write).
    store_->SetFence(std::nullopt);
    {
      MutexLock lock(mu_);
      leader_ = false;
      ++role_changes_;
      leader_key_.reset();
      leader_address_.clear();
    }
    engine_.SetLeading(false);
    if (on_role_change_) on_role_change_(false);
    spdlog::info("leadership: stepped down");
    // What this replica held but never wrote is dropped: the state in etcd
    // is the truth.
    synced = false;
  }
}

void EtcdLeadership::KeepAlive() {
  const absl::Duration every = options_.lease_ttl / 3;
  absl::Time next = absl::InfinitePast();
  int64_t renewing = 0;
  std::string last_failure;  // of the renewals since the last success
  mu_.Lock();
  while (!stopping_) {
    if (lease_ == 0) {
      changed_.Wait(mu_);
      continue;
    }
    if (lease_ != renewing) {
      renewing = lease_;
      next = clock_->Now() + every;
    }
    const absl::Time now = clock_->Now();
    if (now < next && now < lease_deadline_) {
      WaitOnClock(std::min(next, lease_deadline_));
      continue;  // looks again: a new lease, stopping, or the moment came
    }
    if (now >= lease_deadline_) {
      // Paused, or etcd unreachable, past the TTL: another replica may lead.
      mu_.Unlock();
      LoseLease(renewing, absl::StrFormat("the lease was not renewed within its TTL (%s)%s",
                                          absl::FormatDuration(options_.lease_ttl),
                                          last_failure.empty()
                                              ? " (this process was paused, or etcd did not answer)"
                                              : absl::StrCat("; etcd: ", last_failure)));
      last_failure.clear();
      mu_.Lock();
      continue;
    }
    const int64_t lease = renewing;
    const absl::Time sent = now;
    mu_.Unlock();
    // Each member gets a share of the TTL, so a paused one leaves time to
    // renew through another.
    absl::StatusOr<absl::Duration> ttl = client_->LeaseKeepAliveOnce(lease, options_.lease_ttl / 4);
    mu_.Lock();
    if (lease_ != lease) continue;
    if (ttl.ok() && *ttl > absl::ZeroDuration()) {
      if (!last_failure.empty()) {
        // Renewed again: say so instead of the last failure.
        status_ = leader_
                      ? "leader"
                      : (leader_address_.empty() ? "campaigning"
                                                 : absl::StrCat("follower of ", leader_address_));
      }
      last_failure.clear();
      lease_deadline_ = sent + options_.lease_ttl;
      next = sent + every;
      continue;
    }
    if (ttl.ok()) {
      mu_.Unlock();
      LoseLease(lease, "etcd says the lease expired");
      mu_.Lock();
      continue;
    }
    // Renewal failed (etcd down or without quorum): try again soon; the
    // deadline decides when to give up.
    last_failure = std::string(ttl.status().message());
    status_ = absl::StrCat(leader_ ? "leader, " : "", "cannot renew the lease: ", last_failure);
    next = clock_->Now() + std::min(every, kRetryPause);
  }
  mu_.Unlock();
}

void EtcdLeadership::WaitOnClock(absl::Time deadline) {
  changed_.WaitFor(mu_, clock_->RealTimeUntil(deadline));
}

void EtcdLeadership::PauseBeforeRetry() {
  const auto until = std::chrono::steady_clock::now() + absl::ToChronoNanoseconds(kRetryPause);
  while (!stopping_ && changed_.WaitUntil(mu_, until)) {
  }
}

void EtcdLeadership::Watch() {
  const std::string begin = store_->prefix() + "/";
  const std::string election = store_->election_name() + "/";
  while (true) {
    grpc::ClientContext context;
    int64_t from = 0;
    {
      MutexLock apply(apply_mu_);
      from = applied_revision_ + 1;
    }
    {
      MutexLock lock(mu_);
      if (stopping_) return;
      watch_context_ = &context;
    }
    // A member cut off from the others' quorum refuses the watch instead of
    // keeping it silently stale.
    context.AddMetadata("hasleader", "true");
    auto stub = etcdserverpb::Watch::NewStub(client_->CurrentChannel());
    auto stream = stub->Watch(&context);
    etcdserverpb::WatchRequest request;
    etcdserverpb::WatchCreateRequest* create = request.mutable_create_request();
    create->set_key(begin);
    create->set_range_end(PrefixEnd(begin));
    if (from > 1) create->set_start_revision(from);  // else from now (a leader's resync)
    bool must_resync = false;
    if (stream->Write(request)) {
      etcdserverpb::WatchResponse response;
      while (stream->Read(&response)) {
        if (response.compact_revision() > 0 || response.canceled()) {
          must_resync = true;  // the revisions we need are gone
          break;
        }
        bool election_changed = false;
        ReleasableMutexLock apply(apply_mu_);
        bool leading = false;
        {
          MutexLock lock(mu_);
          leading = leader_;
        }
        // One change per revision (one etcd transaction), applied in order.
        ReplicatedChange change;
        int64_t revision = 0;
        auto flush = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(apply_mu_) {
          if (!change.empty() && !leading) engine_.ApplyReplicated(std::move(change));
          change = ReplicatedChange();
          applied_revision_ = std::max(applied_revision_, revision);
        };
        for (const mvccpb::Event& event : response.events()) {
          if (event.kv().key().starts_with(election)) {
            election_changed = true;
            continue;
          }
          if (event.kv().mod_revision() <= applied_revision_) continue;
          if (event.kv().mod_revision() != revision) {
            flush();
            revision = event.kv().mod_revision();
          }
          if (absl::Status added = store_->AddEvent(event, change); !added.ok()) {
            spdlog::error("leadership: a watched change does not decode: {}", added.ToString());
          }
        }
        flush();
        apply.Release();
        if (election_changed) RefreshLeaderAddress();
      }
    }
    context.TryCancel();
    (void)stream->Finish();
    {
      MutexLock lock(mu_);
      watch_context_ = nullptr;
      if (stopping_) return;
      PauseBeforeRetry();
      if (stopping_) return;
    }
    if (must_resync) Resync();
  }
}

}  // namespace rescale::server
