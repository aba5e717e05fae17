// Tests of the rescale-agent binary itself, where the library tests
// (agent_test.cc) cannot reach: what it reads from its flags and its
// environment. Each runs this build's rescale-agent (RESCALE_AGENT_BINARY)
// on a log given as its stdin against a real in-process rescaled on port 0:
// the agent reads to the end, delivers and exits, so a test waits for the
// process and nothing else; the server uses the real clock, as the agent
// stamps samples with the real time.
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "rescale/types.h"
#include "rescale/v1/rescale.grpc.pb.h"
#include "server/server.h"
#include "spdlog/spdlog.h"
#include "tests/child_process.h"
#include "tests/engine_helpers.h"

namespace rescale::agent {
namespace {

using Catch::Matchers::Contains;

// rescaled with job ns/job registered.
struct AgentServer {
  AgentServer() {
    spdlog::set_level(spdlog::level::warn);
    server::ServerOptions options;
    options.listen = "127.0.0.1:0";
    options.run_plan_timer = false;
    auto started = server::RescaleServer::Start(options);
    REQUIRE(started.ok());
    server = std::move(started).value();
    JobSpec spec;
    spec.job_id = "ns/job";
    spec.min_replicas = 1;
    spec.max_replicas = 8;
    spec.local_batch_size = 32;
    REQUIRE(server->engine().RegisterJob(spec).ok());
  }
  uint64_t Accepted() { return server->engine().GetJob("ns/job").value().status.samples_accepted; }
  // The GPU types the job has a curve on, and the samples stored there.
  std::map<std::string, uint64_t> SamplesByType() {
    return testing::SamplesByType(server->engine(), "ns/job");
  }

  std::unique_ptr<server::RescaleServer> server;
};

// A log file under $TMPDIR, removed at the end of the test.
struct TempLog {
  TempLog() {
    const char* dir = std::getenv("TMPDIR");
    std::string pattern = std::string(dir ? dir : "/tmp") + "/rescale-agent-binary-test-XXXXXX";
    std::vector<char> buf(pattern.begin(), pattern.end());
    buf.push_back('\0');
    const int fd = mkstemp(buf.data());
    REQUIRE(fd >= 0);
    close(fd);
    path = buf.data();
  }
  ~TempLog() { std::remove(path.c_str()); }
  void Append(const std::string& text) const {
    std::ofstream out(path, std::ios::app | std::ios::binary);
    out << text;
  }
  std::string path;
};

// Runs this build's rescale-agent with `env` (NAME=VALUE words for env(1);
// "-u NAME" unsets) and `flags`, its stdin `log`, until it exits; its exit
// code and output. It reads stdin to its end, delivers and exits: no wait on
// time, only on the process.
struct AgentRun {
  int exit_code = -1;
  std::string output;
};

AgentRun RunAgent(const std::vector<std::string>& env, const std::vector<std::string>& flags,
                  const TempLog& log) {
  // The log's path is mkstemp's: no quote or space to escape.
  std::vector<std::string> argv = {"/bin/sh", "-c", "exec \"$@\" < '" + log.path + "'", "sh",
                                   "/usr/bin/env"};
  argv.insert(argv.end(), env.begin(), env.end());
  argv.push_back(RESCALE_AGENT_BINARY);
  argv.insert(argv.end(), flags.begin(), flags.end());
  auto started = testing::ChildProcess::Start(argv);
  REQUIRE(started.ok());
  std::optional<int> status = (*started)->WaitForExit(absl::Seconds(60));
  REQUIRE(status.has_value());
  AgentRun run;
  run.output = (*started)->Output();
  REQUIRE(WIFEXITED(*status));
  run.exit_code = WEXITSTATUS(*status);
  return run;
}

TEST_CASE("rescale-agent sends its --gpu-type, else RESCALE_GPU_TYPE, with every batch") {
  AgentServer server;
  TempLog log;
  for (int step = 0; step < 6; ++step)
    log.Append("step=" + std::to_string(step) + " step_time=0.5\n");
  const std::vector<std::string> common = {
      "--server",     server.server->address(), "--job", "ns/job",   "--pod",
      "job-worker-0", "--world-size",           "2",     "--format", "kv"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> flags = common;
    flags.insert(flags.end(), extra.begin(), extra.end());
    return flags;
  };

  // From the environment.
  AgentRun from_env = RunAgent({"RESCALE_GPU_TYPE=Tesla-T4"}, common, log);
  INFO(from_env.output);
  REQUIRE(from_env.exit_code == 0);
  CHECK(server.SamplesByType() == std::map<std::string, uint64_t>{{"Tesla-T4", 6}});

  // The flag wins over the environment. Other pod, so the same steps are
  // new samples (rescaled keeps one per pod and step).
  std::vector<std::string> flags = with({"--gpu-type", "NVIDIA-A100-SXM4-40GB"});
  flags[5] = "job-worker-1";
  AgentRun from_flag = RunAgent({"RESCALE_GPU_TYPE=Tesla-T4"}, flags, log);
  INFO(from_flag.output);
  REQUIRE(from_flag.exit_code == 0);
  CHECK(server.SamplesByType() ==
        std::map<std::string, uint64_t>{{"NVIDIA-A100-SXM4-40GB", 6}, {"Tesla-T4", 6}});

  // Neither: the batches name no type, and no typed curve grows.
  flags = common;
  flags[5] = "job-worker-2";
  AgentRun untyped = RunAgent({"-u", "RESCALE_GPU_TYPE"}, flags, log);
  INFO(untyped.output);
  REQUIRE(untyped.exit_code == 0);
  CHECK(server.Accepted() == 18);
  CHECK(server.SamplesByType() ==
        std::map<std::string, uint64_t>{{"NVIDIA-A100-SXM4-40GB", 6}, {"Tesla-T4", 6}});
}

TEST_CASE("rescale-agent refuses a GPU type that is not a type name, naming where it came from") {
  AgentServer server;
  TempLog log;
  log.Append("step=0 step_time=0.5\n");
  const std::vector<std::string> flags = {
      "--server", server.server->address(), "--job", "ns/job",   "--pod",
      "p",        "--world-size",           "1",     "--format", "kv"};
  AgentRun bad_env = RunAgent({"RESCALE_GPU_TYPE=A100 80GB"}, flags, log);
  CHECK(bad_env.exit_code == 2);
  CHECK_THAT(bad_env.output, Contains("RESCALE_GPU_TYPE \"A100 80GB\" is not a GPU type name"));
  std::vector<std::string> with_flag = flags;
  with_flag.insert(with_flag.end(), {"--gpu-type", "T4_"});
  AgentRun bad_flag = RunAgent({"-u", "RESCALE_GPU_TYPE"}, with_flag, log);
  CHECK(bad_flag.exit_code == 2);
  CHECK_THAT(bad_flag.output, Contains("--gpu-type \"T4_\" is not a GPU type name"));
  CHECK(server.Accepted() == 0);  // nothing was sent
}

}  // namespace
}  // namespace rescale::agent
