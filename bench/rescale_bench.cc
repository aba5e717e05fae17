// rescale-bench: Google Benchmark scenarios for Rescale's hot paths.
//
// Scenarios (run `rescale-bench --benchmark_list_tests` for the full list):
//   BM_StoreIngest/threads:{1,2}         lock-free MetricsStore, batches of
//                                        1000 samples sharing job, pod and
//                                        size; each thread its own job
//   BM_StoreIngestSharedJob/threads:{1,2} same, all threads on one job
//                                        (different pods): contended cells
//   BM_StoreIngestWithSteps/threads:{1,2} as BM_StoreIngest, each sample
//                                        with a fresh `step` (de-duplication)
//   BM_MutexStoreIngest/...               the same two workloads on the
//                                        std::mutex + unordered_map baseline
//                                        (bench/mutex_store.h)
//   BM_StoreMemory                        bytes allocated per job, per
//                                        (job, size) and per pod, counted by
//                                        this binary's operator new
//   BM_BoardPublish/<jobs>                RecommendationBoard::Publish of
//                                        unchanged decisions, one watcher
//   BM_ModelFit/<sizes>                   ThroughputModel::Fit of 1, 3 or 6
//                                        observed sizes; time per fit
//   BM_ClusterPlan..., the planner's:     see bench/planner_bench.cc
//   BM_EngineReplan/<jobs>/<changed %>/<4th size>
//                                        DecisionEngine::Replan (fit, policy,
//                                        plan, publish) of jobs measured at
//                                        three sizes (four when <4th size> is
//                                        1), after fresh samples for
//                                        <changed %> of them
//   BM_EngineReplanTypes/<jobs>/<changed %>
//                                        the same on three GPU types (see
//                                        bench/engine_types_bench.cc)
//   BM_StatePutJob/<backend>              a durable job write (what
//                                         RegisterJob and ReportApplied wait
//                                         for), with p50/p99/max counters;
//                                         backend 0 = a SQLite file, 1 = a
//                                         one-member etcd on loopback (fenced
//                                         on the leader's lease)
//   BM_StateCheckpoint/<jobs>/<backend>   a checkpoint of <jobs> jobs'
//                                         measurements (three sizes each), in
//                                         the writes the engine makes
// Counters: ns_per_sample is wall time per sample per thread; with 2 threads
// the aggregate rate is items_per_second.
// Run: make bench, or ./build/rescale-bench --benchmark_filter=Ingest
#include <benchmark/benchmark.h>
#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <new>
#include <random>
#include <string>
#include <vector>

#include "bench/mutex_store.h"
#include "server/etcd/etcd_client.h"
#include "server/etcd/etcd_state_store.h"
// The etcd backend is started the way the tests start it.
#include "rescale/clock.h"
#include "rescale/decision_engine.h"
#include "rescale/metrics_store.h"
#include "rescale/recommendation_board.h"
#include "rescale/state_store.h"
#include "rescale/throughput_model.h"
#include "tests/child_process.h"

// ---- allocation accounting (for BM_StoreMemory) -------------------------------
// Counted only while BM_StoreMemory runs (g_counting): the other benchmarks
// measure code that allocates, and rescaled pays no such bookkeeping.
namespace {
std::atomic<int64_t> g_live_bytes{0};
std::atomic<bool> g_counting{false};
}  // namespace

void* operator new(size_t size) {
  void* p = std::malloc(size == 0 ? 1 : size);
  if (p == nullptr) throw std::bad_alloc();
  if (g_counting.load(std::memory_order_relaxed)) {
    g_live_bytes.fetch_add(static_cast<int64_t>(malloc_usable_size(p)), std::memory_order_relaxed);
  }
  return p;
}
void operator delete(void* p) noexcept {
  if (p == nullptr) return;
  if (g_counting.load(std::memory_order_relaxed)) {
    g_live_bytes.fetch_sub(static_cast<int64_t>(malloc_usable_size(p)), std::memory_order_relaxed);
  }
  std::free(p);
}
void operator delete(void* p, size_t) noexcept { operator delete(p); }
void* operator new[](size_t size) { return operator new(size); }
void operator delete[](void* p) noexcept { operator delete(p); }
void operator delete[](void* p, size_t) noexcept { operator delete(p); }

namespace {

constexpr int kBatch = 1000;
const absl::Time kNow = absl::FromUnixSeconds(1'700'000'000);

struct Workload {
  std::string job_id;
  std::string pod;
  std::vector<rescale::StepSample> batch;
};

Workload MakeWorkload(const std::string& job_id, const std::string& pod) {
  Workload w{job_id, pod, std::vector<rescale::StepSample>(kBatch)};
  for (int i = 0; i < kBatch; ++i) {
    rescale::StepSample& s = w.batch[i];
    s.job_id = w.job_id;
    s.pod = w.pod;
    s.world_size = 8;
    s.step_seconds = 0.25 + 0.001 * (i % 7);
  }
  return w;
}

std::string JobFor(const benchmark::State& state, bool shared) {
  return shared ? "bench/shared" : "bench/job-" + std::to_string(state.thread_index());
}

rescale::MetricsStore& LockFreeStore() {
  static rescale::MetricsStore* store = [] {
    auto* s = new rescale::MetricsStore();
    for (int t = 0; t < 8; ++t) (void)s->AddJob("bench/job-" + std::to_string(t), 64, 32);
    (void)s->AddJob("bench/shared", 64, 32);
    return s;
  }();
  return *store;
}

rescale::bench::MutexStore& BaselineStore() {
  static rescale::bench::MutexStore* store = [] {
    auto* s = new rescale::bench::MutexStore();
    for (int t = 0; t < 8; ++t) s->AddJob("bench/job-" + std::to_string(t), 64, 32);
    s->AddJob("bench/shared", 64, 32);
    return s;
  }();
  return *store;
}

void Report(benchmark::State& state) {
  const double samples = static_cast<double>(state.iterations()) * kBatch;
  state.SetItemsProcessed(static_cast<int64_t>(samples));
  state.counters["ns_per_sample"] =
      benchmark::Counter(samples / 1e9, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

template <bool kShared>
void BM_StoreIngest(benchmark::State& state) {
  Workload w = MakeWorkload(JobFor(state, kShared), "pod-" + std::to_string(state.thread_index()));
  rescale::MetricsStore& store = LockFreeStore();
  for (auto _ : state) {
    rescale::IngestResult r = store.Ingest(w.batch, kNow);
    if (r.accepted != kBatch) state.SkipWithError("samples rejected");
  }
  Report(state);
}
BENCHMARK_TEMPLATE(BM_StoreIngest, false)
    ->Name("BM_StoreIngest")
    ->Threads(1)
    ->Threads(2)
    ->UseRealTime();
BENCHMARK_TEMPLATE(BM_StoreIngest, true)
    ->Name("BM_StoreIngestSharedJob")
    ->Threads(1)
    ->Threads(2)
    ->UseRealTime();

// Samples carrying a `step`, so each goes through the per-pod de-duplication
// CAS. Every iteration renumbers the batch with fresh increasing steps (part
// of the measured time, well under 1 ns per sample) so all are accepted.
void BM_StoreIngestWithSteps(benchmark::State& state) {
  Workload w =
      MakeWorkload(JobFor(state, false), "steps-pod-" + std::to_string(state.thread_index()));
  rescale::MetricsStore& store = LockFreeStore();
  // The store outlives a run and the framework runs a benchmark several
  // times: each thread's pod continues where its last run stopped.
  static uint64_t next_step[8];
  uint64_t next = next_step[state.thread_index()];
  for (auto _ : state) {
    for (rescale::StepSample& s : w.batch) s.step = next++;
    rescale::IngestResult r = store.Ingest(w.batch, kNow);
    if (r.accepted != kBatch) state.SkipWithError("samples rejected or de-duplicated");
  }
  next_step[state.thread_index()] = next;
  Report(state);
}
BENCHMARK(BM_StoreIngestWithSteps)->Threads(1)->Threads(2)->UseRealTime();

template <bool kShared>
void BM_MutexStoreIngest(benchmark::State& state) {
  Workload w = MakeWorkload(JobFor(state, kShared), "pod-" + std::to_string(state.thread_index()));
  rescale::bench::MutexStore& store = BaselineStore();
  const int64_t now_ns = absl::ToUnixNanos(kNow);
  for (auto _ : state) {
    if (store.Ingest(w.batch, now_ns) != kBatch) state.SkipWithError("samples rejected");
  }
  Report(state);
}
BENCHMARK_TEMPLATE(BM_MutexStoreIngest, false)
    ->Name("BM_MutexStoreIngest")
    ->Threads(1)
    ->Threads(2)
    ->UseRealTime();
BENCHMARK_TEMPLATE(BM_MutexStoreIngest, true)
    ->Name("BM_MutexStoreIngestSharedJob")
    ->Threads(1)
    ->Threads(2)
    ->UseRealTime();

// Allocated bytes per job, per (job, size) and per pod, measured by the
// operator new above: registering jobs, then adding sizes, then pods.
void BM_StoreMemory(benchmark::State& state) {
  constexpr int kJobs = 200, kSizes = 8, kPods = 64;
  double per_job = 0, per_size = 0, per_pod = 0;
  for (auto _ : state) {
    // From before the store exists, so nothing freed below was allocated
    // uncounted.
    g_counting.store(true);
    rescale::MetricsStore store;
    std::vector<std::string> ids;
    for (int j = 0; j < kJobs; ++j) ids.push_back("mem/job-" + std::to_string(j));
    std::vector<std::string> pods;
    for (int p = 0; p < kPods; ++p) pods.push_back("trainer-abcdef-worker-" + std::to_string(p));
    store.Tick(kNow);  // reclaim the empty table
    const int64_t base = g_live_bytes.load();
    for (const std::string& id : ids) (void)store.AddJob(id, 16, 32);
    store.Tick(kNow);  // free the table copies registration retired
    const int64_t after_jobs = g_live_bytes.load();
    std::vector<rescale::StepSample> one(1);
    for (const std::string& id : ids) {
      for (int size = 1; size <= kSizes; ++size) {
        one[0] = {id,
                  pods[0],
                  static_cast<uint32_t>(size),
                  0.5,
                  0,
                  0,
                  std::nullopt,
                  std::nullopt,
                  std::nullopt,
                  0,
                  {}};
        store.Ingest(one, kNow);
      }
    }
    const int64_t after_sizes = g_live_bytes.load();
    for (const std::string& id : ids) {
      for (int p = 1; p < kPods; ++p) {
        one[0] = {id, pods[p], 1, 0.5, 0, 0, std::nullopt, std::nullopt, std::nullopt, 0, {}};
        store.Ingest(one, kNow);
      }
    }
    const int64_t after_pods = g_live_bytes.load();
    g_counting.store(false);
    per_job = double(after_jobs - base) / kJobs;
    per_size = double(after_sizes - after_jobs - kJobs * 0) / (kJobs * kSizes);
    per_pod = double(after_pods - after_sizes) / (kJobs * (kPods - 1));
  }
  state.counters["bytes_per_job"] = per_job;
  state.counters["bytes_per_job_size"] = per_size;
  state.counters["bytes_per_pod"] = per_pod;
}
BENCHMARK(BM_StoreMemory)->Iterations(1)->Unit(benchmark::kMillisecond);

// MetricsStore::Tick as the engine calls it, before every plan, once a
// second, on a store of `jobs` jobs with two pods each whose agents report
// every 290 s, staggered (so some pod comes due every second but none goes
// stale). Full passes over every job come once a window period (100 s);
// the ticks between them visit only the jobs that came due.
void BM_StoreTick(benchmark::State& state) {
  const int jobs = static_cast<int>(state.range(0));
  rescale::MetricsStore store;
  std::vector<std::string> ids, pods, other_pods;  // samples view them
  for (int j = 0; j < jobs; ++j) {
    ids.push_back("tick/job-" + std::to_string(j));
    pods.push_back(ids.back() + "-worker-0");
    other_pods.push_back(ids.back() + "-worker-1");
    (void)store.AddJob(ids.back(), 16, 32);
  }
  constexpr int kRefreshSeconds = 290;
  std::vector<rescale::StepSample> batch(2);
  auto refresh = [&](int j, absl::Time t) {
    batch[0] = {ids[j], pods[j], 1, 0.5, 0, 0, std::nullopt, std::nullopt, std::nullopt, 0, {}};
    batch[1] = {ids[j],       other_pods[j], 1, 0.5, 0, 0, std::nullopt,
                std::nullopt, std::nullopt,  0, {}};
    store.Ingest(batch, t);
  };
  absl::Time now = kNow;
  for (int j = 0; j < jobs; ++j) refresh(j, now - absl::Seconds(j % kRefreshSeconds));
  store.Tick(now);
  int second = 0;
  for (auto _ : state) {
    state.PauseTiming();
    now += absl::Seconds(1);
    ++second;
    for (int j = second % kRefreshSeconds; j < jobs; j += kRefreshSeconds) refresh(j, now);
    state.ResumeTiming();
    store.Tick(now);
  }
  state.counters["pods"] = 2.0 * jobs;
}
BENCHMARK(BM_StoreTick)->Arg(10000)->Unit(benchmark::kMicrosecond);

void BM_BoardPublish(benchmark::State& state) {
  rescale::RecommendationBoard board;
  std::vector<rescale::Recommendation> decisions(state.range(0));
  for (size_t i = 0; i < decisions.size(); ++i) {
    decisions[i].job_id = "ns/job-" + std::to_string(i);
    decisions[i].replicas = 2;
  }
  board.Publish(decisions);
  auto watcher = board.Subscribe().value();
  for (auto _ : state) {
    benchmark::DoNotOptimize(board.Publish(decisions));
  }
  board.Unsubscribe(watcher);
}
BENCHMARK(BM_BoardPublish)->Arg(100)->Arg(1000)->Unit(benchmark::kMicrosecond);

// ThroughputModel::Fit over 1, 3 or 6 observed sizes of a ring all-reduce
// law (what the decision engine refits per job per decision); time is per fit.
void BM_ModelFit(benchmark::State& state) {
  static constexpr uint32_t kSizes[] = {4, 1, 2, 3, 6, 8};
  std::vector<rescale::Observation> observations;
  for (int i = 0; i < state.range(0); ++i) {
    const double n = kSizes[i];
    rescale::Observation o;
    o.replicas = kSizes[i];
    o.step_seconds = 0.2 + 0.1 * (n - 1) / n + 0.004 * (n - 1);
    o.spread_seconds = 0.02 * o.step_seconds;
    o.sample_count = 50;
    o.mean_batch = 32;
    o.age_seconds = 10.0 * i;
    observations.push_back(o);
  }
  for (auto _ : state) {
    benchmark::DoNotOptimize(rescale::ThroughputModel::Fit(observations, {}));
  }
}
BENCHMARK(BM_ModelFit)->Arg(1)->Arg(3)->Arg(6)->Unit(benchmark::kMicrosecond);

// An engine as rescaled holds it after an adapter registered `jobs` jobs
// (min 1, max 16, 10 GPUs per job of capacity) and their agents reported
// 20 samples from two pods at each of three sizes, the cluster applying the
// first plan. Built with the plan timer on a ManualClock that never reaches
// a window, so registering and reporting cost one plan each, not one per
// call.
struct EngineFixture {
  rescale::ManualClock clock;
  std::unique_ptr<rescale::DecisionEngine> engine;
  std::vector<std::string> ids;
  std::vector<uint32_t> running;

  explicit EngineFixture(int jobs) {
    rescale::EngineOptions options;
    options.max_jobs = jobs;
    options.capacity_gpus = static_cast<uint32_t>(10 * jobs);
    engine = rescale::DecisionEngine::Create(options, &clock).value();
    engine->StartTimer();
    for (int i = 0; i < jobs; ++i) {
      rescale::JobSpec spec;
      spec.job_id = "ns/job-" + std::to_string(i);
      spec.min_replicas = 1;
      spec.max_replicas = 16;
      spec.local_batch_size = 32;
      spec.restart_cost_seconds = 30;
      ids.push_back(spec.job_id);
      if (!engine->RegisterJob(spec).ok()) std::abort();
    }
    for (int i = 0; i < jobs; ++i) {
      for (uint32_t n : {1u, 2u, 4u}) Measure(i, n, 20);
    }
    engine->StopTimer();  // runs the pending plan
    engine->StartTimer();
    for (const rescale::Recommendation& rec : engine->ListRecommendations()) {
      if (!engine->ReportApplied(rec.job_id, rec.replicas, rec.suspend, rec.generation).ok())
        std::abort();
    }
    engine->StopTimer();
    running.assign(jobs, 0);
    for (int i = 0; i < jobs; ++i) {
      running[i] = engine->GetRecommendation(ids[i]).value().replicas;
    }
  }

  // `count` samples of job i at n replicas from two pods; a ring all-reduce
  // law with a per-job spread of sync costs.
  void Measure(int i, uint32_t n, int count) {
    std::vector<rescale::StepSample> batch(count);
    const double sync = 0.01 + 0.002 * (i % 17);
    for (int k = 0; k < count; ++k) {
      rescale::StepSample& s = batch[k];
      s.job_id = ids[i];
      s.pod = ids[i] + (k % 2 ? "-worker-1" : "-worker-0");
      s.world_size = n;
      s.step_seconds = 0.2 + sync * (n - 1) + 0.001 * (k % 5);
    }
    engine->Ingest(batch);
  }
};

// A full replan (every job refitted, its policy run, the planner, the
// board) after `changed %` of the jobs got fresh samples at the size they
// run; time per replan. The targets: 10,000 jobs <= 100 ms with
// every job fresh, <= 20 ms with 1%.
//
// Each case has its own engine, so its result does not depend on which
// cases ran before it. The third argument, when 1, first measures every job
// at the size it runs and plans once: a fourth measured size per job, which
// gives the planner about half again as many curve segments to weigh (the
// state the 100% case is in after its first iteration).
void BM_EngineReplan(benchmark::State& state) {
  const int jobs = static_cast<int>(state.range(0));
  static std::map<std::vector<int64_t>, std::unique_ptr<EngineFixture>> fixtures;
  std::unique_ptr<EngineFixture>& fixture =
      fixtures[{state.range(0), state.range(1), state.range(2)}];
  if (fixture == nullptr) {
    fixture = std::make_unique<EngineFixture>(jobs);
    if (state.range(2) == 1) {
      fixture->clock.Advance(absl::Seconds(1));
      for (int i = 0; i < jobs; ++i)
        fixture->Measure(i, std::max<uint32_t>(fixture->running[i], 1), 2);
      fixture->engine->Replan();
    }
  }
  const int changed = std::max<int>(1, jobs * static_cast<int>(state.range(1)) / 100);
  int next = 0;
  for (auto _ : state) {
    state.PauseTiming();
    fixture->clock.Advance(absl::Seconds(1));
    for (int k = 0; k < changed; ++k, next = (next + 1) % jobs) {
      fixture->Measure(next, std::max<uint32_t>(fixture->running[next], 1), 2);
    }
    state.ResumeTiming();
    fixture->engine->Replan();
  }
  state.counters["changed_jobs"] = changed;
}
BENCHMARK(BM_EngineReplan)
    ->Args({1000, 100, 0})
    ->Args({1000, 1, 0})
    ->Args({10000, 100, 0})
    ->Args({10000, 1, 0})
    ->Args({10000, 1, 1})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// A state store in a fresh temporary directory, removed at the end: a SQLite
// file (backend 0), or a one-member etcd on a free loopback port (backend 1,
// Debian's /usr/bin/etcd, started here as the tests start it) with this
// process as the elected leader, so every write is fenced as rescaled's are.
struct StateBackend {
  std::string dir;
  std::unique_ptr<rescale::testing::ChildProcess> etcd;
  std::shared_ptr<rescale::StateStore> store;

  explicit StateBackend(int64_t backend) {
    std::string pattern = std::filesystem::temp_directory_path() / "rescale-bench-XXXXXX";
    dir = mkdtemp(pattern.data());
    if (backend == 0) {
      store = rescale::OpenStateStore("sqlite:" + dir + "/state.db").value();
      return;
    }
    const int client_port = rescale::testing::FreeLoopbackPort();
    const int peer_port = rescale::testing::FreeLoopbackPort();
    const std::string client = "http://127.0.0.1:" + std::to_string(client_port);
    const std::string peer = "http://127.0.0.1:" + std::to_string(peer_port);
    etcd = rescale::testing::ChildProcess::Start(
               {"/usr/bin/etcd", "--name=bench", "--data-dir=" + dir + "/etcd",
                "--listen-client-urls=" + client, "--advertise-client-urls=" + client,
                "--listen-peer-urls=" + peer, "--initial-advertise-peer-urls=" + peer,
                "--initial-cluster=bench=" + peer})
               .value();
    if (!etcd->WaitForLine("ready to serve client requests", absl::Seconds(30))) std::abort();
    const std::string endpoint = "127.0.0.1:" + std::to_string(client_port);
    auto client_api =
        std::make_shared<rescale::server::EtcdClient>(std::vector<std::string>{endpoint});
    std::shared_ptr<rescale::server::EtcdStateStore> etcd_store =
        rescale::server::EtcdStateStore::Open("etcd://" + endpoint + "/bench", client_api, "/bench")
            .value();
    const int64_t lease = client_api->LeaseGrant(absl::Seconds(60)).value();
    grpc::ClientContext campaign;
    const v3electionpb::LeaderKey leader =
        client_api->Campaign(etcd_store->election_name(), lease, "bench", &campaign).value();
    etcd_store->SetFence(rescale::server::EtcdStateStore::Fence{leader.key(), lease});
    store = etcd_store;
  }
  ~StateBackend() {
    store.reset();
    etcd.reset();
    std::filesystem::remove_all(dir);
  }
};

const char* BackendName(int64_t backend) { return backend == 0 ? "sqlite" : "etcd"; }

// Latency percentiles of the iterations, as counters (milliseconds).
void ReportPercentiles(benchmark::State& state, std::vector<double>& ms) {
  if (ms.empty()) return;
  std::sort(ms.begin(), ms.end());
  auto at = [&](double q) {
    return ms[std::min(ms.size() - 1, static_cast<size_t>(q * ms.size()))];
  };
  state.counters["p50_ms"] = at(0.50);
  state.counters["p99_ms"] = at(0.99);
  state.counters["max_ms"] = ms.back();
}

void BM_StatePutJob(benchmark::State& state) {
  StateBackend backend(state.range(0));
  state.SetLabel(BackendName(state.range(0)));
  rescale::StoredJob job;
  job.spec.job_id = "ns/job";
  job.spec.min_replicas = 1;
  job.spec.max_replicas = 16;
  job.has_applied = true;
  std::vector<double> ms;
  for (auto _ : state) {
    ++job.current_replicas;
    const auto started = std::chrono::steady_clock::now();
    if (!backend.store->PutJob(job).ok()) std::abort();
    ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started)
            .count());
  }
  ReportPercentiles(state, ms);
}
BENCHMARK(BM_StatePutJob)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_StateCheckpoint(benchmark::State& state) {
  const int jobs = static_cast<int>(state.range(0));
  StateBackend backend(state.range(1));
  state.SetLabel(BackendName(state.range(1)));
  std::vector<rescale::StoredMeasurements> all(jobs);
  for (int i = 0; i < jobs; ++i) {
    all[i].job_id = "ns/job-" + std::to_string(i);
    for (uint32_t n : {1u, 2u, 4u}) {
      rescale::SizeStats s;
      s.world_size = n;
      s.sample_count = s.lifetime_count = 100 + i % 7;
      s.step_seconds = 0.2 + 0.01 * n;
      s.spread_seconds = 0.004;
      s.mean_batch = 32;
      s.steps_processed = 1000;
      s.samples_processed = 32'000 * n;
      s.samples_per_second = n * 32 / s.step_seconds;
      s.from_window = true;
      s.last_sample_at = absl::FromUnixSeconds(1'700'000'000 + i);
      all[i].sizes.push_back(s);
    }
  }
  // As DecisionEngine's checkpoint hands them to the store.
  const int per_write = static_cast<int>(backend.store->checkpoint_jobs_per_write());
  for (auto _ : state) {
    for (int first = 0; first < jobs; first += per_write) {
      const int count = std::min(per_write, jobs - first);
      if (!backend.store->PutMeasurements(std::span(all).subspan(first, count)).ok()) std::abort();
    }
  }
  state.counters["seconds_per_job"] = benchmark::Counter(
      jobs, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_StateCheckpoint)
    ->Args({10000, 0})
    ->Args({10000, 1})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
