// rescale-durable-bench: durable RegisterJob against SQLite with 1, 8 and 32
// concurrent clients, through the engine's public API (as rescaled's
// handlers call it, the plan timer running): p50, p99 and calls/s per
// case, and the latency of GetJob read meanwhile by one more thread.
//
// It uses only DecisionEngine's public API, so the same file builds against
// an older engine to compare the two in one run (docs/development.md says
// how). Each case has a fresh engine and state file in a temporary
// directory, runs for --seconds, and registers new jobs only.
//
//   rescale-durable-bench [--clients=1,8,32] [--seconds=3] [--state=sqlite|memory]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "bench/latency.h"
#include "rescale/decision_engine.h"
#include "rescale/state_store.h"

namespace {

using Clock = std::chrono::steady_clock;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

struct Latencies {
  std::vector<double> ms;
  double At(double q) const { return rescale::bench::Quantile(ms, q); }
};

struct CaseResult {
  Latencies writes;
  Latencies reads;
  double seconds = 0;
  uint64_t plans = 0;
};

CaseResult RunCase(int clients, double seconds, const std::string& backend) {
  std::string pattern = std::filesystem::temp_directory_path() / "rescale-durable-XXXXXX";
  const std::string dir = mkdtemp(pattern.data());
  rescale::EngineOptions options;
  options.max_jobs = 1'000'000;
  options.capacity_gpus = 100'000;
  options.state =
      rescale::OpenStateStore(backend == "sqlite" ? "sqlite:" + dir + "/state.db" : "memory")
          .value();
  auto engine = rescale::DecisionEngine::Create(options).value();
  engine->StartTimer();

  std::atomic<bool> stop{false};
  std::atomic<int> registered{0};
  std::vector<Latencies> per_client(clients);
  std::vector<std::thread> threads;
  const auto started = Clock::now();
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      for (int i = 0; !stop.load(std::memory_order_relaxed); ++i) {
        rescale::JobSpec spec;
        spec.job_id = absl::StrCat("bench/c", c, "-", i);
        spec.min_replicas = 1;
        spec.max_replicas = 8;
        const auto t0 = Clock::now();
        if (!engine->RegisterJob(std::move(spec)).ok()) std::abort();
        per_client[c].ms.push_back(Ms(Clock::now() - t0));
        registered.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }
  // One reader: GetJob of jobs client 0 registered, as a dashboard would,
  // paced at 500 calls/s (a reader without pause would take one of the
  // cores the writers are measured on).
  Latencies reads;
  std::thread reader([&] {
    auto next = Clock::now();
    for (int i = 0; !stop.load(std::memory_order_relaxed); ++i) {
      next += std::chrono::microseconds(2000);
      std::this_thread::sleep_until(next);  // pacing, not synchronisation
      // Client 0's first two jobs are registered once every client has
      // registered two or more.
      if (registered.load(std::memory_order_relaxed) < clients * 2) continue;
      const auto t0 = Clock::now();
      (void)engine->GetJob(absl::StrCat("bench/c0-", i % 2));
      reads.ms.push_back(Ms(Clock::now() - t0));
    }
  });
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));  // the measurement window
  stop = true;
  for (std::thread& t : threads) t.join();
  reader.join();
  CaseResult result;
  result.seconds = std::chrono::duration<double>(Clock::now() - started).count();
  for (Latencies& l : per_client)
    result.writes.ms.insert(result.writes.ms.end(), l.ms.begin(), l.ms.end());
  result.reads = std::move(reads);
  result.plans = engine->GetCluster().plans_run;
  engine.reset();
  std::filesystem::remove_all(dir);
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> clients = {1, 8, 32};
  double seconds = 3;
  std::string backend = "sqlite";
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--clients=", 0) == 0) {
      clients.clear();
      for (absl::string_view n : absl::StrSplit(arg.substr(10), ',')) {
        int v = 0;
        if (!absl::SimpleAtoi(n, &v) || v < 1) {
          std::fprintf(stderr, "--clients: a list of positive counts, got %s\n", arg.c_str());
          return 2;
        }
        clients.push_back(v);
      }
    } else if (arg.rfind("--seconds=", 0) == 0) {
      if (!absl::SimpleAtod(arg.substr(10), &seconds) || seconds <= 0) {
        std::fprintf(stderr, "--seconds must be positive, got %s\n", arg.c_str());
        return 2;
      }
    } else if (arg.rfind("--state=", 0) == 0) {
      backend = arg.substr(8);
      if (backend != "sqlite" && backend != "memory") {
        std::fprintf(stderr, "--state must be sqlite or memory, got %s\n", backend.c_str());
        return 2;
      }
    } else {
      std::fprintf(stderr,
                   "usage: rescale-durable-bench [--clients=1,8,32] [--seconds=3] "
                   "[--state=sqlite|memory]\n");
      return 2;
    }
  }
  std::printf("%-8s %-7s %10s %10s %10s %12s %12s %12s\n", "STATE", "CLIENTS", "CALLS/S", "P50_MS",
              "P99_MS", "GET_P99_MS", "GET_MAX_MS", "CALLS");
  for (int n : clients) {
    CaseResult r = RunCase(n, seconds, backend);
    const double rate = static_cast<double>(r.writes.ms.size()) / r.seconds;
    std::printf("%-8s %-7d %10.0f %10.3f %10.3f %12.3f %12.3f %12zu %8lu\n", backend.c_str(), n,
                rate, r.writes.At(0.5), r.writes.At(0.99), r.reads.At(0.99), r.reads.At(1.0),
                r.writes.ms.size(), static_cast<unsigned long>(r.plans));
    std::fflush(stdout);
  }
  return 0;
}
