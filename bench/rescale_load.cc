// rescale-load: end-to-end ingest load generator for a running rescaled.
//
//   rescale-load --server 127.0.0.1:50051 --seconds 10 --streams 2 --batch 1000
//
// Registers a job (default bench/load, max_replicas 64) unless it exists,
// then opens --streams StreamSamples calls, each on its own connection and
// thread, and writes the same pre-serialised SampleBatch (batch-level
// job_id, pod and world_size; per-sample step_seconds only) as fast as the
// server takes it, for --seconds. Batches are serialised once: the client
// spends its CPU on the transport, not on protobuf encoding.
//
// It then reports, in the same run:
//  * samples/s accepted, from the server's own count (GetJob's
//    status.samples_accepted before and after) and from the IngestSummaries;
//  * client CPU seconds (getrusage) and server CPU seconds (/proc, when
//    --server_pid is given);
//  * decode: how fast one core merely parses the same batch bytes into a
//    SampleBatch — the ceiling for any gRPC ingest — and ingest/decode.
// The last line is one summary for scripts:
//   accepted N in T s: R samples/s; decode D samples/s; ratio X; lost L
// and the exit status is non-zero if any sample sent was not accepted.
//
// Writers mode, --writers N (bench/load_writers.h): N clients registering
// jobs concurrently (durable writes) while one reads GetJob:
//   rescale-load --writers 8 --seconds 5
//
// Control-plane mode, --jobs N (bench/load_control_plane.cc says what it
// does and reports): an adapter registering N jobs one by one while the
// jobs' agents report samples, reads while plans of all N run, and with
// --watchers W how fast W watch streams converge on a plan changing all:
//   rescale-load --jobs 10000 --server_pid $(pgrep rescaled)
//   rescale-load --jobs 100 --watchers 1000
#include <grpcpp/create_channel.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/support/byte_buffer.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "bench/load_control_plane.h"
#include "bench/load_writers.h"
#include "client/common/credentials.h"
#include "rescale/v1/rescale.grpc.pb.h"

ABSL_FLAG(std::string, server, "127.0.0.1:50051", "rescaled address");
ABSL_FLAG(double, seconds, 10, "how long to stream");
ABSL_FLAG(std::string, token, "",
          "ingest mode: bearer token of the sample streams (rescaled --auth_token_file), e.g. a "
          "reporter's");
ABSL_FLAG(std::string, admin_token, "",
          "ingest mode: bearer token that registers the job and reads its count (a controller's "
          "or admin's); empty = --token");
ABSL_FLAG(int, streams, 2, "concurrent StreamSamples calls, one connection each");
ABSL_FLAG(int, batch, 1000, "samples per SampleBatch");
ABSL_FLAG(std::string, job, "bench/load", "job to stream samples for (registered if missing)");
ABSL_FLAG(bool, timestamps, true,
          "stamp every sample with timestamp_unix_nanos (as agents do); false = server time");
ABSL_FLAG(int, server_pid, 0,
          "pid of rescaled, to report its CPU seconds and (--jobs) resident memory "
          "(0 = not reported)");
ABSL_FLAG(int, jobs, 0,
          "control-plane mode: register this many jobs one by one and time the control "
          "plane (0 = ingest mode)");
ABSL_FLAG(double, read_seconds, 5,
          "control-plane mode: how long GetJob is timed while plans of all jobs run");
ABSL_FLAG(double, read_rate, 500, "control-plane mode: GetJob calls per second");
ABSL_FLAG(int, agents, 2,
          "control-plane mode: agents reporting the jobs' samples in parallel (even, >= 2)");
ABSL_FLAG(int, writers, 0,
          "writers mode: this many clients register new jobs concurrently for --seconds while "
          "one reads GetJob at --read_rate (0 = not this mode)");
ABSL_FLAG(int, watchers, 0,
          "control-plane mode: WatchRecommendations streams timed converging on a plan that "
          "changes every job (0 = none)");

namespace {

namespace v1 = rescale::v1;
using Clock = std::chrono::steady_clock;

double CpuSeconds(const rusage& u) {
  return u.ru_utime.tv_sec + u.ru_utime.tv_usec / 1e6 + u.ru_stime.tv_sec +
         u.ru_stime.tv_usec / 1e6;
}

double ProcessCpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return CpuSeconds(u);
}

// utime + stime of another process, from /proc/PID/stat; -1 if unreadable.
double OtherProcessCpuSeconds(int pid) {
  if (pid <= 0) return -1;
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t paren = content.rfind(')');
  if (paren == std::string::npos) return -1;
  std::istringstream fields(content.substr(paren + 2));
  std::string field;
  double utime = 0, stime = 0;
  for (int i = 3; fields >> field; ++i) {  // field 3 is the state
    if (i == 14) utime = std::stod(field);
    if (i == 15) {
      stime = std::stod(field);
      break;
    }
  }
  return (utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// The batch is sent over and over, so its timestamps age by the run's
// length: far inside the server's default ten-minute sample age.
v1::SampleBatch MakeBatch(const std::string& job, const std::string& pod, int size,
                          bool timestamps) {
  v1::SampleBatch batch;
  batch.set_job_id(job);
  batch.set_pod(pod);
  batch.set_world_size(8);
  const int64_t now_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  for (int i = 0; i < size; ++i) {
    v1::StepSample* sample = batch.add_samples();
    sample->set_step_seconds(0.25 + 0.001 * (i % 13));
    if (timestamps) sample->set_timestamp_unix_nanos(now_ns - int64_t{size - i} * 250'000'000);
  }
  return batch;
}

struct StreamResult {
  uint64_t sent = 0;
  uint64_t accepted = 0;
  std::string error;
};

// A plaintext channel whose calls carry `token` when it is not empty, as
// the clients send it (client/common/credentials.h).
std::shared_ptr<grpc::Channel> Dial(const std::string& server, const std::string& token,
                                    const grpc::ChannelArguments& args) {
  return rescale::client::RescaledConnection::Of(
             grpc::InsecureChannelCredentials(),
             token.empty() ? nullptr : rescale::client::BearerToken::Fixed(token))
      .Dial(server, args);
}

// One client stream on its own connection, through the generic stub so the
// pre-serialised bytes go out without re-encoding.
StreamResult RunStream(const std::string& server, const std::string& bytes, int batch_size,
                       Clock::time_point deadline) {
  StreamResult result;
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // a connection per stream
  auto channel = Dial(server, absl::GetFlag(FLAGS_token), args);
  grpc::GenericStub stub(channel);
  grpc::CompletionQueue cq;
  grpc::ClientContext context;
  auto call = stub.PrepareCall(&context, "/rescale.v1.MetricsService/StreamSamples", &cq);
  void* tag = nullptr;
  bool ok = false;
  auto await = [&] { return cq.Next(&tag, &ok) && ok; };

  call->StartCall(nullptr);
  if (!await()) {
    result.error = "cannot start StreamSamples on " + server;
    return result;
  }
  grpc::Slice slice(bytes);
  const grpc::ByteBuffer buffer(&slice, 1);
  while (Clock::now() < deadline) {
    call->Write(buffer, nullptr);
    if (!await()) break;  // the server ended the stream; Finish says why
    result.sent += batch_size;
  }
  call->WritesDone(nullptr);
  await();
  grpc::ByteBuffer response;
  call->Read(&response, nullptr);
  const bool have_response = await();
  grpc::Status status;
  call->Finish(&status, nullptr);
  await();
  if (!status.ok()) {
    result.error = absl::StrFormat("StreamSamples failed: %s", status.error_message());
  } else if (have_response) {
    v1::IngestSummary summary;
    std::vector<grpc::Slice> slices;
    response.Dump(&slices);
    std::string raw;
    for (const grpc::Slice& s : slices)
      raw.append(reinterpret_cast<const char*>(s.begin()), s.size());
    summary.ParseFromString(raw);
    result.accepted = summary.accepted();
  }
  return result;
}

// Samples/s one core parses from `bytes`, timed over about `seconds`.
double DecodeRate(const std::string& bytes, int batch_size, double seconds) {
  v1::SampleBatch batch;
  uint64_t parsed = 0;
  const auto start = Clock::now();
  const auto until = start + std::chrono::duration<double>(seconds);
  while (Clock::now() < until) {
    for (int i = 0; i < 16; ++i) {
      batch.ParseFromString(bytes);
      parsed += batch.samples_size();
    }
  }
  return parsed / std::chrono::duration<double>(Clock::now() - start).count();
}

absl::StatusOr<uint64_t> ServerAccepted(v1::JobService::Stub& jobs, const std::string& job) {
  grpc::ClientContext context;
  v1::GetJobRequest request;
  request.set_job_id(job);
  v1::Job response;
  grpc::Status status = jobs.GetJob(&context, request, &response);
  if (!status.ok()) return absl::UnavailableError(status.error_message());
  return response.status().samples_accepted();
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "rescale-load --server ADDR --seconds N --streams K --batch B: streams samples to "
      "rescaled and reports samples/s accepted against the protobuf decode ceiling");
  absl::ParseCommandLine(argc, argv);
  const std::string server = absl::GetFlag(FLAGS_server);
  if (absl::GetFlag(FLAGS_writers) > 0) {
    return rescale::load::RunWriters({.server = server,
                                      .writers = absl::GetFlag(FLAGS_writers),
                                      .seconds = absl::GetFlag(FLAGS_seconds),
                                      .read_rate = absl::GetFlag(FLAGS_read_rate)});
  }
  if (absl::GetFlag(FLAGS_jobs) > 0) {
    return rescale::load::RunControlPlane({.server = server,
                                           .jobs = absl::GetFlag(FLAGS_jobs),
                                           .read_seconds = absl::GetFlag(FLAGS_read_seconds),
                                           .read_rate = absl::GetFlag(FLAGS_read_rate),
                                           .agents = absl::GetFlag(FLAGS_agents),
                                           .server_pid = absl::GetFlag(FLAGS_server_pid),
                                           .watchers = absl::GetFlag(FLAGS_watchers)});
  }
  const std::string job = absl::GetFlag(FLAGS_job);
  const int streams = absl::GetFlag(FLAGS_streams);
  const int batch_size = absl::GetFlag(FLAGS_batch);
  const double seconds = absl::GetFlag(FLAGS_seconds);
  if (streams < 1 || batch_size < 1 || seconds <= 0) {
    std::cerr << "rescale-load: --streams, --batch and --seconds must be positive\n";
    return 2;
  }

  const std::string admin_token = absl::GetFlag(FLAGS_admin_token);
  auto channel = Dial(server, admin_token.empty() ? absl::GetFlag(FLAGS_token) : admin_token, {});
  auto jobs = v1::JobService::NewStub(channel);
  {
    grpc::ClientContext context;
    v1::RegisterJobRequest request;
    request.mutable_spec()->set_job_id(job);
    request.mutable_spec()->set_min_replicas(1);
    request.mutable_spec()->set_max_replicas(64);
    request.mutable_spec()->set_local_batch_size(32);
    v1::Job response;
    grpc::Status status = jobs->RegisterJob(&context, request, &response);
    if (!status.ok() && status.error_code() != grpc::StatusCode::ALREADY_EXISTS) {
      std::cerr << "rescale-load: RegisterJob " << job << " on " << server << ": "
                << status.error_message() << "\n";
      return 1;
    }
  }
  absl::StatusOr<uint64_t> before = ServerAccepted(*jobs, job);
  if (!before.ok()) {
    std::cerr << "rescale-load: GetJob: " << before.status().message() << "\n";
    return 1;
  }

  std::vector<std::string> payloads;
  for (int s = 0; s < streams; ++s) {
    payloads.push_back(
        MakeBatch(job, "load-pod-" + std::to_string(s), batch_size, absl::GetFlag(FLAGS_timestamps))
            .SerializeAsString());
  }
  std::cerr << absl::StrFormat("streaming %d-sample batches (%d bytes) on %d streams for %.1f s\n",
                               batch_size, payloads[0].size(), streams, seconds);

  const double client_cpu_start = ProcessCpuSeconds();
  const double server_cpu_start = OtherProcessCpuSeconds(absl::GetFlag(FLAGS_server_pid));
  const auto start = Clock::now();
  const Clock::time_point deadline =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  std::vector<StreamResult> results(streams);
  std::vector<std::thread> threads;
  for (int s = 0; s < streams; ++s) {
    threads.emplace_back(
        [&, s] { results[s] = RunStream(server, payloads[s], batch_size, deadline); });
  }
  for (std::thread& t : threads) t.join();
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  const double client_cpu = ProcessCpuSeconds() - client_cpu_start;
  const double server_cpu_end = OtherProcessCpuSeconds(absl::GetFlag(FLAGS_server_pid));

  uint64_t sent = 0, summarized = 0;
  for (const StreamResult& r : results) {
    if (!r.error.empty()) std::cerr << "rescale-load: " << r.error << "\n";
    sent += r.sent;
    summarized += r.accepted;
  }
  absl::StatusOr<uint64_t> after = ServerAccepted(*jobs, job);
  if (!after.ok()) {
    std::cerr << "rescale-load: GetJob: " << after.status().message() << "\n";
    return 1;
  }
  const uint64_t accepted = *after - *before;
  const double rate = accepted / elapsed;

  const double decode =
      DecodeRate(payloads[0], batch_size, std::min(2.0, std::max(0.5, seconds / 5)));
  const uint64_t lost = sent > accepted ? sent - accepted : 0;

  std::cout << absl::StrFormat("sent %d samples; server counted %d; stream summaries %d\n", sent,
                               accepted, summarized);
  std::cout << absl::StrFormat("client cpu %.2f s", client_cpu);
  if (server_cpu_start >= 0 && server_cpu_end >= 0) {
    std::cout << absl::StrFormat(
        "; server cpu %.2f s (%.0f ns/sample)", server_cpu_end - server_cpu_start,
        accepted ? (server_cpu_end - server_cpu_start) * 1e9 / accepted : 0.0);
  } else {
    std::cout << "; server cpu n/a (pass --server_pid)";
  }
  std::cout << "\n";
  std::cout << absl::StrFormat(
      "accepted %d in %.1f s: %.0f samples/s; decode %.0f samples/s; ratio %.2f; lost %d\n",
      accepted, elapsed, rate, decode, rate / decode, lost);
  return lost == 0 && summarized == accepted ? 0 : 1;
}
