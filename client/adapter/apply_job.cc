// Adapter::Apply and the writes under it (see client/adapter/adapter.h):
// one recommendation written to its job -- the PodGroup's minMember first,
// then one merge patch of the job with the change's rescale.io/*
// annotations (and its GPU type's node selector), retried on 409 from a
// fresh read -- then reported to rescaled, and the change's Event queued
// (client/adapter/job_events.h). Also the second half of a move between
// GPU types, ResumeMovedJobs.
#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/adapter/adapter.h"
#include "spdlog/spdlog.h"

namespace rescale::adapter {

using json = nlohmann::json;

namespace {

// Errors an apply retries with backoff: the API server unreachable or
// failing, or a conflict PatchWithRetry ran out of retries on.
bool Retryable(const absl::Status& status) {
  const absl::StatusCode code = status.code();
  return code == absl::StatusCode::kUnavailable || code == absl::StatusCode::kAborted ||
         code == absl::StatusCode::kUnknown || code == absl::StatusCode::kInternal;
}

}  // namespace

bool Adapter::Apply(const v1::Recommendation& recommendation) {
  absl::MutexLock apply_lock(&apply_mu_);
  const std::string& id = recommendation.job_id();
  JobInfo info;
  {
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(id);
    if (it == jobs_.end()) {
      spdlog::debug("recommendation for {} ignored: not a job this adapter manages", id);
      return true;
    }
    if (recommendation.generation() <= it->second.applied_generation) return true;
    info = it->second.info;
  }
  const bool suspend = recommendation.suspend();
  uint32_t workers = recommendation.replicas();
  // A Kueue job runs only as Kueue admits it: the adapter resizes it while
  // it runs and never writes its suspend (client/adapter/kueue.h).
  const bool kueue_waits = info.kueue_managed() && info.suspended;
  if (!suspend) {
    bool was_clamped = false;
    uint32_t clamped = ClampReplicas(info, workers, &was_clamped);
    if (was_clamped) {
      spdlog::warn("{}: recommended {} replicas is outside [{}, {}]; writing {}", id, workers,
                   info.min_replicas, info.max_replicas, clamped);
      workers = clamped;
    }
  }
  // The reason as applied goes into the patch (rescale.io/reason) and the
  // Event's note.
  const std::string applied_reason = AppliedReason(info, recommendation, workers);
  const std::map<std::string, std::string> annotations =
      RecommendationAnnotations(recommendation, applied_reason);
  const std::string gpu_type = GpuTypeToWrite(info, recommendation);
  std::string running_type;
  std::string reported_type;  // where it runs, for ReportApplied
  {
    absl::MutexLock lock(&mu_);
    running_type = RunningTypeLocked(info);
    reported_type = ReportedTypeLocked(info);
  }
  std::optional<AppliedChange> change;
  // Wall time, for the metrics only (the backoff's waits are in it).
  const auto apply_started = std::chrono::steady_clock::now();
  client::Backoff backoff(options_.backoff, [this] { return NextRandom(); });
  absl::Status status;
  for (int attempt = 1; attempt <= options_.max_apply_attempts && !stopping(); ++attempt) {
    absl::StatusOr<std::optional<AppliedChange>> applied =
        ApplyToKube(info, workers, suspend, gpu_type, running_type, annotations);
    status = applied.status();
    if (status.ok()) {
      change = *applied;
      break;
    }
    const bool retryable = Retryable(status);
    spdlog::warn("apply generation {} to {}: {}{}", recommendation.generation(), id,
                 status.ToString(), retryable ? "; retrying" : "");
    if (!retryable || !SleepFor(backoff.Next())) break;
  }
  if (options_.metrics != nullptr) {
    options_.metrics->RecordApply(
        status.ok(), absl::FromChrono(std::chrono::steady_clock::now() - apply_started));
  }
  if (!status.ok()) {
    spdlog::error("gave up applying generation {} to {}: {}", recommendation.generation(), id,
                  status.ToString());
    return false;
  }
  {
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return true;
    it->second.applied_generation = recommendation.generation();
  }
  spdlog::info("{}: generation {} {}: {} {} ({})", id, recommendation.generation(),
               options_.dry_run ? "would be applied" : "applied",
               suspend ? "suspended" : "replicas", suspend ? "" : std::to_string(workers),
               recommendation.reason());
  if (!options_.dry_run) {
    // What runs now. For a Kueue job Kueue decides suspended or not (a
    // suspend we recommend is not written: the job keeps its size); the
    // size is ours.
    const bool waits = info.kueue_managed() ? kueue_waits : suspend;
    ReportApplied(id, waits ? 0 : (suspend ? info.workers : workers), waits,
                  recommendation.generation(), gpu_type.empty() ? reported_type : gpu_type);
  }
  if (kueue_waits) {
    Emit({AdapterEvent::Kind::kKueueWaiting, id, recommendation.generation(), applied_reason});
  }
  // Queued only: a slow or failing API server delays no apply.
  if (change && change->event) {
    events_.Record(info, change->resource_version, change->change, applied_reason);
  }
  Emit({AdapterEvent::Kind::kApplied, id, recommendation.generation(),
        suspend
            ? "suspend"
            : absl::StrCat("replicas=", workers, gpu_type.empty() ? "" : " gpu-type=", gpu_type)});
  return true;
}
absl::StatusOr<std::optional<Adapter::AppliedChange>> Adapter::ApplyToKube(
    const JobInfo& job, uint32_t workers, bool suspend, const std::string& gpu_type,
    const std::string& running_type, const std::map<std::string, std::string>& annotations) {
  // The gang first: lowering minMember before removing workers keeps the
  // survivors admissible; raising it before adding workers makes the
  // scheduler admit the new pods all together. A suspended job has no
  // PodGroup (the operator deletes it). A TrainJob's size never changes,
  // and its gang (through its JobSet) is not the adapter's to size.
  const bool kueue = job.kueue_managed();
  if (!suspend && job.resizable && !(kueue && job.suspended)) {
    absl::Status gang = PatchPodGroup(job, workers + job.masters);
    if (!gang.ok()) return gang;
  }
  // Set by the last make_patch, i.e. for the patch that was sent.
  JobChange change = JobChange::kRescaled;
  bool event = true;
  json patched;
  absl::Status status = PatchJobWithRetry(
      job,
      [&](const json& object, const JobInfo& current) -> absl::StatusOr<json> {
        if (kueue) return KueuePatch(object, current, workers, suspend, annotations, change, event);
        std::optional<uint32_t> new_workers;
        std::optional<bool> new_suspend;
        // A TrainJob's spec.trainer.numNodes is immutable: never written.
        if (!suspend && current.resizable && current.workers != workers) new_workers = workers;
        if (current.suspended != suspend) new_suspend = suspend;
        const bool new_type = !gpu_type.empty() && current.gpu_type != gpu_type;
        // Where its pods run now: its selector, else (none yet) their nodes'.
        const std::string& runs_on = current.gpu_type.empty() ? running_type : current.gpu_type;
        if (new_type && !suspend && !current.suspended && MovesType(runs_on, gpu_type)) {
          // A move: the operator does not recreate running pods for a new
          // template, so suspend (it deletes them) with the new selector and
          // size in one patch; ResumeMovedJobs resumes once they are gone.
          change = JobChange::kMoved;
          json patch = WithWorkerGpuType(
              WorkerPatch(current.resource_version, new_workers, true, annotations), gpu_type,
              current.master_gpus);
          patch["metadata"]["annotations"][kResumeAfterMoveAnnotation] =
              annotations.at(kGenerationAnnotation);
          return patch;
        }
        // A move in progress stays one: the resume is ResumeMovedJobs'
        // (once the pods are gone) unless this recommendation suspends.
        const bool marked = current.resizable && !current.resume_after_move.empty();
        const bool moving = marked && current.suspended;
        if (moving && !suspend) new_suspend.reset();
        const bool end_move = marked && (suspend || !moving);
        // The plan names no type (the cluster has one product left, or
        // none labelled): a selector the adapter wrote goes, so the job is
        // not pinned to nodes that may be gone. The user's own stays.
        const bool drop_type = gpu_type.empty() && !suspend && current.resizable &&
                               !current.gpu_type.empty() &&
                               current.selected_gpu_type == current.gpu_type;
        if (!new_workers && !new_suspend && !new_type && !end_move && !drop_type) return json();
        change = !new_suspend ? JobChange::kRescaled
                 : suspend    ? JobChange::kSuspended
                              : JobChange::kResumed;
        if (!current.resizable) {
          return TrainJobSuspendPatch(current.resource_version, *new_suspend, annotations);
        }
        // The selector alone (the pods already run on that type, or none
        // runs yet), or the end of a move, restarts nothing: no Event.
        if (!new_workers && !new_suspend) event = false;
        json patch = WorkerPatch(current.resource_version, new_workers, new_suspend, annotations);
        if (new_type) patch = WithWorkerGpuType(std::move(patch), gpu_type, current.master_gpus);
        if (drop_type) {
          // The Master's too, only where the adapter wrote it (a patch
          // naming a Master the job lacks would create one).
          const json& master = FieldAt(object, {"spec", "pytorchReplicaSpecs", "Master", "template",
                                                "spec", "nodeSelector", kGpuProductLabel});
          patch = WithoutWorkerGpuType(std::move(patch),
                                       master.is_string() && master == current.gpu_type);
        }
        if (end_move) {
          patch["metadata"]["annotations"][kResumeAfterMoveAnnotation] = nullptr;
        } else if (moving) {
          patch["metadata"]["annotations"][kResumeAfterMoveAnnotation] =
              annotations.at(kGenerationAnnotation);
        }
        return patch;
      },
      &patched);
  if (!status.ok()) return status;
  if (patched.is_null()) return std::optional<AppliedChange>();
  const json& rv = FieldAt(patched, {"metadata", "resourceVersion"});
  return std::optional<AppliedChange>(
      AppliedChange{change, rv.is_string() ? rv.get<std::string>() : std::string(), event});
}

json Adapter::KueuePatch(const json& object, const JobInfo& current, uint32_t workers, bool suspend,
                         const std::map<std::string, std::string>& annotations, JobChange& change,
                         bool& event) {
  // Never suspend: Kueue owns admission and preemption (an unsuspend
  // without admission it would undo; a suspend it did not decide would
  // leave its Workload admitted).
  const json& written = FieldAt(object, {"metadata", "annotations", kReasonAnnotation});
  const bool reason_current =
      written.is_string() && written.get<std::string>() == annotations.at(kReasonAnnotation);
  const json& generation = FieldAt(object, {"metadata", "annotations", kGenerationAnnotation});
  const bool generation_current =
      generation.is_string() &&
      generation.get<std::string>() == annotations.at(kGenerationAnnotation);
  if (current.suspended) {
    // Not admitted: its size waits too (a new count would replace the
    // Workload Kueue is queueing). Say why, once per generation.
    if (generation_current) return json();
    change = JobChange::kWaitingForKueue;
    return WorkerPatch(current.resource_version, std::nullopt, std::nullopt, annotations);
  }
  if (!suspend && current.resizable && current.workers != workers) {
    // Admitted: Kueue re-admits the job at its new size (docs/kueue.md).
    change = JobChange::kRescaled;
    return WorkerPatch(current.resource_version, workers, std::nullopt, annotations);
  }
  // Nothing to change, but the job's annotations should say why it runs
  // as it does now (after waiting, or when a suspend was left to Kueue).
  if (reason_current && generation_current) return json();
  event = false;
  return WorkerPatch(current.resource_version, std::nullopt, std::nullopt, annotations);
}

std::string Adapter::RunningTypeLocked(const JobInfo& job) const {
  if (!job.gpu_type.empty()) return job.gpu_type;
  std::string type;
  bool several = false;
  for (const auto& [key, pod] : gpu_pods_) {
    if (pod.job_id != job.id) continue;
    const auto node = nodes_.find(pod.node);
    if (node == nodes_.end()) return "";  // a node not seen yet: unknown
    const std::string& product = node->second.gpu_product;
    // A GPU node without the label is no type's (capacity leaves it out).
    if (product.empty() || (!type.empty() && type != product)) several = true;
    type = product;
  }
  return several ? kSeveralGpuTypes : type;
}

std::string Adapter::ReportedTypeLocked(const JobInfo& job) const {
  // Only while rescaled plans with types: a one-product cluster whose nodes
  // carry the label is planned, and shown, exactly as an unlabelled one.
  if (!sent_capacity_ || sent_capacity_->types.empty()) return "";
  std::string type = RunningTypeLocked(job);
  return type == kSeveralGpuTypes ? "" : type;
}

void Adapter::ResumeMovedJobs() {
  if (options_.dry_run) return;  // nothing was suspended
  // Cheap first look: most calls (every pod deletion in the cluster) find
  // no move under way and must not wait for an apply in flight.
  auto marked = [](const JobInfo& job) {
    return !job.resume_after_move.empty() && job.suspended && job.resizable && !job.kueue_managed();
  };
  {
    absl::MutexLock lock(&mu_);
    if (std::none_of(jobs_.begin(), jobs_.end(),
                     [&](const auto& entry) { return marked(entry.second.info); })) {
      return;
    }
  }
  // Serialized with Apply: a recommendation applied meanwhile either ends
  // the move (and removes the mark) or keeps it.
  absl::MutexLock apply_lock(&apply_mu_);
  std::vector<JobInfo> ready;
  std::vector<AdapterEvent> waiting;
  {
    absl::MutexLock lock(&mu_);
    const bool pods_watched = options_.capacity_gpus < 0 && pods_listed_;
    for (const auto& entry : jobs_) {
      const JobInfo& job = entry.second.info;
      if (!marked(job)) continue;
      // The operator has acted on the suspend (its Suspended condition:
      // Pending pods with the old selector are deleted too) and, when pods
      // are watched, none of the job's pods still holds a node's GPUs.
      const uint64_t left =
          pods_watched ? std::count_if(gpu_pods_.begin(), gpu_pods_.end(),
                                       [&](const auto& pod) { return pod.second.job_id == job.id; })
                       : 0;
      if (job.operator_suspended && left == 0) {
        ready.push_back(job);
      } else {
        waiting.push_back({AdapterEvent::Kind::kMoveWaiting, job.id, left,
                           job.operator_suspended ? "pods" : "operator"});
      }
    }
  }
  for (AdapterEvent& event : waiting) Emit(std::move(event));
  for (const JobInfo& job : ready) {
    json patched;
    absl::Status status;
    // Transient errors are retried here: once the pods are gone, no further
    // event of the job may come to try again.
    client::Backoff backoff(options_.backoff, [this] { return NextRandom(); });
    for (int attempt = 1; attempt <= options_.max_apply_attempts && !stopping(); ++attempt) {
      status = PatchJobWithRetry(
          job,
          [&](const json&, const JobInfo& current) -> absl::StatusOr<json> {
            // Resumed, or the move ended, since the watch said otherwise.
            if (current.resume_after_move.empty() || !current.suspended) return json();
            json patch = WorkerPatch(current.resource_version, std::nullopt, false);
            patch["metadata"]["annotations"][kResumeAfterMoveAnnotation] = nullptr;
            return patch;
          },
          &patched);
      if (status.ok() || !Retryable(status) || !SleepFor(backoff.Next())) break;
    }
    if (!status.ok()) {
      // Tried again on the job's or its pods' next event (a relist after
      // the API server is back brings every job).
      spdlog::warn("{}: resume after the move to {}: {}", job.id, job.gpu_type, status.ToString());
      continue;
    }
    if (patched.is_null()) continue;
    spdlog::info("{}: its pods are gone; resumed on GPU type {}", job.id, job.gpu_type);
    const json& rv = FieldAt(patched, {"metadata", "resourceVersion"});
    events_.Record(job, rv.is_string() ? rv.get<std::string>() : std::string(), JobChange::kResumed,
                   absl::StrCat("resumed on GPU type ", job.gpu_type, " after the move"));
    Emit({AdapterEvent::Kind::kMoveResumed, job.id, 0, job.gpu_type});
  }
}

absl::Status Adapter::PatchPodGroup(const JobInfo& job, uint32_t min_member) {
  for (const ApiVersion& api : options_.podgroup_apis) {
    const std::string path = ResourcePath(api, "podgroups", job.ns, job.name);
    absl::Status status = PatchWithRetry(path, [&](const json& object) -> absl::StatusOr<json> {
      const json& current = FieldAt(object, {"spec", "minMember"});
      if (current.is_number_integer() && current.get<int64_t>() == min_member) return json();
      const json& rv = FieldAt(object, {"metadata", "resourceVersion"});
      return MinMemberPatch(rv.is_string() ? rv.get<std::string>() : "", min_member);
    });
    // No PodGroup of this flavour (or its CRD is not installed): try the next.
    if (status.code() == absl::StatusCode::kNotFound) continue;
    return status;
  }
  return absl::OkStatus();
}

absl::Status Adapter::PatchJobWithRetry(
    const JobInfo& job,
    const std::function<absl::StatusOr<json>(const json&, const JobInfo&)>& make_patch,
    json* patched_object) {
  return PatchWithRetry(
      ResourcePath(job.api, JobResource(job.api), job.ns, job.name),
      [&](const json& object) -> absl::StatusOr<json> {
        absl::StatusOr<JobInfo> current = ParseJob(job.api, object);
        if (!current.ok()) return current.status();
        return make_patch(object, *current);
      },
      patched_object);
}

absl::Status Adapter::PatchWithRetry(
    const std::string& path, const std::function<absl::StatusOr<json>(const json&)>& make_patch,
    json* patched_object) {
  if (patched_object != nullptr) *patched_object = json();
  absl::Status last;
  for (int attempt = 0; attempt <= options_.max_conflict_retries; ++attempt) {
    absl::StatusOr<json> object = kube_->Get(path);
    if (!object.ok()) return object.status();
    absl::StatusOr<json> patch = make_patch(*object);
    if (!patch.ok()) return patch.status();
    if (patch->is_null()) return absl::OkStatus();  // already as wanted
    if (options_.dry_run) {
      std::string line = absl::StrCat("PATCH ", path, " ", kMergePatch, " ", patch->dump());
      spdlog::info("dry run: would send {}", line);
      if (options_.dry_run_out != nullptr) *options_.dry_run_out << line << std::endl;
      Emit({AdapterEvent::Kind::kDryRunPatch, "", 0, line});
      return absl::OkStatus();
    }
    absl::StatusOr<json> patched = kube_->Patch(path, kMergePatch, *patch);
    if (patched.ok()) {
      if (patched_object != nullptr) *patched_object = *std::move(patched);
      return absl::OkStatus();
    }
    if (patched.status().code() != absl::StatusCode::kAborted) return patched.status();
    // 409: someone else wrote the object since our GET; look again.
    spdlog::info("{}: conflict, re-reading and retrying", path);
    last = patched.status();
  }
  return last;
}

}  // namespace rescale::adapter
