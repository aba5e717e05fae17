// rescale-bench: DecisionEngine::Replan on a cluster of three GPU types
// (BM_EngineReplanTypes), the whole typed plan pipeline as rescaled runs it:
// per-type fits, the cross-type curves of every job on every type it has
// not measured (engine::ModelOnType, with the interconnect ratios TypeSpeeds
// learns from the other jobs), PlanClusterTypes and the board. What
// BM_ClusterPlanTypes (bench/planner_bench.cc) times is the planner alone;
// this is what a plan costs once the curves must be rebuilt.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "rescale/clock.h"
#include "rescale/decision_engine.h"

namespace {

// Sia's three types, as its cluster has them (T4 nodes of 4, 2080 Ti and
// A100 nodes of 8); one-GPU compute and per-GPU sync relative to the T4.
struct BenchType {
  const char* name;
  uint32_t gpus_per_node;
  double compute, sync;
};
constexpr std::array<BenchType, 3> kTypes = {{{"Tesla-T4", 4, 1.0, 1.0},
                                              {"NVIDIA-GeForce-RTX-2080-Ti", 8, 0.7, 0.8},
                                              {"NVIDIA-A100-SXM4-40GB", 8, 0.4, 0.2}}};

// An engine after an adapter registered `jobs` jobs (min 1, max 16) on a
// cluster of the three types (10 GPUs a job in all), each job measured at 1,
// 2 and 4 replicas on its home type (job i: type i % 3) and at one replica
// on the next type, and the cluster applied the first plan. The plan timer
// runs on a ManualClock that never reaches a window, as in BM_EngineReplan.
struct TypedEngineFixture {
  rescale::ManualClock clock;
  std::unique_ptr<rescale::DecisionEngine> engine;
  std::vector<std::string> ids;
  std::vector<uint32_t> running;  // replicas planned
  std::vector<uint32_t> on_type;  // type planned (index in kTypes)

  explicit TypedEngineFixture(int jobs) {
    rescale::EngineOptions options;
    options.max_jobs = jobs;
    engine = rescale::DecisionEngine::Create(options, &clock).value();
    rescale::CapacityReport capacity;
    for (const BenchType& t : kTypes) {
      capacity.gpu_types.push_back({.name = t.name,
                                    .total_gpus = static_cast<uint32_t>(10 * jobs / 3),
                                    .gpus_per_node = t.gpus_per_node,
                                    .slots = {}});
    }
    if (!engine->SetCapacity(capacity).ok()) std::abort();
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
      for (uint32_t n : {1u, 2u, 4u}) Measure(i, i % 3, n, 20);
      Measure(i, (i + 1) % 3, 1, 20);
    }
    engine->StopTimer();  // runs the pending plan
    engine->StartTimer();
    for (const rescale::Recommendation& rec : engine->ListRecommendations()) {
      if (!engine
               ->ReportApplied(rec.job_id, rec.replicas, rec.suspend, rec.generation, rec.gpu_type)
               .ok())
        std::abort();
    }
    engine->StopTimer();
    for (int i = 0; i < jobs; ++i) {
      const rescale::Recommendation rec = engine->GetRecommendation(ids[i]).value();
      running.push_back(rec.replicas);
      uint32_t t = 0;
      while (t + 1 < kTypes.size() && rec.gpu_type != kTypes[t].name) ++t;
      on_type.push_back(t);
    }
  }

  // `count` samples of job i on type t at n replicas, from two pods: a ring
  // all-reduce law with a per-job spread of sync costs, scaled by the type.
  void Measure(int i, uint32_t t, uint32_t n, int count) {
    const BenchType& type = kTypes[t];
    std::vector<rescale::StepSample> batch(count);
    const double sync = (0.01 + 0.002 * (i % 17)) * type.sync;
    for (int k = 0; k < count; ++k) {
      rescale::StepSample& s = batch[k];
      s.job_id = ids[i];
      s.pod = ids[i] + (k % 2 ? "-worker-1" : "-worker-0");
      s.world_size = n;
      s.gpu_type = type.name;
      s.step_seconds = 0.2 * type.compute + sync * (n - 1) + 0.001 * (k % 5);
    }
    engine->Ingest(batch);
  }
};

// A replan after `changed %` of the jobs got fresh samples where they run;
// time per replan. Fresh samples move a job's fit, so its curves on the
// other types are rebuilt too (and, when TypeSpeeds' learned ratios move,
// every job's).
void BM_EngineReplanTypes(benchmark::State& state) {
  const int jobs = static_cast<int>(state.range(0));
  static std::map<std::vector<int64_t>, std::unique_ptr<TypedEngineFixture>> fixtures;
  std::unique_ptr<TypedEngineFixture>& fixture = fixtures[{state.range(0), state.range(1)}];
  if (fixture == nullptr) fixture = std::make_unique<TypedEngineFixture>(jobs);
  const int changed = std::max<int>(1, jobs * static_cast<int>(state.range(1)) / 100);
  int next = 0;
  for (auto _ : state) {
    state.PauseTiming();
    fixture->clock.Advance(absl::Seconds(1));
    for (int k = 0; k < changed; ++k, next = (next + 1) % jobs) {
      fixture->Measure(next, fixture->on_type[next], std::max<uint32_t>(fixture->running[next], 1),
                       2);
    }
    state.ResumeTiming();
    fixture->engine->Replan();
  }
  state.counters["changed_jobs"] = changed;
}
BENCHMARK(BM_EngineReplanTypes)
    ->Args({1000, 100})
    ->Args({1000, 1})
    ->Args({10000, 100})
    ->Args({10000, 1})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
