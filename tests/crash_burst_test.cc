// Crash test of group commit: rescaled on SQLite is killed with SIGKILL while
// eight clients register jobs and report applied state concurrently, so
// that changes are waiting in the engine's writer queue and one commit is
// in flight when it dies. Started again on the same --state, it must have
// every change it acknowledged (a reply is sent only once its change is
// durable); a change that was in flight but unacknowledged may or may not be
// there, never half of it.
//
// The test waits on the clients through a condition variable (a count of
// acknowledgements), never by sleeping for a guessed time.
#include <grpcpp/create_channel.h>
#include <signal.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "rescale/v1/rescale.grpc.pb.h"
#include "tests/rescaled_process.h"
#include "tests/temp_dir.h"

namespace {

namespace v1 = rescale::v1;
using rescale::testing::Rescaled;
using rescale::testing::TempDir;

// What the clients saw acknowledged: per job, its max_replicas and the
// replicas of its last acknowledged applied report (0 = none).
class Acks {
 public:
  void Registered(const std::string& id, uint32_t max_replicas) {
    std::lock_guard<std::mutex> lock(mu_);
    jobs_[id].first = max_replicas;
    ++count_;
    changed_.notify_all();
  }
  void Applied(const std::string& id, uint32_t replicas) {
    std::lock_guard<std::mutex> lock(mu_);
    jobs_[id].second = replicas;
    ++count_;
    changed_.notify_all();
  }
  void Stopped() {
    std::lock_guard<std::mutex> lock(mu_);
    ++stopped_;
    changed_.notify_all();
  }
  // Blocks until `count` acknowledgements (or every client stopped).
  void Await(size_t count, int clients) {
    std::unique_lock<std::mutex> lock(mu_);
    changed_.wait(lock, [&] { return count_ >= count || stopped_ == clients; });
  }
  std::map<std::string, std::pair<uint32_t, uint32_t>> Jobs() {
    std::lock_guard<std::mutex> lock(mu_);
    return jobs_;
  }

 private:
  std::mutex mu_;
  std::condition_variable changed_;
  std::map<std::string, std::pair<uint32_t, uint32_t>> jobs_;  // guarded by mu_
  size_t count_ = 0;                                           // guarded by mu_
  int stopped_ = 0;                                            // guarded by mu_
};

// One client: registers a job, reports it applied at a size, and again,
// until a call fails (rescaled was killed).
void Client(const std::string& address, int client, Acks& acks) {
  auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  auto jobs = v1::JobService::NewStub(channel);
  auto recs = v1::RecommendationService::NewStub(channel);
  for (int i = 0;; ++i) {
    const std::string id = absl::StrCat("burst/c", client, "-job-", i);
    const uint32_t max_replicas = 2 + static_cast<uint32_t>((client + i) % 7);
    grpc::ClientContext register_ctx;
    v1::RegisterJobRequest req;
    req.mutable_spec()->set_job_id(id);
    req.mutable_spec()->set_min_replicas(1);
    req.mutable_spec()->set_max_replicas(max_replicas);
    v1::Job job;
    if (!jobs->RegisterJob(&register_ctx, req, &job).ok()) break;
    acks.Registered(id, max_replicas);
    bool failed = false;
    for (uint32_t replicas : {1u, max_replicas}) {
      grpc::ClientContext ctx;
      v1::ReportAppliedRequest applied;
      applied.set_job_id(id);
      applied.set_replicas(replicas);
      v1::ReportAppliedResponse reply;
      if (!recs->ReportApplied(&ctx, applied, &reply).ok()) {
        failed = true;
        break;
      }
      acks.Applied(id, replicas);
    }
    if (failed) break;
  }
  acks.Stopped();
}

}  // namespace

TEST_CASE(
    "rescaled killed during a burst of concurrent durable writes keeps every acknowledged one") {
  TempDir dir;
  const std::string state = "sqlite:" + dir.File("state.db");
  // No capacity limit on jobs: the clients register as fast as they can.
  auto rescaled = Rescaled::Start({"--state=" + state, "--max_jobs=100000"});
  constexpr int kClients = 8;
  Acks acks;
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c] { Client(rescaled->address, c, acks); });
  }
  // Killed once the burst is well under way: every client has calls in
  // flight, so the writer has a queue and a commit of its own.
  acks.Await(600, kClients);
  rescaled->process->Signal(SIGKILL);
  for (std::thread& t : clients) t.join();
  rescaled->process->Kill();  // reap
  const auto acked = acks.Jobs();
  REQUIRE(acked.size() >= 100);

  rescaled = Rescaled::Start({"--state=" + state, "--max_jobs=100000"});
  for (const auto& [id, ack] : acked) {
    INFO(id);
    grpc::ClientContext ctx;
    v1::GetJobRequest req;
    req.set_job_id(id);
    v1::Job job;
    grpc::Status status = rescaled->jobs->GetJob(&ctx, req, &job);
    INFO(status.error_message());
    REQUIRE(status.ok());  // every acknowledged registration
    CHECK(job.spec().max_replicas() == ack.first);
    // Every acknowledged applied report; a later one may have landed
    // unacknowledged (killed before its reply), and only the job's own
    // sizes are possible.
    const uint32_t current = job.status().current_replicas();
    if (ack.second == ack.first) {
      CHECK(current == ack.first);
    } else if (ack.second == 1) {
      CHECK((current == 1 || current == ack.first));
    }
  }
}
