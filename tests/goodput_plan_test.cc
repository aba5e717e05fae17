// Tests of goodput planning through the public DecisionEngine API: the
// throughput model's step time at another batch (StepSecondsAt), the batch a
// goodput-planned job is recommended (its bounds, efficiency and goodput),
// that jobs without batch scaling or gradient statistics, or an engine with
// plan_on_goodput off, are planned exactly as before, that goodput keeps a
// job whose batch stops paying from scaling out, and that a job keeps its
// batch at the size it runs.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "rescale/clock.h"
#include "rescale/decision_engine.h"
#include "rescale/goodput.h"
#include "rescale/throughput_model.h"
#include "tests/engine_helpers.h"

namespace rescale {
namespace {

using testing::MustCreate;
using testing::MustRecommendation;
using testing::MustRegister;
using testing::MustSetCapacity;

// The local batch every pod reports before any batch is recommended: the
// model's compute is fitted at it.
constexpr uint32_t kBatch = 32;
// Noise scales (samples): far above every total the jobs may reach, so a
// larger batch keeps nearly all its value; and far below their initial
// batch, so EFF(M) ~ M0 / M and a larger batch buys nothing.
constexpr double kLargeNoise = 20'000;
constexpr double kSmallNoise = 0.05;

// The step time the pods measure at n workers at kBatch: a fixed compute
// and a sync cost from two workers on, so the fit has every term.
double MeasuredStep(uint32_t n) { return n == 1 ? 0.2 : 0.24 + 0.004 * (n - 2); }

// `count` samples at `world_size` workers of `batch` samples each. With a
// noise scale, each carries gradient statistics with that scale: |G|^2 = 1
// and the variance of the mean over the step's world_size x batch samples,
// so the per-sample noise over |G|^2 is `noise_scale` (what
// MetricsStore::GradientNoiseScale averages).
void IngestAt(DecisionEngine& engine, const std::string& job_id, uint32_t world_size,
              double step_seconds, uint32_t batch, std::optional<double> noise_scale,
              int count = 20) {
  std::vector<std::string> pods;
  for (uint32_t k = 0; k < std::min<uint32_t>(world_size, 4); ++k)
    pods.push_back(job_id + "-worker-" + std::to_string(k));
  std::vector<StepSample> samples(count);
  for (int k = 0; k < count; ++k) {
    StepSample& s = samples[k];
    s.job_id = job_id;
    s.pod = pods[k % pods.size()];
    s.world_size = world_size;
    s.step_seconds = step_seconds;
    s.batch_size = batch;
    if (noise_scale.has_value()) {
      s.grad_sqr = 1.0;
      s.grad_var = *noise_scale / (double(world_size) * batch);
    }
  }
  const IngestResult result = engine.Ingest(samples);
  INFO((result.rejections.empty() ? std::string() : result.rejections[0].reason));
  REQUIRE(result.accepted == samples.size());
}

// A planner job of 1 to 16 workers at kBatch per worker; with `scaling`, its
// total batch may grow from M0 = 64 to 2048, 16 to 128 per worker.
JobSpec Spec(const std::string& id, bool scaling, bool accumulation = false) {
  JobSpec spec;
  spec.job_id = id;
  spec.min_replicas = 1;
  spec.max_replicas = 16;
  spec.local_batch_size = kBatch;
  spec.restart_cost_seconds = 5;
  if (scaling) {
    spec.batch_scaling = BatchLimits{.initial_batch = 64,
                                     .max_batch = 2048,
                                     .min_local_batch = 16,
                                     .max_local_batch = 128,
                                     .accumulation = accumulation};
  }
  return spec;
}

struct Job {
  JobSpec spec;
  std::optional<double> noise_scale;  // nullopt = no gradient statistics
};

// An engine on a ManualClock (declared first: it outlives the engine).
struct Cluster {
  ManualClock clock;
  std::unique_ptr<DecisionEngine> engine;
};

// Registers `jobs` on an engine with `options` and `capacity` GPUs, runs
// each at 2 workers, measures each at 1, 2 and 4 (MeasuredStep, kBatch, its
// gradient statistics) and replans past the cooldown: the same inputs for
// every engine a test compares.
std::unique_ptr<Cluster> PlanMeasured(const EngineOptions& options, const std::vector<Job>& jobs,
                                      uint32_t capacity) {
  auto cluster = std::make_unique<Cluster>();
  cluster->engine = MustCreate(options, &cluster->clock);
  DecisionEngine& engine = *cluster->engine;
  for (const Job& job : jobs) MustRegister(engine, job.spec);
  MustSetCapacity(engine, capacity);
  for (const Job& job : jobs) {
    const Recommendation rec = MustRecommendation(engine, job.spec.job_id);
    REQUIRE(engine.ReportApplied(job.spec.job_id, 2, false, rec.generation).ok());
  }
  for (const Job& job : jobs) {
    for (uint32_t n : {1u, 2u, 4u})
      IngestAt(engine, job.spec.job_id, n, MeasuredStep(n), kBatch, job.noise_scale);
  }
  cluster->clock.Advance(absl::Seconds(61));
  engine.Replan();
  return cluster;
}

EngineOptions ThroughputOnly() {
  EngineOptions options;
  options.plan_on_goodput = false;
  return options;
}

bool HasBatchFields(const Recommendation& rec) {
  return rec.local_batch_size.has_value() || rec.accumulation_steps.has_value() ||
         rec.predicted_goodput.has_value() || rec.statistical_efficiency.has_value();
}

// The statistics the engine plans a job with noise scale `phi` on: EFF
// depends on phi and M0 only (sqr = 1, var = phi / M0).
GradientStats StatsOf(double phi, double m0) { return {.sqr = 1.0, .var = phi / m0}; }

// The engine's fitted step time at n workers (at the batch it was fitted
// at, `fitted_batch`), read back from the curve it publishes:
// samples/s = n x batch / step.
double CurveStep(const JobView& view, uint32_t n, double fitted_batch) {
  REQUIRE(n >= 1);
  REQUIRE(view.curve.size() >= n);
  REQUIRE(view.curve[n - 1].replicas == n);
  return n * fitted_batch / view.curve[n - 1].samples_per_second;
}

TEST_CASE("StepSecondsAt is StepSeconds at the fitted batch, compute half fixed half per sample",
          "[goodput][engine]") {
  std::vector<Observation> observations;
  for (uint32_t n : {1u, 2u, 4u}) {
    observations.push_back({.replicas = n,
                            .step_seconds = MeasuredStep(n),
                            .spread_seconds = 0.001,
                            .sample_count = 50,
                            .mean_batch = kBatch});
  }
  const ThroughputModel model = ThroughputModel::Fit(observations, {});
  REQUIRE_FALSE(model.empty());
  REQUIRE(model.local_batch() == Approx(kBatch));
  // One worker pays no sync: its step is the fitted compute.
  const double compute = model.StepSeconds(1);
  REQUIRE(compute > 0);
  // The fit found a sync cost, so "sync once per optimizer step" is
  // distinguishable from "everything per micro-step".
  REQUIRE(model.StepSeconds(4) > compute * 1.05);
  CHECK(ThroughputModel::kComputeFixedShare == 0.5);
  for (uint32_t n : {1u, 2u, 3u, 4u, 8u, 16u}) {
    INFO("n = " << n);
    const double step = model.StepSeconds(n);
    CHECK(model.StepSecondsAt(n, model.local_batch(), 0) == Approx(step).epsilon(1e-12));
    // T_grad(m) = compute x (0.5 + 0.5 m / b): a doubled batch adds half
    // the compute...
    CHECK(model.StepSecondsAt(n, 2 * model.local_batch(), 0) ==
          Approx(step + 0.5 * compute).epsilon(1e-12));
    // ...and a quarter of the batch still pays the fixed half.
    CHECK(model.StepSecondsAt(n, model.local_batch() / 4, 0) ==
          Approx(step - compute + compute * (0.5 + 0.5 / 4)).epsilon(1e-12));
    // One accumulation step repeats the compute, not the sync.
    CHECK(model.StepSecondsAt(n, model.local_batch(), 1) == Approx(step + compute).epsilon(1e-12));
    // Half the batch over 4 micro-steps: 4 x 0.75 of the compute.
    CHECK(model.StepSecondsAt(n, model.local_batch() / 2, 3) ==
          Approx(step - compute + 4 * 0.75 * compute).epsilon(1e-12));
  }
  CHECK(model.StepSecondsAt(4, model.local_batch(), 1) < 2 * model.StepSeconds(4));
  // Nothing to say: an empty model, no workers or no batch.
  CHECK(ThroughputModel().StepSecondsAt(2, 32, 0) == 0);
  CHECK(model.StepSecondsAt(0, 32, 0) == 0);
  CHECK(model.StepSecondsAt(2, 0, 0) == 0);
}

// Checks what a goodput-planned recommendation says against the job's
// bounds, the efficiency formula and the engine's own curve.
void CheckBatchRecommendation(const Recommendation& rec, const JobView& view, double phi) {
  INFO(rec.job_id << ": " << rec.replicas << " replicas, " << rec.reason);
  REQUIRE(rec.replicas > 0);
  REQUIRE(rec.local_batch_size.has_value());
  REQUIRE(rec.accumulation_steps.has_value());
  REQUIRE(rec.predicted_goodput.has_value());
  REQUIRE(rec.statistical_efficiency.has_value());
  const BatchLimits& limits = *view.spec.batch_scaling;
  const uint32_t local = *rec.local_batch_size;
  const uint32_t accumulation = *rec.accumulation_steps;
  INFO("local " << local << ", accumulation " << accumulation);
  CHECK(local >= limits.min_local_batch);
  CHECK(local <= limits.max_local_batch);
  if (!limits.accumulation) CHECK(accumulation == 0);
  const double total = double(rec.replicas) * local * (accumulation + 1);
  CHECK(total <= limits.max_batch);
  CHECK(total >= limits.initial_batch);
  // EFF of the recommended total against M0, from the noise scale the pods'
  // statistics give.
  const double eff =
      StatisticalEfficiency(StatsOf(phi, limits.initial_batch), limits.initial_batch, total);
  CHECK(*rec.statistical_efficiency > 0);
  CHECK(*rec.statistical_efficiency <= 1.0 + 1e-12);
  CHECK(*rec.statistical_efficiency == Approx(eff).epsilon(1e-9));
  // Goodput is the throughput of the recommended batch, not of the batch
  // the curve was fitted at, times its EFF: T_grad = compute x (0.5 + 0.5 m
  // / b) per micro-step, sync once per step, with compute the one-worker
  // step and b = kBatch.
  const double step_at_fitted = CurveStep(view, rec.replicas, kBatch);
  CHECK(rec.predicted_samples_per_second == Approx(rec.replicas * kBatch / step_at_fitted));
  const double compute = CurveStep(view, 1, kBatch);
  const double step = step_at_fitted - compute +
                      compute * (0.5 + 0.5 * double(local) / kBatch) * (accumulation + 1.0);
  CHECK(*rec.predicted_goodput == Approx(total / step * eff).epsilon(1e-6));
}

TEST_CASE(
    "a goodput-planned job is recommended a batch within its bounds, with its EFF and goodput",
    "[goodput][engine]") {
  // Without accumulation; and with it, a worker's batch capped at kBatch so
  // that a total past replicas x kBatch needs micro-steps.
  const bool accumulation = GENERATE(false, true);
  INFO("accumulation " << accumulation);
  JobSpec large_spec = Spec("ns/large", true, accumulation);
  JobSpec small_spec = Spec("ns/small", true, accumulation);
  if (accumulation) large_spec.batch_scaling->max_local_batch = kBatch;
  if (accumulation) small_spec.batch_scaling->max_local_batch = kBatch;
  auto large = PlanMeasured(EngineOptions{}, {{large_spec, kLargeNoise}}, 16);
  auto small = PlanMeasured(EngineOptions{}, {{small_spec, kSmallNoise}}, 16);
  const Recommendation large_rec = MustRecommendation(*large->engine, "ns/large");
  const Recommendation small_rec = MustRecommendation(*small->engine, "ns/small");
  CheckBatchRecommendation(large_rec, large->engine->GetJob("ns/large").value(), kLargeNoise);
  CheckBatchRecommendation(small_rec, small->engine->GetJob("ns/small").value(), kSmallNoise);

  const auto total = [](const Recommendation& rec) {
    return double(rec.replicas) * *rec.local_batch_size * (*rec.accumulation_steps + 1);
  };
  INFO("large: " << large_rec.replicas << " x " << *large_rec.local_batch_size << " x "
                 << (*large_rec.accumulation_steps + 1) << "; small: " << small_rec.replicas
                 << " x " << *small_rec.local_batch_size << " x "
                 << (*small_rec.accumulation_steps + 1));
  // A large noise scale: a bigger batch costs little efficiency and runs
  // the fixed compute fewer times per sample, so the job takes every GPU
  // and grows its batch past M0, keeping nearly all its efficiency...
  CHECK(large_rec.replicas == 16);
  CHECK(total(large_rec) > 64);
  CHECK(*large_rec.statistical_efficiency > 0.9);
  // ...with micro-steps where a worker's batch alone cannot reach it.
  if (accumulation) CHECK(total(large_rec) > large_rec.replicas * kBatch);
  // A small one: EFF ~ M0 / M, so the job takes the smallest total its
  // bounds allow at its size (M0, or one min_local batch per worker), and
  // leaves GPUs idle rather than grow it: more workers would only split M0
  // more finely, down to min_local.
  CHECK(total(small_rec) == std::max(64.0, 16.0 * small_rec.replicas));
  CHECK(total(small_rec) < total(large_rec));
  CHECK(small_rec.replicas <= 64 / 16);
  CHECK(small_rec.replicas < large_rec.replicas);
}

TEST_CASE("jobs without gradient statistics or batch scaling, or with goodput off, plan as before",
          "[goodput][engine]") {
  struct Case {
    std::string name;
    Job job;
    bool plan_on_goodput;
  };
  const std::vector<Case> cases = {
      {"no gradient statistics", {Spec("ns/job", true), std::nullopt}, true},
      {"no batch_scaling", {Spec("ns/job", false), kLargeNoise}, true},
      {"plan_on_goodput=false", {Spec("ns/job", true), kLargeNoise}, false},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    // Beside a throughput twin, on fewer GPUs than both want (12 for up to
    // 2 x 16), so the split, not only max_replicas, is compared.
    Job twin{Spec("ns/twin", false), std::nullopt};
    const std::vector<Job> jobs = {c.job, twin};
    EngineOptions options;
    options.plan_on_goodput = c.plan_on_goodput;
    auto planned = PlanMeasured(options, jobs, 12);
    auto plain = PlanMeasured(ThroughputOnly(), jobs, 12);
    for (const std::string id : {"ns/job", "ns/twin"}) {
      INFO(id);
      const Recommendation rec = MustRecommendation(*planned->engine, id);
      const Recommendation base = MustRecommendation(*plain->engine, id);
      CHECK_FALSE(HasBatchFields(rec));
      CHECK_FALSE(HasBatchFields(base));
      CHECK(rec.replicas == base.replicas);
      CHECK(rec.predicted_samples_per_second == Approx(base.predicted_samples_per_second));
    }
  }
  // The same job with both, on the default engine, is goodput-planned: the
  // cases above differ from it by one input each.
  auto both = PlanMeasured(EngineOptions{}, {{Spec("ns/job", true), kLargeNoise}}, 12);
  CHECK(HasBatchFields(MustRecommendation(*both->engine, "ns/job")));
}

TEST_CASE("goodput keeps a job whose larger batch stops paying from scaling out beside a twin",
          "[goodput][engine]") {
  // Twins measured alike; only ns/goodput may scale its batch. With a tiny
  // noise scale its goodput is M0 over the step time: more workers only
  // split M0 (whose fixed half of the compute stays) and, past M0 /
  // min_local = 4, grow the total, whose EFF ~ M0 / M cancels the samples
  // they add. Its twin's throughput grows nearly linearly.
  const std::vector<Job> jobs = {{Spec("ns/goodput", true), kSmallNoise},
                                 {Spec("ns/twin", false), kSmallNoise}};
  auto goodput = PlanMeasured(EngineOptions{}, jobs, 16);
  auto throughput = PlanMeasured(ThroughputOnly(), jobs, 16);
  const Recommendation g = MustRecommendation(*goodput->engine, "ns/goodput");
  const Recommendation g_twin = MustRecommendation(*goodput->engine, "ns/twin");
  const Recommendation t = MustRecommendation(*throughput->engine, "ns/goodput");
  const Recommendation t_twin = MustRecommendation(*throughput->engine, "ns/twin");
  INFO("goodput engine: " << g.replicas << " + " << g_twin.replicas
                          << "; throughput engine: " << t.replicas << " + " << t_twin.replicas);
  CHECK(HasBatchFields(g));
  CHECK_FALSE(HasBatchFields(g_twin));
  CHECK_FALSE(HasBatchFields(t));
  // On throughput the twins are alike and split the GPUs evenly.
  CHECK(t.replicas == t_twin.replicas);
  // On goodput the job gets strictly fewer, and its twin the GPUs it leaves.
  CHECK(g.replicas >= 1);
  CHECK(g.replicas < t.replicas);
  CHECK(g_twin.replicas > t_twin.replicas);
  CHECK(g.gpus + g_twin.gpus <= 16);
}

TEST_CASE("a goodput-planned job keeps its batch at the size it runs", "[goodput][engine]") {
  // Accumulation allowed and a local batch capped at kBatch, so the
  // recommended batch differs from what the pods report per step
  // (local x (accumulation + 1)) whenever it accumulates: a plan that
  // forgot the recommendation would read the batch back from the samples.
  JobSpec spec = Spec("ns/job", true, true);
  spec.batch_scaling->max_local_batch = kBatch;
  auto cluster = PlanMeasured(EngineOptions{}, {{spec, kLargeNoise}}, 16);
  DecisionEngine& engine = *cluster->engine;
  const Recommendation first = MustRecommendation(engine, "ns/job");
  REQUIRE(HasBatchFields(first));
  REQUIRE(first.replicas != 2);  // it moves: the batch is the best there
  const uint32_t replicas = first.replicas;
  const uint32_t local = *first.local_batch_size;
  const uint32_t accumulation = *first.accumulation_steps;
  INFO(replicas << " replicas, local " << local << ", accumulation " << accumulation);
  REQUIRE(accumulation > 0);

  // Applied: the plan ReportApplied makes keeps it.
  REQUIRE(engine.ReportApplied("ns/job", replicas, false, first.generation).ok());
  Recommendation rec = MustRecommendation(engine, "ns/job");
  CHECK(rec.action == Action::kHold);
  CHECK(rec.local_batch_size == local);
  CHECK(rec.accumulation_steps == accumulation);

  // The pods run it: per step, local x (accumulation + 1) samples each, in
  // the time the engine predicted for it, with the same statistics.
  const JobView view = engine.GetJob("ns/job").value();
  const double compute = CurveStep(view, 1, kBatch);
  const double step = CurveStep(view, replicas, kBatch) - compute +
                      compute * (0.5 + 0.5 * double(local) / kBatch) * (accumulation + 1.0);
  IngestAt(engine, "ns/job", replicas, step, local * (accumulation + 1), kLargeNoise);
  const std::optional<double> phi = engine.GetJob("ns/job").value().status.gradient_noise_scale;
  REQUIRE(phi.has_value());
  for (int round = 0; round < 3; ++round) {
    INFO("round " << round);
    // Rounds a cooldown apart: once it is over the planner may move the
    // job, and keeps it.
    cluster->clock.Advance(absl::Seconds(61));
    engine.Replan();
    rec = MustRecommendation(engine, "ns/job");
    REQUIRE(rec.replicas == replicas);
    CHECK(rec.action == Action::kHold);
    CHECK(rec.generation == first.generation);
    REQUIRE(rec.local_batch_size.has_value());
    CHECK(*rec.local_batch_size == local);
    CHECK(*rec.accumulation_steps == accumulation);
    // The kept batch is valued with the window's statistics. (Its goodput
    // is not compared with the first plan's: it follows the refitted
    // curve.)
    CHECK(*rec.predicted_goodput > 0);
    CHECK(*rec.statistical_efficiency ==
          Approx(StatisticalEfficiency(StatsOf(*phi, 64), 64,
                                       double(replicas) * local * (accumulation + 1)))
              .epsilon(1e-9));
  }
}

}  // namespace
}  // namespace rescale

namespace rescale {
namespace {

TEST_CASE("observations at two batches fit how compute grows with the batch", "[goodput][model]") {
  // True job: compute 0.01 + 0.002 m per step, sync 0.05 from two workers
  // on; measured at sizes 1, 2, 4 with local batch 16 at some and 64 at
  // others (as a goodput-planned job that changed its batch reports).
  auto step = [](uint32_t n, double m) { return 0.01 + 0.002 * m + (n > 1 ? 0.05 : 0.0); };
  std::vector<Observation> observations;
  for (const auto& [n, m] : {std::pair{1u, 16.0}, std::pair{2u, 64.0}, std::pair{3u, 16.0},
                             std::pair{4u, 64.0}, std::pair{6u, 16.0}}) {
    Observation o;
    o.replicas = n;
    o.step_seconds = step(n, m);
    o.spread_seconds = 0.001;
    o.sample_count = 50;
    o.mean_batch = m;
    observations.push_back(o);
  }
  const ThroughputModel model = ThroughputModel::Fit(observations, {});
  REQUIRE_FALSE(model.empty());
  // The true fixed share at the model's reference batch (the weighted mean
  // batch): 0.01 / (0.01 + 0.002 x reference); the grid's step is 1/24.
  const double reference = model.local_batch();
  CHECK(model.compute_fixed_share() == Approx(0.01 / (0.01 + 0.002 * reference)).margin(1.0 / 24));
  // Predictions at unmeasured (size, batch) pairs within 10%.
  for (const auto& [n, m] :
       {std::pair{1u, 64.0}, std::pair{2u, 16.0}, std::pair{4u, 128.0}, std::pair{8u, 32.0}}) {
    INFO("n " << n << " m " << m);
    CHECK(model.StepSecondsAt(n, m, 0) == Approx(step(n, m)).epsilon(0.10));
  }
  // With one batch only, the share is held at Pollux's half.
  for (Observation& o : observations) o.mean_batch = 16;
  CHECK(ThroughputModel::Fit(observations, {}).compute_fixed_share() ==
        ThroughputModel::kComputeFixedShare);
}

// ---- progress in samples at M0 ----------------------------------------------------

TEST_CASE("a goodput-planned job's progress and time left count samples at M0") {
  ManualClock clock;
  auto engine = MustCreate(EngineOptions{}, &clock);
  JobSpec scaling = Spec("ns/scaling", true);
  JobSpec plain = Spec("ns/plain", false);
  scaling.total_samples = plain.total_samples = 100'000;
  for (const JobSpec& spec : {scaling, plain}) {
    MustRegister(*engine, spec);
    const Recommendation rec = MustRecommendation(*engine, spec.job_id);
    REQUIRE(engine->ReportApplied(spec.job_id, 4, false, rec.generation).ok());
  }
  // Noise scale 100 against M0 = 64: EFF(64) = 1 at 2 workers of 32,
  // EFF(128) = 164 / 228 at 4. Each size: 20 samples from as many pods as
  // workers (at most 4) is 10 steps at 2 and 5 at 4, 640 samples either way.
  constexpr double kNoise = 100;
  const double eff_at_4 = (kNoise + 64) / (kNoise + 128);
  for (const JobSpec& spec : {scaling, plain}) {
    const std::optional<double> noise =
        spec.batch_scaling.has_value() ? std::optional<double>(kNoise) : std::nullopt;
    IngestAt(*engine, spec.job_id, 2, MeasuredStep(2), kBatch, noise);
    IngestAt(*engine, spec.job_id, 4, MeasuredStep(4), kBatch, noise);
  }
  engine->Replan();

  absl::StatusOr<JobView> view = engine->GetJob("ns/scaling");
  REQUIRE(view.ok());
  const JobStatus& status = view->status;
  CHECK(status.samples_processed == 1280);
  REQUIRE(status.progress_samples.has_value());
  CHECK(double(*status.progress_samples) == Approx(640 + 640 * eff_at_4).margin(1));
  REQUIRE(status.statistical_efficiency.has_value());
  CHECK(*status.statistical_efficiency == Approx(eff_at_4).epsilon(1e-9));
  // The rest of the 100,000 at M0, at the rate of progress at 4 workers.
  REQUIRE(status.estimated_remaining_seconds.has_value());
  REQUIRE(view->curve.size() >= 4);
  const double rate = view->curve[3].samples_per_second * eff_at_4;
  CHECK(*status.estimated_remaining_seconds ==
        Approx((100'000 - double(*status.progress_samples)) / rate).epsilon(1e-9));

  // Without gradient statistics: raw samples, raw throughput, as before.
  view = engine->GetJob("ns/plain");
  REQUIRE(view.ok());
  CHECK(view->status.samples_processed == 1280);
  CHECK_FALSE(view->status.progress_samples.has_value());
  REQUIRE(view->status.estimated_remaining_seconds.has_value());
  CHECK(*view->status.estimated_remaining_seconds ==
        Approx((100'000 - 1280.0) / view->curve[3].samples_per_second).epsilon(1e-9));
}

}  // namespace
}  // namespace rescale
