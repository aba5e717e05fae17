// Tests of ThroughputModel. Behaviour tests assert relationships (near-linear
// from one size, follows the data, recent beats old, never super-linear,
// deterministic, band grows with distance) on synthetic step-time laws. The
// validation test fits the Pollux traces (tests/data/pollux, real
// measurements) at sizes <= 4 and compares predictions at 8 and 16 with the
// measured packed placements; it prints the error table (run with -s).
#include "rescale/throughput_model.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tests/trace_csv.h"

#ifndef RESCALE_TEST_DATA_DIR
#error "CMake must define RESCALE_TEST_DATA_DIR (the repo's tests/data folder)"
#endif

namespace rescale {
namespace {

constexpr double kBatch = 32;

// Step time of a synthetic job: compute plus a ring all-reduce whose
// bandwidth term saturates and whose latency term grows with n. Deliberately
// not the model's own form, so "fits well" means something.
struct Law {
  double compute = 0.2;
  double bandwidth = 0.0;  // seconds of the 2(n-1)/n * S/B term at n -> inf
  double latency = 0.0;    // seconds per extra worker
  double StepSeconds(uint32_t n) const {
    return compute + bandwidth * (n - 1.0) / n + latency * (n - 1.0);
  }
};

Observation Observe(uint32_t n, double step_seconds, double age_seconds = 0, uint64_t count = 50,
                    double spread_share = 0.02) {
  Observation o;
  o.replicas = n;
  o.step_seconds = step_seconds;
  o.spread_seconds = spread_share * step_seconds;
  o.sample_count = count;
  o.mean_batch = kBatch;
  o.age_seconds = age_seconds;
  return o;
}

std::vector<Observation> ObserveLaw(const Law& law, std::vector<uint32_t> sizes) {
  std::vector<Observation> out;
  for (uint32_t n : sizes) out.push_back(Observe(n, law.StepSeconds(n)));
  return out;
}

ThroughputModel FitOnly(const std::vector<Observation>& observations,
                        const std::vector<CurvePoint>& prior = {}, ModelOptions options = {}) {
  options.default_local_batch = kBatch;
  return ThroughputModel::Fit(observations, prior, options);
}

double RelativeUncertainty(const ThroughputModel& model, uint32_t n) {
  return model.Uncertainty(n) / model.SamplesPerSecond(n);
}

// The contract every fitted model keeps, checked over n = 1..max_n.
void CheckSane(const ThroughputModel& model, uint32_t max_n = 4096) {
  if (model.empty()) {
    for (uint32_t n : {0u, 1u, 2u, 7u, max_n}) {
      CHECK(model.SamplesPerSecond(n) == 0);
      CHECK(model.StepSeconds(n) == 0);
      CHECK(model.Uncertainty(n) == 0);
    }
    return;
  }
  const double one = model.SamplesPerSecond(1);
  REQUIRE(std::isfinite(one));
  REQUIRE(one > 0);
  CHECK(model.Efficiency(1) == 1.0);
  double previous_step = 0;
  for (uint32_t n = 1; n <= max_n; n = n < 64 ? n + 1 : n * 2) {
    const double step = model.StepSeconds(n);
    const double rate = model.SamplesPerSecond(n);
    const double band = model.Uncertainty(n);
    const double efficiency = model.Efficiency(n);
    INFO("n = " << n << ", " << model.Describe());
    REQUIRE(std::isfinite(step));
    REQUIRE(step > 0);
    REQUIRE(step >= previous_step);  // step time never decreases with n
    REQUIRE(std::isfinite(rate));
    REQUIRE(rate > 0);
    REQUIRE(rate <= n * one * (1 + 1e-12));  // never super-linear
    REQUIRE(std::isfinite(band));
    REQUIRE(band >= 0);
    REQUIRE(band <= rate * (1 + 1e-12));
    REQUIRE(efficiency > 0);
    REQUIRE(efficiency <= 1.0);
    previous_step = step;
  }
  CHECK(std::isfinite(model.rms_log_error()));
  CHECK_FALSE(model.Describe().empty());
}

// ---- behaviour ------------------------------------------------------------------

TEST_CASE("an empty input gives an empty model that predicts nothing", "[model]") {
  const ThroughputModel model = FitOnly({});
  CHECK(model.empty());
  CHECK(model.largest_observed() == 0);
  CHECK(model.SamplesPerSecond(4) == 0);
  CHECK(model.Efficiency(4) == 0);
  CheckSane(model);
  CHECK(ThroughputModel().empty());
}

TEST_CASE("a single observed size gives near-linear scaling", "[model]") {
  for (uint32_t size : {1u, 2u, 4u, 16u}) {
    INFO("observed only at " << size);
    const ThroughputModel model = FitOnly({Observe(size, 0.5)});
    REQUIRE_FALSE(model.empty());
    CHECK(model.largest_observed() == size);
    // It reproduces the measurement...
    CHECK(model.StepSeconds(size) == Approx(0.5).epsilon(0.005));
    CHECK(model.SamplesPerSecond(size) == Approx(size * kBatch / 0.5).epsilon(0.005));
    // ...and assumes a small communication share elsewhere.
    CHECK(model.Efficiency(8) > 0.9);
    CHECK(model.Efficiency(8) < 1.0);
    CHECK(model.Efficiency(64) > 0.75);
    CHECK(model.SamplesPerSecond(2 * size) > 1.8 * model.SamplesPerSecond(size));
    CheckSane(model);
  }
}

TEST_CASE("predictions pass near the observed sizes", "[model]") {
  SECTION("a law of the model's own form is reproduced") {
    // compute 0.2, sync 0.05 at two workers, +0.01 per extra worker.
    std::vector<Observation> observed;
    for (uint32_t n : {1u, 2u, 4u, 8u}) {
      observed.push_back(Observe(n, 0.2 + (n > 1 ? 0.05 + 0.01 * (n - 2) : 0.0)));
    }
    const ThroughputModel model = FitOnly(observed);
    for (const Observation& o : observed) {
      CHECK(model.StepSeconds(o.replicas) == Approx(o.step_seconds).epsilon(0.01));
    }
    CHECK(model.rms_log_error() < 0.01);
  }
  SECTION("a ring all-reduce law is followed closely") {
    const Law law{0.2, 0.12, 0.004};
    const ThroughputModel model = FitOnly(ObserveLaw(law, {1, 2, 3, 4, 6, 8}));
    for (uint32_t n : {1u, 2u, 3u, 4u, 6u, 8u}) {
      INFO("n = " << n);
      CHECK(model.StepSeconds(n) == Approx(law.StepSeconds(n)).epsilon(0.05));
    }
    // and 2x beyond the largest size it stays within 10%
    // 2x beyond the largest size the linear sync term overshoots the ring's
    // saturating one (pessimistic), but the band covers the truth.
    const double miss_at_16 = std::abs(model.StepSeconds(16) / law.StepSeconds(16) - 1);
    CHECK(model.StepSeconds(16) >= law.StepSeconds(16));
    CHECK(miss_at_16 < RelativeUncertainty(model, 16));
    CheckSane(model);
  }
}

TEST_CASE("more sizes improve the prediction beyond them", "[model]") {
  const Law law{0.2, 0.1, 0.01};
  auto error_at_16 = [&](std::vector<uint32_t> sizes) {
    const ThroughputModel model = FitOnly(ObserveLaw(law, sizes));
    return std::abs(model.StepSeconds(16) / law.StepSeconds(16) - 1);
  };
  const double from_one = error_at_16({1});
  const double from_two = error_at_16({1, 2});
  const double from_three = error_at_16({1, 2, 4});
  const double from_four = error_at_16({1, 2, 4, 8});
  INFO("error at 16 from sizes {1}, {1,2}, {1,2,4}, {1,2,4,8}: "
       << from_one << " " << from_two << " " << from_three << " " << from_four);
  CHECK(from_two < from_one);
  CHECK(from_three < from_two);
  CHECK(from_four < from_three);
  // The ring's saturating term is not in the model's form, so a residual
  // (pessimistic) error remains at 2x.
  CHECK(from_four < 0.15);
}

TEST_CASE("adding a size that shows poor scaling lowers predictions beyond it", "[model]") {
  std::vector<Observation> observed = {Observe(1, 0.2), Observe(2, 0.21)};
  const ThroughputModel before = FitOnly(observed);
  observed.push_back(Observe(4, 0.4));  // half the efficiency the first two suggested
  const ThroughputModel after = FitOnly(observed);
  CHECK(after.largest_observed() == 4);
  for (uint32_t n : {4u, 8u, 16u, 64u}) {
    INFO("n = " << n);
    CHECK(after.SamplesPerSecond(n) < before.SamplesPerSecond(n));
  }
  CHECK(after.StepSeconds(4) == Approx(0.4).epsilon(0.02));
  // The sizes that were measured are unaffected.
  CHECK(after.StepSeconds(1) == Approx(before.StepSeconds(1)).epsilon(0.02));
}

TEST_CASE("recent observations outweigh old ones", "[model]") {
  ModelOptions options;
  options.half_life_seconds = 600;
  const Observation base = Observe(1, 0.2);
  SECTION("the fresh measurement of a size wins") {
    const ThroughputModel model =
        FitOnly({base, Observe(4, 0.5, /*age=*/3600), Observe(4, 0.25, /*age=*/0)}, {}, options);
    CHECK(std::abs(model.StepSeconds(4) - 0.25) < std::abs(model.StepSeconds(4) - 0.5));
    CHECK(model.StepSeconds(4) < 0.27);
  }
  SECTION("swapping the ages swaps the winner") {
    const ThroughputModel model =
        FitOnly({base, Observe(4, 0.5, /*age=*/0), Observe(4, 0.25, /*age=*/3600)}, {}, options);
    CHECK(model.StepSeconds(4) > 0.46);
  }
  SECTION("one half life makes an observation count half") {
    const ThroughputModel equal =
        FitOnly({base, Observe(4, 0.5, 0), Observe(4, 0.25, 0)}, {}, options);
    const ThroughputModel aged =
        FitOnly({base, Observe(4, 0.5, 600), Observe(4, 0.25, 0)}, {}, options);
    CHECK(aged.StepSeconds(4) < equal.StepSeconds(4));
    CHECK(aged.StepSeconds(4) > 0.25);
  }
  SECTION("when everything is old, the data still decide, not the prior") {
    const ThroughputModel model =
        FitOnly({Observe(1, 0.2, 86400), Observe(4, 0.4, 86400)}, {}, options);
    CHECK(model.StepSeconds(4) == Approx(0.4).epsilon(0.02));
  }
}

TEST_CASE("sizes with fewer samples than min_samples are ignored", "[model]") {
  ModelOptions options;
  options.min_samples = 10;
  const ThroughputModel model =
      FitOnly({Observe(1, 0.2, 0, 50), Observe(8, 5.0, 0, /*count=*/3)}, {}, options);
  CHECK(model.largest_observed() == 1);
  CHECK(model.Efficiency(8) > 0.9);
  CHECK(FitOnly({Observe(8, 5.0, 0, 3)}, {}, options).empty());
}

TEST_CASE("prior points inform sizes without observations", "[model]") {
  SECTION("a prior alone is a model") {
    const std::vector<CurvePoint> prior = {{.replicas = 1, .samples_per_second = 100},
                                           {.replicas = 8, .samples_per_second = 600}};
    const ThroughputModel model = FitOnly({}, prior);
    REQUIRE_FALSE(model.empty());
    CHECK(model.largest_observed() == 0);  // priors are not measurements
    CHECK(model.SamplesPerSecond(1) == Approx(100).epsilon(0.02));
    CHECK(model.SamplesPerSecond(8) == Approx(600).epsilon(0.02));
    CheckSane(model);
  }
  SECTION("observations outweigh a prior at the same size") {
    const std::vector<CurvePoint> prior = {{.replicas = 4, .samples_per_second = 200}};
    const ThroughputModel model = FitOnly({Observe(1, 0.2), Observe(4, 0.25)}, prior);
    CHECK(model.SamplesPerSecond(4) == Approx(4 * kBatch / 0.25).epsilon(0.03));
  }
  SECTION("a prior point a measurement contradicts is dropped") {
    // Flat at 1 and 2 (0.2 s, then 0.4 s per step): a linear prior at 4
    // would need a 0.2 s step there, shorter than the measured 0.4 s at 2.
    const std::vector<CurvePoint> prior = {{.replicas = 4, .samples_per_second = 4 * kBatch / 0.2}};
    const ThroughputModel with_prior = FitOnly({Observe(1, 0.2), Observe(2, 0.4)}, prior);
    const ThroughputModel without = FitOnly({Observe(1, 0.2), Observe(2, 0.4)});
    CHECK(with_prior.SamplesPerSecond(4) == Approx(without.SamplesPerSecond(4)));
    // One it does not contradict (4 at 0.5 s) still counts.
    const std::vector<CurvePoint> agrees = {
        {.replicas = 4, .samples_per_second = 4 * kBatch / 0.5}};
    CHECK(FitOnly({Observe(1, 0.2), Observe(2, 0.4)}, agrees).SamplesPerSecond(4) !=
          Approx(without.SamplesPerSecond(4)));
  }
  SECTION("a prior beyond the observed sizes bends the extrapolation") {
    const std::vector<Observation> observed = {Observe(1, 0.2), Observe(2, 0.22)};
    const std::vector<CurvePoint> prior = {
        {.replicas = 32, .samples_per_second = 32 * kBatch / 1.0}};  // 20% efficient
    const ThroughputModel with_prior = FitOnly(observed, prior);
    const ThroughputModel without = FitOnly(observed);
    CHECK(with_prior.SamplesPerSecond(32) < 0.5 * without.SamplesPerSecond(32));
    CHECK(with_prior.StepSeconds(2) == Approx(0.22).epsilon(0.03));
  }
}

TEST_CASE("predictions are never super-linear, negative or non-finite, whatever the input",
          "[model]") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  ModelOptions lenient;
  lenient.min_samples = 1;
  struct Case {
    std::string name;
    std::vector<Observation> observed;
    std::vector<CurvePoint> prior;
    ModelOptions options;
  };
  std::vector<Case> cases = {
      {"zero spread", {Observe(1, 0.2, 0, 50, 0), Observe(4, 0.3, 0, 50, 0)}, {}, {}},
      {"one sample", {Observe(2, 0.3, 0, 1)}, {}, lenient},
      {"wild outlier up",
       {Observe(1, 0.2), Observe(2, 0.21), Observe(3, 500.0), Observe(4, 0.23)},
       {},
       {}},
      {"wild outlier down",
       {Observe(1, 0.2), Observe(2, 1e-9), Observe(4, 0.25), Observe(8, 0.3)},
       {},
       {}},
      {"step times decreasing with n (super-linear data)",
       {Observe(1, 1.0), Observe(2, 0.4), Observe(4, 0.1), Observe(8, 0.01)},
       {},
       {}},
      {"poor scaling then flat", {Observe(3, 0.1), Observe(30, 2.8)}, {}, {}},
      {"tiny and huge step times", {Observe(1, 1e-7), Observe(64, 1e5)}, {}, {}},
      {"prior only", {}, {{.replicas = 4, .samples_per_second = 10}}, {}},
      {"prior with huge uncertainty",
       {},
       {{.replicas = 2, .samples_per_second = 10, .uncertainty = 1e9}},
       {}},
      {"empty", {}, {}, {}},
      {"garbage fields",
       {Observe(0, 0.2), Observe(2, nan), Observe(3, inf), Observe(4, -1.0),
        Observe(5, 0.3, /*age=*/nan), Observe(6, 0.3, /*age=*/inf), Observe(1, 0.2, /*age=*/-50)},
       {{.replicas = 0, .samples_per_second = 5},
        {.replicas = 3, .samples_per_second = nan},
        {.replicas = 3, .samples_per_second = -4},
        {.replicas = 9, .samples_per_second = inf}},
       {}},
      {"nan spread and batch", {}, {}, {}},
      {"zero half life", {Observe(1, 0.2, 1e6), Observe(2, 0.3, 0)}, {}, {}},
      {"large n observed", {Observe(4000, 3.0), Observe(4096, 3.1)}, {}, {}},
  };
  cases[11].observed = {Observe(1, 0.2), Observe(2, 0.3)};
  cases[11].observed[0].spread_seconds = nan;
  cases[11].observed[1].mean_batch = nan;
  cases[12].options.half_life_seconds = 0;
  for (const Case& c : cases) {
    INFO(c.name);
    ModelOptions options = c.options;
    options.default_local_batch = kBatch;
    const ThroughputModel model = ThroughputModel::Fit(c.observed, c.prior, options);
    CheckSane(model);
    if (c.name == "empty") CHECK(model.empty());
    if (c.name == "garbage fields") CHECK(model.largest_observed() == 1);
  }
}

TEST_CASE("the same inputs give bit-identical outputs, in any order", "[model]") {
  const Law law{0.3, 0.2, 0.01};
  std::vector<Observation> observed = ObserveLaw(law, {1, 2, 3, 4, 8});
  observed[2].age_seconds = 900;
  observed.push_back(Observe(4, 0.61, 30));
  const std::vector<CurvePoint> prior = {{.replicas = 16, .samples_per_second = 400}};
  const ThroughputModel a = FitOnly(observed, prior);
  const ThroughputModel b = FitOnly(observed, prior);
  std::vector<Observation> reversed(observed.rbegin(), observed.rend());
  const ThroughputModel c = FitOnly(reversed, prior);
  for (uint32_t n = 1; n <= 256; ++n) {
    INFO("n = " << n);
    REQUIRE(a.StepSeconds(n) == b.StepSeconds(n));
    REQUIRE(a.SamplesPerSecond(n) == b.SamplesPerSecond(n));
    REQUIRE(a.Uncertainty(n) == b.Uncertainty(n));
    REQUIRE(a.StepSeconds(n) == c.StepSeconds(n));
    REQUIRE(a.Uncertainty(n) == c.Uncertainty(n));
  }
  CHECK(a.Describe() == b.Describe());
  CHECK(a.rms_log_error() == c.rms_log_error());
}

TEST_CASE("uncertainty grows with distance from the observed sizes", "[model]") {
  const Law law{0.2, 0.1, 0.005};
  const ThroughputModel model = FitOnly(ObserveLaw(law, {2, 4}));
  // Small where measured...
  CHECK(RelativeUncertainty(model, 2) < 0.05);
  CHECK(RelativeUncertainty(model, 4) < 0.05);
  // ...growing beyond, in relative and absolute terms...
  double previous_relative = RelativeUncertainty(model, 4);
  double previous_band = model.Uncertainty(4);
  for (uint32_t n : {6u, 8u, 16u, 32u, 64u}) {
    INFO("n = " << n);
    CHECK(RelativeUncertainty(model, n) > previous_relative);
    CHECK(model.Uncertainty(n) > previous_band);
    previous_relative = RelativeUncertainty(model, n);
    previous_band = model.Uncertainty(n);
  }
  // ...and below the smallest size.
  CHECK(RelativeUncertainty(model, 1) > RelativeUncertainty(model, 2));
  // Between two measured sizes it stays below what lies beyond them.
  CHECK(RelativeUncertainty(model, 3) < RelativeUncertainty(model, 8));
  // More samples and less spread make the band at a measured size narrower.
  const ThroughputModel sparse = FitOnly({Observe(4, 0.3, 0, 5, 0.3)});
  const ThroughputModel dense = FitOnly({Observe(4, 0.3, 0, 500, 0.01)});
  CHECK(RelativeUncertainty(dense, 4) < RelativeUncertainty(sparse, 4));
  // And data that the model cannot fit widen it.
  const ThroughputModel noisy =
      FitOnly({Observe(1, 0.2), Observe(2, 0.5), Observe(2, 0.25), Observe(4, 0.3)});
  CHECK(RelativeUncertainty(noisy, 2) > RelativeUncertainty(model, 2));
}

TEST_CASE("Efficiency(1) is exactly 1 and efficiency falls as step time grows", "[model]") {
  for (const Law& law : {Law{0.2, 0, 0}, Law{0.2, 0.1, 0.01}, Law{0.01, 0.5, 0.2}}) {
    const ThroughputModel model = FitOnly(ObserveLaw(law, {1, 2, 4}));
    CHECK(model.Efficiency(1) == 1.0);
    CHECK(model.Efficiency(8) <= model.Efficiency(4));
    CHECK(model.Efficiency(8) ==
          Approx(model.SamplesPerSecond(8) / (8 * model.SamplesPerSecond(1))));
  }
  CHECK(FitOnly({Observe(8, 1.0)}).Efficiency(1) == 1.0);
}

TEST_CASE("throughput counts the whole job at the observed per-pod batch", "[model]") {
  std::vector<Observation> observed = {Observe(1, 0.5), Observe(2, 0.5)};
  for (Observation& o : observed) o.mean_batch = 64;
  const ThroughputModel model = FitOnly(observed);
  CHECK(model.SamplesPerSecond(2) == Approx(2 * 64 / 0.5).epsilon(0.01));
  CHECK_THAT(model.Describe(), Catch::Matchers::Contains("batch 64"));
}

TEST_CASE("sizes that span nodes pay the cross-node cost the data show", "[model]") {
  // In-node law plus a cross-node jump that grows with the replicas sharing
  // a node's link, on packed nodes of 4 GPUs.
  struct NodeLaw {
    uint32_t gpus_per_replica = 1;
    uint32_t gpus_per_node = 4;
    double StepSeconds(uint32_t n) const {
      const uint32_t per_node = gpus_per_node / gpus_per_replica;
      const bool across = n > per_node;
      return 0.2 + (n > 1 ? 0.02 + 0.004 * (n - 2) : 0.0) +
             (across ? 0.08 + 0.02 * (std::min(n, per_node) - 1) : 0.0);
    }
  };
  for (uint32_t gpus_per_replica : {1u, 2u}) {
    INFO("GPUs per replica " << gpus_per_replica);
    const NodeLaw law{gpus_per_replica, 8};
    const uint32_t per_node = 8 / gpus_per_replica;
    std::vector<Observation> observed;
    for (uint32_t n : {1u, 2u, per_node, 2 * per_node}) {
      observed.push_back(Observe(n, law.StepSeconds(n)));
    }
    ModelOptions options;
    options.gpus_per_node = 8;
    options.gpus_per_replica = gpus_per_replica;
    const ThroughputModel aware = FitOnly(observed, {}, options);
    const ThroughputModel blind = FitOnly(observed);
    CheckSane(aware);
    // The first size past a node boundary is where the cost appears...
    CHECK(aware.StepSeconds(per_node + 1) > aware.StepSeconds(per_node) * 1.3);
    CHECK(aware.StepSeconds(per_node + 1) == Approx(law.StepSeconds(per_node + 1)).epsilon(0.03));
    // ...and four nodes are predicted from one- and two-node data far better
    // than by a model that does not know where nodes end.
    const uint32_t far = 4 * per_node;
    const double aware_error = std::abs(aware.StepSeconds(far) / law.StepSeconds(far) - 1);
    const double blind_error = std::abs(blind.StepSeconds(far) / law.StepSeconds(far) - 1);
    CHECK(aware_error < 0.03);
    CHECK(aware_error < blind_error / 2);
    CHECK_THAT(aware.Describe(), Catch::Contains("[nodes>1]"));
    CHECK_THAT(blind.Describe(), !Catch::Contains("[nodes>1]"));
  }
}

TEST_CASE("observations with a node count teach the cross-node cost", "[model]") {
  // 4 replicas measured on one node and spread over four: the spread one is
  // slower, and that is what the model predicts for sizes that must span
  // nodes, while one node stays as measured.
  ModelOptions options;
  options.gpus_per_node = 4;
  std::vector<Observation> observed = {Observe(1, 0.2), Observe(2, 0.22), Observe(4, 0.23)};
  Observation spread = Observe(4, 0.35);
  spread.nodes = 4;
  observed.push_back(spread);
  const ThroughputModel model = FitOnly(observed, {}, options);
  CHECK(model.StepSeconds(4) == Approx(0.23).epsilon(0.03));
  CHECK(model.StepSeconds(5) > 0.3);
  CheckSane(model);
}

TEST_CASE("the fullest node of a measured placement sets its cross-node cost", "[model]") {
  // A law whose cross-node cost grows with the replicas on the fullest node:
  // step = 1 + [n>1] 0.1 + [nodes>1](0.5 + 0.2 (per_node - 1)). Measured on
  // one node up to 4, on "11" and on "13" (4 replicas, 3 on one node: 2.0 s).
  // Read as 2 + 2 (spread evenly), "13" says 0.4 s per colocated replica and
  // the packed 8 ("44") is predicted at 2.8 s; with its fullest node known,
  // at the law's 2.2 s.
  ModelOptions options;
  options.gpus_per_node = 4;
  std::vector<Observation> observed = {Observe(1, 1.0), Observe(2, 1.1), Observe(3, 1.1),
                                       Observe(4, 1.1)};
  Observation eleven = Observe(2, 1.6);
  eleven.nodes = 2;
  observed.push_back(eleven);
  Observation thirteen = Observe(4, 2.0);
  thirteen.nodes = 2;
  observed.push_back(thirteen);
  const ThroughputModel even = FitOnly(observed, {}, options);
  observed.back().per_node = 3;
  const ThroughputModel fullest = FitOnly(observed, {}, options);
  CHECK(fullest.StepSeconds(8) == Approx(2.2).epsilon(0.03));
  CHECK(even.StepSeconds(8) > 1.15 * 2.2);
  // A per_node below the even spread cannot be: it reads as the even spread.
  observed.back().per_node = 1;
  CHECK(FitOnly(observed, {}, options).StepSeconds(8) == Approx(even.StepSeconds(8)));
  CheckSane(fullest);
}

// ---- validation on the Pollux traces -----------------------------------------------

using testing::CsvRow;
using testing::ReadCsv;

// One measured configuration: world size, nodes, per-GPU batch, step time.
struct Measurement {
  uint32_t replicas = 0;
  uint32_t nodes = 0;
  int local_bsz = 0;
  double step_seconds = 0;
  std::string placement;  // "44", or "16 nodes" for scalability.csv rows
};

// One trace measurement as the store would report it: 20 samples with a 5%
// spread, on the nodes it was measured on.
Observation TraceObservation(const Measurement& m) {
  Observation o;
  o.replicas = m.replicas;
  o.step_seconds = m.step_seconds;
  o.spread_seconds = 0.05 * m.step_seconds;
  o.sample_count = 20;
  o.mean_batch = m.local_bsz;
  o.nodes = m.nodes;
  return o;
}

std::vector<Measurement> LoadApp(const std::string& app) {
  const std::string dir = std::string(RESCALE_TEST_DATA_DIR) + "/pollux/" + app;
  std::vector<Measurement> out;
  for (const CsvRow& row : ReadCsv(dir + "/placements.csv")) {
    Measurement m;
    m.placement = row.at("placement");
    for (char digit : m.placement) m.replicas += static_cast<uint32_t>(digit - '0');
    m.nodes = static_cast<uint32_t>(m.placement.size());
    m.local_bsz = std::stoi(row.at("local_bsz"));
    m.step_seconds = std::stod(row.at("step_time"));
    out.push_back(m);
  }
  for (const CsvRow& row : ReadCsv(dir + "/scalability.csv")) {
    Measurement m;
    m.replicas = static_cast<uint32_t>(std::stoul(row.at("num_replicas")));
    m.nodes = static_cast<uint32_t>(std::stoul(row.at("num_nodes")));
    m.placement = absl::StrFormat("%u on %u nodes", m.replicas, m.nodes);
    m.local_bsz = std::stoi(row.at("local_bsz"));
    m.step_seconds = std::stod(row.at("step_time"));
    out.push_back(m);
  }
  return out;
}

enum class TieBreak { kMedian, kSmallest, kLargest };

// The per-GPU batch to validate with: among the batches measured in every
// placement of <= max_fit_size GPUs, the most common one in the file; every
// app ties (each batch is measured at nearly every placement), and ties go to
// the median batch (lower middle): a typical batch, neither the
// communication-bound smallest nor the compute-bound largest. The other two
// tie-breaks are reported as a sensitivity check.
int ChooseBatch(const std::vector<Measurement>& all, uint32_t max_fit_size, TieBreak tie_break) {
  std::map<std::string, std::vector<int>> batches_by_placement;
  std::map<int, int> rows_per_batch;
  for (const Measurement& m : all) {
    if (m.nodes > 4) continue;  // placements.csv only (scalability.csv has >= 6 nodes)
    ++rows_per_batch[m.local_bsz];
    if (m.replicas <= max_fit_size) batches_by_placement[m.placement].push_back(m.local_bsz);
  }
  std::vector<int> candidates;
  int most = 0;
  for (const auto& [batch, count] : rows_per_batch) {
    bool everywhere = true;
    for (const auto& [placement, batches] : batches_by_placement) {
      everywhere &= std::find(batches.begin(), batches.end(), batch) != batches.end();
    }
    if (!everywhere) continue;
    if (count > most) candidates.clear();
    if (count >= most) {
      candidates.push_back(batch);
      most = count;
    }
  }
  REQUIRE_FALSE(candidates.empty());  // ascending: std::map order
  switch (tie_break) {
    case TieBreak::kSmallest:
      return candidates.front();
    case TieBreak::kLargest:
      return candidates.back();
    case TieBreak::kMedian:
      break;
  }
  return candidates[(candidates.size() - 1) / 2];
}

// What a scheduler would get at `replicas`: the packed placement (fewest
// nodes; the first listed among equals, placements.csv before
// scalability.csv), at `batch` or, when that batch was not measured at this
// size, the nearest batch that was.
const Measurement* Packed(const std::vector<Measurement>& all, uint32_t replicas, int batch) {
  const Measurement* best = nullptr;
  for (const Measurement& m : all) {
    if (m.replicas != replicas) continue;
    if (best == nullptr) {
      best = &m;
      continue;
    }
    const int distance = std::abs(m.local_bsz - batch);
    const int best_distance = std::abs(best->local_bsz - batch);
    if (distance < best_distance || (distance == best_distance && m.nodes < best->nodes)) best = &m;
  }
  return best;
}

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

struct AppResult {
  std::string app;
  int batch = 0;
  size_t observations = 0;
  std::string model;
  // [0] = 8 replicas, [1] = 16 replicas
  Measurement measured[2];
  double predicted_step[2] = {0, 0};
  double step_error[2] = {0, 0};        // |predicted / measured - 1| of step time
  double throughput_error[2] = {0, 0};  // |predicted / measured - 1| of samples/s
  double band[2] = {0, 0};              // relative uncertainty the model claims
};

const std::vector<std::string> kApps = {"bert",     "cifar10", "deepspeech2",
                                        "imagenet", "ncf",     "yolov3"};
constexpr uint32_t kMaxFitSize = 4;
// The traces' cluster: placements list at most 4 GPUs on a node.
constexpr uint32_t kTraceGpusPerNode = 4;
constexpr uint32_t kTargets[2] = {8, 16};

std::vector<AppResult> Validate(TieBreak tie_break) {
  std::vector<AppResult> results;
  for (const std::string& app : kApps) {
    const std::vector<Measurement> all = LoadApp(app);
    AppResult r;
    r.app = app;
    r.batch = ChooseBatch(all, kMaxFitSize, tie_break);
    // Each placements.csv row at <= 4 GPUs is one observation with its node
    // count, so "2" and "11" are two observations at n = 2, on one and two
    // nodes.
    std::vector<Observation> observed;
    for (const Measurement& m : all) {
      if (m.nodes > 4 || m.replicas > kMaxFitSize || m.local_bsz != r.batch) continue;
      observed.push_back(TraceObservation(m));
    }
    r.observations = observed.size();
    ModelOptions options;
    options.gpus_per_node = kTraceGpusPerNode;
    const ThroughputModel model = ThroughputModel::Fit(observed, {}, options);
    REQUIRE(model.largest_observed() == kMaxFitSize);
    r.model = model.Describe();
    for (int t = 0; t < 2; ++t) {
      const uint32_t n = kTargets[t];
      const Measurement* packed = Packed(all, n, r.batch);
      REQUIRE(packed != nullptr);
      r.measured[t] = *packed;
      r.predicted_step[t] = model.StepSeconds(n);
      r.step_error[t] = std::abs(r.predicted_step[t] / r.measured[t].step_seconds - 1);
      // Samples/s at the measured batch: n * batch / step.
      r.throughput_error[t] = std::abs(r.measured[t].step_seconds / r.predicted_step[t] - 1);
      r.band[t] = RelativeUncertainty(model, n);
    }
    results.push_back(r);
  }
  return results;
}

TEST_CASE("the model fitted at <= 4 GPUs predicts the Pollux traces at 8 and 16", "[model]") {
  // Packed placement: at 8 GPUs "44" (two full nodes), at 16 "4444", as a
  // scheduler that fills nodes would place them. Step time is compared (the
  // quantity fitted); the throughput error is shown alongside.
  const std::vector<AppResult> results = Validate(TieBreak::kMedian);
  std::ostringstream table;
  table << "Throughput model vs Pollux traces (fit: every placement with <= 4 GPUs; spread 5%, "
           "20 samples)\n";
  table << absl::StrFormat(
      "%-12s %5s %4s | %-10s %8s %8s %7s %7s %6s | %-10s %8s %8s %7s %7s %6s\n", "app", "bsz",
      "obs", "at 8", "measured", "model", "step%", "tput%", "band%", "at 16", "measured", "model",
      "step%", "tput%", "band%");
  std::vector<double> step8, step16, tput8, tput16;
  for (const AppResult& r : results) {
    table << absl::StrFormat("%-12s %5d %4d", r.app, r.batch, r.observations);
    for (int t = 0; t < 2; ++t) {
      table << absl::StrFormat(" | %-10s %8.4f %8.4f %7.1f %7.1f %6.1f", r.measured[t].placement,
                               r.measured[t].step_seconds, r.predicted_step[t],
                               100 * r.step_error[t], 100 * r.throughput_error[t], 100 * r.band[t]);
    }
    table << "\n";
    step8.push_back(r.step_error[0]);
    step16.push_back(r.step_error[1]);
    tput8.push_back(r.throughput_error[0]);
    tput16.push_back(r.throughput_error[1]);
  }
  const double median8 = Median(step8);
  const double median16 = Median(step16);
  table << absl::StrFormat(
      "median absolute error: step time %.1f%% at 8, %.1f%% at 16; throughput %.1f%% at 8, "
      "%.1f%% at 16\n",
      100 * median8, 100 * median16, 100 * Median(tput8), 100 * Median(tput16));
  for (const AppResult& r : results) table << "  " << r.app << ": " << r.model << "\n";
  // Sensitivity to the batch chosen per app.
  for (TieBreak other : {TieBreak::kSmallest, TieBreak::kLargest}) {
    std::vector<double> e8, e16;
    std::string batches;
    for (const AppResult& r : Validate(other)) {
      e8.push_back(r.step_error[0]);
      e16.push_back(r.step_error[1]);
      absl::StrAppend(&batches, batches.empty() ? "" : " ", r.app, "=", r.batch);
    }
    table << absl::StrFormat(
        "with the %s tied batch (%s): median step error %.1f%% at 8, %.1f%% at 16\n",
        other == TieBreak::kSmallest ? "smallest" : "largest", batches, 100 * Median(e8),
        100 * Median(e16));
  }
  std::cout << table.str() << std::flush;

  // The target: a median error <= 10% at 8 GPUs (2x the largest fitted
  // size), a two-node placement the model reaches through its cross-node
  // terms, fitted from the one- to four-node placements of <= 4 GPUs.
  CHECK(median8 <= 0.10);
  // No app is off by more than 12% at 2x, and the band the model claims
  // there covers its actual throughput error in every app.
  CHECK(*std::max_element(step8.begin(), step8.end()) <= 0.12);
  for (const AppResult& r : results) {
    INFO(r.app);
    CHECK(r.throughput_error[0] <= r.band[0]);
  }
  // At 16 (4x) the packed four-node placement is faster than the packed 8 in
  // every app, which no model whose step time is non-decreasing in n can
  // follow; guard against a blow-up.
  CHECK(median16 <= 0.7);
}

}  // namespace
}  // namespace rescale

namespace rescale {
namespace {

// The shares of the model fitted to every placements.csv row of one app (1 to
// 16 GPUs on 1 to 4 nodes, with their node counts) at the validation's batch.
ScalingShares FittedShares(const std::string& app) {
  const std::vector<Measurement> all = LoadApp(app);
  const int batch = ChooseBatch(all, kMaxFitSize, TieBreak::kMedian);
  std::vector<Observation> observed;
  for (const Measurement& m : all) {
    if (m.nodes > 4 || m.local_bsz != batch) continue;
    observed.push_back(TraceObservation(m));
  }
  ModelOptions options;
  options.gpus_per_node = kTraceGpusPerNode;
  return ThroughputModel::Fit(observed, {}, options).shares();
}

TEST_CASE("the default prior is the median of the shares fitted to the six Pollux apps",
          "[model]") {
  std::vector<double> base, per_worker, node, colocated;
  for (const std::string& app : kApps) {
    const ScalingShares s = FittedShares(app);
    std::cout << absl::StrFormat("%-12s sync_base %.4f per_worker %.4f node %.4f colocated %.4f\n",
                                 app, s.sync_base, s.sync_per_worker, s.node_sync,
                                 s.node_sync_per_colocated);
    base.push_back(s.sync_base);
    per_worker.push_back(s.sync_per_worker);
    node.push_back(s.node_sync);
    colocated.push_back(s.node_sync_per_colocated);
  }
  std::cout << absl::StrFormat(
      "median       sync_base %.4f per_worker %.4f node %.4f colocated %.4f\n", Median(base),
      Median(per_worker), Median(node), Median(colocated));
  // The constants are these medians rounded to 3 significant digits.
  CHECK(kDefaultPriorShares.sync_base == Approx(Median(base)).epsilon(0.005));
  CHECK(kDefaultPriorShares.sync_per_worker == Approx(Median(per_worker)).epsilon(0.005));
  CHECK(kDefaultPriorShares.node_sync == Approx(Median(node)).epsilon(0.005));
  CHECK(kDefaultPriorShares.node_sync_per_colocated == Approx(Median(colocated)).epsilon(0.005));
}

}  // namespace
}  // namespace rescale
