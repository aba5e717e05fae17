// Tests of rescale::DecisionEngine driven by a ManualClock: job registration
// (validation, duplicates, unknown policies, the job limit), the
// recommendation published at once (generation, action, decided_at),
// ReportApplied (HOLD without a new generation, rejected generations and
// replica counts), capacity changes that make lower-priority jobs wait or be
// preempted, the cluster view, deregistration (NOT_FOUND, DELETED to
// watchers), samples flowing into the job's curve, namespace filtering,
// UpdateJob, options checked by Create, and the replan timer, which waits on
// the injected clock: the [concurrency] cases move it by advancing the
// ManualClock and run under ThreadSanitizer in CI.
#include "rescale/decision_engine.h"

#include <catch2/catch.hpp>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "rescale/clock.h"
#include "tests/engine_helpers.h"

namespace rescale {
namespace {

using testing::MustCreate;
using testing::MustIngest;
using testing::MustRecommendation;
using testing::MustRegister;
using testing::MustSetCapacity;

// Most tests here are about the engine's plumbing, not a policy: they use
// the simplest policy, static-min, as the default.
EngineOptions StaticMinOptions() {
  EngineOptions options;
  options.default_policy = "static-min";
  return options;
}

// Blocks until the watcher has an event (its ready callback fired), then
// returns every queued event. No timeouts: the caller caused the event.
class WatchReader {
 public:
  explicit WatchReader(std::shared_ptr<Subscription> sub) : sub_(std::move(sub)) {
    sub_->SetReadyCallback([this] {
      std::lock_guard<std::mutex> lock(mu_);
      ++ready_;
      cv_.notify_all();
    });
  }
  std::vector<RecommendationEvent> Drain() {
    std::vector<RecommendationEvent> events;
    RecommendationEvent event;
    while (sub_->Next(&event) == Subscription::Poll::kEvent) {
      // Plan boundaries are the board's (recommendation_board_test.cc).
      if (event.type != RecommendationEvent::Type::kPlanEnd) events.push_back(event);
    }
    return events;
  }
  std::vector<RecommendationEvent> WaitForEvents() {
    while (true) {
      std::vector<RecommendationEvent> events = Drain();
      if (!events.empty()) return events;
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return ready_ > 0; });
      ready_ = 0;
    }
  }

 private:
  std::shared_ptr<Subscription> sub_;
  std::mutex mu_;
  std::condition_variable cv_;
  int ready_ = 0;
};

std::string testing_join(const std::vector<uint32_t>& v) {
  std::string out;
  for (uint32_t x : v) out += std::to_string(x) + " ";
  return out;
}

using Catch::Matchers::Contains;

JobSpec Spec(const std::string& id, uint32_t min = 2, uint32_t max = 8, int32_t priority = 0) {
  JobSpec spec;
  spec.job_id = id;
  spec.min_replicas = min;
  spec.max_replicas = max;
  spec.priority = priority;
  spec.local_batch_size = 32;
  return spec;
}

TEST_CASE("engine registers a job and publishes generation 1 with SCALE_UP at the clock's time") {
  ManualClock clock;
  auto engine_owner = MustCreate(StaticMinOptions(), &clock);
  DecisionEngine& engine = *engine_owner;
  JobView view = MustRegister(engine, Spec("team-a/resnet", 2, 8));
  CHECK(view.spec.job_id == "team-a/resnet");
  CHECK(view.status.registered_at == clock.Now());
  CHECK(view.status.current_replicas == 0);
  CHECK(view.curve.empty());
  REQUIRE(view.recommendation.has_value());
  const Recommendation& rec = *view.recommendation;
  CHECK(rec.job_id == "team-a/resnet");
  CHECK(rec.generation == 1);
  CHECK(rec.replicas == 2);
  CHECK_FALSE(rec.suspend);
  CHECK(rec.action == Action::kScaleUp);
  CHECK(rec.decided_at == clock.Now());
  CHECK(rec.policy == "static-min");  // the default policy
  CHECK(rec.gpus == 2);
  CHECK(rec.queue_position == 0);
  CHECK(rec.binding_constraint == BindingConstraint::kMinReplicas);

  Recommendation same = MustRecommendation(engine, "team-a/resnet");
  CHECK(same.generation == 1);
  CHECK(same.replicas == 2);
}

TEST_CASE("engine rejects an invalid spec with INVALID_ARGUMENT naming the field") {
  ManualClock clock;
  auto engine_owner = MustCreate(StaticMinOptions(), &clock);
  DecisionEngine& engine = *engine_owner;
  JobSpec spec = Spec("team-a/resnet", 5, 2);
  absl::StatusOr<JobView> view = engine.RegisterJob(spec);
  REQUIRE(view.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(view.status().message()), Contains("spec.min_replicas (5)"));

  view = engine.RegisterJob(Spec("NoSlash"));
  REQUIRE(view.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(view.status().message()), Contains("spec.job_id"));
  CHECK(engine.ListJobs().empty());
  CHECK(engine.ListRecommendations().empty());
}

TEST_CASE("engine rejects registering a known job with ALREADY_EXISTS") {
  ManualClock clock;
  auto engine_owner = MustCreate(StaticMinOptions(), &clock);
  DecisionEngine& engine = *engine_owner;
  MustRegister(engine, Spec("ns/a"));
  absl::StatusOr<JobView> again = engine.RegisterJob(Spec("ns/a", 1, 4));
  REQUIRE(again.status().code() == absl::StatusCode::kAlreadyExists);
  CHECK_THAT(std::string(again.status().message()), Contains("ns/a"));
  // The original spec is untouched.
  absl::StatusOr<JobView> view = engine.GetJob("ns/a");
  REQUIRE(view.ok());
  CHECK(view->spec.min_replicas == 2);
}

TEST_CASE("engine rejects an unknown policy listing the known ones") {
  ManualClock clock;
  auto engine_owner = MustCreate(StaticMinOptions(), &clock);
  DecisionEngine& engine = *engine_owner;
  JobSpec spec = Spec("ns/a");
  spec.policy = "magic";
  absl::StatusOr<JobView> view = engine.RegisterJob(spec);
  REQUIRE(view.status().code() == absl::StatusCode::kInvalidArgument);
  const std::string message(view.status().message());
  CHECK_THAT(message, Contains("spec.policy \"magic\""));
  CHECK_THAT(message, Contains("static-min"));
  CHECK_THAT(message, Contains("static-max"));
  CHECK(DecisionEngine::KnownPolicies() == std::vector<std::string>{"planner", "static-min",
                                                                    "static-max", "kubedl", "hpa",
                                                                    "efficiency"});
}

TEST_CASE("engine refuses jobs beyond max_jobs with RESOURCE_EXHAUSTED") {
  ManualClock clock;
  EngineOptions options;
  options.max_jobs = 2;
  auto engine_owner = MustCreate(options, &clock);
  DecisionEngine& engine = *engine_owner;
  MustRegister(engine, Spec("ns/a"));
  MustRegister(engine, Spec("ns/b"));
  absl::StatusOr<JobView> third = engine.RegisterJob(Spec("ns/c"));
  REQUIRE(third.status().code() == absl::StatusCode::kResourceExhausted);
  CHECK_THAT(std::string(third.status().message()), Contains("ns/c"));
  // Freeing a slot lets the next one in.
  REQUIRE(engine.DeregisterJob("ns/a").ok());
  CHECK(engine.RegisterJob(Spec("ns/c")).ok());
}

TEST_CASE(
    "engine turns the action to HOLD once the recommendation is applied, keeping the generation") {
  ManualClock clock;
  auto engine_owner = MustCreate(StaticMinOptions(), &clock);
  DecisionEngine& engine = *engine_owner;
  MustRegister(engine, Spec("ns/a", 3, 8));
  clock.Advance(absl::Seconds(30));

  absl::StatusOr<JobStatus> status = engine.ReportApplied("ns/a", 3, false, 1);
  REQUIRE(status.ok());
  CHECK(status->current_replicas == 3);
  CHECK_FALSE(status->suspended);
  CHECK(status->last_applied_generation == 1);
  CHECK(status->last_applied_at == clock.Now());

  Recommendation rec = MustRecommendation(engine, "ns/a");
  CHECK(rec.action == Action::kHold);
  CHECK(rec.generation == 1);
  CHECK(rec.replicas == 3);
  CHECK(rec.decided_at == clock.Now());

  // An out-of-band report (generation 0) keeps the last applied generation.
  status = engine.ReportApplied("ns/a", 3, false, 0);
  REQUIRE(status.ok());
  CHECK(status->last_applied_generation == 1);
  absl::StatusOr<JobView> view = engine.GetJob("ns/a");
  REQUIRE(view.ok());
  CHECK(view->status.last_applied_generation == 1);
  CHECK(view->status.current_replicas == 3);
}

TEST_CASE("engine asks to scale down when the cluster runs more than recommended") {
  ManualClock clock;
  auto engine_owner = MustCreate(StaticMinOptions(), &clock);
  DecisionEngine& engine = *engine_owner;
  MustRegister(engine, Spec("ns/a", 2, 8));
  REQUIRE(engine.ReportApplied("ns/a", 5, false, 1).ok());
  Recommendation rec = MustRecommendation(engine, "ns/a");
  CHECK(rec.replicas == 2);
  CHECK(rec.action == Action::kScaleDown);
  CHECK(rec.generation == 1);
}

TEST_CASE("engine rejects a generation newer than the latest recommendation") {
  ManualClock clock;
  auto engine_owner = MustCreate(StaticMinOptions(), &clock);
  DecisionEngine& engine = *engine_owner;
  MustRegister(engine, Spec("ns/a"));
  absl::StatusOr<JobStatus> status = engine.ReportApplied("ns/a", 2, false, 2);
  REQUIRE(status.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(status.status().message()), Contains("generation 2"));
  CHECK_THAT(std::string(status.status().message()), Contains("generation 1"));
  absl::StatusOr<JobView> view = engine.GetJob("ns/a");
  REQUIRE(view.ok());
  CHECK(view->status.current_replicas == 0);
  CHECK(view->status.last_applied_generation == 0);
}

TEST_CASE("engine rejects applied replicas above max_replicas") {
  ManualClock clock;
  auto engine_owner = MustCreate(StaticMinOptions(), &clock);
  DecisionEngine& engine = *engine_owner;
  MustRegister(engine, Spec("ns/a", 2, 8));
  absl::StatusOr<JobStatus> status = engine.ReportApplied("ns/a", 9, false, 1);
  REQUIRE(status.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(status.status().message()), Contains("replicas 9"));
  CHECK_THAT(std::string(status.status().message()), Contains("max_replicas 8"));
}

TEST_CASE(
    "engine reports NOT_FOUND or INVALID_ARGUMENT for applied state of unknown or malformed jobs") {
  ManualClock clock;
  auto engine_owner = MustCreate(StaticMinOptions(), &clock);
  DecisionEngine& engine = *engine_owner;
  CHECK(engine.ReportApplied("ns/none", 1, false, 0).status().code() ==
        absl::StatusCode::kNotFound);
  CHECK(engine.ReportApplied("bad", 1, false, 0).status().code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(engine.GetJob("bad").status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("engine makes the lower-priority job wait when capacity falls below demand") {
  ManualClock clock;
  auto engine_owner = MustCreate(StaticMinOptions(), &clock);
  DecisionEngine& engine = *engine_owner;
  MustRegister(engine, Spec("ns/high", 4, 4, /*priority=*/10));
  MustRegister(engine, Spec("ns/low", 4, 4, /*priority=*/1));
  REQUIRE(MustRecommendation(engine, "ns/low").replicas == 4);

  clock.Advance(absl::Minutes(1));
  ClusterView cluster = MustSetCapacity(engine, 6);
  REQUIRE(cluster.total_gpus.has_value());
  CHECK(*cluster.total_gpus == 6);
  CHECK(cluster.allocated_gpus == 4);
  CHECK(cluster.waiting_jobs == 1);
  CHECK(cluster.planned_at == clock.Now());
  REQUIRE(cluster.allocations.size() == 1);
  CHECK(cluster.allocations[0].job_id == "ns/high");
  CHECK(cluster.allocations[0].replicas == 4);
  CHECK(cluster.allocations[0].gpus == 4);
  CHECK(cluster.allocations[0].priority == 10);

  Recommendation low = MustRecommendation(engine, "ns/low");
  CHECK(low.replicas == 0);
  CHECK(low.suspend);
  CHECK(low.queue_position == 1);
  CHECK(low.gpus == 0);
  CHECK(low.generation == 2);
  CHECK(low.action == Action::kHold);  // it never ran
  CHECK(low.binding_constraint == BindingConstraint::kCapacity);
  CHECK(low.reason == "needs 4 GPUs; 2 free; 4 held by jobs of higher or equal priority");

  Recommendation high = MustRecommendation(engine, "ns/high");
  CHECK(high.replicas == 4);
  CHECK(high.generation == 1);

  ClusterView again = engine.GetCluster();
  CHECK(again.allocated_gpus == 4);
  CHECK(again.waiting_jobs == 1);
  CHECK(again.allocations.size() == 1);
}

TEST_CASE("engine suspends a running lower-priority job preempted by a higher-priority one") {
  ManualClock clock;
  EngineOptions options;
  options.capacity_gpus = 4;
  auto engine_owner = MustCreate(options, &clock);
  DecisionEngine& engine = *engine_owner;
  MustRegister(engine, Spec("ns/low", 4, 4, /*priority=*/1));
  REQUIRE(engine.ReportApplied("ns/low", 4, false, 1).ok());
  MustRegister(engine, Spec("ns/high", 4, 4, /*priority=*/10));

  Recommendation low = MustRecommendation(engine, "ns/low");
  CHECK(low.replicas == 0);
  CHECK(low.suspend);
  CHECK(low.action == Action::kSuspend);
  CHECK(low.binding_constraint == BindingConstraint::kPreempted);
  CHECK(low.generation == 2);
  Recommendation high = MustRecommendation(engine, "ns/high");
  CHECK(high.replicas == 4);
  CHECK(high.action == Action::kScaleUp);

  // Once suspended, more capacity brings it back with RESUME.
  REQUIRE(engine.ReportApplied("ns/low", 4, true, 2).ok());
  MustSetCapacity(engine, 8);
  low = MustRecommendation(engine, "ns/low");
  CHECK(low.replicas == 4);
  CHECK(low.action == Action::kResume);
  CHECK(low.generation == 3);
}

TEST_CASE("engine reports an unknown capacity as unset in the cluster view") {
  ManualClock clock;
  auto engine_owner = MustCreate(StaticMinOptions(), &clock);
  DecisionEngine& engine = *engine_owner;
  MustRegister(engine, Spec("ns/a", 3, 8));
  ClusterView cluster = engine.GetCluster();
  CHECK_FALSE(cluster.total_gpus.has_value());
  CHECK(cluster.allocated_gpus == 3);
  CHECK(cluster.waiting_jobs == 0);
}

TEST_CASE("engine forgets a deregistered job and tells watchers DELETED") {
  ManualClock clock;
  auto engine_owner = MustCreate(StaticMinOptions(), &clock);
  DecisionEngine& engine = *engine_owner;
  MustRegister(engine, Spec("ns/a"));
  absl::StatusOr<std::shared_ptr<Subscription>> sub = engine.Watch();
  REQUIRE(sub.ok());
  RecommendationEvent event;
  while ((*sub)->Next(&event) == Subscription::Poll::kEvent) {
  }

  REQUIRE(engine.DeregisterJob("ns/a").ok());
  REQUIRE((*sub)->Next(&event) == Subscription::Poll::kEvent);
  CHECK(event.type == RecommendationEvent::Type::kDeleted);
  CHECK(event.recommendation.job_id == "ns/a");

  CHECK(engine.GetJob("ns/a").status().code() == absl::StatusCode::kNotFound);
  CHECK(engine.GetRecommendation("ns/a").status().code() == absl::StatusCode::kNotFound);
  CHECK(engine.DeregisterJob("ns/a").code() == absl::StatusCode::kNotFound);
  CHECK(engine.ReportApplied("ns/a", 1, false, 0).status().code() == absl::StatusCode::kNotFound);
  CHECK(engine.ListJobs().empty());
  CHECK(engine.GetCluster().allocations.empty());

  // Samples for it are now rejected.
  StepSample s;
  s.job_id = "ns/a";
  s.pod = "p";
  s.world_size = 1;
  s.step_seconds = 0.5;
  std::vector<StepSample> batch = {s};
  CHECK(engine.Ingest(batch).rejected == 1);

  // Registering it again continues its generations.
  JobView view = MustRegister(engine, Spec("ns/a"));
  REQUIRE(view.recommendation.has_value());
  CHECK(view.recommendation->generation == 2);
}

// The watch reactor starts a gRPC write from the ready callback: it must run
// with no lock of the engine's (or the board's) held. The callback here reads
// the engine, which would deadlock if it did.
TEST_CASE("watchers' ready callbacks run after the engine's lock is released, for every change") {
  ManualClock clock;
  auto engine_owner = MustCreate(StaticMinOptions(), &clock);
  DecisionEngine& engine = *engine_owner;
  absl::StatusOr<std::shared_ptr<Subscription>> sub = engine.Watch();
  REQUIRE(sub.ok());
  std::vector<size_t> jobs_seen;
  RecommendationEvent event;
  auto drain_and_arm = [&] {
    while ((*sub)->Next(&event) == Subscription::Poll::kEvent) {
    }
  };
  (*sub)->SetReadyCallback([&] {
    jobs_seen.push_back(engine.GetCluster().allocations.size() + engine.ListJobs().size());
  });
  drain_and_arm();
  MustRegister(engine, Spec("ns/a"));  // inline plan: ADDED
  REQUIRE(jobs_seen.size() == 1);
  CHECK(jobs_seen.back() == 2);
  drain_and_arm();
  REQUIRE(engine.ReportApplied("ns/a", 2, false, 1).ok());
  JobSpec bigger = Spec("ns/a", 3, 8);
  REQUIRE(engine.UpdateJob(bigger).ok());  // MODIFIED: 3 replicas
  REQUIRE(jobs_seen.size() == 2);
  drain_and_arm();
  MustSetCapacity(engine, 2);  // too few for its gang of 3: suspended
  REQUIRE(jobs_seen.size() == 3);
  CHECK(jobs_seen.back() == 1);
  drain_and_arm();
  REQUIRE(engine.DeregisterJob("ns/a").ok());  // DELETED
  REQUIRE(jobs_seen.size() == 4);
  CHECK(jobs_seen.back() == 0);
}

TEST_CASE("engine feeds ingested samples into the job's curve and samples_accepted") {
  ManualClock clock;
  auto engine_owner = MustCreate(StaticMinOptions(), &clock);
  DecisionEngine& engine = *engine_owner;
  MustRegister(engine, Spec("ns/a", 2, 8));  // local_batch_size 32

  std::vector<StepSample> batch;
  for (double step : {0.4, 0.6, 0.4, 0.6, 0.4, 0.6}) {
    StepSample s;
    s.job_id = "ns/a";
    s.pod = "a-worker-0";
    s.world_size = 4;
    s.step_seconds = step;
    batch.push_back(s);
  }
  StepSample stale = batch[0];
  stale.timestamp_unix_nanos = absl::ToUnixNanos(clock.Now() - absl::Hours(1));
  batch.push_back(stale);

  IngestResult result = engine.Ingest(batch);
  CHECK(result.accepted == 6);
  CHECK(result.rejected == 1);
  REQUIRE(result.rejections.size() == 1);
  CHECK(result.rejections[0].index == 6);

  absl::StatusOr<JobView> view = engine.GetJob("ns/a");
  REQUIRE(view.ok());
  CHECK(view->status.samples_accepted == 6);
  // The curve is the model's prediction for every size up to max_replicas,
  // with the measured size marked.
  REQUIRE(view->curve.size() == 8);
  const CurvePoint& at4 = view->curve[3];
  CHECK(at4.replicas == 4);
  CHECK(at4.observed);
  CHECK(at4.sample_count == 6);
  CHECK(at4.observed_samples_per_second == Approx(4 * 32 / 0.5));
  CHECK(at4.samples_per_second == Approx(256).epsilon(0.02));
  CHECK_FALSE(view->curve[1].observed);
  CHECK_FALSE(view->curve_model.empty());

  // After a replan the running job's current throughput comes from the curve;
  // static-min predicts at 2 workers, near-linear from one measured size.
  REQUIRE(engine.ReportApplied("ns/a", 4, false, 1).ok());
  Recommendation rec = MustRecommendation(engine, "ns/a");
  CHECK(rec.current_samples_per_second == Approx(256).epsilon(0.02));
  CHECK(rec.predicted_samples_per_second > 120);
  CHECK(rec.predicted_samples_per_second < 140);
}

// Plans keep each job's fitted curve until its samples, its window or its
// spec move on (MetricsStore::StatsIfChanged); none of these may go unseen.
TEST_CASE("engine refits a job's curve when its samples or its spec change, and only then") {
  ManualClock clock;
  auto engine_owner = MustCreate(StaticMinOptions(), &clock);
  DecisionEngine& engine = *engine_owner;
  JobSpec spec = Spec("ns/a", 2, 8);
  spec.prior = {{.replicas = 2, .samples_per_second = 100}};
  MustRegister(engine, spec);
  auto predicted_at_2 = [&] {
    engine.Replan();
    return MustRecommendation(engine, "ns/a").predicted_samples_per_second;
  };
  CHECK(predicted_at_2() == Approx(100).epsilon(0.01));
  clock.Advance(absl::Seconds(1));
  CHECK(predicted_at_2() == Approx(100).epsilon(0.01));  // from the kept fit

  // A new prior: refitted.
  spec.prior = {{.replicas = 2, .samples_per_second = 50}};
  REQUIRE(engine.UpdateJob(spec).ok());
  CHECK(predicted_at_2() == Approx(50).epsilon(0.01));

  // Samples at the size: the measurement wins over the prior; more of them
  // at another step time move it again.
  const std::string pods[] = {"a-worker-0", "a-worker-1"};  // samples view their pod names
  auto measure = [&](double step_seconds) {
    std::vector<StepSample> batch;
    for (int k = 0; k < 20; ++k) {
      StepSample s;
      s.job_id = "ns/a";
      s.pod = pods[k % 2];
      s.world_size = 2;
      s.step_seconds = step_seconds;
      batch.push_back(s);
    }
    REQUIRE(engine.Ingest(batch).accepted == 20);
  };
  measure(0.5);  // 2 x 32 / 0.5 = 128 samples/s
  CHECK(predicted_at_2() == Approx(128).epsilon(0.05));
  CHECK(engine.GetJob("ns/a")->curve[1].samples_per_second == Approx(128).epsilon(0.05));
  measure(0.25);  // the mean of both: 0.375 s, 171 samples/s
  CHECK(predicted_at_2() == Approx(2 * 32 / 0.375).epsilon(0.05));
  CHECK(engine.GetJob("ns/a")->curve[1].samples_per_second == Approx(2 * 32 / 0.375).epsilon(0.05));
}

TEST_CASE("engine lists jobs ordered by id and filtered by namespace") {
  ManualClock clock;
  auto engine_owner = MustCreate(StaticMinOptions(), &clock);
  DecisionEngine& engine = *engine_owner;
  MustRegister(engine, Spec("team-b/x"));
  MustRegister(engine, Spec("team-a/z"));
  MustRegister(engine, Spec("team-a/y"));
  std::vector<JobView> all = engine.ListJobs();
  REQUIRE(all.size() == 3);
  CHECK(all[0].spec.job_id == "team-a/y");
  CHECK(all[1].spec.job_id == "team-a/z");
  CHECK(all[2].spec.job_id == "team-b/x");
  std::vector<JobView> team_a = engine.ListJobs("team-a");
  REQUIRE(team_a.size() == 2);
  CHECK(team_a[0].spec.job_id == "team-a/y");
  CHECK(team_a[1].spec.job_id == "team-a/z");
  CHECK(engine.ListJobs("team-c").empty());
  std::vector<Recommendation> recs = engine.ListRecommendations("team-b");
  REQUIRE(recs.size() == 1);
  CHECK(recs[0].job_id == "team-b/x");
}

TEST_CASE("engine UpdateJob of an unknown job is NOT_FOUND") {
  ManualClock clock;
  auto engine_owner = MustCreate(StaticMinOptions(), &clock);
  DecisionEngine& engine = *engine_owner;
  absl::StatusOr<JobView> view = engine.UpdateJob(Spec("ns/none"));
  REQUIRE(view.status().code() == absl::StatusCode::kNotFound);
  CHECK_THAT(std::string(view.status().message()), Contains("ns/none"));
  CHECK(engine.ListJobs().empty());
}

TEST_CASE("engine UpdateJob replans with the new spec and bumps the generation") {
  ManualClock clock;
  auto engine_owner = MustCreate(StaticMinOptions(), &clock);
  DecisionEngine& engine = *engine_owner;
  MustRegister(engine, Spec("ns/a", 2, 8));
  JobSpec spec = Spec("ns/a", 2, 8);
  spec.policy = "static-max";
  absl::StatusOr<JobView> view = engine.UpdateJob(spec);
  REQUIRE(view.ok());
  CHECK(view->spec.policy == "static-max");
  REQUIRE(view->recommendation.has_value());
  CHECK(view->recommendation->replicas == 8);
  CHECK(view->recommendation->generation == 2);
  CHECK(view->recommendation->policy == "static-max");
  // Registration time is kept.
  CHECK(view->status.registered_at == clock.Now());

  spec.min_replicas = 9;  // invalid: min > max
  CHECK(engine.UpdateJob(spec).status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("engine replan refreshes decided_at without a new generation") {
  ManualClock clock;
  auto engine_owner = MustCreate(StaticMinOptions(), &clock);
  DecisionEngine& engine = *engine_owner;
  MustRegister(engine, Spec("ns/a"));
  clock.Advance(absl::Minutes(5));
  engine.Replan();
  Recommendation rec = MustRecommendation(engine, "ns/a");
  CHECK(rec.decided_at == clock.Now());
  CHECK(rec.generation == 1);
  CHECK(engine.GetCluster().planned_at == clock.Now());
}

TEST_CASE("engine timer starts and stops, and restarts", "[concurrency]") {
  ManualClock clock;
  auto engine_owner = MustCreate(StaticMinOptions(), &clock);
  DecisionEngine& engine = *engine_owner;
  MustRegister(engine, Spec("ns/a"));
  engine.StartTimer();
  CHECK(clock.listener_count() == 1);
  engine.StopTimer();
  CHECK(clock.listener_count() == 0);
  // Restarting and stopping again works, and so does a second StopTimer.
  engine.StartTimer();
  engine.StopTimer();
  engine.StopTimer();
  CHECK(clock.listener_count() == 0);
  CHECK(MustRecommendation(engine, "ns/a").generation == 1);
}

TEST_CASE("engine destructor stops a running timer and lets go of the clock", "[concurrency]") {
  ManualClock clock;
  {
    auto engine = MustCreate(StaticMinOptions(), &clock);
    engine->StartTimer();
    CHECK(clock.listener_count() == 1);
  }
  // The timer thread was joined and unregistered: moving the clock now
  // calls nothing of the destroyed engine.
  CHECK(clock.listener_count() == 0);
  clock.Advance(absl::Hours(2));
}

TEST_CASE("engine timer replans when the injected clock passes the plan interval",
          "[concurrency]") {
  ManualClock clock;
  EngineOptions options;  // the planner: samples widen what it may choose
  options.plan_interval = absl::Seconds(30);
  auto engine_owner = MustCreate(options, &clock);
  DecisionEngine& engine = *engine_owner;
  MustRegister(engine, Spec("ns/a", 1, 8));
  REQUIRE(engine.ReportApplied("ns/a", 1, false, 1).ok());
  MustIngest(engine, "ns/a", {"a-0"}, 1, 0.2, 20);
  WatchReader reader(engine.Watch().value());
  reader.Drain();  // ADDED, SYNCED
  engine.StartTimer();
  // Ingesting does not plan: the job still may not grow.
  CHECK(MustRecommendation(engine, "ns/a").replicas == 1);
  clock.Advance(absl::Seconds(29));
  CHECK(MustRecommendation(engine, "ns/a").replicas == 1);
  clock.Advance(absl::Seconds(1));  // the tick: the timer plans the samples in
  std::vector<RecommendationEvent> events = reader.WaitForEvents();
  REQUIRE(events.size() == 1);
  CHECK(events[0].recommendation.replicas == 2);  // 2x the measured size
  engine.StopTimer();
}

// An engine whose ReportApplied waits 300 ms (on `clock`) for the rest of a
// burst, with ns/a registered.
std::unique_ptr<DecisionEngine> DebouncedEngine(ManualClock& clock) {
  EngineOptions options = StaticMinOptions();
  options.applied_debounce = absl::Milliseconds(300);
  auto engine = MustCreate(options, &clock);
  MustRegister(*engine, Spec("ns/a", 2, 8));
  return engine;
}

TEST_CASE("StopTimer plans the applied reports still waiting for their debounce", "[concurrency]") {
  ManualClock clock;
  auto engine_owner = DebouncedEngine(clock);
  DecisionEngine& engine = *engine_owner;
  engine.StartTimer();
  REQUIRE(engine.ReportApplied("ns/a", 2, false, 1).ok());
  CHECK(MustRecommendation(engine, "ns/a").action == Action::kScaleUp);  // deferred
  engine.StopTimer();
  CHECK(MustRecommendation(engine, "ns/a").action == Action::kHold);
  // Without the timer, reports replan inline again.
  REQUIRE(engine.ReportApplied("ns/a", 3, false, 1).ok());
  CHECK(MustRecommendation(engine, "ns/a").action == Action::kScaleDown);
}

TEST_CASE("Create names the option out of range and its limit") {
  struct Case {
    std::function<void(EngineOptions&)> set;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {[](EngineOptions& o) { o.default_policy = "magic"; }, "default_policy \"magic\""},
      {[](EngineOptions& o) { o.max_jobs = 0; }, "max_jobs must be at least 1, got 0"},
      {[](EngineOptions& o) { o.max_watchers = -1; }, "max_watchers must be at least 1"},
      {[](EngineOptions& o) { o.store.max_pods_per_job = 0; }, "max_pods_per_job"},
      {[](EngineOptions& o) { o.store.max_sizes_per_job = 0; }, "max_sizes_per_job"},
      {[](EngineOptions& o) { o.plan_interval = absl::ZeroDuration(); },
       "plan_interval must be positive"},
      {[](EngineOptions& o) { o.applied_debounce = absl::Seconds(-1); },
       "applied_debounce must not be negative"},
      {[](EngineOptions& o) { o.store.window = absl::ZeroDuration(); }, "window must be positive"},
      {[](EngineOptions& o) { o.store.pod_ttl = absl::ZeroDuration(); },
       "pod_ttl must be positive"},
      {[](EngineOptions& o) { o.policy.horizon = absl::ZeroDuration(); },
       "horizon must be positive"},
      {[](EngineOptions& o) { o.policy.cooldown = absl::Seconds(-5); },
       "cooldown must not be negative"},
      {[](EngineOptions& o) {
         o.store.min_step_seconds = 10;
         o.store.max_step_seconds = 1;
       },
       "min_step_seconds must be positive and below max_step_seconds"},
  };
  for (const Case& c : cases) {
    EngineOptions options;
    c.set(options);
    absl::StatusOr<std::unique_ptr<DecisionEngine>> engine = DecisionEngine::Create(options);
    INFO(c.expected);
    CHECK(engine.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(engine.status().message()), Contains(c.expected));
  }
  CHECK(DecisionEngine::Create(EngineOptions{}).ok());
}

TEST_CASE("auto-registering several jobs from one batch plans once, for all of them") {
  ManualClock clock;
  EngineOptions options = StaticMinOptions();
  options.auto_register = true;
  auto engine_owner = MustCreate(options, &clock);
  DecisionEngine& engine = *engine_owner;
  const ClusterView before = engine.GetCluster();
  clock.Advance(absl::Seconds(1));
  std::vector<StepSample> batch(3);
  for (size_t i = 0; i < batch.size(); ++i) {
    batch[i].job_id = i == 0 ? "ns/x" : (i == 1 ? "ns/y" : "ns/z");
    batch[i].pod = "p-0";
    batch[i].world_size = 1;
    batch[i].step_seconds = 0.5;
    batch[i].batch_size = 8;
  }
  WatchReader reader(engine.Watch().value());
  reader.Drain();  // SYNCED
  REQUIRE(engine.Ingest(batch).accepted == 3);
  const ClusterView after = engine.GetCluster();
  CHECK(after.planned_at == clock.Now());
  CHECK(after.plans_run == before.plans_run + 1);  // not one per job, plus one
  std::vector<RecommendationEvent> events = reader.Drain();
  REQUIRE(events.size() == 3);
  for (const RecommendationEvent& event : events)
    CHECK(event.type == RecommendationEvent::Type::kAdded);
}

}  // namespace

TEST_CASE("engine with auto_register registers unknown jobs from their samples and keeps them") {
  ManualClock clock;
  EngineOptions options;
  options.auto_register = true;
  options.auto_register_max_replicas = 16;
  auto engine_owner = MustCreate(options, &clock);
  DecisionEngine& engine = *engine_owner;
  MustRegister(engine, Spec("ns/known"));
  const std::string pod = "w-0";
  std::vector<StepSample> batch(4);
  for (size_t i = 0; i < batch.size(); ++i) {
    batch[i].job_id = i < 2 ? "ns/new" : (i == 2 ? "ns/known" : "Bad/Id");
    batch[i].pod = pod;
    batch[i].world_size = i == 1 ? 20 : 2;
    batch[i].step_seconds = 0.5;
    batch[i].batch_size = 8;
  }
  IngestResult result = engine.Ingest(batch);
  CHECK(result.accepted == 3);
  CHECK(result.rejected == 1);
  REQUIRE(result.rejections.size() == 1);
  CHECK(result.rejections[0].index == 3);  // a malformed id is not registered
  absl::StatusOr<JobView> job = engine.GetJob("ns/new");
  REQUIRE(job.ok());
  CHECK(job->spec.min_replicas == 1);
  CHECK(job->spec.max_replicas == 20);  // the largest world size it reported
  CHECK(job->status.samples_accepted == 2);
  CHECK(engine.GetRecommendation("ns/new").ok());
}

TEST_CASE("engine without auto_register rejects samples of unknown jobs as not registered") {
  ManualClock clock;
  auto engine_owner = MustCreate(StaticMinOptions(), &clock);
  DecisionEngine& engine = *engine_owner;
  std::vector<StepSample> batch(1);
  batch[0].job_id = "ns/ghost";
  batch[0].pod = "w-0";
  batch[0].world_size = 1;
  batch[0].step_seconds = 0.5;
  batch[0].batch_size = 8;
  IngestResult result = engine.Ingest(batch);
  CHECK(result.accepted == 0);
  CHECK(result.rejected_unknown_job == 1);
  REQUIRE(result.rejections.size() == 1);
  CHECK_THAT(result.rejections[0].reason, Contains("not registered"));
  CHECK(engine.GetJob("ns/ghost").status().code() == absl::StatusCode::kNotFound);
}

// Drives the engine like a cluster would: apply each recommendation, report
// it, let the pods measure step times from a true law, let a cooldown pass,
// replan. The efficiency policy should climb toward the knee of the law, then
// come back down when communication gets slower.
TEST_CASE(
    "engine with the efficiency policy scales a job up to its knee and back down after a "
    "regression") {
  ManualClock clock;
  EngineOptions options;
  options.default_policy = "efficiency";
  auto engine_owner = MustCreate(options, &clock);
  DecisionEngine& engine = *engine_owner;
  JobSpec spec = Spec("ns/train", 1, 32);
  spec.restart_cost_seconds = 10;
  MustRegister(engine, spec);

  double sync_per_worker = 0.01;  // knee near 8 workers for a 0.2 s step
  auto run_round = [&] {
    const Recommendation rec = MustRecommendation(engine, "ns/train");
    REQUIRE(engine.ReportApplied("ns/train", rec.replicas, false, rec.generation).ok());
    MustIngest(engine, "ns/train", {"train-worker-0"}, rec.replicas,
               0.2 + sync_per_worker * (rec.replicas - 1), 10);
    clock.Advance(absl::Seconds(61));  // past the 60 s cooldown
    engine.Replan();
    return MustRecommendation(engine, "ns/train").replicas;
  };

  uint32_t peak = 0, last = 0;
  std::vector<uint32_t> sizes;
  for (int round = 0; round < 12; ++round) {
    last = run_round();
    sizes.push_back(last);
    peak = std::max(peak, last);
  }
  INFO("sizes: " << testing_join(sizes));
  CHECK(sizes.front() > 1);                                   // it scaled up from min
  CHECK(peak >= 6);                                           // toward the knee...
  CHECK(peak <= 12);                                          // ...not far beyond it
  CHECK(sizes[sizes.size() - 1] == sizes[sizes.size() - 2]);  // and settled

  sync_per_worker = 0.08;  // communication got 8x slower
  for (int round = 0; round < 8; ++round) last = run_round();
  CHECK(last < peak);
  const Recommendation rec = MustRecommendation(engine, "ns/train");
  CHECK(rec.binding_constraint == BindingConstraint::kEfficiency);
  CHECK_THAT(rec.reason, Contains("efficiency"));
}

TEST_CASE("engine with a debounce plans a burst of applied reports once, on its timer thread",
          "[concurrency]") {
  ManualClock clock;
  auto engine_owner = DebouncedEngine(clock);
  DecisionEngine& engine = *engine_owner;
  MustRegister(engine, Spec("ns/b", 2, 8));
  auto watcher = engine.Watch().value();
  RecommendationEvent event;
  while (watcher->Next(&event) == Subscription::Poll::kEvent) {
  }  // drain ADDED, ADDED, SYNCED
  std::mutex mu;
  std::condition_variable cv;
  int ready = 0;
  watcher->SetReadyCallback([&] {
    std::lock_guard<std::mutex> lock(mu);
    ++ready;
    cv.notify_all();
  });

  engine.StartTimer();
  REQUIRE(engine.ReportApplied("ns/a", 2, false, 1).ok());
  REQUIRE(engine.ReportApplied("ns/b", 2, false, 1).ok());
  // Not planned inline, and not before the debounce passed on the clock:
  // both still say SCALE_UP.
  CHECK(MustRecommendation(engine, "ns/a").action == Action::kScaleUp);
  CHECK(MustRecommendation(engine, "ns/b").action == Action::kScaleUp);
  clock.Advance(absl::Milliseconds(299));
  CHECK(MustRecommendation(engine, "ns/a").action == Action::kScaleUp);
  clock.Advance(absl::Milliseconds(1));
  // Wait for the debounced replan's events: one MODIFIED per job.
  std::vector<std::string> modified;
  while (modified.size() < 2) {
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return ready > 0; });
      ready = 0;
    }
    while (watcher->Next(&event) == Subscription::Poll::kEvent) {
      if (event.type != RecommendationEvent::Type::kPlanEnd) {
        modified.push_back(event.recommendation.job_id);
      }
    }
  }
  CHECK(modified == std::vector<std::string>{"ns/a", "ns/b"});
  CHECK(MustRecommendation(engine, "ns/a").action == Action::kHold);
  CHECK(MustRecommendation(engine, "ns/b").action == Action::kHold);
  engine.StopTimer();
  engine.Unwatch(watcher);
}

// Reads `reader` until an event of `type` for `job_id` arrives (no
// timeouts: the caller caused it); returns the events read up to it.
std::vector<RecommendationEvent> AwaitEvent(WatchReader& reader, RecommendationEvent::Type type,
                                            const std::string& job_id) {
  std::vector<RecommendationEvent> events;
  while (true) {
    for (RecommendationEvent& e : reader.WaitForEvents()) {
      events.push_back(std::move(e));
      if (events.back().type == type && events.back().recommendation.job_id == job_id)
        return events;
    }
  }
}

TEST_CASE(
    "with the timer running, job changes arriving together are planned once, after the "
    "coalescing window, and their replies say the plan is pending",
    "[concurrency]") {
  ManualClock clock;
  EngineOptions options = StaticMinOptions();
  options.plan_coalesce = absl::Milliseconds(5);
  options.applied_debounce = absl::Milliseconds(300);
  auto engine = MustCreate(options, &clock);
  auto watcher = engine->Watch().value();
  WatchReader reader(watcher);
  AwaitEvent(reader, RecommendationEvent::Type::kSynced, "");
  engine->StartTimer();
  const uint64_t plans_before = engine->GetCluster().plans_run;

  // Recorded at once, planned later: no recommendation yet.
  for (const char* id : {"ns/a", "ns/b", "ns/c"}) {
    absl::StatusOr<JobView> view = engine->RegisterJob(Spec(id, 2, 8));
    REQUIRE(view.ok());
    CHECK(view->plan_pending);
    CHECK_FALSE(view->recommendation.has_value());
    CHECK(engine->GetJob(id).ok());  // the job itself is there
  }
  CHECK(engine->ListRecommendations().empty());
  absl::StatusOr<Recommendation> not_yet = engine->GetRecommendation("ns/a");
  CHECK(not_yet.status().code() == absl::StatusCode::kUnavailable);
  CHECK_THAT(std::string(not_yet.status().message()), Contains("pending"));
  clock.Advance(absl::Milliseconds(4));
  CHECK(engine->ListRecommendations().empty());  // the window has not passed

  clock.Advance(absl::Milliseconds(1));
  // One plan publishes all three, in job order.
  std::vector<RecommendationEvent> events =
      AwaitEvent(reader, RecommendationEvent::Type::kAdded, "ns/c");
  CHECK(events.size() == 3);
  CHECK(engine->GetCluster().plans_run == plans_before + 1);
  CHECK(engine->ListRecommendations().size() == 3);

  // A report (300 ms debounce) and then a capacity change (5 ms): one plan
  // when the earlier window ends covers both.
  REQUIRE(engine->ReportApplied("ns/a", 2, false, 1).ok());
  ClusterView cluster = MustSetCapacity(*engine, 4);
  CHECK(cluster.plan_pending);
  CHECK(cluster.total_gpus == 4u);
  clock.Advance(absl::Milliseconds(5));
  // ns/a turns to HOLD (applied), ns/c waits (2 + 2 of 4 GPUs taken).
  AwaitEvent(reader, RecommendationEvent::Type::kModified, "ns/c");
  CHECK(engine->GetCluster().plans_run == plans_before + 2);
  CHECK(MustRecommendation(*engine, "ns/a").action == Action::kHold);
  CHECK(MustRecommendation(*engine, "ns/c").replicas == 0);

  // Deregistering tells watchers at once; the replan follows the window.
  // StopTimer runs a replan still waiting for its window before returning.
  REQUIRE(engine->DeregisterJob("ns/a").ok());
  AwaitEvent(reader, RecommendationEvent::Type::kDeleted, "ns/a");
  engine->StopTimer();
  CHECK(engine->GetCluster().plans_run == plans_before + 3);
  CHECK(MustRecommendation(*engine, "ns/c").replicas == 2);  // ns/a's GPUs are free

  // Without the timer every change plans before it replies.
  absl::StatusOr<JobView> inline_view = engine->RegisterJob(Spec("ns/d", 1, 1));
  REQUIRE(inline_view.ok());
  CHECK_FALSE(inline_view->plan_pending);
  CHECK(inline_view->recommendation.has_value());
  engine->Unwatch(watcher);
}

// Holds a plan in progress (EngineOptions::plan_compute_hook) until released.
struct PlanGate {
  std::mutex mu;
  std::condition_variable cv;
  bool armed = false;  // plans before Arm() pass freely
  bool computing = false;
  bool released = false;
  void Arm() {
    std::lock_guard<std::mutex> lock(mu);
    armed = true;
  }
  void Hook() {
    std::unique_lock<std::mutex> lock(mu);
    if (!armed) return;
    computing = true;
    cv.notify_all();
    cv.wait(lock, [&] { return released; });
  }
  void AwaitComputing() {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return computing; });
  }
  void Release() {
    std::lock_guard<std::mutex> lock(mu);
    released = true;
    cv.notify_all();
  }
};

TEST_CASE(
    "a plan computes without the engine's lock: reads and changes go on, and its result "
    "is published only for what it still describes",
    "[concurrency]") {
  ManualClock clock;
  PlanGate gate;
  EngineOptions options = StaticMinOptions();
  options.plan_coalesce = absl::Hours(1);  // the timer never plans on its own here
  options.applied_debounce = absl::Hours(1);
  options.plan_compute_hook = [&gate] { gate.Hook(); };
  auto engine = MustCreate(options, &clock);
  MustRegister(*engine, Spec("ns/a", 2, 8));
  MustRegister(*engine, Spec("ns/b", 2, 8));
  engine->StartTimer();
  const uint64_t plans_before = engine->GetCluster().plans_run;

  gate.Arm();
  std::thread planner([&] { engine->Replan(); });
  gate.AwaitComputing();
  // The plan is computing: none of these waits for it.
  CHECK(engine->GetJob("ns/a").ok());
  CHECK(engine->ListJobs().size() == 2);
  CHECK(engine->GetCluster().plans_run == plans_before);
  REQUIRE(engine->DeregisterJob("ns/a").ok());
  REQUIRE(engine->ReportApplied("ns/b", 2, false, 1).ok());
  absl::StatusOr<JobView> c = engine->RegisterJob(Spec("ns/c", 2, 8));
  REQUIRE(c.ok());
  CHECK(c->plan_pending);
  gate.Release();
  planner.join();

  // Published for ns/b (which it still describes), not for ns/a (gone),
  // and not yet for ns/c (registered after the plan copied the jobs).
  CHECK(engine->GetCluster().plans_run == plans_before + 1);
  CHECK(engine->GetRecommendation("ns/a").status().code() == absl::StatusCode::kNotFound);
  CHECK(engine->GetRecommendation("ns/c").status().code() == absl::StatusCode::kUnavailable);
  CHECK(engine->GetRecommendation("ns/b").ok());
  // The pending plan (StopTimer runs it) covers ns/c and the applied report.
  engine->StopTimer();
  CHECK(MustRecommendation(*engine, "ns/c").replicas == 2);
  CHECK(MustRecommendation(*engine, "ns/b").action == Action::kHold);
}

TEST_CASE("a change planned inline while a plan computes is planned after it, and published last",
          "[concurrency]") {
  ManualClock clock;
  PlanGate gate;
  EngineOptions options = StaticMinOptions();
  options.plan_compute_hook = [&gate] { gate.Hook(); };
  auto engine = MustCreate(options, &clock);
  MustRegister(*engine, Spec("ns/a", 2, 8));
  MustSetCapacity(*engine, 8);
  REQUIRE(MustRecommendation(*engine, "ns/a").replicas == 2);
  const uint64_t plans_before = engine->GetCluster().plans_run;
  gate.Arm();
  std::thread planner([&] { engine->Replan(); });
  gate.AwaitComputing();
  // Without the timer this call plans itself, on newer state (1 GPU: too
  // few for ns/a's 2 replicas); it waits for the plan computing on 8.
  absl::Status shrunk;
  std::thread shrink([&] { shrunk = engine->SetCapacity(1).status(); });
  gate.Release();
  planner.join();
  shrink.join();
  CHECK(shrunk.ok());
  CHECK(engine->GetCluster().plans_run == plans_before + 2);
  CHECK(engine->GetCluster().total_gpus == 1u);
  // The plan on 8 GPUs was published first, then overwritten by the newer.
  CHECK(MustRecommendation(*engine, "ns/a").replicas == 0);
}

// Reports what the engine recommends as applied and feeds each running job
// samples from its true step-time law, as a cluster and its agents would.
void ApplyAndMeasure(DecisionEngine& engine, ManualClock& clock,
                     const std::map<std::string, double>& sync_per_worker) {
  for (const Recommendation& rec : engine.ListRecommendations()) {
    REQUIRE(engine.ReportApplied(rec.job_id, rec.replicas, rec.suspend, rec.generation).ok());
    if (rec.replicas == 0) continue;
    const std::string pod = rec.job_id + "-worker-0";
    MustIngest(engine, rec.job_id, {pod}, rec.replicas,
               0.2 + sync_per_worker.at(rec.job_id) * (rec.replicas - 1), 10);
  }
  clock.Advance(absl::Seconds(61));
  engine.Replan();
}

TEST_CASE("engine's default planner gives spare GPUs to the job that scales better") {
  ManualClock clock;
  EngineOptions options;  // default policy: planner
  auto engine_owner = MustCreate(options, &clock);
  DecisionEngine& engine = *engine_owner;
  JobSpec good = Spec("ns/scales-well", 1, 16);
  JobSpec poor = Spec("ns/scales-poorly", 1, 16);
  good.restart_cost_seconds = poor.restart_cost_seconds = 5;
  MustRegister(engine, good);
  MustRegister(engine, poor);
  MustSetCapacity(engine, 16);
  const std::map<std::string, double> laws = {{"ns/scales-well", 0.002}, {"ns/scales-poorly", 0.2}};
  for (int round = 0; round < 10; ++round) ApplyAndMeasure(engine, clock, laws);
  const Recommendation well = MustRecommendation(engine, "ns/scales-well");
  const Recommendation poorly = MustRecommendation(engine, "ns/scales-poorly");
  CHECK(well.policy == "planner");
  CHECK(well.replicas > poorly.replicas);
  CHECK(poorly.replicas >= 1);  // both run: starting a job beats growing one
  CHECK(well.gpus + poorly.gpus <= 16);
  const ClusterView cluster = engine.GetCluster();
  CHECK(cluster.optimality_gap <= 0.01);
  CHECK(cluster.plan_upper_bound >= cluster.plan_utility - 1e-9);
}

TEST_CASE("engine's jct objective gives spare GPUs to the job with less work left, fair splits") {
  const std::map<std::string, double> laws = {{"ns/near-done", 0.02}, {"ns/far-from-done", 0.02}};
  auto plan = [&](PlanObjectiveKind objective) {
    ManualClock clock;
    EngineOptions options;
    options.planner.objective = objective;
    auto engine = MustCreate(options, &clock);
    JobSpec near = Spec("ns/near-done", 1, 16);
    JobSpec far = Spec("ns/far-from-done", 1, 16);
    near.restart_cost_seconds = far.restart_cost_seconds = 5;
    near.total_samples = 2'000'000;
    far.total_samples = 200'000'000;
    MustRegister(*engine, near);
    MustRegister(*engine, far);
    MustSetCapacity(*engine, 16);
    for (int round = 0; round < 10; ++round) ApplyAndMeasure(*engine, clock, laws);
    return std::pair{MustRecommendation(*engine, "ns/near-done").replicas,
                     MustRecommendation(*engine, "ns/far-from-done").replicas};
  };
  CHECK(EngineOptions{}.planner.objective == PlanObjectiveKind::kJct);
  const auto [near_jct, far_jct] = plan(PlanObjectiveKind::kJct);
  CHECK(near_jct > far_jct);
  CHECK(far_jct >= 1);
  const auto [near_fair, far_fair] = plan(PlanObjectiveKind::kFair);
  CHECK(near_fair == far_fair);
}

TEST_CASE("engine keeps a planner job that keeps changing size in a longer cooldown") {
  ManualClock clock;
  auto engine_owner = MustCreate(EngineOptions{}, &clock);  // cooldown 60 s
  DecisionEngine& engine = *engine_owner;
  JobSpec spec = Spec("ns/flapping", 1, 8);
  spec.prior = {{.replicas = 1, .samples_per_second = 100},
                {.replicas = 8, .samples_per_second = 800}};
  MustRegister(engine, spec);
  MustSetCapacity(engine, 8);
  Recommendation rec = MustRecommendation(engine, "ns/flapping");
  REQUIRE(rec.replicas == 8);
  REQUIRE(engine.ReportApplied("ns/flapping", 8, false, rec.generation).ok());
  // The cluster changed it twice within a few minutes (e.g. another
  // controller, or GPUs lent and returned): 8 -> 2 -> 4.
  clock.Advance(absl::Seconds(90));
  REQUIRE(engine.ReportApplied("ns/flapping", 2, false, rec.generation).ok());
  clock.Advance(absl::Seconds(90));
  REQUIRE(engine.ReportApplied("ns/flapping", 4, false, rec.generation).ok());
  // Measured at 4, as the prior says (100 samples/s per replica, batch 32).
  MustIngest(engine, "ns/flapping", {"flapping-worker-0"}, 4, 0.32, 10);
  // Two recent changes: twice the cooldown. After 61 s it still holds 4...
  clock.Advance(absl::Seconds(61));
  engine.Replan();
  rec = MustRecommendation(engine, "ns/flapping");
  CHECK(rec.replicas == 4);
  CHECK(rec.binding_constraint == BindingConstraint::kCooldown);
  // ...and after 121 s the planner may move it again.
  clock.Advance(absl::Seconds(60));
  engine.Replan();
  CHECK(MustRecommendation(engine, "ns/flapping").replicas == 8);
}

TEST_CASE(
    "engine's planner shrinks, then suspends the lower-priority job when capacity drops, and "
    "resumes it") {
  ManualClock clock;
  auto engine_owner = MustCreate(EngineOptions{}, &clock);
  DecisionEngine& engine = *engine_owner;
  MustRegister(engine, Spec("ns/high", 2, 4, /*priority=*/10));
  MustRegister(engine, Spec("ns/low", 2, 4, /*priority=*/0));
  MustSetCapacity(engine, 8);
  const std::map<std::string, double> laws = {{"ns/high", 0.001}, {"ns/low", 0.001}};
  for (int round = 0; round < 6; ++round) ApplyAndMeasure(engine, clock, laws);
  CHECK(MustRecommendation(engine, "ns/high").replicas == 4);
  CHECK(MustRecommendation(engine, "ns/low").replicas == 4);

  MustSetCapacity(engine, 6);  // both shrink (the fair split), neither stops
  Recommendation high = MustRecommendation(engine, "ns/high");
  Recommendation low = MustRecommendation(engine, "ns/low");
  CHECK(high.replicas >= 2);
  CHECK(low.replicas >= 2);
  CHECK(high.replicas + low.replicas <= 6);
  ApplyAndMeasure(engine, clock, laws);

  MustSetCapacity(engine, 4);  // both at their minimum before any is suspended
  CHECK(MustRecommendation(engine, "ns/high").replicas == 2);
  CHECK(MustRecommendation(engine, "ns/low").replicas == 2);
  ApplyAndMeasure(engine, clock, laws);

  MustSetCapacity(engine, 3);  // now one must stop: the lower priority
  low = MustRecommendation(engine, "ns/low");
  CHECK(low.replicas == 0);
  CHECK(low.action == Action::kSuspend);
  CHECK(low.queue_position == 1);
  CHECK(low.binding_constraint == BindingConstraint::kPreempted);
  CHECK(MustRecommendation(engine, "ns/high").replicas == 3);
  ApplyAndMeasure(engine, clock, laws);

  MustSetCapacity(engine, 8);  // GPUs come back: the suspended job resumes
  low = MustRecommendation(engine, "ns/low");
  CHECK(low.replicas >= 2);
  CHECK(low.action == Action::kResume);
}

namespace {

// Samples of `pod` at `world_size` for steps [first, last], 0.5 s each.
std::vector<StepSample> StepRun(const std::string& job, const std::string& pod, uint32_t world_size,
                                uint64_t first, uint64_t last) {
  std::vector<StepSample> out;
  for (uint64_t step = first; step <= last; ++step) {
    StepSample s;
    s.job_id = job;
    s.pod = pod;
    s.world_size = world_size;
    s.step_seconds = 0.5;
    s.step = step;
    out.push_back(s);
  }
  return out;
}

}  // namespace

TEST_CASE("engine derives progress from steps despite partial pods, resends and a resize") {
  ManualClock clock;
  auto engine_owner = MustCreate(StaticMinOptions(), &clock);
  DecisionEngine& engine = *engine_owner;
  JobSpec spec = Spec("ns/a", 2, 8);  // local_batch_size 32
  spec.total_samples = 100'000;
  MustRegister(engine, spec);
  // Registered, no samples, not running: nothing processed, no estimate.
  absl::StatusOr<JobView> view = engine.GetJob("ns/a");
  REQUIRE(view.ok());
  CHECK(view->status.samples_processed == 0);
  CHECK_FALSE(view->status.estimated_remaining_seconds.has_value());

  // Four workers; two report, each only part of steps 0..99; one resends.
  REQUIRE(engine.Ingest(StepRun("ns/a", "a-worker-0", 4, 0, 59)).accepted == 60);
  REQUIRE(engine.Ingest(StepRun("ns/a", "a-worker-3", 4, 40, 99)).accepted == 60);
  CHECK(engine.Ingest(StepRun("ns/a", "a-worker-3", 4, 80, 99)).duplicates == 20);
  uint64_t processed = 100 * 4 * 32;
  view = engine.GetJob("ns/a");
  REQUIRE(view.ok());
  CHECK(view->status.samples_processed == processed);
  // Known total and rate, but not running yet: no estimate.
  CHECK_FALSE(view->status.estimated_remaining_seconds.has_value());

  // Running at 4: the rest at the model's rate there (about 4 x 32 / 0.5).
  absl::StatusOr<JobStatus> applied = engine.ReportApplied("ns/a", 4, false, 1);
  REQUIRE(applied.ok());
  CHECK(applied->samples_processed == processed);
  REQUIRE(applied->estimated_remaining_seconds.has_value());
  view = engine.GetJob("ns/a");
  REQUIRE(view.ok());
  const double rate_at_4 = view->curve[3].samples_per_second;
  CHECK(rate_at_4 == Approx(256).epsilon(0.02));
  REQUIRE(view->status.estimated_remaining_seconds.has_value());
  CHECK(*view->status.estimated_remaining_seconds == Approx((100'000.0 - processed) / rate_at_4));
  CHECK(*applied->estimated_remaining_seconds == *view->status.estimated_remaining_seconds);

  // Resized to 8, which numbers its steps afresh: 50 more steps of 8 x 32.
  REQUIRE(engine.ReportApplied("ns/a", 8, false, 1).ok());
  REQUIRE(engine.Ingest(StepRun("ns/a", "a-worker-5", 8, 0, 49)).accepted == 50);
  processed += 50 * 8 * 32;
  view = engine.GetJob("ns/a");
  REQUIRE(view.ok());
  CHECK(view->status.samples_processed == processed);
  REQUIRE(view->status.estimated_remaining_seconds.has_value());
  CHECK(*view->status.estimated_remaining_seconds ==
        Approx((100'000.0 - processed) / view->curve[7].samples_per_second));

  // Suspended: it does not run, so it does not finish.
  REQUIRE(engine.ReportApplied("ns/a", 8, true, 1).ok());
  view = engine.GetJob("ns/a");
  REQUIRE(view.ok());
  CHECK(view->status.samples_processed == processed);
  CHECK_FALSE(view->status.estimated_remaining_seconds.has_value());
}

TEST_CASE("engine's estimate is 0 once done and unset without a total or a rate") {
  ManualClock clock;
  auto engine_owner = MustCreate(StaticMinOptions(), &clock);
  DecisionEngine& engine = *engine_owner;
  JobSpec done = Spec("ns/done", 2, 8);
  done.total_samples = 1000;  // less than the 20 x 2 x 32 processed below
  MustRegister(engine, done);
  MustRegister(engine, Spec("ns/unknown-total", 2, 8));
  JobSpec no_data = Spec("ns/no-data", 2, 8);
  no_data.total_samples = 1000;
  MustRegister(engine, no_data);
  for (const std::string id : {"ns/done", "ns/unknown-total", "ns/no-data"}) {
    REQUIRE(engine.ReportApplied(id, 2, false, 1).ok());
  }
  REQUIRE(engine.Ingest(StepRun("ns/done", "done-worker-0", 2, 0, 19)).accepted == 20);
  REQUIRE(engine.Ingest(StepRun("ns/unknown-total", "u-worker-0", 2, 0, 9)).accepted == 10);

  absl::StatusOr<JobView> view = engine.GetJob("ns/done");
  REQUIRE(view.ok());
  CHECK(view->status.samples_processed == 20 * 2 * 32);
  REQUIRE(view->status.estimated_remaining_seconds.has_value());
  CHECK(*view->status.estimated_remaining_seconds == 0);

  view = engine.GetJob("ns/unknown-total");  // processed is known, the rest is not
  REQUIRE(view.ok());
  CHECK(view->status.samples_processed == 10 * 2 * 32);
  CHECK_FALSE(view->status.estimated_remaining_seconds.has_value());

  view = engine.GetJob("ns/no-data");  // running, but no samples and no prior: rate unknown
  REQUIRE(view.ok());
  CHECK(view->status.samples_processed == 0);
  CHECK_FALSE(view->status.estimated_remaining_seconds.has_value());
}

// A planner job's policy input is kept between plans while its entry, its
// fit and whether the capacity is known stay put (DecisionEngine::PlanInput).
// Learning the capacity must drop it: with the capacity unknown the job may
// only explore (2x its largest measured size); once known, the planner may
// use any size up to max_replicas. (The cooldown, which moves with time
// alone, is covered by the longer-cooldown case above: its second plan
// reuses the input.)
TEST_CASE("engine drops a planner job's kept policy input when the capacity becomes known") {
  ManualClock clock;
  auto engine_owner = MustCreate(EngineOptions{}, &clock);
  DecisionEngine& engine = *engine_owner;
  MustRegister(engine, Spec("ns/learner", 1, 16));
  Recommendation rec = MustRecommendation(engine, "ns/learner");
  REQUIRE(engine.ReportApplied("ns/learner", 2, false, rec.generation).ok());
  MustIngest(engine, "ns/learner", {"learner-worker-0", "learner-worker-1"}, 2, 0.2, 20);
  clock.Advance(absl::Seconds(61));
  engine.Replan();
  rec = MustRecommendation(engine, "ns/learner");
  CHECK(rec.replicas == 4);
  CHECK(rec.binding_constraint == BindingConstraint::kInsufficientData);
  engine.Replan();  // nothing moved: the kept input, the same answer
  CHECK(MustRecommendation(engine, "ns/learner").replicas == 4);
  MustSetCapacity(engine, 64);
  rec = MustRecommendation(engine, "ns/learner");
  CHECK(rec.replicas > 4);
  CHECK(rec.binding_constraint != BindingConstraint::kInsufficientData);
}

// A per-job policy's memory written by a plan computed on a snapshot
// (Replan, the timer's path) must reach the live entry at commit. kubedl
// remembers that its exploration is over after rolling back; forgotten, it
// would double again once the rollback is applied.
TEST_CASE("a plan computed on a snapshot hands the policies' memory back to the job") {
  ManualClock clock;
  auto engine_owner = MustCreate(EngineOptions{}, &clock);
  DecisionEngine& engine = *engine_owner;
  JobSpec spec = Spec("ns/explorer", 1, 8);
  spec.policy = "kubedl";
  MustRegister(engine, spec);
  MustSetCapacity(engine, 64);
  auto measure = [&](uint32_t size, double step_seconds) {
    MustIngest(engine, "ns/explorer", {"explorer-worker-0", "explorer-worker-1"}, size,
               step_seconds, 20);
  };
  Recommendation rec = MustRecommendation(engine, "ns/explorer");
  REQUIRE(engine.ReportApplied("ns/explorer", 2, false, rec.generation).ok());
  measure(2, 0.2);
  clock.Advance(absl::Seconds(61));
  engine.Replan();
  rec = MustRecommendation(engine, "ns/explorer");
  REQUIRE(rec.replicas == 4);  // doubles while it pays
  REQUIRE(engine.ReportApplied("ns/explorer", 4, false, rec.generation).ok());
  measure(4, 0.5);  // 4 replicas do less than 2
  clock.Advance(absl::Seconds(61));
  engine.Replan();
  rec = MustRecommendation(engine, "ns/explorer");
  REQUIRE(rec.replicas == 2);  // rolls back, and remembers it is done
  REQUIRE(engine.ReportApplied("ns/explorer", 2, false, rec.generation).ok());
  clock.Advance(absl::Seconds(61));
  engine.Replan();
  rec = MustRecommendation(engine, "ns/explorer");
  CHECK(rec.replicas == 2);
  CHECK(rec.reason.find("finished exploring") != std::string::npos);
}

TEST_CASE("the plan observer sees each plan's changes by action and jobs are counted by state") {
  ManualClock clock;
  EngineOptions options = StaticMinOptions();
  options.capacity_gpus = 4;
  std::vector<PlanStats> plans;  // no timer: each change plans on this thread
  options.plan_observer = [&plans](const PlanStats& stats) { plans.push_back(stats); };
  auto engine_owner = MustCreate(options, &clock);
  DecisionEngine& engine = *engine_owner;
  const size_t at_start = plans.size();
  const auto changes = [&](Action action) {
    return plans.back().changes_by_action[static_cast<size_t>(action)];
  };

  const JobView a = MustRegister(engine, Spec("team-a/a", 2, 8));
  REQUIRE(plans.size() == at_start + 1);
  CHECK(plans.back().published);
  CHECK(plans.back().duration >= absl::ZeroDuration());
  CHECK(changes(Action::kScaleUp) == 1);  // a's first recommendation
  const JobView b = MustRegister(engine, Spec("team-a/b", 2, 8));
  CHECK(changes(Action::kScaleUp) == 1);         // b's; a's target stays
  MustRegister(engine, Spec("team-a/c", 2, 8));  // no GPUs left: it waits
  uint64_t total = 0;
  for (uint64_t n : plans.back().changes_by_action) total += n;
  CHECK(total == 1);  // c's first recommendation (0 replicas), nothing else

  JobStateCounts counts = engine.CountJobStates();
  CHECK(counts.running == 2);
  CHECK(counts.waiting == 1);
  CHECK(counts.suspended == 0);

  // Both run; then the capacity halves: one of them is suspended, and it
  // counts as suspended (it ran), not waiting.
  REQUIRE(engine.ReportApplied("team-a/a", 2, false, a.recommendation->generation).ok());
  REQUIRE(engine.ReportApplied("team-a/b", 2, false, b.recommendation->generation).ok());
  MustSetCapacity(engine, 2);
  CHECK(changes(Action::kSuspend) == 1);
  counts = engine.CountJobStates();
  CHECK(counts.running == 1);
  CHECK(counts.waiting == 1);
  CHECK(counts.suspended == 1);
  CHECK(engine.watcher_count() == 0);
  auto watch = engine.Watch();
  REQUIRE(watch.ok());
  CHECK(engine.watcher_count() == 1);
  engine.Unwatch(*watch);
}

}  // namespace rescale

// ---- node slots ---------------------------------------------------------------

namespace rescale {
namespace {

JobSpec GpuSpec(const std::string& id, uint32_t min, uint32_t max, uint32_t gpus_per_replica,
                int32_t priority = 0) {
  JobSpec spec = Spec(id, min, max, priority);
  spec.gpus_per_replica = gpus_per_replica;
  return spec;
}

TEST_CASE("engine holds back a job whose replicas do not fit on the nodes, and shows the slots") {
  ManualClock clock;
  auto engine_owner = MustCreate(StaticMinOptions(), &clock);
  DecisionEngine& engine = *engine_owner;
  MustRegister(engine, GpuSpec("ns/big", 1, 1, 8, /*priority=*/5));
  MustRegister(engine, GpuSpec("ns/half", 2, 2, 4));
  // 8 GPUs as 4+4 on two nodes: the total admits the 8-GPU job...
  ClusterView total_only = MustSetCapacity(engine, 8);
  CHECK(MustRecommendation(engine, "ns/big").replicas == 1);
  CHECK(total_only.slots.empty());
  CHECK(total_only.slot_use.empty());

  // ...the nodes do not.
  absl::StatusOr<ClusterView> view =
      engine.SetCapacity(CapacityReport{8, {{8, 0}, {4, 2}, {1, 8}}, 0, {}});
  INFO(view.status().ToString());
  REQUIRE(view.ok());
  const Recommendation big = MustRecommendation(engine, "ns/big");
  CHECK(big.replicas == 0);
  CHECK(big.binding_constraint == BindingConstraint::kNodeSlots);
  CHECK(big.reason ==
        "needs 1 replica of 8 GPUs on one node each; none fits on the nodes' free GPUs");
  CHECK(MustRecommendation(engine, "ns/half").replicas == 2);
  CHECK(view->slots == std::vector<ReplicaSlots>{{8, 0}, {4, 2}, {1, 8}});
  CHECK(view->slot_use == std::vector<ReplicaSlotUse>{{8, 0, 0}, {4, 2, 2}, {1, 8, 0}});
  CHECK(engine.GetCluster().slot_use == view->slot_use);

  // The total alone again drops the slots: the job comes back.
  ClusterView dropped = MustSetCapacity(engine, 8);
  CHECK(dropped.slots.empty());
  CHECK(MustRecommendation(engine, "ns/big").replicas == 1);
}

TEST_CASE("engine refuses slots that are not a capacity, naming the field and the limit") {
  ManualClock clock;
  auto engine = MustCreate(StaticMinOptions(), &clock);
  auto refused = [&](CapacityReport report) {
    absl::StatusOr<ClusterView> view = engine->SetCapacity(report);
    REQUIRE(view.status().code() == absl::StatusCode::kInvalidArgument);
    return std::string(view.status().message());
  };
  CHECK(refused({16, {{4, 2}, {8, 3}}, 0, {}}) ==
        "slots[1].replicas 3 of 8 GPUs each exceeds the limit of 2 (total_gpus 16 / 8)");
  CHECK(refused({16, {{0, 1}}, 0, {}}) == "slots[0].gpus_per_replica must be in [1, 64], got 0");
  CHECK(refused({16, {{65, 0}}, 0, {}}) == "slots[0].gpus_per_replica must be in [1, 64], got 65");
  CHECK(refused({16, {{4, 1}, {2, 1}, {4, 2}}, 0, {}}) ==
        "slots[2].gpus_per_replica 4 repeats slots[0]: give each size class once");
  // Nothing changed.
  CHECK_FALSE(engine->GetCluster().total_gpus.has_value());
  // At the limit is fine.
  CHECK(engine->SetCapacity(CapacityReport{16, {{8, 2}, {1, 16}}, 0, {}}).ok());
}

TEST_CASE("engine shows the allocatable GPUs beside the usable total and plans with the total") {
  ManualClock clock;
  auto engine_owner = MustCreate(StaticMinOptions(), &clock);
  DecisionEngine& engine = *engine_owner;
  CHECK(engine.GetCluster().allocatable_gpus == 0);   // not reported yet
  MustRegister(engine, GpuSpec("ns/wide", 3, 3, 4));  // 12 GPUs or nothing

  absl::StatusOr<ClusterView> view = engine.SetCapacity(CapacityReport{8, {}, 24, {}});
  INFO(view.status().ToString());
  REQUIRE(view.ok());
  CHECK(view->allocatable_gpus == 24);
  CHECK(view->total_gpus == 8u);
  CHECK(engine.GetCluster().allocatable_gpus == 24);
  // The 24 GPUs the nodes have would hold it; the 8 usable ones do not.
  CHECK(MustRecommendation(engine, "ns/wide").replicas == 0);

  SECTION("a report without them says they are not reported") {
    REQUIRE(engine.SetCapacity(CapacityReport{12, {}, 0, {}}).ok());
    CHECK(engine.GetCluster().allocatable_gpus == 0);
    CHECK(MustRecommendation(engine, "ns/wide").replicas == 3);
  }
  SECTION("the total alone says they are not reported") {
    CHECK(MustSetCapacity(engine, 8).allocatable_gpus == 0);
  }
  SECTION("as many allocatable as usable is a cluster where every GPU is usable") {
    REQUIRE(engine.SetCapacity(CapacityReport{8, {}, 8, {}}).ok());
    CHECK(engine.GetCluster().allocatable_gpus == 8);
  }
}

TEST_CASE(
    "engine refuses fewer allocatable GPUs than usable ones, naming the field and the limit") {
  ManualClock clock;
  auto engine = MustCreate(StaticMinOptions(), &clock);
  REQUIRE(engine->SetCapacity(CapacityReport{8, {}, 24, {}}).ok());
  absl::StatusOr<ClusterView> view = engine->SetCapacity(CapacityReport{16, {}, 12, {}});
  REQUIRE(view.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(view.status().message() ==
        "allocatable_gpus 12 must be at least total_gpus (16), the usable GPUs among them, or 0 "
        "(not reported)");
  // Nothing changed.
  const ClusterView cluster = engine->GetCluster();
  CHECK(cluster.total_gpus == 8u);
  CHECK(cluster.allocatable_gpus == 24);
}

}  // namespace
}  // namespace rescale
