// JobRegistry (see job_registry.h): what a state store kept, put back at
// creation (Restore), and what the leader recorded, applied by a follower
// (ApplyReplicated). Neither writes to the state store: both bring memory
// up to what is already durable.
#include <utility>

#include "absl/strings/str_format.h"
#include "rescale/status_macros.h"
#include "spdlog/spdlog.h"
#include "src/engine/board_delivery.h"
#include "src/engine/job_registry.h"

namespace rescale::engine {

absl::Status JobRegistry::Restore(StoredState& stored, std::string_view described) {
  MutexLock lock(mu_);
  if (static_cast<int>(stored.jobs.size()) > max_jobs_) {
    return absl::FailedPreconditionError(
        absl::StrFormat("%s holds %d jobs, more than --max_jobs (%d); raise --max_jobs", described,
                        stored.jobs.size(), max_jobs_));
  }
  for (StoredJob& kept : stored.jobs) {
    absl::StatusOr<JobSpec> spec = normalize_(kept.spec);
    if (!spec.ok()) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "%s: the kept spec of job %s is not valid on this server (%s); start with the "
          "limits and policies it was registered under",
          described, kept.spec.job_id, spec.status().message()));
    }
    RETURN_IF_ERROR(store_.AddJob(spec->job_id, spec->max_replicas, spec->local_batch_size));
    JobEntry entry;
    FillFromStored(entry, *std::move(spec), kept);
    InsertLocked(entry);
  }
  for (StoredMeasurements& measured : stored.measurements) RestoreMeasurementsLocked(measured);
  if (stored.capacity_gpus.has_value()) capacity_.total_gpus = stored.capacity_gpus;
  capacity_.slots = std::move(stored.capacity_slots);
  capacity_.allocatable_gpus = stored.capacity_allocatable_gpus;
  capacity_.gpu_types = std::move(stored.capacity_gpu_types);
  capacity_.queues = std::move(stored.queues);
  // Recommendations of jobs no longer kept (none, unless the file was
  // edited) would have no job to describe.
  std::erase_if(stored.recommendations, [&](const Recommendation& rec) {
    mu_.AssertHeld();  // erase_if runs it here, under mu_
    return !jobs_.contains(rec.job_id);
  });
  board_.Restore(std::move(stored.recommendations), std::move(stored.retired_generations));
  spdlog::info("restored {} jobs from {}", jobs_.size(), described);
  return absl::OkStatus();
}

void JobRegistry::RestoreMeasurementsLocked(StoredMeasurements& measured) {
  auto it = jobs_.find(measured.job_id);
  if (it == jobs_.end()) return;
  it->second.restored = std::make_shared<const std::vector<SizeStats>>(std::move(measured.sizes));
  // The plans' own policy memory: the job's plan slot takes it from the
  // entry when it is created, and keeps its own after.
  it->second.memory.exploration_stopped = measured.exploration_stopped;
  it->second.memory.recommendations = std::move(measured.recent_recommendations);
  dirty_.insert(it->first);
  PublishLocked(it->second);
}

void JobRegistry::ApplyReplicated(ReplicatedChange& change) {
  const DeliverOnExit deliver(board_);  // after the lock below is released
  MutexLock lock(mu_);
  absl::flat_hash_set<std::string> kept_ids;
  for (StoredJob& kept : change.jobs) {
    absl::StatusOr<JobSpec> spec = normalize_(kept.spec);
    absl::Status added =
        spec.ok() ? store_.AddJob(spec->job_id, spec->max_replicas, spec->local_batch_size)
                  : spec.status();
    if (!added.ok()) {
      spdlog::error("job {} as the leader recorded it is not valid on this server ({}); left out",
                    kept.spec.job_id, std::string(added.message()));
      continue;
    }
    kept_ids.insert(spec->job_id);
    auto [it, inserted] = jobs_.try_emplace(spec->job_id);
    const bool registered_again =
        !inserted && it->second.status.registered_at != kept.registered_at;
    FillFromStored(it->second, *std::move(spec), kept);
    it->second.version = it->second.spec_version = ++change_counter_;
    if (inserted || registered_again) {
      it->second.registration = it->second.version;
      it->second.restored.reset();
      // The earlier registration's recommendation is not this job's; the
      // leader's own comes with the change (or its next plan).
      if (registered_again) board_.StageRemove(it->first);
    }
    dirty_.insert(it->first);
    PublishLocked(it->second);
  }
  if (change.full) {
    std::vector<std::string> gone;
    for (const auto& [id, entry] : jobs_) {
      if (!kept_ids.contains(id)) gone.push_back(id);
    }
    for (const std::string& id : gone) RemoveLocked(id);
  }
  for (const std::string& id : change.removed_jobs) {
    if (jobs_.contains(id)) RemoveLocked(id);
  }
  if (change.capacity_gpus.has_value()) capacity_.total_gpus = change.capacity_gpus;
  if (change.capacity_slots.has_value()) capacity_.slots = *std::move(change.capacity_slots);
  if (change.queues.has_value()) capacity_.queues = *std::move(change.queues);
  if (change.capacity_gpu_types.has_value())
    capacity_.gpu_types = *std::move(change.capacity_gpu_types);
  if (change.capacity_allocatable_gpus.has_value()) {
    capacity_.allocatable_gpus = *change.capacity_allocatable_gpus;
  }
  for (StoredMeasurements& measured : change.measurements) RestoreMeasurementsLocked(measured);
  std::erase_if(change.recommendations, [&](const Recommendation& rec) {
    mu_.AssertHeld();  // erase_if runs it here, under mu_
    return !jobs_.contains(rec.job_id);
  });
  board_.StageReplicated(std::move(change.recommendations), std::move(change.retired_generations));
}

}  // namespace rescale::engine
