// Tests of rescale-adapter's plan boundaries: the adapter applies a plan
// whole, releases first, when the plan's changes reach it in several reads
// with the applier waking in between, and still applies a rescaled that
// sends no PLAN_END (plan_id 0) as it did before. Also what only a scripted
// rescaled can send an adapter-registered job: a recommended batch.
//
// rescaled is scripted here (ScriptedRescaled): the test decides which
// event the stream carries and when, which a real rescaled cannot be made
// to do deterministically. The Kubernetes side is the real libcurl client
// against the in-process FakeKubeApi (tests/fake_kube_api.h), as in
// adapter_test.cc. Nothing sleeps: tests wait, with a deadline, on the
// adapter's observer events or the fake API server's request log.
#include <grpcpp/grpcpp.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "client/adapter/adapter.h"
#include "client/adapter/curl_kube_client.h"
#include "rescale/v1/rescale.grpc.pb.h"
#include "spdlog/spdlog.h"
#include "tests/fake_kube_api.h"

namespace {

using json = nlohmann::json;
using rescale::adapter::AdapterEvent;
using rescale::testing::FakeKubeApi;
using rescale::testing::RecordedRequest;
using Kind = AdapterEvent::Kind;
namespace v1 = rescale::v1;

constexpr auto kDeadline = std::chrono::seconds(20);

// A rescaled whose WatchRecommendations stream carries what the test pushes,
// when it pushes it; registrations, capacity, queues and applied reports are
// accepted and forgotten.
class ScriptedRescaled final : public v1::JobService::Service,
                               public v1::ClusterService::Service,
                               public v1::RecommendationService::Service {
 public:
  ScriptedRescaled() {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(static_cast<v1::JobService::Service*>(this));
    builder.RegisterService(static_cast<v1::ClusterService::Service*>(this));
    builder.RegisterService(static_cast<v1::RecommendationService::Service*>(this));
    server_ = builder.BuildAndStart();
    REQUIRE(server_ != nullptr);
  }
  ~ScriptedRescaled() override {
    Close();
    server_->Shutdown(std::chrono::system_clock::now());
  }

  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

  // Queues `event` for the stream (the first watch; there is one).
  void Push(v1::RecommendationEvent event) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      script_.push_back(std::move(event));
    }
    cv_.notify_all();
  }
  void Push(v1::RecommendationEvent::Type type, const std::string& job_id, uint32_t replicas,
            uint64_t generation, uint64_t plan_id, const std::string& gpu_type = "") {
    v1::RecommendationEvent event;
    event.set_type(type);
    event.set_plan_id(plan_id);
    if (!job_id.empty()) {
      v1::Recommendation* rec = event.mutable_recommendation();
      rec->set_job_id(job_id);
      rec->set_replicas(replicas);
      rec->set_generation(generation);
      rec->set_reason("scripted");
      rec->set_gpu_type(gpu_type);
    }
    Push(std::move(event));
  }
  // Ends the stream (the adapter stops first, or it would reconnect).
  void Close() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      closed_ = true;
    }
    cv_.notify_all();
  }

  grpc::Status RegisterJob(grpc::ServerContext*, const v1::RegisterJobRequest* request,
                           v1::Job* job) override {
    *job->mutable_spec() = request->spec();
    RecordSpec(request->spec());
    return grpc::Status::OK;
  }
  grpc::Status UpdateJob(grpc::ServerContext*, const v1::UpdateJobRequest* request,
                         v1::Job* job) override {
    *job->mutable_spec() = request->spec();
    RecordSpec(request->spec());
    return grpc::Status::OK;
  }
  // Waits until a RegisterJob or UpdateJob carried a spec `want` holds for.
  bool WaitForSpec(const std::function<bool(const v1::JobSpec&)>& want) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, kDeadline, [&] {
      for (const v1::JobSpec& spec : specs_) {
        if (want(spec)) return true;
      }
      return false;
    });
  }
  grpc::Status DeregisterJob(grpc::ServerContext*, const v1::DeregisterJobRequest*,
                             v1::DeregisterJobResponse*) override {
    return grpc::Status::OK;
  }
  grpc::Status SetCapacity(grpc::ServerContext*, const v1::SetCapacityRequest* request,
                           v1::Cluster* cluster) override {
    cluster->set_total_gpus(request->total_gpus());
    return grpc::Status::OK;
  }
  grpc::Status SetQueues(grpc::ServerContext*, const v1::SetQueuesRequest*,
                         v1::ListQueuesResponse*) override {
    return grpc::Status::OK;
  }
  grpc::Status GetCluster(grpc::ServerContext*, const v1::GetClusterRequest*,
                          v1::Cluster* cluster) override {
    cluster->set_leading(true);
    return grpc::Status::OK;
  }
  grpc::Status ReportApplied(grpc::ServerContext*, const v1::ReportAppliedRequest*,
                             v1::ReportAppliedResponse*) override {
    return grpc::Status::OK;
  }
  grpc::Status WatchRecommendations(grpc::ServerContext*, const v1::WatchRecommendationsRequest*,
                                    grpc::ServerWriter<v1::RecommendationEvent>* writer) override {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      cv_.wait(lock, [&] { return closed_ || !script_.empty(); });
      if (closed_) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "closed");
      v1::RecommendationEvent event = std::move(script_.front());
      script_.pop_front();
      lock.unlock();
      const bool written = writer->Write(event);
      lock.lock();
      if (!written) return grpc::Status(grpc::StatusCode::CANCELLED, "client gone");
    }
  }

 private:
  void RecordSpec(const v1::JobSpec& spec) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      specs_.push_back(spec);
    }
    cv_.notify_all();
  }

  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<v1::RecommendationEvent> script_;
  std::vector<v1::JobSpec> specs_;  // every spec registered or updated, in order
  bool closed_ = false;
};

// The adapter's events, waitable.
class EventLog {
 public:
  void Add(const AdapterEvent& event) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      events_.push_back(event);
    }
    cv_.notify_all();
  }
  // Waits until an event of `kind` for `job_id` (any, when empty) with
  // `value` has been seen.
  bool WaitFor(Kind kind, const std::string& job_id, uint64_t value) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, kDeadline, [&] {
      for (const AdapterEvent& event : events_) {
        if (event.kind == kind && (job_id.empty() || event.job_id == job_id) &&
            event.value == value) {
          return true;
        }
      }
      return false;
    });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<AdapterEvent> events_;
};

json PyTorchJob(const std::string& name, int workers) {
  json worker = {{"replicas", workers},
                 {"template",
                  {{"spec",
                    {{"containers",
                      json::array({{{"name", "pytorch"},
                                    {"image", "example/train:1"},
                                    {"resources", {{"limits", {{"nvidia.com/gpu", "1"}}}}}}})}}}}}};
  return {{"apiVersion", "kubeflow.org/v1"},
          {"kind", "PyTorchJob"},
          {"metadata",
           {{"name", name},
            {"namespace", "default"},
            {"labels", {{"rescale.io/managed", "true"}}},
            {"annotations", {{"rescale.io/policy", "planner"}}}}},
          {"spec",
           {{"elasticPolicy", {{"minReplicas", 1}, {"maxReplicas", 4}}},
            {"pytorchReplicaSpecs", {{"Worker", worker}}}}}};
}

std::string JobPath(const std::string& name) {
  return "/apis/kubeflow.org/v1/namespaces/default/pytorchjobs/" + name;
}

int Workers(const json& job) {
  return job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"].get<int>();
}

// A fake API server, a scripted rescaled, and an adapter between them.
class Harness {
 public:
  Harness() {
    const char* level = std::getenv("RESCALE_TEST_LOG");
    spdlog::set_level(level ? spdlog::level::from_str(level) : spdlog::level::warn);
    rescale::adapter::CurlKubeClientOptions options;
    options.config.server = kube.url();
    auto created = rescale::adapter::CurlKubeClient::Create(options);
    REQUIRE(created.ok());
    client = std::move(created).value();
  }
  ~Harness() {
    if (adapter) adapter->Stop();
    rescaled.Close();
  }

  void StartAdapter() {
    rescale::adapter::AdapterOptions options;
    options.backoff.initial = absl::Milliseconds(5);
    options.backoff.max = absl::Milliseconds(50);
    options.random = [] { return 0.5; };
    options.capacity_gpus = 64;
    options.observer = [this](const AdapterEvent& event) { log.Add(event); };
    adapter = std::make_unique<rescale::adapter::Adapter>(
        std::move(options), client.get(),
        grpc::CreateChannel(rescaled.address(), grpc::InsecureChannelCredentials()));
    adapter->Start();
  }

  // The job PATCHes sent so far, by path, in order, among `paths`.
  std::vector<std::string> JobPatches(const std::vector<std::string>& paths) {
    std::vector<std::string> out;
    for (const RecordedRequest& request : kube.Writes()) {
      for (const std::string& path : paths) {
        if (request.method == "PATCH" && request.path == path) out.push_back(path);
      }
    }
    return out;
  }

  FakeKubeApi kube;
  ScriptedRescaled rescaled;
  std::unique_ptr<rescale::adapter::CurlKubeClient> client;
  EventLog log;
  std::unique_ptr<rescale::adapter::Adapter> adapter;
};

using Type = v1::RecommendationEvent;

TEST_CASE("a plan whose changes arrive in two reads is applied whole, the shrink first") {
  Harness h;
  const std::string grow = JobPath("a-grow");
  const std::string shrink = JobPath("b-shrink");
  const std::string late = JobPath("c-late");
  h.kube.Put(PyTorchJob("a-grow", 1));
  h.kube.Put(PyTorchJob("b-shrink", 4));
  // The initial list: every job as it runs, and c-late's recommendation
  // before its job is listed (the adapter keeps it until it is).
  h.rescaled.Push(Type::ADDED, "default/a-grow", 1, 1, 1);
  h.rescaled.Push(Type::ADDED, "default/b-shrink", 4, 1, 1);
  h.rescaled.Push(Type::ADDED, "default/c-late", 2, 1, 1);
  h.rescaled.Push(Type::SYNCED, "", 0, 0, 1);
  h.StartAdapter();
  REQUIRE(h.log.WaitFor(Kind::kApplied, "default/a-grow", 1));
  REQUIRE(h.log.WaitFor(Kind::kApplied, "default/b-shrink", 1));

  // Plan 2 grows a-grow and shrinks b-shrink; the growth comes first on the
  // wire (job-id order) and is read alone.
  h.rescaled.Push(Type::MODIFIED, "default/a-grow", 4, 2, 2);
  REQUIRE(h.log.WaitFor(Kind::kChangeReceived, "default/a-grow", 2));
  // The applier wakes with the growth read: c-late appears, is registered,
  // and its recommendation applied. An adapter that applied what had
  // arrived would grow a-grow in this pass, before the shrink it needs.
  h.kube.Put(PyTorchJob("c-late", 1));
  REQUIRE(h.log.WaitFor(Kind::kApplied, "default/c-late", 1));
  CHECK(Workers(h.kube.Object(late)) == 2);
  CHECK(h.JobPatches({grow, shrink}).empty());

  // The rest of plan 2, then its end: applied as one, releases first.
  h.rescaled.Push(Type::MODIFIED, "default/b-shrink", 1, 2, 2);
  h.rescaled.Push(Type::PLAN_END, "", 0, 0, 2);
  REQUIRE(h.log.WaitFor(Kind::kPlanReceived, "", 2));
  REQUIRE(h.log.WaitFor(Kind::kApplied, "default/a-grow", 2));
  REQUIRE(h.log.WaitFor(Kind::kApplied, "default/b-shrink", 2));
  CHECK(h.JobPatches({grow, shrink}) == std::vector<std::string>{shrink, grow});
  CHECK(Workers(h.kube.Object(shrink)) == 1);
  CHECK(Workers(h.kube.Object(grow)) == 4);
}

TEST_CASE("a move to another GPU type is a release: patched before a growth of the same plan") {
  constexpr char kT4[] = "Tesla-T4";
  constexpr char kA100[] = "NVIDIA-A100-SXM4-40GB";
  Harness h;
  const std::string grow = JobPath("a-grow");
  const std::string move = JobPath("b-move");
  auto on_t4 = [&](const std::string& name, int workers) {
    json job = PyTorchJob(name, workers);
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["nodeSelector"] = {
        {"nvidia.com/gpu.product", kT4}};
    return job;
  };
  h.kube.Put(on_t4("a-grow", 1));
  // b-move's rank 0 trains on a GPU too: it must follow its Workers.
  json moved = on_t4("b-move", 4);
  moved["spec"]["pytorchReplicaSpecs"]["Master"] = moved["spec"]["pytorchReplicaSpecs"]["Worker"];
  moved["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] = 1;
  h.kube.Put(moved);
  h.rescaled.Push(Type::ADDED, "default/a-grow", 1, 1, 1, kT4);
  h.rescaled.Push(Type::ADDED, "default/b-move", 4, 1, 1, kT4);
  h.rescaled.Push(Type::SYNCED, "", 0, 0, 1);
  h.StartAdapter();
  REQUIRE(h.log.WaitFor(Kind::kApplied, "default/a-grow", 1));
  REQUIRE(h.log.WaitFor(Kind::kApplied, "default/b-move", 1));
  CHECK(h.JobPatches({grow, move}).empty());  // as they run already

  // Plan 2 moves b-move to the A100s at the same size and grows a-grow
  // into the T4s it leaves. By job id the growth comes first, and by size
  // the move changes nothing; but the move's first patch suspends b-move,
  // freeing its T4s, so it goes first.
  h.rescaled.Push(Type::MODIFIED, "default/a-grow", 4, 2, 2, kT4);
  h.rescaled.Push(Type::MODIFIED, "default/b-move", 4, 2, 2, kA100);
  h.rescaled.Push(Type::PLAN_END, "", 0, 0, 2);
  REQUIRE(h.log.WaitFor(Kind::kApplied, "default/a-grow", 2));
  REQUIRE(h.log.WaitFor(Kind::kApplied, "default/b-move", 2));
  CHECK(h.JobPatches({grow, move}) == std::vector<std::string>{move, grow});
  const json stored = h.kube.Object(move);
  CHECK(stored["spec"]["runPolicy"]["suspend"] == true);
  for (const char* replica : {"Worker", "Master"}) {
    INFO(replica);
    CHECK(stored["spec"]["pytorchReplicaSpecs"][replica]["template"]["spec"]["nodeSelector"]
                ["nvidia.com/gpu.product"] == kA100);
  }
  CHECK(Workers(h.kube.Object(grow)) == 4);
  const std::string mark = "rescale.io/resume-after-move";
  CHECK(stored["metadata"]["annotations"][mark] == "2");

  // A resize while the move waits for the operator keeps the move: the
  // size changes, the job stays suspended until its pods are gone.
  auto patches_to_move = [&] {
    std::vector<json> bodies;
    for (const RecordedRequest& request : h.kube.Writes()) {
      if (request.method == "PATCH" && request.path == move) {
        bodies.push_back(json::parse(request.body));
      }
    }
    return bodies;
  };
  h.rescaled.Push(Type::MODIFIED, "default/b-move", 2, 3, 3, kA100);
  h.rescaled.Push(Type::PLAN_END, "", 0, 0, 3);
  REQUIRE(h.log.WaitFor(Kind::kApplied, "default/b-move", 3));
  std::vector<json> bodies = patches_to_move();
  REQUIRE(bodies.size() == 2);
  CHECK(bodies[1]["spec"] == json{{"pytorchReplicaSpecs", {{"Worker", {{"replicas", 2}}}}}});
  CHECK(bodies[1]["metadata"]["annotations"][mark] == "3");
  CHECK(h.kube.Object(move)["spec"]["runPolicy"]["suspend"] == true);

  // A suspend ends the move: the mark goes, and the operator's Suspended
  // condition no longer resumes the job.
  v1::RecommendationEvent suspend;
  suspend.set_type(Type::MODIFIED);
  suspend.set_plan_id(4);
  v1::Recommendation* rec = suspend.mutable_recommendation();
  rec->set_job_id("default/b-move");
  rec->set_suspend(true);
  rec->set_generation(4);
  rec->set_reason("scripted");
  h.rescaled.Push(suspend);
  h.rescaled.Push(Type::PLAN_END, "", 0, 0, 4);
  REQUIRE(h.log.WaitFor(Kind::kApplied, "default/b-move", 4));
  bodies = patches_to_move();
  REQUIRE(bodies.size() == 3);
  CHECK_FALSE(bodies[2].contains("spec"));
  CHECK(bodies[2]["metadata"]["annotations"][mark] == nullptr);
  h.kube.Update(move, [](json& job) {
    job["status"]["conditions"] =
        json::array({{{"type", "Suspended"}, {"status", "True"}, {"reason", "JobSuspended"}}});
  });
  // The job's watch events are handled one at a time, in order, and a
  // moved job is resumed while its event is handled: once the next
  // change (a new priority) has reached rescaled, the condition's event
  // has been handled, and a resume would have been sent.
  h.kube.Update(move,
                [](json& job) { job["metadata"]["annotations"]["rescale.io/priority"] = "7"; });
  REQUIRE(h.rescaled.WaitForSpec([](const v1::JobSpec& spec) {
    return spec.job_id() == "default/b-move" && spec.priority() == 7;
  }));
  CHECK(patches_to_move().size() == 3);
  CHECK(h.kube.Object(move)["spec"]["runPolicy"]["suspend"] == true);
}

TEST_CASE("a rescaled that sends no PLAN_END (plan_id 0) has each change applied as it comes") {
  Harness h;
  const std::string grow = JobPath("a-grow");
  h.kube.Put(PyTorchJob("a-grow", 1));
  h.rescaled.Push(Type::ADDED, "default/a-grow", 1, 1, 0);
  h.rescaled.Push(Type::SYNCED, "", 0, 0, 0);
  h.StartAdapter();
  REQUIRE(h.log.WaitFor(Kind::kApplied, "default/a-grow", 1));
  // An older rescaled: no plan id, no PLAN_END ever.
  h.rescaled.Push(Type::MODIFIED, "default/a-grow", 3, 2, 0);
  REQUIRE(h.log.WaitFor(Kind::kApplied, "default/a-grow", 2));
  CHECK(Workers(h.kube.Object(grow)) == 3);
}

TEST_CASE("a recommended batch is annotated with its change; one without a batch leaves it") {
  Harness h;
  const std::string path = JobPath("a-grow");
  auto job_patches = [&] {
    std::vector<json> bodies;
    for (const RecordedRequest& request : h.kube.Writes()) {
      if (request.method == "PATCH" && request.path == path) {
        bodies.push_back(json::parse(request.body));
      }
    }
    return bodies;
  };
  json job = PyTorchJob("a-grow", 1);
  job["metadata"]["annotations"]["rescale.io/local-batch-size"] = "32";  // as the user declared
  h.kube.Put(job);
  h.rescaled.Push(Type::ADDED, "default/a-grow", 1, 1, 1);
  h.rescaled.Push(Type::SYNCED, "", 0, 0, 1);
  h.StartAdapter();
  REQUIRE(h.log.WaitFor(Kind::kApplied, "default/a-grow", 1));
  REQUIRE(h.rescaled.WaitForSpec([](const v1::JobSpec& spec) {
    return spec.job_id() == "default/a-grow" && spec.local_batch_size() == 32;
  }));

  // Goodput-planned: 3 replicas at 64 per micro-step, 2 extra micro-steps.
  v1::RecommendationEvent grow;
  grow.set_type(Type::MODIFIED);
  grow.set_plan_id(2);
  v1::Recommendation* rec = grow.mutable_recommendation();
  rec->set_job_id("default/a-grow");
  rec->set_replicas(3);
  rec->set_generation(2);
  rec->set_reason("scripted");
  rec->set_local_batch_size(64);
  rec->set_accumulation_steps(2);
  h.rescaled.Push(grow);
  h.rescaled.Push(Type::PLAN_END, "", 0, 0, 2);
  REQUIRE(h.log.WaitFor(Kind::kApplied, "default/a-grow", 2));
  std::vector<json> patches = job_patches();
  REQUIRE(patches.size() == 1);
  // In the same patch as the replicas: new workers start with their batch.
  CHECK(patches[0]["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 3);
  CHECK(patches[0]["metadata"]["annotations"]["rescale.io/local-batch-size"] == "64");
  CHECK(patches[0]["metadata"]["annotations"]["rescale.io/accumulation-steps"] == "2");
  // The job, seen changed, registers at the batch its workers now run.
  REQUIRE(h.rescaled.WaitForSpec([](const v1::JobSpec& spec) {
    return spec.job_id() == "default/a-grow" && spec.local_batch_size() == 64;
  }));

  // Planned on throughput again: the change names no batch, and the workers
  // keep the one they were given.
  h.rescaled.Push(Type::MODIFIED, "default/a-grow", 2, 3, 3);
  h.rescaled.Push(Type::PLAN_END, "", 0, 0, 3);
  REQUIRE(h.log.WaitFor(Kind::kApplied, "default/a-grow", 3));
  patches = job_patches();
  REQUIRE(patches.size() == 2);
  CHECK(patches[1]["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 2);
  CHECK_FALSE(patches[1]["metadata"]["annotations"].contains("rescale.io/local-batch-size"));
  CHECK_FALSE(patches[1]["metadata"]["annotations"].contains("rescale.io/accumulation-steps"));
  const json annotations = h.kube.Object(path)["metadata"]["annotations"];
  CHECK(annotations.value("rescale.io/local-batch-size", "") == "64");
  CHECK(annotations.value("rescale.io/accumulation-steps", "") == "2");
  CHECK(annotations.value("rescale.io/generation", "") == "3");
}

}  // namespace
