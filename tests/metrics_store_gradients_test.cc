// Tests of the gradient statistics samples may carry (StepSample::grad_sqr,
// grad_var, grad_batch): validated per sample with a reason naming the
// field, kept per size over the window like step times, and summarised as
// the job's gradient noise scale (MetricsStore::GradientNoiseScale).
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/time.h"
#include "rescale/metrics_store.h"

namespace rescale {
namespace {

using Catch::Matchers::Contains;

const absl::Time kNow = absl::FromUnixSeconds(1'700'000'000);
const std::string kJob = "ns/job";

StepSample WithGradients(double sqr, double var, uint32_t world_size = 4, uint32_t batch = 32,
                         uint32_t grad_batch = 0) {
  StepSample s;
  s.job_id = kJob;
  s.pod = "job-worker-0";
  s.world_size = world_size;
  s.step_seconds = 0.5;
  s.batch_size = batch;
  s.grad_sqr = sqr;
  s.grad_var = var;
  s.grad_batch = grad_batch;
  return s;
}

TEST_CASE("gradient statistics are validated per sample, naming the field", "[gradients]") {
  MetricsStore store;
  REQUIRE(store.AddJob(kJob, 8, 32).ok());
  StepSample only_sqr = WithGradients(1, 1);
  only_sqr.grad_var.reset();
  StepSample only_var = WithGradients(1, 1);
  only_var.grad_sqr.reset();
  std::vector<StepSample> batch = {
      only_sqr,
      only_var,
      WithGradients(-1, 1),
      WithGradients(1, std::numeric_limits<double>::quiet_NaN()),
      WithGradients(1, std::numeric_limits<double>::infinity()),
      WithGradients(2e30, 1),
      WithGradients(0.5, 2),  // valid: accepted beside the rejected
  };
  const IngestResult r = store.Ingest(batch, kNow);
  CHECK(r.accepted == 1);
  REQUIRE(r.rejections.size() == 6);
  CHECK_THAT(r.rejections[0].reason, Contains("grad_sqr is set without grad_var"));
  CHECK_THAT(r.rejections[1].reason, Contains("grad_var is set without grad_sqr"));
  CHECK_THAT(r.rejections[2].reason, Contains("grad_sqr must be a finite number >= 0, got -1"));
  CHECK_THAT(r.rejections[3].reason, Contains("grad_var must be a finite number >= 0"));
  CHECK_THAT(r.rejections[4].reason, Contains("grad_var must be a finite number >= 0, got inf"));
  CHECK_THAT(r.rejections[5].reason, Contains("grad_sqr 2e+30 exceeds the limit of 1e+30"));
}

TEST_CASE("the noise scale is the per-sample noise over |G|^2, whatever batch it was measured at",
          "[gradients]") {
  MetricsStore store;
  REQUIRE(store.AddJob(kJob, 8, 32).ok());
  CHECK_FALSE(store.GradientNoiseScale(kJob, kNow).has_value());
  // Samples without statistics leave it unknown.
  StepSample plain = WithGradients(0, 0);
  plain.grad_sqr.reset();
  plain.grad_var.reset();
  REQUIRE(store.Ingest(std::vector<StepSample>{plain}, kNow).accepted == 1);
  CHECK_FALSE(store.GradientNoiseScale(kJob, kNow).has_value());
  CHECK(store.Stats(kJob, kNow).at(0).gradient_count == 0);

  // At 4 workers x 32: the variance of a 128-sample mean gradient, 0.5,
  // is a per-sample noise of 64; over |G|^2 = 0.25, a noise scale of 256.
  // At 2 workers x 64 with an explicit grad_batch of 256 (accumulation),
  // a variance of 0.25 is the same per-sample noise.
  std::vector<StepSample> batch = {WithGradients(0.25, 0.5), WithGradients(0.25, 0.25, 2, 64, 256)};
  REQUIRE(store.Ingest(batch, kNow).accepted == 2);
  CHECK(store.GradientNoiseScale(kJob, kNow) == Approx(256));
  const std::vector<SizeStats> stats = store.Stats(kJob, kNow);
  REQUIRE(stats.size() == 2);  // sizes 2 and 4
  CHECK(stats[0].world_size == 2);
  CHECK(stats[0].gradient_count == 1);
  CHECK(stats[0].gradient_noise == Approx(64));
  CHECK(stats[1].gradient_count == 1);
  CHECK(stats[1].gradient_sqr == Approx(0.25));
  CHECK(stats[1].gradient_noise == Approx(64));

  // |G|^2 of 0 (noise only): no finite scale.
  MetricsStore noise_only;
  REQUIRE(noise_only.AddJob(kJob, 8, 32).ok());
  REQUIRE(noise_only.Ingest(std::vector<StepSample>{WithGradients(0, 1)}, kNow).accepted == 1);
  CHECK_FALSE(noise_only.GradientNoiseScale(kJob, kNow).has_value());
}

TEST_CASE("the noise scale follows the gradient window as training moves on", "[gradients]") {
  MetricsStoreOptions options;
  options.window = absl::Minutes(6);  // snapshots every minute
  // The default gradient window (one step of the window: a minute here),
  // and one as long as the window.
  MetricsStoreOptions whole = options;
  whole.gradient_window = options.window;
  for (MetricsStoreOptions o : {options, whole}) {
    const bool latest = o.gradient_window == absl::ZeroDuration();
    INFO((latest ? "default gradient window" : "gradient window = window"));
    MetricsStore store(o);
    REQUIRE(store.AddJob(kJob, 8, 32).ok());
    // Early in training: large |G|^2, scale 128 (noise 0.5 x 128 / 0.5).
    REQUIRE(store.Ingest(std::vector<StepSample>(10, WithGradients(0.5, 0.5)), kNow).accepted ==
            10);
    store.Tick(kNow);
    CHECK(store.GradientNoiseScale(kJob, kNow) == Approx(128));
    for (int minute = 1; minute <= 3; ++minute) store.Tick(kNow + absl::Minutes(minute));
    // Later: |G|^2 shrinks, the scale grows (0.5 x 128 / 0.05 = 1280).
    const absl::Time later = kNow + absl::Minutes(3);
    REQUIRE(store.Ingest(std::vector<StepSample>(10, WithGradients(0.05, 0.5)), later).accepted ==
            10);
    // The gradient window holds only the new statistics: the scale now.
    // Over the whole window, both count: the ratio of the means, 64 /
    // 0.275, ruled by the early |G|^2.
    CHECK(store.GradientNoiseScale(kJob, later) == Approx(latest ? 1280 : 64 / 0.275));
    // Once the gradient window holds none, the window's stand in; later
    // only the recent statistics are in the window either way.
    store.Tick(kNow + absl::Minutes(4));
    store.Tick(kNow + absl::Minutes(5));
    CHECK(store.GradientNoiseScale(kJob, kNow + absl::Minutes(5)) == Approx(64 / 0.275));
    for (int minute = 6; minute <= 8; ++minute) store.Tick(kNow + absl::Minutes(minute));
    CHECK(store.GradientNoiseScale(kJob, kNow + absl::Minutes(8)) == Approx(1280));
    // Once the window holds none, the lifetime's stand in.
    for (int minute = 9; minute <= 20; ++minute) store.Tick(kNow + absl::Minutes(minute));
    CHECK(store.GradientNoiseScale(kJob, kNow + absl::Minutes(20)) == Approx(64 / 0.275));
  }
}

TEST_CASE("gradient statistics from concurrent writers are all counted, while Tick rolls windows",
          "[gradients][concurrency]") {
  MetricsStoreOptions options;
  options.window = absl::Seconds(6);         // a snapshot per simulated second
  options.gradient_window = options.window;  // the sums over every sample below
  MetricsStore store(options);
  REQUIRE(store.AddJob(kJob, 8, 32).ok());
  constexpr int kThreads = 3;
  constexpr int kBatches = 200;
  std::vector<std::thread> writers;
  for (int t = 0; t < kThreads; ++t) {
    writers.emplace_back([&store, t] {
      for (int b = 0; b < kBatches; ++b) {
        // Values differ per writer and batch, so a torn read would show.
        StepSample s = WithGradients(1.0 + t, 1.0 + b % 7);
        const std::string pod = "p" + std::to_string(t);
        s.pod = pod;
        (void)store.Ingest(std::vector<StepSample>(4, s), kNow);
      }
    });
  }
  // Tick takes window snapshots while the writers flush (the race that a
  // window's base can hold a batch's sums without its count), and a reader
  // asks meanwhile (for ThreadSanitizer; no answer may be negative or
  // non-finite).
  std::thread ticker([&store] {
    for (int second = 1; second <= 400; ++second) store.Tick(kNow + absl::Seconds(second) / 100);
  });
  bool sane = true;
  for (int i = 0; i < 2000; ++i) {
    const std::optional<double> scale = store.GradientNoiseScale(kJob, kNow);
    if (scale.has_value() && !(std::isfinite(*scale) && *scale >= 0)) sane = false;
  }
  for (std::thread& w : writers) w.join();
  ticker.join();
  CHECK(sane);
  // Every sample counted once over the lifetime, whatever the windows did.
  const absl::Time later = kNow + absl::Seconds(4);
  const SizeStats stats = store.Stats(kJob, later).at(0);
  CHECK(stats.lifetime_count == uint64_t{kThreads} * kBatches * 4);
  double noise = 0;
  double sqr = 0;
  for (int t = 0; t < kThreads; ++t) {
    for (int b = 0; b < kBatches; ++b) {
      noise += 4 * (1.0 + b % 7) * 128;  // grad_var x 4 workers x 32
      sqr += 4 * (1.0 + t);
    }
  }
  // All samples are in the window at `later` (stamped kNow, window 6 s).
  REQUIRE(store.GradientNoiseScale(kJob, later).has_value());
  CHECK(*store.GradientNoiseScale(kJob, later) == Approx(noise / sqr));
}

}  // namespace
}  // namespace rescale
