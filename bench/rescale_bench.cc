// rescale-bench: Google Benchmark scenarios for Rescale's hot paths.
//
// Scenarios (run `rescale-bench --benchmark_list_tests` for the full list):
//   BM_StoreIngest/threads:{1,2}         lock-free MetricsStore, batches of
//                                        1000 samples sharing job, pod and
//                                        size; each thread its own job
//   BM_StoreIngestSharedJob/threads:{1,2} same, all threads on one job
//                                        (different pods): contended cells
//   BM_MutexStoreIngest/...               the same two workloads on the
//                                        std::mutex + unordered_map baseline
//                                        (bench/mutex_store.h)
//   BM_StoreMemory                        bytes allocated per job, per
//                                        (job, size) and per pod, counted by
//                                        this binary's operator new
//   BM_StaticPlan/<jobs>                  StaticPlanner::Plan, 10 GPUs per job
//   BM_BoardPublish/<jobs>                RecommendationBoard::Publish of
//                                        unchanged decisions, one watcher
//   BM_ModelFit/<sizes>                   ThroughputModel::Fit of 1, 3 or 6
//                                        observed sizes; time per fit
// Counters: ns_per_sample is wall time per sample per thread; with 2 threads
// the aggregate rate is items_per_second.
// Run: make bench, or ./build/rescale-bench --benchmark_filter=Ingest
#include <benchmark/benchmark.h>
#include <malloc.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "bench/mutex_store.h"
#include "rescale/metrics_store.h"
#include "rescale/planner.h"
#include "rescale/recommendation_board.h"
#include "rescale/throughput_model.h"

// ---- allocation accounting (for BM_StoreMemory) -------------------------------
namespace {
std::atomic<int64_t> g_live_bytes{0};
}  // namespace

void* operator new(size_t size) {
  void* p = std::malloc(size == 0 ? 1 : size);
  if (p == nullptr) throw std::bad_alloc();
  g_live_bytes.fetch_add(static_cast<int64_t>(malloc_usable_size(p)), std::memory_order_relaxed);
  return p;
}
void operator delete(void* p) noexcept {
  if (p == nullptr) return;
  g_live_bytes.fetch_sub(static_cast<int64_t>(malloc_usable_size(p)), std::memory_order_relaxed);
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
  state.counters["ns_per_sample"] = benchmark::Counter(
      samples / 1e9, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
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
BENCHMARK_TEMPLATE(BM_StoreIngest, false)->Name("BM_StoreIngest")->Threads(1)->Threads(2)->UseRealTime();
BENCHMARK_TEMPLATE(BM_StoreIngest, true)->Name("BM_StoreIngestSharedJob")->Threads(1)->Threads(2)->UseRealTime();

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
BENCHMARK_TEMPLATE(BM_MutexStoreIngest, false)->Name("BM_MutexStoreIngest")->Threads(1)->Threads(2)->UseRealTime();
BENCHMARK_TEMPLATE(BM_MutexStoreIngest, true)->Name("BM_MutexStoreIngestSharedJob")->Threads(1)->Threads(2)->UseRealTime();

// Allocated bytes per job, per (job, size) and per pod, measured by the
// operator new above: registering jobs, then adding sizes, then pods.
void BM_StoreMemory(benchmark::State& state) {
  constexpr int kJobs = 200, kSizes = 8, kPods = 64;
  double per_job = 0, per_size = 0, per_pod = 0;
  for (auto _ : state) {
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
        one[0] = {id, pods[0], static_cast<uint32_t>(size), 0.5, 0, 0, std::nullopt};
        store.Ingest(one, kNow);
      }
    }
    const int64_t after_sizes = g_live_bytes.load();
    for (const std::string& id : ids) {
      for (int p = 1; p < kPods; ++p) {
        one[0] = {id, pods[p], 1, 0.5, 0, 0, std::nullopt};
        store.Ingest(one, kNow);
      }
    }
    const int64_t after_pods = g_live_bytes.load();
    per_job = double(after_jobs - base) / kJobs;
    per_size = double(after_sizes - after_jobs - kJobs * 0) / (kJobs * kSizes);
    per_pod = double(after_pods - after_sizes) / (kJobs * (kPods - 1));
  }
  state.counters["bytes_per_job"] = per_job;
  state.counters["bytes_per_job_size"] = per_size;
  state.counters["bytes_per_pod"] = per_pod;
}
BENCHMARK(BM_StoreMemory)->Iterations(1)->Unit(benchmark::kMillisecond);

void BM_StaticPlan(benchmark::State& state) {
  rescale::PlanInput input;
  input.capacity_gpus = static_cast<uint32_t>(state.range(0) * 10);
  for (int i = 0; i < state.range(0); ++i) {
    rescale::PlanJob job;
    job.spec.job_id = "ns/job-" + std::to_string(i);
    job.spec.min_replicas = 1 + i % 4;
    job.spec.max_replicas = 16;
    job.spec.gpus_per_replica = 1 << (i % 4);
    job.spec.priority = i % 3;
    job.spec.policy = i % 2 ? "static-max" : "static-min";
    input.jobs.push_back(job);
  }
  rescale::StaticPlanner planner;
  for (auto _ : state) {
    benchmark::DoNotOptimize(planner.Plan(input));
  }
}
BENCHMARK(BM_StaticPlan)->Arg(100)->Arg(1000)->Arg(10000)->Unit(benchmark::kMicrosecond);

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

}  // namespace

BENCHMARK_MAIN();
