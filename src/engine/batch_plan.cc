// GoodputPlan (see batch_plan.h): which batch a goodput-planned job runs at
// each size, and the goodput that buys.
#include "src/engine/batch_plan.h"

#include <algorithm>
#include <cmath>

namespace rescale::engine {

std::optional<GoodputPlan> GoodputPlan::Of(bool enabled, const JobSpec& spec, const Fitted& fit,
                                           uint32_t running_replicas,
                                           const std::optional<RecommendedBatch>& last) {
  if (!enabled || !spec.batch_scaling.has_value() || !fit.noise_scale.has_value() ||
      fit.model.empty() || spec.batch_scaling->initial_batch == 0 ||
      !std::isfinite(*fit.noise_scale) || *fit.noise_scale < 0) {
    return std::nullopt;
  }
  GoodputPlan plan(fit, *spec.batch_scaling, *fit.noise_scale);
  plan.running_replicas_ = running_replicas;
  if (running_replicas == 0) return plan;
  // What runs now: the batch recommended for this size (workers read it at
  // start), else what the pods report per step at this size, else the spec's.
  if (last.has_value() && last->replicas == running_replicas) {
    plan.running_ = last->batch;
    return plan;
  }
  for (const Observation& o : fit.observations) {
    if (o.replicas == running_replicas && o.mean_batch >= 1) {
      // Samples give the batch per worker per optimizer step; past the
      // largest local batch it must have been accumulated (as BestBatch
      // would split it).
      const double per_step = o.mean_batch;
      const BatchLimits& limits = *spec.batch_scaling;
      uint32_t accumulation = 0;
      if (limits.accumulation && limits.max_local_batch > 0 && per_step > limits.max_local_batch)
        accumulation =
            static_cast<uint32_t>(std::ceil(per_step / limits.max_local_batch - 1e-8)) - 1;
      plan.running_ = BatchSetting{
          static_cast<uint32_t>(std::max(1L, std::lround(per_step / (accumulation + 1.0)))),
          accumulation};
      return plan;
    }
  }
  const uint32_t local = spec.local_batch_size > 0
                             ? spec.local_batch_size
                             : static_cast<uint32_t>(std::ceil(
                                   double(spec.batch_scaling->initial_batch) / running_replicas));
  plan.running_ = BatchSetting{std::max<uint32_t>(local, 1), 0};
  return plan;
}

std::optional<BatchChoice> GoodputPlan::At(uint32_t n) const {
  if (n == 0) return std::nullopt;
  const ThroughputModel& model = fit_->model;
  // On the points when the model misses them: the model's batch term, its
  // step scaled to the points' rate at n.
  double slower = 1;
  if (fit_->points.has_value()) {
    const double on_points = fit_->SamplesPerSecond(n);
    const double on_model = model.SamplesPerSecond(n);
    if (on_points > 0 && on_model > 0) slower = on_model / on_points;
  }
  auto step = [&model, n, slower](uint32_t local, uint32_t accumulation) {
    return slower * model.StepSecondsAt(n, local, accumulation);
  };
  std::optional<BatchChoice> best = BestBatch(step, n, limits_, stats_);
  if (n == running_replicas_ && running_.has_value()) {
    const BatchChoice current =
        EvaluateBatch(step, n, running_->local_batch, running_->accumulation_steps,
                      limits_.initial_batch, stats_);
    if (!best.has_value()) return current;
    return KeepOrSwitch(current, *best);
  }
  return best;
}

}  // namespace rescale::engine
