// Tests of rescalectl: RunCli driven in-process against the real server
// (started on port 0), checking what a user or a script would see: exit
// codes, the kubectl-style confirmations and errors, and that table, json
// and yaml output carry the values that went in through a manifest.
//
// Manifests are written to uniquely named files under the system temp
// directory. Nothing sleeps: every command returns when its RPC does, and
// `watch --count N` returns after N events.
#include <grpcpp/grpcpp.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/time.h"
#include "client/rescalectl/cli.h"
#include "client/rescalectl/output.h"
#include "client/rescalectl/output_internal.h"
#include "rescale/v1/rescale.grpc.pb.h"
#include "server/server.h"
#include "spdlog/spdlog.h"
#include "tests/rescalectl_helpers.h"
#include "tests/test_certificates.h"
#include "tests/test_pki.h"

namespace {

using rescale::server::RescaleServer;
using rescale::server::ServerOptions;

using rescale::testing::CliResult;
using rescale::testing::CliServer;
using rescale::testing::RunRaw;
using rescale::testing::TempFile;

std::vector<std::string> SplitLines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream stream(text);
  for (std::string line; std::getline(stream, line);) lines.push_back(line);
  return lines;
}

std::vector<std::string> SplitWords(const std::string& line) {
  std::vector<std::string> words;
  std::istringstream stream(line);
  for (std::string word; stream >> word;) words.push_back(word);
  return words;
}

// capacity get's totals header. Scripts may read its columns by place, so
// new ones are added at the end.
const std::vector<std::string> kCapacityTotalsHeader = {
    "TOTAL", "ALLOCATED", "FREE", "WAITING", "UTILIZATION", "GAP", "USABLE"};

// A table as header → cell maps, one per row. Only valid for columns whose
// cells have no spaces, which is every column but REASON.
std::vector<std::map<std::string, std::string>> ParseTable(const std::string& text) {
  std::vector<std::string> lines = SplitLines(text);
  REQUIRE_FALSE(lines.empty());
  const std::vector<std::string> headers = SplitWords(lines[0]);
  std::vector<std::map<std::string, std::string>> rows;
  for (size_t i = 1; i < lines.size(); ++i) {
    const std::vector<std::string> cells = SplitWords(lines[i]);
    std::map<std::string, std::string> row;
    for (size_t c = 0; c < headers.size() && c < cells.size(); ++c) row[headers[c]] = cells[c];
    rows.push_back(row);
  }
  return rows;
}

// A job exercising every JobSpec field kind: quoted and plain scalars, a
// snake_case key next to lowerCamel ones, an optional bool set to false,
// a float, a negative int and a list of points.
constexpr char kBertManifest[] = R"(jobId: "default/bert"
minReplicas: 1
maxReplicas: 8
gpusPerReplica: 2
priority: 5
preemptible: false
restartCostSeconds: 30.5
local_batch_size: 32
prior:
  - replicas: 1
    samplesPerSecond: 100
  - replicas: 2
    samplesPerSecond: 190.5
)";

constexpr char kTwoJobsManifest[] = R"(# A bare JobSpec, then a kubectl-style wrapper.
jobId: default/bert
minReplicas: 1
maxReplicas: 4
localBatchSize: 32
---
apiVersion: rescale.io/v1
kind: ElasticJob
metadata:
  name: gpt
  namespace: research
spec:
  minReplicas: 2
  maxReplicas: 6
  priority: -1
  localBatchSize: 16
---
)";

}  // namespace

TEST_CASE("register reads a YAML manifest and get job shows the same values in every format",
          "[rescalectl]") {
  CliServer server;
  TempFile manifest(kBertManifest);

  CliResult registered = server.Run({"register", "-f", manifest.path()});
  INFO(registered.err);
  REQUIRE(registered.exit_code == 0);
  CHECK(registered.out == "job.rescale.io/default/bert registered\n");

  SECTION("table") {
    CliResult got = server.Run({"get", "job", "default/bert"});
    REQUIRE(got.exit_code == 0);
    const std::vector<std::string> lines = SplitLines(got.out);
    REQUIRE(lines.size() == 2);
    // The first eleven columns are a contract with scripts: same names, same
    // places. Newer columns only ever follow them.
    CHECK(SplitWords(lines[0]) ==
          std::vector<std::string>{"NAMESPACE", "NAME", "MIN", "MAX", "GPUS/REPLICA", "PRIORITY",
                                   "POLICY", "CURRENT", "RECOMMENDED", "ACTION", "AGE", "GPUS",
                                   "STATE", "QUEUE", "PROGRESS", "ETA", "BATCH", "EFFICIENCY"});
    // get job is one job, not the cluster: no summary line.
    CHECK(got.err.empty());
    auto rows = ParseTable(got.out);
    CHECK(rows[0]["NAMESPACE"] == "default");
    CHECK(rows[0]["NAME"] == "bert");
    CHECK(rows[0]["MIN"] == "1");
    CHECK(rows[0]["MAX"] == "8");
    CHECK(rows[0]["GPUS/REPLICA"] == "2");
    CHECK(rows[0]["PRIORITY"] == "5");
    // Enum values print bare, without a type prefix.
    CHECK(rows[0]["ACTION"].find("ACTION_") == std::string::npos);
  }

  SECTION("json, with -o after the command") {
    CliResult got = server.Run({"get", "job", "default/bert", "-o", "json"});
    REQUIRE(got.exit_code == 0);
    const nlohmann::json job = nlohmann::json::parse(got.out);
    const auto& spec = job.at("spec");
    CHECK(spec.at("jobId") == "default/bert");
    CHECK(spec.at("minReplicas") == 1);
    CHECK(spec.at("maxReplicas") == 8);
    CHECK(spec.at("gpusPerReplica") == 2);
    CHECK(spec.at("priority") == 5);
    CHECK(spec.at("preemptible") == false);
    CHECK(spec.at("restartCostSeconds") == 30.5);
    CHECK(spec.at("localBatchSize") == 32);
    REQUIRE(spec.at("prior").size() == 2);
    CHECK(spec.at("prior")[1].at("replicas") == 2);
    CHECK(spec.at("prior")[1].at("samplesPerSecond") == 190.5);
    // Primitive fields are printed even at their zero value.
    CHECK(job.at("status").contains("currentReplicas"));
  }

  SECTION("yaml, with -o before the command") {
    CliResult got = server.Run({"-o", "yaml", "get", "job", "default/bert"});
    REQUIRE(got.exit_code == 0);
    const YAML::Node job = YAML::Load(got.out);
    const YAML::Node spec = job["spec"];
    CHECK(spec["jobId"].as<std::string>() == "default/bert");
    CHECK(spec["minReplicas"].as<int>() == 1);
    CHECK(spec["maxReplicas"].as<int>() == 8);
    CHECK(spec["gpusPerReplica"].as<int>() == 2);
    CHECK(spec["priority"].as<int>() == 5);
    CHECK(spec["preemptible"].as<bool>() == false);
    CHECK(spec["restartCostSeconds"].as<double>() == 30.5);
    CHECK(spec["localBatchSize"].as<int>() == 32);
    REQUIRE(spec["prior"].size() == 2);
    CHECK(spec["prior"][1]["samplesPerSecond"].as<double>() == 190.5);
  }

  SECTION("the yaml output is itself a manifest the json view agrees with") {
    // yaml → (YamlToJson) → json must equal what -o json printed: quoting
    // keeps strings like uint64 "0" from turning into numbers.
    CliResult as_yaml = server.Run({"get", "job", "default/bert", "-o", "yaml"});
    CliResult as_json = server.Run({"get", "job", "default/bert", "-o", "json"});
    REQUIRE(as_yaml.exit_code == 0);
    REQUIRE(as_json.exit_code == 0);
    CHECK(rescale::cli::YamlToJson(YAML::Load(as_yaml.out)) == nlohmann::json::parse(as_json.out));
  }
}

TEST_CASE("describe job shows spec, status, curve and the recommendation with its reason",
          "[rescalectl]") {
  CliServer server;
  TempFile manifest(kBertManifest);
  REQUIRE(server.Run({"register", "-f", manifest.path()}).exit_code == 0);

  CliResult described = server.Run({"describe", "job", "default/bert"});
  INFO(described.out << described.err);
  REQUIRE(described.exit_code == 0);
  for (const char* section : {"Name:", "Namespace:", "Spec:", "Status:", "Throughput curve",
                              "Recommendation:", "Reason:", "Min Replicas:", "Max Replicas:"}) {
    CHECK(described.out.find(section) != std::string::npos);
  }

  CliResult as_json = server.Run({"describe", "job", "default/bert", "-o", "json"});
  REQUIRE(as_json.exit_code == 0);
  CHECK(nlohmann::json::parse(as_json.out).at("spec").at("jobId") == "default/bert");
}

TEST_CASE("register sends one call per YAML document and accepts a wrapped spec", "[rescalectl]") {
  CliServer server;
  TempFile manifest(kTwoJobsManifest);

  CliResult registered = server.Run({"register", "-f", manifest.path()});
  INFO(registered.err);
  REQUIRE(registered.exit_code == 0);
  CHECK(registered.out ==
        "job.rescale.io/default/bert registered\njob.rescale.io/research/gpt registered\n");

  SECTION("get jobs lists both, in a table and as a ListJobsResponse") {
    CliResult table = server.Run({"get", "jobs"});
    REQUIRE(table.exit_code == 0);
    auto rows = ParseTable(table.out);
    REQUIRE(rows.size() == 2);
    std::set<std::string> names = {rows[0]["NAME"], rows[1]["NAME"]};
    CHECK(names == std::set<std::string>{"bert", "gpt"});
    // The cluster summary follows on stderr, leaving stdout the table alone.
    CHECK(table.err.rfind("Cluster: ", 0) == 0);
    CHECK(table.err.find("capacity unknown") != std::string::npos);

    CliResult json = server.Run({"get", "jobs", "-o", "json"});
    REQUIRE(json.exit_code == 0);
    CHECK(nlohmann::json::parse(json.out).at("jobs").size() == 2);
    // Machine-readable output is the ListJobsResponse and nothing else.
    CHECK(json.err.empty());
  }

  SECTION("get jobs --namespace keeps only that namespace; the wrapper's metadata named it") {
    CliResult table = server.Run({"get", "jobs", "--namespace", "research"});
    REQUIRE(table.exit_code == 0);
    auto rows = ParseTable(table.out);
    REQUIRE(rows.size() == 1);
    CHECK(rows[0]["NAMESPACE"] == "research");
    CHECK(rows[0]["NAME"] == "gpt");
    CHECK(rows[0]["PRIORITY"] == "-1");
  }

  SECTION("an empty namespace prints nothing on stdout and a note on stderr") {
    CliResult table = server.Run({"get", "jobs", "-n", "nobody"});
    CHECK(table.exit_code == 0);
    CHECK(table.out.empty());
    CHECK(table.err.find("No jobs found") != std::string::npos);
  }

  SECTION("get recommendations lists one row per job with enum names unprefixed") {
    CliResult table = server.Run({"get", "recs"});
    REQUIRE(table.exit_code == 0);
    const std::vector<std::string> lines = SplitLines(table.out);
    REQUIRE(lines.size() == 3);
    CHECK(SplitWords(lines[0]) == std::vector<std::string>{"NAMESPACE", "NAME", "REPLICAS",
                                                           "ACTION", "GENERATION", "CONSTRAINT",
                                                           "QUEUE", "REASON"});
    for (auto& row : ParseTable(table.out)) {
      CHECK(row["ACTION"].find("ACTION_") == std::string::npos);
      CHECK(row["CONSTRAINT"].find("BINDING_CONSTRAINT_") == std::string::npos);
    }

    CliResult one = server.Run({"get", "recommendation", "research/gpt", "-o", "json"});
    REQUIRE(one.exit_code == 0);
    CHECK(nlohmann::json::parse(one.out).at("jobId") == "research/gpt");
  }
}

TEST_CASE("register reads the manifest from stdin with -f -", "[rescalectl]") {
  CliServer server;
  CliResult registered = server.Run({"register", "-f", "-"},
                                    R"({"jobId": "default/bert", "minReplicas": 1,
                                        "maxReplicas": 2, "localBatchSize": 8})");
  INFO(registered.err);
  REQUIRE(registered.exit_code == 0);
  CHECK(registered.out == "job.rescale.io/default/bert registered\n");
}

TEST_CASE("register of an existing job fails with AlreadyExists naming the document",
          "[rescalectl]") {
  CliServer server;
  TempFile manifest(kBertManifest);
  REQUIRE(server.Run({"register", "-f", manifest.path()}).exit_code == 0);

  CliResult again = server.Run({"register", "-f", manifest.path()});
  CHECK(again.exit_code == 1);
  CHECK(again.err.find("Error from server (AlreadyExists)") != std::string::npos);
  CHECK(again.err.find(manifest.path()) != std::string::npos);
}

TEST_CASE("update replaces the spec of a registered job", "[rescalectl]") {
  CliServer server;
  TempFile original(kBertManifest);
  REQUIRE(server.Run({"register", "-f", original.path()}).exit_code == 0);

  TempFile changed(R"({"spec": {"jobId": "default/bert", "minReplicas": 2,
                                    "maxReplicas": 16, "localBatchSize": 64}})",
                   ".json");
  CliResult updated = server.Run({"update", "-f", changed.path()});
  INFO(updated.err);
  REQUIRE(updated.exit_code == 0);
  CHECK(updated.out == "job.rescale.io/default/bert updated\n");

  CliResult got = server.Run({"get", "job", "default/bert", "-o", "json"});
  REQUIRE(got.exit_code == 0);
  const nlohmann::json spec = nlohmann::json::parse(got.out).at("spec");
  CHECK(spec.at("minReplicas") == 2);
  CHECK(spec.at("maxReplicas") == 16);
  CHECK(spec.at("localBatchSize") == 64);

  SECTION("updating a job that is not registered fails with NotFound") {
    TempFile unknown("jobId: default/nobody\nminReplicas: 1\nmaxReplicas: 2\n");
    CliResult failed = server.Run({"update", "-f", unknown.path()});
    CHECK(failed.exit_code == 1);
    CHECK(failed.err.find("Error from server (NotFound)") != std::string::npos);
  }
}

TEST_CASE("deregister removes the job and a later get fails with NotFound", "[rescalectl]") {
  CliServer server;
  TempFile manifest(kBertManifest);
  REQUIRE(server.Run({"register", "-f", manifest.path()}).exit_code == 0);

  CliResult removed = server.Run({"deregister", "default/bert"});
  INFO(removed.err);
  REQUIRE(removed.exit_code == 0);
  CHECK(removed.out == "job.rescale.io/default/bert deregistered\n");

  CliResult got = server.Run({"get", "job", "default/bert"});
  CHECK(got.exit_code == 1);
  CHECK(got.out.empty());
  CHECK(got.err.rfind("Error from server (NotFound): ", 0) == 0);
}

TEST_CASE("a spec with min_replicas above max_replicas is rejected naming both fields",
          "[rescalectl]") {
  CliServer server;
  TempFile manifest("jobId: default/bad\nminReplicas: 5\nmaxReplicas: 2\n");
  CliResult failed = server.Run({"register", "-f", manifest.path()});
  CHECK(failed.exit_code == 1);
  CHECK(failed.err.find("Error from server (InvalidArgument)") != std::string::npos);
  CHECK(failed.err.find("min_replicas") != std::string::npos);
  CHECK(failed.err.find("max_replicas") != std::string::npos);
}

TEST_CASE("manifest mistakes fail before any call, naming the file and the problem",
          "[rescalectl]") {
  CliServer server;

  SECTION("an unknown field names the field, and no earlier document is registered") {
    TempFile manifest(
        "jobId: default/good\nminReplicas: 1\nmaxReplicas: 2\n---\n"
        "jobId: default/typo\nminReplicas: 1\nmaxReplica: 2\n");
    CliResult failed = server.Run({"register", "-f", manifest.path()});
    CHECK(failed.exit_code == 1);
    CHECK(failed.err.find("maxReplica") != std::string::npos);
    CHECK(failed.err.find(manifest.path()) != std::string::npos);
    CHECK(failed.err.find("document 2") != std::string::npos);

    CliResult listed = server.Run({"get", "jobs", "-o", "json"});
    REQUIRE(listed.exit_code == 0);
    CHECK(nlohmann::json::parse(listed.out).at("jobs").empty());
  }

  SECTION("a YAML syntax error names the file and the line") {
    TempFile manifest("jobId: default/bert\nprior: [1, 2\nminReplicas: 1\n");
    CliResult failed = server.Run({"register", "-f", manifest.path()});
    CHECK(failed.exit_code == 1);
    CHECK(failed.err.find(manifest.path()) != std::string::npos);
    CHECK(failed.err.find("line ") != std::string::npos);
  }

  SECTION("a quoted number stays a string and the type error names the field") {
    TempFile manifest("jobId: default/bert\nminReplicas: \"one\"\nmaxReplicas: 2\n");
    CliResult failed = server.Run({"register", "-f", manifest.path()});
    CHECK(failed.exit_code == 1);
    CHECK(failed.err.find("min_replicas") != std::string::npos);
  }

  // Found by tests/fuzz/rescalectl_manifest.cc: the bytes reached
  // nlohmann's dump, whose exception ended rescalectl.
  SECTION("a manifest that is not UTF-8 is an error naming the document") {
    TempFile manifest("jobId: default/bert\npolicy: \"static\xe3y\"\nmaxReplicas: 2\n");
    CliResult failed = server.Run({"register", "-f", manifest.path()});
    CHECK(failed.exit_code == 1);
    CHECK(failed.err.find("document 1") != std::string::npos);
    CHECK(failed.err.find("not UTF-8") != std::string::npos);
  }

  // Found by tests/fuzz/rescalectl_manifest.cc: yaml-cpp's LoadAll never
  // returned on these, filling memory with empty documents.
  SECTION("a ',' between documents is a syntax error naming the line, not a hang") {
    TempFile manifest(
        "{\"jobId\": \"default/a\", \"maxReplicas\": 2},\n{\"jobId\": \"default/b\"}\n");
    CliResult failed = server.Run({"register", "-f", manifest.path()});
    CHECK(failed.exit_code == 1);
    CHECK(failed.err.find("line 1, column 41") != std::string::npos);
    CHECK(failed.err.find("unexpected ','") != std::string::npos);

    TempFile leading(",jobId: default/a\n");
    failed = server.Run({"register", "-f", leading.path()});
    CHECK(failed.exit_code == 1);
    CHECK(failed.err.find("line 1, column 1") != std::string::npos);
  }

  SECTION("a missing file is named") {
    CliResult failed = server.Run({"register", "-f", "/nonexistent/rescale/jobs.yaml"});
    CHECK(failed.exit_code == 1);
    CHECK(failed.err.find("/nonexistent/rescale/jobs.yaml") != std::string::npos);
  }
}

TEST_CASE("capacity set then capacity get shows total, allocated and free GPUs", "[rescalectl]") {
  CliServer server;
  TempFile manifest(kBertManifest);  // needs at least 1 replica × 2 GPUs
  REQUIRE(server.Run({"register", "-f", manifest.path()}).exit_code == 0);

  CliResult set = server.Run({"capacity", "set", "8"});
  INFO(set.err);
  REQUIRE(set.exit_code == 0);
  CHECK(set.out == "cluster capacity set to 8 GPUs\n");

  CliResult table = server.Run({"capacity", "get"});
  REQUIRE(table.exit_code == 0);
  const std::vector<std::string> lines = SplitLines(table.out);
  REQUIRE(lines.size() >= 2);
  const std::vector<std::string> headers = SplitWords(lines[0]);
  REQUIRE(headers.size() >= 3);
  CHECK(headers == kCapacityTotalsHeader);
  CHECK(SplitWords(lines[1])[0] == "8");

  CliResult json = server.Run({"capacity", "get", "-o", "json"});
  REQUIRE(json.exit_code == 0);
  const nlohmann::json cluster = nlohmann::json::parse(json.out);
  CHECK(cluster.at("totalGpus") == 8);
  CHECK(cluster.at("capacityKnown") == true);
  CHECK(cluster.at("allocatedGpus").get<int>() + cluster.at("freeGpus").get<int>() == 8);
  // Table mode lists the per-job allocations the json holds.
  for (const auto& allocation : cluster.at("allocations")) {
    const std::string job_id = allocation.at("jobId");
    CHECK(table.out.find(job_id.substr(job_id.find('/') + 1)) != std::string::npos);
  }
}

TEST_CASE("capacity set --slots and capacity get show the replicas per size that fit",
          "[rescalectl]") {
  CliServer server;
  TempFile manifest(kBertManifest);  // 2 GPUs per replica, 1 to 8 replicas
  REQUIRE(server.Run({"register", "-f", manifest.path()}).exit_code == 0);

  CliResult set = server.Run({"capacity", "set", "16", "--slots", "2=3,8=1"});
  INFO(set.err);
  REQUIRE(set.exit_code == 0);
  CHECK(set.out == "cluster capacity set to 16 GPUs; fit on the nodes: 3 x 2 GPUs, 1 x 8 GPUs\n");

  CliResult table = server.Run({"capacity", "get"});
  REQUIRE(table.exit_code == 0);
  const std::vector<std::string> lines = SplitLines(table.out);
  // The totals stay first and as they were.
  CHECK(SplitWords(lines[0]) == kCapacityTotalsHeader);
  CHECK(SplitWords(lines[1])[0] == "16");
  CHECK(SplitWords(lines[1])[1] == "6");  // bert: 3 replicas, not the 8 the total allows
  // The slots table comes last: one row per class.
  REQUIRE(lines.size() >= 3);
  CHECK(SplitWords(lines[lines.size() - 3]) ==
        std::vector<std::string>{"GPUS/REPLICA", "FIT", "PLANNED"});
  CHECK(SplitWords(lines[lines.size() - 2]) == std::vector<std::string>{"2", "3", "3"});
  CHECK(SplitWords(lines[lines.size() - 1]) == std::vector<std::string>{"8", "1", "0"});

  // -o json carries the new fields as the API names them.
  CliResult json = server.Run({"capacity", "get", "-o", "json"});
  REQUIRE(json.exit_code == 0);
  const nlohmann::json cluster = nlohmann::json::parse(json.out);
  REQUIRE(cluster.at("slots").size() == 2);
  CHECK(cluster.at("slots")[0].at("gpusPerReplica") == 2);
  CHECK(cluster.at("slots")[0].at("replicas") == 3);
  REQUIRE(cluster.at("slotUse").size() == 2);
  CHECK(cluster.at("slotUse")[0].at("replicasFit") == 3);
  CHECK(cluster.at("slotUse")[0].at("replicasPlanned") == 3);
  CliResult yaml = server.Run({"capacity", "get", "-o", "yaml"});
  REQUIRE(yaml.exit_code == 0);
  CHECK(yaml.out.find("replicasPlanned: 3") != std::string::npos);

  // The server names what it refuses; without --slots the slots go.
  CliResult refused = server.Run({"capacity", "set", "16", "--slots", "8=3"});
  CHECK(refused.exit_code == 1);
  CHECK(refused.err.find("slots[0].replicas 3 of 8 GPUs each exceeds the limit of 2") !=
        std::string::npos);
  REQUIRE(server.Run({"capacity", "set", "16"}).exit_code == 0);
  CliResult plain = server.Run({"capacity", "get"});
  CHECK(plain.out.find("GPUS/REPLICA") == std::string::npos);
}

TEST_CASE("capacity set --type-slots gives one type's slots, and capacity get shows them",
          "[rescalectl]") {
  CliServer server;
  TempFile manifest(kBertManifest);  // 2 GPUs per replica, 1 to 8 replicas
  REQUIRE(server.Run({"register", "-f", manifest.path()}).exit_code == 0);
  CliResult set =
      server.Run({"capacity", "set", "--types", "Tesla-T4=8:4,NVIDIA-A100-SXM4-40GB=8:8",
                  "--type-slots", "Tesla-T4:2=1,1=4", "--type-slots", "NVIDIA-A100-SXM4-40GB:2=4"});
  INFO(set.err);
  REQUIRE(set.exit_code == 0);

  CliResult json = server.Run({"capacity", "get", "-o", "json"});
  REQUIRE(json.exit_code == 0);
  const nlohmann::json cluster = nlohmann::json::parse(json.out);
  INFO(json.out);
  REQUIRE(cluster.at("gpuTypes").size() == 2);
  const nlohmann::json& t4 = cluster.at("gpuTypes")[0];
  CHECK(t4.at("name") == "Tesla-T4");
  REQUIRE(t4.at("slots").size() == 2);
  CHECK(t4.at("slots")[0].at("gpusPerReplica") == 2);
  CHECK(t4.at("slots")[0].at("replicas") == 1);
  CHECK(t4.at("slots")[1].at("gpusPerReplica") == 1);
  CHECK(cluster.at("gpuTypes")[1].at("slots")[0].at("replicas") == 4);

  // The types table gains SLOTS, as the flag gives them.
  CliResult table = server.Run({"capacity", "get"});
  INFO(table.out);
  const std::string types = table.out.substr(table.out.rfind("TYPE "));
  const std::vector<std::map<std::string, std::string>> rows = ParseTable(types);
  REQUIRE(rows.size() == 2);
  CHECK(rows[0].at("SLOTS") == "2=1,1=4");
  CHECK(rows[1].at("SLOTS") == "2=4");

  // Without --type-slots the types' slots go, and so does the column.
  REQUIRE(server.Run({"capacity", "set", "--types", "Tesla-T4=8:4,NVIDIA-A100-SXM4-40GB=8:8"})
              .exit_code == 0);
  CliResult plain = server.Run({"capacity", "get"});
  CHECK(plain.out.find("SLOTS") == std::string::npos);
}

TEST_CASE("capacity set --allocatable and capacity get show total, usable and per-size slots",
          "[rescalectl]") {
  CliServer server;
  TempFile manifest(kBertManifest);  // 2 GPUs per replica, 1 to 8 replicas
  REQUIRE(server.Run({"register", "-f", manifest.path()}).exit_code == 0);
  // The totals row of capacity get, by column.
  auto totals = [&] {
    CliResult get = server.Run({"capacity", "get"});
    REQUIRE(get.exit_code == 0);
    const std::vector<std::string> lines = SplitLines(get.out);
    REQUIRE(lines.size() >= 2);
    return ParseTable(lines[0] + "\n" + lines[1]).at(0);
  };

  CliResult set =
      server.Run({"capacity", "set", "16", "--allocatable", "24", "--slots", "2=3,8=1"});
  INFO(set.err);
  REQUIRE(set.exit_code == 0);
  CHECK(set.out ==
        "cluster capacity set to 16 GPUs of 24 allocatable; fit on the nodes: 3 x 2 GPUs, 1 x 8 "
        "GPUs\n");

  std::map<std::string, std::string> row = totals();
  CHECK(row["TOTAL"] == "24");
  CHECK(row["USABLE"] == "16");
  CHECK(row["ALLOCATED"] == "6");  // bert: 3 replicas of 2 GPUs, as the slots allow
  CHECK(row["FREE"] == "10");      // of the usable GPUs
  // The per-size slots table stays last.
  CliResult table = server.Run({"capacity", "get"});
  const std::vector<std::string> lines = SplitLines(table.out);
  REQUIRE(lines.size() >= 5);
  CHECK(SplitWords(lines[lines.size() - 3]) ==
        std::vector<std::string>{"GPUS/REPLICA", "FIT", "PLANNED"});
  CHECK(SplitWords(lines[lines.size() - 2]) == std::vector<std::string>{"2", "3", "3"});

  CliResult json = server.Run({"capacity", "get", "-o", "json"});
  REQUIRE(json.exit_code == 0);
  const nlohmann::json cluster = nlohmann::json::parse(json.out);
  CHECK(cluster.at("allocatableGpus") == 24);
  CHECK(cluster.at("totalGpus") == 16);
  CliResult yaml = server.Run({"capacity", "get", "-o", "yaml"});
  REQUIRE(yaml.exit_code == 0);
  CHECK(yaml.out.find("allocatableGpus: 24") != std::string::npos);

  // The server refuses fewer allocatable than usable GPUs, naming the
  // field; nothing changes.
  CliResult refused = server.Run({"capacity", "set", "16", "--allocatable", "12"});
  CHECK(refused.exit_code == 1);
  CHECK(refused.err.find("allocatable_gpus 12 must be at least total_gpus (16)") !=
        std::string::npos);
  CHECK(totals()["TOTAL"] == "24");

  // Without --allocatable it is not reported: TOTAL is the usable total.
  REQUIRE(server.Run({"capacity", "set", "12"}).exit_code == 0);
  row = totals();
  CHECK(row["TOTAL"] == "12");
  CHECK(row["USABLE"] == "12");
}

TEST_CASE("capacity set --slots refuses text that is not GPUS=REPLICAS pairs", "[rescalectl]") {
  for (const char* bad :
       {"8", "8=", "=3", "8=3,", "8=-1", "a=1", "8=3;4=1", "+8=3", "8=99999999999"}) {
    INFO(bad);
    CliResult failed = RunRaw({"capacity", "set", "16", "--slots", bad});
    CHECK(failed.exit_code == 2);
    CHECK(failed.err.find("GPUS=REPLICAS") != std::string::npos);
  }
  google::protobuf::RepeatedPtrField<rescale::v1::ReplicaSlots> slots;
  CHECK(rescale::cli::ParseSlotsFlag("8=3,4=7", &slots).empty());
  REQUIRE(slots.size() == 2);
  CHECK(slots[1].gpus_per_replica() == 4);
  CHECK(slots[1].replicas() == 7);
}

TEST_CASE(
    "get jobs shows each job's GPUs, state and queue place, then the cluster's "
    "utilisation on stderr",
    "[rescalectl]") {
  CliServer server;
  // Room for one 2-GPU replica: the priority-5 job gets it, the other waits.
  TempFile manifest(R"(jobId: default/first
minReplicas: 1
maxReplicas: 1
gpusPerReplica: 2
priority: 5
---
jobId: default/second
minReplicas: 1
maxReplicas: 1
gpusPerReplica: 2
priority: 1
)");
  REQUIRE(server.Run({"capacity", "set", "2"}).exit_code == 0);
  REQUIRE(server.Run({"register", "-f", manifest.path()}).exit_code == 0);

  auto row_of = [](const std::vector<std::map<std::string, std::string>>& rows,
                   const std::string& name) {
    auto row =
        std::find_if(rows.begin(), rows.end(), [&](const auto& r) { return r.at("NAME") == name; });
    REQUIRE(row != rows.end());
    return *row;
  };

  CliResult listed = server.Run({"get", "jobs"});
  INFO(listed.out << listed.err);
  REQUIRE(listed.exit_code == 0);
  auto rows = ParseTable(listed.out);
  REQUIRE(rows.size() == 2);
  // Recommended but not yet applied.
  CHECK(row_of(rows, "first")["STATE"] == "Starting");
  CHECK(row_of(rows, "first")["GPUS"] == "2");
  CHECK(row_of(rows, "first")["QUEUE"] == "-");
  CHECK(row_of(rows, "second")["STATE"] == "Waiting");
  CHECK(row_of(rows, "second")["GPUS"] == "0");
  CHECK(row_of(rows, "second")["QUEUE"] == "1");
  CHECK(listed.err == "Cluster: 2/2 GPUs allocated (100%), 1 job waiting; plan gap 0.00%\n");

  // The operator applies both: first runs, second is suspended.
  REQUIRE(server.Run({"apply-status", "default/first", "--replicas", "1"}).exit_code == 0);
  REQUIRE(
      server.Run({"apply-status", "default/second", "--replicas", "0", "--suspended"}).exit_code ==
      0);
  listed = server.Run({"get", "jobs"});
  REQUIRE(listed.exit_code == 0);
  rows = ParseTable(listed.out);
  REQUIRE(rows.size() == 2);
  CHECK(row_of(rows, "first")["STATE"] == "Running");
  CHECK(row_of(rows, "second")["STATE"] == "Suspended");

  // capacity get carries the same utilisation and gap.
  CliResult capacity = server.Run({"capacity", "get"});
  REQUIRE(capacity.exit_code == 0);
  const auto totals = ParseTable(capacity.out);
  REQUIRE_FALSE(totals.empty());
  CHECK(totals[0].at("UTILIZATION") == "100%");
  CHECK(totals[0].at("GAP") == "0.00%");

  // describe shows the planner's marginal values exactly when the job's
  // recommendation carries them.
  for (const std::string job_id : {"default/first", "default/second"}) {
    INFO(job_id);
    CliResult json = server.Run({"get", "recommendation", job_id, "-o", "json"});
    CliResult described = server.Run({"describe", "job", job_id});
    REQUIRE(json.exit_code == 0);
    REQUIRE(described.exit_code == 0);
    const nlohmann::json rec = nlohmann::json::parse(json.out);
    CHECK(rec.contains("valueOneMore") ==
          (described.out.find("Value of one more replica:") != std::string::npos));
    CHECK(rec.contains("valueOneFewer") ==
          (described.out.find("Value of one fewer replica:") != std::string::npos));
  }
  CliResult waiting = server.Run({"describe", "job", "default/second"});
  CHECK(waiting.out.find("Queue Position:") != std::string::npos);
}

namespace {

// A server with only JobService, answering ListJobs with one job: what an
// older rescaled (or a proxy that forwards only some services) looks like
// to get jobs.
class JobsOnlyService final : public rescale::v1::JobService::Service {
 public:
  grpc::Status ListJobs(grpc::ServerContext*, const rescale::v1::ListJobsRequest*,
                        rescale::v1::ListJobsResponse* response) override {
    rescale::v1::Job* job = response->add_jobs();
    job->mutable_spec()->set_job_id("default/bert");
    job->mutable_recommendation()->set_replicas(2);
    job->mutable_recommendation()->set_gpus(2);
    job->mutable_status()->set_current_replicas(2);
    return grpc::Status::OK;
  }
};

}  // namespace

TEST_CASE("get jobs still prints its table, without the summary, when GetCluster fails",
          "[rescalectl]") {
  JobsOnlyService service;
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  REQUIRE(server != nullptr);
  REQUIRE(port > 0);

  CliResult listed = RunRaw({"--server", "127.0.0.1:" + std::to_string(port), "get", "jobs"});
  INFO(listed.err);
  CHECK(listed.exit_code == 0);
  CHECK(listed.err.empty());
  const auto rows = ParseTable(listed.out);
  REQUIRE(rows.size() == 1);
  CHECK(rows[0].at("STATE") == "Running");
  server->Shutdown();
}

TEST_CASE("apply-status reports the applied replicas and get job shows them", "[rescalectl]") {
  CliServer server;
  TempFile manifest(kBertManifest);
  REQUIRE(server.Run({"register", "-f", manifest.path()}).exit_code == 0);

  CliResult rec = server.Run({"get", "recommendation", "default/bert", "-o", "json"});
  REQUIRE(rec.exit_code == 0);
  const nlohmann::json recommendation = nlohmann::json::parse(rec.out);
  // uint64 travels as a JSON string in proto JSON.
  const std::string generation = recommendation.at("generation");
  const std::string replicas = std::to_string(recommendation.at("replicas").get<int>());

  CliResult applied = server.Run(
      {"apply-status", "default/bert", "--replicas", replicas, "--generation", generation});
  INFO(applied.err);
  REQUIRE(applied.exit_code == 0);
  CHECK(applied.out.rfind("job.rescale.io/default/bert applied", 0) == 0);

  CliResult got = server.Run({"get", "job", "default/bert", "-o", "json"});
  REQUIRE(got.exit_code == 0);
  const nlohmann::json status = nlohmann::json::parse(got.out).at("status");
  CHECK(status.at("currentReplicas") == std::stoi(replicas));
  CHECK(status.at("lastAppliedGeneration") == generation);
}

TEST_CASE("health prints SERVING and exits 0", "[rescalectl]") {
  CliServer server;
  CliResult health = server.Run({"health"});
  INFO(health.err);
  CHECK(health.exit_code == 0);
  CHECK(health.out == "SERVING\n");
  CliResult service = server.Run({"health", "--service", "rescale.v1.JobService"});
  CHECK(service.exit_code == 0);
  CliResult unknown = server.Run({"health", "--service", "rescale.v1.NoSuchService"});
  CHECK(unknown.exit_code == 1);
  CHECK_THAT(unknown.err, Catch::Contains("NotFound"));
}

TEST_CASE("watch --count prints each job's initial state, then SYNCED, then exits 0",
          "[rescalectl]") {
  CliServer server;
  TempFile manifest(kTwoJobsManifest);
  REQUIRE(server.Run({"register", "-f", manifest.path()}).exit_code == 0);

  SECTION("json: one object per line") {
    CliResult watched = server.Run({"watch", "--count", "3", "-o", "json"});
    INFO(watched.err);
    REQUIRE(watched.exit_code == 0);
    const std::vector<std::string> lines = SplitLines(watched.out);
    REQUIRE(lines.size() == 3);
    std::set<std::string> added;
    for (int i = 0; i < 2; ++i) {
      const nlohmann::json event = nlohmann::json::parse(lines[i]);
      CHECK(event.at("type") == "ADDED");
      added.insert(event.at("recommendation").at("jobId").get<std::string>());
    }
    CHECK(added == std::set<std::string>{"default/bert", "research/gpt"});
    CHECK(nlohmann::json::parse(lines[2]).at("type") == "SYNCED");
  }

  SECTION("table: a header with an EVENT column, then one row per event") {
    CliResult watched = server.Run({"watch", "--count", "3"});
    REQUIRE(watched.exit_code == 0);
    const std::vector<std::string> lines = SplitLines(watched.out);
    REQUIRE(lines.size() == 4);
    CHECK(SplitWords(lines[0])[0] == "EVENT");
    CHECK(SplitWords(lines[1])[0] == "ADDED");
    CHECK(SplitWords(lines[2])[0] == "ADDED");
    CHECK(SplitWords(lines[3]) == std::vector<std::string>{"SYNCED"});
  }

  SECTION("table: with GPU types, GPU-TYPE before REASON") {
    REQUIRE(server.Run({"capacity", "set", "--types", "Tesla-T4=8:4,NVIDIA-A100-SXM4-40GB=8:8"})
                .exit_code == 0);
    CliResult watched = server.Run({"watch", "--count", "3"});
    REQUIRE(watched.exit_code == 0);
    const std::vector<std::string> lines = SplitLines(watched.out);
    REQUIRE(lines.size() == 4);
    const std::vector<std::string> header = SplitWords(lines[0]);
    REQUIRE(header.size() == 10);
    CHECK(header[8] == "GPU-TYPE");
    CHECK(header[9] == "REASON");
    // Each job's recommended type, in the column its header names (the
    // planner places both: 8 GPUs of each type are free).
    INFO(watched.out);
    const size_t column = lines[0].find("GPU-TYPE");
    std::set<std::string> types;
    for (int row = 1; row <= 2; ++row) types.insert(SplitWords(lines[row].substr(column))[0]);
    for (const std::string& type : types)
      CHECK((type == "Tesla-T4" || type == "NVIDIA-A100-SXM4-40GB"));
  }

  SECTION("yaml: one document per event") {
    CliResult watched = server.Run({"watch", "--count", "3", "-o", "yaml"});
    REQUIRE(watched.exit_code == 0);
    const std::vector<YAML::Node> documents = YAML::LoadAll(watched.out);
    REQUIRE(documents.size() == 3);
    CHECK(documents[2]["type"].as<std::string>() == "SYNCED");
  }

  SECTION("--namespace keeps only that namespace's jobs") {
    CliResult watched = server.Run({"watch", "-n", "research", "--count", "2", "-o", "json"});
    REQUIRE(watched.exit_code == 0);
    const std::vector<std::string> lines = SplitLines(watched.out);
    REQUIRE(lines.size() == 2);
    CHECK(nlohmann::json::parse(lines[0]).at("recommendation").at("jobId") == "research/gpt");
    CHECK(nlohmann::json::parse(lines[1]).at("type") == "SYNCED");
  }
}

TEST_CASE("watch prints a job registered while it runs", "[rescalectl]") {
  CliServer server;
  TempFile first("jobId: default/first\nminReplicas: 1\nmaxReplicas: 2\n");
  TempFile second("jobId: default/second\nminReplicas: 1\nmaxReplicas: 2\n");
  REQUIRE(server.Run({"register", "-f", first.path()}).exit_code == 0);

  // Whether `second` lands before or after the watch subscribes, the watch
  // sees it exactly once as ADDED: in the initial list or as a change.
  CliResult watched;
  std::thread watcher([&] { watched = server.Run({"watch", "--count", "3", "-o", "json"}); });
  CliResult registered = server.Run({"register", "-f", second.path()});
  watcher.join();
  REQUIRE(registered.exit_code == 0);
  INFO(watched.err);
  REQUIRE(watched.exit_code == 0);

  std::multiset<std::string> events;
  for (const std::string& line : SplitLines(watched.out)) {
    const nlohmann::json event = nlohmann::json::parse(line);
    std::string summary = event.at("type").get<std::string>();
    if (event.contains("recommendation")) {
      // Two appends: GCC 12 warns (-Wrestrict, a false positive) on " " + string.
      summary += ' ';
      summary += event.at("recommendation").at("jobId").get<std::string>();
    }
    events.insert(summary);
  }
  CHECK(events ==
        std::multiset<std::string>{"ADDED default/first", "ADDED default/second", "SYNCED"});
}

using rescale::testing::kTestCertificate;
using rescale::testing::kTestPrivateKey;

TEST_CASE("a --ca-file client connects over TLS to a server with that certificate",
          "[rescalectl]") {
  TempFile certificate(kTestCertificate, ".pem");
  TempFile private_key(kTestPrivateKey, ".pem");
  ServerOptions options;
  options.tls_cert_file = certificate.path();
  options.tls_key_file = private_key.path();
  CliServer server(options);

  CliResult health = server.Run({"--ca-file", certificate.path(), "health"});
  INFO(health.err);
  CHECK(health.exit_code == 0);
  CHECK(health.out == "SERVING\n");

  // The flag's environment variable does the same (a container's health
  // check has only its environment).
  setenv("RESCALE_CA_FILE", certificate.path().c_str(), 1);
  CliResult from_environment = server.Run({"health"});
  unsetenv("RESCALE_CA_FILE");
  CHECK(from_environment.exit_code == 0);

  // Without TLS the handshake never happens: a connection error, not a hang.
  CliResult plaintext = server.Run({"--timeout", "5", "health"});
  CHECK(plaintext.exit_code == 1);
  CHECK(plaintext.err.find("Error from server (Unavailable)") != std::string::npos);
}

TEST_CASE("rescalectl authenticates with --token-file, and with --cert-file and --key-file",
          "[rescalectl]") {
  rescale::testing::TestCa ca("ca");
  rescale::testing::PemPair server_pair = ca.IssueServer();
  rescale::testing::PemPair admin = ca.IssueClient("root", "admin");
  TempFile certificate(server_pair.certificate, ".pem");
  TempFile private_key(server_pair.private_key, ".pem");
  TempFile ca_file(ca.certificate(), ".pem");
  TempFile client_certificate(admin.certificate, ".pem");
  TempFile client_key(admin.private_key, ".pem");
  TempFile tokens("viewer-token-0123456789,dashboard,viewer,*\n", ".csv");
  TempFile token("viewer-token-0123456789\n", ".token");
  ServerOptions options;
  options.tls_cert_file = certificate.path();
  options.tls_key_file = private_key.path();
  options.tls_client_ca_file = ca_file.path();
  options.auth_token_file = tokens.path();
  CliServer server(options);

  // The certificate says admin; the token, when sent, says viewer.
  CliResult as_admin =
      server.Run({"--ca-file", ca_file.path(), "--cert-file", client_certificate.path(),
                  "--key-file", client_key.path(), "capacity", "set", "8"});
  INFO(as_admin.err);
  CHECK(as_admin.exit_code == 0);
  CliResult as_viewer = server.Run({"--ca-file", ca_file.path(), "--cert-file",
                                    client_certificate.path(), "--key-file", client_key.path(),
                                    "--token-file", token.path(), "capacity", "set", "4"});
  CHECK(as_viewer.exit_code == 1);
  CHECK_THAT(as_viewer.err, Catch::Contains("user \"dashboard\" (role viewer) may not call "
                                            "rescale.v1.ClusterService/SetCapacity"));
  CliResult read =
      server.Run({"--ca-file", ca_file.path(), "--cert-file", client_certificate.path(),
                  "--key-file", client_key.path(), "--token-file", token.path(), "get", "jobs"});
  CHECK(read.exit_code == 0);

  // The certificate is checked against --tls-server-name when given.
  CliResult named = server.Run({"--ca-file", ca_file.path(), "--cert-file",
                                client_certificate.path(), "--key-file", client_key.path(),
                                "--tls-server-name", "localhost", "get", "jobs"});
  CHECK(named.exit_code == 0);
  CliResult misnamed = server.Run({"--timeout", "5", "--ca-file", ca_file.path(), "--cert-file",
                                   client_certificate.path(), "--key-file", client_key.path(),
                                   "--tls-server-name", "rescaled.elsewhere.svc", "get", "jobs"});
  CHECK(misnamed.exit_code == 1);

  // No client certificate: no TLS handshake, whatever the token.
  CliResult anonymous = server.Run(
      {"--timeout", "5", "--ca-file", ca_file.path(), "--token-file", token.path(), "get", "jobs"});
  CHECK(anonymous.exit_code == 1);
  CHECK_THAT(anonymous.err, Catch::Contains("Unavailable"));
}

TEST_CASE("a server that cannot be reached is reported as Unavailable with exit code 1",
          "[rescalectl]") {
  // Port 1 is privileged and nothing in a test environment listens there.
  CliResult failed = RunRaw({"--server", "127.0.0.1:1", "--timeout", "5", "get", "jobs"});
  CHECK(failed.exit_code == 1);
  CHECK(failed.err.find("Error from server (Unavailable)") != std::string::npos);
}

TEST_CASE("every command prints its help with --help and exits 0", "[rescalectl]") {
  const std::vector<std::vector<std::string>> commands = {
      {},
      {"get"},
      {"get", "jobs"},
      {"get", "recommendations"},
      {"get", "job"},
      {"get", "recommendation"},
      {"describe"},
      {"describe", "job"},
      {"register"},
      {"update"},
      {"deregister"},
      {"watch"},
      {"capacity"},
      {"capacity", "set"},
      {"capacity", "get"},
      {"health"},
      {"apply-status"},
  };
  for (const auto& command : commands) {
    std::vector<std::string> args = command;
    args.push_back("--help");
    std::string path = "rescalectl";
    for (const auto& word : command) path += " " + word;
    INFO(path);
    CliResult help = RunRaw(args);
    CHECK(help.exit_code == 0);
    CHECK(help.out.find("Usage: " + path) != std::string::npos);
    CHECK(help.err.empty());
  }
}

TEST_CASE("usage errors print CLI11's message and exit 2", "[rescalectl]") {
  SECTION("no command") { CHECK(RunRaw({}).exit_code == 2); }
  SECTION("a group without its subcommand") { CHECK(RunRaw({"get"}).exit_code == 2); }
  SECTION("a missing job id") {
    CliResult failed = RunRaw({"get", "job"});
    CHECK(failed.exit_code == 2);
    CHECK(failed.err.find("NS/NAME") != std::string::npos);
  }
  SECTION("an unknown output format") {
    CliResult failed = RunRaw({"get", "jobs", "-o", "xml"});
    CHECK(failed.exit_code == 2);
    CHECK(failed.err.find("xml") != std::string::npos);
  }
  SECTION("register without -f") { CHECK(RunRaw({"register"}).exit_code == 2); }
  SECTION("a negative capacity") { CHECK(RunRaw({"capacity", "set", "--", "-1"}).exit_code == 2); }
  SECTION("a negative or non-numeric allocatable") {
    CHECK(RunRaw({"capacity", "set", "8", "--allocatable=-1"}).exit_code == 2);
    CHECK(RunRaw({"capacity", "set", "8", "--allocatable", "many"}).exit_code == 2);
  }
}

TEST_CASE("plain YAML scalars get YAML 1.2 types and quoted ones stay strings",
          "[rescalectl][output]") {
  const nlohmann::json json = rescale::cli::YamlToJson(YAML::Load(R"(
int: 42
negative: -7
hex: 0x1F
float: 2.5
exponent: 1e3
yes_is_a_string: yes
bool: true
null_tilde: ~
null_word: null
empty:
quoted_int: "42"
quoted_bool: 'true'
tagged: !!str 12
infinity: .inf
big: 18446744073709551615
list: [1, "1", x]
)"));
  CHECK(json.at("int") == 42);
  CHECK(json.at("negative") == -7);
  CHECK(json.at("hex") == 31);
  CHECK(json.at("float") == 2.5);
  CHECK(json.at("exponent") == 1000.0);
  CHECK(json.at("yes_is_a_string") == "yes");
  CHECK(json.at("bool") == true);
  CHECK(json.at("null_tilde").is_null());
  CHECK(json.at("null_word").is_null());
  CHECK(json.at("empty").is_null());
  CHECK(json.at("quoted_int") == "42");
  CHECK(json.at("quoted_bool") == "true");
  CHECK(json.at("tagged") == "12");
  CHECK(json.at("infinity") == "Infinity");
  CHECK(json.at("big") == 18446744073709551615ull);
  CHECK(json.at("list") == nlohmann::json::array({1, "1", "x"}));
}

// Found by tests/fuzz/rescalectl_manifest.cc: a string ending in "\r" was
// written as a plain scalar, and reading it back dropped the "\r"s.
TEST_CASE("get -o yaml quotes strings with control characters so they read back the same",
          "[rescalectl][output]") {
  for (const std::string value : {"x\r\r", "a\tb", "\x01", "line\nbreak"}) {
    INFO(value);
    const std::string yaml = rescale::cli::JsonToYaml(nlohmann::ordered_json{{"note", value}});
    CHECK(rescale::cli::YamlToJson(YAML::Load(yaml)).at("note") == value);
  }
}

// Found by tests/fuzz/rescalectl_manifest.cc: a parameter name longer than
// the 1024 characters YAML allows an implicit key was written as "key: ",
// and reading it back failed with "illegal map value".
TEST_CASE("get -o yaml writes keys too long for an implicit key as explicit keys",
          "[rescalectl][output]") {
  const std::string long_plain(1100, '9');
  const std::string long_once_escaped = std::string(300, '\x10') + "x";  // "\x10" is 4 characters
  for (const std::string& key : {long_plain, long_once_escaped}) {
    const nlohmann::ordered_json object{{key, "v"}, {"short", "w"}};
    const std::string yaml = rescale::cli::JsonToYaml(object);
    CHECK(yaml.rfind("? ", 0) == 0);
    CHECK(yaml.find("\nshort: w") != std::string::npos);  // short keys stay implicit
    CHECK(rescale::cli::YamlToJson(YAML::Load(yaml)) == nlohmann::json(object));
  }
}

// Found by tests/fuzz/rescalectl_manifest.cc: a job id holding U+FFFF came
// back from -o yaml as U+FFFD. YAML cannot carry noncharacters and yaml-cpp
// replaces them: docs/usage.md documents it, and -o json keeps them.
TEST_CASE("get -o yaml writes noncharacters as U+FFFD and -o json keeps them",
          "[rescalectl][output]") {
  // The control character makes the string double-quoted, where yaml-cpp
  // checks every code point (a plain scalar is written byte for byte).
  const std::string nonchar =
      "a\x01\xEF\xBF\xBF"
      "b";  // U+FFFF
  const nlohmann::ordered_json object{{"note", nonchar}};
  const std::string yaml = rescale::cli::JsonToYaml(object);
  CHECK(rescale::cli::YamlToJson(YAML::Load(yaml)).at("note") ==
        "a\x01\xEF\xBF\xBD"
        "b");
  rescale::v1::JobSpec spec;
  spec.set_policy(nonchar);
  CHECK(nlohmann::json::parse(rescale::cli::MessageToJson(spec, /*pretty=*/false)).at("policy") ==
        nonchar);
}

TEST_CASE("describe shows each pod with its step time and flags stragglers",
          "[rescalectl][output]") {
  rescale::v1::Job job;
  job.mutable_spec()->set_job_id("default/bert");
  job.mutable_spec()->set_min_replicas(1);
  job.mutable_spec()->set_max_replicas(4);
  const absl::Time now = absl::FromUnixSeconds(1'700'000'000);
  auto add_pod = [&](const std::string& name, double step_seconds, bool straggler) {
    rescale::v1::PodStatus* pod = job.add_pods();
    pod->set_pod(name);
    pod->set_world_size(2);
    pod->set_recent_step_seconds(step_seconds);
    pod->set_sample_count(40);
    pod->mutable_last_seen()->set_seconds(absl::ToUnixSeconds(now) - 30);
    pod->set_straggler(straggler);
  };
  add_pod("bert-0", 0.5, false);
  add_pod("bert-1", 1.25, true);

  const std::string text = rescale::cli::DescribeJob(job, now);
  INFO(text);
  CHECK(text.find("Pods:\n  POD     WORLD SIZE  STEP TIME  SAMPLES  LAST SEEN  STRAGGLER\n"
                  "  bert-0  2           0.500s     40       30s ago    no\n"
                  "  bert-1  2           1.250s     40       30s ago    yes\n") !=
        std::string::npos);
  CHECK(text.find("Stragglers: bert-1\n") != std::string::npos);
  // Sections with nothing to show say so instead of disappearing.
  CHECK(text.find("Throughput curve: no data yet (the job starts at min_replicas)\n") !=
        std::string::npos);
  CHECK(text.find("Recommendation:\n  <none>\n") != std::string::npos);
}

TEST_CASE("tables align columns with two spaces and no trailing blanks", "[rescalectl][output]") {
  rescale::cli::Table table({"NAME", "REPLICAS", "REASON"});
  table.AddRow({"bert", "4", "capacity"});
  table.AddRow({"a-much-longer-name", "12", ""});
  CHECK(table.Render() ==
        "NAME                REPLICAS  REASON\n"
        "bert                4         capacity\n"
        "a-much-longer-name  12\n");
}

// ------------------------------------------------------ throughput curve --

namespace {

rescale::v1::CurvePoint* AddCurvePoint(rescale::v1::Job& job, uint32_t replicas, double predicted,
                                       double uncertainty = 0) {
  rescale::v1::CurvePoint* point = job.mutable_curve()->add_points();
  point->set_replicas(replicas);
  point->set_samples_per_second(predicted);
  point->set_uncertainty(uncertainty);
  return point;
}

void MarkObserved(rescale::v1::CurvePoint* point, double observed, uint64_t sample_count) {
  point->set_observed(true);
  point->set_observed_samples_per_second(observed);
  point->set_sample_count(sample_count);
}

// The curve table of FormatThroughputCurve as one map per row, keyed by
// header; a size marker ("<- recommended") lands under MARKER.
std::vector<std::map<std::string, std::string>> CurveTableRows(const std::string& section) {
  const std::vector<std::string> lines = SplitLines(section);
  auto header = std::find_if(lines.begin(), lines.end(), [](const std::string& line) {
    return SplitWords(line).size() > 1 && SplitWords(line)[0] == "N" &&
           SplitWords(line)[1] == "PREDICTED/S";
  });
  REQUIRE(header != lines.end());
  std::vector<std::string> headers = SplitWords(*header);
  headers.push_back("MARKER");
  std::vector<std::map<std::string, std::string>> rows;
  for (auto line = std::next(header); line != lines.end(); ++line) {
    const std::vector<std::string> cells = SplitWords(*line);
    if (cells.empty() || !std::isdigit(static_cast<unsigned char>(cells[0][0]))) break;
    std::map<std::string, std::string> row;
    for (size_t c = 0; c < cells.size(); ++c) {
      std::string& cell = row[headers[std::min(c, headers.size() - 1)]];
      cell += (cell.empty() ? "" : " ") + cells[c];
    }
    rows.push_back(row);
  }
  return rows;
}

const std::map<std::string, std::string>& RowForSize(
    const std::vector<std::map<std::string, std::string>>& rows, uint32_t replicas) {
  auto row = std::find_if(rows.begin(), rows.end(),
                          [&](const auto& r) { return r.at("N") == std::to_string(replicas); });
  REQUIRE(row != rows.end());
  return *row;
}

// Terminal column where `needle` starts in `line`: "±" takes one column.
size_t DisplayColumn(const std::string& line, const std::string& needle) {
  const size_t byte = line.find(needle);
  REQUIRE(byte != std::string::npos);
  size_t column = 0;
  for (size_t i = 0; i < byte; ++i) {
    if ((static_cast<unsigned char>(line[i]) & 0xC0) != 0x80) ++column;
  }
  return column;
}

// The cells of a RenderCurvePlot plot area, top row first, each padded back
// to `width` (the renderer strips trailing blanks).
std::vector<std::string> PlotCells(const std::vector<std::string>& lines, int width, int height) {
  std::vector<std::string> cells;
  for (int i = 1; i <= height; ++i) {
    const size_t bar = lines[i].find(" |");
    REQUIRE(bar != std::string::npos);
    std::string row = lines[i].substr(bar + 2);
    REQUIRE(row.size() <= static_cast<size_t>(width));
    row.resize(static_cast<size_t>(width), ' ');
    cells.push_back(row);
  }
  return cells;
}

// 100 samples/s per replica, exactly linear, n = 1..8, measured at 2 (a
// little above the line) and 4 (a little below).
rescale::v1::Job LinearJob() {
  rescale::v1::Job job;
  job.mutable_spec()->set_job_id("default/linear");
  for (uint32_t n = 1; n <= 8; ++n) AddCurvePoint(job, n, 100.0 * n);
  MarkObserved(job.mutable_curve()->mutable_points(1), 230, 50);
  MarkObserved(job.mutable_curve()->mutable_points(3), 380, 50);
  return job;
}

}  // namespace

TEST_CASE(
    "the curve table compares observed with predicted, erring positive when the model "
    "over-predicts, and marks the recommended size",
    "[rescalectl][output]") {
  rescale::v1::Job job;
  job.mutable_spec()->set_job_id("default/bert");
  job.mutable_spec()->set_min_replicas(1);
  job.mutable_spec()->set_max_replicas(4);
  job.mutable_status()->set_current_replicas(2);
  job.mutable_curve()->set_model("step(n) = 0.21 + 0.03*(n-1) s");
  job.mutable_curve()->set_fit_rms_log_error(0.042);
  MarkObserved(AddCurvePoint(job, 1, 100, 1), 100, 400);
  AddCurvePoint(job, 2, 190, 5)->set_efficiency(0.95);
  MarkObserved(job.mutable_curve()->mutable_points(1), 200, 300);
  AddCurvePoint(job, 3, 270, 12)->set_efficiency(0.9);
  AddCurvePoint(job, 4, 360, 20)->set_efficiency(0.9);
  MarkObserved(job.mutable_curve()->mutable_points(3), 300, 200);
  auto* rec = job.mutable_recommendation();
  rec->set_replicas(4);
  rec->set_reason("4 replicas run at 90% efficiency, the best the cluster has room for");
  rec->set_binding_constraint(rescale::v1::CAPACITY);

  const std::string section = rescale::cli::FormatThroughputCurve(job);
  INFO(section);
  CHECK(section.rfind("Throughput curve:\n  Model: step(n) = 0.21 + 0.03*(n-1) s "
                      "(fit error 4.2% RMS)\n",
                      0) == 0);
  const auto rows = CurveTableRows(section);
  REQUIRE(rows.size() == 4);

  // Predicted 190 against 200 measured: the model under-predicts by 5%.
  const auto& two = RowForSize(rows, 2);
  CHECK(two.at("PREDICTED/S") == "190.0");
  CHECK(two.at("±") == "5.0");
  CHECK(two.at("EFFICIENCY") == "95%");
  CHECK(two.at("OBSERVED/S") == "200.0");
  CHECK(two.at("ERROR") == "-5.0%");
  CHECK(two.at("SAMPLES") == "300");
  CHECK(two.at("MARKER") == "<- current");

  // Predicted 360 against 300 measured: over-predicts by 20%.
  const auto& four = RowForSize(rows, 4);
  CHECK(four.at("OBSERVED/S") == "300.0");
  CHECK(four.at("ERROR") == "+20.0%");
  CHECK(four.at("MARKER") == "<- recommended");

  // Sizes never run have a prediction and nothing to compare it with.
  const auto& three = RowForSize(rows, 3);
  CHECK(three.at("PREDICTED/S") == "270.0");
  CHECK(three.at("OBSERVED/S") == "-");
  CHECK(three.at("ERROR") == "-");
  CHECK(three.at("SAMPLES") == "-");
  CHECK(three.count("MARKER") == 0);

  // Without a server-sent efficiency the table derives it from the rates.
  CHECK(RowForSize(rows, 1).at("EFFICIENCY") == "100%");

  // The two-byte "±" header does not shift the columns after it.
  const std::vector<std::string> lines = SplitLines(section);
  const auto header = std::find_if(lines.begin(), lines.end(), [](const std::string& line) {
    return line.find("EFFICIENCY") != std::string::npos;
  });
  REQUIRE(header != lines.end());
  CHECK(DisplayColumn(*header, "EFFICIENCY") == DisplayColumn(*std::next(header, 2), "95%"));

  // describe puts it between the pods and the recommendation, which keeps
  // its reason and binding constraint.
  const std::string described = rescale::cli::DescribeJob(job, absl::FromUnixSeconds(0));
  const size_t stragglers = described.find("Stragglers: none\n");
  const size_t curve = described.find(section);
  const size_t recommendation = described.find("Recommendation:\n");
  CHECK(stragglers < curve);
  CHECK(curve < recommendation);
  CHECK(recommendation != std::string::npos);
  CHECK(described.find("Reason:", recommendation) != std::string::npos);
  CHECK(described.find("Binding Constraint:", recommendation) != std::string::npos);
  CHECK(described.find("CAPACITY", recommendation) != std::string::npos);

  // No "Planned on" line while the model represents the points; one right
  // under the model's when the server plans on the points.
  CHECK(section.find("Planned on:") == std::string::npos);
  job.mutable_curve()->set_planned_on(
      "the prior points at n=1,2,4: the model misses n=4 by +41% (band 10% beyond the point's "
      "noise), so linear between them and the model's shape beyond");
  const std::string on_points = rescale::cli::FormatThroughputCurve(job);
  CHECK(on_points.find("(fit error 4.2% RMS)\n  Planned on: the prior points at n=1,2,4: the "
                       "model misses n=4 by +41%") != std::string::npos);
}

TEST_CASE("a 128-point curve table is thinned to a spread of sizes but keeps every observed one",
          "[rescalectl][output]") {
  rescale::v1::Job job;
  job.mutable_spec()->set_job_id("default/big");
  job.mutable_spec()->set_min_replicas(3);
  job.mutable_spec()->set_max_replicas(128);
  job.mutable_status()->set_current_replicas(24);
  job.mutable_recommendation()->set_replicas(40);
  const std::set<uint32_t> observed = {3, 7, 24, 50, 97, 101};
  for (uint32_t n = 1; n <= 128; ++n) {
    rescale::v1::CurvePoint* point = AddCurvePoint(job, n, 100.0 * n / (1 + 0.01 * (n - 1)), 3);
    if (observed.count(n) > 0) MarkObserved(point, 100.0 * n / (1 + 0.012 * (n - 1)), 80);
  }

  const std::string section = rescale::cli::FormatThroughputCurve(job);
  INFO(section);
  const auto rows = CurveTableRows(section);
  std::set<uint32_t> shown;
  for (const auto& row : rows) shown.insert(static_cast<uint32_t>(std::stoul(row.at("N"))));
  CHECK(shown.size() == rows.size());
  CHECK(rows.size() <= 24);

  for (uint32_t n : observed) {
    INFO("observed size " << n);
    CHECK(shown.count(n) == 1);
    // The model predicts more than these measured, so each error is positive.
    CHECK(RowForSize(rows, n).at("ERROR").front() == '+');
  }
  for (uint32_t n : {1u, 2u, 4u, 8u, 16u, 32u, 64u, 128u}) {
    INFO("power of two " << n);
    CHECK(shown.count(n) == 1);
  }
  CHECK(RowForSize(rows, 40).at("MARKER") == "<- recommended");
  CHECK(RowForSize(rows, 24).at("MARKER") == "<- current");
  CHECK(shown.count(3) == 1);  // min replicas
  // Rows stay in order of n, and the table says what it left out.
  CHECK(std::is_sorted(rows.begin(), rows.end(), [](const auto& a, const auto& b) {
    return std::stoul(a.at("N")) < std::stoul(b.at("N"));
  }));
  CHECK(section.find("(" + std::to_string(rows.size()) + " of 128 sizes") != std::string::npos);

  // A short curve lists every size without the note.
  rescale::v1::Job small = LinearJob();
  const std::string small_section = rescale::cli::FormatThroughputCurve(small);
  CHECK(CurveTableRows(small_section).size() == 8);
  CHECK(small_section.find(" sizes:") == std::string::npos);
}

TEST_CASE("the curve plot is width x height cells between a labelled y axis and x axis",
          "[rescalectl][output]") {
  const rescale::v1::Job job = LinearJob();
  for (auto [width, height] : {std::pair{60, 14}, std::pair{40, 10}}) {
    INFO(width << "x" << height);
    const std::string plot = rescale::cli::RenderCurvePlot(job.curve(), width, height);
    INFO(plot);
    const std::vector<std::string> lines = SplitLines(plot);
    // Title, the plot rows, the axis, the tick labels, the legend.
    REQUIRE(lines.size() == static_cast<size_t>(height) + 4);
    CHECK(lines[0] == "samples/s");
    // The y axis runs to the largest rate on the curve, 800 at n = 8.
    CHECK(lines[1].rfind("800.0 |", 0) == 0);
    const size_t bar = lines[1].find(" |");
    for (int i = 1; i <= height; ++i) CHECK(lines[i].find(" |") == bar);
    CHECK(lines[height + 1] ==
          std::string(bar - 1, ' ') + "0 +" + lines[height + 1].substr(bar + 2));
    const std::string axis = lines[height + 1].substr(bar + 2);
    CHECK(axis.size() == static_cast<size_t>(width));
    CHECK(axis.find_first_not_of("-+") == std::string::npos);
    CHECK(axis.back() == '+');  // the last point is always a tick
    const std::vector<std::string> ticks = SplitWords(lines[height + 2]);
    REQUIRE(ticks.size() >= 3);
    CHECK(ticks.front() == "1");
    CHECK(ticks[ticks.size() - 2] == "8");
    CHECK(ticks.back() == "n");

    for (const std::string& line : lines) {
      INFO(line);
      CHECK_FALSE(line.empty());
      CHECK(line.back() != ' ');
      CHECK(std::all_of(line.begin(), line.end(), [](char c) {
        return static_cast<unsigned char>(c) >= 0x20 && static_cast<unsigned char>(c) < 0x7F;
      }));
    }
  }
  // The same curve always draws the same picture.
  CHECK(rescale::cli::RenderCurvePlot(job.curve(), 60, 14) ==
        rescale::cli::RenderCurvePlot(job.curve(), 60, 14));
}

TEST_CASE("the curve plot puts o at each observed rate and * rising with n on a linear curve",
          "[rescalectl][output]") {
  constexpr int kWidth = 60;
  constexpr int kHeight = 14;
  const rescale::v1::Job job = LinearJob();
  const std::string plot = rescale::cli::RenderCurvePlot(job.curve(), kWidth, kHeight);
  INFO(plot);
  const std::vector<std::string> cells = PlotCells(SplitLines(plot), kWidth, kHeight);

  // Positions by the mapping output.h documents: x from n = 1 to 8, y from
  // 0 to 800 samples/s, rows counted from the bottom.
  auto cell = [&](double n, double rate) {
    const int column = static_cast<int>(std::lround((n - 1) * (kWidth - 1) / 7.0));
    const int row = std::min(kHeight - 1, static_cast<int>(std::floor(rate / 800 * kHeight)));
    return cells[kHeight - 1 - row][column];
  };
  CHECK(cell(2, 230) == 'o');
  CHECK(cell(4, 380) == 'o');
  CHECK(cell(2, 200) == '*');  // the prediction, a row below the measurement
  CHECK(cell(4, 400) == '*');  // the prediction, a row above
  CHECK(cell(8, 800) == '*');  // the top right corner
  CHECK(cell(1, 100) == '*');
  size_t observed_marks = 0;
  for (const std::string& row : cells) observed_marks += std::count(row.begin(), row.end(), 'o');
  CHECK(observed_marks == 2);

  // Every column has one '*' (interpolated between points), never lower
  // than the column before it.
  int previous_row = -1;
  int stars = 0;
  for (int column = 0; column < kWidth; ++column) {
    for (int top = 0; top < kHeight; ++top) {
      if (cells[top][column] != '*') continue;
      const int row = kHeight - 1 - top;
      INFO("column " << column);
      CHECK(row >= previous_row);
      previous_row = row;
      ++stars;
    }
  }
  CHECK(stars == kWidth);
  CHECK(previous_row == kHeight - 1);
}

TEST_CASE(
    "the curve plot draws the uncertainty band around the prediction and clips the "
    "linear reference at the top",
    "[rescalectl][output]") {
  // Scaling flattens out: 100, 150, 180, 200 samples/s, ±40 at n = 4.
  rescale::v1::ThroughputCurve curve;
  const double rates[] = {100, 150, 180, 200};
  for (uint32_t n = 1; n <= 4; ++n) {
    rescale::v1::CurvePoint* point = curve.add_points();
    point->set_replicas(n);
    point->set_samples_per_second(rates[n - 1]);
    point->set_uncertainty(n == 4 ? 40 : 0);
  }
  const std::string plot = rescale::cli::RenderCurvePlot(curve, 30, 12);
  INFO(plot);
  const std::vector<std::string> cells = PlotCells(SplitLines(plot), 30, 12);
  // y max = 200 + 40; the last column spans rows 160..240 of it.
  std::string last_column;
  for (const std::string& row : cells) last_column += row.back();
  CHECK(last_column.find('*') != std::string::npos);
  CHECK(last_column.find(':') < last_column.find('*'));
  CHECK(last_column.rfind(':') > last_column.find('*'));
  // Linear scaling (100 per replica) passes 240 before n = 4: '/' marks
  // it low on the left and none reach past the top row.
  CHECK(plot.find('/') != std::string::npos);
  CHECK(cells.back().substr(0, 1) != "/");  // n = 1 is the prediction itself
}

TEST_CASE("the curve plot of one point or of zero rates still has its full frame",
          "[rescalectl][output]") {
  rescale::v1::ThroughputCurve one_point;
  one_point.add_points()->set_replicas(1);
  one_point.mutable_points(0)->set_samples_per_second(50);
  rescale::v1::ThroughputCurve zeros;
  for (uint32_t n = 1; n <= 3; ++n) zeros.add_points()->set_replicas(n);
  for (const auto* curve : {&one_point, &zeros}) {
    const std::vector<std::string> lines = SplitLines(rescale::cli::RenderCurvePlot(*curve, 20, 5));
    CHECK(lines.size() == 9);
  }
  CHECK(rescale::cli::RenderCurvePlot(rescale::v1::ThroughputCurve(), 60, 14).empty());
}

TEST_CASE("describe lists stragglers as none when no pod is one", "[rescalectl][output]") {
  rescale::v1::Job job;
  job.mutable_spec()->set_job_id("default/bert");
  for (const char* name : {"bert-0", "bert-1"}) job.add_pods()->set_pod(name);
  CHECK(rescale::cli::DescribeJob(job, absl::FromUnixSeconds(0)).find("Stragglers: none\n") !=
        std::string::npos);
  job.mutable_pods(0)->set_straggler(true);
  job.mutable_pods(1)->set_straggler(true);
  CHECK(rescale::cli::DescribeJob(job, absl::FromUnixSeconds(0))
            .find("Stragglers: bert-0, bert-1\n") != std::string::npos);
}

// ------------------------------------------------- state, queue, cluster --

namespace {

// A job with a recommendation of `recommended` replicas (unless
// `with_recommendation` is false) and `current` applied ones.
rescale::v1::Job JobWith(bool with_recommendation, uint32_t recommended, uint32_t current,
                         bool status_suspended) {
  rescale::v1::Job job;
  job.mutable_spec()->set_job_id("default/bert");
  job.mutable_status()->set_current_replicas(current);
  job.mutable_status()->set_suspended(status_suspended);
  if (with_recommendation) {
    job.mutable_recommendation()->set_replicas(recommended);
    job.mutable_recommendation()->set_suspend(recommended == 0);
  }
  return job;
}

// The value of a "Key:  value" line of the describe view, or nullopt when
// no line has that key.
std::optional<std::string> DescribedValue(const std::string& text, const std::string& key) {
  for (const std::string& line : SplitLines(text)) {
    const size_t start = line.find_first_not_of(' ');
    if (start == std::string::npos || line.compare(start, key.size() + 1, key + ":") != 0) {
      continue;
    }
    const size_t value = line.find_first_not_of(' ', start + key.size() + 1);
    return value == std::string::npos ? "" : line.substr(value);
  }
  return std::nullopt;
}

}  // namespace

TEST_CASE("a job's state follows from its recommended and applied replicas",
          "[rescalectl][output]") {
  using rescale::cli::JobState;
  CHECK(JobState(JobWith(true, 4, 4, false)) == "Running");
  CHECK(JobState(JobWith(true, 4, 2, false)) == "Running");  // resizing, but running
  CHECK(JobState(JobWith(true, 4, 0, false)) == "Starting");
  CHECK(JobState(JobWith(true, 0, 0, true)) == "Suspended");
  CHECK(JobState(JobWith(true, 0, 0, false)) == "Waiting");
  // Recommended 0 while the cluster still runs it: queued, not yet stopped.
  CHECK(JobState(JobWith(true, 0, 4, false)) == "Waiting");
  CHECK(JobState(JobWith(false, 0, 0, false)) == "Pending");

  // A suspended status runs nothing whatever replica count it last reported,
  // so resuming it is starting it.
  CHECK(JobState(JobWith(true, 4, 4, true)) == "Starting");
  // A recommendation that suspends recommends nothing, whatever its count.
  rescale::v1::Job suspending = JobWith(true, 4, 0, true);
  suspending.mutable_recommendation()->set_suspend(true);
  CHECK(JobState(suspending) == "Suspended");
}

TEST_CASE("the jobs table appends GPUS, STATE and QUEUE after the eleven contract columns",
          "[rescalectl][output]") {
  google::protobuf::RepeatedPtrField<rescale::v1::Job> jobs;
  rescale::v1::Job* running = jobs.Add();
  *running = JobWith(true, 3, 3, false);
  running->mutable_spec()->set_job_id("default/running");
  running->mutable_recommendation()->set_gpus(6);
  rescale::v1::Job* queued = jobs.Add();
  *queued = JobWith(true, 0, 0, false);
  queued->mutable_spec()->set_job_id("default/queued");
  queued->mutable_recommendation()->set_queue_position(2);
  rescale::v1::Job* fresh = jobs.Add();
  *fresh = JobWith(false, 0, 0, false);
  fresh->mutable_spec()->set_job_id("research/fresh");

  const std::string text = rescale::cli::FormatJobsTable(jobs, absl::FromUnixSeconds(0));
  INFO(text);
  CHECK(SplitWords(SplitLines(text)[0]) ==
        std::vector<std::string>{"NAMESPACE", "NAME", "MIN", "MAX", "GPUS/REPLICA", "PRIORITY",
                                 "POLICY", "CURRENT", "RECOMMENDED", "ACTION", "AGE", "GPUS",
                                 "STATE", "QUEUE", "PROGRESS", "ETA", "BATCH", "EFFICIENCY"});
  const auto rows = ParseTable(text);
  REQUIRE(rows.size() == 3);
  CHECK(rows[0].at("GPUS") == "6");
  CHECK(rows[0].at("STATE") == "Running");
  CHECK(rows[0].at("QUEUE") == "-");
  CHECK(rows[1].at("GPUS") == "0");
  CHECK(rows[1].at("STATE") == "Waiting");
  CHECK(rows[1].at("QUEUE") == "2");
  // No recommendation yet: nothing allocated, nothing queued.
  CHECK(rows[2].at("GPUS") == "<none>");
  CHECK(rows[2].at("STATE") == "Pending");
  CHECK(rows[2].at("QUEUE") == "-");
  CHECK(rows[2].at("RECOMMENDED") == "<none>");
}

TEST_CASE("the jobs table shows progress against total_samples and the remaining time",
          "[rescalectl][output]") {
  google::protobuf::RepeatedPtrField<rescale::v1::Job> jobs;
  rescale::v1::Job* halfway = jobs.Add();
  *halfway = JobWith(true, 8, 8, false);
  halfway->mutable_spec()->set_job_id("default/halfway");
  halfway->mutable_spec()->set_total_samples(3'000'000);
  halfway->mutable_status()->set_samples_processed(1'269'999);  // 42.3%: rounded down
  halfway->mutable_status()->set_estimated_remaining_seconds(4 * 3600 + 13 * 60 + 20);
  rescale::v1::Job* done = jobs.Add();
  *done = JobWith(true, 2, 2, false);
  done->mutable_spec()->set_job_id("default/done");
  done->mutable_spec()->set_total_samples(1000);
  done->mutable_status()->set_samples_processed(1280);  // past the total: 100%, not 128%
  done->mutable_status()->set_estimated_remaining_seconds(0);
  rescale::v1::Job* unknown = jobs.Add();
  *unknown = JobWith(true, 2, 2, false);
  unknown->mutable_spec()->set_job_id("default/unknown");
  unknown->mutable_status()->set_samples_processed(5000);  // no total: no percentage

  const std::string text = rescale::cli::FormatJobsTable(jobs, absl::FromUnixSeconds(0));
  INFO(text);
  const auto rows = ParseTable(text);
  REQUIRE(rows.size() == 3);
  CHECK(rows[0].at("PROGRESS") == "42%");
  CHECK(rows[0].at("ETA") == "4h13m");  // the AGE column's format (kubectl's thresholds)
  CHECK(rows[1].at("PROGRESS") == "100%");
  CHECK(rows[1].at("ETA") == "0s");
  CHECK(rows[2].at("PROGRESS") == "-");
  CHECK(rows[2].at("ETA") == "-");
}

TEST_CASE("the jobs table shows the recommended batch and its efficiency after ETA",
          "[rescalectl][output]") {
  google::protobuf::RepeatedPtrField<rescale::v1::Job> jobs;
  rescale::v1::Job* single = jobs.Add();
  *single = JobWith(true, 4, 4, false);
  single->mutable_spec()->set_job_id("default/single");
  single->mutable_recommendation()->set_local_batch_size(64);
  single->mutable_recommendation()->set_accumulation_steps(0);
  single->mutable_recommendation()->set_statistical_efficiency(0.8125);
  single->mutable_status()->set_statistical_efficiency(0.5);  // the running batch's: not shown
  rescale::v1::Job* accumulating = jobs.Add();
  *accumulating = JobWith(true, 2, 2, false);
  accumulating->mutable_spec()->set_job_id("default/accumulating");
  accumulating->mutable_recommendation()->set_local_batch_size(64);
  accumulating->mutable_recommendation()->set_accumulation_steps(2);
  accumulating->mutable_recommendation()->set_statistical_efficiency(1.046);
  rescale::v1::Job* running_only = jobs.Add();
  *running_only = JobWith(true, 2, 2, false);
  running_only->mutable_spec()->set_job_id("default/running-only");
  running_only->mutable_status()->set_statistical_efficiency(0.9);
  rescale::v1::Job* plain = jobs.Add();
  *plain = JobWith(true, 2, 2, false);
  plain->mutable_spec()->set_job_id("default/plain");
  rescale::v1::Job* fresh = jobs.Add();
  *fresh = JobWith(false, 0, 0, false);
  fresh->mutable_spec()->set_job_id("default/fresh");

  const std::string text = rescale::cli::FormatJobsTable(jobs, absl::FromUnixSeconds(0));
  INFO(text);
  const auto rows = ParseTable(text);
  REQUIRE(rows.size() == 5);
  CHECK(rows[0].at("BATCH") == "64");
  CHECK(rows[0].at("EFFICIENCY") == "81%");  // the recommended batch's
  // Two extra micro-steps: three of 64 per optimizer step.
  CHECK(rows[1].at("BATCH") == "64x3");
  CHECK(rows[1].at("EFFICIENCY") == "105%");  // below the initial batch: above 1
  // Planned on throughput, but reporting gradient statistics.
  CHECK(rows[2].at("BATCH") == "-");
  CHECK(rows[2].at("EFFICIENCY") == "90%");
  CHECK(rows[3].at("BATCH") == "-");
  CHECK(rows[3].at("EFFICIENCY") == "-");
  CHECK(rows[4].at("BATCH") == "-");
  CHECK(rows[4].at("EFFICIENCY") == "-");
}

TEST_CASE("describe shows a goodput-planned recommendation's batch, goodput and efficiency",
          "[rescalectl][output]") {
  rescale::v1::Job job = JobWith(true, 4, 4, false);
  job.mutable_status()->set_statistical_efficiency(0.5);
  std::string text = rescale::cli::DescribeJob(job, absl::FromUnixSeconds(0));
  std::string recommendation = text.substr(text.find("Recommendation:\n"));
  // Planned on throughput: none of the rows.
  for (const char* key :
       {"Local Batch Size", "Accumulation Steps", "Predicted Goodput", "Statistical Efficiency"}) {
    CHECK_FALSE(DescribedValue(recommendation, key).has_value());
  }

  auto* rec = job.mutable_recommendation();
  rec->set_local_batch_size(64);
  rec->set_accumulation_steps(2);
  rec->set_predicted_goodput(431.46);
  rec->set_statistical_efficiency(0.8125);
  text = rescale::cli::DescribeJob(job, absl::FromUnixSeconds(0));
  INFO(text);
  recommendation = text.substr(text.find("Recommendation:\n"));
  CHECK(DescribedValue(recommendation, "Local Batch Size") == "64 per worker");
  CHECK(DescribedValue(recommendation, "Accumulation Steps") ==
        "2 (3 micro-steps per optimizer step; total batch 768)");
  CHECK(DescribedValue(recommendation, "Predicted Goodput") ==
        "431.5 (samples/s at the initial batch)");
  CHECK(DescribedValue(recommendation, "Statistical Efficiency") == "0.81");
  // The Status section keeps the efficiency of the batch the job runs now.
  CHECK(DescribedValue(text, "Statistical Efficiency") == "0.50");

  rec->set_accumulation_steps(0);
  recommendation = rescale::cli::DescribeJob(job, absl::FromUnixSeconds(0));
  recommendation = recommendation.substr(recommendation.find("Recommendation:\n"));
  CHECK(DescribedValue(recommendation, "Accumulation Steps") ==
        "0 (1 micro-step per optimizer step; total batch 256)");
}

TEST_CASE("-o json and -o yaml carry the recommendation's batch fields only when set",
          "[rescalectl][output]") {
  rescale::v1::Job job = JobWith(true, 4, 4, false);
  nlohmann::json json = nlohmann::json::parse(rescale::cli::MessageToJson(job, true));
  for (const char* key :
       {"localBatchSize", "accumulationSteps", "predictedGoodput", "statisticalEfficiency"}) {
    CHECK_FALSE(json.at("recommendation").contains(key));
  }
  auto* rec = job.mutable_recommendation();
  rec->set_local_batch_size(64);
  rec->set_accumulation_steps(0);
  rec->set_predicted_goodput(431.5);
  rec->set_statistical_efficiency(0.8125);
  json = nlohmann::json::parse(rescale::cli::MessageToJson(job, true));
  const nlohmann::json& fields = json.at("recommendation");
  CHECK(fields.at("localBatchSize") == 64);
  CHECK(fields.at("accumulationSteps") == 0);  // set: present even at 0
  CHECK(fields.at("predictedGoodput") == 431.5);
  CHECK(fields.at("statisticalEfficiency") == 0.8125);
  CHECK(rescale::cli::YamlToJson(YAML::Load(rescale::cli::MessageToYaml(job))) == json);
}

TEST_CASE("describe shows progress in compact counts and the remaining time at the running size",
          "[rescalectl][output]") {
  using rescale::cli::CompactCount;
  CHECK(CompactCount(0) == "0");
  CHECK(CompactCount(999) == "999");
  CHECK(CompactCount(1000) == "1.0K");
  CHECK(CompactCount(1'234'567) == "1.2M");
  CHECK(CompactCount(999'999) == "1.0M");  // not "1000.0K"
  CHECK(CompactCount(uint64_t{5} << 32) == "21.5G");

  rescale::v1::Job job = JobWith(true, 8, 8, false);
  job.mutable_spec()->set_job_id("default/bert");
  job.mutable_spec()->set_total_samples(3'000'000);
  job.mutable_status()->set_samples_processed(1'200'000);
  job.mutable_status()->set_estimated_remaining_seconds(80 * 60);
  std::string text = rescale::cli::DescribeJob(job, absl::FromUnixSeconds(0));
  INFO(text);
  CHECK(DescribedValue(text, "Total Samples") == "3000000");
  CHECK(DescribedValue(text, "Progress") == "1.2M of 3.0M samples (40%)");
  CHECK(DescribedValue(text, "Estimated Remaining") == "80m at 8 replicas");

  job.mutable_spec()->clear_total_samples();
  job.mutable_status()->clear_estimated_remaining_seconds();
  text = rescale::cli::DescribeJob(job, absl::FromUnixSeconds(0));
  CHECK(DescribedValue(text, "Total Samples") == "<unknown>");
  CHECK(DescribedValue(text, "Progress") == "1.2M samples (total unknown)");
  CHECK(DescribedValue(text, "Estimated Remaining") == "<none>");
  CHECK(DescribedValue(text, "Gradient Noise Scale") == "<none>");

  // A goodput-planned job: progress in samples at M0, against which the
  // total counts, then the raw count; the PROGRESS column follows it.
  job.mutable_spec()->set_total_samples(3'000'000);
  job.mutable_status()->set_progress_samples(900'000);
  text = rescale::cli::DescribeJob(job, absl::FromUnixSeconds(0));
  CHECK(DescribedValue(text, "Progress") == "900.0K of 3.0M samples at M0 (30%); 1.2M processed");
  CHECK(rescale::cli::ProgressPercent(job) == "30%");
}

TEST_CASE("describe shows the gradient noise scale of a job that reports gradient statistics",
          "[rescalectl][output]") {
  rescale::v1::Job job = JobWith(true, 8, 8, false);
  job.mutable_spec()->set_job_id("default/cifar10");
  CHECK(DescribedValue(rescale::cli::DescribeJob(job, absl::FromUnixSeconds(0)), "Batch Scaling") ==
        "fixed");
  job.mutable_status()->set_gradient_noise_scale(4321.6);
  job.mutable_status()->set_statistical_efficiency(0.8571);
  rescale::v1::BatchScaling* scaling = job.mutable_spec()->mutable_batch_scaling();
  scaling->set_initial_batch_size(128);
  scaling->set_max_batch_size(4096);
  scaling->set_min_local_batch_size(16);
  scaling->set_gradient_accumulation(true);
  const std::string text = rescale::cli::DescribeJob(job, absl::FromUnixSeconds(0));
  INFO(text);
  CHECK(DescribedValue(text, "Gradient Noise Scale") == "4.3K samples");
  CHECK(DescribedValue(text, "Statistical Efficiency") == "0.86");
  // max_local_batch_size 0 stands for max_batch_size.
  CHECK(DescribedValue(text, "Batch Scaling") ==
        "initial 128, max 4096, local 16-4096, accumulation");
}

// 48 of 64 GPUs allocated, two jobs waiting.
static rescale::v1::Cluster ThreeQuartersAllocated() {
  rescale::v1::Cluster cluster;
  cluster.set_capacity_known(true);
  cluster.set_total_gpus(64);
  cluster.set_allocated_gpus(48);
  cluster.set_free_gpus(16);
  cluster.set_utilization(0.75);
  cluster.set_waiting_jobs(2);
  return cluster;
}

TEST_CASE("the cluster summary line gives allocated of total GPUs, jobs waiting and the plan gap",
          "[rescalectl][output]") {
  rescale::v1::Cluster cluster = ThreeQuartersAllocated();
  CHECK(rescale::cli::FormatClusterSummary(cluster) ==
        "Cluster: 48/64 GPUs allocated (75%), 2 jobs waiting; plan gap 0.00%");

  SECTION("one waiting job is singular and the gap is a percentage") {
    cluster.set_waiting_jobs(1);
    cluster.set_optimality_gap(0.0025);
    CHECK(rescale::cli::FormatClusterSummary(cluster) ==
          "Cluster: 48/64 GPUs allocated (75%), 1 job waiting; plan gap 0.25%");
  }
  SECTION("a server that does not send utilization gets it from the counts") {
    cluster.clear_utilization();
    CHECK(rescale::cli::FormatClusterSummary(cluster).find("(75%)") != std::string::npos);
  }
  SECTION("before capacity is set there is no total to divide by") {
    cluster.set_capacity_known(false);
    cluster.set_total_gpus(0);
    cluster.set_free_gpus(0);
    cluster.set_utilization(0);
    CHECK(rescale::cli::FormatClusterSummary(cluster) ==
          "Cluster: 48 GPUs allocated (capacity unknown), 2 jobs waiting; plan gap 0.00%");
  }
}

TEST_CASE("capacity get adds utilisation and the plan gap to the totals", "[rescalectl][output]") {
  rescale::v1::Cluster cluster = ThreeQuartersAllocated();
  cluster.set_optimality_gap(0.0125);
  std::vector<std::string> lines = SplitLines(rescale::cli::FormatCluster(cluster));
  REQUIRE(lines.size() >= 2);
  CHECK(SplitWords(lines[0]) == kCapacityTotalsHeader);
  CHECK(SplitWords(lines[1]) ==
        std::vector<std::string>{"64", "48", "16", "2", "75%", "1.25%", "64"});

  // Told the nodes' allocatable GPUs, TOTAL shows them and USABLE what the
  // planner hands out of them (FREE and UTILIZATION stay of the usable).
  cluster.set_allocatable_gpus(80);
  lines = SplitLines(rescale::cli::FormatCluster(cluster));
  REQUIRE(lines.size() >= 2);
  CHECK(SplitWords(lines[1]) ==
        std::vector<std::string>{"80", "48", "16", "2", "75%", "1.25%", "64"});
  cluster.set_allocatable_gpus(0);

  cluster.set_capacity_known(false);
  cluster.set_total_gpus(0);
  cluster.set_utilization(0);
  lines = SplitLines(rescale::cli::FormatCluster(cluster));
  REQUIRE(lines.size() >= 2);
  CHECK(SplitWords(lines[1]) ==
        std::vector<std::string>{"unbounded", "48", "unbounded", "2", "-", "1.25%", "unbounded"});
}

TEST_CASE("status shows where state is kept, its last checkpoint, capacity and the last plan",
          "[rescalectl][output]") {
  rescale::v1::Cluster cluster = ThreeQuartersAllocated();
  const absl::Time now = absl::FromUnixSeconds(1'700'000'100);
  cluster.mutable_planned_at()->set_seconds(1'700'000'095);
  cluster.set_state_backend("sqlite:/var/lib/rescale/state.db");
  cluster.mutable_last_checkpoint_at()->set_seconds(1'700'000'070);
  std::vector<std::string> lines = SplitLines(rescale::cli::FormatStatus(cluster, now));
  REQUIRE(lines.size() == 3);
  CHECK(lines[0] ==
        "State:     sqlite:/var/lib/rescale/state.db, last checkpoint 2023-11-14T22:14:30Z (30s "
        "ago)");
  CHECK(lines[1] == "Capacity:  64 GPUs, 48 allocated (75%), 2 jobs waiting");
  CHECK(lines[2] == "Last plan: 2023-11-14T22:14:55Z (5s ago), gap 0.00%");
  cluster.set_allocatable_gpus(80);
  lines = SplitLines(rescale::cli::FormatStatus(cluster, now));
  REQUIRE(lines.size() == 3);
  CHECK(lines[1] ==
        "Capacity:  64 GPUs usable of 80 on the nodes, 48 allocated (75%), 2 jobs waiting");
  cluster.set_allocatable_gpus(0);

  cluster.set_state_backend("memory");
  cluster.clear_last_checkpoint_at();
  lines = SplitLines(rescale::cli::FormatStatus(cluster, now));
  REQUIRE(!lines.empty());
  CHECK(lines[0] == "State:     memory (nothing is kept across restarts)");

  // High availability: the leader, and what this replica is.
  cluster.set_state_backend("etcd://10.0.0.5:2379/rescale");
  cluster.set_leader("10.0.0.7:50051");
  cluster.set_leadership("follower of 10.0.0.7:50051");
  lines = SplitLines(rescale::cli::FormatStatus(cluster, now));
  REQUIRE(lines.size() == 4);
  CHECK(lines[1] == "Leader:    10.0.0.7:50051 (this server: follower of 10.0.0.7:50051)");
  cluster.set_leader("");
  cluster.set_leadership("not leading: no etcd lease (etcd: connection refused)");
  lines = SplitLines(rescale::cli::FormatStatus(cluster, now));
  REQUIRE(lines.size() == 4);
  CHECK(lines[1] ==
        "Leader:    <none elected> (this server: not leading: no etcd lease (etcd: connection "
        "refused))");
}

TEST_CASE("describe shows the value of one replica more and one fewer when the planner set them",
          "[rescalectl][output]") {
  rescale::v1::Job job = JobWith(true, 4, 4, false);
  auto* rec = job.mutable_recommendation();
  rec->set_gpus(8);

  SECTION("both neighbours allowed: both values, four decimals, with what they mean") {
    rec->set_value_one_more(-0.0123456);
    rec->set_value_one_fewer(-0.25);
    const std::string text = rescale::cli::DescribeJob(job, absl::FromUnixSeconds(0));
    INFO(text);
    CHECK(DescribedValue(text, "Value of one more replica") ==
          "-0.0123 (change in planner utility)");
    CHECK(DescribedValue(text, "Value of one fewer replica") ==
          "-0.2500 (change in planner utility)");
    // They belong to the Recommendation section.
    CHECK(text.find("Value of one more replica:") > text.find("Recommendation:\n"));
  }
  SECTION("a job at its max has no size above: only the value of one fewer") {
    rec->set_value_one_fewer(-0.5);
    const std::string text = rescale::cli::DescribeJob(job, absl::FromUnixSeconds(0));
    INFO(text);
    CHECK_FALSE(DescribedValue(text, "Value of one more replica").has_value());
    CHECK(DescribedValue(text, "Value of one fewer replica") ==
          "-0.5000 (change in planner utility)");
  }
  SECTION("a zero value is set, and shown") {
    rec->set_value_one_more(0);
    const std::string text = rescale::cli::DescribeJob(job, absl::FromUnixSeconds(0));
    CHECK(DescribedValue(text, "Value of one more replica") ==
          "0.0000 (change in planner utility)");
  }
  SECTION("a policy other than the planner sets neither") {
    const std::string text = rescale::cli::DescribeJob(job, absl::FromUnixSeconds(0));
    CHECK_FALSE(DescribedValue(text, "Value of one more replica").has_value());
    CHECK_FALSE(DescribedValue(text, "Value of one fewer replica").has_value());
  }
}

TEST_CASE("describe gives a waiting job's queue position and a running job a dash",
          "[rescalectl][output]") {
  rescale::v1::Job waiting = JobWith(true, 0, 0, false);
  waiting.mutable_recommendation()->set_queue_position(3);
  CHECK(DescribedValue(rescale::cli::DescribeJob(waiting, absl::FromUnixSeconds(0)),
                       "Queue Position") == "3");

  rescale::v1::Job running = JobWith(true, 2, 2, false);
  CHECK(DescribedValue(rescale::cli::DescribeJob(running, absl::FromUnixSeconds(0)),
                       "Queue Position") == "- (running)");

  // Suspended by a policy outside the planner's queue: not running either.
  rescale::v1::Job suspended = JobWith(true, 0, 0, true);
  CHECK(DescribedValue(rescale::cli::DescribeJob(suspended, absl::FromUnixSeconds(0)),
                       "Queue Position") == "-");
}

// ------------------------------------------------------------ GPU types --

namespace {

rescale::v1::CurvePoint* AddTypedPoint(rescale::v1::ThroughputCurve* curve, uint32_t replicas,
                                       double predicted, double uncertainty) {
  rescale::v1::CurvePoint* point = curve->add_points();
  point->set_replicas(replicas);
  point->set_samples_per_second(predicted);
  point->set_uncertainty(uncertainty);
  return point;
}

// The lines of `text` from the one that starts with `heading` to the next
// line indented no deeper than it (the next heading or section).
std::string SectionUnder(const std::string& text, const std::string& heading) {
  const std::vector<std::string> lines = SplitLines(text);
  auto start = std::find_if(lines.begin(), lines.end(),
                            [&](const std::string& line) { return line.rfind(heading, 0) == 0; });
  REQUIRE(start != lines.end());
  const size_t indent = heading.find_first_not_of(' ');
  std::string section = *start + "\n";
  for (auto line = std::next(start); line != lines.end(); ++line) {
    if (line->find_first_not_of(' ') <= indent) break;
    section += *line + "\n";
  }
  return section;
}

}  // namespace

TEST_CASE("describe shows the job's curve on each GPU type with its source and the types it uses",
          "[rescalectl][output]") {
  rescale::v1::Job job = JobWith(true, 4, 2, false);
  job.mutable_spec()->set_min_replicas(1);
  job.mutable_spec()->set_max_replicas(4);
  job.mutable_spec()->add_gpu_types("Tesla-T4");
  job.mutable_spec()->add_gpu_types("NVIDIA-A100-SXM4-40GB");
  job.mutable_status()->set_gpu_type("Tesla-T4");
  job.mutable_recommendation()->set_gpu_type("NVIDIA-A100-SXM4-40GB");
  AddCurvePoint(job, 1, 100);
  AddCurvePoint(job, 2, 190);
  rescale::v1::ThroughputCurve* t4 = job.add_curves_by_type();
  t4->set_gpu_type("Tesla-T4");
  t4->set_source("measured");
  t4->set_model("step(n) = 0.32 + 0.01*(n-1) s");
  t4->set_fit_rms_log_error(0.031);
  MarkObserved(AddTypedPoint(t4, 1, 100, 2), 101, 40);
  MarkObserved(AddTypedPoint(t4, 2, 190, 4), 188, 30);
  AddTypedPoint(t4, 3, 270, 9);
  AddTypedPoint(t4, 4, 340, 15);
  rescale::v1::ThroughputCurve* a100 = job.add_curves_by_type();
  a100->set_gpu_type("NVIDIA-A100-SXM4-40GB");
  a100->set_source("predicted from Tesla-T4");
  for (uint32_t n = 1; n <= 4; ++n) AddTypedPoint(a100, n, 300.0 * n, 60.0 * n);
  rescale::v1::ThroughputCurve* h100 = job.add_curves_by_type();
  h100->set_gpu_type("NVIDIA-H100-80GB-HBM3");
  h100->set_source("unknown");

  const std::string described = rescale::cli::DescribeJob(job, absl::FromUnixSeconds(0));
  INFO(described);
  CHECK(DescribedValue(SectionUnder(described, "Spec:"), "GPU Types") ==
        "Tesla-T4, NVIDIA-A100-SXM4-40GB");
  CHECK(DescribedValue(SectionUnder(described, "Status:"), "GPU Type") == "Tesla-T4");
  CHECK(DescribedValue(SectionUnder(described, "Recommendation:"), "GPU Type") ==
        "NVIDIA-A100-SXM4-40GB");

  // After the job's own curve, before the recommendation.
  const size_t curve = described.find("Throughput curve:\n");
  const size_t by_type = described.find("Throughput curves by GPU type:\n");
  const size_t recommendation = described.find("Recommendation:\n");
  CHECK(curve < by_type);
  CHECK(by_type < recommendation);
  CHECK(recommendation != std::string::npos);

  // Measured: its model and its table; the current size is marked on the
  // type the job runs on, the recommended one only on the recommended type.
  const std::string on_t4 = SectionUnder(described, "  Curve on Tesla-T4 (measured):");
  CHECK(on_t4.find("    Model: step(n) = 0.32 + 0.01*(n-1) s (fit error 3.1% RMS)\n") !=
        std::string::npos);
  const auto t4_rows = CurveTableRows(on_t4);
  REQUIRE(t4_rows.size() == 4);
  CHECK(RowForSize(t4_rows, 1).at("OBSERVED/S") == "101.0");
  CHECK(RowForSize(t4_rows, 2).at("±") == "4.0");
  CHECK(RowForSize(t4_rows, 2).at("SAMPLES") == "30");
  CHECK(RowForSize(t4_rows, 2).at("MARKER") == "<- current");
  CHECK(RowForSize(t4_rows, 4).count("MARKER") == 0);
  CHECK(RowForSize(t4_rows, 3).at("OBSERVED/S") == "-");

  const std::string on_a100 =
      SectionUnder(described, "  Curve on NVIDIA-A100-SXM4-40GB (predicted from Tesla-T4):");
  const auto a100_rows = CurveTableRows(on_a100);
  REQUIRE(a100_rows.size() == 4);
  CHECK(RowForSize(a100_rows, 4).at("PREDICTED/S") == "1200.0");
  CHECK(RowForSize(a100_rows, 4).at("±") == "240.0");
  CHECK(RowForSize(a100_rows, 4).at("MARKER") == "<- recommended");
  CHECK(RowForSize(a100_rows, 2).count("MARKER") == 0);
  CHECK(RowForSize(a100_rows, 1).at("SAMPLES") == "-");

  CHECK(described.find("  Curve on NVIDIA-H100-80GB-HBM3 (unknown): no data\n") !=
        std::string::npos);
  // Only the job's own curve has a plot.
  size_t plots = 0;
  for (size_t at = described.find("samples/s\n"); at != std::string::npos;
       at = described.find("samples/s\n", at + 1)) {
    ++plots;
  }
  CHECK(plots == 1);

  // A job of a one-type cluster reads as before: no type lines at all.
  rescale::v1::Job plain = JobWith(true, 4, 2, false);
  AddCurvePoint(plain, 1, 100);
  const std::string plain_described = rescale::cli::DescribeJob(plain, absl::FromUnixSeconds(0));
  CHECK(plain_described.find("GPU Type") == std::string::npos);
  CHECK(plain_described.find("by GPU type") == std::string::npos);
  CHECK(rescale::cli::FormatCurvesByType(plain).empty());
}

TEST_CASE("the jobs and recommendations tables add GPU-TYPE last, only when a job has a type",
          "[rescalectl][output]") {
  const std::vector<std::string> jobs_header = {
      "NAMESPACE", "NAME",    "MIN",         "MAX",    "GPUS/REPLICA", "PRIORITY",
      "POLICY",    "CURRENT", "RECOMMENDED", "ACTION", "AGE",          "GPUS",
      "STATE",     "QUEUE",   "PROGRESS",    "ETA",    "BATCH",        "EFFICIENCY"};
  const std::vector<std::string> recs_header = {"NAMESPACE",  "NAME",       "REPLICAS", "ACTION",
                                                "GENERATION", "CONSTRAINT", "QUEUE",    "REASON"};
  google::protobuf::RepeatedPtrField<rescale::v1::Job> jobs;
  *jobs.Add() = JobWith(true, 2, 2, false);
  jobs[0].mutable_spec()->set_job_id("default/typed");
  *jobs.Add() = JobWith(false, 0, 0, false);
  jobs[1].mutable_spec()->set_job_id("default/fresh");
  google::protobuf::RepeatedPtrField<rescale::v1::Recommendation> recs;
  recs.Add()->set_job_id("default/typed");
  recs.Add()->set_job_id("default/other");

  // One type: the tables scripts were written against, unchanged.
  CHECK(SplitWords(SplitLines(rescale::cli::FormatJobsTable(jobs, absl::FromUnixSeconds(0)))[0]) ==
        jobs_header);
  CHECK(SplitWords(SplitLines(rescale::cli::FormatRecommendationsTable(recs))[0]) == recs_header);

  jobs[0].mutable_recommendation()->set_gpu_type("NVIDIA-A100-SXM4-40GB");
  recs[0].set_gpu_type("NVIDIA-A100-SXM4-40GB");
  const std::string jobs_text = rescale::cli::FormatJobsTable(jobs, absl::FromUnixSeconds(0));
  INFO(jobs_text);
  std::vector<std::string> typed_header = jobs_header;
  typed_header.push_back("GPU-TYPE");
  CHECK(SplitWords(SplitLines(jobs_text)[0]) == typed_header);
  const auto job_rows = ParseTable(jobs_text);
  REQUIRE(job_rows.size() == 2);
  CHECK(job_rows[0].at("GPU-TYPE") == "NVIDIA-A100-SXM4-40GB");
  CHECK(job_rows[1].at("GPU-TYPE") == "-");

  const std::string recs_text = rescale::cli::FormatRecommendationsTable(recs);
  INFO(recs_text);
  typed_header = recs_header;
  typed_header.push_back("GPU-TYPE");
  CHECK(SplitWords(SplitLines(recs_text)[0]) == typed_header);
  // REASON holds spaces, so the rows are read by the header's columns.
  const std::vector<std::string> lines = SplitLines(recs_text);
  const size_t column = lines[0].find("GPU-TYPE");
  REQUIRE(lines.size() == 3);
  CHECK(lines[1].substr(column) == "NVIDIA-A100-SXM4-40GB");
  CHECK(lines[2].substr(column) == "-");
}

TEST_CASE("capacity get and status show each GPU type's GPUs and allocation",
          "[rescalectl][output]") {
  rescale::v1::Cluster cluster = ThreeQuartersAllocated();
  rescale::v1::JobAllocation* allocation = cluster.add_allocations();
  allocation->set_job_id("default/bert");
  allocation->set_replicas(4);
  allocation->set_gpus(16);
  const std::string plain = rescale::cli::FormatCluster(cluster);
  CHECK(plain.find("TYPE") == std::string::npos);
  CHECK(rescale::cli::FormatGpuTypesTable(cluster).empty());
  const std::string plain_status = rescale::cli::FormatStatus(cluster, absl::FromUnixSeconds(0));
  CHECK(plain_status.find("GPU types") == std::string::npos);

  allocation->set_gpu_type("NVIDIA-A100-SXM4-40GB");
  rescale::v1::GpuType* t4 = cluster.add_gpu_types();
  t4->set_name("Tesla-T4");
  t4->set_total_gpus(24);
  t4->set_gpus_per_node(4);
  rescale::v1::GpuType* a100 = cluster.add_gpu_types();
  a100->set_name("NVIDIA-A100-SXM4-40GB");
  a100->set_total_gpus(40);
  cluster.add_allocated_gpus_by_type(32);
  cluster.add_allocated_gpus_by_type(16);

  const std::string text = rescale::cli::FormatCluster(cluster);
  INFO(text);
  // The totals keep their place; the allocations gain GPU-TYPE last; the
  // types come last.
  CHECK(text.rfind("TOTAL  ALLOCATED", 0) == 0);
  CHECK(text.find("NAMESPACE  NAME  REPLICAS  GPUS  PRIORITY  GPU-TYPE\n"
                  "default    bert  4         16    0         NVIDIA-A100-SXM4-40GB\n") !=
        std::string::npos);
  const std::string types_table = rescale::cli::FormatGpuTypesTable(cluster);
  CHECK(types_table ==
        "TYPE                   GPUS  PER-NODE  ALLOCATED\n"
        "Tesla-T4               24    4         32\n"
        "NVIDIA-A100-SXM4-40GB  40    -         16\n");
  CHECK(text.size() > types_table.size());
  CHECK(text.substr(text.size() - types_table.size()) == types_table);

  const std::vector<std::string> status =
      SplitLines(rescale::cli::FormatStatus(cluster, absl::FromUnixSeconds(0)));
  REQUIRE(status.size() == 4);
  CHECK(status[2] ==
        "GPU types: Tesla-T4 24 (32 allocated), NVIDIA-A100-SXM4-40GB 40 (16 allocated)");
  CHECK(status[3].rfind("Last plan:", 0) == 0);
}

TEST_CASE("capacity set --types refuses a bad element naming the flag and the element",
          "[rescalectl]") {
  struct Bad {
    const char* types;
    const char* says;
  };
  for (const Bad& bad : std::vector<Bad>{
           {"Tesla-T4", "--types: \"Tesla-T4\": expected NAME=GPUS[:PER_NODE]"},
           {"Tesla-T4=", "--types: \"Tesla-T4=\": expected NAME=GPUS[:PER_NODE]"},
           {"Tesla-T4=8:", "--types: \"Tesla-T4=8:\": expected"},
           {"Tesla-T4=8:x", "--types: \"Tesla-T4=8:x\": expected"},
           {"Tesla-T4=-8", "--types: \"Tesla-T4=-8\": expected"},
           {"Tesla-T4=99999999999", "--types: \"Tesla-T4=99999999999\": expected"},
           {"A100=8,,T4=4", "--types: \"\": expected"},
           {"=8", "--types: type \"\" is not a GPU type name"},
           {"A100=8,Tesla T4=4", "--types: type \"Tesla T4\" is not a GPU type name"},
           {"-T4=4", "--types: type \"-T4\" is not a GPU type name"},
           {"T4=4,A100=8,T4=2", "--types: \"T4=2\": type \"T4\" is given twice"},
       }) {
    INFO(bad.types);
    CliResult failed = RunRaw({"capacity", "set", "--types", bad.types});
    INFO(failed.err);
    CHECK(failed.exit_code == 2);
    CHECK(failed.err.find(bad.says) != std::string::npos);
    // Named once: CLI11 puts the flag first, the message does not repeat it.
    CHECK(failed.err.find("--types: --types") == std::string::npos);
  }
  std::string seventeen;
  for (int i = 0; i < 17; ++i) seventeen += (i == 0 ? "t" : ",t") + std::to_string(i) + "=1";
  CliResult too_many = RunRaw({"capacity", "set", "--types", seventeen});
  CHECK(too_many.exit_code == 2);
  CHECK(too_many.err.find("--types: \"t16=1\": more than 16 types, the limit") !=
        std::string::npos);

  // --slots is per size for one type; with several it cannot say which.
  CliResult with_slots = RunRaw({"capacity", "set", "--types", "T4=4", "--slots", "1=4"});
  CHECK(with_slots.exit_code == 2);
  CHECK(with_slots.err.find("--slots cannot be given with --types") != std::string::npos);
  // --type-slots: one type of --types, once, in its form.
  struct BadSlots {
    std::vector<std::string> args;
    const char* says;
  };
  for (const BadSlots& bad : std::vector<BadSlots>{
           {{"--type-slots", "T4:1=4", "8"}, "--type-slots needs --types"},
           {{"--types", "T4=4", "--type-slots", "T4"},
            "--type-slots: \"T4\": expected TYPE:GPUS=REPLICAS"},
           {{"--types", "T4=4", "--type-slots", "T4:x=1"},
            "--type-slots: \"T4:x=1\": expected TYPE:GPUS=REPLICAS"},
           {{"--types", "T4=4", "--type-slots", "A100:8=1"},
            "--type-slots: \"A100:8=1\": type \"A100\" is not one of --types"},
           {{"--types", "T4=4", "--type-slots", "T4:1=4", "--type-slots", "T4:1=2"},
            "--type-slots: \"T4:1=2\": type \"T4\" is given twice"},
       }) {
    std::vector<std::string> args = {"capacity", "set"};
    args.insert(args.end(), bad.args.begin(), bad.args.end());
    CliResult failed = RunRaw(args);
    INFO(failed.err);
    CHECK(failed.exit_code == 2);
    CHECK(failed.err.find(bad.says) != std::string::npos);
  }
  // N may be left out only with --types.
  CliResult no_total = RunRaw({"capacity", "set"});
  CHECK(no_total.exit_code == 2);
  CHECK(no_total.err.find("N (the total GPUs") != std::string::npos);

  google::protobuf::RepeatedPtrField<rescale::v1::GpuType> types;
  CHECK(rescale::cli::ParseGpuTypesFlag("Tesla-T4=24:4,NVIDIA-A100-SXM4-40GB=16", &types).empty());
  REQUIRE(types.size() == 2);
  CHECK(types[0].name() == "Tesla-T4");
  CHECK(types[0].total_gpus() == 24);
  CHECK(types[0].gpus_per_node() == 4);
  CHECK(types[1].name() == "NVIDIA-A100-SXM4-40GB");
  CHECK(types[1].total_gpus() == 16);
  CHECK(types[1].gpus_per_node() == 0);  // not said
}

TEST_CASE("capacity set --types makes a cluster of GPU types that capacity get and get jobs show",
          "[rescalectl]") {
  CliServer server;
  TempFile manifest(R"(jobId: default/bert
minReplicas: 1
maxReplicas: 4
localBatchSize: 32
)");
  REQUIRE(server.Run({"register", "-f", manifest.path()}).exit_code == 0);
  // Before types: no GPU-TYPE anywhere.
  CliResult before = server.Run({"get", "jobs"});
  REQUIRE(before.exit_code == 0);
  CHECK(before.out.find("GPU-TYPE") == std::string::npos);

  CliResult set =
      server.Run({"capacity", "set", "--types", "Tesla-T4=24:4,NVIDIA-A100-SXM4-40GB=16:8"});
  INFO(set.out << set.err);
  REQUIRE(set.exit_code == 0);
  // The line of today (N is the types' sum), then the types.
  std::vector<std::string> lines = SplitLines(set.out);
  REQUIRE(lines.size() == 4);
  CHECK(lines[0] == "cluster capacity set to 40 GPUs");
  CHECK(SplitWords(lines[1]) == std::vector<std::string>{"TYPE", "GPUS", "PER-NODE", "ALLOCATED"});
  CHECK(SplitWords(lines[2])[0] == "Tesla-T4");
  CHECK(SplitWords(lines[3])[0] == "NVIDIA-A100-SXM4-40GB");

  // capacity get: the totals as before, the types table last, its
  // allocations adding up to the total's.
  CliResult get = server.Run({"capacity", "get"});
  INFO(get.out);
  REQUIRE(get.exit_code == 0);
  lines = SplitLines(get.out);
  CHECK(SplitWords(lines[0]) == kCapacityTotalsHeader);
  const auto totals = ParseTable(lines[0] + "\n" + lines[1]).at(0);
  CHECK(totals.at("TOTAL") == "40");
  REQUIRE(lines.size() >= 3);
  const std::vector<std::string> types_lines(lines.end() - 3, lines.end());
  std::string types_text;
  for (const std::string& line : types_lines) types_text += line + "\n";
  const auto types = ParseTable(types_text);
  REQUIRE(types.size() == 2);
  CHECK(types[0] == std::map<std::string, std::string>{{"TYPE", "Tesla-T4"},
                                                       {"GPUS", "24"},
                                                       {"PER-NODE", "4"},
                                                       {"ALLOCATED", types[0].at("ALLOCATED")}});
  CHECK(types[1].at("TYPE") == "NVIDIA-A100-SXM4-40GB");
  CHECK(types[1].at("GPUS") == "16");
  CHECK(types[1].at("PER-NODE") == "8");
  CHECK(std::stoi(types[0].at("ALLOCATED")) + std::stoi(types[1].at("ALLOCATED")) ==
        std::stoi(totals.at("ALLOCATED")));

  // -o json carries the API's fields as they are named there.
  CliResult json = server.Run({"capacity", "get", "-o", "json"});
  REQUIRE(json.exit_code == 0);
  const nlohmann::json cluster = nlohmann::json::parse(json.out);
  REQUIRE(cluster.at("gpuTypes").size() == 2);
  CHECK(cluster.at("gpuTypes")[0].at("name") == "Tesla-T4");
  CHECK(cluster.at("gpuTypes")[0].at("totalGpus") == 24);
  CHECK(cluster.at("gpuTypes")[0].at("gpusPerNode") == 4);
  CHECK(cluster.at("gpuTypes")[1].at("name") == "NVIDIA-A100-SXM4-40GB");
  REQUIRE(cluster.at("allocatedGpusByType").size() == 2);
  CHECK(std::to_string(cluster.at("allocatedGpusByType")[0].get<int>()) ==
        types[0].at("ALLOCATED"));
  CliResult yaml = server.Run({"capacity", "get", "-o", "yaml"});
  REQUIRE(yaml.exit_code == 0);
  CHECK(yaml.out.find("name: NVIDIA-A100-SXM4-40GB") != std::string::npos);

  // The job is planned onto one of the types, and every view says which.
  CliResult rec_json = server.Run({"get", "recommendation", "default/bert", "-o", "json"});
  REQUIRE(rec_json.exit_code == 0);
  const std::string planned_type = nlohmann::json::parse(rec_json.out).at("gpuType");
  CHECK((planned_type == "Tesla-T4" || planned_type == "NVIDIA-A100-SXM4-40GB"));
  CliResult jobs = server.Run({"get", "jobs"});
  INFO(jobs.out);
  REQUIRE(jobs.exit_code == 0);
  const auto job_rows = ParseTable(jobs.out);
  REQUIRE(job_rows.size() == 1);
  CHECK(job_rows[0].at("GPU-TYPE") == planned_type);
  CHECK(SplitWords(SplitLines(jobs.out)[0]).back() == "GPU-TYPE");
  CliResult recs = server.Run({"get", "recommendations"});
  REQUIRE(recs.exit_code == 0);
  CHECK(SplitWords(SplitLines(recs.out)[0]).back() == "GPU-TYPE");
  CHECK(SplitWords(SplitLines(recs.out)[1]).back() == planned_type);
  CliResult described = server.Run({"describe", "job", "default/bert"});
  REQUIRE(described.exit_code == 0);
  CHECK(DescribedValue(SectionUnder(described.out, "Recommendation:"), "GPU Type") == planned_type);
  // No samples yet: a curve per type, each without data.
  CHECK(described.out.find("Throughput curves by GPU type:\n"
                           "  Curve on Tesla-T4 (unknown): no data\n"
                           "  Curve on NVIDIA-A100-SXM4-40GB (unknown): no data\n") !=
        std::string::npos);

  // Samples on the T4s at two sizes: the curve there is measured, and
  // describe shows its rows as it shows the job's own curve.
  auto metrics = rescale::v1::MetricsService::NewStub(
      grpc::CreateChannel(server.address(), grpc::InsecureChannelCredentials()));
  for (uint32_t world_size : {1u, 2u}) {
    rescale::v1::SampleBatch batch;
    batch.set_job_id("default/bert");
    batch.set_pod("bert-" + std::to_string(world_size));
    batch.set_world_size(world_size);
    batch.set_gpu_type("Tesla-T4");
    for (uint64_t step = 0; step < 20; ++step) {
      rescale::v1::StepSample* sample = batch.add_samples();
      sample->set_step(world_size * 100 + step);
      sample->set_step_seconds(world_size == 1 ? 0.5 : 0.55);
    }
    grpc::ClientContext context;
    rescale::v1::IngestSummary summary;
    REQUIRE(metrics->ReportSamples(&context, batch, &summary).ok());
    REQUIRE(summary.accepted() == 20);
  }
  CliResult measured = server.Run({"describe", "job", "default/bert"});
  INFO(measured.out);
  REQUIRE(measured.exit_code == 0);
  const std::string on_t4 = SectionUnder(measured.out, "  Curve on Tesla-T4 (measured):");
  const auto t4_rows = CurveTableRows(on_t4);
  CHECK(RowForSize(t4_rows, 1).at("SAMPLES") == "20");
  CHECK(RowForSize(t4_rows, 2).at("SAMPLES") == "20");
  CHECK(RowForSize(t4_rows, 4).at("OBSERVED/S") == "-");
  // Never run on the A100s: its curve comes from the T4s', with a band.
  const std::string on_a100 =
      SectionUnder(measured.out, "  Curve on NVIDIA-A100-SXM4-40GB (predicted from Tesla-T4):");
  const auto a100_rows = CurveTableRows(on_a100);
  CHECK(a100_rows.size() == 4);
  CHECK(RowForSize(a100_rows, 2).at("OBSERVED/S") == "-");
  // The recommended size is marked on the type it is recommended on only.
  CHECK((on_t4.find("<- recommended") != std::string::npos) == (planned_type == "Tesla-T4"));
  CHECK((on_a100.find("<- recommended") != std::string::npos) ==
        (planned_type == "NVIDIA-A100-SXM4-40GB"));

  // N, when given, is the sum; the server says so otherwise.
  CHECK(server.Run({"capacity", "set", "40", "--types", "Tesla-T4=24:4,NVIDIA-A100-SXM4-40GB=16:8"})
            .exit_code == 0);
  CliResult wrong_sum =
      server.Run({"capacity", "set", "41", "--types", "Tesla-T4=24:4,NVIDIA-A100-SXM4-40GB=16:8"});
  CHECK(wrong_sum.exit_code == 1);
  CHECK(wrong_sum.err.find("total_gpus 41 must be 0 or the sum of gpu_types[*].total_gpus (40)") !=
        std::string::npos);

  // Without --types the types go, and the output is the one-type output.
  REQUIRE(server.Run({"capacity", "set", "16"}).exit_code == 0);
  CliResult plain = server.Run({"capacity", "get"});
  CHECK(plain.out.find("TYPE") == std::string::npos);
  CHECK(plain.out.find("GPU-TYPE") == std::string::npos);
  CliResult plain_jobs = server.Run({"get", "jobs"});
  CHECK(plain_jobs.out.find("GPU-TYPE") == std::string::npos);
}

TEST_CASE("register accepts gpuTypes and gpu_types and describe shows them", "[rescalectl]") {
  CliServer server;
  TempFile manifest(R"(jobId: default/camel
minReplicas: 1
maxReplicas: 4
localBatchSize: 32
gpuTypes: [Tesla-T4, NVIDIA-A100-SXM4-40GB]
---
job_id: default/snake
min_replicas: 1
max_replicas: 4
local_batch_size: 32
gpu_types:
  - NVIDIA-A100-SXM4-40GB
)");
  CliResult registered = server.Run({"register", "-f", manifest.path()});
  INFO(registered.err);
  REQUIRE(registered.exit_code == 0);
  CliResult camel = server.Run({"get", "job", "default/camel", "-o", "json"});
  REQUIRE(camel.exit_code == 0);
  CHECK(nlohmann::json::parse(camel.out).at("spec").at("gpuTypes") ==
        nlohmann::json::array({"Tesla-T4", "NVIDIA-A100-SXM4-40GB"}));
  CliResult snake = server.Run({"describe", "job", "default/snake"});
  REQUIRE(snake.exit_code == 0);
  CHECK(DescribedValue(SectionUnder(snake.out, "Spec:"), "GPU Types") == "NVIDIA-A100-SXM4-40GB");

  // The server checks each name, naming the field.
  TempFile bad(R"(jobId: default/bad
minReplicas: 1
maxReplicas: 4
localBatchSize: 32
gpuTypes: ["Tesla T4"]
)");
  CliResult refused = server.Run({"register", "-f", bad.path()});
  CHECK(refused.exit_code == 1);
  CHECK(refused.err.find("spec.gpu_types[0] \"Tesla T4\" is not a GPU type name") !=
        std::string::npos);
}
