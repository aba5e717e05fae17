// JobViews: the engine's one home for what a job's statistics say: its
// fitted curve (Fit, used by plans and readers alike), its status with
// progress and the time left (StatusOf: the one progress rule), and the view
// readers get (ViewOf). Holds no state of its own: it reads the metrics
// store and the board, both thread-safe, so it needs no lock.
#ifndef RESCALE_SRC_ENGINE_JOB_VIEWS_H_
#define RESCALE_SRC_ENGINE_JOB_VIEWS_H_

#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "absl/time/time.h"
#include "rescale/clock.h"
#include "rescale/metrics_store.h"
#include "rescale/policy.h"
#include "rescale/recommendation_board.h"
#include "rescale/throughput_model.h"
#include "rescale/types.h"
#include "src/engine/job_entry.h"
#include "src/engine/type_curves.h"

namespace rescale::engine {

struct JobViewsOptions {
  ModelOptions model;
  // Samples a size needs before its own measurements replace restored ones
  // and the model fits on them (PolicyOptions::min_samples).
  uint64_t min_samples = 0;
  // Whether fits keep their statistics (a state store checkpoints them).
  bool keep_stats = false;
  // Whether a measured size the model misses is a reason to plan on the
  // points (EngineOptions::plan_on_measured_points).
  bool measured_points = false;
};

// The gradient noise scale of `sizes`' statistics (SizeStats::gradient_*),
// as the store computes it from its own; nullopt when none carry any. Read
// from checkpointed sizes after a restart, until the job reports again.
std::optional<double> NoiseScaleOf(std::span<const SizeStats> sizes);

// The job's progress in samples at its initial batch M0: the samples it
// processed at each size times the statistical efficiency of the total batch
// it ran there (world size x the mean batch its steps reported), under the
// noise scale measured now. nullopt without batch_scaling or a noise scale.
// The one rule the status, the time left and the jct objective share.
// Under today's noise scale, not the one each step ran at: early steps,
// when the noise scale was smaller, count as what they would be worth now.
std::optional<double> ProgressAtInitialBatch(const JobSpec& spec, std::span<const SizeStats> stats,
                                             std::optional<double> noise_scale);

class JobViews {
 public:
  JobViews(JobViewsOptions options, const MetricsStore& store, const RecommendationBoard& board,
           Clock& clock)
      : options_(options), store_(store), board_(board), clock_(clock) {}

  // `current_type`: the GPU type the job runs on (JobStatus::gpu_type), whose
  // fit is the job's curve when its samples carry types (Fitted::by_type).
  Fitted Fit(const JobSpec& spec, std::span<const SizeStats> stats, absl::Time now,
             std::string_view current_type = {}) const;
  // The model options a fit of `spec` uses (its batch and GPUs per replica).
  ModelOptions ModelOptionsOf(const JobSpec& spec) const;
  // A fit of the job's statistics now, for readers.
  Fitted FitNow(const JobEntry& entry) const;
  // `live` (the store's statistics of the job) with the restored ones for
  // the sizes the store has too few samples of, and the progress made
  // before the restart added to each size's.
  std::vector<SizeStats> WithRestored(std::vector<SizeStats> live, const JobEntry& entry) const;
  // The model's curve for n in [1, max_replicas] (at most 256 points).
  static std::vector<CurvePoint> CurveOf(const JobSpec& spec, const Fitted& fitted);
  // The job's progress, the one rule for it (status, estimates, the jct
  // objective): the samples the store counted since this server started,
  // plus those processed before the restart (restored).
  uint64_t SamplesProcessed(const JobEntry& entry) const;
  // The entry's status with the store's counts and the job's progress:
  // samples processed (restored ones included) and the time the rest takes
  // at the running size, from `fitted` (null: fitted here, and only when the
  // estimate needs it).
  JobStatus StatusOf(const JobEntry& entry, const Fitted* fitted) const;
  // The job's view: spec, status, fitted curve, pods, recommendation, and
  // its curve per GPU type: on each of `types` (the cluster's, predicted
  // with `speeds` where it never ran) and on each other type it ran on.
  JobView ViewOf(const JobEntry& entry, std::span<const GpuType> types = {},
                 const TypeSpeeds* speeds = nullptr) const;
  std::vector<JobView::TypeCurve> CurvesByType(const JobSpec& spec, const Fitted& fitted,
                                               std::span<const GpuType> types,
                                               const TypeSpeeds& speeds) const;

 private:
  const JobViewsOptions options_;
  const MetricsStore& store_;
  const RecommendationBoard& board_;
  Clock& clock_;
};

}  // namespace rescale::engine

#endif  // RESCALE_SRC_ENGINE_JOB_VIEWS_H_
