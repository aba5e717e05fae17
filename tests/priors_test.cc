// Tests of priors and exploration through the DecisionEngine (issue 13):
// prior points count like measured sizes, so on small instances where every
// job has a prior the engine's plan is the brute-force optimum of the
// planner's objective on the curve the server reports; a job without data
// starts at the size the default prior makes best; a running job steps
// beyond 2x its measured size when its curve says the step pays (and only
// by 2x while the capacity is unknown); measured data override a prior that
// disagrees; a size whose samples aged out of the window still counts as
// measured. Driven by a ManualClock; the brute force enumerates every plan.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "rescale/clock.h"
#include "rescale/cluster_planner.h"
#include "rescale/decision_engine.h"
#include "rescale/job_rules.h"
#include "rescale/policy.h"
#include "tests/engine_helpers.h"
#include "tests/plan_brute_force.h"

namespace rescale {
namespace {

using testing::MustCreate;
using testing::MustRecommendation;
using testing::MustRegister;
using testing::MustSetCapacity;
using testing::PlannerJobOf;
using testing::BruteForce;

using Catch::Matchers::Contains;

JobSpec Spec(const std::string& id, uint32_t min, uint32_t max) {
  JobSpec spec;
  spec.job_id = id;
  spec.min_replicas = min;
  spec.max_replicas = max;
  spec.local_batch_size = 32;
  spec.restart_cost_seconds = 5;
  return spec;
}

// Prior points of a job that scales linearly: 100 samples/s per replica.
std::vector<CurvePoint> LinearPrior(std::vector<uint32_t> sizes) {
  std::vector<CurvePoint> prior;
  for (uint32_t n : sizes) prior.push_back({.replicas = n, .samples_per_second = 100.0 * n});
  return prior;
}

// `count` samples of `job` at `world_size` replicas, `step_seconds` each.
void Measure(DecisionEngine& engine, const std::string& job, uint32_t world_size,
             double step_seconds, int count = 10) {
  const std::string pod = job + "-worker-0";
  std::vector<StepSample> batch(count);
  for (StepSample& s : batch) {
    s.job_id = job;
    s.pod = pod;
    s.world_size = world_size;
    s.step_seconds = step_seconds;
  }
  REQUIRE(engine.Ingest(batch).accepted == batch.size());
}

TEST_CASE("a lone job with a linear prior on an idle 8-GPU cluster gets 8 GPUs at once") {
  ManualClock clock;
  auto engine = MustCreate(EngineOptions{}, &clock);  // default policy: planner
  MustSetCapacity(*engine, 8);
  JobSpec spec = Spec("ns/linear", 1, 8);
  spec.prior = LinearPrior({1, 2, 4, 8});
  MustRegister(*engine, spec);
  const Recommendation rec = MustRecommendation(*engine, "ns/linear");
  CHECK(rec.replicas == 8);
  CHECK(rec.action == Action::kScaleUp);

  // A prior that stops at 4: beyond its points the fit extrapolates it, and
  // the planner goes where that curve pays. While the capacity is unknown
  // the prior's range is as far as the job goes at once.
  JobSpec shorter = Spec("ns/short", 1, 8);
  shorter.prior = LinearPrior({1, 2, 4});
  auto known = MustCreate(EngineOptions{}, &clock);
  MustSetCapacity(*known, 8);
  MustRegister(*known, shorter);
  CHECK(MustRecommendation(*known, "ns/short").replicas == 8);

  auto unknown = MustCreate(EngineOptions{}, &clock);
  MustRegister(*unknown, shorter);
  const Recommendation capped = MustRecommendation(*unknown, "ns/short");
  CHECK(capped.replicas == 4);
  CHECK_THAT(capped.reason, Contains("prior covers up to 4"));
}

// ---- brute force over the planner's objective ---------------------------------

TEST_CASE(
    "with a prior on every job and no samples, the plan is the brute-force optimum of the "
    "objective on the reported curves") {
  std::mt19937 rng(13);
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  for (int instance = 0; instance < 60; ++instance) {
    ManualClock clock;
    EngineOptions options;
    options.model.gpus_per_node = instance % 3 == 0 ? 4 : 0;
    auto engine = MustCreate(options, &clock);
    const uint64_t capacity = uniform(2, 12);
    MustSetCapacity(*engine, static_cast<uint32_t>(capacity));
    const int job_count = uniform(1, 4);
    for (int j = 0; j < job_count; ++j) {
      JobSpec spec = Spec("ns/job-" + std::to_string(j), uniform(1, 2), uniform(2, 6));
      spec.gpus_per_replica = uniform(1, 3) == 3 ? 2 : 1;
      spec.priority = uniform(0, 1);
      // Random prior points; in half the jobs they reach max_replicas.
      const double per_replica = uniform(50, 500);
      const double efficiency = uniform(30, 100) / 100.0;
      const uint32_t reach = uniform(0, 1) ? spec.max_replicas : uniform(1, spec.max_replicas);
      for (uint32_t n = 1; n <= reach; ++n) {
        if (n != reach && uniform(0, 1) == 0) continue;
        const double speedup = 1 + (n - 1) * efficiency;
        spec.prior.push_back({.replicas = n, .samples_per_second = per_replica * speedup});
      }
      MustRegister(*engine, spec);
    }
    // The instance as the planner sees it, from what the server reports:
    // each job's range (min to max: the capacity is known) and its curve.
    const std::vector<JobView> views = engine->ListJobs("");
    std::vector<PlannerJob> jobs;
    std::vector<uint32_t> planned;
    for (const JobView& view : views) {
      REQUIRE(view.curve.size() >= view.spec.max_replicas);
      const PlannerJob job = PlannerJobOf(
          view, [&](uint32_t n) { return view.curve[n - 1].samples_per_second; });
      jobs.push_back(job);
      REQUIRE(view.recommendation.has_value());
      CHECK(view.recommendation->replicas <= job.max_replicas);
      planned.push_back(view.recommendation->replicas);
    }
    ClusterPlannerOptions planner = options.planner;
    planner.horizon_seconds = absl::ToDoubleSeconds(options.policy.horizon);
    const PlanObjective engine_value = EvaluatePlan(jobs, planned, planner);
    const PlanObjective best = BruteForce(jobs, capacity, planner).value;
    INFO("instance " << instance << ", capacity " << capacity << ", jobs " << jobs.size());
    CHECK(CompareObjectives(engine_value, best, 1e-6) == 0);
  }
}

// ---- a job without data ---------------------------------------------------------

TEST_CASE("a job without data starts where the default prior says it pays") {
  ManualClock clock;
  SECTION("node size unknown: the prior is near-linear, so the whole idle cluster") {
    auto engine = MustCreate(EngineOptions{}, &clock);
    MustSetCapacity(*engine, 8);
    MustRegister(*engine, Spec("ns/new", 1, 8));
    const Recommendation rec = MustRecommendation(*engine, "ns/new");
    CHECK(rec.replicas == 8);
    CHECK_THAT(rec.reason, Contains("default prior"));
  }
  SECTION("4-GPU nodes and 6 GPUs: one full node, not a second node's worth of 2") {
    // The default prior's node term: 6 replicas on two nodes are slower
    // than 4 on one, as in the median of the Pollux traces.
    EngineOptions options;
    options.model.gpus_per_node = 4;
    auto engine = MustCreate(options, &clock);
    MustSetCapacity(*engine, 6);
    MustRegister(*engine, Spec("ns/new", 1, 6));
    CHECK(MustRecommendation(*engine, "ns/new").replicas == 4);
  }
  SECTION("jobs that compete share all the GPUs by the default prior") {
    // Not both at min_replicas with 6 GPUs idle: the default prior says
    // what the GPUs are worth. (Its synchronisation cost starts at 2
    // replicas, so 7 + 1 pays it once where 4 + 4 pays it twice.)
    auto engine = MustCreate(EngineOptions{}, &clock);
    MustSetCapacity(*engine, 8);
    MustRegister(*engine, Spec("ns/a", 1, 8));
    MustRegister(*engine, Spec("ns/b", 1, 8));
    const uint32_t a = MustRecommendation(*engine, "ns/a").replicas;
    const uint32_t b = MustRecommendation(*engine, "ns/b").replicas;
    CHECK(a >= 1);
    CHECK(b >= 1);
    CHECK(a + b == 8);
  }
  SECTION("capacity unknown: no GPU is known to be free, so min_replicas") {
    auto engine = MustCreate(EngineOptions{}, &clock);
    MustRegister(*engine, Spec("ns/new", 2, 8));
    const Recommendation rec = MustRecommendation(*engine, "ns/new");
    CHECK(rec.replicas == 2);
    CHECK_THAT(rec.reason, Contains("capacity is unknown"));
  }
}

TEST_CASE("a running job steps beyond 2x its measured size when its curve says it pays") {
  ManualClock clock;
  auto engine = MustCreate(EngineOptions{}, &clock);
  MustRegister(*engine, Spec("ns/job", 1, 16));
  const Recommendation first = MustRecommendation(*engine, "ns/job");
  REQUIRE(first.replicas == 1);  // capacity unknown: min_replicas
  REQUIRE(engine->ReportApplied("ns/job", 1, false, first.generation).ok());
  Measure(*engine, "ns/job", 1, 0.2);
  engine->Replan();
  // Still unknown: 2x the measured size at most.
  Recommendation rec = MustRecommendation(*engine, "ns/job");
  CHECK(rec.replicas == 2);
  CHECK_THAT(rec.reason, Contains("2x the largest measured size (1)"));
  // With 16 GPUs known the planner weighs the restart (5 s over the 600 s
  // horizon) against the gain the fitted curve predicts, all the way up.
  MustSetCapacity(*engine, 16);
  rec = MustRecommendation(*engine, "ns/job");
  CHECK(rec.replicas == 16);
}

// ---- measured data override a prior ----------------------------------------------

TEST_CASE("measurements that contradict a prior move the GPUs to the job that scales") {
  ManualClock clock;
  // The fair objective splits equal linear jobs evenly (jct is indifferent
  // between splits of two equal linear jobs), which makes the start exact.
  EngineOptions options;
  options.planner.objective = PlanObjectiveKind::kFair;
  auto engine = MustCreate(options, &clock);
  MustSetCapacity(*engine, 8);
  JobSpec claims = Spec("ns/claims-linear", 1, 8);
  JobSpec truly = Spec("ns/truly-linear", 1, 8);
  claims.prior = truly.prior = LinearPrior({1, 2, 4, 8});
  MustRegister(*engine, claims);
  MustRegister(*engine, truly);
  // Same priors: the fair split.
  Recommendation a = MustRecommendation(*engine, "ns/claims-linear");
  Recommendation b = MustRecommendation(*engine, "ns/truly-linear");
  REQUIRE(a.replicas == 4);
  REQUIRE(b.replicas == 4);
  REQUIRE(engine->ReportApplied(a.job_id, 4, false, a.generation).ok());
  REQUIRE(engine->ReportApplied(b.job_id, 4, false, b.generation).ok());

  // At 4 replicas the first job does what its prior says 1 replica does
  // (100 samples/s, batch 32 per pod: 1.28 s steps); the second matches
  // its prior (400 samples/s: 0.32 s).
  Measure(*engine, "ns/claims-linear", 4, 1.28);
  Measure(*engine, "ns/truly-linear", 4, 0.32);
  clock.Advance(absl::Seconds(61));
  engine->Replan();

  absl::StatusOr<JobView> view = engine->GetJob("ns/claims-linear");
  REQUIRE(view.ok());
  // The measurement replaces the prior at its size...
  REQUIRE(view->curve.size() >= 4);
  CHECK(view->curve[3].observed);
  CHECK(view->curve[3].samples_per_second == Approx(100).epsilon(0.05));
  // ...and the prior's 800 at 8 can no longer be reached: a step time never
  // falls as replicas are added, so 8 replicas give at most twice the 4's.
  CHECK(view->curve[7].samples_per_second <= 2 * view->curve[3].samples_per_second * 1.01);
  a = MustRecommendation(*engine, "ns/claims-linear");
  b = MustRecommendation(*engine, "ns/truly-linear");
  CHECK(b.replicas > a.replicas);
  CHECK(a.replicas + b.replicas <= 8);
}

// ---- aged-out measurements -----------------------------------------------------------

TEST_CASE("a size measured before the window still counts: it is not explored again") {
  JobSpec spec = Spec("ns/job", 1, 32);
  spec.policy = "planner";
  JobStatus status;
  status.current_replicas = 2;
  PolicyMemory memory;
  const ThroughputModel model;
  // Running at 2 with fresh samples; 8 was measured an hour ago (40
  // samples), and only 1 sample of it is inside the window now.
  Observation two{.replicas = 2, .step_seconds = 0.3, .sample_count = 20, .mean_batch = 32};
  Observation eight{.replicas = 8,
                    .step_seconds = 0.4,
                    .sample_count = 1,
                    .mean_batch = 32,
                    .age_seconds = 3600,
                    .lifetime_count = 40};
  const std::vector<Observation> observed = {two, eight};
  PolicyInput in;
  in.spec = &spec;
  in.status = &status;
  in.model = &model;
  in.observed = observed;
  in.memory = &memory;
  in.now = absl::FromUnixSeconds(1'700'000'000);
  const PolicyDecision d = FindPolicy("planner")->Decide(in);
  CHECK(d.replicas == 16);  // 2x 8, not 2x 2
  CHECK_THAT(d.reason, Contains("largest measured size (8)"));
}

TEST_CASE("the engine keeps a size whose samples left the window as measured") {
  ManualClock clock;
  EngineOptions options;
  auto engine = MustCreate(options, &clock);
  // Capacity unknown, so exploration goes by 2x the largest measured size.
  // The cluster runs the job at 8 (within max_replicas; a controller may).
  MustRegister(*engine, Spec("ns/job", 1, 64));
  const Recommendation first = MustRecommendation(*engine, "ns/job");
  REQUIRE(engine->ReportApplied("ns/job", 8, false, first.generation).ok());
  Measure(*engine, "ns/job", 8, 0.2, 20);
  // Long past the window the job runs at 4 with fresh samples, and one
  // late sample at 8 lands in the new window: 8 is still measured (20
  // samples in its lifetime), so the job may go to 16, not just back to 8.
  clock.Advance(options.store.window * 3);
  REQUIRE(engine->ReportApplied("ns/job", 4, false, first.generation).ok());
  Measure(*engine, "ns/job", 4, 0.2, 20);
  Measure(*engine, "ns/job", 8, 0.2, 1);
  clock.Advance(options.policy.cooldown + absl::Seconds(1));
  engine->Replan();
  const Recommendation rec = MustRecommendation(*engine, "ns/job");
  CHECK(rec.replicas == 16);
}

}  // namespace
}  // namespace rescale
