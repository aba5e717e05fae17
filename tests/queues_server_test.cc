// Tests of queues through the whole server: rescalectl `queue set -f`,
// `get queues`, `capacity get` and `describe job` against a real rescaled
// (port 0), the planner's queue rules as the recommendations show them,
// SetQueues errors naming the field, and queues kept in a SQLite state file
// across a restart.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <string>

#include "absl/strings/str_cat.h"
#include "rescale/state_store.h"
#include "tests/rescalectl_helpers.h"
#include "tests/temp_dir.h"

namespace rescale {
namespace {

using Catch::Matchers::Contains;
using testing::CliResult;
using testing::CliServer;
using testing::TempFile;

constexpr char kTwoTeams[] = R"(queues:
- name: team-a
  nominal_gpus: 32
  cohort: research
- name: team-b
  nominal_gpus: 32
  cohort: research
)";

// Elastic jobs of one team: 1-16 workers of 1 GPU each, planned by the
// planner on the default prior's curve (no measurements yet).
std::string TeamJobs(const std::string& team, int count) {
  std::string yaml;
  for (int j = 0; j < count; ++j) {
    absl::StrAppend(&yaml, j > 0 ? "---\n" : "", "jobId: ", team, "/train-", j,
                    "\nminReplicas: 1\nmaxReplicas: 16\nqueue: ", team, "\n");
  }
  return yaml;
}

nlohmann::json QueueNamed(const nlohmann::json& list, const std::string& name) {
  for (const nlohmann::json& q : list.at("queues")) {
    if (q.at("queue").at("name") == name) return q;
  }
  FAIL("no queue " << name << " in " << list.dump());
  return {};
}

uint64_t Field(const nlohmann::json& q, const std::string& name) {
  // Proto JSON writes 64-bit integers as strings and leaves out zeros.
  if (!q.contains(name)) return 0;
  const nlohmann::json& v = q.at(name);
  return v.is_string() ? std::stoull(v.get<std::string>()) : v.get<uint64_t>();
}

TEST_CASE("two teams: A borrows B's idle quota, and B has its 32 GPUs within one plan",
          "[queues][rescalectl]") {
  CliServer server;
  REQUIRE(server.Run({"capacity", "set", "64"}).exit_code == 0);
  TempFile queues(kTwoTeams);
  CliResult set = server.Run({"queue", "set", "-f", queues.path()});
  INFO(set.err);
  REQUIRE(set.exit_code == 0);
  CHECK_THAT(set.out, Contains("queues set: 2 defined"));

  TempFile a_jobs(TeamJobs("team-a", 4));
  REQUIRE(server.Run({"register", "-f", a_jobs.path()}).exit_code == 0);
  CliResult listed = server.Run({"get", "queues", "-o", "json"});
  REQUIRE(listed.exit_code == 0);
  nlohmann::json before = nlohmann::json::parse(listed.out);
  CHECK(Field(QueueNamed(before, "team-a"), "inUseGpus") == 64);
  CHECK(Field(QueueNamed(before, "team-a"), "borrowedGpus") == 32);
  CHECK(Field(QueueNamed(before, "team-b"), "lentGpus") == 32);

  TempFile b_jobs(TeamJobs("team-b", 2));
  REQUIRE(server.Run({"register", "-f", b_jobs.path()}).exit_code == 0);
  nlohmann::json after = nlohmann::json::parse(server.Run({"get", "queues", "-o", "json"}).out);
  CHECK(Field(QueueNamed(after, "team-b"), "inUseGpus") == 32);
  CHECK(Field(QueueNamed(after, "team-a"), "inUseGpus") == 32);
  CHECK(Field(QueueNamed(after, "team-a"), "borrowedGpus") == 0);

  // The table, in `get queues` and in `capacity get`.
  CliResult table = server.Run({"get", "queues"});
  CHECK_THAT(table.out, Contains("NAME"));
  CHECK_THAT(table.out, Contains("IN-USE"));
  CHECK_THAT(table.out, Contains("team-a"));
  CliResult capacity = server.Run({"capacity", "get"});
  CHECK_THAT(capacity.out, Contains("BORROWED"));
  CHECK_THAT(capacity.out, Contains("team-b"));
  // -o yaml too.
  CHECK_THAT(server.Run({"get", "queues", "-o", "yaml"}).out, Contains("name: team-a"));
}

TEST_CASE("describe job names the queue, and a job of an undefined queue waits for it",
          "[queues][rescalectl]") {
  CliServer server;
  REQUIRE(server.Run({"capacity", "set", "8"}).exit_code == 0);
  TempFile queues("queues:\n- {name: team-a, nominal_gpus: 4}\n");
  REQUIRE(server.Run({"queue", "set", "-f", queues.path()}).exit_code == 0);
  TempFile job("jobId: x/lost\nminReplicas: 1\nmaxReplicas: 2\nqueue: nope\n");
  REQUIRE(server.Run({"register", "-f", job.path()}).exit_code == 0);
  CliResult described = server.Run({"describe", "job", "x/lost"});
  CHECK_THAT(described.out, Contains("Queue:"));
  CHECK_THAT(described.out, Contains("nope"));
  CHECK_THAT(described.out, Contains("its queue is not defined"));
  CHECK_THAT(described.out, Contains("QUOTA"));

  // Once its queue is defined, it runs.
  TempFile more("queues:\n- {name: team-a, nominal_gpus: 4}\n- {name: nope, nominal_gpus: 2}\n");
  REQUIRE(server.Run({"queue", "set", "-f", more.path()}).exit_code == 0);
  CliResult running = server.Run({"get", "recommendation", "x/lost", "-o", "json"});
  const nlohmann::json rec = nlohmann::json::parse(running.out);
  CHECK(rec.at("replicas") == 2);
  // The default queue holds what the two do not claim.
  nlohmann::json list = nlohmann::json::parse(server.Run({"get", "queues", "-o", "json"}).out);
  CHECK(Field(QueueNamed(list, "default").at("queue"), "nominalGpus") == 2);
  CHECK_FALSE(QueueNamed(list, "default").value("defined", false));
}

TEST_CASE("queue set refuses a bad file before any RPC, naming the field", "[queues][rescalectl]") {
  CliServer server;
  TempFile bad("queues:\n- {name: team-a, nominal_gpus: 4, cohort: c, lending_limit_gpus: 9}\n");
  CliResult refused = server.Run({"queue", "set", "-f", bad.path()});
  CHECK(refused.exit_code == 1);
  CHECK_THAT(refused.err, Contains("queues[0].lending_limit_gpus = 9 is more than"));
  CHECK_THAT(refused.err, Contains(bad.path()));
  // Nothing was set.
  nlohmann::json list = nlohmann::json::parse(server.Run({"get", "queues", "-o", "json"}).out);
  for (const nlohmann::json& q : list.value("queues", nlohmann::json::array())) {
    CHECK_FALSE(q.value("defined", false));
  }
  // The server applies the same rules to a request that skips rescalectl.
  TempFile job("jobId: a/j\nminReplicas: 1\nmaxReplicas: 2\nqueue: Team_A\n");
  CliResult spec = server.Run({"register", "-f", job.path()});
  CHECK(spec.exit_code == 1);
  CHECK_THAT(spec.err, Contains("spec.queue \"Team_A\" is not a DNS-1123 label"));
}

TEST_CASE("a job Kueue admits is never started or stopped by a plan, and says it waits for Kueue",
          "[queues][rescalectl]") {
  CliServer server;
  REQUIRE(server.Run({"capacity", "set", "4"}).exit_code == 0);
  TempFile queues("queues:\n- name: team-a\n  nominal_gpus: 4\n");
  REQUIRE(server.Run({"queue", "set", "-f", queues.path()}).exit_code == 0);
  TempFile jobs(
      "jobId: ml/queued\nminReplicas: 1\nmaxReplicas: 4\nqueue: team-a\nadmission: kueue\n"
      "---\njobId: ml/running\nminReplicas: 1\nmaxReplicas: 4\nqueue: team-a\n"
      "admission: kueue\n");
  REQUIRE(server.Run({"register", "-f", jobs.path()}).exit_code == 0);
  // Kueue admitted one (it runs 2) and not the other (suspended).
  REQUIRE(server.Run({"apply-status", "ml/running", "--replicas", "2"}).exit_code == 0);
  REQUIRE(server.Run({"apply-status", "ml/queued", "--replicas", "0", "--suspended"}).exit_code ==
          0);
  auto rec = [&](const std::string& job) {
    CliResult got = server.Run({"get", "recommendation", job, "-o", "json"});
    REQUIRE(got.exit_code == 0);
    return nlohmann::json::parse(got.out);
  };
  // The queue has room, yet the plan does not start the job Kueue holds.
  CHECK(rec("ml/queued").value("suspend", false));
  CHECK(rec("ml/queued").value("bindingConstraint", "") == "QUOTA");
  CliResult described = server.Run({"describe", "job", "ml/queued"});
  CHECK_THAT(described.out, Contains("waits for Kueue to admit it (queue team-a)"));
  CHECK_THAT(described.out, Contains("Admitted By:"));
  CHECK_FALSE(rec("ml/running").value("suspend", false));

  // A higher-priority job of 4 in the same queue: a preemptible job of 2
  // would give way to it; the one Kueue runs is not suspended by a plan.
  TempFile urgent(
      "jobId: ml/urgent\nminReplicas: 4\nmaxReplicas: 4\npriority: 100\nqueue: team-a\n");
  REQUIRE(server.Run({"register", "-f", urgent.path()}).exit_code == 0);
  CHECK_FALSE(rec("ml/running").value("suspend", false));
  CHECK(rec("ml/urgent").value("suspend", false));

  // Kueue admits the queued job: from then on the plan sizes it.
  REQUIRE(server.Run({"apply-status", "ml/queued", "--replicas", "1"}).exit_code == 0);
  CHECK_FALSE(rec("ml/queued").value("suspend", false));
  CHECK_FALSE(rec("ml/running").value("suspend", false));

  TempFile bad("jobId: ml/bad\nminReplicas: 1\nmaxReplicas: 1\nadmission: volcano\n");
  CliResult refused = server.Run({"register", "-f", bad.path()});
  CHECK(refused.exit_code != 0);
  CHECK_THAT(refused.err, Contains("spec.admission \"volcano\" is not known"));
}

TEST_CASE("queues are kept in the SQLite state file across a restart", "[queues][rescalectl]") {
  testing::TempDir dir;
  auto open = [&] {
    testing::ServerOptions options;
    absl::StatusOr<std::unique_ptr<StateStore>> store =
        OpenStateStore("sqlite:" + dir.File("s.db"));
    REQUIRE(store.ok());
    options.engine.state = std::shared_ptr<StateStore>(*std::move(store));
    return options;
  };
  {
    CliServer server(open());
    TempFile queues(kTwoTeams);
    REQUIRE(server.Run({"queue", "set", "-f", queues.path()}).exit_code == 0);
  }
  CliServer again(open());
  // Listed as set before any plan ran...
  nlohmann::json restored = nlohmann::json::parse(again.Run({"get", "queues", "-o", "json"}).out);
  CHECK(QueueNamed(restored, "team-a").value("defined", false));
  // ...and planned with once the capacity is known.
  REQUIRE(again.Run({"capacity", "set", "64"}).exit_code == 0);
  nlohmann::json list = nlohmann::json::parse(again.Run({"get", "queues", "-o", "json"}).out);
  CHECK(QueueNamed(list, "team-b").at("queue").at("cohort") == "research");
  CHECK(QueueNamed(list, "team-a").value("defined", false));
}

}  // namespace
}  // namespace rescale
