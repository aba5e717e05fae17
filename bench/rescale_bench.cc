// rescale-bench: Google Benchmark scenarios for Rescale's hot paths.
//
// Scenarios (defaults in parentheses):
//   BM_IngestBatch/<batch>      MetricsStore::Ingest of one batch of valid
//                               samples for one job (batch 1, 64, 1024)
//   BM_StaticPlan/<jobs>        StaticPlanner::Plan over <jobs> jobs on a
//                               cluster of 10 GPUs per job (100, 1000, 10000)
//   BM_BoardPublish/<jobs>      RecommendationBoard::Publish of <jobs>
//                               unchanged decisions with one watcher
// Run: make bench, or ./build/rescale-bench --benchmark_filter=Ingest
#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "rescale/metrics_store.h"
#include "rescale/planner.h"
#include "rescale/recommendation_board.h"

namespace {

void BM_IngestBatch(benchmark::State& state) {
  rescale::MetricsStore store;
  store.AddJob("ns/job", 64, 32);
  const absl::Time now = absl::FromUnixSeconds(1'700'000'000);
  std::vector<rescale::StepSample> batch(state.range(0));
  for (size_t i = 0; i < batch.size(); ++i) {
    batch[i] = {"ns/job", "job-worker-" + std::to_string(i % 8), 8, 0.25 + 0.001 * (i % 7), 0, 0,
                std::nullopt};
  }
  for (auto _ : state) {
    benchmark::DoNotOptimize(store.Ingest(batch, now));
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_IngestBatch)->Arg(1)->Arg(64)->Arg(1024);

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

}  // namespace

BENCHMARK_MAIN();
