// ThroughputModel: a job's step time, and so its throughput, as a function
// of the number of workers n, fitted from measured sizes and optional prior
// points, with an uncertainty band.
//
// Usage:
//   std::vector<Observation> obs = ...;            // from MetricsStore stats
//   ThroughputModel model = ThroughputModel::Fit(obs, spec.prior, options);
//   double rate = model.SamplesPerSecond(8);       // whole job, samples/s
//   double band = model.Uncertainty(8);            // half-width, samples/s
//
// The model form, the fitting method and why they were chosen are documented
// in src/throughput_model.cc's header comment. Contract every implementation
// keeps:
//  * Deterministic: the same inputs give bit-identical outputs.
//  * Works from one observed size (prior: near-linear scaling) and improves
//    as sizes are added; more recent observations weigh more (age_seconds).
//  * Predictions are finite and positive for every n >= 1, and never
//    super-linear beyond reason: SamplesPerSecond(n) <= n x SamplesPerSecond(1)
//    x (1 + small tolerance), and step time never decreases with n.
//  * Fit() takes microseconds for a handful of sizes (see rescale-bench).
// Thread safety: a fitted model is immutable; const methods are thread-safe.
#ifndef RESCALE_THROUGHPUT_MODEL_H_
#define RESCALE_THROUGHPUT_MODEL_H_

#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "rescale/types.h"

namespace rescale {

// What the store measured at one world size.
struct Observation {
  uint32_t replicas = 0;
  double step_seconds = 0;    // robust central step time
  double spread_seconds = 0;  // standard deviation of step times
  uint64_t sample_count = 0;
  double mean_batch = 0;   // samples per pod per step
  double age_seconds = 0;  // since its newest sample (0 = now)
  // Nodes the job spanned; 0 = unknown, assumed packed (ModelOptions).
  uint32_t nodes = 0;
  // Replicas on the fullest of those nodes, who share its network link
  // (with `nodes`; 0 = spread evenly, ceil(replicas / nodes)). A placement
  // such as 1 + 3 costs what its fullest node costs, not what 2 + 2 does.
  uint32_t per_node = 0;
  // Samples ever measured at this size (>= sample_count; 0 = sample_count).
  // Not used by the fit, which weighs what the window holds; exploration
  // counts it, so a size whose samples aged out of the window is still
  // known (see rescale/policy.h).
  uint64_t lifetime_count = 0;
};

// The fitted form's sync costs as shares of compute (see throughput_model.cc):
// step(n) = compute x (1 + [n>1](sync_base + sync_per_worker (n-2))
//                     + [nodes>1](node_sync + node_sync_per_colocated (per_node-1))).
struct ScalingShares {
  double sync_base = 0;
  double sync_per_worker = 0;
  double node_sync = 0;
  double node_sync_per_colocated = 0;
};

// The default prior: the median, over the six applications of the Pollux
// traces (tests/data/pollux, T4 GPUs, 4 per node), of each share of the model
// fitted to every measured placement at the app's median batch. Its scaling
// is what a job without data is expected to show: efficiency 0.90 from 2
// workers on while it stays on one node (the slope's median is 0: the ring's
// cost saturates), and 0.46 once a full node's worth spans two or more (the
// traces' median packed efficiency is 0.43 at 8 GPUs and 0.50 at 16). With
// the node size unknown every size is one node, and the prior is the
// near-linear 0.90 that published schedulers assume (Pollux: linear).
// Derivation and check: "the default prior is the median of the shares
// fitted to the six Pollux apps" in tests/throughput_model_test.cc.
inline constexpr ScalingShares kDefaultPriorShares = {0.116, 0.0, 0.634, 0.147};

struct ModelOptions {
  // Observations this old count half as much as fresh ones.
  double half_life_seconds = 600;
  // Sizes with fewer samples than this are ignored by the fit.
  uint64_t min_samples = 5;
  // Per-pod batch used when neither observations nor priors give one.
  double default_local_batch = 1;
  // GPUs per node and per replica, to tell which sizes span nodes when the
  // scheduler packs replicas: predictions and observations without a node
  // count assume ceil(n * gpus_per_replica / gpus_per_node) nodes. 0 GPUs
  // per node = unknown: every size is treated as one node.
  uint32_t gpus_per_node = 0;
  uint32_t gpus_per_replica = 1;
};

class ThroughputModel {
 public:
  // An empty model: no data, no prior. SamplesPerSecond is 0 everywhere.
  ThroughputModel() = default;

  // Fits observations (any order) and prior points (whole-job samples/s at
  // a size, e.g. from offline profiling; used when observations are absent
  // or few). Never fails: with nothing usable the model is empty.
  static ThroughputModel Fit(std::span<const Observation> observations,
                             std::span<const CurvePoint> prior, const ModelOptions& options = {});

  // A model of the shape `shares` in relative units: compute 1 s at a batch
  // of 1, so SamplesPerSecond(n) is the speedup over one worker, placed as
  // `options` packs replicas. With kDefaultPriorShares it is the default
  // prior the planner sizes a job without any data by (only ratios of its
  // curve matter to the planner's objective). No anchors: Uncertainty is the
  // full band everywhere.
  static ThroughputModel FromShares(const ScalingShares& shares, const ModelOptions& options = {});

  // The same job on another GPU type (Sia's bootstrapping, SOSP'23 3.1):
  // `source` is its model on a type it ran on, `measured` one measurement on
  // the other type (usually one GPU; its mean_batch, or the source's batch
  // when 0). Compute comes from the measurement, so a type whose GPUs are
  // faster for this job says so; the sync costs are the source's in seconds
  // times `sync_scale`, the ratio of the two types' interconnects (1 =
  // unknown: the same seconds), the costs of spanning nodes times
  // `across_scale` (unset: `sync_scale`); the node size is the target's
  // (`options`). The uncertainty reflects the guess: sizes the source
  // measured carry kTypeTransferError on top of their own error, and the
  // band grows from there as it does from any anchor. Empty when `source`
  // is empty or the measurement unusable (no replicas, step not finite and
  // positive).
  static ThroughputModel OnOtherType(const ThroughputModel& source, const Observation& measured,
                                     const ModelOptions& options, double sync_scale = 1,
                                     std::optional<double> across_scale = std::nullopt);
  static constexpr double kTypeTransferError = 0.25;
  // The same, with the target's sync costs given outright in seconds (the
  // four terms of the fitted form, as ScalingShares orders them): a sync
  // shape learned per size rather than the source's scaled (see
  // engine::ModelOnType).
  static ThroughputModel OnOtherType(const ThroughputModel& source, const Observation& measured,
                                     const ModelOptions& options,
                                     const ScalingShares& sync_seconds);

  // The synchronisation in the step of n replicas placed on nodes of
  // `gpus_per_node` GPUs (packed; spread evenly over `nodes` when > 0), in
  // seconds: what every multi-replica step pays (`within`), and what
  // spanning nodes adds (`across`). What OnOtherType's two scales multiply.
  struct SyncSplit {
    double within = 0;
    double across = 0;
    bool spans_nodes = false;  // the placement has more than one node
  };
  SyncSplit SyncAt(uint32_t n, uint32_t gpus_per_node, uint32_t nodes = 0) const;

  // Whether any observation or prior informed the fit.
  bool empty() const { return empty_; }
  // Step time at n workers, seconds (0 when empty).
  double StepSeconds(uint32_t n) const;
  // Whole-job throughput at n workers, samples/s (0 when empty).
  double SamplesPerSecond(uint32_t n) const;
  // Half-width of the uncertainty band of SamplesPerSecond(n), samples/s:
  // small near observed sizes, growing with distance from them.
  double Uncertainty(uint32_t n) const;
  // SamplesPerSecond(n) / (n x SamplesPerSecond(1)); 1 = linear.
  double Efficiency(uint32_t n) const;
  // One optimizer step at n workers when each processes `local_batch`
  // samples per micro-step and takes `accumulation_steps` extra micro-steps
  // before synchronising, seconds (0 when empty or local_batch <= 0).
  // Compute follows Pollux's T_grad(m) = alpha_c + beta_c x m. Observations
  // carry their batch (Observation::mean_batch): when they span batches
  // kMinBatchSpread apart or more, alpha_c's share is fitted with the rest;
  // with one batch it is held at half the fitted compute, as Pollux's
  // fit_perf_params does with a single batch size (kComputeFixedShare):
  // larger batches look cheaper per sample until measurements at them say
  // otherwise.
  double StepSecondsAt(uint32_t n, double local_batch, uint32_t accumulation_steps) const;
  // Share of the fitted compute that does not grow with the local batch
  // when one batch was measured (Pollux's held alpha_c); with observations
  // at batches at least kMinBatchSpread apart it is fitted instead.
  static constexpr double kComputeFixedShare = 0.5;
  static constexpr double kMinBatchSpread = 1.25;
  // The share in use (fitted or held).
  double compute_fixed_share() const { return compute_fixed_share_; }
  // The local batch the model's compute was fitted at (samples per worker
  // per step).
  double local_batch() const { return local_batch_; }
  // GPUs each replica takes when the model places replicas on nodes.
  uint32_t gpus_per_replica() const { return gpus_per_replica_; }
  // The fitted sync costs as shares of compute (all 0 when empty).
  ScalingShares shares() const;
  // The same four costs in seconds.
  ScalingShares sync_seconds() const;
  // Largest size with enough observations (0 when none).
  uint32_t largest_observed() const { return largest_observed_; }
  // Root-mean-square log error of step time over the observations used.
  double rms_log_error() const { return rms_log_error_; }
  // Whether the fit used size n: measured there, or a prior point it kept
  // (one no measurement replaced or contradicted).
  bool FittedAt(uint32_t n) const {
    return std::any_of(anchors_.begin(), anchors_.end(),
                       [n](const Anchor& anchor) { return anchor.replicas == n; });
  }
  // One line for people, e.g. "step(n) = 0.21 + [n>1](0.012 + 0.031*(n-2)) s,
  // batch 32, fitted at n=1,2,4, rms log error 0.015".
  std::string Describe() const;

 private:
  bool empty_ = true;
  // Parameters of the fitted form (see throughput_model.cc).
  double compute_seconds_ = 0;
  double sync_base_seconds_ = 0;
  double sync_per_worker_seconds_ = 0;
  double node_sync_seconds_ = 0;
  double node_sync_per_colocated_seconds_ = 0;
  uint32_t gpus_per_replica_ = 1;
  uint32_t gpus_per_node_ = 0;
  double local_batch_ = 1;
  double compute_fixed_share_ = kComputeFixedShare;
  uint32_t largest_observed_ = 0;
  uint32_t smallest_observed_ = 0;
  double rms_log_error_ = 0;
  // A size the fit saw (measured or prior) and the relative error of step
  // time there; the band grows with log-distance from the nearest anchor.
  struct Anchor {
    uint32_t replicas = 0;
    double relative_error = 0;
  };
  std::vector<Anchor> anchors_;  // ascending replicas
};

}  // namespace rescale

#endif  // RESCALE_THROUGHPUT_MODEL_H_
