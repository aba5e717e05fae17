// PlanPipeline (see plan_pipeline.h): a plan's sync, commit and
// checkpoint. The computation itself is in plan_compute.cc.
#include "src/engine/plan_pipeline.h"

#include <chrono>
#include <utility>

#include "spdlog/spdlog.h"

namespace rescale::engine {

PlanPipeline::PlanPipeline(const EngineOptions& options, Clock& clock, MetricsStore& store,
                           JobRegistry& registry, const JobViews& views, StateWriter* writer)
    : options_(options),
      clock_(clock),
      store_(store),
      registry_(registry),
      views_(views),
      writer_(writer) {}

// A plan in three steps, so that only the first and the last touch the
// registry's lock, each for time that grows with the jobs changed, not with
// all of them: SyncLocked copies into the plan's own slots the jobs changed
// since the last plan, and the capacity; ComputeLocked fits, runs the
// policies and the planner on the slots; CommitPlan (the registry) records
// and publishes the result. Meanwhile mutations and reads go on: a job
// registered after the sync waits for the next plan (its request asked for
// one), and a job deregistered or changed meanwhile is dropped by the commit
// when the recommendation no longer fits it.
void PlanPipeline::Replan(const std::atomic<bool>& leading) {
  MutexLock plan_lock(plan_mu_);
  if (!leading.load(std::memory_order_acquire)) return;  // a follower
  const auto started = std::chrono::steady_clock::now();
  // Read before the sync: the checkpoint this plan may write is stamped
  // `now`, and holds every change acknowledged before it only if the sync
  // came after (a job registered and measured between the two would
  // otherwise be older than the checkpoint and missing from it; seen under
  // load in the crash-restart test).
  const absl::Time now = clock_.Now();
  const CapacityState capacity = SyncLocked();
  if (options_.plan_compute_hook) options_.plan_compute_hook();
  store_.Tick(now);
  PlanResult result = ComputeLocked(capacity.total_gpus, now);
  PlanStats stats;
  stats.optimality_gap = result.gap;
  PlanSummary next;
  next.planned_at = now;
  next.utility = result.utility;
  next.upper_bound = result.upper_bound;
  next.gap = result.gap;
  next.exact = result.exact;
  next.queues = std::move(result.queues);
  next.queue_use = std::move(result.queue_use);
  next.type_speeds = type_speeds_;
  std::shared_ptr<WriteTicket> recorded =
      registry_.CommitPlan(std::move(result.recs), result.registrations, &stats.changes_by_action,
                           [this, &stats, &next](bool published) {
                             stats.published = published;
                             if (!published) return;
                             MutexLock lock(summary_mu_);
                             next.plans_run = summary_.plans_run + 1;
                             next.checkpointed_at = summary_.checkpointed_at;
                             summary_ = next;
                           });
  // The plan gate stays held until its generations are recorded: see the
  // header.
  if (recorded != nullptr) writer_->Wait(recorded).IgnoreError();
  if (options_.plan_observer) {
    stats.duration = absl::FromChrono(std::chrono::steady_clock::now() - started);
    options_.plan_observer(stats);
  }
  CheckpointLocked(now);
}

CapacityState PlanPipeline::SyncLocked() {
  RegistryChanges changes = registry_.TakeChanges();
  for (auto& [job_id, changed] : changes.jobs) {
    if (!changed.has_value()) {
      slots_.erase(job_id);
      continue;
    }
    JobEntry& entry = *changed;
    PlanSlot& slot = slots_[job_id];
    if (slot.entry.registration != entry.registration) {
      slot = PlanSlot();  // new, or registered again: nothing kept
      slot.entry = std::move(entry);
      continue;
    }
    // The plan's own memory stays; the cluster's changes come from the entry.
    PolicyMemory memory = std::move(slot.entry.memory);
    memory.previous_replicas = entry.memory.previous_replicas;
    memory.scale_events = entry.memory.scale_events;
    slot.entry = std::move(entry);
    slot.entry.memory = std::move(memory);
  }
  capacity_slots_ = changes.capacity.slots;
  capacity_gpu_types_ = changes.capacity.gpu_types;
  capacity_queues_ = changes.capacity.queues;
  return changes.capacity;
}

void PlanPipeline::Reset() {
  MutexLock plan_lock(plan_mu_);
  slots_.clear();
  planner_jobs_.clear();
  planner_job_sources_.clear();
  last_checkpoint_at_ = absl::InfinitePast();
  registry_.MarkAllChanged();
}

PlanSummary PlanPipeline::Summary() const {
  MutexLock lock(summary_mu_);
  return summary_;
}

void PlanPipeline::CheckpointLocked(absl::Time now) {
  if (writer_ == nullptr || now - last_checkpoint_at_ < options_.plan_interval) return;
  last_checkpoint_at_ = now;
  // In writes of at most this many jobs (the store's choice), each one
  // change in the writer's queue: a call's change waits behind at most one
  // of them, not behind the whole checkpoint.
  const size_t kJobsPerWrite = options_.state->checkpoint_jobs_per_write();
  const absl::Time started = absl::Now();  // the cost, for the log (not the injected clock)
  std::vector<StoredMeasurements> batch;
  std::vector<PlanSlot*> in_batch;
  size_t written = 0;
  auto flush = [&]() -> bool {
    if (batch.empty()) return true;
    const size_t jobs = batch.size();
    if (absl::Status kept = writer_->Wait(writer_->Submit(std::move(batch))); !kept.ok()) {
      // Tried again at the next checkpoint; nothing is lost but this window.
      spdlog::error("measurements of {} jobs not checkpointed: {}", jobs, kept.ToString());
      return false;
    }
    for (PlanSlot* slot : in_batch) {
      slot->checkpointed_fit = slot->fit_serial;
      slot->checkpointed_exploration_stopped = slot->entry.memory.exploration_stopped;
      slot->checkpointed_recommendations = slot->entry.memory.recommendations;
    }
    written += jobs;
    batch.clear();
    in_batch.clear();
    return true;
  };
  for (auto& [id, slot] : slots_) {
    const PolicyMemory& memory = slot.entry.memory;
    const bool memory_moved = memory.exploration_stopped != slot.checkpointed_exploration_stopped ||
                              memory.recommendations != slot.checkpointed_recommendations;
    if (slot.fitted == nullptr || (slot.fit_serial == slot.checkpointed_fit && !memory_moved))
      continue;
    batch.push_back({.job_id = id,
                     .sizes = slot.fitted->stats,
                     .exploration_stopped = memory.exploration_stopped,
                     .recent_recommendations = memory.recommendations});
    in_batch.push_back(&slot);
    if (batch.size() == kJobsPerWrite && !flush()) return;
  }
  if (!flush()) return;
  {
    MutexLock lock(summary_mu_);
    summary_.checkpointed_at = now;
  }
  if (written == 0) return;
  spdlog::debug("checkpointed the measurements of {} jobs to {} in {}", written,
                options_.state->Describe(), absl::FormatDuration(absl::Now() - started));
}

}  // namespace rescale::engine
