// The engine's private records of a job: JobEntry (what the caller and the
// cluster said of it: the registry's) and Fitted (its throughput curve as
// fitted to the store's statistics: the plan pipeline's and the readers').
// Internal to the engine (src/engine); nothing in include/ names them.
#ifndef RESCALE_SRC_ENGINE_JOB_ENTRY_H_
#define RESCALE_SRC_ENGINE_JOB_ENTRY_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/time/time.h"
#include "rescale/metrics_store.h"
#include "rescale/point_curve.h"
#include "rescale/policy.h"
#include "rescale/state_store.h"
#include "rescale/throughput_model.h"
#include "rescale/types.h"

namespace rescale::engine {

// A registered job as mutations leave it (JobRegistry): what the caller and
// the cluster said. Plans work on their own copies (PlanSlot).
struct JobEntry {
  JobSpec spec;
  JobStatus status;
  // The policy memory the cluster's changes write (ReportApplied):
  // previous_replicas and scale_events. The rest of a policy's memory is
  // the plan's (PlanSlot), which takes these two from here.
  PolicyMemory memory;
  // When the cluster last applied a change of replicas; the first applied
  // state is not a change.
  absl::Time last_change_at = absl::InfinitePast();
  bool has_applied = false;
  // When it last started running (tie-break: the most recently started
  // job is suspended first).
  absl::Time started_at = absl::InfinitePast();
  // When it last stopped running (suspended): jct ages a waiting job from
  // then, or from its registration if it never ran.
  absl::Time stopped_at = absl::InfinitePast();
  // Which registration this is, its latest change (spec or applied state)
  // and its spec's: all from the registry's change counter, so a plan can
  // tell whether the job moved on since it copied it.
  uint64_t registration = 0;
  uint64_t version = 0;
  uint64_t spec_version = 0;
  // The measurements a state store kept of this job before the restart
  // (null: none): its curve is fitted on them for the sizes the store has
  // not measured again since (WithRestored).
  std::shared_ptr<const std::vector<SizeStats>> restored;
};

// What the state store keeps of `entry`, and the entry a kept job makes.
StoredJob StoredJobOf(const JobEntry& entry);
void FillFromStored(JobEntry& entry, JobSpec spec, StoredJob& kept);

// A job's curve fitted to its statistics.
struct Fitted {
  std::vector<Observation> observations;
  ThroughputModel model;
  // model.SamplesPerSecond(n) at index n - 1, n up to the spec's
  // max_replicas (at most kCachedSizes): what every plan asks of it.
  std::vector<double> samples_per_second;
  // The statistics it was fitted on (with the restored ones), kept only
  // with a state store: what a checkpoint writes.
  std::vector<SizeStats> stats;
  // The job's gradient noise scale over the same window (samples; nullopt =
  // no gradient statistics reported): what goodput planning reads.
  std::optional<double> noise_scale;
  // Set when the model misses the job's measured or prior points: the
  // curve plans are made on (rescale/point_curve.h).
  std::optional<PointCurve> points;
  // Progress in samples at the job's initial batch M0 (JobViews::Fit), for
  // a job with batch_scaling and a noise scale; else nullopt.
  std::optional<double> progress_at_m0;
  // GPU types. A job whose samples say where they ran (SizeStats::gpu_type)
  // is fitted per type: `model` and `observations` are then those of
  // `gpu_type` (the type it runs on, else the one with the most samples),
  // and by_type holds every measured type's fit, ordered by name.
  // Untyped samples are the running type's when it has none of its own.
  // Empty for a job whose samples carry no type.
  struct TypeFit {
    std::string gpu_type;
    ThroughputModel model;
    std::vector<Observation> observations;
  };
  std::string gpu_type;
  std::vector<TypeFit> by_type;
  const TypeFit* OnType(std::string_view type) const {
    for (const TypeFit& t : by_type)
      if (t.gpu_type == type) return &t;
    return nullptr;
  }
  static constexpr uint32_t kCachedSizes = 256;
  // Samples/s at n: on the points when the model misses them, else the
  // model's.
  double SamplesPerSecond(uint32_t n) const {
    if (n >= 1 && n <= samples_per_second.size()) return samples_per_second[n - 1];
    return points.has_value() ? points->SamplesPerSecond(n) : model.SamplesPerSecond(n);
  }
};

}  // namespace rescale::engine

#endif  // RESCALE_SRC_ENGINE_JOB_ENTRY_H_
