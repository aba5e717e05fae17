// JobRegistry (see job_registry.h): registration, changes, capacity, the
// read shards and a plan's sync and commit. Restore and replication are in
// job_registry_restore.cc.
#include "src/engine/job_registry.h"

#include <algorithm>
#include <utility>

#include "absl/hash/hash.h"
#include "absl/strings/str_format.h"
#include "rescale/job_rules.h"
#include "rescale/status_macros.h"
#include "spdlog/spdlog.h"
#include "src/engine/board_delivery.h"

namespace rescale::engine {

JobRegistry::JobRegistry(int max_jobs, Clock& clock, MetricsStore& store,
                         RecommendationBoard& board, StateWriter* writer, Normalizer normalize,
                         std::optional<uint32_t> capacity_gpus)
    : max_jobs_(max_jobs),
      clock_(clock),
      store_(store),
      board_(board),
      writer_(writer),
      normalize_(std::move(normalize)) {
  MutexLock lock(mu_);
  capacity_.total_gpus = capacity_gpus;
}

JobRegistry::ReadShard& JobRegistry::ShardOf(std::string_view job_id) const {
  return read_shards_[absl::HashOf(job_id) % kReadShards];
}

void JobRegistry::PublishLocked(const JobEntry& entry) {
  auto published = std::make_shared<const JobEntry>(entry);
  ReadShard& shard = ShardOf(entry.spec.job_id);
  MutexLock lock(shard.mu);
  shard.jobs[entry.spec.job_id] = std::move(published);
}

void JobRegistry::UnpublishLocked(const std::string& job_id) {
  ReadShard& shard = ShardOf(job_id);
  MutexLock lock(shard.mu);
  shard.jobs.erase(job_id);
}

std::shared_ptr<const JobEntry> JobRegistry::Find(const std::string& job_id) const {
  ReadShard& shard = ShardOf(job_id);
  MutexLock lock(shard.mu);
  auto it = shard.jobs.find(job_id);
  return it == shard.jobs.end() ? nullptr : it->second;
}

std::vector<std::shared_ptr<const JobEntry>> JobRegistry::Published(
    const std::string& namespace_filter) const {
  std::vector<std::shared_ptr<const JobEntry>> entries;
  for (ReadShard& shard : read_shards_) {
    MutexLock lock(shard.mu);
    for (const auto& [id, entry] : shard.jobs) {
      if (InNamespace(id, namespace_filter)) entries.push_back(entry);
    }
  }
  std::sort(entries.begin(), entries.end(),
            [](const auto& a, const auto& b) { return a->spec.job_id < b->spec.job_id; });
  return entries;
}

void JobRegistry::ForEachPublished(const std::function<void(const JobEntry&)>& visit) const {
  for (ReadShard& shard : read_shards_) {
    std::vector<std::shared_ptr<const JobEntry>> entries;
    {
      MutexLock lock(shard.mu);
      entries.reserve(shard.jobs.size());
      for (const auto& [id, entry] : shard.jobs) entries.push_back(entry);
    }
    for (const auto& entry : entries) visit(*entry);
  }
}

bool JobRegistry::Contains(const std::string& job_id) const {
  MutexLock lock(mu_);
  return jobs_.contains(job_id);
}

void JobRegistry::AwaitIdleLocked(const std::string& job_id) {
  idle_cv_.Wait(mu_,
                [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !in_flight_.contains(job_id); });
}

void JobRegistry::InsertLocked(JobEntry& entry) {
  entry.registration = entry.version = entry.spec_version = ++change_counter_;
  auto it = jobs_.insert_or_assign(entry.spec.job_id, entry).first;
  dirty_.insert(it->first);
  PublishLocked(it->second);
}

void JobRegistry::ReplaceLocked(JobEntry& entry, bool spec_changed) {
  entry.version = ++change_counter_;
  if (spec_changed) entry.spec_version = entry.version;
  auto it = jobs_.find(entry.spec.job_id);
  it->second = entry;
  dirty_.insert(it->first);
  PublishLocked(it->second);
}

void JobRegistry::RemoveLocked(const std::string& job_id) {
  jobs_.erase(job_id);
  dirty_.insert(job_id);
  UnpublishLocked(job_id);
  store_.RemoveJob(job_id);
  board_.StageRemove(job_id);
}

absl::StatusOr<JobEntry> JobRegistry::PrepareRegistrationLocked(JobSpec spec) {
  AwaitIdleLocked(spec.job_id);
  if (jobs_.contains(spec.job_id)) {
    return absl::AlreadyExistsError(absl::StrFormat(
        "job \"%s\" is already registered; use UpdateJob to change its spec", spec.job_id));
  }
  if (static_cast<int>(jobs_.size()) + registrations_in_flight_ >= max_jobs_) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("cannot register \"%s\": %d jobs are registered, the limit (--max_jobs)",
                        spec.job_id, max_jobs_));
  }
  RETURN_IF_ERROR(store_.AddJob(spec.job_id, spec.max_replicas, spec.local_batch_size));
  JobEntry entry;
  entry.spec = std::move(spec);
  entry.status.registered_at = clock_.Now();
  return entry;
}

std::shared_ptr<WriteTicket> JobRegistry::SubmitRegistrationLocked(JobEntry entry,
                                                                   std::shared_ptr<JobEntry> out) {
  if (writer_ == nullptr) {
    InsertLocked(entry);
    *out = std::move(entry);
    return nullptr;
  }
  const std::string id = entry.spec.job_id;
  in_flight_[id] = InFlight::kChange;
  ++registrations_in_flight_;
  StoredJob kept = StoredJobOf(entry);
  return writer_->Submit(
      std::move(kept), [this, entry = std::move(entry), out](const absl::Status& written) mutable {
        {
          MutexLock lock(mu_);
          in_flight_.erase(entry.spec.job_id);
          --registrations_in_flight_;
          if (written.ok()) {
            InsertLocked(entry);
            *out = std::move(entry);
          } else {
            store_.RemoveJob(entry.spec.job_id);
          }
        }
        idle_cv_.SignalAll();
      });
}

absl::StatusOr<JobEntry> JobRegistry::Register(JobSpec spec) {
  auto out = std::make_shared<JobEntry>();
  std::shared_ptr<WriteTicket> ticket;
  {
    MutexLock lock(mu_);
    ASSIGN_OR_RETURN(JobEntry entry, PrepareRegistrationLocked(std::move(spec)));
    ticket = SubmitRegistrationLocked(std::move(entry), out);
  }
  if (ticket != nullptr) RETURN_IF_ERROR(writer_->Wait(ticket));
  return std::move(*out);
}

std::vector<std::string> JobRegistry::RegisterAll(std::vector<JobSpec> specs) {
  std::vector<std::pair<std::string, std::shared_ptr<WriteTicket>>> submitted;
  std::vector<std::string> registered;
  {
    MutexLock lock(mu_);
    for (JobSpec& spec : specs) {
      if (jobs_.contains(spec.job_id) || in_flight_.contains(spec.job_id)) continue;
      std::string id = spec.job_id;
      absl::StatusOr<JobEntry> entry = PrepareRegistrationLocked(std::move(spec));
      if (!entry.ok()) continue;  // a limit: the samples' rejection stands
      auto ticket = SubmitRegistrationLocked(*std::move(entry), std::make_shared<JobEntry>());
      if (ticket == nullptr) {
        registered.push_back(std::move(id));
      } else {
        submitted.emplace_back(std::move(id), std::move(ticket));
      }
    }
  }
  for (auto& [id, ticket] : submitted) {
    if (writer_->Wait(ticket).ok()) registered.push_back(std::move(id));
  }
  return registered;
}

absl::StatusOr<JobEntry> JobRegistry::Update(JobSpec spec) {
  auto out = std::make_shared<JobEntry>();
  std::shared_ptr<WriteTicket> ticket;
  {
    MutexLock lock(mu_);
    AwaitIdleLocked(spec.job_id);
    auto it = jobs_.find(spec.job_id);
    if (it == jobs_.end()) {
      return absl::NotFoundError(
          absl::StrFormat("job \"%s\" is not registered; use RegisterJob to add it", spec.job_id));
    }
    JobEntry changed = it->second;
    changed.spec = std::move(spec);
    auto apply = [this, out](JobEntry& entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
      // The store's limits for the job follow its spec (it was checked).
      RETURN_IF_ERROR(
          store_.AddJob(entry.spec.job_id, entry.spec.max_replicas, entry.spec.local_batch_size));
      ReplaceLocked(entry, /*spec_changed=*/true);
      *out = entry;
      return absl::OkStatus();
    };
    if (writer_ == nullptr) {
      RETURN_IF_ERROR(apply(changed));
      return std::move(*out);
    }
    in_flight_[changed.spec.job_id] = InFlight::kChange;
    StoredJob kept = StoredJobOf(changed);
    ticket = writer_->Submit(std::move(kept), [this, changed = std::move(changed),
                                               apply](const absl::Status& written) mutable {
      {
        MutexLock lock(mu_);
        in_flight_.erase(changed.spec.job_id);
        if (written.ok()) {
          absl::Status applied = apply(changed);
          if (!applied.ok()) spdlog::error("job {}: {}", changed.spec.job_id, applied.ToString());
        }
      }
      idle_cv_.SignalAll();
    });
  }
  RETURN_IF_ERROR(writer_->Wait(ticket));
  return std::move(*out);
}

absl::Status JobRegistry::Deregister(const std::string& job_id) {
  std::shared_ptr<WriteTicket> ticket;
  {
    const DeliverOnExit deliver(board_);  // after the lock below is released
    MutexLock lock(mu_);
    AwaitIdleLocked(job_id);
    if (!jobs_.contains(job_id)) {
      return absl::NotFoundError(absl::StrFormat("job \"%s\" is not registered", job_id));
    }
    if (writer_ == nullptr) {
      RemoveLocked(job_id);
      return absl::OkStatus();
    }
    // Plans committed from now on leave the job out (CommitPlan), so this
    // is its last generation.
    const std::optional<Recommendation> last = board_.Get(job_id);
    in_flight_[job_id] = InFlight::kDelete;
    ticket = writer_->Submit(DeletedJob{job_id, last ? last->generation : 0},
                             [this, job_id](const absl::Status& written) {
                               {
                                 const DeliverOnExit deliver(board_);
                                 MutexLock lock(mu_);
                                 in_flight_.erase(job_id);
                                 if (written.ok()) RemoveLocked(job_id);
                               }
                               idle_cv_.SignalAll();
                             });
  }
  return writer_->Wait(ticket);
}

absl::StatusOr<JobEntry> JobRegistry::Apply(const std::string& job_id, uint32_t replicas,
                                            bool suspended, uint64_t generation) {
  auto out = std::make_shared<JobEntry>();
  std::shared_ptr<WriteTicket> ticket;
  {
    MutexLock lock(mu_);
    AwaitIdleLocked(job_id);
    auto it = jobs_.find(job_id);
    if (it == jobs_.end()) {
      return absl::NotFoundError(absl::StrFormat("job \"%s\" is not registered", job_id));
    }
    // Changed on a copy, which replaces the entry once it is recorded.
    JobEntry entry = it->second;
    if (replicas > entry.spec.max_replicas) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "replicas %d exceeds the job's max_replicas %d", replicas, entry.spec.max_replicas));
    }
    std::optional<Recommendation> latest = board_.Get(job_id);
    const uint64_t latest_generation = latest ? latest->generation : 0;
    if (generation > latest_generation) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "generation %d is newer than the job's latest recommendation (generation %d)", generation,
          latest_generation));
    }
    const absl::Time now = clock_.Now();
    const uint32_t running_before = RunningReplicas(entry.status);
    JobStatus after;
    after.current_replicas = replicas;
    after.suspended = suspended;
    const uint32_t running_after = RunningReplicas(after);
    if (entry.has_applied && running_after != running_before) {
      // A change the cluster made: starts the cooldown and feeds the
      // policies' memory (previous size, HPA scale events).
      entry.last_change_at = now;
      entry.memory.previous_replicas = running_before;
      entry.memory.scale_events.emplace_back(
          now, static_cast<int32_t>(running_after) - static_cast<int32_t>(running_before));
      auto& events = entry.memory.scale_events;
      if (events.size() > 64) events.erase(events.begin(), events.end() - 64);
    }
    if (running_after > 0 && running_before == 0) entry.started_at = now;
    if (running_after == 0 && running_before > 0) entry.stopped_at = now;
    entry.has_applied = true;
    entry.status.current_replicas = replicas;
    entry.status.suspended = suspended;
    if (generation != 0) {
      entry.status.last_applied_generation =
          std::max(entry.status.last_applied_generation, generation);
    }
    entry.status.last_applied_at = now;
    if (writer_ == nullptr) {
      ReplaceLocked(entry, /*spec_changed=*/false);
      return entry;
    }
    in_flight_[job_id] = InFlight::kChange;
    StoredJob kept = StoredJobOf(entry);
    ticket = writer_->Submit(std::move(kept), [this, entry = std::move(entry),
                                               out](const absl::Status& written) mutable {
      {
        MutexLock lock(mu_);
        in_flight_.erase(entry.spec.job_id);
        if (written.ok()) {
          ReplaceLocked(entry, /*spec_changed=*/false);
          *out = std::move(entry);
        }
      }
      idle_cv_.SignalAll();
    });
  }
  RETURN_IF_ERROR(writer_->Wait(ticket));
  return std::move(*out);
}

absl::Status JobRegistry::SetCapacity(const CapacityReport& report) {
  std::shared_ptr<WriteTicket> ticket;
  {
    MutexLock lock(mu_);
    idle_cv_.Wait(mu_,
                  [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !capacity_in_flight_; });
    CapacityState next{report.total_gpus, report.slots, report.allocatable_gpus};
    if (writer_ == nullptr) {
      capacity_ = std::move(next);
      return absl::OkStatus();
    }
    capacity_in_flight_ = true;
    ticket = writer_->Submit(report,
                             [this, next = std::move(next)](const absl::Status& written) mutable {
                               {
                                 MutexLock lock(mu_);
                                 capacity_in_flight_ = false;
                                 if (written.ok()) capacity_ = std::move(next);
                               }
                               idle_cv_.SignalAll();
                             });
  }
  return writer_->Wait(ticket);
}

CapacityState JobRegistry::Capacity() const {
  MutexLock lock(mu_);
  return capacity_;
}

void JobRegistry::MarkAllChanged() {
  MutexLock lock(mu_);
  for (const auto& [id, entry] : jobs_) dirty_.insert(id);
}

RegistryChanges JobRegistry::TakeChanges() {
  RegistryChanges changes;
  MutexLock lock(mu_);
  changes.jobs.reserve(dirty_.size());
  for (const std::string& job_id : dirty_) {
    auto live = jobs_.find(job_id);
    changes.jobs.emplace_back(
        job_id, live == jobs_.end() ? std::nullopt : std::optional<JobEntry>(live->second));
  }
  dirty_.clear();
  changes.capacity = capacity_;
  return changes;
}

std::shared_ptr<WriteTicket> JobRegistry::CommitPlan(
    std::vector<Recommendation> recs, const std::vector<uint64_t>& registrations,
    std::array<uint64_t, kActionCount>* changes_by_action, std::function<void(bool)> done) {
  // Generations go to the state store before anyone can see them, so a
  // restart never hands out a generation again for another target. They are
  // computed before the lock: only a deregistration or registration can
  // change the board meanwhile, and the filter below drops those jobs.
  std::vector<size_t> changed;
  if (writer_ != nullptr) changed = board_.AssignGenerations(recs);
  std::vector<bool> changed_at(recs.size(), false);
  for (size_t i : changed) changed_at[i] = true;

  const DeliverOnExit deliver(board_);  // after the lock below is released
  MutexLock lock(mu_);
  // The jobs changed since the sync are in dirty_ again. A deregistered
  // one gets no recommendation back, nor one whose deregistration is in
  // flight (its last generation is being recorded); one registered again
  // is planned anew by the next plan; one with a new spec or applied state
  // keeps this recommendation unless its spec now rules it out (its own
  // plan is due). The plan's recommendations are in job id order (the
  // slots'), so each such job is found by a binary search: the time under
  // the lock grows with the jobs that moved, not with all of them.
  std::vector<bool> dropped(recs.size(), false);
  bool any_dropped = false;
  const auto find = [&](const std::string& id) -> std::optional<size_t> {
    auto it = std::lower_bound(
        recs.begin(), recs.end(), id,
        [](const Recommendation& r, const std::string& key) { return r.job_id < key; });
    if (it == recs.end() || it->job_id != id) return std::nullopt;
    return static_cast<size_t>(it - recs.begin());
  };
  for (const std::string& id : dirty_) {
    const std::optional<size_t> i = find(id);
    if (!i.has_value()) continue;
    auto live = jobs_.find(id);
    const Recommendation& rec = recs[*i];
    bool drop = live == jobs_.end() || live->second.registration != registrations[*i];
    if (!drop) {
      const JobSpec& spec = live->second.spec;
      drop = rec.replicas > spec.max_replicas ||
             (rec.replicas != 0 && rec.replicas < spec.min_replicas);
    }
    if (drop) dropped[*i] = any_dropped = true;
  }
  for (const auto& [id, flight] : in_flight_) {
    if (flight != InFlight::kDelete) continue;
    if (const std::optional<size_t> i = find(id); i.has_value()) dropped[*i] = any_dropped = true;
  }
  std::vector<Recommendation> to_record;
  if (any_dropped || !changed.empty()) {
    std::vector<Recommendation> kept;
    kept.reserve(recs.size());
    for (size_t i = 0; i < recs.size(); ++i) {
      if (dropped[i]) continue;
      if (changed_at[i]) to_record.push_back(recs[i]);
      kept.push_back(std::move(recs[i]));
    }
    recs = std::move(kept);
  }
  if (to_record.empty()) {
    // Staged here, under mu_: a deregistration cannot come between the
    // filter and the board (its removal is made under mu_ too).
    board_.Stage(std::move(recs), changes_by_action);
    done(true);
    return nullptr;
  }
  std::vector<Recommendation> spent = to_record;
  // Submitted under mu_, so that a deregistration decided after this point
  // is written after these generations, and one decided before was left out.
  // Once they are durable, the group's writer stages them: every change of
  // the board (this plan, a deregistration's removal) is made in a
  // completion, one group at a time and in the queue's order, so staging
  // needs no lock of the registry's.
  return writer_->Submit(
      std::move(to_record),
      [this, recs = std::move(recs), spent = std::move(spent), changes_by_action,
       done = std::move(done)](const absl::Status& written) mutable {
        const DeliverOnExit deliver(board_);
        if (!written.ok()) {
          spdlog::error("plan not published: its {} new generations could not be recorded: {}",
                        spent.size(), written.ToString());
          // The write may have landed all the same (a timeout, or some of
          // its transactions): those generations are spent.
          board_.ReserveGenerations(spent);
          done(false);
          return;
        }
        board_.Stage(std::move(recs), changes_by_action);
        done(true);
      });
}

}  // namespace rescale::engine
