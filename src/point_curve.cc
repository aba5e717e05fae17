// PointCurve (see rescale/point_curve.h): the evidence test and the curve on
// the points.
#include "rescale/point_curve.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace rescale {
namespace {

bool Positive(double v) { return std::isfinite(v) && v > 0; }

}  // namespace

std::optional<PointCurve> PointCurve::IfModelMisses(std::span<const Observation> observations,
                                                    std::span<const CurvePoint> prior,
                                                    const ThroughputModel& model,
                                                    uint64_t min_samples, bool measured_evidence) {
  if (model.empty()) return std::nullopt;
  std::vector<Point> points;
  uint32_t worst_replicas = 0;
  double worst_excess = 0, worst_error = 0;
  // `ratio` = point / model at the point's size; `noise` its own relative
  // standard error.
  auto judge = [&](uint32_t n, double ratio, double noise) {
    const double excess = std::abs(std::log(ratio)) - (kPointBand + 2 * noise);
    if (excess > worst_excess) {
      worst_excess = excess;
      worst_replicas = n;
      worst_error = 1 / ratio - 1;
    }
  };
  for (const Observation& o : observations) {
    if (o.replicas == 0 || o.nodes != 0 || !Positive(o.step_seconds) ||
        o.sample_count < std::max<uint64_t>(min_samples, 1) || !model.FittedAt(o.replicas))
      continue;
    const double batch = Positive(o.mean_batch) ? o.mean_batch : model.local_batch();
    const double predicted = model.StepSecondsAt(o.replicas, batch, 0);
    if (!Positive(predicted)) continue;
    // Step time measured over predicted, at the batch it ran: the point at
    // the model's batch is the model's rate scaled by the inverse.
    const double slower = o.step_seconds / predicted;
    const double noise =
        Positive(o.spread_seconds)
            ? o.spread_seconds / (o.step_seconds * std::sqrt(static_cast<double>(o.sample_count)))
            : 0.0;
    points.push_back({o.replicas, model.SamplesPerSecond(o.replicas) / slower, true});
    if (measured_evidence) judge(o.replicas, 1 / slower, noise);
  }
  for (const CurvePoint& p : prior) {
    if (p.replicas == 0 || !Positive(p.samples_per_second) || !model.FittedAt(p.replicas) ||
        std::any_of(points.begin(), points.end(),
                    [&](const Point& q) { return q.replicas == p.replicas; }))
      continue;
    const double predicted = model.SamplesPerSecond(p.replicas);
    if (!Positive(predicted)) continue;
    const double noise = Positive(p.uncertainty) ? p.uncertainty / p.samples_per_second : 0.0;
    points.push_back({p.replicas, p.samples_per_second, false});
    judge(p.replicas, p.samples_per_second / predicted, noise);
  }
  if (points.size() < 2 || worst_replicas == 0) return std::nullopt;
  std::sort(points.begin(), points.end(),
            [](const Point& a, const Point& b) { return a.replicas < b.replicas; });
  // Two prior points at one size: the first stands (as the fit's anchors
  // do, one per size).
  points.erase(std::unique(points.begin(), points.end(),
                           [](const Point& a, const Point& b) { return a.replicas == b.replicas; }),
               points.end());
  if (points.size() < 2) return std::nullopt;
  PointCurve curve(std::move(points), model);
  curve.worst_replicas_ = worst_replicas;
  curve.worst_error_ = worst_error;
  return curve;
}

double PointCurve::SamplesPerSecond(uint32_t n) const {
  if (n == 0) return 0;
  const Point& first = points_.front();
  const Point& last = points_.back();
  // Beyond the points: the model's shape, anchored at the nearest one.
  if (n <= first.replicas || n >= last.replicas) {
    const Point& anchor = n <= first.replicas ? first : last;
    if (n == anchor.replicas) return anchor.samples_per_second;
    const double at_anchor = model_.SamplesPerSecond(anchor.replicas);
    return Positive(at_anchor) ? anchor.samples_per_second * model_.SamplesPerSecond(n) / at_anchor
                               : anchor.samples_per_second;
  }
  const auto above = std::lower_bound(points_.begin(), points_.end(), n,
                                      [](const Point& p, uint32_t v) { return p.replicas < v; });
  if (above->replicas == n) return above->samples_per_second;
  const Point& below = *(above - 1);
  const double t = static_cast<double>(n - below.replicas) / (above->replicas - below.replicas);
  return below.samples_per_second + t * (above->samples_per_second - below.samples_per_second);
}

std::string PointCurve::Describe() const {
  std::string sizes;
  for (const Point& p : points_) absl::StrAppend(&sizes, sizes.empty() ? "" : ",", p.replicas);
  const bool any_measured =
      std::any_of(points_.begin(), points_.end(), [](const Point& p) { return p.measured; });
  const bool any_prior =
      std::any_of(points_.begin(), points_.end(), [](const Point& p) { return !p.measured; });
  const char* kind = any_measured && any_prior ? "measured and prior"
                     : any_measured            ? "measured"
                                               : "prior";
  return absl::StrFormat(
      "the %s points at n=%s: the model misses n=%u by %+.0f%% (band %.0f%% beyond the point's "
      "noise), so linear between them and the model's shape beyond",
      kind, sizes, worst_replicas_, 100 * worst_error_, 100 * kPointBand);
}

}  // namespace rescale
