// Tests of rescale-agent's library: the parsers on real log lines (the
// PyTorch ImageNet example's ProgressMeter output, key=value, regex), the
// file follower (growth, partial lines, truncation, rotation), world-size
// resolution, and the sender: batching, backoff with injected time and
// randomness, the bounded buffer, and — against a real in-process rescaled
// — no sample lost or stored twice when answers are lost and batches are
// resent; the GPU type on every batch (the binary itself:
// agent_binary_test.cc). Time is a ManualClock shared by agent and server;
// nothing sleeps; the server binds port 0.
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "client/agent/parser.h"
#include "client/agent/sender.h"
#include "client/agent/source.h"
#include "rescale/clock.h"
#include "rescale/v1/rescale.grpc.pb.h"
#include "server/server.h"
#include "spdlog/spdlog.h"
#include "tests/engine_helpers.h"

namespace rescale::agent {
namespace {

using Catch::Matchers::Contains;

std::unique_ptr<LineParser> Parser(const std::string& format) {
  absl::StatusOr<std::unique_ptr<LineParser>> parser = MakeLineParser(format);
  REQUIRE(parser.ok());
  return std::move(parser).value();
}

// ---- parsers ------------------------------------------------------------------

// Lines as pytorch/examples imagenet/main.py prints them: ProgressMeter joins
// "Epoch: [E]" + "[I/N]" and the meters (Time, Data as ':6.3f', Loss ':.4e',
// Acc ':6.2f', each "name val (avg)") with tabs.
const char* const kImagenetLines[] = {
    "Epoch: [0][   0/5005]\tTime  3.052 ( 3.052)\tData  2.118 ( 2.118)\tLoss 6.9360e+00 "
    "(6.9360e+00)\tAcc@1   0.00 (  0.00)\tAcc@5   0.39 (  0.39)",
    "Epoch: [2][  10/5005]\tTime  0.468 ( 0.512)\tData  0.001 ( 0.052)\tLoss 6.9058e+00 "
    "(6.9101e+00)\tAcc@1   0.00 (  0.10)\tAcc@5   0.78 (  0.53)",
    "Epoch: [89][5000/5005]\tTime  0.231 ( 0.236)\tData  0.000 ( 0.003)\tLoss 9.1180e-01 "
    "(9.4432e-01)\tAcc@1  76.17 ( 76.82)\tAcc@5  91.80 ( 91.43)\r",
};

TEST_CASE("imagenet parser reads the batch time and numbers steps epoch * batches + index") {
  auto parser = Parser("imagenet");
  std::optional<ParsedStep> first = parser->Parse(kImagenetLines[0]);
  REQUIRE(first);
  CHECK(first->seconds == Approx(3.052));
  CHECK(first->step == 0u);
  std::optional<ParsedStep> second = parser->Parse(kImagenetLines[1]);
  REQUIRE(second);
  CHECK(second->seconds == Approx(0.468));  // this batch's time, not the average
  CHECK(second->step == 2u * 5005 + 10);
  CHECK_FALSE(second->batch_size);
  std::optional<ParsedStep> crlf = parser->Parse(kImagenetLines[2]);
  REQUIRE(crlf);
  CHECK(crlf->seconds == Approx(0.231));
  CHECK(crlf->step == 89u * 5005 + 5000);
}

TEST_CASE("imagenet parser accepts prefixes from kubectl --timestamps and launchers") {
  auto parser = Parser("imagenet");
  std::optional<ParsedStep> p =
      parser->Parse(std::string("2024-05-01T10:00:00.123456789Z [default0]:") + kImagenetLines[1]);
  REQUIRE(p);
  CHECK(p->seconds == Approx(0.468));
  CHECK(p->step == 2u * 5005 + 10);
  // Without the padding some forks drop.
  p = parser->Parse("Epoch: [1][7/100]\tTime 0.250 (0.300)");
  REQUIRE(p);
  CHECK(p->step == 107u);
}

TEST_CASE("imagenet parser ignores validation, summaries, other output and malformed lines") {
  auto parser = Parser("imagenet");
  for (const char* line : {
           "Test: [ 10/196]\tTime  0.101 ( 0.120)\tLoss 1.0144e+00 (9.5380e-01)\tAcc@1  75.00 ( "
           "76.42)",
           " *   Acc@1 76.130 Acc@5 92.862", "=> creating model 'resnet50'",
           "Use GPU: 0 for training", "",
           "Epoch: [0][  10/5005]",                        // no Time meter
           "Epoch: [0][  10/5005]\tData  0.001 ( 0.052)",  // no Time meter
           "Epoch: [x][  10/5005]\tTime  0.468 ( 0.512)",  // epoch not a number
           "Epoch: [0][6000/5005]\tTime  0.468 ( 0.512)",  // index beyond the epoch
           "Epoch: [0][  10/0]\tTime  0.468 ( 0.512)",     // no batches
           "Epoch: [0][  10/5005]\tTime  nan (  nan)",     // not a number
           "Epoch: [0][  10/5005]\tTime  0.000 ( 0.000)",  // not positive
           "Epoch: [0][  10/5005]\tTimer 0.468 ( 0.512)",  // not the Time meter
       }) {
    INFO(line);
    CHECK_FALSE(parser->Parse(line));
  }
}

TEST_CASE("kv parser reads step_time, step and batch_size and ignores other keys") {
  auto parser = Parser("kv");
  std::optional<ParsedStep> p = parser->Parse("step=12 step_time=0.25");
  REQUIRE(p);
  CHECK(p->seconds == Approx(0.25));
  CHECK(p->step == 12u);
  p = parser->Parse("2024-05-01 INFO step=13\tloss=1.25 step_time=3e-1 batch_size=64 lr=0.1,");
  REQUIRE(p);
  CHECK(p->seconds == Approx(0.3));
  CHECK(p->step == 13u);
  CHECK(p->batch_size == 64u);
  p = parser->Parse("step_time=0.5");
  REQUIRE(p);
  CHECK_FALSE(p->step);
  for (const char* line : {"step=12", "step=abc step_time=0.2", "step=1 step_time=-1",
                           "step=1 step_time=0.2s", "hello world", "step_time=", ""}) {
    INFO(line);
    CHECK_FALSE(parser->Parse(line));
  }
}

TEST_CASE("regex parser takes named groups, or group 1 as seconds") {
  auto named = Parser(
      R"(regex:iter (?<step>\d+) .*took (?P<step_time>[0-9.]+)s(?: bs=(?<batch_size>\d+))?)");
  std::optional<ParsedStep> p = named->Parse("rank0 iter 41 loss 2.3 took 0.125s bs=32");
  REQUIRE(p);
  CHECK(p->seconds == Approx(0.125));
  CHECK(p->step == 41u);
  CHECK(p->batch_size == 32u);
  p = named->Parse("rank0 iter 42 took 0.5s");
  REQUIRE(p);
  CHECK_FALSE(p->batch_size);
  CHECK_FALSE(named->Parse("rank0 iter 42 took fast"));

  // Non-capturing groups, escaped and bracketed parentheses do not count.
  auto numbered = Parser(R"(regex:(?:train|fit) \([a-z]+\) [(]step\) ([0-9.]+))");
  p = numbered->Parse("fit (gpu) (step) 1.5");
  REQUIRE(p);
  CHECK(p->seconds == Approx(1.5));
  CHECK_FALSE(p->step);
}

TEST_CASE("unknown formats and bad regexes are INVALID_ARGUMENT naming the problem") {
  auto unknown = MakeLineParser("yaml");
  REQUIRE_FALSE(unknown.ok());
  CHECK(unknown.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(unknown.status().message()), Contains("imagenet, kv or regex:EXPR"));
  auto broken = MakeLineParser("regex:(unclosed");
  REQUIRE_FALSE(broken.ok());
  CHECK_THAT(std::string(broken.status().message()), Contains("does not compile"));
  auto no_group = MakeLineParser("regex:took [0-9.]+");
  REQUIRE_FALSE(no_group.ok());
  CHECK_THAT(std::string(no_group.status().message()), Contains("no capturing group"));
}

// ---- world size -----------------------------------------------------------------

TEST_CASE("world size comes from the flag, then WORLD_SIZE, then a fixed PET_NNODES") {
  std::map<std::string, std::string> env;
  auto getenv = [&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  absl::StatusOr<uint32_t> none = ResolveWorldSize(0, getenv);
  REQUIRE_FALSE(none.ok());
  CHECK_THAT(std::string(none.status().message()), Contains("--world-size"));
  env["PET_NNODES"] = "1:4";
  absl::StatusOr<uint32_t> range = ResolveWorldSize(0, getenv);
  REQUIRE_FALSE(range.ok());
  CHECK_THAT(std::string(range.status().message()), Contains("elastic range"));
  env["PET_NNODES"] = "3:3";
  CHECK(*ResolveWorldSize(0, getenv) == 3);
  env["PET_NNODES"] = "2";
  CHECK(*ResolveWorldSize(0, getenv) == 2);
  env["WORLD_SIZE"] = "8";
  CHECK(*ResolveWorldSize(0, getenv) == 8);
  CHECK(*ResolveWorldSize(5, getenv) == 5);
  env["WORLD_SIZE"] = "eight";
  CHECK_FALSE(ResolveWorldSize(0, getenv).ok());
  CHECK_FALSE(ResolveWorldSize(-1, getenv).ok());
}

// ---- GPU type --------------------------------------------------------------------

TEST_CASE("gpu type comes from --gpu-type, then RESCALE_GPU_TYPE, and must be a type name") {
  std::map<std::string, std::string> env;
  auto getenv = [&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  CHECK(*ResolveGpuType("", getenv) == "");  // not said
  env["RESCALE_GPU_TYPE"] = "";
  CHECK(*ResolveGpuType("", getenv) == "");
  env["RESCALE_GPU_TYPE"] = "Tesla-T4";
  CHECK(*ResolveGpuType("", getenv) == "Tesla-T4");
  CHECK(*ResolveGpuType("NVIDIA-A100-SXM4-40GB", getenv) == "NVIDIA-A100-SXM4-40GB");

  // A bad value is named by where it came from.
  absl::StatusOr<std::string> bad_flag = ResolveGpuType("A100 80GB", getenv);
  REQUIRE_FALSE(bad_flag.ok());
  CHECK(bad_flag.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(bad_flag.status().message()),
             Contains("--gpu-type \"A100 80GB\" is not a GPU type name"));
  env["RESCALE_GPU_TYPE"] = "-T4";
  absl::StatusOr<std::string> bad_env = ResolveGpuType("", getenv);
  REQUIRE_FALSE(bad_env.ok());
  CHECK_THAT(std::string(bad_env.status().message()),
             Contains("RESCALE_GPU_TYPE \"-T4\" is not a GPU type name"));
  CHECK_FALSE(ResolveGpuType(std::string(64, 'a'), getenv).ok());  // 63 characters at most
  CHECK(*ResolveGpuType(std::string(63, 'a'), getenv) == std::string(63, 'a'));
}

// ---- file follower ----------------------------------------------------------------

struct TempLog {
  TempLog() {
    const char* dir = std::getenv("TMPDIR");
    std::string pattern = std::string(dir ? dir : "/tmp") + "/rescale-agent-test-XXXXXX";
    std::vector<char> buf(pattern.begin(), pattern.end());
    buf.push_back('\0');
    const int fd = mkstemp(buf.data());
    REQUIRE(fd >= 0);
    close(fd);
    path = buf.data();
  }
  ~TempLog() {
    std::remove(path.c_str());
    std::remove((path + ".1").c_str());
  }
  void Append(const std::string& text, const std::string& file = "") const {
    std::ofstream out(file.empty() ? path : file, std::ios::app | std::ios::binary);
    out << text;
  }
  std::string path;
};

std::vector<std::string> PollAll(FileFollower& follower) {
  std::vector<std::string> lines;
  absl::Status status = follower.Poll([&](std::string_view line) { lines.emplace_back(line); });
  REQUIRE(status.ok());
  return lines;
}

TEST_CASE("file follower starts at the end, holds partial lines and follows growth") {
  TempLog log;
  log.Append("history\n");
  FileFollower follower(log.path, /*from_start=*/false);
  CHECK(PollAll(follower).empty());
  log.Append("a\nb");
  CHECK(PollAll(follower) == std::vector<std::string>{"a"});
  CHECK(PollAll(follower).empty());
  log.Append("c\n");
  CHECK(PollAll(follower) == std::vector<std::string>{"bc"});
}

TEST_CASE("file follower with from_start reads the existing lines") {
  TempLog log;
  log.Append("one\ntwo\n");
  FileFollower follower(log.path, /*from_start=*/true);
  CHECK(PollAll(follower) == std::vector<std::string>{"one", "two"});
}

TEST_CASE("file follower restarts at offset 0 after truncation") {
  TempLog log;
  FileFollower follower(log.path, /*from_start=*/true);
  log.Append("first line\nsecond line\n");
  CHECK(PollAll(follower).size() == 2);
  { std::ofstream truncate(log.path, std::ios::trunc); }
  log.Append("x\n");
  CHECK(PollAll(follower) == std::vector<std::string>{"x"});
}

TEST_CASE("file follower reads a rotated file to its end, then the new file from its start") {
  TempLog log;
  FileFollower follower(log.path, /*from_start=*/true);
  log.Append("1\n");
  CHECK(PollAll(follower) == std::vector<std::string>{"1"});
  REQUIRE(std::rename(log.path.c_str(), (log.path + ".1").c_str()) == 0);
  log.Append("2\n3", log.path + ".1");  // written to the old file after the rename
  CHECK(PollAll(follower) == std::vector<std::string>{"2"});  // no new file yet: old one followed
  log.Append("4\n");
  CHECK(PollAll(follower) == std::vector<std::string>{"3", "4"});
}

TEST_CASE("file follower reports a missing file as NOT_FOUND and picks it up later") {
  TempLog log;
  std::remove(log.path.c_str());
  FileFollower follower(log.path, /*from_start=*/false);
  absl::Status status = follower.Poll([](std::string_view) {});
  CHECK(status.code() == absl::StatusCode::kNotFound);
  log.Append("late\n");
  CHECK(PollAll(follower) ==
        std::vector<std::string>{"late"});  // a file that appears is read whole
}

// ---- sender with a scripted transport -------------------------------------------

// Answers from a script (OK when it runs out); records every batch; may run
// a hook while "in flight" (as the reader thread would).
class ScriptedTransport final : public SampleTransport {
 public:
  absl::StatusOr<BatchAck> Send(const v1::SampleBatch& batch) override {
    batches.push_back(batch);
    if (during_send) during_send();
    if (!script.empty()) {
      absl::Status status = script.front();
      script.erase(script.begin());
      if (!status.ok()) return status;
    }
    BatchAck ack;
    ack.accepted = static_cast<uint64_t>(batch.samples_size());
    return ack;
  }
  std::vector<absl::Status> script;
  std::vector<v1::SampleBatch> batches;
  std::function<void()> during_send;
};

SenderOptions SmallOptions() {
  SenderOptions options;
  options.job_id = "ns/job";
  options.pod = "job-worker-0";
  options.world_size = 2;
  options.max_batch = 3;
  options.flush_interval = absl::Seconds(2);
  options.initial_backoff = absl::Milliseconds(100);
  options.max_backoff = absl::Seconds(1);
  return options;
}

AgentSample At(ManualClock& clock, uint64_t step) {
  AgentSample s;
  s.seconds = 0.5;
  s.step = step;
  s.at = clock.Now();
  return s;
}

TEST_CASE("sender sends full batches at once and a partial one after the flush interval") {
  ManualClock clock;
  ScriptedTransport transport;
  SampleSender sender(SmallOptions(), &transport, &clock, [] { return 0.5; });
  CHECK_FALSE(sender.MaybeSend());
  CHECK(sender.NextAttempt() == absl::InfiniteFuture());
  for (uint64_t i = 0; i < 7; ++i) sender.Add(At(clock, i));
  CHECK(sender.MaybeSend());
  CHECK(sender.MaybeSend());
  CHECK_FALSE(sender.MaybeSend());  // one left, younger than the flush interval
  CHECK(sender.NextAttempt() == clock.Now() + absl::Seconds(2));
  clock.Advance(absl::Seconds(2));
  CHECK(sender.MaybeSend());
  REQUIRE(transport.batches.size() == 3);
  const v1::SampleBatch& first = transport.batches[0];
  CHECK(first.job_id() == "ns/job");
  CHECK(first.pod() == "job-worker-0");
  CHECK(first.world_size() == 2);
  REQUIRE(first.samples_size() == 3);
  CHECK(first.samples(2).step() == 2);
  CHECK(first.samples(0).job_id().empty());  // batch-level fields are not repeated
  CHECK(transport.batches[2].samples(0).step() == 6);
  SenderStats stats = sender.stats();
  CHECK(stats.acked == 7);
  CHECK(stats.pending == 0);
}

TEST_CASE("sender backs off exponentially with injected jitter, capped, and resets on success") {
  ManualClock clock;
  ScriptedTransport transport;
  transport.script = {absl::UnavailableError("down"), absl::UnavailableError("down"),
                      absl::DeadlineExceededError("slow"), absl::UnavailableError("down"),
                      absl::UnavailableError("down")};
  SampleSender sender(SmallOptions(), &transport, &clock,
                      [] { return 0.5; });  // 3/4 of the ceiling
  for (uint64_t i = 0; i < 3; ++i) sender.Add(At(clock, i));
  const absl::Duration expected[] = {absl::Milliseconds(75), absl::Milliseconds(150),
                                     absl::Milliseconds(300), absl::Milliseconds(600),
                                     absl::Milliseconds(750)};  // 1 s cap
  for (absl::Duration delay : expected) {
    CHECK(sender.MaybeSend());
    CHECK(sender.NextAttempt() - clock.Now() == delay);
    CHECK_FALSE(sender.MaybeSend());
    clock.Advance(delay);
  }
  CHECK(sender.MaybeSend());  // the script ran out: success
  CHECK(sender.stats().acked == 3);
  CHECK(sender.stats().failed_rpcs == 5);
  CHECK(sender.last_error().ok());
  // The same three samples went out six times.
  CHECK(transport.batches.size() == 6);
  CHECK(sender.stats().sent == 18);
  // A new failure starts from the initial backoff again.
  transport.script = {absl::UnavailableError("down")};
  for (uint64_t i = 3; i < 6; ++i) sender.Add(At(clock, i));
  CHECK(sender.MaybeSend());
  CHECK(sender.NextAttempt() - clock.Now() == absl::Milliseconds(75));
}

TEST_CASE("sender drops the oldest samples not in flight when its buffer is full") {
  ManualClock clock;
  ScriptedTransport transport;
  SenderOptions options = SmallOptions();
  options.buffer_capacity = 5;
  SampleSender sender(options, &transport, &clock, [] { return 0.5; });
  for (uint64_t i = 0; i < 5; ++i) sender.Add(At(clock, i));
  // While steps 0..2 are in flight the reader adds 3 more: 3 and 4 go, and
  // one of the new ones would be next — but in-flight samples stay.
  uint64_t next = 5;
  transport.during_send = [&] {
    for (int k = 0; k < 3; ++k) sender.Add(At(clock, next++));
    transport.during_send = nullptr;
  };
  CHECK(sender.MaybeSend());
  SenderStats stats = sender.stats();
  CHECK(stats.dropped == 3);
  CHECK(stats.acked == 3);
  CHECK(stats.pending == 2);
  clock.Advance(absl::Seconds(2));
  CHECK(sender.MaybeSend());
  REQUIRE(transport.batches.size() == 2);
  CHECK(transport.batches[0].samples(0).step() == 0);
  CHECK(transport.batches[1].samples(0).step() == 6);  // 3, 4 and 5 dropped, oldest first
  CHECK(transport.batches[1].samples(1).step() == 7);
}

TEST_CASE("sender abandons a batch the server refuses for good and counts it") {
  ManualClock clock;
  ScriptedTransport transport;
  transport.script = {absl::InvalidArgumentError("batch too large")};
  SampleSender sender(SmallOptions(), &transport, &clock, [] { return 0.5; });
  for (uint64_t i = 0; i < 3; ++i) sender.Add(At(clock, i));
  CHECK(sender.MaybeSend());
  CHECK(sender.stats().abandoned == 3);
  CHECK(sender.stats().pending == 0);
  CHECK(sender.last_error().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("line feeder counts lines, stamps samples and fills the default batch size") {
  ManualClock clock;
  ScriptedTransport transport;
  SampleSender sender(SmallOptions(), &transport, &clock, [] { return 0.5; });
  auto parser = Parser("kv");
  LineFeeder feeder(parser.get(), &sender, &clock, /*batch_size=*/16);
  feeder.Feed("step=1 step_time=0.2 batch_size=64");
  feeder.Feed("loading data");
  clock.Advance(absl::Seconds(1));
  feeder.Feed("step=2 step_time=0.3");
  CHECK(feeder.stats().lines_read == 3);
  CHECK(feeder.stats().lines_parsed == 2);
  sender.Close();
  CHECK(sender.MaybeSend());
  REQUIRE(transport.batches.size() == 1);
  REQUIRE(transport.batches[0].samples_size() == 2);
  CHECK(transport.batches[0].samples(0).batch_size() == 64);
  CHECK(transport.batches[0].samples(1).batch_size() == 16);
  CHECK(transport.batches[0].samples(1).step_seconds() == Approx(0.3));
  CHECK(transport.batches[0].samples(1).timestamp_unix_nanos() -
            transport.batches[0].samples(0).timestamp_unix_nanos() ==
        1'000'000'000);
}

TEST_CASE("sender names its GPU type on every batch, and no type when it has none") {
  ManualClock clock;
  ScriptedTransport transport;
  SenderOptions options = SmallOptions();
  options.gpu_type = "Tesla-T4";
  SampleSender sender(options, &transport, &clock, [] { return 0.5; });
  for (uint64_t i = 0; i < 7; ++i) sender.Add(At(clock, i));
  sender.Close();
  while (sender.MaybeSend()) {
  }
  REQUIRE(transport.batches.size() == 3);  // 3 + 3 + 1
  for (const v1::SampleBatch& batch : transport.batches) {
    CHECK(batch.gpu_type() == "Tesla-T4");
    // The batch says it once; the samples leave theirs empty.
    for (const v1::StepSample& sample : batch.samples()) CHECK(sample.gpu_type().empty());
  }

  ScriptedTransport untyped;
  SampleSender plain(SmallOptions(), &untyped, &clock, [] { return 0.5; });
  plain.Add(At(clock, 0));
  plain.Close();
  CHECK(plain.MaybeSend());
  REQUIRE(untyped.batches.size() == 1);
  CHECK(untyped.batches[0].gpu_type().empty());
}

// ---- against a real rescaled ---------------------------------------------------------

struct AgentServer {
  AgentServer() {
    spdlog::set_level(spdlog::level::warn);
    server::ServerOptions options;
    options.listen = "127.0.0.1:0";
    options.run_plan_timer = false;
    options.clock = &clock;
    auto started = server::RescaleServer::Start(options);
    REQUIRE(started.ok());
    server = std::move(started).value();
    channel = grpc::CreateChannel(server->address(), grpc::InsecureChannelCredentials());
    auto jobs = v1::JobService::NewStub(channel);
    grpc::ClientContext ctx;
    v1::RegisterJobRequest req;
    req.mutable_spec()->set_job_id("ns/job");
    req.mutable_spec()->set_min_replicas(1);
    req.mutable_spec()->set_max_replicas(8);
    req.mutable_spec()->set_local_batch_size(32);
    v1::Job job;
    REQUIRE(jobs->RegisterJob(&ctx, req, &job).ok());
  }
  uint64_t Accepted() { return server->engine().GetJob("ns/job").value().status.samples_accepted; }
  // The GPU types the job has a curve on, and the samples stored there.
  std::map<std::string, uint64_t> SamplesByType() {
    return testing::SamplesByType(server->engine(), "ns/job");
  }

  ManualClock clock;
  std::unique_ptr<server::RescaleServer> server;
  std::shared_ptr<grpc::Channel> channel;
};

// The real gRPC transport, with faults: on a "lose" call the batch reaches
// the server (which stores it) but the agent sees UNAVAILABLE, as when the
// connection breaks before the answer arrives; on a "refuse" call nothing is
// sent.
class FaultyTransport final : public SampleTransport {
 public:
  explicit FaultyTransport(SampleTransport* real) : real_(real) {}
  absl::StatusOr<BatchAck> Send(const v1::SampleBatch& batch) override {
    const int call = calls++;
    if (call % 5 == 1) {
      ++refused;
      return absl::UnavailableError("injected: connection refused");
    }
    absl::StatusOr<BatchAck> ack = real_->Send(batch);
    if (ack.ok() && call % 3 == 0) {
      lost_samples += static_cast<uint64_t>(batch.samples_size());
      return absl::UnavailableError("injected: answer lost");
    }
    return ack;
  }
  int calls = 0;
  int refused = 0;
  uint64_t lost_samples = 0;

 private:
  SampleTransport* real_;
};

TEST_CASE(
    "agent delivers every sample exactly once to rescaled when answers are lost and batches "
    "resent") {
  AgentServer server;
  GrpcTransport grpc(server.channel, absl::Seconds(30));
  FaultyTransport faulty(&grpc);
  SenderOptions options = SmallOptions();
  options.max_batch = 50;
  SampleSender sender(options, &faulty, &server.clock, [] { return 0.5; });
  constexpr uint64_t kSamples = 1000;
  for (uint64_t step = 0; step < kSamples; ++step) {
    sender.Add(At(server.clock, step));
    // Interleave sending with reading, as the two threads do.
    if (step % 7 == 0) sender.MaybeSend();
  }
  sender.Close();
  int rounds = 0;
  while (sender.stats().pending > 0 && rounds++ < 10'000) {
    if (!sender.MaybeSend()) server.clock.Set(sender.NextAttempt());
  }
  const SenderStats stats = sender.stats();
  CHECK(stats.pending == 0);
  CHECK(stats.dropped == 0);
  CHECK(stats.rejected == 0);
  CHECK(faulty.lost_samples > 0);
  CHECK(faulty.refused > 0);
  // The server stored each step once; every lost answer's batch came back as
  // duplicates.
  CHECK(server.Accepted() == kSamples);
  // What the agent was told: batches whose answer was lost were stored
  // unbeknownst to it, and their resends came back as duplicates.
  CHECK(stats.accepted + faulty.lost_samples == kSamples);
  CHECK(stats.duplicates == faulty.lost_samples);
  CHECK(stats.acked == kSamples);
}

TEST_CASE("agent pipeline feeds imagenet log lines through to rescaled's pod statistics") {
  AgentServer server;
  GrpcTransport grpc(server.channel, absl::Seconds(30));
  SenderOptions options = SmallOptions();
  SampleSender sender(options, &grpc, &server.clock);
  auto parser = Parser("imagenet");
  LineFeeder feeder(parser.get(), &sender, &server.clock);
  feeder.Feed("=> creating model 'resnet50'");
  for (int i = 0; i < 10; ++i) {
    feeder.Feed("Epoch: [0][" + std::to_string(i) +
                "/100]\tTime  0.250 ( 0.250)\tData  0.001 ( 0.001)");
  }
  feeder.Feed("Test: [ 0/10]\tTime  0.100 ( 0.100)");
  // The same lines again, as after a restarted `kubectl logs -f`.
  for (int i = 0; i < 10; ++i) {
    feeder.Feed("Epoch: [0][" + std::to_string(i) +
                "/100]\tTime  0.250 ( 0.250)\tData  0.001 ( 0.001)");
  }
  sender.Close();
  sender.Run(absl::Seconds(5));  // closed: everything is due at once, no waiting
  CHECK(feeder.stats().lines_read == 22);
  CHECK(feeder.stats().lines_parsed == 20);
  CHECK(sender.stats().pending == 0);
  CHECK(sender.stats().accepted == 10);
  CHECK(sender.stats().duplicates == 10);
  std::vector<PodStatus> pods = server.server->engine().GetJob("ns/job").value().pods;
  REQUIRE(pods.size() == 1);
  CHECK(pods[0].pod == "job-worker-0");
  CHECK(pods[0].sample_count == 10);
  CHECK(pods[0].world_size == 2);
  CHECK(pods[0].recent_step_seconds == Approx(0.25));
}

TEST_CASE("grpc transport reports an unreachable server as UNAVAILABLE, which the sender retries") {
  std::string address;
  {
    AgentServer gone;
    address = gone.server->address();
    gone.server->Shutdown(absl::ZeroDuration());
  }
  GrpcTransport grpc(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()),
                     absl::Seconds(5));
  ManualClock clock;
  SampleSender sender(SmallOptions(), &grpc, &clock, [] { return 0.5; });
  for (uint64_t i = 0; i < 3; ++i) sender.Add(At(clock, i));
  CHECK(sender.MaybeSend());
  CHECK(sender.last_error().code() == absl::StatusCode::kUnavailable);
  CHECK(sender.stats().pending == 3);
  CHECK(sender.NextAttempt() > clock.Now());
}

TEST_CASE("agent pipeline's GPU type reaches rescaled: the job gets a curve on that type") {
  AgentServer server;
  GrpcTransport grpc(server.channel, absl::Seconds(30));
  SenderOptions options = SmallOptions();
  options.gpu_type = "Tesla-T4";
  SampleSender sender(options, &grpc, &server.clock);
  auto parser = Parser("kv");
  LineFeeder feeder(parser.get(), &sender, &server.clock);
  for (int step = 0; step < 10; ++step)
    feeder.Feed("step=" + std::to_string(step) + " step_time=0.5");
  sender.Close();
  sender.Run(absl::Seconds(5));  // closed: everything is due at once, no waiting
  CHECK(sender.stats().accepted == 10);
  CHECK(sender.stats().rejected == 0);
  CHECK(server.SamplesByType() == std::map<std::string, uint64_t>{{"Tesla-T4", 10}});
}

}  // namespace
}  // namespace rescale::agent
