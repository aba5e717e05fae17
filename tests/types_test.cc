// Tests of the helpers on the core types (rescale/types.h).
#include "rescale/types.h"

#include <catch2/catch.hpp>

namespace rescale {
namespace {

TEST_CASE("InterpolateThroughput reads the curve linearly and extrapolates proportionally") {
  const std::vector<CurvePoint> curve = {
      {2, 200, 0, true, 1}, {4, 360, 0, true, 1}, {8, 560, 0, true, 1}};
  CHECK(InterpolateThroughput({}, 4) == 0);
  CHECK(InterpolateThroughput(curve, 0) == 0);
  CHECK(InterpolateThroughput(curve, 1) == Approx(100));   // 200 * 1/2
  CHECK(InterpolateThroughput(curve, 2) == Approx(200));
  CHECK(InterpolateThroughput(curve, 3) == Approx(280));   // halfway 200..360
  CHECK(InterpolateThroughput(curve, 4) == Approx(360));
  CHECK(InterpolateThroughput(curve, 6) == Approx(460));   // halfway 360..560
  CHECK(InterpolateThroughput(curve, 8) == Approx(560));
  CHECK(InterpolateThroughput(curve, 16) == Approx(1120));  // 560 * 16/8
  const std::vector<CurvePoint> single = {{4, 400, 0, true, 1}};
  CHECK(InterpolateThroughput(single, 2) == Approx(200));
  CHECK(InterpolateThroughput(single, 6) == Approx(600));
}

TEST_CASE("JobNamespace is the part of a job_id before its slash") {
  CHECK(JobNamespace("team-a/bert") == "team-a");
  CHECK(JobNamespace("no-slash") == "");
}

}  // namespace
}  // namespace rescale
