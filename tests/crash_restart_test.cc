// Crash tests of the rescaled binary this build made, on SQLite: it is
// killed with SIGKILL in the middle of a load of registrations, applied
// reports and samples, started again on the same --state, and must have
// every acknowledged change, every size measured before its last
// checkpoint, generations that only go up, and, once the load has stopped,
// the very recommendations it served before the crash (a restart of rescaled
// must never restart a training job).
//
// The load runs in one client thread that records what rescaled
// acknowledged; the test waits on it through a condition variable and on
// rescaled through its own answers (GetCluster's planned_at and
// last_checkpoint_at), never by sleeping for a guessed time.
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <signal.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "rescale/v1/rescale.grpc.pb.h"
#include "tests/child_process.h"
#include "tests/rescaled_process.h"
#include "tests/temp_dir.h"

namespace {

namespace v1 = rescale::v1;
using rescale::testing::ChildProcess;
using rescale::testing::FromTimestamp;
using rescale::testing::Rescaled;
using rescale::testing::TempDir;

// What the load saw acknowledged, job by job.
struct Acknowledged {
  uint32_t max_replicas = 0;
  // The last ReportApplied acknowledged: replicas and generation.
  std::optional<std::pair<uint32_t, uint64_t>> applied;
  // World sizes whose samples were acknowledged, and when.
  std::map<uint32_t, absl::Time> sizes;
  // The highest generation any answer showed.
  uint64_t generation_seen = 0;
};

// Registers jobs one after another; each gets samples at 1, 2 and 4 workers
// and an applied report of its recommendation. Stops at the first failed
// call (rescaled was killed).
class Load {
 public:
  explicit Load(Rescaled& rescaled) : rescaled_(rescaled) {
    thread_ = std::thread([this] { Run(); });
  }
  ~Load() {
    if (thread_.joinable()) thread_.join();
  }

  // Blocks until `jobs` jobs are fully acknowledged (or the load stopped).
  void AwaitJobs(size_t jobs) {
    std::unique_lock<std::mutex> lock(mu_);
    changed_.wait(lock, [&] { return complete_jobs_ >= jobs || stopped_; });
  }
  std::map<std::string, Acknowledged> Acked() {
    std::lock_guard<std::mutex> lock(mu_);
    return acked_;
  }
  void Join() { thread_.join(); }
  void Stop() { stop_ = true; }

 private:
  void Run() {
    for (int i = 0; !stop_; ++i) {
      if (!OneJob(absl::StrCat("crash/job-", i))) break;
      std::lock_guard<std::mutex> lock(mu_);
      ++complete_jobs_;
      changed_.notify_all();
    }
    std::lock_guard<std::mutex> lock(mu_);
    stopped_ = true;
    changed_.notify_all();
  }

  bool OneJob(const std::string& id) {
    const uint32_t max_replicas = 8;
    {
      grpc::ClientContext ctx;
      v1::RegisterJobRequest req;
      req.mutable_spec()->set_job_id(id);
      req.mutable_spec()->set_min_replicas(1);
      req.mutable_spec()->set_max_replicas(max_replicas);
      req.mutable_spec()->set_local_batch_size(32);
      req.mutable_spec()->set_policy("planner");
      v1::Job reply;
      if (!rescaled_.jobs->RegisterJob(&ctx, req, &reply).ok()) return false;
      std::lock_guard<std::mutex> lock(mu_);
      acked_[id].max_replicas = max_replicas;
    }
    const std::string pod = absl::StrCat(id.substr(id.find('/') + 1), "-w");
    for (uint32_t size : {1u, 2u, 4u}) {
      grpc::ClientContext ctx;
      v1::SampleBatch batch;
      batch.set_job_id(id);
      batch.set_world_size(size);
      for (uint32_t worker = 0; worker < size; ++worker) {
        for (uint64_t step = 1; step <= 12; ++step) {
          v1::StepSample* sample = batch.add_samples();
          sample->set_pod(absl::StrCat(pod, worker));
          // Sublinear scaling: 0.2 s at one worker, growing with the size.
          sample->set_step_seconds(0.2 + 0.02 * (size - 1) + 0.001 * static_cast<double>(step % 3));
          sample->set_step(step);
        }
      }
      v1::IngestSummary summary;
      if (!rescaled_.metrics->ReportSamples(&ctx, batch, &summary).ok()) return false;
      std::lock_guard<std::mutex> lock(mu_);
      acked_[id].sizes[size] = absl::Now();
    }
    v1::Recommendation rec;
    {
      grpc::ClientContext ctx;
      v1::GetRecommendationRequest req;
      req.set_job_id(id);
      grpc::Status status = rescaled_.recs->GetRecommendation(&ctx, req, &rec);
      // UNAVAILABLE also means "first plan pending": then apply 1 worker out
      // of band, as a cluster that started the job at its minimum.
      if (!status.ok()) rec.Clear();
    }
    {
      grpc::ClientContext ctx;
      v1::ReportAppliedRequest req;
      req.set_job_id(id);
      req.set_replicas(rec.generation() > 0 ? rec.replicas() : 1);
      req.set_suspended(rec.generation() > 0 && rec.suspend());
      req.set_generation(rec.generation());
      v1::ReportAppliedResponse reply;
      if (!rescaled_.recs->ReportApplied(&ctx, req, &reply).ok()) return false;
      std::lock_guard<std::mutex> lock(mu_);
      acked_[id].applied = {req.replicas(), req.generation()};
      acked_[id].generation_seen = std::max(acked_[id].generation_seen, rec.generation());
    }
    return true;
  }

  Rescaled& rescaled_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable changed_;
  std::map<std::string, Acknowledged> acked_;  // guarded by mu_
  size_t complete_jobs_ = 0;                   // guarded by mu_
  bool stopped_ = false;                       // guarded by mu_
};

TEST_CASE("rescaled killed with SIGKILL under load restarts with everything it acknowledged") {
  TempDir dir;
  const std::string state = "sqlite:" + dir.File("state.db");
  auto rescaled = Rescaled::Start({"--state=" + state});

  // Crash 1: in the middle of the load.
  std::map<std::string, Acknowledged> acked;
  absl::Time checkpoint_before_kill;
  {
    Load load(*rescaled);
    load.AwaitJobs(12);
    // A checkpoint after the first jobs' samples, then the kill while the
    // load goes on.
    rescaled->AwaitPlanAndCheckpointAfter(absl::Now());
    load.AwaitJobs(20);
    checkpoint_before_kill = FromTimestamp(rescaled->GetCluster().last_checkpoint_at());
    rescaled->process->Signal(SIGKILL);
    load.Join();  // its next call fails
    acked = load.Acked();
    rescaled->process->Kill();  // reap
  }
  REQUIRE(acked.size() >= 20);

  const absl::Time restarted_at = absl::Now();
  rescaled = Rescaled::Start({"--state=" + state});
  size_t sizes_checked = 0;
  for (const auto& [id, ack] : acked) {
    INFO(id);
    grpc::ClientContext ctx;
    v1::GetJobRequest req;
    req.set_job_id(id);
    v1::Job job;
    grpc::Status status = rescaled->jobs->GetJob(&ctx, req, &job);
    INFO(status.error_message());
    REQUIRE(status.ok());  // every acknowledged registration
    CHECK(job.spec().max_replicas() == ack.max_replicas);
    if (ack.applied) {  // every acknowledged applied report
      CHECK(job.status().current_replicas() == ack.applied->first);
      CHECK(job.status().last_applied_generation() == ack.applied->second);
    }
    if (job.has_recommendation()) CHECK(job.recommendation().generation() >= ack.generation_seen);
    // Every size whose samples were acknowledged before the last checkpoint.
    for (const auto& [size, acked_at] : ack.sizes) {
      if (acked_at >= checkpoint_before_kill) continue;
      INFO("size " << size);
      REQUIRE(job.curve().points_size() >= static_cast<int>(size));
      CHECK(job.curve().points(static_cast<int>(size) - 1).observed());
      ++sizes_checked;
    }
  }
  CHECK(sizes_checked >= 3 * 12);

  // Generations go on strictly above every one seen before the crash: a
  // change of every job's bounds makes new recommendations.
  rescaled->AwaitPlanAndCheckpointAfter(restarted_at);
  std::map<std::string, v1::Recommendation> before_change = rescaled->Recommendations();
  for (const auto& [id, ack] : acked) {
    grpc::ClientContext ctx;
    v1::UpdateJobRequest req;
    req.mutable_spec()->set_job_id(id);
    // Exactly two workers: the jobs that run get a new target.
    req.mutable_spec()->set_min_replicas(2);
    req.mutable_spec()->set_max_replicas(2);
    req.mutable_spec()->set_local_batch_size(32);
    req.mutable_spec()->set_policy("planner");
    v1::Job reply;
    REQUIRE(rescaled->jobs->UpdateJob(&ctx, req, &reply).ok());
  }
  rescaled->AwaitPlanAndCheckpointAfter(absl::Now());
  size_t new_generations = 0;
  size_t unacknowledged = 0;
  for (const auto& [id, rec] : rescaled->Recommendations()) {
    INFO(id);
    if (!acked.count(id)) {
      // Registered durably, but killed before its answer: at most the one
      // registration in flight.
      ++unacknowledged;
      continue;
    }
    const v1::Recommendation& old = before_change.at(id);
    if (rec.replicas() == old.replicas() && rec.suspend() == old.suspend()) continue;
    CHECK(rec.generation() > old.generation());
    CHECK(rec.generation() > acked.at(id).generation_seen);
    ++new_generations;
  }
  CHECK(new_generations > 0);
  CHECK(unacknowledged <= 1);

  // Crash 2, with the load stopped: every job runs what it was recommended.
  for (const auto& [id, rec] : rescaled->Recommendations()) {
    grpc::ClientContext ctx;
    v1::ReportAppliedRequest req;
    req.set_job_id(id);
    req.set_replicas(rec.replicas());
    req.set_suspended(rec.suspend());
    req.set_generation(rec.generation());
    v1::ReportAppliedResponse reply;
    REQUIRE(rescaled->recs->ReportApplied(&ctx, req, &reply).ok());
  }
  rescaled->AwaitPlanAndCheckpointAfter(absl::Now());
  const std::map<std::string, v1::Recommendation> served = rescaled->Recommendations();
  rescaled->process->Kill();

  const absl::Time second_restart = absl::Now();
  rescaled = Rescaled::Start({"--state=" + state});
  auto same_targets = [&](const std::map<std::string, v1::Recommendation>& now) {
    REQUIRE(now.size() == served.size());
    for (const auto& [id, rec] : served) {
      INFO(id);
      REQUIRE(now.count(id));
      CHECK(now.at(id).replicas() == rec.replicas());
      CHECK(now.at(id).suspend() == rec.suspend());
      CHECK(now.at(id).generation() == rec.generation());
    }
  };
  same_targets(rescaled->Recommendations());  // as restored
  rescaled->AwaitPlanAndCheckpointAfter(second_restart);
  same_targets(rescaled->Recommendations());  // and as planned again
}

}  // namespace
