// Goodput: how much training progress a job makes per second, not only how
// many samples it processes. Past its gradient noise scale, a larger total
// batch needs more samples to reach the same quality, so Pollux plans on
//   goodput(M) = throughput(M) x EFF(M)
// where EFF(M) is the statistical efficiency of total batch M against the
// job's initial total batch M0 (Pollux, OSDI'21; AdaptDL's
// adaptdl/goodput.py and adaptdl/torch/gradient_noise_scale.py on master).
//
// What lives here:
//  * GradientStats and StatisticalEfficiency: EFF(M) from a job's gradient
//    statistics, normalized to its initial batch as AdaptDL keeps them.
//  * GradientNoiseSmoother: the exponential moving average AdaptDL's trainer
//    keeps of those statistics, for reports of raw per-step estimates.
//  * BestBatch: the local batch and accumulation steps that maximise
//    goodput at a number of replicas, within the job's bounds, searched as
//    AdaptDL's GoodputFunction.optimize does.
//
// Pure functions and values: no locks, no I/O, deterministic.
#ifndef RESCALE_GOODPUT_H_
#define RESCALE_GOODPUT_H_

#include <cstdint>
#include <optional>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "rescale/types.h"

namespace rescale {

// A job's gradient statistics, as AdaptDL's GradientNoiseScale keeps them:
// `sqr` estimates |G|^2, the squared norm of the true gradient, and `var`
// the trace of the covariance of a gradient estimated on a batch of the
// job's initial total batch M0 (a variance measured at total batch M is
// multiplied by M / M0 to get it). Both are >= 0.
struct GradientStats {
  double sqr = 0;
  double var = 0;
  friend bool operator==(const GradientStats&, const GradientStats&) = default;
};

// The gradient noise scale phi = M0 x var / sqr, in samples: the total batch
// beyond which a larger one stops paying for itself. Infinite when sqr is 0
// (noise only: every batch is as efficient).
double NoiseScale(const GradientStats& stats, double initial_batch);

// EFF(M) = (phi + M0) / (phi + M), computed as AdaptDL does, r / s with
// s = M / M0 and r = (var + sqr) / (var / s + sqr): 1 at M0, falling as M
// grows past phi; 1 everywhere for noise alone (sqr = 0). With nothing
// measured (var + sqr = 0), r = 1 and EFF = M0 / M, as AdaptDL: a larger
// batch is assumed to buy nothing until statistics say otherwise.
// M and M0 > 0.
double StatisticalEfficiency(const GradientStats& stats, double initial_batch, double batch);

// Exponential moving average of per-step estimates, with AdaptDL's bias
// correction: each step at total batch M weighs old values by
// theta = 0.999^(M / M0), so a step with a larger batch counts as more
// steps at M0. A report that summarises k steps counts as k of them.
class GradientNoiseSmoother {
 public:
  static constexpr double kSmoothing = 0.999;

  explicit GradientNoiseSmoother(double initial_batch) : initial_batch_(initial_batch) {}

  // One report: `stats` normalized to M0 (see GradientStats), measured at
  // total batch `batch`, summarising `steps` training steps (>= 1).
  void Add(const GradientStats& stats, double batch, double steps = 1);
  // The smoothed statistics; nullopt before the first report.
  std::optional<GradientStats> Smoothed() const;
  double initial_batch() const { return initial_batch_; }

 private:
  double initial_batch_;
  // Biased averages and the weight they carry (AdaptDL's "_biased" and
  // "_unbias"): the estimate is biased / weight.
  double sqr_biased_ = 0;
  double var_biased_ = 0;
  double weight_ = 0;
};

// BatchLimits (what a job allows its batch to be) is in rescale/types.h,
// as JobSpec::batch_scaling.

// Checks limits, naming the field (spec.batch_scaling.*) and the bound
// that fails.
absl::Status ValidateBatchLimits(const BatchLimits& limits);

// A local batch and accumulation at a number of replicas, with what it buys.
struct BatchChoice {
  uint32_t local_batch = 0;         // per worker per micro-step
  uint32_t accumulation_steps = 0;  // extra micro-steps per optimizer step
  double total_batch = 0;           // replicas x local x (accumulation + 1)
  double step_seconds = 0;          // one optimizer step
  double samples_per_second = 0;    // total_batch / step_seconds
  double efficiency = 0;            // EFF(total_batch)
  double goodput = 0;               // samples_per_second x efficiency
};

// Candidates AdaptDL's optimize() tries: total batches geometrically spaced
// between max(M0, replicas x min_local) and max_batch.
inline constexpr int kBatchCandidates = 50;
// A new batch is worth adopting only when its goodput beats the current
// one's by more than this (AdaptDL: 5%).
inline constexpr double kBatchSwitchGain = 0.05;

// Step time of one optimizer step at (local batch, accumulation steps) on
// the replicas in question, seconds (> 0), e.g. from the throughput model.
using StepTimeFn = absl::FunctionRef<double(uint32_t local_batch, uint32_t accumulation_steps)>;

// The choice with the highest goodput at `replicas` (>= 1), searched over
// kBatchCandidates totals as AdaptDL does: with accumulation, a local batch
// above the largest allowed is split into micro-steps (and one replica
// accumulates at least once past M0, since one micro-batch alone gives no
// gradient statistics); without it, one replica keeps M0. nullopt when no
// candidate fits the limits at this many replicas (replicas x min local
// batch above the largest total).
std::optional<BatchChoice> BestBatch(StepTimeFn step_seconds, uint32_t replicas,
                                     const BatchLimits& limits, const GradientStats& stats);

// What one (local batch, accumulation) at `replicas` buys, with `m0` the
// job's initial total batch; step_seconds <= 0 or not finite gives a choice
// of no goodput.
BatchChoice EvaluateBatch(StepTimeFn step_seconds, uint32_t replicas, uint32_t local_batch,
                          uint32_t accumulation_steps, double m0, const GradientStats& stats);

// The choice to run: `best` when its goodput beats `current`'s by more than
// kBatchSwitchGain, else `current` (a batch change on its own is never a
// reason to restart a job; the caller decides when it applies).
const BatchChoice& KeepOrSwitch(const BatchChoice& current, const BatchChoice& best);

}  // namespace rescale

#endif  // RESCALE_GOODPUT_H_
