// Tests of the engine on a StateStore (EngineOptions::state): a new engine on
// the same SQLite file, as rescaled after a restart, has every job, applied
// state, cooldown, capacity and generation back; generations never go
// backwards or repeat; a write the store refuses fails the call and changes
// nothing; a kept job this server cannot take stops start-up.
#include <atomic>
#include <catch2/catch.hpp>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "rescale/clock.h"
#include "rescale/decision_engine.h"
#include "rescale/state_store.h"
#include "tests/engine_helpers.h"
#include "tests/temp_dir.h"

namespace rescale {
namespace {

using testing::MustCreate;
using testing::MustRecommendation;
using testing::MustRegister;
using testing::MustSetCapacity;
using testing::TempDir;

JobSpec Spec(const std::string& id, uint32_t min, uint32_t max) {
  JobSpec spec;
  spec.job_id = id;
  spec.min_replicas = min;
  spec.max_replicas = max;
  spec.policy = "static-max";
  spec.local_batch_size = 32;
  spec.priority = id == "ns/high" ? 10 : 0;
  return spec;
}

// An engine on the SQLite file at `path`, as rescaled --state sqlite:PATH
// starts: the file is the only thing carried over.
std::unique_ptr<DecisionEngine> Start(const std::string& path, Clock* clock,
                                      EngineOptions options = {}) {
  absl::StatusOr<std::unique_ptr<StateStore>> store = OpenStateStore("sqlite:" + path);
  INFO(store.status().ToString());
  REQUIRE(store.ok());
  options.state = *std::move(store);
  return MustCreate(std::move(options), clock);
}

TEST_CASE("a restarted engine has every job, applied state, capacity and generation back") {
  TempDir dir;
  const std::string path = dir.File("state.db");
  ManualClock clock;
  Recommendation before;
  JobView view_before;
  {
    auto engine = Start(path, &clock);
    MustRegister(*engine, Spec("ns/a", 1, 4));
    JobSpec updated = Spec("ns/a", 2, 6);
    updated.total_samples = 1'000'000;
    absl::StatusOr<JobView> changed = engine->UpdateJob(updated);
    INFO(changed.status().ToString());
    REQUIRE(changed.ok());
    MustRegister(*engine, Spec("ns/b", 1, 2));
    MustSetCapacity(*engine, 6);
    before = MustRecommendation(*engine, "ns/a");
    REQUIRE(before.replicas == 4);  // 6 GPUs: ns/b takes 2
    REQUIRE(engine->ReportApplied("ns/a", 2, false, 0).ok());
    clock.Advance(absl::Seconds(10));
    // A change the cluster made: its cooldown starts now.
    REQUIRE(engine->ReportApplied("ns/a", before.replicas, false, before.generation).ok());
    before = MustRecommendation(*engine, "ns/a");
    absl::StatusOr<JobView> view = engine->GetJob("ns/a");
    REQUIRE(view.ok());
    view_before = *view;
  }  // the engine is gone; the file stays

  auto engine = Start(path, &clock);
  absl::StatusOr<JobView> view = engine->GetJob("ns/a");
  REQUIRE(view.ok());
  CHECK(view->spec == view_before.spec);
  CHECK(view->status.current_replicas == 4);
  CHECK(view->status.last_applied_generation == before.generation);
  CHECK(view->status.last_applied_at == view_before.status.last_applied_at);
  CHECK(view->status.registered_at == view_before.status.registered_at);
  CHECK(engine->ListJobs().size() == 2);
  CHECK(engine->GetCluster().total_gpus == 6u);
  // Served at once, before any plan: the recommendation and its generation.
  const Recommendation restored = MustRecommendation(*engine, "ns/a");
  CHECK(restored.generation == before.generation);
  CHECK(restored.replicas == before.replicas);
  CHECK(restored.reason == before.reason);
  // The first plan after the restart changes nothing the cluster runs.
  engine->Replan();
  CHECK(MustRecommendation(*engine, "ns/a").generation == before.generation);
  CHECK(MustRecommendation(*engine, "ns/a").replicas == before.replicas);
}

TEST_CASE("a restarted engine fits on the checkpointed measurements and keeps its sizes") {
  TempDir dir;
  const std::string path = dir.File("state.db");
  ManualClock clock;
  EngineOptions options;  // the planner policy: it sizes jobs by their curves
  Recommendation before;
  uint64_t processed_before = 0;
  {
    auto engine = Start(path, &clock, options);
    JobSpec spec = Spec("ns/a", 1, 8);
    spec.policy = "";
    spec.total_samples = 100'000'000;
    MustRegister(*engine, spec);
    MustSetCapacity(*engine, 8);
    // Measured at 1, 2 and 4 replicas: a job that scales well.
    for (uint32_t n : {1u, 2u, 4u}) {
      REQUIRE(engine->ReportApplied("ns/a", n, false, 0).ok());
      testing::MustIngest(*engine, "ns/a", {"a-worker-0", "a-worker-1"}, n, 0.2 + 0.005 * (n - 1),
                          20);
      clock.Advance(absl::Seconds(61));
      engine->Replan();
    }
    before = MustRecommendation(*engine, "ns/a");
    REQUIRE(engine->ReportApplied("ns/a", before.replicas, false, before.generation).ok());
    clock.Advance(absl::Seconds(31));  // past plan_interval: the next plan checkpoints
    engine->Replan();
    before = MustRecommendation(*engine, "ns/a");
    processed_before = engine->GetJob("ns/a")->status.samples_processed;
    REQUIRE(processed_before > 0);
  }

  auto engine = Start(path, &clock, options);
  absl::StatusOr<JobView> view = engine->GetJob("ns/a");
  REQUIRE(view.ok());
  int observed = 0;
  for (const CurvePoint& p : view->curve) observed += p.observed;
  CHECK(observed == 3);  // 1, 2 and 4, from the checkpoint
  CHECK(view->status.samples_processed == processed_before);
  clock.Advance(absl::Seconds(1));
  engine->Replan();
  const Recommendation after = MustRecommendation(*engine, "ns/a");
  CHECK(after.replicas == before.replicas);
  CHECK(after.generation == before.generation);
}

TEST_CASE("a restarted engine keeps a goodput job's noise scale and progress at M0") {
  TempDir dir;
  const std::string path = dir.File("state.db");
  ManualClock clock;
  std::optional<double> noise_before;
  std::optional<uint64_t> progress_before;
  {
    auto engine = Start(path, &clock);
    JobSpec spec = Spec("ns/g", 1, 8);
    spec.policy = "";
    spec.total_samples = 1'000'000;
    spec.batch_scaling = BatchLimits{.initial_batch = 32, .max_batch = 1024};
    MustRegister(*engine, spec);
    REQUIRE(engine->ReportApplied("ns/g", 4, false, 0).ok());
    // Per-sample noise 50 over |G|^2 1 (the step's variance over 4 x 32):
    // a noise scale of 50, so 128 samples per step count 82/178 at M0.
    std::vector<StepSample> samples(40);
    for (size_t k = 0; k < samples.size(); ++k) {
      samples[k].job_id = "ns/g";
      samples[k].pod = k % 2 ? "g-worker-0" : "g-worker-1";
      samples[k].world_size = 4;
      samples[k].step_seconds = 0.3;
      samples[k].grad_sqr = 1;
      samples[k].grad_var = 50.0 / 128;
    }
    REQUIRE(engine->Ingest(samples).accepted == samples.size());
    clock.Advance(absl::Seconds(31));  // past plan_interval: the next plan checkpoints
    engine->Replan();
    const JobView view = *engine->GetJob("ns/g");
    noise_before = view.status.gradient_noise_scale;
    progress_before = view.status.progress_samples;
    REQUIRE(noise_before.has_value());
    CHECK(*noise_before == Approx(50));
    REQUIRE(progress_before.has_value());
    CHECK(double(*progress_before) == Approx(view.status.samples_processed * 82.0 / 178).margin(1));
  }
  // Nothing reported since the restart: the checkpoint's statistics.
  auto engine = Start(path, &clock);
  absl::StatusOr<JobView> view = engine->GetJob("ns/g");
  REQUIRE(view.ok());
  REQUIRE(view->status.gradient_noise_scale.has_value());
  CHECK(*view->status.gradient_noise_scale == Approx(*noise_before).epsilon(1e-12));
  CHECK(view->status.progress_samples == progress_before);
}

TEST_CASE("a restarted engine keeps a kubedl job's finished exploration") {
  TempDir dir;
  const std::string path = dir.File("state.db");
  ManualClock clock;
  // Runs the job at `replicas`, measured at `step_seconds`, and plans.
  auto run_at = [&](DecisionEngine& engine, uint32_t replicas, double step_seconds) {
    const Recommendation rec = MustRecommendation(engine, "ns/a");
    REQUIRE(rec.replicas == replicas);
    REQUIRE(engine.ReportApplied("ns/a", replicas, false, rec.generation).ok());
    testing::MustIngest(engine, "ns/a", {"a-worker-0"}, replicas, step_seconds, 20);
    clock.Advance(absl::Seconds(61));  // past the cooldown and the plan interval
    engine.Replan();
  };
  {
    auto engine = Start(path, &clock);
    JobSpec spec = Spec("ns/a", 1, 8);
    spec.policy = "kubedl";
    MustRegister(*engine, spec);
    MustSetCapacity(*engine, 8);
    run_at(*engine, 1, 0.2);  // doubles to 2
    run_at(*engine, 2, 0.5);  // slower at 2: back to 1, exploration over
    run_at(*engine, 1, 0.2);
    const Recommendation settled = MustRecommendation(*engine, "ns/a");
    REQUIRE(settled.replicas == 1);
    REQUIRE_THAT(settled.reason, Catch::Contains("finished exploring"));
  }
  auto engine = Start(path, &clock);
  clock.Advance(absl::Seconds(61));
  engine->Replan();
  // Without its memory kubedl would explore from 1 again (here its own
  // restart-payback check would hold it back, with another reason).
  const Recommendation after = MustRecommendation(*engine, "ns/a");
  CHECK(after.replicas == 1);
  CHECK_THAT(after.reason, Catch::Contains("finished exploring"));
}

TEST_CASE("GetCluster says where state is kept and when measurements were last checkpointed") {
  TempDir dir;
  const std::string path = dir.File("state.db");
  ManualClock clock;
  auto engine = Start(path, &clock);
  CHECK(engine->GetCluster().state_backend == "sqlite:" + path);
  CHECK(engine->GetCluster().last_checkpoint_at == absl::InfinitePast());
  MustRegister(*engine, Spec("ns/a", 1, 4));  // plans, and checkpoints, at once
  const absl::Time first = clock.Now();
  CHECK(engine->GetCluster().last_checkpoint_at == first);
  clock.Advance(absl::Seconds(5));  // within the plan interval: no checkpoint
  engine->Replan();
  CHECK(engine->GetCluster().last_checkpoint_at == first);
  clock.Advance(absl::Seconds(30));
  engine->Replan();
  CHECK(engine->GetCluster().last_checkpoint_at == clock.Now());

  auto in_memory = MustCreate(EngineOptions{}, &clock);
  CHECK(in_memory->GetCluster().state_backend == "memory");
  in_memory->Replan();
  CHECK(in_memory->GetCluster().last_checkpoint_at == absl::InfinitePast());
}

TEST_CASE("generations continue across restarts, also for a job registered again") {
  TempDir dir;
  const std::string path = dir.File("state.db");
  ManualClock clock;
  uint64_t last = 0;
  {
    auto engine = Start(path, &clock);
    MustRegister(*engine, Spec("ns/a", 1, 4));
    MustSetCapacity(*engine, 4);
    MustSetCapacity(*engine, 2);  // a new target: a new generation
    last = MustRecommendation(*engine, "ns/a").generation;
    REQUIRE(last == 2);
  }
  {
    auto engine = Start(path, &clock);
    MustSetCapacity(*engine, 3);
    const uint64_t next = MustRecommendation(*engine, "ns/a").generation;
    CHECK(next == last + 1);
    last = next;
    REQUIRE(engine->DeregisterJob("ns/a").ok());
  }
  auto engine = Start(path, &clock);
  CHECK(engine->GetJob("ns/a").status().code() == absl::StatusCode::kNotFound);
  MustRegister(*engine, Spec("ns/a", 1, 4));
  // Registered again after a restart: it continues from the last generation
  // a controller may have applied, never from 1.
  CHECK(MustRecommendation(*engine, "ns/a").generation == last + 1);
}

// A state store that refuses writes when told to: a disk that fills up or
// a file that goes away, which a real SQLite file cannot be made to do on
// cue. Everything else goes to a real in-memory store.
class RefusingStore : public StateStore {
 public:
  RefusingStore() : inner_(*OpenStateStore("memory")) {}
  bool refuse = false;
  std::string Describe() const override { return "refusing"; }
  absl::StatusOr<StoredState> Load() override { return inner_->Load(); }
  absl::Status PutJob(const StoredJob& job) override {
    return refuse ? Refusal() : inner_->PutJob(job);
  }
  absl::Status DeleteJob(std::string_view id, uint64_t generation) override {
    return refuse ? Refusal() : inner_->DeleteJob(id, generation);
  }
  absl::Status PutCapacity(const CapacityReport& gpus) override {
    return refuse ? Refusal() : inner_->PutCapacity(gpus);
  }
  absl::Status PutQueues(std::span<const QueueSpec> queues) override {
    return refuse ? Refusal() : inner_->PutQueues(queues);
  }
  absl::Status PutRecommendations(std::span<const Recommendation> recs) override {
    return refuse ? Refusal() : inner_->PutRecommendations(recs);
  }
  absl::Status PutMeasurements(std::span<const StoredMeasurements> jobs) override {
    return refuse ? Refusal() : inner_->PutMeasurements(jobs);
  }

 private:
  static absl::Status Refusal() { return absl::UnavailableError("disk full"); }
  std::unique_ptr<StateStore> inner_;
};

TEST_CASE("a change the state store cannot record fails its call and changes nothing") {
  ManualClock clock;
  auto store = std::make_shared<RefusingStore>();
  EngineOptions options;
  options.state = store;
  auto engine = MustCreate(options, &clock);
  MustRegister(*engine, Spec("ns/a", 1, 4));
  MustSetCapacity(*engine, 4);
  const Recommendation rec = MustRecommendation(*engine, "ns/a");

  store->refuse = true;
  absl::StatusOr<JobView> registered = engine->RegisterJob(Spec("ns/b", 1, 4));
  CHECK(registered.status().code() == absl::StatusCode::kUnavailable);
  CHECK(engine->GetJob("ns/b").status().code() == absl::StatusCode::kNotFound);
  CHECK(engine->UpdateJob(Spec("ns/a", 2, 4)).status().code() == absl::StatusCode::kUnavailable);
  CHECK(engine->GetJob("ns/a")->spec.min_replicas == 1);
  CHECK(engine->ReportApplied("ns/a", 4, false, rec.generation).status().code() ==
        absl::StatusCode::kUnavailable);
  CHECK(engine->GetJob("ns/a")->status.current_replicas == 0);
  CHECK(engine->SetCapacity(1).status().code() == absl::StatusCode::kUnavailable);
  CHECK(engine->GetCluster().total_gpus == 4u);
  CHECK(engine->DeregisterJob("ns/a").code() == absl::StatusCode::kUnavailable);
  CHECK(engine->GetJob("ns/a").ok());
}

TEST_CASE("a plan whose new recommendations cannot be recorded is not published") {
  ManualClock clock;
  auto store = std::make_shared<RefusingStore>();
  EngineOptions options;
  options.state = store;
  options.plan_coalesce = absl::Hours(1);  // registrations wait for a plan we run
  auto engine = MustCreate(options, &clock);
  engine->StartTimer();
  MustSetCapacity(*engine, 8);
  absl::StatusOr<JobView> registered = engine->RegisterJob(Spec("ns/a", 1, 4));
  REQUIRE(registered.ok());
  REQUIRE(registered->plan_pending);

  // Its first recommendation (generation 1) cannot be recorded: nobody sees it.
  store->refuse = true;
  engine->Replan();
  CHECK(engine->GetRecommendation("ns/a").status().code() == absl::StatusCode::kUnavailable);
  // Once it can, the next plan publishes it.
  store->refuse = false;
  engine->Replan();
  CHECK(MustRecommendation(*engine, "ns/a").generation == 1);
  absl::StatusOr<StoredState> kept = store->Load();
  REQUIRE(kept.ok());
  REQUIRE(kept->recommendations.size() == 1);
  CHECK(kept->recommendations[0].generation == 1);

  // A refused write may have landed all the same (a timeout): its
  // generation is never given to another target. Generation 2 (4 -> 2
  // replicas) is refused; the next plan wants 3: generation 3.
  JobSpec narrower = Spec("ns/a", 1, 2);
  REQUIRE(engine->UpdateJob(narrower).ok());
  store->refuse = true;
  engine->Replan();
  CHECK(MustRecommendation(*engine, "ns/a").generation == 1);  // not published
  store->refuse = false;
  REQUIRE(engine->UpdateJob(Spec("ns/a", 1, 3)).ok());
  engine->Replan();
  const Recommendation after = MustRecommendation(*engine, "ns/a");
  CHECK(after.replicas == 3);
  CHECK(after.generation == 3);
  // Back to the refused target: it gets a new generation too (above 3).
  REQUIRE(engine->UpdateJob(narrower).ok());
  engine->Replan();
  CHECK(MustRecommendation(*engine, "ns/a").generation == 4);
  engine->StopTimer();
}

TEST_CASE(
    "a follower's engine copies the leader's state, and forgets an old registration's "
    "recommendation") {
  ManualClock clock;
  std::shared_ptr<StateStore> shared = *OpenStateStore("memory");
  EngineOptions leader_options;
  leader_options.state = shared;
  leader_options.plan_coalesce = absl::Hours(1);  // changes wait for the plans the test runs
  auto leader = MustCreate(leader_options, &clock);
  leader->StartTimer();
  EngineOptions follower_options;
  follower_options.state = shared;
  follower_options.start_leading = false;
  auto follower = MustCreate(follower_options, &clock);
  auto follow = [&] { follower->ApplyReplicated(ReplicatedChange::Full(*shared->Load())); };

  MustSetCapacity(*leader, 6);
  MustRegister(*leader, Spec("ns/a", 1, 4));
  MustRegister(*leader, Spec("ns/b", 1, 2));
  leader->Replan();
  follower->Replan();  // a follower plans nothing
  CHECK(follower->ListRecommendations().empty());
  follow();
  CHECK(follower->GetCluster().total_gpus == 6u);
  const Recommendation a = MustRecommendation(*leader, "ns/a");
  CHECK(MustRecommendation(*follower, "ns/a").generation == a.generation);
  CHECK(MustRecommendation(*follower, "ns/a").replicas == a.replicas);

  // Deregistered and registered again before the follower looked: the
  // first registration's recommendation is not the new job's.
  REQUIRE(leader->DeregisterJob("ns/a").ok());
  clock.Advance(absl::Seconds(1));  // a new registration time
  MustRegister(*leader, Spec("ns/a", 1, 1));
  follow();  // the new registration, not yet planned
  CHECK_FALSE(follower->GetRecommendation("ns/a").ok());
  REQUIRE(follower->GetJob("ns/a").ok());
  leader->Replan();
  const Recommendation a_again = MustRecommendation(*leader, "ns/a");
  CHECK(a_again.generation > a.generation);  // generations never repeat
  follow();
  CHECK(MustRecommendation(*follower, "ns/a").generation == a_again.generation);
  CHECK(MustRecommendation(*follower, "ns/a").replicas == 1);
  absl::StatusOr<JobView> copied = follower->GetJob("ns/a");
  REQUIRE(copied.ok());
  CHECK(copied->spec.max_replicas == 1);

  // Gone on the leader: gone on the follower.
  REQUIRE(leader->DeregisterJob("ns/b").ok());
  leader->Replan();
  follow();
  CHECK(follower->GetJob("ns/b").status().code() == absl::StatusCode::kNotFound);
  CHECK(follower->ListRecommendations().size() == 1);

  // Promoted, it plans from what it copied and keeps the generation.
  leader->StopTimer();
  follower->SetLeading(true);
  CHECK(MustRecommendation(*follower, "ns/a").generation == a_again.generation);
}

TEST_CASE("a kept job this server cannot take stops start-up, naming the job and the file") {
  TempDir dir;
  const std::string path = dir.File("state.db");
  ManualClock clock;
  {
    auto engine = Start(path, &clock);
    MustRegister(*engine, Spec("ns/a", 1, 64));
  }
  absl::StatusOr<std::unique_ptr<StateStore>> store = OpenStateStore("sqlite:" + path);
  REQUIRE(store.ok());
  EngineOptions options;
  options.spec_limits.max_replicas = 16;
  options.state = *std::move(store);
  absl::StatusOr<std::unique_ptr<DecisionEngine>> engine = DecisionEngine::Create(options, &clock);
  REQUIRE(!engine.ok());
  CHECK(engine.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK_THAT(std::string(engine.status().message()),
             Catch::Contains(path) && Catch::Contains("ns/a"));
}

// Calls write the state store while plans checkpoint to it from another
// thread (ThreadSanitizer in CI): every acknowledged change is in the file.
TEST_CASE("changes and checkpoints write one state file at once, and all of it is kept",
          "[concurrency]") {
  TempDir dir;
  const std::string path = dir.File("state.db");
  ManualClock clock;
  constexpr int kJobs = 40;
  {
    auto engine = Start(path, &clock);
    MustSetCapacity(*engine, 4 * kJobs);
    std::atomic<bool> done{false};
    std::thread planner([&] {
      while (!done.load()) {
        clock.Advance(absl::Seconds(31));  // each plan is due a checkpoint
        engine->Replan();
      }
    });
    int failures = 0;
    for (int i = 0; i < kJobs; ++i) {
      const std::string id = "ns/job-" + std::to_string(i);
      failures += !engine->RegisterJob(Spec(id, 1, 4)).ok();
      std::vector<StepSample> batch(10);
      for (StepSample& sample : batch) {
        sample.job_id = id;
        sample.pod = "worker-0";
        sample.world_size = 1;
        sample.step_seconds = 0.2;
      }
      failures += engine->Ingest(batch).accepted != batch.size();
      failures += !engine->ReportApplied(id, 2, false, 0).ok();
    }
    done.store(true);
    planner.join();
    REQUIRE(failures == 0);
    clock.Advance(absl::Seconds(31));
    engine->Replan();  // a last checkpoint, due after the last plan's
  }
  auto engine = Start(path, &clock);
  REQUIRE(engine->ListJobs().size() == kJobs);
  for (const JobView& view : engine->ListJobs()) {
    CHECK(view.status.current_replicas == 2);
    CHECK(view.curve.size() == 4);
    CHECK(view.curve[0].observed);  // measured at 1 replica, from the checkpoint
  }
}

}  // namespace
}  // namespace rescale

namespace rescale {
namespace {

TEST_CASE(
    "a restarted engine keeps the capacity's node slots and allocatable GPUs, and a follower "
    "copies them") {
  TempDir dir;
  const std::string path = dir.File("state.db");
  ManualClock clock;
  const std::vector<ReplicaSlots> slots = {{8, 1}, {4, 3}};
  {
    auto engine = Start(path, &clock);
    REQUIRE(engine->SetCapacity(CapacityReport{16, slots, 24, {}}).ok());
  }
  {
    auto engine = Start(path, &clock);
    const ClusterView view = engine->GetCluster();
    CHECK(view.total_gpus == 16u);
    CHECK(view.slots == slots);
    CHECK(view.allocatable_gpus == 24);
    // The total alone clears them, also in the file.
    MustSetCapacity(*engine, 12);
  }
  auto engine = Start(path, &clock);
  CHECK(engine->GetCluster().total_gpus == 12u);
  CHECK(engine->GetCluster().slots.empty());
  CHECK(engine->GetCluster().allocatable_gpus == 0);

  // A follower gets them from the leader's store.
  std::shared_ptr<StateStore> shared = *OpenStateStore("memory");
  EngineOptions leader_options;
  leader_options.state = shared;
  auto leader = MustCreate(leader_options, &clock);
  EngineOptions follower_options;
  follower_options.state = shared;
  follower_options.start_leading = false;
  auto follower = MustCreate(follower_options, &clock);
  REQUIRE(leader->SetCapacity(CapacityReport{16, slots, 24, {}}).ok());
  follower->ApplyReplicated(ReplicatedChange::Full(*shared->Load()));
  CHECK(follower->GetCluster().slots == slots);
  CHECK(follower->GetCluster().allocatable_gpus == 24);
  // A change that carries only the allocatable GPUs (as a watch delivers
  // each key) leaves the rest as it was.
  ReplicatedChange allocatable_only;
  allocatable_only.capacity_allocatable_gpus = 20;
  follower->ApplyReplicated(std::move(allocatable_only));
  CHECK(follower->GetCluster().allocatable_gpus == 20);
  CHECK(follower->GetCluster().slots == slots);
}

}  // namespace
}  // namespace rescale
