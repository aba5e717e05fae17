// PointCurve: a job's throughput curve taken from its points themselves, for
// when the fitted model does not represent them (issue 31, item 4).
//
// The parametric model (rescale/throughput_model.h) has one structural
// assumption and four sync terms; a job whose throughput falls as replicas
// are added past some size (communication-bound), or that runs faster at
// powers of two than between them, does not have that shape, and a plan on
// the fit then acts on a curve the job never showed. So:
//
//  * The evidence: every size the fit used (ThroughputModel::FittedAt),
//    measured where it was measured (the observation, converted to the
//    model's batch by the model's own batch term), else the prior point.
//    Spread placements (Observation::nodes set) are left out: the curve is
//    of packed placements, as the model's is.
//  * The test, per point (prior points always; measured ones when
//    `measured_evidence`: see EngineOptions::plan_on_measured_points for
//    why that is off by default): the model misses it when |ln(model / point)|
//    exceeds kPointBand (10%) plus twice the point's own relative standard
//    error (a measured mean's spread / sqrt(count), a prior's stated
//    uncertainty). One point outside the band is enough: a bump at one
//    size is exactly what an rms over many points hides.
//  * The curve then: linear interpolation between adjacent points (a
//    monotone interpolation: it never leaves the range of its two ends, so
//    it adds no bump and no dip the points do not have), and beyond the
//    first and last point the model's shape anchored there (the point's
//    value times model(n) / model(end)), since beyond the evidence only the
//    model says anything.
//
// Deterministic; immutable once built; const methods are thread-safe.
#ifndef RESCALE_POINT_CURVE_H_
#define RESCALE_POINT_CURVE_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "rescale/throughput_model.h"
#include "rescale/types.h"

namespace rescale {

class PointCurve {
 public:
  // How far (in |ln|) beyond its own noise a point may sit from the model.
  static constexpr double kPointBand = 0.10;

  // The curve on the points when `model` misses one of them (see above);
  // nullopt when it represents every point judged, or when there are fewer than two
  // points (one point the model always passes through closely enough).
  static std::optional<PointCurve> IfModelMisses(std::span<const Observation> observations,
                                                 std::span<const CurvePoint> prior,
                                                 const ThroughputModel& model, uint64_t min_samples,
                                                 bool measured_evidence);

  // Whole-job samples/s at n >= 1 (0 for n = 0).
  double SamplesPerSecond(uint32_t n) const;
  // One line for people: the points, the one the model missed worst, the
  // rule. E.g. "the points at n=1,2,4,8 (the model misses n=8 by 41%, band
  // 10%): linear between them, the model's shape beyond".
  std::string Describe() const;

  struct Point {
    uint32_t replicas = 0;
    double samples_per_second = 0;
    bool measured = false;
  };
  const std::vector<Point>& points() const { return points_; }

 private:
  PointCurve(std::vector<Point> points, const ThroughputModel& model)
      : points_(std::move(points)), model_(model) {}

  std::vector<Point> points_;  // ascending replicas, at least two
  ThroughputModel model_;      // its shape beyond the points
  uint32_t worst_replicas_ = 0;
  double worst_error_ = 0;  // model / point - 1 at the worst point
};

}  // namespace rescale

#endif  // RESCALE_POINT_CURVE_H_
