// Statistical efficiency, the smoothing of gradient statistics and the
// batch search (see rescale/goodput.h for what each means and where it
// comes from).
#include "rescale/goodput.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_format.h"

namespace rescale {
namespace {

// Tolerance of the floor and ceiling of the batch search, as AdaptDL's.
constexpr double kEps = 1e-8;

}  // namespace

double NoiseScale(const GradientStats& stats, double initial_batch) {
  if (stats.sqr <= 0) return std::numeric_limits<double>::infinity();
  return initial_batch * stats.var / stats.sqr;
}

double StatisticalEfficiency(const GradientStats& stats, double initial_batch, double batch) {
  const double scale = batch / initial_batch;
  const double denominator = stats.var / scale + stats.sqr;
  // Nothing measured yet: no gain from a larger batch (AdaptDL's choice).
  const double gain = denominator > 0 ? (stats.var + stats.sqr) / denominator : 1.0;
  return gain / scale;
}

void GradientNoiseSmoother::Add(const GradientStats& stats, double batch, double steps) {
  const double theta = std::pow(kSmoothing, std::max(steps, 1.0) * batch / initial_batch_);
  sqr_biased_ = theta * sqr_biased_ + (1 - theta) * stats.sqr;
  var_biased_ = theta * var_biased_ + (1 - theta) * stats.var;
  weight_ = theta * weight_ + (1 - theta);
}

std::optional<GradientStats> GradientNoiseSmoother::Smoothed() const {
  if (weight_ <= 0) return std::nullopt;
  return GradientStats{.sqr = sqr_biased_ / weight_, .var = var_biased_ / weight_};
}

absl::Status ValidateBatchLimits(const BatchLimits& limits) {
  if (limits.initial_batch == 0) {
    return absl::InvalidArgumentError("spec.batch_scaling.initial_batch_size must be > 0");
  }
  if (limits.max_batch != 0 && limits.max_batch < limits.initial_batch) {
    return absl::InvalidArgumentError(
        absl::StrFormat("spec.batch_scaling.max_batch_size (%d) must be >= "
                        "spec.batch_scaling.initial_batch_size (%d) (0 = no growth)",
                        limits.max_batch, limits.initial_batch));
  }
  if (limits.min_local_batch == 0) {
    return absl::InvalidArgumentError(
        "spec.batch_scaling.min_local_batch_size must be >= 1 (the API's 0 stands for 1)");
  }
  if (limits.max_local_batch != 0 && limits.max_local_batch < limits.min_local_batch) {
    return absl::InvalidArgumentError(
        absl::StrFormat("spec.batch_scaling.max_local_batch_size (%d) must be >= "
                        "spec.batch_scaling.min_local_batch_size (%d)",
                        limits.max_local_batch, limits.min_local_batch));
  }
  const uint32_t max_batch = limits.max_batch == 0 ? limits.initial_batch : limits.max_batch;
  if (limits.max_local_batch == 0 && limits.min_local_batch > max_batch) {
    return absl::InvalidArgumentError(
        absl::StrFormat("spec.batch_scaling.min_local_batch_size (%d) must be <= the largest total "
                        "batch (%d): no worker could run a step",
                        limits.min_local_batch, max_batch));
  }
  return absl::OkStatus();
}

std::optional<BatchChoice> BestBatch(StepTimeFn step_seconds, uint32_t replicas,
                                     const BatchLimits& limits, const GradientStats& stats) {
  if (replicas == 0 || limits.initial_batch == 0) return std::nullopt;
  const double m0 = limits.initial_batch;
  const double max_batch = limits.max_batch == 0 ? m0 : limits.max_batch;
  const double min_local = std::max<uint32_t>(limits.min_local_batch, 1);
  const double max_local = limits.max_local_batch == 0 ? max_batch : limits.max_local_batch;
  const double n = replicas;
  const double min_batch = std::max(m0, min_local * n);
  if (min_batch > max_batch + kEps) return std::nullopt;

  std::optional<BatchChoice> best;
  for (int i = 0; i < kBatchCandidates; ++i) {
    // np.geomspace(min_batch, max_batch) with its default of 50 points.
    const double t = kBatchCandidates == 1 ? 0 : static_cast<double>(i) / (kBatchCandidates - 1);
    const double total = min_batch * std::pow(max_batch / min_batch, t);
    const double local = total / n;
    double accumulation = 0;
    double atomic = 0;
    if (limits.accumulation) {
      accumulation = std::ceil(local / max_local - kEps) - 1;
      if (replicas == 1 && local > m0 + kEps) accumulation = std::max(accumulation, 1.0);
      atomic = std::ceil(local / (accumulation + 1) - kEps);
    } else {
      atomic = replicas == 1 ? m0 : std::ceil(local - kEps);
    }
    if (atomic < min_local || atomic > max_local) continue;
    // Rounding the local batch up may pass the largest total (3 x 334 for
    // 1000): such a candidate is out of the job's bounds.
    if (n * atomic * (accumulation + 1) > max_batch + kEps) continue;
    const BatchChoice choice = EvaluateBatch(step_seconds, replicas, static_cast<uint32_t>(atomic),
                                             static_cast<uint32_t>(accumulation), m0, stats);
    if (!(choice.samples_per_second > 0)) continue;
    // Strictly better only: ties keep the smaller batch (np.argmax keeps
    // the first maximum).
    if (!best.has_value() || choice.goodput > best->goodput) best = choice;
  }
  return best;
}

BatchChoice EvaluateBatch(StepTimeFn step_seconds, uint32_t replicas, uint32_t local_batch,
                          uint32_t accumulation_steps, double m0, const GradientStats& stats) {
  BatchChoice choice;
  choice.local_batch = local_batch;
  choice.accumulation_steps = accumulation_steps;
  choice.total_batch = double(replicas) * local_batch * (accumulation_steps + 1.0);
  choice.step_seconds = step_seconds(local_batch, accumulation_steps);
  if (!(choice.step_seconds > 0) || !std::isfinite(choice.step_seconds) ||
      !(choice.total_batch > 0) || !(m0 > 0)) {
    return choice;
  }
  choice.samples_per_second = choice.total_batch / choice.step_seconds;
  choice.efficiency = StatisticalEfficiency(stats, m0, choice.total_batch);
  choice.goodput = choice.samples_per_second * choice.efficiency;
  return choice;
}

const BatchChoice& KeepOrSwitch(const BatchChoice& current, const BatchChoice& best) {
  // As AdaptDL's data loader: strictly more than 5% over the current one,
  // which counts as at least 1e-8 (two choices of no goodput never switch).
  return best.goodput > std::max(current.goodput, 1e-8) * (1 + kBatchSwitchGain) ? best : current;
}

}  // namespace rescale
