// Tests of statistical efficiency, the smoothing of gradient statistics and
// the batch search (rescale/goodput.h), including EFF on the gradient
// statistics Pollux measured (tests/data/pollux/APP/validation-B.csv).
#include "rescale/goodput.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "rescale/metrics_store.h"

#ifndef RESCALE_TEST_DATA_DIR
#error "CMake must define RESCALE_TEST_DATA_DIR (the repo's tests/data folder)"
#endif

namespace rescale {
namespace {

// One row of validation-B.csv: progress,iteration,metric,grad_sqr,grad_var.
struct ValidationRow {
  double progress = 0;
  double iteration = 0;
  double metric = 0;
  GradientStats stats;
};

std::vector<ValidationRow> ReadValidation(const std::filesystem::path& path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  std::string line;
  std::getline(in, line);
  REQUIRE(line == "progress,iteration,metric,grad_sqr,grad_var");
  std::vector<ValidationRow> rows;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    std::stringstream fields(line);
    std::string field;
    std::vector<double> values;
    while (std::getline(fields, field, ',')) values.push_back(std::stod(field));
    REQUIRE(values.size() == 5);
    rows.push_back({values[0], values[1], values[2], {values[3], values[4]}});
  }
  return rows;
}

// The closed form of algorithms.md section 8, written independently of the
// implementation: EFF(M) = (phi + M0) / (phi + M), phi = M0 var / sqr.
double ClosedForm(const GradientStats& g, double m0, double m) {
  const double phi = m0 * g.var / g.sqr;
  return (phi + m0) / (phi + m);
}

TEST_CASE("statistical efficiency is 1 at the initial batch and falls past the noise scale",
          "[goodput]") {
  const GradientStats g{.sqr = 2.0, .var = 6.0};  // phi = 3 x M0
  const double m0 = 128;
  CHECK(StatisticalEfficiency(g, m0, m0) == Approx(1.0));
  CHECK(NoiseScale(g, m0) == Approx(384));
  double previous = 1.0;
  for (double m : {256.0, 512.0, 1024.0, 4096.0}) {
    const double eff = StatisticalEfficiency(g, m0, m);
    CHECK(eff < previous);
    CHECK(eff == Approx(ClosedForm(g, m0, m)).epsilon(1e-12));
    previous = eff;
  }
  // At the noise scale, doubling the batch from M0 costs a third of each
  // sample: (384 + 128) / (384 + 256) = 0.8.
  CHECK(StatisticalEfficiency(g, m0, 256) == Approx(0.8));
  // Noise only: every batch is as efficient. Nothing measured: as AdaptDL,
  // a larger batch is assumed to buy nothing (EFF = M0 / M), so no batch
  // grows before its statistics are known.
  CHECK(StatisticalEfficiency({.sqr = 0, .var = 1}, m0, 4096) == Approx(1.0));
  CHECK(StatisticalEfficiency({}, m0, 4096) == Approx(128.0 / 4096));
  CHECK(std::isinf(NoiseScale({.sqr = 0, .var = 1}, m0)));
}

TEST_CASE("EFF from the statistics Pollux measured, reported as a trainer would, is within 1%",
          "[goodput]") {
  // Every app, every batch size B Pollux trained at, every epoch's
  // statistics. Pollux's grad_var is normalized to the app's initial batch
  // M0, the smallest B (its simulator's applications.py); a trainer
  // reports the variance as measured at B, var x M0 / B, with grad_batch B.
  // The store turns that into the noise scale, and EFF from it must match
  // the closed form on the trace's own values, at totals M0 to 32 x M0.
  const std::filesystem::path root = std::filesystem::path(RESCALE_TEST_DATA_DIR) / "pollux";
  int files = 0;
  int checked = 0;
  const absl::Time now = absl::FromUnixSeconds(1'700'000'000);
  for (const char* app : {"bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3"}) {
    std::map<uint32_t, std::filesystem::path> by_batch;
    for (const auto& entry : std::filesystem::directory_iterator(root / app)) {
      const std::string name = entry.path().filename().string();
      if (name.rfind("validation-", 0) != 0) continue;
      by_batch[static_cast<uint32_t>(std::stoul(name.substr(11)))] = entry.path();
    }
    REQUIRE(!by_batch.empty());
    const double m0 = by_batch.begin()->first;
    for (const auto& [batch, path] : by_batch) {
      ++files;
      for (const ValidationRow& row : ReadValidation(path)) {
        if (!(row.stats.sqr > 0) || !(row.stats.var >= 0)) continue;
        MetricsStore store;
        REQUIRE(store.AddJob("ns/app", 64, batch).ok());
        StepSample sample;
        sample.job_id = "ns/app";
        sample.pod = "worker-0";
        sample.world_size = 1;
        sample.step_seconds = 0.5;
        sample.grad_sqr = row.stats.sqr;
        sample.grad_var = row.stats.var * m0 / batch;
        sample.grad_batch = batch;
        REQUIRE(store.Ingest(std::span<const StepSample>(&sample, 1), now).accepted == 1);
        const std::optional<double> phi = store.GradientNoiseScale("ns/app", now);
        REQUIRE(phi.has_value());
        for (double factor : {1.0, 2.0, 4.0, 8.0, 32.0}) {
          const double m = m0 * factor;
          const double expected = ClosedForm(row.stats, m0, m);
          INFO(app << " B " << batch << " progress " << row.progress << " M " << m);
          // As JobViews computes it from the noise scale.
          const double served = StatisticalEfficiency({.sqr = 1, .var = *phi / m0}, m0, m);
          CHECK(std::abs(served / expected - 1) <= 0.01);
          ++checked;
        }
      }
    }
  }
  CHECK(files == 40);  // six apps, six to eight batch sizes each
  CHECK(checked > 2000);
}

TEST_CASE("the smoother is AdaptDL's bias-corrected moving average", "[goodput]") {
  GradientNoiseSmoother smoother(100);
  CHECK_FALSE(smoother.Smoothed().has_value());
  smoother.Add({.sqr = 4, .var = 8}, 100);
  // Bias-corrected: the first value is the estimate, not 0.1% of it.
  CHECK(smoother.Smoothed()->sqr == Approx(4));
  CHECK(smoother.Smoothed()->var == Approx(8));
  // A second step at 4 x M0 weighs old values by 0.999^4.
  smoother.Add({.sqr = 2, .var = 8}, 400);
  const double theta = std::pow(0.999, 4);
  const double weight = theta * 0.001 + (1 - theta);
  const double sqr = (theta * 0.001 * 4 + (1 - theta) * 2) / weight;
  CHECK(smoother.Smoothed()->sqr == Approx(sqr));
  CHECK(smoother.Smoothed()->var == Approx(8));
  // A report summarising 1,000 steps counts as them: old values then weigh
  // 0.999^1000 = 37%.
  GradientNoiseSmoother epochs(100);
  epochs.Add({.sqr = 1, .var = 0}, 100, 1000);
  epochs.Add({.sqr = 3, .var = 0}, 100, 1000);
  const double keep = std::pow(0.999, 1000);
  CHECK(epochs.Smoothed()->sqr ==
        Approx((keep * (1 - keep) * 1 + (1 - keep) * 3) / (keep * (1 - keep) + (1 - keep))));
}

// Step time of a data-parallel step in Pollux's form: compute grows with the
// local batch, sync is fixed, accumulation adds compute.
double PolluxLikeStep(uint32_t replicas, uint32_t local, uint32_t accumulation) {
  const double compute = 0.02 + 0.001 * local;
  const double sync = replicas > 1 ? 0.05 : 0.0;
  return std::max(compute, sync) + compute * accumulation;
}

TEST_CASE("the batch search keeps M0 when the gradient is noise-free and grows it when noisy",
          "[goodput]") {
  const BatchLimits limits{.initial_batch = 128, .max_batch = 4096, .max_local_batch = 512};
  REQUIRE(ValidateBatchLimits(limits).ok());
  const auto step = [](uint32_t replicas) {
    return [replicas](uint32_t local, uint32_t accumulation) {
      return PolluxLikeStep(replicas, local, accumulation);
    };
  };
  // Large signal, little noise (phi = M0 / 100): a bigger batch is wasted.
  const auto clean = BestBatch(step(4), 4, limits, {.sqr = 100, .var = 1});
  REQUIRE(clean.has_value());
  CHECK(clean->total_batch == Approx(128));
  CHECK(clean->local_batch == 32);
  // Noise dominates (phi = 100 x M0): a larger batch keeps its efficiency,
  // and fills the step the sync costs anyway.
  const auto noisy = BestBatch(step(4), 4, limits, {.sqr = 1, .var = 100});
  REQUIRE(noisy.has_value());
  CHECK(noisy->total_batch > 512);
  CHECK(noisy->local_batch <= 512);
  CHECK(noisy->goodput > clean->goodput);
  CHECK(noisy->goodput == Approx(noisy->samples_per_second *
                                 StatisticalEfficiency({1, 100}, 128, noisy->total_batch)));
  // Every candidate the search tried is no better than what it returned.
  for (uint32_t local = 32; local <= 512; local *= 2) {
    const double total = 4.0 * local;
    const double goodput =
        total / PolluxLikeStep(4, local, 0) * StatisticalEfficiency({1, 100}, 128, total);
    CHECK(goodput <= noisy->goodput * 1.02);  // the geometric grid is 50 points
  }
}

TEST_CASE("the batch search keeps to the job's bounds", "[goodput]") {
  const auto step = [](uint32_t local, uint32_t accumulation) {
    return PolluxLikeStep(2, local, accumulation);
  };
  const GradientStats noisy{.sqr = 1, .var = 1000};
  // Without accumulation, no local batch above the limit.
  BatchLimits limits{.initial_batch = 64, .max_batch = 8192, .max_local_batch = 256};
  auto best = BestBatch(step, 2, limits, noisy);
  REQUIRE(best.has_value());
  CHECK(best->local_batch <= 256);
  CHECK(best->accumulation_steps == 0);
  CHECK(best->total_batch <= 512);
  // With accumulation, totals past replicas x max local are reached in
  // micro-steps, each within the limit.
  limits.accumulation = true;
  best = BestBatch(step, 2, limits, noisy);
  REQUIRE(best.has_value());
  CHECK(best->local_batch <= 256);
  CHECK(best->total_batch == Approx(2.0 * best->local_batch * (best->accumulation_steps + 1)));
  CHECK(best->total_batch <= 8192 * 1.0001);
  // One replica without accumulation keeps M0 (AdaptDL: one micro-batch
  // alone gives no gradient statistics to scale by).
  limits.accumulation = false;
  best =
      BestBatch([](uint32_t l, uint32_t a) { return PolluxLikeStep(1, l, a); }, 1, limits, noisy);
  REQUIRE(best.has_value());
  CHECK(best->total_batch == Approx(64));
  // Replicas that do not divide the totals: rounding the local batch up
  // never passes the largest total.
  for (bool accumulation : {false, true}) {
    const BatchLimits odd{.initial_batch = 64,
                          .max_batch = 1000,
                          .max_local_batch = 100,
                          .accumulation = accumulation};
    for (uint32_t replicas : {3u, 7u}) {
      const auto choice = BestBatch(
          [replicas](uint32_t l, uint32_t a) { return PolluxLikeStep(replicas, l, a); }, replicas,
          odd, noisy);
      REQUIRE(choice.has_value());
      INFO("replicas " << replicas << " accumulation " << accumulation);
      CHECK(choice->total_batch <= 1000);
      CHECK(choice->local_batch <= 100);
      // Noisy: it still grows to near the most the bounds allow.
      CHECK(choice->total_batch >= 0.8 * std::min(1000.0, replicas * 100.0));
    }
  }
  // Too many replicas for the largest total: no choice.
  limits.min_local_batch = 32;
  CHECK_FALSE(BestBatch(step, 512, limits, noisy).has_value());
  // No growth allowed (max_batch 0 = M0): the total stays M0.
  best = BestBatch(step, 2, {.initial_batch = 64}, noisy);
  REQUIRE(best.has_value());
  CHECK(best->total_batch == Approx(64));
  CHECK(best->local_batch == 32);
}

TEST_CASE("a batch change needs more than a 5% gain", "[goodput]") {
  BatchChoice current{.local_batch = 32, .goodput = 100};
  BatchChoice slightly{.local_batch = 64, .goodput = 104};
  BatchChoice exactly{.local_batch = 96, .goodput = 105};
  BatchChoice clearly{.local_batch = 128, .goodput = 106};
  CHECK(KeepOrSwitch(current, slightly).local_batch == 32);
  CHECK(KeepOrSwitch(current, exactly).local_batch == 32);
  CHECK(KeepOrSwitch(current, clearly).local_batch == 128);
  // Two choices without goodput never switch (AdaptDL's 1e-8 floor).
  BatchChoice none{.local_batch = 32, .goodput = 0};
  BatchChoice also_none{.local_batch = 64, .goodput = 0};
  CHECK(KeepOrSwitch(none, also_none).local_batch == 32);
}

TEST_CASE("batch limits name the field and the bound", "[goodput]") {
  CHECK_THAT(std::string(ValidateBatchLimits({}).message()),
             Catch::Contains("initial_batch_size must be > 0"));
  CHECK_THAT(std::string(ValidateBatchLimits({.initial_batch = 64, .max_batch = 32}).message()),
             Catch::Contains("spec.batch_scaling.max_batch_size (32) must be >= "
                             "spec.batch_scaling.initial_batch_size (64)"));
  CHECK_THAT(std::string(ValidateBatchLimits(
                             {.initial_batch = 64, .min_local_batch = 16, .max_local_batch = 8})
                             .message()),
             Catch::Contains("spec.batch_scaling.max_local_batch_size (8) must be >= "
                             "spec.batch_scaling.min_local_batch_size (16)"));
}

}  // namespace
}  // namespace rescale
