// End-to-end tests of rescaled: the real server in-process on port 0, driven
// through a real gRPC channel. Every RPC of rescale.v1 is called, with the
// error cases the API promises (INVALID_ARGUMENT naming fields, NOT_FOUND,
// ALREADY_EXISTS, RESOURCE_EXHAUSTED), plus the standard health service,
// server reflection, watch streams and shutdown.
//
// Synchronisation is by blocking reads of the gRPC streams themselves (a
// Read returns when the server has written), never by sleeping.
#include <google/protobuf/text_format.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/proto_buffer_reader.h>
#include <grpcpp/support/proto_buffer_writer.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "google/protobuf/descriptor.h"
#include "google/protobuf/dynamic_message.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "rescale/v1/rescale.grpc.pb.h"
#include "server/server.h"
#include "spdlog/spdlog.h"

namespace {

using rescale::server::RescaleServer;
using rescale::server::ServerOptions;
namespace v1 = rescale::v1;

struct TestServer {
  // Without the plan timer every change plans before its reply; with it,
  // changes are coalesced on the ManualClock (tests advance it).
  explicit TestServer(ServerOptions options = {}, bool plan_timer = false) {
    spdlog::set_level(spdlog::level::warn);  // keep test output readable
    options.listen = "127.0.0.1:0";
    options.run_plan_timer = plan_timer;
    options.clock = &clock;
    auto started = RescaleServer::Start(options);
    REQUIRE(started.ok());
    server = std::move(started).value();
    channel = grpc::CreateChannel(server->address(), grpc::InsecureChannelCredentials());
    metrics = v1::MetricsService::NewStub(channel);
    jobs = v1::JobService::NewStub(channel);
    recs = v1::RecommendationService::NewStub(channel);
    cluster = v1::ClusterService::NewStub(channel);
  }

  v1::Job Register(const std::string& id, uint32_t min, uint32_t max, int32_t priority = 0,
                   uint32_t gpus_per_replica = 1) {
    grpc::ClientContext ctx;
    v1::RegisterJobRequest req;
    req.mutable_spec()->set_job_id(id);
    req.mutable_spec()->set_min_replicas(min);
    req.mutable_spec()->set_max_replicas(max);
    req.mutable_spec()->set_priority(priority);
    req.mutable_spec()->set_gpus_per_replica(gpus_per_replica);
    req.mutable_spec()->set_local_batch_size(32);
    v1::Job job;
    grpc::Status status = jobs->RegisterJob(&ctx, req, &job);
    REQUIRE(status.error_message() == "");
    REQUIRE(status.ok());
    return job;
  }

  v1::Cluster SetCapacity(uint32_t total_gpus) {
    grpc::ClientContext ctx;
    v1::SetCapacityRequest req;
    req.set_total_gpus(total_gpus);
    v1::Cluster reply;
    REQUIRE(cluster->SetCapacity(&ctx, req, &reply).ok());
    return reply;
  }

  rescale::ManualClock clock;
  std::unique_ptr<RescaleServer> server;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::MetricsService::Stub> metrics;
  std::unique_ptr<v1::JobService::Stub> jobs;
  std::unique_ptr<v1::RecommendationService::Stub> recs;
  std::unique_ptr<v1::ClusterService::Stub> cluster;
};

v1::JobSpec Spec(const std::string& id, uint32_t min, uint32_t max) {
  v1::JobSpec spec;
  spec.set_job_id(id);
  spec.set_min_replicas(min);
  spec.set_max_replicas(max);
  return spec;
}

}  // namespace

TEST_CASE("RegisterJob returns the job with defaults applied and a first recommendation") {
  TestServer t;
  v1::Job job = t.Register("team-a/bert", 2, 8);
  CHECK(job.spec().job_id() == "team-a/bert");
  CHECK(job.spec().gpus_per_replica() == 1);
  CHECK(job.spec().preemptible());
  CHECK(job.spec().restart_cost_seconds() == 60);
  CHECK(job.spec().policy() == "");
  CHECK(job.recommendation().replicas() == 2);
  CHECK(job.recommendation().generation() == 1);
  CHECK(job.recommendation().action() == v1::SCALE_UP);
  CHECK(job.recommendation().binding_constraint() == v1::MIN_REPLICAS);
  CHECK(job.recommendation().policy() == "planner");  // the default policy
  CHECK(job.status().registered_at().seconds() == absl::ToUnixSeconds(t.clock.Now()));
}

TEST_CASE("RegisterJob rejects min_replicas above max_replicas naming both fields") {
  TestServer t;
  grpc::ClientContext ctx;
  v1::RegisterJobRequest req;
  *req.mutable_spec() = Spec("team-a/bert", 5, 2);
  v1::Job job;
  grpc::Status status = t.jobs->RegisterJob(&ctx, req, &job);
  CHECK(status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK_THAT(status.error_message(),
             Catch::Contains("spec.min_replicas (5)") && Catch::Contains("spec.max_replicas (2)"));
}

TEST_CASE("RegisterJob rejects a job_id that is not a DNS-1123 namespace/name") {
  TestServer t;
  for (const char* bad : {"bert", "Team/bert", "team/-bert", "a/b/c", "/bert"}) {
    grpc::ClientContext ctx;
    v1::RegisterJobRequest req;
    *req.mutable_spec() = Spec(bad, 1, 2);
    v1::Job job;
    grpc::Status status = t.jobs->RegisterJob(&ctx, req, &job);
    INFO(bad);
    CHECK(status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK_THAT(status.error_message(), Catch::Contains("spec.job_id"));
  }
}

TEST_CASE("RegisterJob of a registered job is ALREADY_EXISTS and UpdateJob changes its spec") {
  TestServer t;
  t.Register("ns/job", 1, 4);
  {
    grpc::ClientContext ctx;
    v1::RegisterJobRequest req;
    *req.mutable_spec() = Spec("ns/job", 1, 4);
    v1::Job job;
    CHECK(t.jobs->RegisterJob(&ctx, req, &job).error_code() == grpc::StatusCode::ALREADY_EXISTS);
  }
  grpc::ClientContext ctx;
  v1::UpdateJobRequest req;
  *req.mutable_spec() = Spec("ns/job", 3, 6);
  req.mutable_spec()->set_policy("static-max");
  v1::Job job;
  REQUIRE(t.jobs->UpdateJob(&ctx, req, &job).ok());
  CHECK(job.spec().min_replicas() == 3);
  CHECK(job.recommendation().replicas() == 6);
  CHECK(job.recommendation().generation() == 2);
  CHECK(job.recommendation().binding_constraint() == v1::MAX_REPLICAS);
}

TEST_CASE("unknown jobs are NOT_FOUND for every per-job RPC") {
  TestServer t;
  {
    grpc::ClientContext ctx;
    v1::GetJobRequest req;
    req.set_job_id("ns/missing");
    v1::Job job;
    grpc::Status status = t.jobs->GetJob(&ctx, req, &job);
    CHECK(status.error_code() == grpc::StatusCode::NOT_FOUND);
    CHECK_THAT(status.error_message(), Catch::Contains("ns/missing"));
  }
  {
    grpc::ClientContext ctx;
    v1::UpdateJobRequest req;
    *req.mutable_spec() = Spec("ns/missing", 1, 2);
    v1::Job job;
    CHECK(t.jobs->UpdateJob(&ctx, req, &job).error_code() == grpc::StatusCode::NOT_FOUND);
  }
  {
    grpc::ClientContext ctx;
    v1::DeregisterJobRequest req;
    req.set_job_id("ns/missing");
    v1::DeregisterJobResponse resp;
    CHECK(t.jobs->DeregisterJob(&ctx, req, &resp).error_code() == grpc::StatusCode::NOT_FOUND);
  }
  {
    grpc::ClientContext ctx;
    v1::GetRecommendationRequest req;
    req.set_job_id("ns/missing");
    v1::Recommendation rec;
    CHECK(t.recs->GetRecommendation(&ctx, req, &rec).error_code() == grpc::StatusCode::NOT_FOUND);
  }
  {
    grpc::ClientContext ctx;
    v1::ReportAppliedRequest req;
    req.set_job_id("ns/missing");
    v1::ReportAppliedResponse resp;
    CHECK(t.recs->ReportApplied(&ctx, req, &resp).error_code() == grpc::StatusCode::NOT_FOUND);
  }
}

TEST_CASE("ListJobs filters by namespace and DeregisterJob removes the job") {
  TestServer t;
  t.Register("a/one", 1, 2);
  t.Register("a/two", 1, 2);
  t.Register("b/three", 1, 2);
  {
    grpc::ClientContext ctx;
    v1::ListJobsRequest req;
    req.set_namespace_("a");
    v1::ListJobsResponse resp;
    REQUIRE(t.jobs->ListJobs(&ctx, req, &resp).ok());
    REQUIRE(resp.jobs_size() == 2);
    CHECK(resp.jobs(0).spec().job_id() == "a/one");
    CHECK(resp.jobs(1).spec().job_id() == "a/two");
  }
  {
    grpc::ClientContext ctx;
    v1::DeregisterJobRequest req;
    req.set_job_id("a/one");
    v1::DeregisterJobResponse resp;
    REQUIRE(t.jobs->DeregisterJob(&ctx, req, &resp).ok());
  }
  grpc::ClientContext ctx;
  v1::ListJobsResponse resp;
  REQUIRE(t.jobs->ListJobs(&ctx, v1::ListJobsRequest(), &resp).ok());
  CHECK(resp.jobs_size() == 2);
  v1::ListRecommendationsResponse recs;
  grpc::ClientContext ctx2;
  REQUIRE(t.recs->ListRecommendations(&ctx2, v1::ListRecommendationsRequest(), &recs).ok());
  REQUIRE(recs.recommendations_size() == 2);
  CHECK(recs.recommendations(0).job_id() == "a/two");
}

TEST_CASE("ReportSamples accepts the valid samples of a batch and explains each rejection") {
  TestServer t;
  t.Register("ns/job", 1, 4);
  v1::SampleBatch batch;
  batch.set_job_id("ns/job");
  batch.set_pod("job-worker-0");
  batch.set_world_size(2);
  batch.add_samples()->set_step_seconds(0.5);
  batch.add_samples()->set_step_seconds(-1);  // rejected
  v1::StepSample* too_big = batch.add_samples();
  too_big->set_step_seconds(0.5);
  too_big->set_world_size(9);  // above max_replicas: rejected
  batch.add_samples()->set_step_seconds(0.25);

  grpc::ClientContext ctx;
  v1::IngestSummary summary;
  REQUIRE(t.metrics->ReportSamples(&ctx, batch, &summary).ok());
  CHECK(summary.accepted() == 2);
  CHECK(summary.rejected() == 2);
  REQUIRE(summary.rejections_size() == 2);
  CHECK(summary.rejections(0).index() == 1);
  CHECK_THAT(summary.rejections(0).reason(), Catch::Contains("step_seconds"));
  CHECK(summary.rejections(1).index() == 2);
  CHECK_THAT(summary.rejections(1).reason(), Catch::Contains("max_replicas 4"));

  grpc::ClientContext get_ctx;
  v1::GetJobRequest get;
  get.set_job_id("ns/job");
  v1::Job job;
  REQUIRE(t.jobs->GetJob(&get_ctx, get, &job).ok());
  CHECK(job.status().samples_accepted() == 2);
  // Two samples are fewer than a size needs (5): no curve yet, but the pod
  // is visible.
  CHECK(job.curve().points_size() == 0);
  REQUIRE(job.pods_size() == 1);
  CHECK(job.pods(0).sample_count() == 2);
  CHECK(job.pods(0).recent_step_seconds() == Approx(0.375).epsilon(0.1));
}

TEST_CASE("ReportSamples refuses a batch over --max_batch_samples naming the limit") {
  ServerOptions options;
  options.max_batch_samples = 3;
  TestServer t(options);
  t.Register("ns/job", 1, 4);
  v1::SampleBatch batch;
  batch.set_job_id("ns/job");
  for (int i = 0; i < 4; ++i) batch.add_samples()->set_step_seconds(1);
  grpc::ClientContext ctx;
  v1::IngestSummary summary;
  grpc::Status status = t.metrics->ReportSamples(&ctx, batch, &summary);
  CHECK(status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK_THAT(status.error_message(), Catch::Contains("limit is 3"));
}

TEST_CASE("ReportSamples is RESOURCE_EXHAUSTED when a limit refuses every sample") {
  ServerOptions options;
  options.engine.store.max_pods_per_job = 1;
  TestServer t(options);
  t.Register("ns/job", 1, 4);
  v1::SampleBatch first;
  first.set_job_id("ns/job");
  first.set_pod("w-0");
  first.set_world_size(1);
  first.add_samples()->set_step_seconds(0.5);
  grpc::ClientContext ctx;
  v1::IngestSummary summary;
  REQUIRE(t.metrics->ReportSamples(&ctx, first, &summary).ok());

  v1::SampleBatch second = first;
  second.set_pod("w-1");  // over the one-pod limit
  grpc::ClientContext ctx2;
  grpc::Status status = t.metrics->ReportSamples(&ctx2, second, &summary);
  CHECK(status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
  CHECK_THAT(status.error_message(), Catch::Contains("--max_pods_per_job"));
  // The reply has no body: the message is the summary.
  CHECK_THAT(status.error_message(),
             Catch::Contains("0 of 1 samples accepted: 1 refused by a limit") &&
                 Catch::Contains("0 rejected for other reasons, 0 duplicates"));
}

TEST_CASE("GetJob shows the job's pods and flags a straggler") {
  TestServer t;
  t.Register("ns/job", 1, 4);
  for (int p = 0; p < 3; ++p) {
    v1::SampleBatch batch;
    batch.set_job_id("ns/job");
    batch.set_pod("w-" + std::to_string(p));
    batch.set_world_size(3);
    for (int i = 0; i < 10; ++i) batch.add_samples()->set_step_seconds(p == 2 ? 2.0 : 1.0);
    grpc::ClientContext ctx;
    v1::IngestSummary summary;
    REQUIRE(t.metrics->ReportSamples(&ctx, batch, &summary).ok());
  }
  grpc::ClientContext ctx;
  v1::GetJobRequest get;
  get.set_job_id("ns/job");
  v1::Job job;
  REQUIRE(t.jobs->GetJob(&ctx, get, &job).ok());
  REQUIRE(job.pods_size() == 3);
  CHECK(job.pods(0).pod() == "w-0");
  CHECK(job.pods(0).recent_step_seconds() == Approx(1.0));
  CHECK(job.pods(0).sample_count() == 10);
  CHECK(job.pods(0).last_seen().seconds() == absl::ToUnixSeconds(t.clock.Now()));
  CHECK_FALSE(job.pods(0).straggler());
  CHECK(job.pods(2).straggler());
  // The model's curve covers 1..max_replicas; the measured size is marked.
  REQUIRE(job.curve().points_size() == 4);
  const v1::CurvePoint& measured = job.curve().points(2);
  CHECK(measured.replicas() == 3);
  CHECK(measured.observed());
  CHECK(measured.sample_count() == 30);
  // 3 pods x 32 samples per step; the gang's step is the robust mean (1.33 s).
  CHECK(measured.observed_samples_per_second() == Approx(3 * 32 / (40.0 / 30)).epsilon(0.01));
  CHECK_FALSE(job.curve().model().empty());
}

TEST_CASE("samples carry gradient statistics: GetJob shows the noise scale and the efficiency") {
  TestServer t;
  t.Register("ns/job", 1, 4);
  v1::SampleBatch batch;
  batch.set_job_id("ns/job");
  batch.set_pod("w-0");
  batch.set_world_size(2);
  for (int i = 0; i < 4; ++i) {
    v1::StepSample* s = batch.add_samples();
    s->set_step_seconds(1.0);
    // 2 workers x 32: the variance of a 64-sample mean, 2.0, is a
    // per-sample noise of 128; over |G|^2 = 0.5, a noise scale of 256.
    s->set_grad_sqr(0.5);
    s->set_grad_var(2.0);
  }
  v1::StepSample* half = batch.add_samples();
  half->set_step_seconds(1.0);
  half->set_grad_sqr(0.5);  // without grad_var: refused, naming the field
  grpc::ClientContext ctx;
  v1::IngestSummary summary;
  REQUIRE(t.metrics->ReportSamples(&ctx, batch, &summary).ok());
  CHECK(summary.accepted() == 4);
  REQUIRE(summary.rejections_size() == 1);
  CHECK(summary.rejections(0).index() == 4);
  CHECK_THAT(summary.rejections(0).reason(),
             Catch::Contains("grad_sqr is set without grad_var (set both or neither)"));

  grpc::ClientContext get_ctx;
  v1::GetJobRequest get;
  get.set_job_id("ns/job");
  v1::Job job;
  REQUIRE(t.jobs->GetJob(&get_ctx, get, &job).ok());
  REQUIRE(job.status().has_gradient_noise_scale());
  CHECK(job.status().gradient_noise_scale() == Approx(256));

  // Not running and no batch_scaling: no efficiency to give.
  CHECK_FALSE(job.status().has_statistical_efficiency());

  // A job that may adapt its batch, running 2 x 32 = 64 against its M0 of
  // 32: EFF = (phi + 32) / (phi + 64) with phi = 256, 288 / 320 = 0.9.
  v1::RegisterJobRequest scaled;
  *scaled.mutable_spec() = Spec("ns/scaled", 1, 4);
  scaled.mutable_spec()->set_local_batch_size(32);
  v1::BatchScaling* scaling = scaled.mutable_spec()->mutable_batch_scaling();
  scaling->set_initial_batch_size(32);
  scaling->set_max_batch_size(1024);
  scaling->set_max_local_batch_size(256);
  scaling->set_gradient_accumulation(true);
  grpc::ClientContext register_ctx;
  v1::Job registered;
  REQUIRE(t.jobs->RegisterJob(&register_ctx, scaled, &registered).ok());
  CHECK(registered.spec().batch_scaling().max_batch_size() == 1024);
  CHECK(registered.spec().batch_scaling().min_local_batch_size() == 1);  // 0 = 1
  CHECK(registered.spec().batch_scaling().gradient_accumulation());
  batch.set_job_id("ns/scaled");
  batch.mutable_samples()->RemoveLast();  // the refused one
  grpc::ClientContext scaled_samples_ctx;
  REQUIRE(t.metrics->ReportSamples(&scaled_samples_ctx, batch, &summary).ok());
  REQUIRE(summary.accepted() == 4);
  grpc::ClientContext applied_ctx;
  v1::ReportAppliedRequest applied;
  applied.set_job_id("ns/scaled");
  applied.set_replicas(2);
  applied.set_generation(registered.recommendation().generation());
  v1::ReportAppliedResponse applied_reply;
  REQUIRE(t.recs->ReportApplied(&applied_ctx, applied, &applied_reply).ok());
  REQUIRE(applied_reply.status().has_statistical_efficiency());
  CHECK(applied_reply.status().statistical_efficiency() == Approx(0.9));
  // An invalid batch_scaling is refused naming the field.
  scaled.mutable_spec()->set_job_id("ns/bad");
  scaling->set_max_batch_size(16);
  grpc::ClientContext bad_ctx;
  grpc::Status bad = t.jobs->RegisterJob(&bad_ctx, scaled, &registered);
  CHECK(bad.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK_THAT(bad.error_message(), Catch::Contains("spec.batch_scaling.max_batch_size (16)"));

  // A job whose samples carry none has no noise scale.
  t.Register("ns/plain", 1, 4);
  v1::SampleBatch plain;
  plain.set_job_id("ns/plain");
  plain.set_pod("w-0");
  plain.set_world_size(1);
  plain.add_samples()->set_step_seconds(1.0);
  grpc::ClientContext plain_ctx;
  REQUIRE(t.metrics->ReportSamples(&plain_ctx, plain, &summary).ok());
  grpc::ClientContext plain_get_ctx;
  get.set_job_id("ns/plain");
  REQUIRE(t.jobs->GetJob(&plain_get_ctx, get, &job).ok());
  CHECK_FALSE(job.status().has_gradient_noise_scale());
}

TEST_CASE("StreamSamples ingests every batch and answers one summary with stream-wide indices") {
  TestServer t;
  t.Register("ns/job", 1, 4);
  grpc::ClientContext ctx;
  v1::IngestSummary summary;
  auto writer = t.metrics->StreamSamples(&ctx, &summary);
  for (int b = 0; b < 3; ++b) {
    v1::SampleBatch batch;
    batch.set_job_id("ns/job");
    batch.set_pod("pod-" + std::to_string(b));
    batch.set_world_size(1);
    for (int i = 0; i < 10; ++i) batch.add_samples()->set_step_seconds(b == 2 && i == 5 ? 0 : 0.1);
    REQUIRE(writer->Write(batch));
  }
  writer->WritesDone();
  REQUIRE(writer->Finish().ok());
  CHECK(summary.accepted() == 29);
  CHECK(summary.rejected() == 1);
  REQUIRE(summary.rejections_size() == 1);
  CHECK(summary.rejections(0).index() == 25);
}

TEST_CASE("with the plan timer, RegisterJob and SetCapacity reply before their plan, which "
          "the watch then shows",
          "[concurrency]") {
  ServerOptions options;
  options.engine.plan_coalesce = absl::Milliseconds(5);
  TestServer t(options, /*plan_timer=*/true);
  grpc::ClientContext watch_ctx;
  auto reader = t.recs->WatchRecommendations(&watch_ctx, v1::WatchRecommendationsRequest());
  v1::RecommendationEvent event;
  REQUIRE(reader->Read(&event));
  CHECK(event.type() == v1::RecommendationEvent::SYNCED);

  v1::Job job = t.Register("ns/a", 1, 4);
  CHECK(job.plan_pending());
  CHECK_FALSE(job.has_recommendation());
  const v1::Cluster cluster = t.SetCapacity(2);
  CHECK(cluster.plan_pending());
  CHECK(cluster.total_gpus() == 2);

  // One plan, when the first change's window has passed, covers both.
  t.clock.Advance(absl::Milliseconds(5));
  REQUIRE(reader->Read(&event));
  CHECK(event.type() == v1::RecommendationEvent::ADDED);
  CHECK(event.recommendation().job_id() == "ns/a");
  CHECK(event.recommendation().replicas() == 2);  // within the new capacity
  grpc::ClientContext get_ctx;
  v1::GetClusterRequest get;
  v1::Cluster after;
  REQUIRE(t.cluster->GetCluster(&get_ctx, get, &after).ok());
  CHECK_FALSE(after.plan_pending());
  CHECK(after.allocated_gpus() == 2);
  watch_ctx.TryCancel();
  while (reader->Read(&event)) {
  }
}

TEST_CASE("ReportApplied records the applied state and turns the action to HOLD") {
  TestServer t;
  v1::Job job = t.Register("ns/job", 2, 4);
  grpc::ClientContext ctx;
  v1::ReportAppliedRequest req;
  req.set_job_id("ns/job");
  req.set_replicas(2);
  req.set_generation(job.recommendation().generation());
  v1::ReportAppliedResponse resp;
  REQUIRE(t.recs->ReportApplied(&ctx, req, &resp).ok());
  CHECK(resp.status().current_replicas() == 2);
  CHECK(resp.status().last_applied_generation() == 1);

  grpc::ClientContext get_ctx;
  v1::GetRecommendationRequest get;
  get.set_job_id("ns/job");
  v1::Recommendation rec;
  REQUIRE(t.recs->GetRecommendation(&get_ctx, get, &rec).ok());
  CHECK(rec.action() == v1::HOLD);
  CHECK(rec.generation() == 1);

  grpc::ClientContext bad_ctx;
  req.set_generation(7);
  grpc::Status status = t.recs->ReportApplied(&bad_ctx, req, &resp);
  CHECK(status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK_THAT(status.error_message(), Catch::Contains("generation 7"));
}

TEST_CASE("SetCapacity below demand queues the lower-priority job with a reason") {
  TestServer t;
  t.Register("ns/high", 2, 2, /*priority=*/10, /*gpus_per_replica=*/2);
  t.Register("ns/low", 4, 8, /*priority=*/0, /*gpus_per_replica=*/2);
  const v1::Cluster cluster = t.SetCapacity(8);
  CHECK(cluster.capacity_known());
  CHECK(cluster.total_gpus() == 8);
  CHECK(cluster.allocated_gpus() == 4);
  CHECK(cluster.free_gpus() == 4);
  CHECK(cluster.waiting_jobs() == 1);
  REQUIRE(cluster.allocations_size() == 1);
  CHECK(cluster.allocations(0).job_id() == "ns/high");

  grpc::ClientContext get_ctx;
  v1::GetRecommendationRequest get;
  get.set_job_id("ns/low");
  v1::Recommendation rec;
  REQUIRE(t.recs->GetRecommendation(&get_ctx, get, &rec).ok());
  CHECK(rec.replicas() == 0);
  CHECK(rec.suspend());
  CHECK(rec.queue_position() == 1);
  CHECK(rec.binding_constraint() == v1::CAPACITY);
  CHECK(rec.reason() == "needs 8 GPUs; 4 free; 4 held by jobs of higher or equal priority");

  grpc::ClientContext get_cluster_ctx;
  v1::Cluster again;
  REQUIRE(t.cluster->GetCluster(&get_cluster_ctx, v1::GetClusterRequest(), &again).ok());
  CHECK(again.allocated_gpus() == 4);
}

TEST_CASE("SetCapacity with node slots holds back the job whose replicas do not fit") {
  TestServer t;
  t.Register("ns/big", 1, 1, /*priority=*/5, /*gpus_per_replica=*/8);
  t.Register("ns/half", 1, 2, /*priority=*/0, /*gpus_per_replica=*/4);
  // 8 free GPUs as 4+4 on two nodes.
  grpc::ClientContext ctx;
  v1::SetCapacityRequest req;
  req.set_total_gpus(8);
  for (auto [g, n] : {std::pair<uint32_t, uint32_t>{8, 0}, {4, 2}, {1, 8}}) {
    v1::ReplicaSlots* s = req.add_slots();
    s->set_gpus_per_replica(g);
    s->set_replicas(n);
  }
  v1::Cluster cluster;
  grpc::Status status = t.cluster->SetCapacity(&ctx, req, &cluster);
  INFO(status.error_message());
  REQUIRE(status.ok());
  REQUIRE(cluster.slots_size() == 3);
  CHECK(cluster.slots(0).gpus_per_replica() == 8);
  CHECK(cluster.slots(0).replicas() == 0);
  REQUIRE(cluster.slot_use_size() == 3);
  CHECK(cluster.slot_use(0).replicas_fit() == 0);
  CHECK(cluster.slot_use(0).replicas_planned() == 0);
  CHECK(cluster.slot_use(1).gpus_per_replica() == 4);
  CHECK(cluster.slot_use(1).replicas_fit() == 2);
  CHECK(cluster.slot_use(1).replicas_planned() == 2);
  CHECK(cluster.allocated_gpus() == 8);

  grpc::ClientContext get_ctx;
  v1::GetRecommendationRequest get;
  get.set_job_id("ns/big");
  v1::Recommendation rec;
  REQUIRE(t.recs->GetRecommendation(&get_ctx, get, &rec).ok());
  CHECK(rec.replicas() == 0);
  CHECK(rec.binding_constraint() == v1::NODE_SLOTS);
  CHECK(rec.reason() ==
        "needs 1 replica of 8 GPUs on one node each; none fits on the nodes' free GPUs");

  // GetCluster shows the same slots; the total alone drops them.
  grpc::ClientContext get_cluster_ctx;
  v1::Cluster again;
  REQUIRE(t.cluster->GetCluster(&get_cluster_ctx, v1::GetClusterRequest(), &again).ok());
  CHECK(again.slot_use_size() == 3);
  CHECK(t.SetCapacity(8).slots_size() == 0);
}

TEST_CASE("SetCapacity refuses slots that claim more GPUs than the total, naming the field") {
  TestServer t;
  auto set = [&](uint32_t total, std::vector<std::pair<uint32_t, uint32_t>> slots) {
    grpc::ClientContext ctx;
    v1::SetCapacityRequest req;
    req.set_total_gpus(total);
    for (auto [g, n] : slots) {
      v1::ReplicaSlots* s = req.add_slots();
      s->set_gpus_per_replica(g);
      s->set_replicas(n);
    }
    v1::Cluster reply;
    return t.cluster->SetCapacity(&ctx, req, &reply);
  };
  grpc::Status too_many = set(16, {{4, 4}, {8, 3}});
  CHECK(too_many.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(too_many.error_message() ==
        "slots[1].replicas 3 of 8 GPUs each exceeds the limit of 2 (total_gpus 16 / 8)");
  grpc::Status zero = set(16, {{0, 1}});
  CHECK(zero.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK_THAT(zero.error_message(), Catch::Contains("slots[0].gpus_per_replica must be in [1, 64]"));
  grpc::Status twice = set(16, {{4, 1}, {4, 2}});
  CHECK(twice.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK_THAT(twice.error_message(), Catch::Contains("slots[1].gpus_per_replica 4 repeats"));
  // Refused calls change nothing.
  grpc::ClientContext get_ctx;
  v1::Cluster cluster;
  REQUIRE(t.cluster->GetCluster(&get_ctx, v1::GetClusterRequest(), &cluster).ok());
  CHECK_FALSE(cluster.capacity_known());
  CHECK(cluster.slots_size() == 0);
}

TEST_CASE("SetCapacity with allocatable GPUs shows them in GetCluster beside the usable total") {
  TestServer t;
  auto set = [&](uint32_t total, uint32_t allocatable, v1::Cluster* reply) {
    grpc::ClientContext ctx;
    v1::SetCapacityRequest req;
    req.set_total_gpus(total);
    req.set_allocatable_gpus(allocatable);
    return t.cluster->SetCapacity(&ctx, req, reply);
  };
  auto get = [&] {
    grpc::ClientContext ctx;
    v1::Cluster cluster;
    REQUIRE(t.cluster->GetCluster(&ctx, v1::GetClusterRequest(), &cluster).ok());
    return cluster;
  };
  v1::Cluster reply;
  grpc::Status status = set(16, 24, &reply);
  INFO(status.error_message());
  REQUIRE(status.ok());
  CHECK(reply.allocatable_gpus() == 24);
  CHECK(reply.total_gpus() == 16);
  const v1::Cluster cluster = get();
  CHECK(cluster.allocatable_gpus() == 24);
  CHECK(cluster.total_gpus() == 16);
  CHECK(cluster.free_gpus() == 16);  // of the usable GPUs: the planner hands out no others

  // Fewer allocatable than usable is refused, naming the field and the
  // limit, and changes nothing.
  v1::Cluster refused_reply;
  grpc::Status refused = set(16, 12, &refused_reply);
  CHECK(refused.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK_THAT(refused.error_message(),
             Catch::Contains("allocatable_gpus 12 must be at least total_gpus (16)"));
  CHECK(get().allocatable_gpus() == 24);

  // The total alone (the field left 0): not reported.
  CHECK(t.SetCapacity(8).allocatable_gpus() == 0);
  CHECK(get().allocatable_gpus() == 0);
}

TEST_CASE("WatchRecommendations sends current state, SYNCED, then every change, plan by plan",
          "[concurrency]") {
  TestServer t;
  // Fixed-size jobs on a known capacity: each change below is one event.
  t.SetCapacity(2);
  t.Register("ns/a", 1, 1);
  grpc::ClientContext ctx;
  auto reader = t.recs->WatchRecommendations(&ctx, v1::WatchRecommendationsRequest());
  v1::RecommendationEvent event;
  REQUIRE(reader->Read(&event));
  CHECK(event.type() == v1::RecommendationEvent::ADDED);
  CHECK(event.recommendation().job_id() == "ns/a");
  const uint64_t listed_plan = event.plan_id();
  CHECK(listed_plan > 0);  // ns/a's plan: the list is of whole plans
  REQUIRE(reader->Read(&event));
  CHECK(event.type() == v1::RecommendationEvent::SYNCED);
  CHECK(event.plan_id() == listed_plan);  // no PLAN_END after the list

  // Each change is a plan of its own: its events, then its PLAN_END, with
  // ids increasing.
  t.Register("ns/b", 1, 1);
  REQUIRE(reader->Read(&event));
  CHECK(event.type() == v1::RecommendationEvent::ADDED);
  CHECK(event.recommendation().job_id() == "ns/b");
  const uint64_t added_plan = event.plan_id();
  CHECK(added_plan > listed_plan);
  REQUIRE(reader->Read(&event));
  CHECK(event.type() == v1::RecommendationEvent::PLAN_END);
  CHECK(event.plan_id() == added_plan);
  CHECK_FALSE(event.has_recommendation());

  t.SetCapacity(1);
  REQUIRE(reader->Read(&event));
  CHECK(event.type() == v1::RecommendationEvent::MODIFIED);
  CHECK(event.recommendation().job_id() == "ns/b");
  CHECK(event.recommendation().replicas() == 0);
  CHECK(event.recommendation().generation() == 2);
  const uint64_t suspend_plan = event.plan_id();
  CHECK(suspend_plan > added_plan);
  REQUIRE(reader->Read(&event));
  CHECK(event.type() == v1::RecommendationEvent::PLAN_END);
  CHECK(event.plan_id() == suspend_plan);

  {
    grpc::ClientContext del_ctx;
    v1::DeregisterJobRequest del;
    del.set_job_id("ns/a");
    v1::DeregisterJobResponse resp;
    REQUIRE(t.jobs->DeregisterJob(&del_ctx, del, &resp).ok());
  }
  REQUIRE(reader->Read(&event));
  CHECK(event.type() == v1::RecommendationEvent::DELETED);
  CHECK(event.recommendation().job_id() == "ns/a");
  const uint64_t deleted_plan = event.plan_id();
  CHECK(deleted_plan > suspend_plan);
  // ns/b now fits and starts: in the deregistration's plan or the next
  // (the engine decides), and a PLAN_END follows each.
  REQUIRE(reader->Read(&event));
  if (event.type() == v1::RecommendationEvent::PLAN_END) {
    CHECK(event.plan_id() == deleted_plan);
    REQUIRE(reader->Read(&event));
  }
  CHECK(event.type() == v1::RecommendationEvent::MODIFIED);
  CHECK(event.recommendation().job_id() == "ns/b");
  CHECK(event.recommendation().replicas() == 1);
  const uint64_t start_plan = event.plan_id();
  CHECK(start_plan >= deleted_plan);
  REQUIRE(reader->Read(&event));
  CHECK(event.type() == v1::RecommendationEvent::PLAN_END);
  CHECK(event.plan_id() == start_plan);

  ctx.TryCancel();
  while (reader->Read(&event)) {
  }
  CHECK(reader->Finish().error_code() == grpc::StatusCode::CANCELLED);
}

// The watch reactor under load, for ThreadSanitizer: writers change specs
// from several threads (each change publishes on the writer's thread, which
// pumps every reactor), watchers read on theirs, and one watcher cancels
// midway. Every surviving watcher must end on the server's final state.
TEST_CASE("watch streams converge on the final state while writers race and a watcher cancels",
          "[concurrency]") {
  TestServer t;
  constexpr int kJobs = 4;
  constexpr int kRoundsPerWriter = 30;
  for (int j = 0; j < kJobs; ++j) t.Register("ns/j" + std::to_string(j), 1, 64);

  struct Watcher {
    grpc::ClientContext ctx;
    std::unique_ptr<grpc::ClientReader<v1::RecommendationEvent>> reader;
    std::map<std::string, uint32_t> seen;  // job -> replicas, as last streamed
  };
  std::vector<std::unique_ptr<Watcher>> watchers;
  for (int w = 0; w < 3; ++w) {
    auto watcher = std::make_unique<Watcher>();
    watcher->reader =
        t.recs->WatchRecommendations(&watcher->ctx, v1::WatchRecommendationsRequest());
    v1::RecommendationEvent event;
    do {  // through SYNCED: the watcher is registered before writers start
      REQUIRE(watcher->reader->Read(&event));
      if (event.type() == v1::RecommendationEvent::ADDED) {
        watcher->seen[event.recommendation().job_id()] = event.recommendation().replicas();
      }
    } while (event.type() != v1::RecommendationEvent::SYNCED);
    watchers.push_back(std::move(watcher));
  }
  // Each watcher reads until its stream ends; the marker job tells it the
  // writers are done (its MODIFIED comes after every other change).
  std::vector<std::thread> readers;
  for (size_t w = 0; w < watchers.size(); ++w) {
    readers.emplace_back([&, w] {
      Watcher& watcher = *watchers[w];
      v1::RecommendationEvent event;
      while (watcher.reader->Read(&event)) {
        if (event.type() == v1::RecommendationEvent::SYNCED ||
            event.type() == v1::RecommendationEvent::PLAN_END) {
          continue;
        }
        watcher.seen[event.recommendation().job_id()] = event.recommendation().replicas();
        if (event.recommendation().job_id() == "ns/zz-done") break;
        if (w == 0 && watcher.seen.size() > 2 &&
            event.type() == v1::RecommendationEvent::MODIFIED) {
          watcher.ctx.TryCancel();  // leaves mid-stream, writes in flight
        }
      }
    });
  }
  // Catch2's assertions are not thread-safe: threads count, the test checks.
  std::atomic<int> failed_updates = 0;
  std::vector<std::thread> writers;
  for (int w = 0; w < 2; ++w) {
    writers.emplace_back([&, w] {
      for (int round = 0; round < kRoundsPerWriter; ++round) {
        const int job = (round + w) % kJobs;
        v1::UpdateJobRequest req;
        *req.mutable_spec() = Spec("ns/j" + std::to_string(job), 1 + (round * 7 + w) % 32, 64);
        req.mutable_spec()->set_local_batch_size(32);
        grpc::ClientContext ctx;
        v1::Job response;
        if (!t.jobs->UpdateJob(&ctx, req, &response).ok()) ++failed_updates;
      }
    });
  }
  for (std::thread& writer : writers) writer.join();
  CHECK(failed_updates == 0);
  t.Register("ns/zz-done", 1, 1);
  for (std::thread& reader : readers) reader.join();

  grpc::ClientContext list_ctx;
  v1::ListRecommendationsResponse final_state;
  REQUIRE(
      t.recs->ListRecommendations(&list_ctx, v1::ListRecommendationsRequest(), &final_state).ok());
  for (size_t w = 1; w < watchers.size(); ++w) {
    for (const v1::Recommendation& rec : final_state.recommendations()) {
      INFO("watcher " << w << " job " << rec.job_id());
      CHECK(watchers[w]->seen[rec.job_id()] == rec.replicas());
    }
    watchers[w]->ctx.TryCancel();
  }
  for (auto& watcher : watchers) {
    v1::RecommendationEvent event;
    while (watcher->reader->Read(&event)) {
    }
    CHECK(watcher->reader->Finish().error_code() == grpc::StatusCode::CANCELLED);
  }
}

// A WatchRecommendations stream on the callback API, as a client holding
// many would run it: it tracks each job's newest replicas and tells `Fleet`
// when it has synced and when every job is at `target` (or at its entry in
// SetTargets). With `stall_after_sync` it stops reading after SYNCED until
// Resume.
class FleetWatcher final : public grpc::ClientReadReactor<v1::RecommendationEvent> {
 public:
  struct Fleet {
    std::mutex mu;
    std::condition_variable cv;
    int synced = 0;
    int converged = 0;
    int done = 0;
  };
  FleetWatcher(v1::RecommendationService::Stub& stub, Fleet& fleet, size_t jobs, uint32_t target,
               bool stall_after_sync = false)
      : fleet_(fleet), jobs_(jobs), target_(target), stall_after_sync_(stall_after_sync) {
    stub.async()->WatchRecommendations(&context_, &request_, this);
    StartRead(&event_);
    StartCall();
  }
  void SetTargets(std::map<std::string, uint32_t> targets) {
    std::lock_guard<std::mutex> lock(mu_);
    targets_ = std::move(targets);
  }
  void Resume() { StartRead(&event_); }
  void Cancel() { context_.TryCancel(); }
  // Events read since construction.
  int events() const {
    std::lock_guard<std::mutex> lock(mu_);
    return events_;
  }

  void OnReadDone(bool ok) override {
    if (!ok) return;  // OnDone follows
    if (Record()) StartRead(&event_);
  }
  void OnDone(const grpc::Status&) override {
    std::lock_guard<std::mutex> lock(fleet_.mu);
    ++fleet_.done;
    fleet_.cv.notify_all();
  }

 private:
  // Takes in the event read; false when the watcher stalls here.
  bool Record() {
    // gRPC runs one callback of a reactor at a time, but on any of its
    // threads, ordered by its own (uninstrumented) synchronisation: the
    // lock makes that order visible to ThreadSanitizer.
    std::lock_guard<std::mutex> own_lock(mu_);
    ++events_;
    if (event_.type() == v1::RecommendationEvent::SYNCED) {
      std::lock_guard<std::mutex> lock(fleet_.mu);
      ++fleet_.synced;
      fleet_.cv.notify_all();
      return !stall_after_sync_;
    }
    if (event_.type() == v1::RecommendationEvent::PLAN_END) return true;
    replicas_[event_.recommendation().job_id()] = event_.recommendation().replicas();
    const bool all_at_target =
        replicas_.size() == jobs_ &&
        std::all_of(replicas_.begin(), replicas_.end(), [&](const auto& job) {
          auto it = targets_.find(job.first);
          return job.second == (it == targets_.end() ? target_ : it->second);
        });
    if (all_at_target && !converged_) {
      converged_ = true;
      std::lock_guard<std::mutex> lock(fleet_.mu);
      ++fleet_.converged;
      fleet_.cv.notify_all();
    }
    return true;
  }

  Fleet& fleet_;
  const size_t jobs_;
  const uint32_t target_;
  const bool stall_after_sync_;
  mutable std::mutex mu_;
  grpc::ClientContext context_;
  v1::WatchRecommendationsRequest request_;
  v1::RecommendationEvent event_;
  std::map<std::string, uint32_t> replicas_;
  std::map<std::string, uint32_t> targets_;
  bool converged_ = false;
  int events_ = 0;
};

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
constexpr int kFleetWatchers = 100;  // the sanitizers' slowdown; same code paths
#else
constexpr int kFleetWatchers = 1000;
#endif

// 1,000 streams each get every job's newest state after a plan that changes
// all of them; a watcher that stops reading is then sent the newest state,
// not every change made meanwhile, so it costs memory bounded by the jobs.
// (How fast they converge is rescale-load --jobs N --watchers W's.)
TEST_CASE("a thousand watchers each get every job's new state, a stalled one stays bounded",
          "[concurrency]") {
  TestServer t;
  constexpr int kJobs = 10;
  for (int j = 0; j < kJobs; ++j) t.Register("ns/j" + std::to_string(j), 1, 64);
  t.SetCapacity(64 * kJobs);
  {
    grpc::ClientContext ctx;
    v1::ListRecommendationsResponse before;
    REQUIRE(t.recs->ListRecommendations(&ctx, v1::ListRecommendationsRequest(), &before).ok());
    for (const v1::Recommendation& rec : before.recommendations()) {
      INFO(rec.job_id());
      REQUIRE(rec.replicas() > 1);  // so one GPU each changes every job
    }
  }
  FleetWatcher::Fleet fleet;
  std::vector<std::unique_ptr<FleetWatcher>> watchers;
  for (int w = 0; w < kFleetWatchers; ++w) {
    watchers.push_back(std::make_unique<FleetWatcher>(*t.recs, fleet, kJobs, 1));
  }
  {
    std::unique_lock<std::mutex> lock(fleet.mu);
    fleet.cv.wait(lock, [&] { return fleet.synced == kFleetWatchers; });
  }
  t.SetCapacity(kJobs);  // one GPU each: every job changes
  {
    std::unique_lock<std::mutex> lock(fleet.mu);
    fleet.cv.wait(lock, [&] { return fleet.converged == kFleetWatchers; });
  }
  for (auto& watcher : watchers) {
    // ADDED for each job, SYNCED, then at least one MODIFIED each.
    CHECK(watcher->events() >= 2 * kJobs + 1);
    watcher->Cancel();
  }
  {
    std::unique_lock<std::mutex> lock(fleet.mu);
    fleet.cv.wait(lock, [&] { return fleet.done == kFleetWatchers; });
  }

  // A watcher on its own connection stops reading after SYNCED while 1,000
  // plans change every job (10,000 changes).
  // A small receive window (no BDP growth), so that what HTTP/2 lets through
  // before the stall is small beside the changes.
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 16 * 1024);
  auto channel =
      grpc::CreateCustomChannel(t.server->address(), grpc::InsecureChannelCredentials(), args);
  auto stub = v1::RecommendationService::NewStub(channel);
  FleetWatcher::Fleet stalled_fleet;
  FleetWatcher stalled(*stub, stalled_fleet, kJobs, 0, /*stall_after_sync=*/true);
  {
    std::unique_lock<std::mutex> lock(stalled_fleet.mu);
    stalled_fleet.cv.wait(lock, [&] { return stalled_fleet.synced == 1; });
  }
  constexpr int kRounds = 1000;
  for (int round = 0; round < kRounds; ++round) t.SetCapacity(round % 2 == 0 ? 3 * kJobs : kJobs);
  // The last plan, as the stalled watcher must end on it.
  const v1::Cluster last = t.SetCapacity(2 * kJobs);
  std::map<std::string, uint32_t> final_state;
  for (const v1::JobAllocation& a : last.allocations()) final_state[a.job_id()] = a.replicas();
  REQUIRE(final_state.size() == kJobs);
  stalled.SetTargets(final_state);  // not reading: nothing runs on its reactor
  stalled.Resume();
  {
    std::unique_lock<std::mutex> lock(stalled_fleet.mu);
    stalled_fleet.cv.wait(lock, [&] { return stalled_fleet.converged == 1; });
  }
  // What HTTP/2 flow control let through before the stall (its window),
  // then one pending state per job: far below the 10,000 changes.
  CHECK(stalled.events() < kRounds * kJobs / 5);
  stalled.Cancel();
  std::unique_lock<std::mutex> lock(stalled_fleet.mu);
  stalled_fleet.cv.wait(lock, [&] { return stalled_fleet.done == 1; });
}

TEST_CASE("WatchRecommendations beyond --max_watchers is RESOURCE_EXHAUSTED") {
  ServerOptions options;
  options.engine.max_watchers = 1;
  TestServer t(options);
  grpc::ClientContext first_ctx;
  auto first = t.recs->WatchRecommendations(&first_ctx, v1::WatchRecommendationsRequest());
  v1::RecommendationEvent event;
  REQUIRE(first->Read(&event));  // SYNCED: the first watcher is registered
  grpc::ClientContext second_ctx;
  auto second = t.recs->WatchRecommendations(&second_ctx, v1::WatchRecommendationsRequest());
  CHECK_FALSE(second->Read(&event));
  grpc::Status status = second->Finish();
  CHECK(status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
  CHECK_THAT(status.error_message(), Catch::Contains("--max_watchers"));
  first_ctx.TryCancel();
  while (first->Read(&event)) {
  }
  first->Finish();
}

TEST_CASE("shutdown ends watch streams with UNAVAILABLE and health stops serving",
          "[concurrency]") {
  TestServer t;
  grpc::ClientContext ctx;
  auto reader = t.recs->WatchRecommendations(&ctx, v1::WatchRecommendationsRequest());
  v1::RecommendationEvent event;
  REQUIRE(reader->Read(&event));
  CHECK(event.type() == v1::RecommendationEvent::SYNCED);
  t.server->Shutdown(absl::Seconds(5));
  CHECK_FALSE(reader->Read(&event));
  grpc::Status status = reader->Finish();
  CHECK(status.error_code() == grpc::StatusCode::UNAVAILABLE);
  CHECK_THAT(status.error_message(), Catch::Contains("shutting down"));
}

TEST_CASE("the standard health service answers SERVING for the server and each service") {
  TestServer t;
  auto health = grpc::health::v1::Health::NewStub(t.channel);
  for (const char* service : {"", "rescale.v1.JobService", "rescale.v1.MetricsService",
                              "rescale.v1.RecommendationService", "rescale.v1.ClusterService"}) {
    grpc::ClientContext ctx;
    grpc::health::v1::HealthCheckRequest req;
    req.set_service(service);
    grpc::health::v1::HealthCheckResponse resp;
    INFO(service);
    REQUIRE(health->Check(&ctx, req, &resp).ok());
    CHECK(resp.status() == grpc::health::v1::HealthCheckResponse::SERVING);
  }
}

TEST_CASE("server reflection lists the four rescale.v1 services") {
  TestServer t;
  // grpc++_reflection registers the reflection messages in the generated
  // pool; a dynamic message speaks the protocol without vendoring its .proto.
  const google::protobuf::DescriptorPool* pool = google::protobuf::DescriptorPool::generated_pool();
  const auto* request_type =
      pool->FindMessageTypeByName("grpc.reflection.v1alpha.ServerReflectionRequest");
  const auto* response_type =
      pool->FindMessageTypeByName("grpc.reflection.v1alpha.ServerReflectionResponse");
  REQUIRE(request_type != nullptr);
  REQUIRE(response_type != nullptr);
  google::protobuf::DynamicMessageFactory factory(pool);
  std::unique_ptr<google::protobuf::Message> request(factory.GetPrototype(request_type)->New());
  std::unique_ptr<google::protobuf::Message> response(factory.GetPrototype(response_type)->New());
  REQUIRE(google::protobuf::TextFormat::ParseFromString("list_services: \"\"", request.get()));

  grpc::GenericStub stub(t.channel);
  grpc::CompletionQueue cq;
  grpc::ClientContext ctx;
  auto call =
      stub.PrepareCall(&ctx, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", &cq);
  void* tag = nullptr;
  bool ok = false;
  auto await = [&](intptr_t expected) {
    REQUIRE(cq.Next(&tag, &ok));
    CHECK(reinterpret_cast<intptr_t>(tag) == expected);
    return ok;
  };
  call->StartCall(reinterpret_cast<void*>(1));
  REQUIRE(await(1));
  grpc::ByteBuffer out;
  bool own = false;
  REQUIRE(grpc::GenericSerialize<grpc::ProtoBufferWriter, google::protobuf::Message>(*request, &out,
                                                                                     &own)
              .ok());
  call->Write(out, reinterpret_cast<void*>(2));
  REQUIRE(await(2));
  call->WritesDone(reinterpret_cast<void*>(3));
  REQUIRE(await(3));
  grpc::ByteBuffer in;
  call->Read(&in, reinterpret_cast<void*>(4));
  REQUIRE(await(4));
  REQUIRE(grpc::GenericDeserialize<grpc::ProtoBufferReader, google::protobuf::Message>(
              &in, response.get())
              .ok());
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(5));
  await(5);
  CHECK(status.ok());
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }

  const std::string text = response->DebugString();
  for (const char* service :
       {"rescale.v1.MetricsService", "rescale.v1.JobService", "rescale.v1.RecommendationService",
        "rescale.v1.ClusterService", "grpc.health.v1.Health"}) {
    INFO(text);
    CHECK_THAT(text, Catch::Contains(std::string("name: \"") + service + "\""));
  }
}

TEST_CASE("Start reports a clear error for an address it cannot bind") {
  ServerOptions options;
  options.listen = "256.0.0.1:1";
  options.run_plan_timer = false;
  auto started = RescaleServer::Start(options);
  REQUIRE_FALSE(started.ok());
  CHECK_THAT(std::string(started.status().message()), Catch::Contains("256.0.0.1:1"));
}

TEST_CASE("Start refuses bad options, naming the option: its own and the engine's") {
  ServerOptions options;
  options.listen = "127.0.0.1:0";
  options.run_plan_timer = false;
  SECTION("a TLS file that does not exist") {
    options.tls_cert_file = "/nonexistent/tls.crt";
    options.tls_key_file = "/nonexistent/tls.key";
    auto started = RescaleServer::Start(options);
    CHECK(started.status().code() == absl::StatusCode::kNotFound);
    CHECK_THAT(std::string(started.status().message()),
               Catch::Contains("--tls_cert_file") && Catch::Contains("/nonexistent/tls.crt"));
  }
  SECTION("the server's own limit") {
    options.max_batch_samples = 0;
    auto started = RescaleServer::Start(options);
    CHECK(started.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(started.status().message()),
               Catch::Contains("max_batch_samples must be at least 1"));
  }
  SECTION("an engine option, checked by DecisionEngine::Create") {
    options.engine.default_policy = "magic";
    auto started = RescaleServer::Start(options);
    CHECK(started.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(started.status().message()),
               Catch::Contains("default_policy \"magic\" is not a known policy"));
  }
}
