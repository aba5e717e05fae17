// JobRegistry (see job_registry.h): the entries, the read shards, and a
// plan's sync and commit. The mutations are in job_registry_changes.cc,
// restore and replication in job_registry_restore.cc.
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
