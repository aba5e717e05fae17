// JobRegistry (see job_registry.h): the mutations. Each is decided under
// mu_ (Decide*Locked: checks, and the change to write), then run by Execute
// (the caller waits for it, possibly writing the group itself) or
// ExecuteAsync (the writer's thread writes it and calls back: for callers
// that must not block). The change enters memory in its completion, under
// mu_, once the write succeeded; without a state store, at once.
#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"
#include "rescale/job_rules.h"
#include "rescale/status_macros.h"
#include "spdlog/spdlog.h"
#include "src/engine/board_delivery.h"
#include "src/engine/job_registry.h"

namespace rescale::engine {

template <typename T>
std::function<void(const absl::Status&)> JobRegistry::Completion(
    Applier<T> apply, std::shared_ptr<std::optional<absl::StatusOr<T>>> result) {
  return [this, apply = std::move(apply), result](const absl::Status& written) {
    {
      const DeliverOnExit deliver(board_);  // a removal's event, after mu_
      MutexLock lock(mu_);
      *result = apply(written);
    }
    idle_cv_.SignalAll();
  };
}

template <typename T>
absl::StatusOr<T> JobRegistry::Execute(const std::function<Decision<T>()>& decide) {
  auto result = std::make_shared<std::optional<absl::StatusOr<T>>>();
  std::shared_ptr<WriteTicket> ticket;
  {
    const DeliverOnExit deliver(board_);
    MutexLock lock(mu_);
    Decision<T> decided = decide();
    if (decided.immediate.has_value()) return *std::move(decided.immediate);
    ticket =
        writer_->Submit(std::move(decided.change), Completion<T>(std::move(decided.apply), result));
  }
  writer_->Wait(ticket).IgnoreError();  // the completion has the outcome
  return std::move(**result);
}

template <typename T>
void JobRegistry::ExecuteAsync(const std::function<Decision<T>()>& decide, Then<T> then) {
  std::optional<absl::StatusOr<T>> immediate;
  {
    const DeliverOnExit deliver(board_);
    MutexLock lock(mu_);
    Decision<T> decided = decide();
    if (!decided.immediate.has_value()) {
      auto result = std::make_shared<std::optional<absl::StatusOr<T>>>();
      writer_->SubmitAsync(std::move(decided.change),
                           Completion<T>(std::move(decided.apply), result),
                           [result, then = std::move(then)] { then(std::move(**result)); });
      return;
    }
    immediate = std::move(decided.immediate);
  }
  then(*std::move(immediate));
}

JobRegistry::Decision<JobEntry> JobRegistry::DecideRegisterLocked(JobSpec spec) {
  AwaitIdleLocked(spec.job_id);
  if (jobs_.contains(spec.job_id)) {
    return {absl::AlreadyExistsError(absl::StrFormat(
        "job \"%s\" is already registered; use UpdateJob to change its spec", spec.job_id))};
  }
  if (static_cast<int>(jobs_.size()) + registrations_in_flight_ >= max_jobs_) {
    return {absl::ResourceExhaustedError(
        absl::StrFormat("cannot register \"%s\": %d jobs are registered, the limit (--max_jobs)",
                        spec.job_id, max_jobs_))};
  }
  if (absl::Status added = store_.AddJob(spec.job_id, spec.max_replicas, spec.local_batch_size);
      !added.ok()) {
    return {added};
  }
  JobEntry entry;
  entry.spec = std::move(spec);
  entry.status.registered_at = clock_.Now();
  if (writer_ == nullptr) {
    InsertLocked(entry);
    return {std::move(entry)};
  }
  in_flight_[entry.spec.job_id] = InFlight::kChange;
  ++registrations_in_flight_;
  Decision<JobEntry> decided;
  decided.change = StoredJobOf(entry);
  decided.apply = [this, entry = std::move(entry)](
                      const absl::Status& written) mutable -> absl::StatusOr<JobEntry> {
    mu_.AssertHeld();  // run by Completion, under mu_
    in_flight_.erase(entry.spec.job_id);
    --registrations_in_flight_;
    if (!written.ok()) {
      store_.RemoveJob(entry.spec.job_id);
      return written;
    }
    InsertLocked(entry);
    return std::move(entry);
  };
  return decided;
}

JobRegistry::Decision<JobEntry> JobRegistry::DecideUpdateLocked(JobSpec spec) {
  AwaitIdleLocked(spec.job_id);
  auto it = jobs_.find(spec.job_id);
  if (it == jobs_.end()) {
    return {absl::NotFoundError(
        absl::StrFormat("job \"%s\" is not registered; use RegisterJob to add it", spec.job_id))};
  }
  JobEntry changed = it->second;
  changed.spec = std::move(spec);
  auto apply = [this](JobEntry& entry)
                   ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::StatusOr<JobEntry> {
    // The store's limits for the job follow its spec (it was checked).
    RETURN_IF_ERROR(
        store_.AddJob(entry.spec.job_id, entry.spec.max_replicas, entry.spec.local_batch_size));
    ReplaceLocked(entry, /*spec_changed=*/true);
    return entry;
  };
  if (writer_ == nullptr) return {apply(changed)};
  in_flight_[changed.spec.job_id] = InFlight::kChange;
  Decision<JobEntry> decided;
  decided.change = StoredJobOf(changed);
  decided.apply = [this, apply, changed = std::move(changed)](
                      const absl::Status& written) mutable -> absl::StatusOr<JobEntry> {
    mu_.AssertHeld();  // run by Completion, under mu_
    in_flight_.erase(changed.spec.job_id);
    if (!written.ok()) return written;
    return apply(changed);
  };
  return decided;
}

JobRegistry::Decision<std::monostate> JobRegistry::DecideDeregisterLocked(
    const std::string& job_id) {
  AwaitIdleLocked(job_id);
  if (!jobs_.contains(job_id)) {
    return {absl::NotFoundError(absl::StrFormat("job \"%s\" is not registered", job_id))};
  }
  if (writer_ == nullptr) {
    RemoveLocked(job_id);
    return {std::monostate()};
  }
  // Plans committed from now on leave the job out (CommitPlan), so this
  // is its last generation.
  const std::optional<Recommendation> last = board_.Get(job_id);
  in_flight_[job_id] = InFlight::kDelete;
  Decision<std::monostate> decided;
  decided.change = DeletedJob{job_id, last ? last->generation : 0};
  decided.apply = [this, job_id](const absl::Status& written)
                      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::StatusOr<std::monostate> {
    in_flight_.erase(job_id);
    if (!written.ok()) return written;
    RemoveLocked(job_id);
    return std::monostate();
  };
  return decided;
}

JobRegistry::Decision<JobEntry> JobRegistry::DecideApplyLocked(const std::string& job_id,
                                                               uint32_t replicas, bool suspended,
                                                               uint64_t generation,
                                                               const std::string& gpu_type) {
  AwaitIdleLocked(job_id);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) {
    return {absl::NotFoundError(absl::StrFormat("job \"%s\" is not registered", job_id))};
  }
  // Changed on a copy, which replaces the entry once it is recorded.
  JobEntry entry = it->second;
  if (replicas > entry.spec.max_replicas) {
    return {absl::InvalidArgumentError(absl::StrFormat(
        "replicas %d exceeds the job's max_replicas %d", replicas, entry.spec.max_replicas))};
  }
  std::optional<Recommendation> latest = board_.Get(job_id);
  const uint64_t latest_generation = latest ? latest->generation : 0;
  if (generation > latest_generation) {
    return {absl::InvalidArgumentError(absl::StrFormat(
        "generation %d is newer than the job's latest recommendation (generation %d)", generation,
        latest_generation))};
  }
  const absl::Time now = clock_.Now();
  const uint32_t running_before = RunningReplicas(entry.status);
  JobStatus after;
  after.current_replicas = replicas;
  after.suspended = suspended;
  const uint32_t running_after = RunningReplicas(after);
  // A move to another type restarts every replica: a change, as a resize.
  const bool moved = running_before > 0 && running_after > 0 && !gpu_type.empty() &&
                     !entry.status.gpu_type.empty() && gpu_type != entry.status.gpu_type;
  if (entry.has_applied && (running_after != running_before || moved)) {
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
  if (!gpu_type.empty()) entry.status.gpu_type = gpu_type;
  if (generation != 0) {
    entry.status.last_applied_generation =
        std::max(entry.status.last_applied_generation, generation);
  }
  entry.status.last_applied_at = now;
  if (writer_ == nullptr) {
    ReplaceLocked(entry, /*spec_changed=*/false);
    return {std::move(entry)};
  }
  in_flight_[job_id] = InFlight::kChange;
  Decision<JobEntry> decided;
  decided.change = StoredJobOf(entry);
  decided.apply = [this, entry = std::move(entry)](
                      const absl::Status& written) mutable -> absl::StatusOr<JobEntry> {
    mu_.AssertHeld();  // run by Completion, under mu_
    in_flight_.erase(entry.spec.job_id);
    if (!written.ok()) return written;
    ReplaceLocked(entry, /*spec_changed=*/false);
    return std::move(entry);
  };
  return decided;
}

JobRegistry::Decision<std::monostate> JobRegistry::DecideCapacityLocked(
    const CapacityReport& report) {
  idle_cv_.Wait(mu_, [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !capacity_in_flight_; });
  // With GPU types the total is their sum, whatever the report said (0).
  CapacityReport normal = report;
  normal.total_gpus = TotalGpus(report);
  CapacityState next{normal.total_gpus, normal.slots, normal.allocatable_gpus, capacity_.queues,
                     normal.gpu_types};
  return DecideClusterLocked(std::move(next), std::move(normal));
}

JobRegistry::Decision<std::monostate> JobRegistry::DecideQueuesLocked(
    std::vector<QueueSpec> queues) {
  idle_cv_.Wait(mu_, [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !capacity_in_flight_; });
  CapacityState next = capacity_;
  next.queues = queues;
  return DecideClusterLocked(std::move(next), QueueSet{std::move(queues)});
}

JobRegistry::Decision<std::monostate> JobRegistry::DecideClusterLocked(CapacityState next,
                                                                       StateChange change) {
  if (writer_ == nullptr) {
    capacity_ = std::move(next);
    return {std::monostate()};
  }
  capacity_in_flight_ = true;
  Decision<std::monostate> decided;
  decided.change = std::move(change);
  decided.apply = [this, next = std::move(next)](
                      const absl::Status& written) mutable -> absl::StatusOr<std::monostate> {
    mu_.AssertHeld();  // run by Completion, under mu_
    capacity_in_flight_ = false;
    if (!written.ok()) return written;
    capacity_ = std::move(next);
    return std::monostate();
  };
  return decided;
}

// The mutations, each in its waiting and its asynchronous form.

absl::StatusOr<JobEntry> JobRegistry::Register(JobSpec spec) {
  return Execute<JobEntry>(
      [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return DecideRegisterLocked(std::move(spec)); });
}

void JobRegistry::RegisterAsync(JobSpec spec, Then<JobEntry> then) {
  ExecuteAsync<JobEntry>(
      [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return DecideRegisterLocked(std::move(spec)); },
      std::move(then));
}

absl::StatusOr<JobEntry> JobRegistry::Update(JobSpec spec) {
  return Execute<JobEntry>(
      [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return DecideUpdateLocked(std::move(spec)); });
}

void JobRegistry::UpdateAsync(JobSpec spec, Then<JobEntry> then) {
  ExecuteAsync<JobEntry>(
      [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return DecideUpdateLocked(std::move(spec)); },
      std::move(then));
}

absl::Status JobRegistry::Deregister(const std::string& job_id) {
  return Execute<std::monostate>(
             [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return DecideDeregisterLocked(job_id); })
      .status();
}

void JobRegistry::DeregisterAsync(const std::string& job_id, Then<std::monostate> then) {
  ExecuteAsync<std::monostate>(
      [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return DecideDeregisterLocked(job_id); },
      std::move(then));
}

absl::StatusOr<JobEntry> JobRegistry::Apply(const std::string& job_id, uint32_t replicas,
                                            bool suspended, uint64_t generation,
                                            const std::string& gpu_type) {
  return Execute<JobEntry>([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return DecideApplyLocked(job_id, replicas, suspended, generation, gpu_type);
  });
}

void JobRegistry::ApplyAsync(const std::string& job_id, uint32_t replicas, bool suspended,
                             uint64_t generation, const std::string& gpu_type,
                             Then<JobEntry> then) {
  ExecuteAsync<JobEntry>(
      [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return DecideApplyLocked(job_id, replicas, suspended, generation, gpu_type);
      },
      std::move(then));
}

absl::Status JobRegistry::SetCapacity(const CapacityReport& report) {
  return Execute<std::monostate>(
             [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return DecideCapacityLocked(report); })
      .status();
}

void JobRegistry::SetCapacityAsync(const CapacityReport& report, Then<std::monostate> then) {
  ExecuteAsync<std::monostate>(
      [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return DecideCapacityLocked(report); },
      std::move(then));
}

absl::Status JobRegistry::SetQueues(std::vector<QueueSpec> queues) {
  return Execute<std::monostate>([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
           return DecideQueuesLocked(std::move(queues));
         })
      .status();
}

void JobRegistry::SetQueuesAsync(std::vector<QueueSpec> queues, Then<std::monostate> then) {
  ExecuteAsync<std::monostate>(
      [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return DecideQueuesLocked(std::move(queues)); },
      std::move(then));
}

std::vector<std::string> JobRegistry::RegisterAll(std::vector<JobSpec> specs) {
  std::vector<std::pair<std::string, std::shared_ptr<WriteTicket>>> submitted;
  std::vector<std::shared_ptr<std::optional<absl::StatusOr<JobEntry>>>> results;
  std::vector<std::string> registered;
  {
    const DeliverOnExit deliver(board_);
    MutexLock lock(mu_);
    for (JobSpec& spec : specs) {
      if (jobs_.contains(spec.job_id) || in_flight_.contains(spec.job_id)) continue;
      std::string id = spec.job_id;
      Decision<JobEntry> decided = DecideRegisterLocked(std::move(spec));
      if (decided.immediate.has_value()) {
        // Registered at once (no state store), or a limit: the samples'
        // rejection then stands.
        if (decided.immediate->ok()) registered.push_back(std::move(id));
        continue;
      }
      auto result = std::make_shared<std::optional<absl::StatusOr<JobEntry>>>();
      submitted.emplace_back(
          std::move(id), writer_->Submit(std::move(decided.change),
                                         Completion<JobEntry>(std::move(decided.apply), result)));
      results.push_back(std::move(result));
    }
  }
  // One group commit for all of them: the first Wait writes every one.
  for (size_t i = 0; i < submitted.size(); ++i) {
    writer_->Wait(submitted[i].second).IgnoreError();
    if (results[i]->has_value() && (*results[i])->ok()) {
      registered.push_back(std::move(submitted[i].first));
    }
  }
  return registered;
}

}  // namespace rescale::engine
