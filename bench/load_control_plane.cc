// rescale-load --jobs N: the control plane of a running rescaled at N jobs.
//
// Registration, as a cluster produces it after rescale-adapter starts: the
// adapter (this thread) registers bench/cp-0 ... bench/cp-N-1 one by one
// (min 1, max 16) and reports what each runs (ReportApplied, 4 replicas);
// each job's two pods report samples at three sizes as soon as the job is
// registered (ReportSamples, 10 samples per size), through --agents agents
// (threads with a connection each; agent k serves pod k % 2 of every
// (agents / 2)-th job: in a cluster every pod has its own agent, so this
// is fewer in parallel than real). Registration ends when the adapter
// and both agents are done. Meanwhile a reader on a third connection calls
// GetJob on registered jobs at --read_rate a second, as dashboards and
// rescalectl do (a reader without pause would compete for the 2 cores it
// measures). Then, for --read_seconds, applied resizes every 100 ms keep
// plans of all N jobs running while the reader goes on, and a
// ListRecommendations of all N is timed every half second.
//
// With --watchers W, W WatchRecommendations streams (callback reactors on
// one connection) then sync, capacity drops to one GPU per job, and the
// time until every stream has every job's new state (one replica) is
// reported.
//
// Output: time to register all, RegisterJob p50 over the last 10% and p99
// over all, GetJob p50/p99/max per phase, ListRecommendations, the server's
// resident memory per job (VmRSS, with --server_pid), the watchers'
// convergence, and a table row in the format.
#include "bench/load_control_plane.h"

#include <grpcpp/create_channel.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "bench/latency.h"
#include "rescale/v1/rescale.grpc.pb.h"

namespace rescale::load {
namespace {

using rescale::bench::Quantile;

namespace v1 = rescale::v1;
using Clock = std::chrono::steady_clock;

constexpr char kJobPrefix[] = "bench/cp-";

std::string JobId(int i) { return kJobPrefix + std::to_string(i); }

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

double MillisecondsSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

std::shared_ptr<grpc::Channel> OwnChannel(const std::string& server) {
  // A connection of its own, as a separate process would have.
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(server, grpc::InsecureChannelCredentials(), args);
}

// Calls GetJob on the jobs registered so far at a fixed rate until `stop`;
// keeps each call's latency in the phase `phase` names (0 = during
// registration, 1 = while plans run).
struct Reader {
  std::atomic<bool> stop{false};
  std::atomic<int> registered{0};
  std::atomic<int> phase{0};
  std::vector<double> latencies[2];
  uint64_t errors = 0;

  void Run(const std::string& server, double rate) {
    auto jobs = v1::JobService::NewStub(OwnChannel(server));
    const auto period = std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(1.0 / std::max(rate, 1.0)));
    uint64_t next = 0;
    auto slot = Clock::now();
    while (!stop.load(std::memory_order_relaxed)) {
      slot += period;
      std::this_thread::sleep_until(slot);
      const int known = registered.load(std::memory_order_acquire);
      if (known == 0) continue;
      const int current_phase = phase.load(std::memory_order_relaxed);
      grpc::ClientContext context;
      v1::GetJobRequest request;
      request.set_job_id(JobId(static_cast<int>(next++ % known)));
      v1::Job response;
      const auto start = Clock::now();
      grpc::Status status = jobs->GetJob(&context, request, &response);
      latencies[current_phase].push_back(MillisecondsSince(start));
      errors += !status.ok();
      if (Clock::now() > slot + 10 * period) slot = Clock::now();  // fell behind: no burst
    }
  }
};

// An agent for pod `pod` of jobs first, first + stride, ...: samples at
// sizes 1, 2 and 4 for each, as soon as the adapter has registered it.
uint64_t RunAgent(const std::string& server, int pod, int first, int stride, int job_count,
                  const std::atomic<int>& registered) {
  auto metrics = v1::MetricsService::NewStub(OwnChannel(server));
  uint64_t failures = 0;
  const int64_t now_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  for (int i = first; i < job_count; i += stride) {
    while (registered.load(std::memory_order_acquire) <= i) std::this_thread::yield();
    const std::string id = JobId(i);
    for (uint32_t n : {1u, 2u, 4u}) {
      grpc::ClientContext context;
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
      failures += !metrics->ReportSamples(&context, batch, &summary).ok();
    }
  }
  return failures;
}

// What every watch stream has seen, and when all have converged.
struct WatchBoard {
  explicit WatchBoard(int watchers) : remaining_sync(watchers), remaining_converge(watchers) {}
  std::mutex mu;
  std::condition_variable cv;
  int remaining_sync;
  int remaining_converge;
  int remaining_done = 0;
  uint64_t events = 0;
  std::string error;
};

// A WatchRecommendations stream that counts the jobs whose newest state is
// `target` replicas; it reports to the board once it is synced and once all
// jobs are at the target.
class WatchStream final : public grpc::ClientReadReactor<v1::RecommendationEvent> {
 public:
  WatchStream(v1::RecommendationService::Stub& stub, WatchBoard& board, int job_count,
              uint32_t target)
      : board_(board), replicas_(job_count, 0), job_count_(job_count), target_(target) {
    stub.async()->WatchRecommendations(&context_, &request_, this);
    StartRead(&event_);
    StartCall();
  }
  void Cancel() { context_.TryCancel(); }

  void OnReadDone(bool ok) override {
    if (!ok) return;  // OnDone follows
    ++events_;
    if (event_.type() == v1::RecommendationEvent::SYNCED) {
      std::lock_guard<std::mutex> lock(board_.mu);
      if (--board_.remaining_sync == 0) board_.cv.notify_all();
    } else {
      int index = -1;
      const std::string& id = event_.recommendation().job_id();
      if (id.rfind(kJobPrefix, 0) == 0 &&
          absl::SimpleAtoi(id.substr(sizeof(kJobPrefix) - 1), &index) && index >= 0 &&
          index < job_count_) {
        const uint32_t replicas = event_.type() == v1::RecommendationEvent::DELETED
                                      ? 0
                                      : event_.recommendation().replicas();
        at_target_ += (replicas == target_) - (replicas_[index] == target_);
        replicas_[index] = replicas;
        if (at_target_ == job_count_ && !converged_) {
          converged_ = true;
          std::lock_guard<std::mutex> lock(board_.mu);
          if (--board_.remaining_converge == 0) board_.cv.notify_all();
        }
      }
    }
    StartRead(&event_);
  }

  void OnDone(const grpc::Status& status) override {
    std::lock_guard<std::mutex> lock(board_.mu);
    board_.events += events_;
    if (!status.ok() && status.error_code() != grpc::StatusCode::CANCELLED &&
        board_.error.empty()) {
      board_.error = status.error_message();
    }
    --board_.remaining_done;
    board_.cv.notify_all();
  }

 private:
  WatchBoard& board_;
  grpc::ClientContext context_;
  v1::WatchRecommendationsRequest request_;
  v1::RecommendationEvent event_;
  std::vector<uint32_t> replicas_;
  const int job_count_;
  const uint32_t target_;
  int at_target_ = 0;
  bool converged_ = false;
  uint64_t events_ = 0;
};

// Opens `watchers` streams, waits for them to sync, drops capacity to one
// GPU per job and returns the seconds until every stream has every job at
// one replica (negative: not within a minute).
double MeasureWatchers(const std::string& server, int job_count, int watchers,
                       v1::ClusterService::Stub& cluster, uint64_t& failures) {
  auto channel = OwnChannel(server);
  auto stub = v1::RecommendationService::NewStub(channel);
  WatchBoard board(watchers);
  board.remaining_done = watchers;
  std::vector<std::unique_ptr<WatchStream>> streams;
  for (int w = 0; w < watchers; ++w) {
    streams.push_back(std::make_unique<WatchStream>(*stub, board, job_count, 1));
  }
  double seconds = -1;
  {
    std::unique_lock<std::mutex> lock(board.mu);
    if (!board.cv.wait_for(lock, std::chrono::minutes(1),
                           [&] { return board.remaining_sync == 0 || !board.error.empty(); })) {
      std::cerr << "rescale-load: watchers did not sync within a minute\n";
    }
  }
  grpc::ClientContext context;
  v1::SetCapacityRequest request;
  request.set_total_gpus(static_cast<uint32_t>(job_count));
  v1::Cluster response;
  const auto start = Clock::now();
  failures += !cluster.SetCapacity(&context, request, &response).ok();
  {
    std::unique_lock<std::mutex> lock(board.mu);
    if (board.cv.wait_for(lock, std::chrono::minutes(1),
                          [&] { return board.remaining_converge == 0; })) {
      seconds = MillisecondsSince(start) / 1000;
    }
  }
  for (auto& stream : streams) stream->Cancel();
  std::unique_lock<std::mutex> lock(board.mu);
  board.cv.wait(lock, [&] { return board.remaining_done == 0; });
  if (!board.error.empty()) {
    std::cerr << "rescale-load: a watch failed: " << board.error << "\n";
    ++failures;
  }
  std::cout << absl::StrFormat(
      "%d watchers: %d events; every watcher had every job's new state "
      "%s\n",
      watchers, board.events,
      seconds < 0 ? "not within a minute" : absl::StrFormat("%.3f s after SetCapacity", seconds));
  return seconds;
}

}  // namespace

int RunControlPlane(const ControlPlaneOptions& options) {
  const int job_count = options.jobs;
  auto channel = OwnChannel(options.server);
  auto jobs = v1::JobService::NewStub(channel);
  auto recs = v1::RecommendationService::NewStub(channel);
  auto cluster = v1::ClusterService::NewStub(channel);
  const double rss_before = ResidentBytes(options.server_pid);

  Reader reader;
  std::thread reader_thread([&] { reader.Run(options.server, options.read_rate); });
  std::vector<double> register_ms;
  register_ms.reserve(job_count);
  uint64_t failures = 0;
  const auto start = Clock::now();
  const int agent_count = std::max(2, options.agents - options.agents % 2);
  std::vector<uint64_t> agent_failures(agent_count, 0);
  std::vector<std::thread> agents;
  for (int k = 0; k < agent_count; ++k) {
    agents.emplace_back([&, k] {
      agent_failures[k] =
          RunAgent(options.server, k % 2, k / 2, agent_count / 2, job_count, reader.registered);
    });
  }
  for (int i = 0; i < job_count; ++i) {
    const std::string id = JobId(i);
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
      if (failures++ == 0) {
        std::cerr << "rescale-load: RegisterJob " << id << ": " << status.error_message() << "\n";
      }
    }
    // Agents wait for this before they report (a failed job's samples are
    // counted as failures there).
    reader.registered.store(i + 1, std::memory_order_release);
    // What the cluster runs (applied out of band: generation 0).
    grpc::ClientContext applied_context;
    v1::ReportAppliedRequest applied;
    applied.set_job_id(id);
    applied.set_replicas(4);
    v1::ReportAppliedResponse applied_response;
    failures += !recs->ReportApplied(&applied_context, applied, &applied_response).ok();
  }
  for (std::thread& agent : agents) agent.join();
  for (uint64_t f : agent_failures) failures += f;
  const double register_seconds = MillisecondsSince(start) / 1000;

  // Plans of every job, kept coming while GetJob runs: a controller reports
  // a resize of one job (then back) every 100 ms, and every report asks for
  // a plan of all N. (SetCapacity would too, but its reply lists every
  // job's allocation: its own cost, not a plan's.)
  reader.phase.store(1, std::memory_order_relaxed);
  const auto read_until = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(options.read_seconds));
  std::vector<double> list_ms;
  size_t listed = 0;
  for (int round = 0; Clock::now() < read_until; ++round) {
    grpc::ClientContext context;
    v1::ReportAppliedRequest applied;
    applied.set_job_id(JobId((round / 2) % job_count));
    applied.set_replicas(round % 2 == 0 ? 5 : 4);
    v1::ReportAppliedResponse applied_response;
    failures += !recs->ReportApplied(&context, applied, &applied_response).ok();
    if (round % 5 == 2 ||
        (list_ms.empty() && Clock::now() + std::chrono::milliseconds(150) >= read_until)) {
      // Every half second: whether a plan is computing or committing then
      // is chance, as for a user's `rescalectl get recommendations`.
      grpc::ClientContext list_context;
      v1::ListRecommendationsRequest list;
      v1::ListRecommendationsResponse list_response;
      const auto list_start = Clock::now();
      failures += !recs->ListRecommendations(&list_context, list, &list_response).ok();
      list_ms.push_back(MillisecondsSince(list_start));
      listed = list_response.recommendations_size();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  reader.stop.store(true);
  reader_thread.join();
  const double rss_after = ResidentBytes(options.server_pid);

  const std::vector<double> last_tenth(register_ms.end() - register_ms.size() / 10,
                                       register_ms.end());
  // Which call was slowest: the first one also opens the connection.
  const size_t slowest = static_cast<size_t>(
      std::max_element(register_ms.begin(), register_ms.end()) - register_ms.begin());
  std::cout << absl::StrFormat(
      "jobs %d: registered in %.1f s; RegisterJob p50 (last 10%%) %.2f ms, p99 %.2f ms, max "
      "%.1f ms (call %d of %d)\n",
      job_count, register_seconds, Quantile(last_tenth, 0.5), Quantile(register_ms, 0.99),
      Quantile(register_ms, 1.0), slowest + 1, register_ms.size());
  for (int phase = 0; phase < 2; ++phase) {
    std::cout << absl::StrFormat(
        "GetJob %s: %d calls, p50 %.2f ms, p99 %.2f ms, max %.1f ms\n",
        phase == 0 ? "during registration" : "while plans run", reader.latencies[phase].size(),
        Quantile(reader.latencies[phase], 0.5), Quantile(reader.latencies[phase], 0.99),
        Quantile(reader.latencies[phase], 1.0));
  }
  std::cout << absl::StrFormat(
      "ListRecommendations of %d: %d calls, median %.1f ms, max %.1f ms (first %.1f ms)\n", listed,
      list_ms.size(), Quantile(list_ms, 0.5), Quantile(list_ms, 1.0),
      list_ms.empty() ? -1.0 : list_ms.front());
  if (rss_after >= 0) {
    std::cout << absl::StrFormat(
        "server resident memory %.0f MiB (%.0f MiB before; %.1f KiB per job)\n",
        rss_after / (1 << 20), rss_before / (1 << 20), rss_after / 1024 / job_count);
  }
  if (options.watchers > 0) {
    MeasureWatchers(options.server, job_count, options.watchers, *cluster, failures);
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

}  // namespace rescale::load
