// Authentication, roles, namespaces, mutual TLS and the audit log, against
// an in-process rescaled on a loopback port with a real token file and
// real certificates (tests/test_pki.h), called through the clients' own
// connection code (client/common/credentials.h).
#include "server/auth.h"

#include <grpcpp/create_channel.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "client/common/credentials.h"
#include "client/common/server_list.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "nlohmann/json.hpp"
#include "externalscaler/externalscaler.grpc.pb.h"
#include "rescale/v1/rescale.grpc.pb.h"
#include "server/audit.h"
#include "server/server.h"
#include "tests/eventually.h"
#include "tests/temp_dir.h"
#include "tests/test_pki.h"

namespace {

using rescale::client::BearerToken;
using rescale::client::RescaledConnection;
using rescale::client::SecurityFlags;
using rescale::server::RescaleServer;
using rescale::server::ServerOptions;
using rescale::testing::Eventually;
using rescale::testing::PemPair;
using rescale::testing::TempDir;
using rescale::testing::TestCa;
namespace v1 = rescale::v1;

constexpr char kAdminToken[] = "admin-0123456789abcdef";
constexpr char kControllerToken[] = "controller-0123456789abcdef";
constexpr char kTeamControllerToken[] = "team-controller-0123456789abcdef";
constexpr char kViewerToken[] = "viewer-0123456789abcdef";
constexpr char kReporterToken[] = "reporter-0123456789abcdef";

constexpr char kTokenFile[] =
    "# token,user,role,namespaces\n"
    "admin-0123456789abcdef,root,admin,*\n"
    "controller-0123456789abcdef,adapter,controller,*\n"
    "team-controller-0123456789abcdef,team-adapter,controller,team-a\n"
    "viewer-0123456789abcdef,dashboard,viewer,team-a\n"
    "reporter-0123456789abcdef,agent,reporter,team-a\n"
    "\n"
    "# certificates: namespaces of user \"bob\"\n"
    "bob-0123456789abcdef-unused,bob,viewer,team-b\n";

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
}

// Every service's stub on one channel.
struct Client {
  explicit Client(std::shared_ptr<grpc::Channel> c)
      : channel(std::move(c)),
        metrics(v1::MetricsService::NewStub(channel)),
        jobs(v1::JobService::NewStub(channel)),
        recs(v1::RecommendationService::NewStub(channel)),
        cluster(v1::ClusterService::NewStub(channel)) {}

  grpc::Status Register(const std::string& id) {
    grpc::ClientContext ctx;
    v1::RegisterJobRequest req;
    req.mutable_spec()->set_job_id(id);
    req.mutable_spec()->set_min_replicas(1);
    req.mutable_spec()->set_max_replicas(4);
    req.mutable_spec()->set_local_batch_size(32);
    v1::Job job;
    return jobs->RegisterJob(&ctx, req, &job);
  }
  grpc::Status Get(const std::string& id) {
    grpc::ClientContext ctx;
    v1::GetJobRequest req;
    req.set_job_id(id);
    v1::Job job;
    return jobs->GetJob(&ctx, req, &job);
  }
  grpc::Status Deregister(const std::string& id) {
    grpc::ClientContext ctx;
    v1::DeregisterJobRequest req;
    req.set_job_id(id);
    v1::DeregisterJobResponse reply;
    return jobs->DeregisterJob(&ctx, req, &reply);
  }
  std::vector<std::string> List() {
    grpc::ClientContext ctx;
    v1::ListJobsResponse reply;
    grpc::Status status = jobs->ListJobs(&ctx, {}, &reply);
    REQUIRE(status.error_message() == "");
    std::vector<std::string> ids;
    for (const auto& job : reply.jobs()) ids.push_back(job.spec().job_id());
    return ids;
  }
  grpc::Status Applied(const std::string& id, uint32_t replicas) {
    grpc::ClientContext ctx;
    v1::ReportAppliedRequest req;
    req.set_job_id(id);
    req.set_replicas(replicas);
    v1::ReportAppliedResponse reply;
    return recs->ReportApplied(&ctx, req, &reply);
  }
  grpc::Status SetCapacity(uint32_t gpus) {
    grpc::ClientContext ctx;
    v1::SetCapacityRequest req;
    req.set_total_gpus(gpus);
    v1::Cluster reply;
    return cluster->SetCapacity(&ctx, req, &reply);
  }
  grpc::Status GetCluster(v1::Cluster* reply) {
    grpc::ClientContext ctx;
    return cluster->GetCluster(&ctx, {}, reply);
  }
  // One sample per job id, from pod "p-<i>".
  grpc::Status Report(const std::vector<std::string>& job_ids, v1::IngestSummary* summary) {
    grpc::ClientContext ctx;
    v1::SampleBatch batch;
    for (size_t i = 0; i < job_ids.size(); ++i) {
      v1::StepSample* sample = batch.add_samples();
      sample->set_job_id(job_ids[i]);
      sample->set_pod("p-" + std::to_string(i));
      sample->set_world_size(1);
      sample->set_step_seconds(0.5);
    }
    return metrics->ReportSamples(&ctx, batch, summary);
  }

  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::MetricsService::Stub> metrics;
  std::unique_ptr<v1::JobService::Stub> jobs;
  std::unique_ptr<v1::RecommendationService::Stub> recs;
  std::unique_ptr<v1::ClusterService::Stub> cluster;
};

// rescaled with the token file above; its audit log kept in memory as JSON.
struct AuthServer {
  explicit AuthServer(ServerOptions options = {}) {
    spdlog::set_level(spdlog::level::warn);
    WriteFile(tokens, kTokenFile);
    options.listen = "127.0.0.1:0";
    options.run_plan_timer = false;
    options.auth_token_file = tokens;
    options.credentials_reload_interval = absl::Seconds(1);
    options.audit_log_format = "json";
    options.audit_sink = audit;
    auto started = RescaleServer::Start(options);
    REQUIRE(started.status().message() == "");
    server = *std::move(started);
  }

  Client As(const std::string& token) {
    RescaledConnection connection =
        RescaledConnection::Of(grpc::InsecureChannelCredentials(), BearerToken::Fixed(token));
    return Client(connection.Dial(server->address(), {}));
  }
  Client Anonymous() {
    return Client(grpc::CreateChannel(server->address(), grpc::InsecureChannelCredentials()));
  }
  std::vector<nlohmann::json> AuditLines() {
    std::vector<nlohmann::json> lines;
    for (const std::string& line : audit->last_formatted())
      lines.push_back(nlohmann::json::parse(line));
    return lines;
  }

  TempDir dir;
  std::string tokens = dir.File("tokens.csv");
  std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> audit =
      std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(1000);
  std::unique_ptr<RescaleServer> server;
};

}  // namespace

TEST_CASE("a token file parses into identities and its errors name the line and the field",
          "[auth]") {
  using rescale::server::Role;
  using rescale::server::TokenTable;
  auto table = TokenTable::Parse(kTokenFile, "tokens.csv");
  REQUIRE(table.status().message() == "");
  CHECK(table->size() == 6);
  auto viewer = table->FindByToken(kViewerToken);
  REQUIRE(viewer != nullptr);
  CHECK(viewer->user == "dashboard");
  CHECK(viewer->role == Role::kViewer);
  CHECK_FALSE(viewer->all_namespaces);
  CHECK(viewer->MayAccessNamespace("team-a"));
  CHECK_FALSE(viewer->MayAccessNamespace("team-b"));
  CHECK(table->FindByToken("viewer-0123456789abcdeX") == nullptr);
  CHECK(table->FindByToken("") == nullptr);
  CHECK(table->FindByUser("bob")->namespaces == std::vector<std::string>{"team-b"});

  auto error = [](const std::string& text) {
    return std::string(TokenTable::Parse(text, "t.csv").status().message());
  };
  CHECK(error("a-token-of-enough-length,u,root,*\n") ==
        "t.csv:1: role \"root\" is not one of reporter, viewer, controller, admin");
  CHECK_THAT(error("\nshort,u,admin,*\n"),
             Catch::StartsWith("t.csv:2: token: must be at least 16"));
  CHECK_THAT(error("a-token-of-enough-length,u,admin\n"),
             Catch::Contains("expected 4 comma-separated fields"));
  CHECK_THAT(error("a-token-of-enough-length,u,viewer,Team_A\n"),
             Catch::Contains("namespaces: \"Team_A\" is not a DNS-1123 label"));
  CHECK_THAT(error("a-token-of-enough-length,u,viewer,*\na-token-of-enough-length,v,viewer,*\n"),
             Catch::Contains("t.csv:2: token of user \"v\" is already another line's"));
  CHECK_THAT(error("a-token-of-enough-length,u,viewer,*\nanother-token-enough-len,u,admin,*\n"),
             Catch::Contains("user \"u\" has another line with a different role or namespaces"));
  // Two tokens of one user, as during a rotation, both work.
  auto rotating = TokenTable::Parse(
      "old-token-0123456789abc,u,viewer,a;b\nnew-token-0123456789abc,u,viewer,b;a\n", "t.csv");
  REQUIRE(rotating.status().message() == "");
  CHECK(rotating->FindByToken("old-token-0123456789abc")->user == "u");
  CHECK(rotating->FindByToken("new-token-0123456789abc")->user == "u");
}

TEST_CASE("with a token file, anonymous callers and unknown tokens are UNAUTHENTICATED", "[auth]") {
  AuthServer t;
  Client anonymous = t.Anonymous();
  grpc::Status status = anonymous.Get("team-a/x");
  CHECK(status.error_code() == grpc::StatusCode::UNAUTHENTICATED);
  CHECK_THAT(status.error_message(), Catch::Contains("Bearer TOKEN"));
  CHECK(anonymous.Register("team-a/x").error_code() == grpc::StatusCode::UNAUTHENTICATED);
  v1::IngestSummary summary;
  CHECK(anonymous.Report({"team-a/x"}, &summary).error_code() == grpc::StatusCode::UNAUTHENTICATED);

  Client stranger = t.As("not-a-token-anyone-has-0000");
  status = stranger.Get("team-a/x");
  CHECK(status.error_code() == grpc::StatusCode::UNAUTHENTICATED);
  CHECK_THAT(status.error_message(), Catch::Contains("unknown token"));

  // Health stays open: probes carry no token.
  grpc::ClientContext ctx;
  grpc::health::v1::HealthCheckResponse health;
  auto probe = grpc::health::v1::Health::NewStub(anonymous.channel);
  REQUIRE(probe->Check(&ctx, {}, &health).ok());
  CHECK(health.status() == grpc::health::v1::HealthCheckResponse::SERVING);
  // Nothing was registered by the refused calls.
  CHECK(t.As(kAdminToken).List().empty());
}

TEST_CASE("a reporter reports for its namespace only and cannot deregister", "[auth]") {
  ServerOptions with_metrics;
  with_metrics.metrics_listen = "127.0.0.1:0";
  AuthServer t(with_metrics);
  Client admin = t.As(kAdminToken);
  REQUIRE(admin.Register("team-a/bert").ok());
  REQUIRE(admin.Register("team-b/gpt").ok());

  Client reporter = t.As(kReporterToken);
  v1::IngestSummary summary;
  grpc::Status status = reporter.Report({"team-a/bert", "team-b/gpt", "team-a/bert"}, &summary);
  REQUIRE(status.error_message() == "");
  CHECK(summary.accepted() == 2);
  CHECK(summary.rejected() == 1);
  REQUIRE(summary.rejections_size() == 1);
  CHECK(summary.rejections(0).index() == 1);
  CHECK_THAT(summary.rejections(0).reason(),
             Catch::Contains("permission denied") && Catch::Contains("user \"agent\"") &&
                 Catch::Contains("role reporter") &&
                 Catch::Contains("rescale.v1.MetricsService/ReportSamples") &&
                 Catch::Contains("namespace \"team-b\""));

  status = reporter.Deregister("team-a/bert");
  CHECK(status.error_code() == grpc::StatusCode::PERMISSION_DENIED);
  CHECK(status.error_message() ==
        "user \"agent\" (role reporter) may not call rescale.v1.JobService/DeregisterJob: it "
        "needs role controller or admin");
  // A reporter reads nothing either.
  CHECK(reporter.Get("team-a/bert").error_code() == grpc::StatusCode::PERMISSION_DENIED);
  CHECK(admin.Get("team-a/bert").ok());

  // The audit log has the refused deregistration and the batch with a
  // sample refused for its namespace.
  bool saw_deregister = false;
  bool saw_batch = false;
  for (const nlohmann::json& line : t.AuditLines()) {
    if (line["method"] == "rescale.v1.JobService/DeregisterJob") {
      saw_deregister = true;
      CHECK(line["user"] == "agent");
      CHECK(line["role"] == "reporter");
      CHECK(line["job"] == "team-a/bert");
      CHECK(line["outcome"] == "PERMISSION_DENIED");
      CHECK(line["logger"] == "audit");
    }
    if (line["method"] == "rescale.v1.MetricsService/ReportSamples") {
      saw_batch = true;
      CHECK(line["detail"] == "1 of 3 samples refused for their namespace");
    }
  }
  CHECK(saw_deregister);
  CHECK(saw_batch);

  // And in the metrics, under its own reason.
  const std::string metrics = t.server->MetricsText();
  CHECK_THAT(metrics,
             Catch::Contains("rescale_samples_rejected_total{reason=\"permission_denied\"} 1\n"));
  CHECK_THAT(metrics, Catch::Contains("rescale_samples_accepted_total 2\n"));
}

TEST_CASE("a job id without '/' is its own namespace, never every namespace", "[auth]") {
  using rescale::server::Access;
  using rescale::server::Authorize;
  using rescale::server::NamespaceOfJobId;
  // The rule is the core's one (rescale/types.h); auth only converts types.
  CHECK(NamespaceOfJobId("no-slash") == "no-slash");
  CHECK(rescale::JobNamespace("no-slash") == "no-slash");
  CHECK(NamespaceOfJobId("team-a/bert") == "team-a");
  rescale::server::Identity viewer;
  viewer.user = "dashboard";
  viewer.role = rescale::server::Role::kViewer;
  viewer.all_namespaces = false;
  viewer.namespaces = {"team-a"};
  // As "" it would pass, as a call naming no namespace does.
  REQUIRE(Authorize(viewer, Access::kRead, "m", "").ok());
  absl::Status refused = Authorize(viewer, Access::kRead, "m", NamespaceOfJobId("no-slash"));
  CHECK(refused.code() == absl::StatusCode::kPermissionDenied);
  CHECK_THAT(std::string(refused.message()), Catch::Contains("namespace \"no-slash\""));

  // Through rescaled: a namespaced caller is refused for the malformed id;
  // one with every namespace learns it is malformed.
  AuthServer t;
  Client admin = t.As(kAdminToken);
  REQUIRE(admin.Register("team-a/bert").ok());
  Client team = t.As(kViewerToken);
  grpc::Status get = team.Get("no-slash");
  CHECK(get.error_code() == grpc::StatusCode::PERMISSION_DENIED);
  CHECK_THAT(get.error_message(), Catch::Contains("namespace \"no-slash\""));
  CHECK(admin.Get("no-slash").error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  // A reporter's sample for it is refused for its namespace, beside an
  // accepted one, and the two results merge into one summary.
  Client reporter = t.As(kReporterToken);
  v1::IngestSummary summary;
  REQUIRE(reporter.Report({"no-slash", "team-a/bert"}, &summary).error_message() == "");
  CHECK(summary.accepted() == 1);
  CHECK(summary.rejected() == 1);
  REQUIRE(summary.rejections_size() == 1);
  CHECK(summary.rejections(0).index() == 0);
  CHECK_THAT(summary.rejections(0).reason(), Catch::Contains("namespace \"no-slash\""));
}

TEST_CASE("a viewer reads its namespaces and cannot write", "[auth]") {
  AuthServer t;
  Client admin = t.As(kAdminToken);
  REQUIRE(admin.Register("team-a/bert").ok());
  REQUIRE(admin.Register("team-b/gpt").ok());
  REQUIRE(admin.SetCapacity(8).ok());

  Client viewer = t.As(kViewerToken);
  CHECK(viewer.Get("team-a/bert").ok());
  grpc::Status other = viewer.Get("team-b/gpt");
  CHECK(other.error_code() == grpc::StatusCode::PERMISSION_DENIED);
  CHECK_THAT(other.error_message(), Catch::Contains("namespace \"team-b\"") &&
                                        Catch::Contains("its namespaces are team-a"));
  // A list of every namespace shows the viewer's.
  CHECK(viewer.List() == std::vector<std::string>{"team-a/bert"});
  CHECK(admin.List().size() == 2);
  v1::Cluster cluster;
  REQUIRE(viewer.GetCluster(&cluster).ok());
  CHECK(cluster.total_gpus() == 8);
  REQUIRE(cluster.allocations_size() == 1);
  CHECK(cluster.allocations(0).job_id() == "team-a/bert");

  grpc::Status write = viewer.Register("team-a/new");
  CHECK(write.error_code() == grpc::StatusCode::PERMISSION_DENIED);
  CHECK_THAT(write.error_message(), Catch::Contains("user \"dashboard\" (role viewer)") &&
                                        Catch::Contains("rescale.v1.JobService/RegisterJob"));
  CHECK(viewer.Applied("team-a/bert", 1).error_code() == grpc::StatusCode::PERMISSION_DENIED);
  CHECK(viewer.SetCapacity(0).error_code() == grpc::StatusCode::PERMISSION_DENIED);
  v1::IngestSummary summary;
  CHECK(viewer.Report({"team-a/bert"}, &summary).error_code() ==
        grpc::StatusCode::PERMISSION_DENIED);

  // A watch of every namespace by a viewer of one is a watch of that one.
  grpc::ClientContext ctx;
  v1::WatchRecommendationsRequest request;
  auto stream = viewer.recs->WatchRecommendations(&ctx, request);
  std::vector<std::string> added;
  v1::RecommendationEvent event;
  while (stream->Read(&event) && event.type() != v1::RecommendationEvent::SYNCED) {
    added.push_back(event.recommendation().job_id());
  }
  CHECK(added == std::vector<std::string>{"team-a/bert"});
  ctx.TryCancel();
}

TEST_CASE("a controller registers, applies and sets the capacity, within its namespaces",
          "[auth]") {
  AuthServer t;
  Client controller = t.As(kControllerToken);
  CHECK(controller.Register("team-b/gpt").ok());
  CHECK(controller.Applied("team-b/gpt", 1).ok());
  CHECK(controller.SetCapacity(16).ok());
  CHECK(controller.Deregister("team-b/gpt").ok());

  Client team = t.As(kTeamControllerToken);
  CHECK(team.Register("team-a/bert").ok());
  CHECK(team.Applied("team-a/bert", 1).ok());
  CHECK(team.Register("team-b/other").error_code() == grpc::StatusCode::PERMISSION_DENIED);
  grpc::Status capacity = team.SetCapacity(0);
  CHECK(capacity.error_code() == grpc::StatusCode::PERMISSION_DENIED);
  CHECK_THAT(capacity.error_message(), Catch::Contains("every namespace (*)"));
  v1::Cluster cluster;
  REQUIRE(t.As(kAdminToken).GetCluster(&cluster).ok());
  CHECK(cluster.total_gpus() == 16);

  // Every change is in the audit log once, with its outcome.
  int registrations = 0;
  for (const nlohmann::json& line : t.AuditLines()) {
    if (line["method"] == "rescale.v1.JobService/RegisterJob") {
      ++registrations;
      if (line["job"] == "team-b/other") {
        CHECK(line["outcome"] == "PERMISSION_DENIED");
        CHECK(line["user"] == "team-adapter");
      } else {
        CHECK(line["outcome"] == "OK");
      }
    }
  }
  CHECK(registrations == 3);
}

TEST_CASE("an admin may call everything", "[auth]") {
  AuthServer t;
  Client admin = t.As(kAdminToken);
  CHECK(admin.Register("team-z/a").ok());
  CHECK(admin.Get("team-z/a").ok());
  CHECK(admin.Applied("team-z/a", 1).ok());
  v1::IngestSummary summary;
  REQUIRE(admin.Report({"team-z/a"}, &summary).ok());
  CHECK(summary.accepted() == 1);
  CHECK(admin.SetCapacity(4).ok());
  CHECK(admin.Deregister("team-z/a").ok());
}

TEST_CASE("a token added to the file works and a removed one stops working, without a restart",
          "[auth]") {
  AuthServer t;
  Client newcomer = t.As("newcomer-0123456789abcdef");
  CHECK(newcomer.Get("team-a/x").error_code() == grpc::StatusCode::UNAUTHENTICATED);
  CHECK(t.As(kViewerToken).List().empty());

  // The viewer's line goes, a newcomer's comes.
  WriteFile(t.tokens,
            "admin-0123456789abcdef,root,admin,*\n"
            "newcomer-0123456789abcdef,newcomer,viewer,*\n");
  CHECK(Eventually(absl::Seconds(15), [&] {
    return newcomer.Get("team-a/x").error_code() == grpc::StatusCode::NOT_FOUND;
  }));
  CHECK(t.As(kViewerToken).Get("team-a/x").error_code() == grpc::StatusCode::UNAUTHENTICATED);

  // A file that no longer parses keeps the last good one in force
  // (ReloadCredentials is what SIGHUP and the reload thread call).
  WriteFile(t.tokens, "this is not a token file\n");
  absl::Status reloaded = t.server->ReloadCredentials();
  CHECK_THAT(std::string(reloaded.message()),
             Catch::Contains("tokens.csv:1: expected 4 comma-separated fields"));
  CHECK(newcomer.Get("team-a/x").error_code() == grpc::StatusCode::NOT_FOUND);
}

TEST_CASE("rescaled refuses a non-loopback address without TLS and authentication", "[auth]") {
  spdlog::set_level(spdlog::level::warn);
  ServerOptions options;
  options.listen = "0.0.0.0:0";
  options.run_plan_timer = false;
  auto refused = RescaleServer::Start(options);
  REQUIRE(refused.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK_THAT(std::string(refused.status().message()),
             Catch::Contains("refusing to serve 0.0.0.0:0 without TLS and authentication") &&
                 Catch::Contains("--insecure"));

  TempDir dir;
  WriteFile(dir.File("tokens.csv"), kTokenFile);
  options.auth_token_file = dir.File("tokens.csv");
  refused = RescaleServer::Start(options);
  REQUIRE_FALSE(refused.ok());
  CHECK_THAT(std::string(refused.status().message()), Catch::Contains("without TLS:"));

  TestCa ca("ca");
  PemPair server = ca.IssueServer();
  WriteFile(dir.File("tls.crt"), server.certificate);
  WriteFile(dir.File("tls.key"), server.private_key);
  options.tls_cert_file = dir.File("tls.crt");
  options.tls_key_file = dir.File("tls.key");
  auto secured = RescaleServer::Start(options);
  CHECK(secured.status().message() == "");

  ServerOptions insecure;
  insecure.listen = "0.0.0.0:0";
  insecure.run_plan_timer = false;
  insecure.insecure = true;
  CHECK(RescaleServer::Start(insecure).ok());
  ServerOptions loopback;
  loopback.listen = "127.0.0.1:0";
  loopback.run_plan_timer = false;
  CHECK(RescaleServer::Start(loopback).ok());
}

namespace {

// rescaled with mutual TLS: server certificate from `server_ca`, clients'
// certificates must chain to `client_ca`; no token file.
struct MutualTlsServer {
  // With `token_file`, also tokens (and certificate users' namespaces).
  // With `certificates_optional`, --tls_client_auth=optional.
  explicit MutualTlsServer(const std::string& token_file = "", bool certificates_optional = false) {
    spdlog::set_level(spdlog::level::warn);
    PemPair identity = server_ca.IssueServer();
    WriteFile(cert, identity.certificate);
    WriteFile(key, identity.private_key);
    WriteFile(client_ca_file, client_ca.certificate());
    ServerOptions options;
    options.listen = "127.0.0.1:0";
    options.run_plan_timer = false;
    options.tls_cert_file = cert;
    options.tls_key_file = key;
    options.tls_client_ca_file = client_ca_file;
    options.tls_client_certificate_optional = certificates_optional;
    options.credentials_reload_interval = absl::Seconds(1);
    if (!token_file.empty()) {
      WriteFile(dir.File("tokens.csv"), token_file);
      options.auth_token_file = dir.File("tokens.csv");
    }
    options.audit_sink = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(10);
    auto started = RescaleServer::Start(options);
    REQUIRE(started.status().message() == "");
    server = *std::move(started);
  }

  // A client trusting `trusted` (PEM), with a certificate when given. A
  // fresh channel each time: a new connection, a new handshake.
  Client Dial(const std::string& trusted, const PemPair* certificate = nullptr) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = trusted;
    if (certificate != nullptr) {
      ssl.pem_cert_chain = certificate->certificate;
      ssl.pem_private_key = certificate->private_key;
    }
    grpc::ChannelArguments args;
    // Separate subchannels, so each Dial is its own connection.
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    return Client(grpc::CreateCustomChannel(server->address(), grpc::SslCredentials(ssl), args));
  }

  TestCa server_ca{"server-ca"};
  TestCa client_ca{"client-ca"};
  TempDir dir;
  std::string cert = dir.File("tls.crt");
  std::string key = dir.File("tls.key");
  std::string client_ca_file = dir.File("client-ca.crt");
  std::unique_ptr<RescaleServer> server;
};

}  // namespace

TEST_CASE("with mutual TLS a client needs a certificate, whose CN and O are the user and role",
          "[auth]") {
  MutualTlsServer t;
  // No certificate: the handshake fails, nothing reaches a handler.
  grpc::Status none = t.Dial(t.server_ca.certificate()).Get("team-a/x");
  CHECK(none.error_code() == grpc::StatusCode::UNAVAILABLE);

  // A certificate from another CA is refused too.
  TestCa stranger("stranger-ca");
  PemPair forged = stranger.IssueClient("mallory", "admin");
  CHECK(t.Dial(t.server_ca.certificate(), &forged).Get("team-a/x").error_code() ==
        grpc::StatusCode::UNAVAILABLE);

  PemPair viewer = t.client_ca.IssueClient("carol", "viewer");
  Client carol = t.Dial(t.server_ca.certificate(), &viewer);
  CHECK(carol.Get("team-a/x").error_code() == grpc::StatusCode::NOT_FOUND);
  grpc::Status write = carol.Register("team-a/x");
  CHECK(write.error_code() == grpc::StatusCode::PERMISSION_DENIED);
  CHECK_THAT(write.error_message(), Catch::Contains("user \"carol\" (role viewer)"));

  PemPair controller = t.client_ca.IssueClient("adapter", "controller");
  CHECK(t.Dial(t.server_ca.certificate(), &controller).Register("team-a/x").ok());

  PemPair no_role = t.client_ca.IssueClient("dave", "engineering");
  grpc::Status denied = t.Dial(t.server_ca.certificate(), &no_role).Get("team-a/x");
  CHECK(denied.error_code() == grpc::StatusCode::PERMISSION_DENIED);
  CHECK_THAT(denied.error_message(), Catch::Contains("O=\"engineering\""));
}

TEST_CASE("a certificate user has the namespaces of its token-file line, or all without one",
          "[auth]") {
  MutualTlsServer t(kTokenFile);
  auto register_as = [&](const PemPair& certificate, const std::string& job) {
    return t.Dial(t.server_ca.certificate(), &certificate).Register(job).error_code();
  };
  // bob's line says team-b; his certificate says controller.
  PemPair bob = t.client_ca.IssueClient("bob", "controller");
  CHECK(register_as(bob, "team-b/x") == grpc::StatusCode::OK);
  CHECK(register_as(bob, "team-a/x") == grpc::StatusCode::PERMISSION_DENIED);
  PemPair erin = t.client_ca.IssueClient("erin", "controller");
  CHECK(register_as(erin, "team-a/x") == grpc::StatusCode::OK);
  // A token still wins over the certificate.
  RescaledConnection viewer =
      RescaledConnection::Of(grpc::SslCredentials({.pem_root_certs = t.server_ca.certificate(),
                                                   .pem_private_key = bob.private_key,
                                                   .pem_cert_chain = bob.certificate}),
                             BearerToken::Fixed(kViewerToken));
  CHECK(Client(viewer.Dial(t.server->address(), {})).Register("team-b/y").error_code() ==
        grpc::StatusCode::PERMISSION_DENIED);
}

TEST_CASE("with optional client certificates a client proves itself by certificate or by token",
          "[auth]") {
  MutualTlsServer t(kTokenFile, /*certificates_optional=*/true);
  // No certificate and no token: connected, but nobody.
  grpc::Status nobody = t.Dial(t.server_ca.certificate()).Get("team-a/x");
  CHECK(nobody.error_code() == grpc::StatusCode::UNAUTHENTICATED);
  // A token without a certificate (rescale-adapter, agents).
  grpc::SslCredentialsOptions server_only;
  server_only.pem_root_certs = t.server_ca.certificate();
  RescaledConnection by_token = RescaledConnection::Of(grpc::SslCredentials(server_only),
                                                       BearerToken::Fixed(kControllerToken));
  CHECK(Client(by_token.Dial(t.server->address(), {})).Register("team-a/x").ok());
  // A certificate without a token (KEDA).
  PemPair viewer = t.client_ca.IssueClient("keda", "viewer");
  Client keda = t.Dial(t.server_ca.certificate(), &viewer);
  CHECK(keda.Get("team-a/x").ok());
  CHECK(keda.Register("team-a/y").error_code() == grpc::StatusCode::PERMISSION_DENIED);
  // A certificate is still verified when one is presented.
  TestCa stranger("stranger-ca");
  PemPair forged = stranger.IssueClient("mallory", "admin");
  CHECK(t.Dial(t.server_ca.certificate(), &forged).Get("team-a/x").error_code() ==
        grpc::StatusCode::UNAVAILABLE);
}

TEST_CASE("KEDA's calls are reads of the job's namespace, by client certificate", "[auth][keda]") {
  MutualTlsServer t(kTokenFile, /*certificates_optional=*/true);
  PemPair controller = t.client_ca.IssueClient("adapter", "controller");
  REQUIRE(t.Dial(t.server_ca.certificate(), &controller).Register("team-a/x").ok());
  REQUIRE(t.Dial(t.server_ca.certificate(), &controller).Register("team-c/x").ok());

  auto is_active = [&](const PemPair* certificate, const std::string& job) {
    auto keda = externalscaler::ExternalScaler::NewStub(
        t.Dial(t.server_ca.certificate(), certificate).channel);
    externalscaler::ScaledObjectRef ref;
    ref.set_namespace_("anywhere");
    ref.set_name("scaler");
    (*ref.mutable_scalermetadata())["job"] = job;
    grpc::ClientContext ctx;
    externalscaler::IsActiveResponse reply;
    return keda->IsActive(&ctx, ref, &reply);
  };
  PemPair keda = t.client_ca.IssueClient("keda", "viewer");  // no line: every namespace
  CHECK(is_active(&keda, "team-a/x").error_message() == "");
  CHECK(is_active(&keda, "team-c/x").ok());
  PemPair bob = t.client_ca.IssueClient("bob", "viewer");  // his line says team-b
  grpc::Status denied = is_active(&bob, "team-a/x");
  CHECK(denied.error_code() == grpc::StatusCode::PERMISSION_DENIED);
  CHECK_THAT(denied.error_message(),
             Catch::Contains("user \"bob\" (role viewer)") &&
                 Catch::Contains("externalscaler.ExternalScaler/IsActive"));
  CHECK(is_active(nullptr, "team-a/x").error_code() == grpc::StatusCode::UNAUTHENTICATED);
}

TEST_CASE("optional client certificates need a client CA", "[auth]") {
  ServerOptions options;
  options.listen = "127.0.0.1:0";
  options.tls_client_certificate_optional = true;
  absl::StatusOr<std::unique_ptr<RescaleServer>> started = RescaleServer::Start(options);
  CHECK(started.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(started.status().message()),
             Catch::Contains("--tls_client_auth=optional needs --tls_client_ca_file"));
}

TEST_CASE("a rotated server certificate serves new connections while live ones keep working",
          "[auth]") {
  MutualTlsServer t;
  PemPair admin = t.client_ca.IssueClient("root", "admin");
  Client live = t.Dial(t.server_ca.certificate(), &admin);
  REQUIRE(live.Register("team-a/x").ok());

  // Calls on the live connection, all through the rotation.
  std::atomic<bool> stop{false};
  std::atomic<int> calls{0};
  std::atomic<int> failures{0};
  std::thread load([&] {
    while (!stop.load()) {
      if (!live.Get("team-a/x").ok()) failures.fetch_add(1);
      calls.fetch_add(1);
    }
  });

  // cert-manager's rotation: a new key and certificate, from a new CA.
  TestCa next_ca("server-ca-2");
  PemPair rotated = next_ca.IssueServer();
  CHECK(t.Dial(next_ca.certificate(), &admin).Get("team-a/x").error_code() ==
        grpc::StatusCode::UNAVAILABLE);
  WriteFile(t.key + ".new", rotated.private_key);
  WriteFile(t.cert + ".new", rotated.certificate);
  std::filesystem::rename(t.key + ".new", t.key);
  std::filesystem::rename(t.cert + ".new", t.cert);

  // A new connection trusting only the new CA gets through once the
  // watcher re-read the files.
  CHECK(Eventually(absl::Seconds(20),
                   [&] { return t.Dial(next_ca.certificate(), &admin).Get("team-a/x").ok(); }));
  const int calls_after_rotation = calls.load();
  CHECK(Eventually(absl::Seconds(10), [&] { return calls.load() > calls_after_rotation + 10; }));
  stop = true;
  load.join();
  CHECK(failures.load() == 0);
  CHECK(calls.load() > 10);
  // The old CA no longer verifies new connections.
  CHECK(t.Dial(t.server_ca.certificate(), &admin).Get("team-a/x").error_code() ==
        grpc::StatusCode::UNAVAILABLE);
}

TEST_CASE("clients send the token of --token-file and RESCALE_TOKEN", "[auth]") {
  AuthServer t;
  WriteFile(t.dir.File("token"), std::string(kAdminToken) + "\n");
  SecurityFlags flags;
  flags.token_file = t.dir.File("token");
  auto from_file = RescaledConnection::Create(flags, nullptr);
  REQUIRE(from_file.status().message() == "");
  CHECK(Client(from_file->Dial(t.server->address(), {})).Register("team-a/x").ok());

  auto from_env = RescaledConnection::Create({}, kViewerToken);
  REQUIRE(from_env.ok());
  Client viewer(from_env->Dial(t.server->address(), {}));
  CHECK(viewer.Get("team-a/x").ok());
  CHECK(viewer.Register("team-a/y").error_code() == grpc::StatusCode::PERMISSION_DENIED);

  // A token goes in plaintext to a local address only.
  CHECK(from_env->CheckTokenSafeFor("127.0.0.1:50051").ok());
  CHECK_THAT(std::string(from_env->CheckTokenSafeFor("10.0.0.5:50051").message()),
             Catch::Contains("refusing to send the token") && Catch::Contains("--tls"));
  CHECK_THAT(std::string(rescale::client::ServerList::Create("127.0.0.1:1,rescaled.example:50051",
                                                             *from_env)
                             .status()
                             .message()),
             Catch::Contains("in plaintext to rescaled.example:50051"));
  SecurityFlags tls;
  tls.tls = true;
  auto over_tls = RescaledConnection::Create(tls, kViewerToken);
  REQUIRE(over_tls.ok());
  CHECK(over_tls->CheckTokenSafeFor("10.0.0.5:50051").ok());

  flags.token_file = t.dir.File("missing");
  CHECK_THAT(std::string(RescaledConnection::Create(flags, nullptr).status().message()),
             Catch::Contains("--token-file"));
  SecurityFlags half;
  half.cert_file = t.dir.File("c.crt");
  CHECK(RescaledConnection::Create(half, nullptr).status().message() ==
        "--cert-file and --key-file must be given together");
}

TEST_CASE("a client's renewed certificate is presented on its next connection, without a restart",
          "[auth]") {
  MutualTlsServer t;
  TempDir files;
  const std::string cert = files.File("client.crt");
  const std::string key = files.File("client.key");
  const std::string ca = files.File("ca.crt");
  PemPair viewer = t.client_ca.IssueClient("carol", "viewer");
  WriteFile(cert, viewer.certificate);
  WriteFile(key, viewer.private_key);
  WriteFile(ca, t.server_ca.certificate());
  SecurityFlags flags;
  flags.ca_file = ca;
  flags.cert_file = cert;
  flags.key_file = key;
  flags.certificate_reload_seconds = 1;
  auto connection = RescaledConnection::Create(flags, nullptr);
  REQUIRE(connection.status().message() == "");
  grpc::ChannelArguments own_connection;
  own_connection.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  CHECK(Client(connection->Dial(t.server->address(), own_connection))
            .Register("team-a/x")
            .error_code() == grpc::StatusCode::PERMISSION_DENIED);

  // Renewed with another role, the same connection settings.
  PemPair controller = t.client_ca.IssueClient("carol", "controller");
  WriteFile(key + ".new", controller.private_key);
  WriteFile(cert + ".new", controller.certificate);
  std::filesystem::rename(key + ".new", key);
  std::filesystem::rename(cert + ".new", cert);
  CHECK(Eventually(absl::Seconds(30), [&] {
    return Client(connection->Dial(t.server->address(), own_connection)).Register("team-a/x").ok();
  }));
}

TEST_CASE("the text audit log quotes what callers chose, so no value can forge a record",
          "[auth]") {
  auto sink = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(10);
  auto audit = rescale::server::AuditLog::Create("text", sink);
  REQUIRE(audit.ok());
  rescale::server::Identity caller;
  caller.user = "unauthenticated";
  caller.peer = "ipv4:10.1.2.3:4567";
  caller.anonymous = true;
  (*audit)->Record(caller, "rescale.v1.JobService/DeregisterJob",
                   "x outcome=OK\n2026-01-01 I audit: user=root job=team-a/bert",
                   absl::UnauthenticatedError("no \"credentials\""));
  const std::vector<std::string> lines = sink->last_formatted();
  REQUIRE(lines.size() == 1);
  const std::string& line = lines.front();
  // One line (its own newline last), every chosen value inside quotes.
  CHECK(line.find('\n') == line.size() - 1);
  CHECK_THAT(line, Catch::Contains("user=\"unauthenticated\" role=none") &&
                       Catch::Contains("job=\"x outcome=OK\\n2026-01-01 I audit: user=root "
                                       "job=team-a/bert\"") &&
                       Catch::Contains("peer=\"ipv4:10.1.2.3:4567\"") &&
                       Catch::Contains("outcome=UNAUTHENTICATED") &&
                       Catch::Contains("error=\"no \\\"credentials\\\"\""));
  CHECK(rescale::server::AuditLog::Create("xml", sink).status().message() ==
        "log format must be text or json, got \"xml\"");
}
