// Goodput planning of one job (issue 31; the arithmetic is in
// rescale/goodput.h): whether a job is planned on goodput rather than
// throughput, the batch it runs now, and the batch and goodput at each size
// the planner may give it.
//
// A job is planned on goodput when the engine allows it
// (EngineOptions::plan_on_goodput), it says what its batch may be
// (JobSpec::batch_scaling), it reported gradient statistics (a noise scale
// over the store's window), and its curve is fitted. Every other job is
// planned on throughput, as before goodput planning existed.
//
// At the size it runs now, a job keeps the batch it runs unless the best
// batch there buys more than 5% more goodput (KeepOrSwitch, AdaptDL's rule).
// Such a change keeps the replicas and the generation: it is never on its
// own a reason to restart. A trainer that adapts in place (AdaptDL-style,
// the SDK) takes it at once; workers that read their batch at start take it
// at their next start. At any other size the job restarts anyway and takes
// the best batch there (BestBatch, within its bounds).
#ifndef RESCALE_SRC_ENGINE_BATCH_PLAN_H_
#define RESCALE_SRC_ENGINE_BATCH_PLAN_H_

#include <cstdint>
#include <optional>

#include "rescale/goodput.h"
#include "rescale/types.h"
#include "src/engine/job_entry.h"

namespace rescale::engine {

// A batch a job runs or is told to run.
struct BatchSetting {
  uint32_t local_batch = 0;
  uint32_t accumulation_steps = 0;
  friend bool operator==(const BatchSetting&, const BatchSetting&) = default;
};

// The batch last recommended to a job and the replicas it was for.
struct RecommendedBatch {
  BatchSetting batch;
  uint32_t replicas = 0;
};

class GoodputPlan {
 public:
  // The job's plan, or nullopt when it is planned on throughput (see above).
  // `running_replicas` 0 = not running; `last` = the batch last recommended.
  static std::optional<GoodputPlan> Of(bool enabled, const JobSpec& spec, const Fitted& fit,
                                       uint32_t running_replicas,
                                       const std::optional<RecommendedBatch>& last);

  // The batch and what it buys at n replicas (>= 1): at the running size
  // the running batch or, past the 5% rule, the best; elsewhere the best
  // within the bounds (nullopt when none fits at n).
  std::optional<BatchChoice> At(uint32_t n) const;
  // The batch the job runs now (what the plan input depends on).
  const std::optional<BatchSetting>& running() const { return running_; }

 private:
  GoodputPlan(const Fitted& fit, const BatchLimits& limits, double noise_scale)
      : fit_(&fit), limits_(limits), stats_{.sqr = 1, .var = noise_scale / limits.initial_batch} {}

  const Fitted* fit_;
  BatchLimits limits_;
  // {1, phi / M0}: statistics with the noise scale phi the store measured
  // (EFF depends on phi and M0 only).
  GradientStats stats_;
  uint32_t running_replicas_ = 0;
  std::optional<BatchSetting> running_;
};

}  // namespace rescale::engine

#endif  // RESCALE_SRC_ENGINE_BATCH_PLAN_H_
