// ThroughputModel: fits a job's step time as a function of its number of
// workers n from what the metrics store measured at a few sizes (plus any
// prior points from offline profiling), and predicts step time, whole-job
// throughput, parallel efficiency and an uncertainty band for any n. Fit() is
// a handful of 5x5 non-negative least-squares solves: no optimiser, no
// randomness, microseconds per job (BM_ModelFit in bench/rescale_bench.cc).
//
// Model form. step = compute + sync(n) + across(n), all terms >= 0:
//   sync(n)   = [n >= 2] (sync_base + sync_per_worker * (n - 2))
//   across(n) = [nodes > 1] (node_sync + node_sync_per_colocated * (per_node - 1))
// where nodes is how many nodes the job spans and per_node the replicas on
// its fullest node. This is Pollux's throughput model (AdaptDL goodput.py,
// OSDI'21) in the form our samples can identify. Data-parallel training at a
// fixed per-pod batch does the same gradient work per pod at every n (the
// constant `compute`); what n changes is the all-reduce, which costs nothing
// on one worker, jumps as soon as there is a second one (a ring's bandwidth
// term 2(n-1)/n * S/B is already half its asymptote at n = 2, plus fixed
// latency and framework overhead) and then grows slowly (2(n-1) latency
// hops, more links to share). Pollux fits two such sync laws, one inside a
// node and one across nodes; we keep the in-node law for every size and add
// the cross-node cost on top, and make it grow with the replicas that share
// one node's network link: in the Pollux traces a two-node placement of 4
// GPUs ("22") is slower than a four-node one ("1111"), and the packed 8
// ("44") slower again, which a cost in the node count alone cannot follow.
// Where the job runs: observations may carry their node count and the replicas
// on their fullest node (else spread evenly; "13" read as "22" takes bert's
// median error up to 8 GPUs from 3.5% to 10.5% and yolov3's from 6.4% to 14.0%,
// tests/batch_model_trace_test.cc); otherwise, and for every prediction,
// replicas are packed onto the fewest nodes of ModelOptions::gpus_per_node
// GPUs, as gang schedulers place them. With the node size unknown (0) every
// size is one node, the cross-node terms are never used, and the model is the
// three-parameter in-node law. Pollux's compute/sync overlap exponent g is
// fixed at 1 (times add): g is not identifiable from step times at a few sizes,
// and with g = 1 the model is linear in its parameters, which is what makes the
// fit closed-form. Optimus's 1/(t0*M/w + t1 + t2*w) is the same idea
// (non-negative terms fitted by NNLS) with the batch split across workers; at a
// fixed per-pod batch its M/w term is our constant. The in-node parameters are
// identified one per new size (n = 1 gives compute, n = 2 the jump, any n >= 3
// the slope) and the cross-node ones by the placements that span nodes, so "fix
// what the data cannot identify" (Pollux keeps its slopes fixed until it has
// seen K > 2) falls out of the prior below. Non-negative parameters and a
// packed placement whose node count and fullest node never shrink as n grows
// make step time non-decreasing in n, so a prediction is never super-linear:
// throughput(n) <= n * throughput(1) by construction, for every input.
// Alternatives measured on the traces below (median step-time error at 8
// workers, median / smallest / largest batch): the in-node law alone, as
// before placements were known, 12% / 15% / 5%; a cross-node cost in the
// node count alone ([nodes > 1] * node_sync) 21% / - / -; in the replicas
// per node alone 10% / 17% / 7%; the form above 4.2% / 16% / 3.4%. The
// ring form compute + a*(n-1)/n + b*(n-1) gave 13% / 15% / 7% in place of
// the in-node law, with its a/b split poorly identified from sizes <= 4.
//
// Fitting. Minimise the weighted squared log error of step time (Pollux's RMS
// log error): step-time noise is multiplicative, and in log space one set of
// constants serves a 10 ms and a 2 s step alike. Because step(n) is linear in
// the parameters, each Gauss-Newton step on the log residuals is a
// 5-variable weighted NNLS, solved exactly by enumerating the 31 possible
// supports; the first step, linearised at the observed values, is the
// closed-form relative-error fit, and at most kGaussNewtonSteps - 1 more
// steps (each halved at most kStepHalvings times, and taken only when the true
// objective decreases) finish the job. Rows are sorted first, so the result
// does not depend on the order observations arrive in.
// Weights: each observation's inverse variance of log step time,
// 1 / ((spread / (step * sqrt(count)))^2 + kModelErrorFloor^2), times its
// recency 0.5^(age / half_life) relative to the freshest observation (so a
// job whose data are all old still fits them, and the prior's relative
// strength does not grow with time). Prior points are rows too, with their
// stated relative uncertainty (kDefaultPriorRelativeError when none), at the
// sizes that have no observation: a measurement replaces the prior at its
// size; a prior point a measurement contradicts (a step shorter than one
// measured at fewer workers, or longer than one measured at more, beyond
// kPriorContradictionSigmas of its uncertainty: impossible with step time
// non-decreasing in n) is dropped; and elsewhere a prior point shapes the
// extrapolation as much as its uncertainty allows (a 10% prior weighs about
// a twenty-fifth of a typical observation). We do not down-weight outliers: the store already
// reduces each size to a robust central step time, and a model in n alone cannot tell an outlying
// size from a real change in scaling. The per-pod batch is the weighted mean of the observations'
// mean_batch; step times are not rescaled for batch changes (recency weighting retires the old
// batch). Prior. Published schedulers assume near-linear scaling without data (Pollux: linear until
// profiled). We add four weak ridge rows saying sync_base ~ 5% and sync_per_worker ~ 0.2% of
// compute, and likewise node_sync ~ 5% and node_sync_per_colocated ~ 0.2% (sigma = 20% of the
// reference step): they decide only what the data leave undetermined (with
// one size, all of the compute/sync split; with sizes 1 and 2, the slope;
// with no placement across nodes, the cross-node cost)
// and barely move a well-determined fit (a 4-size exact law is reproduced
// within 1%). The prior alone gives efficiency 0.94 at 8 workers, 0.85 at
// 64, 0.49 at 512. Compute is bounded below by 10% of the step at the
// smallest size (Pollux's fit is bounded too), which keeps throughput at
// n = 1 finite when the data would pull compute to zero.
//
// Uncertainty. Each measured or prior size is an anchor with relative error
// sqrt(1 / (sum of its row weights) + rms_log_error^2): the standard error of
// its mean plus the model-error floor, stretched by age, plus how far the fit
// misses the data. Away from anchors the error grows by
// kExtrapolationPerLogSize per unit of |ln(n / anchor)| (about 21% per
// doubling); the band is the smallest over anchors, capped at 100% of the
// prediction. On the traces below the band at 2x the largest size covers
// the throughput error of all six apps (errors 0.4-9.3%, bands 22-24%) and
// at 4x five of six (yolov3: error 47%, band 43%).
//
// Validation (tests/throughput_model_test.cc: Pollux traces, every placement
// with <= 4 GPUs as observations with their node counts, nodes of 4 GPUs,
// compared with the packed placement at 8 and 16). Median absolute step-time
// error: 4.2% at 8 workers (target 10%; 0.4-10.2% per app) and 57% at 16.
// The packed 16 ("4444") is faster than the packed 8 ("44") in every app,
// which no model with step time non-decreasing in n can reproduce.
#include "rescale/throughput_model.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "throughput_model_internal.h"

namespace rescale {

using throughput_internal::Basis;
using throughput_internal::Dot;
using throughput_internal::Finite;
using throughput_internal::FitParameters;
using throughput_internal::FitRow;
using throughput_internal::kFixedShareGrid;
using throughput_internal::kMaxRelativeUncertainty;
using throughput_internal::kParams;
using throughput_internal::kPriorNodeSyncShare;
using throughput_internal::kPriorSyncBaseShare;
using throughput_internal::kPriorSyncPerWorkerShare;
using throughput_internal::Objective;
using throughput_internal::Packed;
using throughput_internal::Placement;
using throughput_internal::RowBasis;
using throughput_internal::Spread;
using throughput_internal::Vec;
namespace {

// Relative step-time error every observation is assumed to carry at least:
// model error, not measurement error, so many samples cannot make a size
// infinitely precise.
constexpr double kModelErrorFloor = 0.02;
// Relative error of a prior point that states no uncertainty.
constexpr double kDefaultPriorRelativeError = 0.10;
// Smallest relative error a prior point can claim (it is not a measurement).
constexpr double kMinPriorRelativeError = 0.05;
// A prior point off by more than this many of its relative errors in the
// impossible direction from a measurement is dropped (see Fit).
constexpr double kPriorContradictionSigmas = 2.0;
// Compute is at least this share of the step time at the smallest size.
constexpr double kMinComputeShare = 0.10;
// Growth of the relative uncertainty per unit of |ln(n / anchor)|.
constexpr double kExtrapolationPerLogSize = 0.30;
// Rows weighing less than this relative to the freshest one (about 20 half
// lives) carry no information worth the arithmetic.
constexpr double kNegligibleRecency = 1e-6;
constexpr double kDefaultLocalBatch = 1.0;

}  // namespace

ThroughputModel ThroughputModel::Fit(std::span<const Observation> observations,
                                     std::span<const CurvePoint> prior,
                                     const ModelOptions& options) {
  ThroughputModel model;

  // ---- usable observations and their recency --------------------------------
  auto usable = [&](const Observation& o) {
    return o.replicas > 0 && Finite(o.step_seconds) && o.step_seconds > 0 &&
           o.sample_count >= std::max<uint64_t>(options.min_samples, 1) &&
           !std::isnan(o.age_seconds) && o.age_seconds < std::numeric_limits<double>::infinity();
  };
  const bool decays = Finite(options.half_life_seconds) && options.half_life_seconds > 0;
  double freshest = std::numeric_limits<double>::infinity();
  for (const Observation& o : observations) {
    if (usable(o)) freshest = std::min(freshest, std::max(0.0, o.age_seconds));
  }
  auto recency = [&](const Observation& o) {
    if (!decays) return 1.0;
    const double age = std::max(0.0, o.age_seconds) - freshest;
    return std::exp2(-age / options.half_life_seconds);
  };

  struct Measured {
    double replicas;
    Placement where;
    double step, weight;
    double batch;  // mean samples per worker per step (0 = unknown)
  };
  const uint32_t gpus_per_replica = std::max<uint32_t>(options.gpus_per_replica, 1);
  auto placement_of = [&](const Observation& o) {
    if (o.nodes > 0) return Spread(o.replicas, o.nodes, o.per_node);
    return Packed(o.replicas, gpus_per_replica, options.gpus_per_node);
  };
  std::vector<Measured> measured;
  double batch_weight = 0, batch_sum = 0;
  for (const Observation& o : observations) {
    if (!usable(o)) continue;
    const double fresh = recency(o);
    if (!(fresh >= kNegligibleRecency)) continue;
    const double spread = Finite(o.spread_seconds) ? std::max(0.0, o.spread_seconds) : 0.0;
    const double standard_error =
        std::min(1.0, spread / (o.step_seconds * std::sqrt(static_cast<double>(o.sample_count))));
    const double weight =
        fresh / (standard_error * standard_error + kModelErrorFloor * kModelErrorFloor);
    measured.push_back({static_cast<double>(o.replicas), placement_of(o), o.step_seconds, weight,
                        Finite(o.mean_batch) && o.mean_batch > 0 ? o.mean_batch : 0.0});
    if (Finite(o.mean_batch) && o.mean_batch > 0) {
      batch_weight += weight;
      batch_sum += weight * o.mean_batch;
    }
  }
  double local_batch = options.default_local_batch;
  if (!(Finite(local_batch) && local_batch > 0)) local_batch = kDefaultLocalBatch;
  if (batch_weight > 0) local_batch = batch_sum / batch_weight;

  // ---- prior points, as step times at the same per-pod batch -----------------
  struct PriorStep {
    double replicas;
    Placement where;
    double step, weight;
  };
  std::vector<PriorStep> prior_steps;
  auto measured_at = [&](uint32_t n) {
    return std::any_of(measured.begin(), measured.end(),
                       [&](const Measured& m) { return m.replicas == n; });
  };
  // A prior point a measurement contradicts: with step time never falling as
  // workers are added (the model's one structural assumption), it claims a
  // step shorter than one measured at fewer workers, or longer than one
  // measured at more, by more than kPriorContradictionSigmas of its stated
  // uncertainty. Only packed measurements compare (a spread placement is
  // slower than the packed one the prior describes).
  auto contradicted = [&](double n, const Placement& where, double step, double relative) {
    const double slack = 1 + kPriorContradictionSigmas * relative;
    for (const Measured& m : measured) {
      if (m.where.nodes != Packed(m.replicas, gpus_per_replica, options.gpus_per_node).nodes ||
          where.nodes != Packed(n, gpus_per_replica, options.gpus_per_node).nodes)
        continue;
      if (m.replicas < n && step * slack < m.step) return true;
      if (m.replicas > n && step > m.step * slack) return true;
    }
    return false;
  };
  for (const CurvePoint& p : prior) {
    if (p.replicas == 0 || !Finite(p.samples_per_second) || !(p.samples_per_second > 0)) continue;
    // A measurement replaces the prior at its size: the prior was a guess
    // about this job, the measurement is the job.
    if (measured_at(p.replicas)) continue;
    const double step = p.replicas * local_batch / p.samples_per_second;
    if (!Finite(step) || !(step > 0)) continue;
    double relative = kDefaultPriorRelativeError;
    if (Finite(p.uncertainty) && p.uncertainty > 0) {
      relative = std::max(kMinPriorRelativeError, p.uncertainty / p.samples_per_second);
    }
    // ...and overrides it where they disagree: a contradicted point would
    // otherwise pull the fit away from the measurements (a linear prior at 8
    // against a flat measurement at 4 moved the fit 15% off the measured 4).
    const Placement where = Packed(p.replicas, gpus_per_replica, options.gpus_per_node);
    if (contradicted(p.replicas, where, step, relative)) continue;
    prior_steps.push_back(
        {static_cast<double>(p.replicas), where, step, 1.0 / (relative * relative)});
  }
  if (measured.empty() && prior_steps.empty()) return model;

  // ---- rows in units of the reference step, in a canonical order ----------------
  std::vector<FitRow> rows;
  rows.reserve(measured.size() + prior_steps.size());
  for (const Measured& m : measured)
    rows.push_back({m.replicas, m.where, m.step, m.weight, true, m.batch, 1.0});
  for (const PriorStep& p : prior_steps) {
    rows.push_back({p.replicas, p.where, p.step, p.weight, false, 0.0, 1.0});
  }
  std::sort(rows.begin(), rows.end(), [](const FitRow& a, const FitRow& b) {
    if (a.replicas != b.replicas) return a.replicas < b.replicas;
    if (a.where.nodes != b.where.nodes) return a.where.nodes < b.where.nodes;
    if (a.where.per_node != b.where.per_node) return a.where.per_node < b.where.per_node;
    if (a.step != b.step) return a.step < b.step;
    if (a.weight != b.weight) return a.weight < b.weight;
    return a.observed < b.observed;
  });
  // Reference step: weighted geometric mean at the smallest size. Working in
  // its units keeps the normal equations O(1) whatever the job's step time.
  double log_sum = 0, log_weight = 0;
  for (const FitRow& row : rows) {
    if (row.replicas != rows.front().replicas) break;
    log_sum += row.weight * std::log(row.step);
    log_weight += row.weight;
  }
  const double reference = std::exp(log_sum / log_weight);
  for (FitRow& row : rows) row.step /= reference;

  // The reference step is one at the smallest size, so the bound reads
  // "compute >= kMinComputeShare of the step there".
  const Vec lower = {kMinComputeShare, 0.0, 0.0, 0.0, 0.0};
  // Pollux's T_grad = alpha_c + beta_c x m: with observations at two batches
  // or more (kMinBatchSpread apart), the share of compute that does not grow
  // with the batch is fitted, by the least objective over a grid; with one,
  // it is held (kComputeFixedShare) and every row's compute scale stays 1,
  // so the fit is exactly the batch-blind one.
  double fixed_share = kComputeFixedShare;
  double least_batch = 0, most_batch = 0;
  for (const FitRow& row : rows) {
    if (!row.observed || !(row.batch > 0)) continue;
    least_batch = least_batch == 0 ? row.batch : std::min(least_batch, row.batch);
    most_batch = std::max(most_batch, row.batch);
  }
  auto scale_compute = [&](double share) {
    for (FitRow& row : rows)
      row.compute_scale =
          row.observed && row.batch > 0 ? share + (1 - share) * row.batch / local_batch : 1.0;
  };
  Vec params = FitParameters(rows, lower);
  if (least_batch > 0 && most_batch >= kMinBatchSpread * least_batch) {
    double best = std::numeric_limits<double>::infinity();
    for (int k = 0; k < kFixedShareGrid; ++k) {
      scale_compute((k + 0.5) / kFixedShareGrid);
      const Vec candidate = FitParameters(rows, lower);
      if (const double objective = Objective(rows, candidate); objective < best) {
        best = objective;
        params = candidate;
        fixed_share = (k + 0.5) / kFixedShareGrid;
      }
    }
    scale_compute(fixed_share);
  }
  if (!std::all_of(params.begin(), params.end(), Finite)) {
    // Unreachable with finite inputs; fall back to the prior through the
    // reference point rather than fail.
    const double n = rows.front().replicas;
    const Vec prior_shape = {1.0, kPriorSyncBaseShare, kPriorSyncPerWorkerShare,
                             kPriorNodeSyncShare, kPriorSyncPerWorkerShare};
    const double shape = Dot(Basis(n, rows.front().where), prior_shape);
    for (int i = 0; i < kParams; ++i) params[i] = prior_shape[i] / shape;
  }

  model.empty_ = false;
  model.local_batch_ = local_batch;
  model.compute_fixed_share_ = fixed_share;
  model.compute_seconds_ = params[0] * reference;
  model.sync_base_seconds_ = params[1] * reference;
  model.sync_per_worker_seconds_ = params[2] * reference;
  model.node_sync_seconds_ = params[3] * reference;
  model.node_sync_per_colocated_seconds_ = params[4] * reference;
  model.gpus_per_replica_ = gpus_per_replica;
  model.gpus_per_node_ = options.gpus_per_node;

  // ---- fit quality and uncertainty anchors --------------------------------------
  // RMS log error over the observations (over the prior points when there are
  // none), weighted like the fit.
  const bool any_observed = !measured.empty();
  double squared = 0, weight_sum = 0;
  for (const FitRow& row : rows) {
    if (row.observed != any_observed) continue;
    const double r = std::log(Dot(RowBasis(row), params) / row.step);
    squared += row.weight * r * r;
    weight_sum += row.weight;
  }
  model.rms_log_error_ = std::sqrt(squared / weight_sum);

  for (size_t i = 0; i < rows.size();) {
    double precision = 0;
    size_t j = i;
    for (; j < rows.size() && rows[j].replicas == rows[i].replicas; ++j)
      precision += rows[j].weight;
    const double relative =
        std::sqrt(1.0 / precision + model.rms_log_error_ * model.rms_log_error_);
    model.anchors_.push_back({static_cast<uint32_t>(rows[i].replicas), relative});
    i = j;
  }
  for (const FitRow& row : rows) {
    if (!row.observed) continue;
    const auto n = static_cast<uint32_t>(row.replicas);
    if (model.smallest_observed_ == 0) model.smallest_observed_ = n;
    model.largest_observed_ = std::max(model.largest_observed_, n);
  }
  return model;
}

ThroughputModel ThroughputModel::FromShares(const ScalingShares& shares,
                                            const ModelOptions& options) {
  ThroughputModel model;
  auto share = [](double v) { return Finite(v) ? std::max(0.0, v) : 0.0; };
  model.empty_ = false;
  model.compute_seconds_ = 1;
  model.sync_base_seconds_ = share(shares.sync_base);
  model.sync_per_worker_seconds_ = share(shares.sync_per_worker);
  model.node_sync_seconds_ = share(shares.node_sync);
  model.node_sync_per_colocated_seconds_ = share(shares.node_sync_per_colocated);
  model.gpus_per_replica_ = std::max<uint32_t>(options.gpus_per_replica, 1);
  model.gpus_per_node_ = options.gpus_per_node;
  model.local_batch_ = 1;
  return model;
}

ThroughputModel ThroughputModel::OnOtherType(const ThroughputModel& source,
                                             const Observation& measured,
                                             const ModelOptions& options, double sync_scale,
                                             std::optional<double> across_scale) {
  const double scale = Finite(sync_scale) ? std::max(0.0, sync_scale) : 1.0;
  const double across =
      across_scale && Finite(*across_scale) ? std::max(0.0, *across_scale) : scale;
  return OnOtherType(
      source, measured, options,
      {source.sync_base_seconds_ * scale, source.sync_per_worker_seconds_ * scale,
       source.node_sync_seconds_ * across, source.node_sync_per_colocated_seconds_ * across});
}

ThroughputModel ThroughputModel::OnOtherType(const ThroughputModel& source,
                                             const Observation& measured,
                                             const ModelOptions& options,
                                             const ScalingShares& sync_seconds) {
  ThroughputModel model;
  if (source.empty_ || measured.replicas == 0 || !(measured.step_seconds > 0) ||
      !Finite(measured.step_seconds)) {
    return model;
  }
  auto seconds = [](double s) { return Finite(s) ? std::max(0.0, s) : 0.0; };
  model = source;
  model.sync_base_seconds_ = seconds(sync_seconds.sync_base);
  model.sync_per_worker_seconds_ = seconds(sync_seconds.sync_per_worker);
  model.node_sync_seconds_ = seconds(sync_seconds.node_sync);
  model.node_sync_per_colocated_seconds_ = seconds(sync_seconds.node_sync_per_colocated);
  model.gpus_per_replica_ = std::max<uint32_t>(options.gpus_per_replica, 1);
  model.gpus_per_node_ = options.gpus_per_node;
  // Compute at the source's batch from the measured step: what the sync
  // (scaled) does not explain at the measured size, at least
  // kMinComputeShare of it, then moved to the source's reference batch by
  // the source's batch law.
  const double n = measured.replicas;
  const Placement where = measured.nodes > 0
                              ? Spread(n, measured.nodes)
                              : Packed(n, model.gpus_per_replica_, model.gpus_per_node_);
  Vec sync_only = {0, model.sync_base_seconds_, model.sync_per_worker_seconds_,
                   model.node_sync_seconds_, model.node_sync_per_colocated_seconds_};
  const double sync = Dot(Basis(n, where), sync_only);
  double compute = std::max(measured.step_seconds - sync, kMinComputeShare * measured.step_seconds);
  const double batch = measured.mean_batch > 0 ? measured.mean_batch : source.local_batch_;
  compute /=
      source.compute_fixed_share_ + (1 - source.compute_fixed_share_) * batch / source.local_batch_;
  model.compute_seconds_ = compute;
  const double spread = measured.sample_count > 1 && measured.spread_seconds > 0
                            ? measured.spread_seconds / measured.step_seconds /
                                  std::sqrt(double(measured.sample_count))
                            : 0;
  model.anchors_.clear();
  for (const Anchor& a : source.anchors_) {
    if (a.replicas != measured.replicas) {
      model.anchors_.push_back({a.replicas, std::hypot(a.relative_error, kTypeTransferError)});
    }
  }
  model.anchors_.push_back({measured.replicas, std::max(kModelErrorFloor, spread)});
  std::sort(model.anchors_.begin(), model.anchors_.end(),
            [](const Anchor& a, const Anchor& b) { return a.replicas < b.replicas; });
  model.largest_observed_ = measured.replicas;
  model.smallest_observed_ = measured.replicas;
  return model;
}

ThroughputModel::SyncSplit ThroughputModel::SyncAt(uint32_t n, uint32_t gpus_per_node,
                                                   uint32_t nodes) const {
  if (empty_ || n < 2) return {};
  const Placement where =
      nodes > 0 ? Spread(n, nodes) : Packed(n, gpus_per_replica_, gpus_per_node);
  const Vec basis = Basis(n, where);
  return {Dot(basis, {0, sync_base_seconds_, sync_per_worker_seconds_, 0, 0}),
          Dot(basis, {0, 0, 0, node_sync_seconds_, node_sync_per_colocated_seconds_}),
          where.nodes > 1};
}

ScalingShares ThroughputModel::shares() const {
  if (empty_ || !(compute_seconds_ > 0)) return {};
  return {sync_base_seconds_ / compute_seconds_, sync_per_worker_seconds_ / compute_seconds_,
          node_sync_seconds_ / compute_seconds_,
          node_sync_per_colocated_seconds_ / compute_seconds_};
}

ScalingShares ThroughputModel::sync_seconds() const {
  if (empty_) return {};
  return {sync_base_seconds_, sync_per_worker_seconds_, node_sync_seconds_,
          node_sync_per_colocated_seconds_};
}

double ThroughputModel::StepSeconds(uint32_t n) const {
  if (empty_ || n == 0) return 0;
  return Dot(Basis(n, Packed(n, gpus_per_replica_, gpus_per_node_)),
             {compute_seconds_, sync_base_seconds_, sync_per_worker_seconds_, node_sync_seconds_,
              node_sync_per_colocated_seconds_});
}

double ThroughputModel::SamplesPerSecond(uint32_t n) const {
  if (empty_ || n == 0) return 0;
  return n * local_batch_ / StepSeconds(n);
}

double ThroughputModel::StepSecondsAt(uint32_t n, double local_batch,
                                      uint32_t accumulation_steps) const {
  if (empty_ || n == 0 || !(local_batch > 0)) return 0;
  const double grad = compute_seconds_ * (compute_fixed_share_ +
                                          (1 - compute_fixed_share_) * local_batch / local_batch_);
  // The synchronisation is paid once per optimizer step; compute once per
  // micro-step.
  return StepSeconds(n) - compute_seconds_ + grad * (1.0 + accumulation_steps);
}

double ThroughputModel::Uncertainty(uint32_t n) const {
  if (empty_ || n == 0) return 0;
  double relative = kMaxRelativeUncertainty;
  for (const Anchor& anchor : anchors_) {
    const double distance =
        kExtrapolationPerLogSize * std::log(static_cast<double>(n) / anchor.replicas);
    relative = std::min(relative, std::hypot(anchor.relative_error, distance));
  }
  return SamplesPerSecond(n) * relative;
}

double ThroughputModel::Efficiency(uint32_t n) const {
  if (empty_ || n == 0) return 0;
  // = SamplesPerSecond(n) / (n * SamplesPerSecond(1)), without the rounding.
  return compute_seconds_ / StepSeconds(n);
}

std::string ThroughputModel::Describe() const {
  if (empty_) return "no data: no observations or prior";
  std::string sizes;
  for (const Anchor& anchor : anchors_) {
    absl::StrAppend(&sizes, sizes.empty() ? "" : ",", anchor.replicas);
  }
  if (sizes.empty()) sizes = "none (relative shape, not fitted)";
  // The node term is shown only when the model knows node boundaries.
  const std::string across_nodes =
      gpus_per_node_ == 0 ? std::string()
                          : absl::StrFormat(
                                " + [nodes>1](%.4g + %.4g*(per_node-1)) (%u GPUs/node, "
                                "%u/replica)",
                                node_sync_seconds_, node_sync_per_colocated_seconds_,
                                gpus_per_node_, gpus_per_replica_);
  return absl::StrFormat(
      "step(n) = %.4g + [n>1](%.4g + %.4g*(n-2))%s s, batch %.4g, fitted at n=%s, rms log error "
      "%.3f",
      compute_seconds_, sync_base_seconds_, sync_per_worker_seconds_, across_nodes, local_batch_,
      sizes, rms_log_error_);
}

}  // namespace rescale
