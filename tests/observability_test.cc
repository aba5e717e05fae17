// rescaled's Prometheus metrics, scraped over HTTP as Prometheus would:
// an in-process server on free ports driven through gRPC by a scripted
// sequence of calls, its /metrics checked value by value and by Debian's
// promtool; and the rescaled binary's --metrics_listen (a free port, and a
// taken one refused at start-up naming the flag).
#include "server/observability.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/security/credentials.h>
#include <httplib.h>

#include <catch2/catch.hpp>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "rescale/clock.h"
#include "rescale/v1/rescale.grpc.pb.h"
#include "server/server.h"
#include "spdlog/spdlog.h"
#include "tests/child_process.h"

namespace {

using rescale::server::RescaleServer;
using rescale::server::ServerOptions;
namespace v1 = rescale::v1;

// One sample of the exposition: name, labels, value.
struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

// Parses the text format's sample lines (prometheus-cpp writes no escapes
// in our label values, none of which holds a quote or a backslash).
std::vector<Sample> ParseExposition(const std::string& text) {
  std::vector<Sample> samples;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] == '#') continue;
    Sample sample;
    size_t pos = line.find_first_of("{ ");
    sample.name = line.substr(0, pos);
    if (line[pos] == '{') {
      const size_t end = line.find('}', pos);
      std::string labels = line.substr(pos + 1, end - pos - 1);
      size_t at = 0;
      while (at < labels.size()) {
        const size_t eq = labels.find('=', at);
        const size_t close = labels.find('"', eq + 2);
        sample.labels[labels.substr(at, eq - at)] = labels.substr(eq + 2, close - eq - 2);
        at = close + 2;  // past `",`
      }
      pos = end + 1;
    }
    std::string value = line.substr(pos + 1);
    value = value.substr(0, value.find(' '));  // a timestamp may follow
    REQUIRE(absl::SimpleAtod(value, &sample.value));
    samples.push_back(std::move(sample));
  }
  return samples;
}

// The value of the series `name` whose labels include `labels`; nullopt
// when there is none (and a failure when more than one match).
std::optional<double> Value(const std::vector<Sample>& samples, const std::string& name,
                            const std::map<std::string, std::string>& labels = {}) {
  std::optional<double> found;
  for (const Sample& sample : samples) {
    if (sample.name != name) continue;
    bool match = true;
    for (const auto& [key, value] : labels) {
      auto it = sample.labels.find(key);
      match &= it != sample.labels.end() && it->second == value;
    }
    if (!match) continue;
    REQUIRE_FALSE(found.has_value());
    found = sample.value;
  }
  return found;
}

std::string Scrape(int port) {
  httplib::Client client("127.0.0.1", port);
  client.set_read_timeout(10, 0);
  httplib::Result result = client.Get("/metrics");
  REQUIRE(result);
  REQUIRE(result->status == 200);
  return result->body;
}

// promtool's verdict on an exposition: its output (empty = no problem) and
// exit status.
std::pair<std::string, int> PromtoolCheck(const std::string& exposition) {
  REQUIRE(std::filesystem::exists("/usr/bin/promtool"));  // Debian's prometheus package
  const std::filesystem::path file = std::filesystem::temp_directory_path() /
                                     ("rescale-metrics-" + std::to_string(::getpid()) + ".txt");
  std::ofstream(file) << exposition;
  FILE* pipe =
      ::popen(("/usr/bin/promtool check metrics < " + file.string() + " 2>&1").c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::string output;
  char buffer[4096];
  while (size_t n = std::fread(buffer, 1, sizeof buffer, pipe)) output.append(buffer, n);
  const int status = ::pclose(pipe);
  std::filesystem::remove(file);
  return {output, WIFEXITED(status) ? WEXITSTATUS(status) : -1};
}

v1::StepSample Step(const std::string& job, const std::string& pod, double seconds,
                    std::optional<uint64_t> step = std::nullopt) {
  v1::StepSample sample;
  sample.set_job_id(job);
  sample.set_pod(pod);
  sample.set_world_size(2);
  sample.set_step_seconds(seconds);
  sample.set_batch_size(32);
  if (step) sample.set_step(*step);
  return sample;
}

struct MetricsServer {
  explicit MetricsServer(ServerOptions options = {}) {
    spdlog::set_level(spdlog::level::warn);
    options.listen = "127.0.0.1:0";
    options.metrics_listen = "127.0.0.1:0";
    options.run_plan_timer = false;  // every change plans before its reply
    options.clock = &clock;
    auto started = RescaleServer::Start(options);
    INFO(started.status().ToString());
    REQUIRE(started.ok());
    server = *std::move(started);
    channel = grpc::CreateChannel(server->address(), grpc::InsecureChannelCredentials());
    metrics = v1::MetricsService::NewStub(channel);
    jobs = v1::JobService::NewStub(channel);
    recs = v1::RecommendationService::NewStub(channel);
    cluster = v1::ClusterService::NewStub(channel);
  }
  std::vector<Sample> Scrape() { return ParseExposition(::Scrape(server->metrics_port())); }

  rescale::ManualClock clock;
  std::unique_ptr<RescaleServer> server;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::MetricsService::Stub> metrics;
  std::unique_ptr<v1::JobService::Stub> jobs;
  std::unique_ptr<v1::RecommendationService::Stub> recs;
  std::unique_ptr<v1::ClusterService::Stub> cluster;
};

}  // namespace

TEST_CASE("metrics count samples, plans, rejections and calls as a scripted session made them",
          "[metrics]") {
  ServerOptions options;
  options.max_batch_samples = 10;
  MetricsServer t(options);
  REQUIRE(t.server->metrics_port() > 0);

  const std::vector<Sample> before = t.Scrape();
  const double plans_before = Value(before, "rescale_plan_duration_seconds_count").value_or(-1);
  CHECK(plans_before >= 1);  // Start plans once
  CHECK(Value(before, "rescale_samples_accepted_total") == 0.0);
  // Every rejection reason is there from the start, at 0.
  for (const char* reason :
       {"invalid", "unknown_job", "limit", "batch_too_large", "permission_denied"}) {
    CHECK(Value(before, "rescale_samples_rejected_total", {{"reason", reason}}) == 0.0);
  }
  CHECK_FALSE(Value(before, "rescale_gpus_capacity").has_value());  // unknown, not 0
  CHECK_FALSE(Value(before, "rescale_gpus_allocatable").has_value());  // not reported, not 0

  {
    grpc::ClientContext ctx;
    v1::SetCapacityRequest request;
    request.set_total_gpus(8);
    request.set_allocatable_gpus(12);
    v1::Cluster reply;
    REQUIRE(t.cluster->SetCapacity(&ctx, request, &reply).ok());
  }
  {
    grpc::ClientContext ctx;
    v1::RegisterJobRequest request;
    request.mutable_spec()->set_job_id("team-a/bert");
    request.mutable_spec()->set_min_replicas(2);
    request.mutable_spec()->set_max_replicas(4);
    v1::Job job;
    REQUIRE(t.jobs->RegisterJob(&ctx, request, &job).ok());
    REQUIRE(job.recommendation().replicas() >= 2);
  }
  {
    grpc::ClientContext ctx;  // NOT_FOUND
    v1::GetJobRequest request;
    request.set_job_id("team-a/none");
    v1::Job job;
    REQUIRE(t.jobs->GetJob(&ctx, request, &job).error_code() == grpc::StatusCode::NOT_FOUND);
  }
  // One unary batch: 4 accepted, one invalid (negative step time), one for
  // an unknown job, one resend of an accepted step (duplicate).
  {
    grpc::ClientContext ctx;
    v1::SampleBatch batch;
    for (uint64_t step = 1; step <= 4; ++step) {
      *batch.add_samples() = Step("team-a/bert", "bert-worker-0", 0.5, step);
    }
    *batch.add_samples() = Step("team-a/bert", "bert-worker-1", -1);
    *batch.add_samples() = Step("team-a/unknown", "x-worker-0", 0.5);
    *batch.add_samples() = Step("team-a/bert", "bert-worker-0", 0.5, 4);
    v1::IngestSummary summary;
    REQUIRE(t.metrics->ReportSamples(&ctx, batch, &summary).ok());
    INFO(summary.DebugString());
    REQUIRE(summary.accepted() == 4);
    REQUIRE(summary.rejected() == 2);
    REQUIRE(summary.duplicates() == 1);
  }
  // A batch over --max_batch_samples: refused whole.
  {
    grpc::ClientContext ctx;
    v1::SampleBatch batch;
    for (int i = 0; i < 11; ++i) *batch.add_samples() = Step("team-a/bert", "bert-worker-2", 0.5);
    v1::IngestSummary summary;
    REQUIRE(t.metrics->ReportSamples(&ctx, batch, &summary).error_code() ==
            grpc::StatusCode::INVALID_ARGUMENT);
  }
  // A client stream of two batches of 3.
  {
    grpc::ClientContext ctx;
    v1::IngestSummary summary;
    auto writer = t.metrics->StreamSamples(&ctx, &summary);
    for (int b = 0; b < 2; ++b) {
      v1::SampleBatch batch;
      for (int i = 0; i < 3; ++i) *batch.add_samples() = Step("team-a/bert", "bert-worker-3", 0.5);
      REQUIRE(writer->Write(batch));
    }
    writer->WritesDone();
    REQUIRE(writer->Finish().ok());
    REQUIRE(summary.accepted() == 6);
  }
  // A watcher, established once its first event has arrived.
  grpc::ClientContext watch_ctx;
  auto watch = t.recs->WatchRecommendations(&watch_ctx, v1::WatchRecommendationsRequest());
  v1::RecommendationEvent event;
  REQUIRE(watch->Read(&event));

  const std::vector<Sample> after = t.Scrape();
  CHECK(Value(after, "rescale_samples_accepted_total") == 10.0);  // 4 + 6, as sent
  CHECK(Value(after, "rescale_samples_duplicate_total") == 1.0);
  CHECK(Value(after, "rescale_samples_rejected_total", {{"reason", "invalid"}}) == 1.0);
  CHECK(Value(after, "rescale_samples_rejected_total", {{"reason", "unknown_job"}}) == 1.0);
  CHECK(Value(after, "rescale_samples_rejected_total", {{"reason", "batch_too_large"}}) == 11.0);
  CHECK(Value(after, "rescale_samples_rejected_total", {{"reason", "limit"}}) == 0.0);
  // SetCapacity and RegisterJob each planned.
  CHECK(Value(after, "rescale_plan_duration_seconds_count").value_or(0) >= plans_before + 2);
  CHECK(Value(after, "rescale_plan_duration_seconds_bucket", {{"le", "+Inf"}}) ==
        Value(after, "rescale_plan_duration_seconds_count"));
  // The job's first recommendation scaled it up from nothing.
  CHECK(Value(after, "rescale_recommendation_changes_total", {{"action", "scale_up"}}) == 1.0);
  CHECK(Value(after, "rescale_jobs", {{"state", "running"}}) == 1.0);
  CHECK(Value(after, "rescale_jobs", {{"state", "waiting"}}) == 0.0);
  CHECK(Value(after, "rescale_jobs", {{"state", "suspended"}}) == 0.0);
  CHECK(Value(after, "rescale_gpus_capacity") == 8.0);
  CHECK(Value(after, "rescale_gpus_allocatable") == 12.0);
  CHECK(Value(after, "rescale_gpus_allocated").value_or(0) >= 2.0);
  CHECK(Value(after, "rescale_watchers") == 1.0);
  CHECK(Value(after, "rescale_leading") == 1.0);
  CHECK(Value(after, "rescale_plan_optimality_gap").has_value());

  // gRPC, as go-grpc-prometheus names it.
  const auto handled = [&](const std::string& type, const std::string& service,
                           const std::string& method, const std::string& code) {
    return Value(after, "grpc_server_handled_total",
                 {{"grpc_type", type},
                  {"grpc_service", service},
                  {"grpc_method", method},
                  {"grpc_code", code}});
  };
  CHECK(handled("unary", "rescale.v1.JobService", "RegisterJob", "OK") == 1.0);
  CHECK(handled("unary", "rescale.v1.JobService", "GetJob", "NotFound") == 1.0);
  CHECK(handled("unary", "rescale.v1.MetricsService", "ReportSamples", "OK") == 1.0);
  CHECK(handled("unary", "rescale.v1.MetricsService", "ReportSamples", "InvalidArgument") == 1.0);
  CHECK(handled("client_stream", "rescale.v1.MetricsService", "StreamSamples", "OK") == 1.0);
  CHECK(Value(after, "grpc_server_started_total",
              {{"grpc_type", "server_stream"},
               {"grpc_service", "rescale.v1.RecommendationService"},
               {"grpc_method", "WatchRecommendations"}}) == 1.0);
  CHECK(Value(after, "grpc_server_handling_seconds_count",
              {{"grpc_service", "rescale.v1.JobService"}, {"grpc_method", "GetJob"}}) == 1.0);

  const std::string text = ::Scrape(t.server->metrics_port());
  const auto [output, status] = PromtoolCheck(text);
  INFO(output);
  CHECK(status == 0);
  CHECK(output.empty());

  watch_ctx.TryCancel();
}

TEST_CASE("a method no service serves is counted as unknown, not under its name", "[metrics]") {
  MetricsServer t;
  grpc::GenericStub stub(t.channel);
  // A made-up method: the label set must not grow with what clients send.
  for (const char* method : {"/rescale.v1.JobService/Nope", "/made.Up/Thing"}) {
    grpc::ClientContext ctx;
    // An empty message (a ByteBuffer with no slice at all is not one).
    grpc::Slice empty("");
    grpc::ByteBuffer request(&empty, 1);
    grpc::ByteBuffer reply;
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    grpc::Status status;
    stub.UnaryCall(&ctx, method, grpc::StubOptions(), &request, &reply, [&](grpc::Status s) {
      std::lock_guard<std::mutex> lock(mu);
      status = s;
      done = true;
      cv.notify_all();
    });
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return done; });
    CHECK(status.error_code() == grpc::StatusCode::UNIMPLEMENTED);
  }
  const std::string text = ::Scrape(t.server->metrics_port());
  CHECK(text.find("Nope") == std::string::npos);
  CHECK(text.find("made.Up") == std::string::npos);
}

TEST_CASE("a metrics address already in use stops start-up naming --metrics_listen", "[metrics]") {
  MetricsServer first;
  ServerOptions options;
  options.listen = "127.0.0.1:0";
  options.run_plan_timer = false;
  const std::string taken = "127.0.0.1:" + std::to_string(first.server->metrics_port());
  options.metrics_listen = taken;
  auto second = RescaleServer::Start(options);
  REQUIRE_FALSE(second.ok());
  CHECK(second.status().code() == absl::StatusCode::kUnavailable);
  CHECK_THAT(std::string(second.status().message()),
             Catch::Contains("--metrics_listen") && Catch::Contains(taken));
  // Without --metrics_listen nothing is served and no port is taken.
  options.metrics_listen = "";
  auto off = RescaleServer::Start(options);
  REQUIRE(off.ok());
  CHECK((*off)->metrics_port() == 0);
}

TEST_CASE("the rescaled binary serves /metrics on --metrics_listen and refuses a taken one",
          "[metrics]") {
  auto started = rescale::testing::ChildProcess::Start({RESCALED_BINARY, "--listen=127.0.0.1:0",
                                                        "--metrics_listen=127.0.0.1:0",
                                                        "--state=memory", "--capacity_gpus=16"});
  REQUIRE(started.ok());
  std::unique_ptr<rescale::testing::ChildProcess> rescaled = *std::move(started);
  const std::optional<std::string> line =
      rescaled->WaitForLine("metrics at http://", absl::Seconds(30));
  INFO(rescaled->Output());
  REQUIRE(line.has_value());
  const size_t colon = line->find(':', line->find("http://") + 7);
  const int port = std::stoi(line->substr(colon + 1));
  REQUIRE(port > 0);
  const std::vector<Sample> samples = ParseExposition(Scrape(port));
  CHECK(Value(samples, "rescale_gpus_capacity") == 16.0);
  CHECK(Value(samples, "rescale_jobs", {{"state", "running"}}) == 0.0);

  auto clash = rescale::testing::ChildProcess::Start(
      {RESCALED_BINARY, "--listen=127.0.0.1:0",
       "--metrics_listen=127.0.0.1:" + std::to_string(port), "--state=memory"});
  REQUIRE(clash.ok());
  const std::optional<int> exit = (*clash)->WaitForExit(absl::Seconds(30));
  INFO((*clash)->Output());
  REQUIRE(exit.has_value());
  CHECK(*exit != 0);
  CHECK_THAT((*clash)->Output(), Catch::Contains("--metrics_listen") &&
                                     Catch::Contains("127.0.0.1:" + std::to_string(port)));
}
