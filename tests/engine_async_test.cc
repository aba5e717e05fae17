// The engine's asynchronous mutations (RegisterJobAsync and the others),
// which gRPC's handlers use so that no RPC thread waits for the state
// store: they answer as the waiting forms do, refusals at once on the
// caller's thread, accepted changes once durable; a change the store
// refuses changes nothing; and with plan_coalesce 0 the answer comes after
// the plan that includes the change.
#include <catch2/catch.hpp>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "rescale/clock.h"
#include "rescale/decision_engine.h"
#include "rescale/state_store.h"
#include "tests/engine_helpers.h"
#include "tests/temp_dir.h"

namespace rescale {
namespace {

using testing::MustCreate;
using testing::TempDir;

JobSpec Spec(const std::string& id, uint32_t min, uint32_t max) {
  JobSpec spec;
  spec.job_id = id;
  spec.min_replicas = min;
  spec.max_replicas = max;
  spec.local_batch_size = 32;
  return spec;
}

// Holds what a `done` received, and when it ran: on which thread, and
// whether the test's thread was still inside the call.
template <typename T>
class Answer {
 public:
  std::function<void(T)> Callback() {
    return [this](T value) {
      std::lock_guard<std::mutex> lock(mu_);
      value_ = std::move(value);
      on_caller_thread_ = std::this_thread::get_id() == caller_;
      changed_.notify_all();
    };
  }
  T Await() {
    std::unique_lock<std::mutex> lock(mu_);
    changed_.wait(lock, [&] { return value_.has_value(); });
    return *value_;
  }
  bool on_caller_thread() {
    std::lock_guard<std::mutex> lock(mu_);
    return on_caller_thread_;
  }

 private:
  const std::thread::id caller_ = std::this_thread::get_id();
  std::mutex mu_;
  std::condition_variable changed_;
  std::optional<T> value_;         // guarded by mu_
  bool on_caller_thread_ = false;  // guarded by mu_
};

std::unique_ptr<DecisionEngine> OnSqlite(const TempDir& dir, Clock* clock,
                                         EngineOptions options = {}) {
  options.state = *OpenStateStore("sqlite:" + dir.File("state.db"));
  return MustCreate(std::move(options), clock);
}

TEST_CASE("engine's async mutations answer as the waiting ones, refusals at once",
          "[concurrency]") {
  ManualClock clock;
  TempDir dir;
  auto engine = OnSqlite(dir, &clock);

  Answer<absl::StatusOr<JobView>> registered;
  engine->RegisterJobAsync(Spec("ns/a", 1, 4), registered.Callback());
  const absl::StatusOr<JobView> view = registered.Await();
  REQUIRE(view.ok());
  CHECK(view->spec.max_replicas == 4u);
  CHECK(view->recommendation.has_value());  // no timer: planned before the answer
  CHECK(engine->GetJob("ns/a").ok());

  // A refusal needs no write: answered on the caller's thread.
  Answer<absl::StatusOr<JobView>> again;
  engine->RegisterJobAsync(Spec("ns/a", 1, 4), again.Callback());
  CHECK(again.Await().status().code() == absl::StatusCode::kAlreadyExists);
  CHECK(again.on_caller_thread());
  Answer<absl::StatusOr<JobView>> invalid;
  engine->RegisterJobAsync(Spec("ns/b", 5, 4), invalid.Callback());
  CHECK(invalid.Await().status().code() == absl::StatusCode::kInvalidArgument);

  Answer<absl::StatusOr<JobView>> updated;
  engine->UpdateJobAsync(Spec("ns/a", 2, 6), updated.Callback());
  REQUIRE(updated.Await().ok());
  CHECK(engine->GetJob("ns/a")->spec.min_replicas == 2u);

  Answer<absl::StatusOr<JobStatus>> applied;
  engine->ReportAppliedAsync("ns/a", 3, false, 0, applied.Callback());
  REQUIRE(applied.Await().ok());
  CHECK(applied.Await()->current_replicas == 3u);

  Answer<absl::StatusOr<ClusterView>> capacity;
  engine->SetCapacityAsync(CapacityReport{8, {}, 0, {}}, capacity.Callback());
  REQUIRE(capacity.Await().ok());
  CHECK(capacity.Await()->total_gpus == 8u);

  Answer<absl::Status> removed;
  engine->DeregisterJobAsync("ns/a", removed.Callback());
  CHECK(removed.Await().ok());
  CHECK(engine->GetJob("ns/a").status().code() == absl::StatusCode::kNotFound);
  Answer<absl::Status> unknown;
  engine->DeregisterJobAsync("ns/a", unknown.Callback());
  CHECK(unknown.Await().code() == absl::StatusCode::kNotFound);
  CHECK(unknown.on_caller_thread());

  // Everything acknowledged is in the file.
  engine.reset();
  auto restarted = OnSqlite(dir, &clock);
  CHECK(restarted->GetCluster().total_gpus == 8u);
  CHECK(restarted->GetJob("ns/a").status().code() == absl::StatusCode::kNotFound);
}

TEST_CASE(
    "engine's async registration with plan_coalesce 0 answers after its plan, off the "
    "caller's thread",
    "[concurrency]") {
  ManualClock clock;
  TempDir dir;
  EngineOptions options;
  options.plan_coalesce = absl::ZeroDuration();
  options.capacity_gpus = 8;
  auto engine = OnSqlite(dir, &clock, options);
  engine->StartTimer();
  Answer<absl::StatusOr<JobView>> registered;
  engine->RegisterJobAsync(Spec("ns/a", 1, 4), registered.Callback());
  const absl::StatusOr<JobView> view = registered.Await();
  REQUIRE(view.ok());
  CHECK_FALSE(view->plan_pending);
  REQUIRE(view->recommendation.has_value());
  CHECK(view->recommendation->replicas >= 1u);
  CHECK_FALSE(registered.on_caller_thread());
  engine->StopTimer();
}

}  // namespace
}  // namespace rescale
