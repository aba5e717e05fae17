// rescaled's security as its users start it: the Release binary refusing a
// non-loopback address without TLS and authentication, re-reading its
// token file on SIGHUP, and writing its audit log as JSON lines.
#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <csignal>
#include <fstream>
#include <string>

#include "client/common/credentials.h"
#include "nlohmann/json.hpp"
#include "tests/rescaled_process.h"
#include "tests/temp_dir.h"

namespace {

using rescale::client::BearerToken;
using rescale::client::RescaledConnection;
using rescale::testing::ChildProcess;
using rescale::testing::Eventually;
using rescale::testing::Rescaled;
using rescale::testing::TempDir;
namespace v1 = rescale::v1;

grpc::Status GetJobAs(const std::string& address, const std::string& token) {
  auto channel =
      RescaledConnection::Of(grpc::InsecureChannelCredentials(), BearerToken::Fixed(token))
          .Dial(address, {});
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  v1::GetJobRequest request;
  request.set_job_id("team-a/x");
  v1::Job job;
  return v1::JobService::NewStub(channel)->GetJob(&ctx, request, &job);
}

}  // namespace

TEST_CASE("rescaled will not serve a non-loopback address without TLS and authentication") {
  auto started = ChildProcess::Start({RESCALED_BINARY, "--listen=0.0.0.0:0", "--state=memory"});
  REQUIRE(started.ok());
  const std::optional<int> status = (*started)->WaitForExit(absl::Seconds(30));
  INFO((*started)->Output());
  REQUIRE(status.has_value());
  REQUIRE(WIFEXITED(*status));
  CHECK(WEXITSTATUS(*status) == 1);
  CHECK_THAT((*started)->Output(),
             Catch::Contains("refusing to serve 0.0.0.0:0 without TLS and authentication") &&
                 Catch::Contains("--insecure"));

  // --insecure says what it allows, and serves.
  auto insecure =
      ChildProcess::Start({RESCALED_BINARY, "--listen=0.0.0.0:0", "--state=memory", "--insecure"});
  REQUIRE(insecure.ok());
  CHECK((*insecure)->WaitForLine("rescaled serving on", absl::Seconds(30)).has_value());
  CHECK_THAT((*insecure)->Output(), Catch::Contains("--insecure: callers are not required"));
}

TEST_CASE("rescaled re-reads its token file on SIGHUP and audits changes as JSON lines") {
  TempDir dir;
  const std::string tokens = dir.File("tokens.csv");
  std::ofstream(tokens) << "admin-token-0123456789,root,admin,*\n";
  // An hour between checks: only SIGHUP can make the new line count.
  std::unique_ptr<Rescaled> rescaled =
      Rescaled::Start({"--state=memory", "--log_format=json", "--auth_token_file=" + tokens,
                       "--credentials_reload_interval=1h"});
  const std::string newcomer = "newcomer-token-0123456789";
  CHECK(GetJobAs(rescaled->address, newcomer).error_code() == grpc::StatusCode::UNAUTHENTICATED);

  std::ofstream(tokens, std::ios::app) << newcomer << ",newcomer,viewer,team-a\n";
  rescaled->process->Signal(SIGHUP);
  CHECK(Eventually(absl::Seconds(10), [&] {
    return GetJobAs(rescaled->address, newcomer).error_code() == grpc::StatusCode::NOT_FOUND;
  }));

  // A change, and its audit line.
  auto admin = RescaledConnection::Of(grpc::InsecureChannelCredentials(),
                                      BearerToken::Fixed("admin-token-0123456789"))
                   .Dial(rescaled->address, {});
  grpc::ClientContext ctx;
  v1::SetCapacityRequest request;
  request.set_total_gpus(12);
  v1::Cluster cluster;
  REQUIRE(v1::ClusterService::NewStub(admin)->SetCapacity(&ctx, request, &cluster).ok());
  const std::optional<std::string> line = rescaled->process->WaitForLine(
      "\"method\":\"rescale.v1.ClusterService/SetCapacity\"", absl::Seconds(10));
  REQUIRE(line.has_value());
  const nlohmann::json audit = nlohmann::json::parse(line->substr(line->find('{')));
  CHECK(audit["logger"] == "audit");
  CHECK(audit["user"] == "root");
  CHECK(audit["role"] == "admin");
  CHECK(audit["outcome"] == "OK");
  CHECK(audit["level"] == "info");
}
