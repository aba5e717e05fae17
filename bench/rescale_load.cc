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
// Control-plane mode, --jobs N: registers N jobs one by one as
// rescale-adapter does after it starts (bench/cp-0 ... bench/cp-N-1, min 1,
// max 16), each then getting samples at three sizes (ReportSamples, two
// pods) and a ReportApplied, while a second connection calls GetJob on
// registered jobs without pause. Then, for --read_seconds, capacity changes
// every 100 ms keep plans of all N jobs running while GetJob goes on, and
// one ListRecommendations of all N is timed. It reports the time to
// register all, RegisterJob p50 over the last 10% and p99 over all, GetJob
// p99 and maximum (during registration and while the plans run),
// ListRecommendations, and the server's resident memory (VmRSS, with
// --server_pid) per job:
//   rescale-load --jobs 10000 --server_pid $(pgrep rescaled)
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
#include "rescale/v1/rescale.grpc.pb.h"

ABSL_FLAG(std::string, server, "127.0.0.1:50051", "rescaled address");
ABSL_FLAG(double, seconds, 10, "how long to stream");
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

// One client stream on its own connection, through the generic stub so the
// pre-serialised bytes go out without re-encoding.
StreamResult RunStream(const std::string& server, const std::string& bytes, int batch_size,
                       Clock::time_point deadline) {
  StreamResult result;
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // a connection per stream
  auto channel = grpc::CreateCustomChannel(server, grpc::InsecureChannelCredentials(), args);
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

// Resident memory of another process in bytes, from /proc/PID/status; -1
// if unreadable.
double ResidentBytes(int pid) {
  if (pid <= 0) return -1;
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) * 1024;  // kB
  }
  return -1;
}

// Latencies in milliseconds; quantile q of them (0 when empty).
double Quantile(std::vector<double> ms, double q) {
  if (ms.empty()) return 0;
  std::sort(ms.begin(), ms.end());
  const size_t index = std::min(ms.size() - 1, static_cast<size_t>(q * (ms.size() - 1) + 0.5));
  return ms[index];
}

double MillisecondsSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// Calls GetJob on the jobs registered so far, one after another, on its own
// connection, until `stop`; keeps each call's latency in the phase `phase`
// names (0 = during registration, 1 = while plans run).
struct Reader {
  std::atomic<bool> stop{false};
  std::atomic<int> registered{0};
  std::atomic<int> phase{0};
  std::vector<double> latencies[2];
  uint64_t errors = 0;

  void Run(const std::string& server) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    auto channel = grpc::CreateCustomChannel(server, grpc::InsecureChannelCredentials(), args);
    auto jobs = v1::JobService::NewStub(channel);
    uint64_t next = 0;
    while (!stop.load(std::memory_order_relaxed)) {
      const int known = registered.load(std::memory_order_acquire);
      if (known == 0) {
        std::this_thread::yield();
        continue;
      }
      const int current_phase = phase.load(std::memory_order_relaxed);
      grpc::ClientContext context;
      v1::GetJobRequest request;
      request.set_job_id("bench/cp-" + std::to_string(next++ % known));
      v1::Job response;
      const auto start = Clock::now();
      grpc::Status status = jobs->GetJob(&context, request, &response);
      latencies[current_phase].push_back(MillisecondsSince(start));
      errors += !status.ok();
    }
  }
};

int RunControlPlane(const std::string& server, int job_count) {
  auto channel = grpc::CreateChannel(server, grpc::InsecureChannelCredentials());
  auto jobs = v1::JobService::NewStub(channel);
  auto metrics = v1::MetricsService::NewStub(channel);
  auto recs = v1::RecommendationService::NewStub(channel);
  auto cluster = v1::ClusterService::NewStub(channel);
  const int pid = absl::GetFlag(FLAGS_server_pid);
  const double rss_before = ResidentBytes(pid);

  Reader reader;
  std::thread reader_thread([&] { reader.Run(server); });
  std::vector<double> register_ms;
  register_ms.reserve(job_count);
  uint64_t failures = 0;
  const int64_t now_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  const auto start = Clock::now();
  for (int i = 0; i < job_count; ++i) {
    const std::string id = "bench/cp-" + std::to_string(i);
    grpc::ClientContext context;
    v1::RegisterJobRequest request;
    request.mutable_spec()->set_job_id(id);
    request.mutable_spec()->set_min_replicas(1);
    request.mutable_spec()->set_max_replicas(16);
    request.mutable_spec()->set_local_batch_size(32);
    v1::Job response;
    const auto call_start = Clock::now();
    grpc::Status status = jobs->RegisterJob(&context, request, &response);
    register_ms.push_back(MillisecondsSince(call_start));
    if (!status.ok() && status.error_code() != grpc::StatusCode::ALREADY_EXISTS) {
      if (failures++ == 0) std::cerr << "rescale-load: RegisterJob " << id << ": "
                                     << status.error_message() << "\n";
      continue;
    }
    reader.registered.store(i + 1, std::memory_order_release);
    // Samples at three sizes from two pods, as agents report them, then
    // what the cluster runs (applied out of band: generation 0).
    for (uint32_t n : {1u, 2u, 4u}) {
      for (int pod = 0; pod < 2; ++pod) {
        grpc::ClientContext sample_context;
        v1::SampleBatch batch;
        batch.set_job_id(id);
        batch.set_pod(id + "-worker-" + std::to_string(pod));
        batch.set_world_size(n);
        for (int k = 0; k < 10; ++k) {
          v1::StepSample* sample = batch.add_samples();
          sample->set_step_seconds(0.2 + 0.02 * (n - 1) + 0.001 * k);
          sample->set_timestamp_unix_nanos(now_ns - int64_t{10 - k} * 1'000'000);
        }
        v1::IngestSummary summary;
        failures += !metrics->ReportSamples(&sample_context, batch, &summary).ok();
      }
    }
    grpc::ClientContext applied_context;
    v1::ReportAppliedRequest applied;
    applied.set_job_id(id);
    applied.set_replicas(4);
    v1::ReportAppliedResponse applied_response;
    failures += !recs->ReportApplied(&applied_context, applied, &applied_response).ok();
  }
  const double register_seconds = MillisecondsSince(start) / 1000;

  // Plans of every job, kept coming by capacity changes, while GetJob runs.
  reader.phase.store(1, std::memory_order_relaxed);
  const auto read_until =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(absl::GetFlag(FLAGS_read_seconds)));
  double list_ms = -1;
  size_t listed = 0;
  for (int round = 0; Clock::now() < read_until; ++round) {
    grpc::ClientContext context;
    v1::SetCapacityRequest request;
    request.set_total_gpus(static_cast<uint32_t>(job_count * 8 + round % 2));
    v1::Cluster response;
    failures += !cluster->SetCapacity(&context, request, &response).ok();
    if (round == 2 || (listed == 0 && Clock::now() + std::chrono::milliseconds(150) >= read_until)) {
      grpc::ClientContext list_context;
      v1::ListRecommendationsRequest list;
      v1::ListRecommendationsResponse list_response;
      const auto list_start = Clock::now();
      failures += !recs->ListRecommendations(&list_context, list, &list_response).ok();
      list_ms = MillisecondsSince(list_start);
      listed = list_response.recommendations_size();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  reader.stop.store(true);
  reader_thread.join();
  const double rss_after = ResidentBytes(pid);

  const std::vector<double> last_tenth(register_ms.end() - register_ms.size() / 10,
                                       register_ms.end());
  std::cout << absl::StrFormat("jobs %d: registered in %.1f s; RegisterJob p50 (last 10%%) %.2f ms, "
                               "p99 %.2f ms, max %.1f ms\n",
                               job_count, register_seconds, Quantile(last_tenth, 0.5),
                               Quantile(register_ms, 0.99), Quantile(register_ms, 1.0));
  for (int phase = 0; phase < 2; ++phase) {
    std::cout << absl::StrFormat("GetJob %s: %d calls, p50 %.2f ms, p99 %.2f ms, max %.1f ms\n",
                                 phase == 0 ? "during registration" : "while plans run",
                                 reader.latencies[phase].size(),
                                 Quantile(reader.latencies[phase], 0.5),
                                 Quantile(reader.latencies[phase], 0.99),
                                 Quantile(reader.latencies[phase], 1.0));
  }
  std::cout << absl::StrFormat("ListRecommendations of %d: %.1f ms\n", listed, list_ms);
  if (rss_after >= 0) {
    std::cout << absl::StrFormat("server resident memory %.0f MiB (%.0f MiB before; %.1f KiB per "
                                 "job)\n",
                                 rss_after / (1 << 20), rss_before / (1 << 20),
                                 rss_after / 1024 / job_count);
  }
  std::cout << absl::StrFormat(
      "| %d | %.1f s | %.2f ms | %.2f ms | %.1f ms | %.0f MiB |\n", job_count, register_seconds,
      Quantile(last_tenth, 0.5), Quantile(register_ms, 0.99),
      std::max(Quantile(reader.latencies[0], 1.0), Quantile(reader.latencies[1], 1.0)),
      rss_after / (1 << 20));
  if (failures + reader.errors > 0) {
    std::cerr << "rescale-load: " << failures + reader.errors << " calls failed\n";
    return 1;
  }
  return 0;
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
  if (absl::GetFlag(FLAGS_jobs) > 0) return RunControlPlane(server, absl::GetFlag(FLAGS_jobs));
  const std::string job = absl::GetFlag(FLAGS_job);
  const int streams = absl::GetFlag(FLAGS_streams);
  const int batch_size = absl::GetFlag(FLAGS_batch);
  const double seconds = absl::GetFlag(FLAGS_seconds);
  if (streams < 1 || batch_size < 1 || seconds <= 0) {
    std::cerr << "rescale-load: --streams, --batch and --seconds must be positive\n";
    return 2;
  }

  auto channel = grpc::CreateChannel(server, grpc::InsecureChannelCredentials());
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
