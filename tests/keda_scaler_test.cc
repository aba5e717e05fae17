// rescaled as a KEDA external scaler: the four RPCs of KEDA's contract
// (proto/externalscaler/externalscaler.proto), called from a client
// generated from the same contract against the real server in-process on a
// loopback port, plus the mapping from a ScaledObject to a job. The
// stream's tests synchronise on its blocking reads, never on sleeps.
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include <catch2/catch.hpp>
#include <memory>
#include <string>

#include "externalscaler/externalscaler.grpc.pb.h"
#include "rescale/v1/rescale.grpc.pb.h"
#include "server/keda_scaler.h"
#include "server/server.h"
#include "spdlog/sinks/null_sink.h"
#include "spdlog/spdlog.h"

namespace {

using rescale::server::RescaleServer;
using rescale::server::ServerOptions;
namespace es = externalscaler;
namespace v1 = rescale::v1;

// rescaled, each change planned before its reply (no plan timer).
struct KedaServer {
  KedaServer() {
    spdlog::set_level(spdlog::level::warn);
    ServerOptions options;
    options.listen = "127.0.0.1:0";
    options.run_plan_timer = false;
    options.audit_sink = std::make_shared<spdlog::sinks::null_sink_mt>();
    auto started = RescaleServer::Start(options);
    REQUIRE(started.status().message() == "");
    server = *std::move(started);
    channel = grpc::CreateChannel(server->address(), grpc::InsecureChannelCredentials());
    keda = es::ExternalScaler::NewStub(channel);
    jobs = v1::JobService::NewStub(channel);
    cluster = v1::ClusterService::NewStub(channel);
  }

  void Register(const std::string& id, uint32_t min, uint32_t max, int32_t priority = 0) {
    grpc::ClientContext ctx;
    v1::RegisterJobRequest req;
    req.mutable_spec()->set_job_id(id);
    req.mutable_spec()->set_min_replicas(min);
    req.mutable_spec()->set_max_replicas(max);
    req.mutable_spec()->set_priority(priority);
    req.mutable_spec()->set_local_batch_size(32);
    v1::Job job;
    grpc::Status status = jobs->RegisterJob(&ctx, req, &job);
    REQUIRE(status.error_message() == "");
  }
  void Deregister(const std::string& id) {
    grpc::ClientContext ctx;
    v1::DeregisterJobRequest req;
    req.set_job_id(id);
    v1::DeregisterJobResponse reply;
    REQUIRE(jobs->DeregisterJob(&ctx, req, &reply).error_message() == "");
  }
  void SetCapacity(uint32_t gpus) {
    grpc::ClientContext ctx;
    v1::SetCapacityRequest req;
    req.set_total_gpus(gpus);
    v1::Cluster reply;
    REQUIRE(cluster->SetCapacity(&ctx, req, &reply).error_message() == "");
  }

  grpc::Status IsActive(const es::ScaledObjectRef& ref, bool* active) {
    grpc::ClientContext ctx;
    es::IsActiveResponse reply;
    grpc::Status status = keda->IsActive(&ctx, ref, &reply);
    *active = reply.result();
    return status;
  }
  grpc::Status GetMetrics(const es::ScaledObjectRef& ref, const std::string& metric,
                          es::GetMetricsResponse* reply) {
    grpc::ClientContext ctx;
    es::GetMetricsRequest req;
    *req.mutable_scaledobjectref() = ref;
    req.set_metricname(metric);
    return keda->GetMetrics(&ctx, req, reply);
  }

  std::unique_ptr<RescaleServer> server;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<es::ExternalScaler::Stub> keda;
  std::unique_ptr<v1::JobService::Stub> jobs;
  std::unique_ptr<v1::ClusterService::Stub> cluster;
};

// A ScaledObject in `ns` named `name`, its trigger's metadata naming `job`
// (none when empty), as KEDA sends it.
es::ScaledObjectRef Ref(const std::string& ns, const std::string& name,
                        const std::string& job = "") {
  es::ScaledObjectRef ref;
  ref.set_namespace_(ns);
  ref.set_name(name);
  (*ref.mutable_scalermetadata())["scalerAddress"] = "rescaled.rescale-system:50051";
  if (!job.empty()) (*ref.mutable_scalermetadata())["job"] = job;
  return ref;
}

}  // namespace

TEST_CASE("a ScaledObject's job is its metadata's job, else its namespace and name", "[keda]") {
  using rescale::server::KedaJobId;
  CHECK(KedaJobId(Ref("team-a", "bert-scaler", "team-a/bert")).value() == "team-a/bert");
  CHECK(KedaJobId(Ref("team-a", "bert")).value() == "team-a/bert");

  absl::StatusOr<std::string> bad = KedaJobId(Ref("team-a", "x", "bert"));
  CHECK(bad.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(bad.status().message()), Catch::Contains("scalerMetadata.job"));
  absl::StatusOr<std::string> unnamed = KedaJobId(Ref("", ""));
  CHECK(unnamed.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(unnamed.status().message()),
             Catch::Contains("needs a namespace and a name, or scalerMetadata.job"));
  CHECK(KedaJobId(Ref("Team_A", "bert")).status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("GetMetricSpec asks the HPA for one replica per unit of rescale-replicas", "[keda]") {
  KedaServer t;
  grpc::ClientContext ctx;
  es::GetMetricSpecResponse reply;
  // The job need not be registered yet: KEDA asks when it makes the HPA.
  REQUIRE(t.keda->GetMetricSpec(&ctx, Ref("team-a", "bert"), &reply).error_message() == "");
  REQUIRE(reply.metricspecs_size() == 1);
  CHECK(reply.metricspecs(0).metricname() == "rescale-replicas");
  CHECK(reply.metricspecs(0).targetsize() == 1);
  CHECK(reply.metricspecs(0).targetsizefloat() == 1.0);

  es::ScaledObjectRef renamed = Ref("team-a", "bert");
  (*renamed.mutable_scalermetadata())["metricName"] = "bert-workers";
  grpc::ClientContext renamed_ctx;
  REQUIRE(t.keda->GetMetricSpec(&renamed_ctx, renamed, &reply).ok());
  CHECK(reply.metricspecs(0).metricname() == "bert-workers");

  grpc::ClientContext bad_ctx;
  grpc::Status bad = t.keda->GetMetricSpec(&bad_ctx, Ref("", ""), &reply);
  CHECK(bad.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_CASE("GetMetrics and IsActive give the recommendation's replicas and whether it runs",
          "[keda]") {
  KedaServer t;
  t.SetCapacity(8);
  t.Register("team-a/bert", 3, 3);

  es::GetMetricsResponse metrics;
  REQUIRE(t.GetMetrics(Ref("team-a", "scaler", "team-a/bert"), "rescale-replicas", &metrics)
              .error_message() == "");
  REQUIRE(metrics.metricvalues_size() == 1);
  CHECK(metrics.metricvalues(0).metricname() == "rescale-replicas");
  CHECK(metrics.metricvalues(0).metricvalue() == 3);
  CHECK(metrics.metricvalues(0).metricvaluefloat() == 3.0);
  bool active = false;
  REQUIRE(t.IsActive(Ref("team-a", "bert"), &active).ok());
  CHECK(active);

  // Capacity for none of it: suspended, inactive, and a value of 0.
  t.SetCapacity(2);
  REQUIRE(t.GetMetrics(Ref("team-a", "bert"), "", &metrics).ok());
  CHECK(metrics.metricvalues(0).metricvalue() == 0);
  CHECK(metrics.metricvalues(0).metricvaluefloat() == 0.0);
  REQUIRE(t.IsActive(Ref("team-a", "bert"), &active).ok());
  CHECK_FALSE(active);
}

TEST_CASE("an unknown job or metric is NOT_FOUND with a message saying what to do", "[keda]") {
  KedaServer t;
  t.Register("team-a/bert", 1, 2);
  bool active = true;
  grpc::Status unknown = t.IsActive(Ref("team-a", "gpt"), &active);
  CHECK(unknown.error_code() == grpc::StatusCode::NOT_FOUND);
  CHECK_THAT(unknown.error_message(),
             Catch::Contains("job \"team-a/gpt\" is not registered with rescaled") &&
                 Catch::Contains("metadata job"));
  es::GetMetricsResponse metrics;
  CHECK(t.GetMetrics(Ref("team-a", "gpt"), "", &metrics).error_code() ==
        grpc::StatusCode::NOT_FOUND);
  grpc::Status wrong_metric = t.GetMetrics(Ref("team-a", "bert"), "cpu", &metrics);
  CHECK(wrong_metric.error_code() == grpc::StatusCode::NOT_FOUND);
  CHECK_THAT(wrong_metric.error_message(), Catch::Contains("its metric is \"rescale-replicas\""));

  grpc::ClientContext ctx;
  auto stream = t.keda->StreamIsActive(&ctx, Ref("team-a", "gpt"));
  es::IsActiveResponse reply;
  CHECK_FALSE(stream->Read(&reply));
  grpc::Status finished = stream->Finish();
  CHECK(finished.error_code() == grpc::StatusCode::NOT_FOUND);
  CHECK_THAT(finished.error_message(), Catch::Contains("not registered"));
}

TEST_CASE("StreamIsActive pushes a job going inactive when a higher-priority job takes its GPUs",
          "[keda][concurrency]") {
  KedaServer t;
  t.SetCapacity(5);
  t.Register("team-a/low", 4, 4, /*priority=*/0);
  t.Register("team-a/other", 1, 1, /*priority=*/0);  // a job the stream must not report

  grpc::ClientContext ctx;
  auto stream = t.keda->StreamIsActive(&ctx, Ref("team-a", "scaler", "team-a/low"));
  es::IsActiveResponse reply;
  REQUIRE(stream->Read(&reply));  // the activity when first seen
  CHECK(reply.result());

  // Only the low-priority job's 4 GPUs make room for it.
  t.Register("team-a/high", 4, 4, /*priority=*/10);
  REQUIRE(stream->Read(&reply));
  CHECK_FALSE(reply.result());
  bool active = true;
  REQUIRE(t.IsActive(Ref("team-a", "low"), &active).ok());
  CHECK_FALSE(active);

  // The GPUs come back: it is active again, pushed at once.
  t.Deregister("team-a/high");
  REQUIRE(stream->Read(&reply));
  CHECK(reply.result());

  // Deregistered: the stream ends, saying why.
  t.Deregister("team-a/low");
  CHECK_FALSE(stream->Read(&reply));
  grpc::Status finished = stream->Finish();
  CHECK(finished.error_code() == grpc::StatusCode::NOT_FOUND);
  CHECK_THAT(finished.error_message(), Catch::Contains("team-a/low\" was deregistered"));
}
