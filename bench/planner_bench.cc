// rescale-bench, the cluster planner's scenarios (the rest of the binary is
// bench/rescale_bench.cc):
//   BM_ClusterPlan/<jobs>                 PlanCluster, 10 GPUs per job; counters
//                                        gap (must stay <= 1%), waiting,
//                                        utilization
//   BM_ClusterPlanQueues/<jobs>/<queues>  the same jobs in queues and
//                                        cohorts (target: 10,000 in 50
//                                        queues <= 50 ms)
//   BM_ClusterPlanTypes/<jobs>            the same jobs on three GPU types
//                                        (PlanClusterTypes; target: 10,000
//                                        jobs <= 60 ms); counters gap,
//                                        waiting, utilization, moved
//   BM_ClusterPlanTypesQueues/<jobs>/<queues>
//                                        the typed jobs in queues as
//                                        BM_ClusterPlanQueues deals them
//   BM_ModelOnType/<learned>              engine::ModelOnType of a job
//                                        measured at six sizes on one type
//                                        and one on another: 0 = nothing
//                                        learned (the sync carried over),
//                                        1 = TypeSpeeds learned from three
//                                        jobs on both (the sync fitted size
//                                        by size); what each job's typed
//                                        curve costs when the ratios move
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "rescale/cluster_planner.h"
#include "rescale/queues.h"
#include "rescale/throughput_model.h"
#include "src/engine/job_entry.h"
#include "src/engine/type_curves.h"

namespace {

const absl::Time kNow = absl::FromUnixSeconds(1'700'000'000);

// A cluster like the ones Rescale plans, 10 GPUs per job: gpus_per_replica
// 1, 2, 4 or 8; four priorities; min_replicas 1-4 (minimum gangs take about
// three quarters of the cluster, the rest is contended growth), max up to
// 34; 70% of the jobs running a little above their minimum, some in cooldown
// or non-preemptible; curves n / (a + b n) (concave, saturating), one in
// five non-concave (odd sizes 15% less efficient); plus two low-priority
// "hero" jobs that each need 30% of the cluster and so wait.
std::vector<rescale::PlannerJob> ClusterPlanInstance(int jobs) {
  std::mt19937 rng(20240611u + static_cast<uint32_t>(jobs));
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  auto chance = [&](double p) { return std::uniform_real_distribution<double>(0, 1)(rng) < p; };
  std::vector<rescale::PlannerJob> out(jobs);
  for (int i = 0; i < jobs; ++i) {
    rescale::PlannerJob& job = out[i];
    job.job_id = "ns/job-" + std::to_string(i);
    const int r = pick(0, 99);
    job.gpus_per_replica = r < 30 ? 1 : r < 60 ? 2 : r < 85 ? 4 : 8;
    job.min_replicas = static_cast<uint32_t>(pick(1, 4));
    job.max_replicas = job.min_replicas + static_cast<uint32_t>(pick(0, 30));
    job.priority = pick(0, 3);
    job.preemptible = !chance(0.1);
    job.started_at = kNow - absl::Seconds(pick(0, 86400));
    if (chance(0.7)) {
      job.current_replicas =
          std::min(job.max_replicas, job.min_replicas + static_cast<uint32_t>(pick(0, 3)));
      job.in_cooldown = chance(0.15);
    } else {
      job.suspended = chance(0.3);
    }
    job.restart_cost_seconds = 20 + pick(0, 100);
    const double a = std::uniform_real_distribution<double>(0.5, 2.0)(rng);
    const double b = std::uniform_real_distribution<double>(0.005, 0.15)(rng);
    const bool uneven = chance(0.2);
    for (uint32_t n = job.min_replicas; n <= job.max_replicas; ++n) {
      job.throughput.push_back(1000.0 * n / (a + b * n) * (uneven && n % 2 == 1 ? 0.85 : 1.0));
    }
  }
  for (int hero = 0; hero < 2; ++hero) {
    rescale::PlannerJob& job = out[hero];
    job.gpus_per_replica = 8;
    job.min_replicas = static_cast<uint32_t>(jobs * 10 * 3 / 10 / 8);
    job.max_replicas = job.min_replicas + 8;
    job.priority = 0;
    job.current_replicas = 0;
    job.throughput.clear();
    for (uint32_t n = job.min_replicas; n <= job.max_replicas; ++n)
      job.throughput.push_back(10.0 * n);
  }
  return out;
}

// PlanCluster at 1,000 and 10,000 jobs (10 GPUs per job). Counters: gap =
// (upper bound - utility)/|bound| of the scalable solver (must stay <= 1%),
// waiting = jobs left at 0, utilization = allocated / capacity.
void BM_ClusterPlan(benchmark::State& state) {
  const std::vector<rescale::PlannerJob> jobs =
      ClusterPlanInstance(static_cast<int>(state.range(0)));
  const uint64_t capacity = 10 * jobs.size();
  rescale::ClusterPlan plan;
  for (auto _ : state) {
    plan = rescale::PlanCluster(jobs, capacity);
    benchmark::DoNotOptimize(plan);
  }
  uint64_t waiting = 0;
  for (const rescale::PlannedJob& j : plan.jobs) waiting += j.replicas == 0;
  state.counters["gap"] = plan.gap;
  state.counters["waiting"] = static_cast<double>(waiting);
  state.counters["utilization"] = double(plan.allocated_gpus) / double(capacity);
  if (plan.allocated_gpus > capacity) state.SkipWithError("plan over capacity");
  if (plan.gap > 0.01) state.SkipWithError("gap above 1%");
}
BENCHMARK(BM_ClusterPlan)->Arg(1000)->Arg(10000)->Unit(benchmark::kMillisecond);

// <count> queues of equal nominal quota (`capacity` split evenly), in
// cohorts of ten, weights 1-3, the jobs dealt round-robin; one queue in ten
// has no jobs, so its quota is lent.
std::vector<rescale::QueueSpec> DealIntoQueues(std::vector<rescale::PlannerJob>& jobs,
                                               uint64_t capacity, uint32_t count) {
  std::vector<rescale::QueueSpec> queues(count);
  for (uint32_t k = 0; k < count; ++k) {
    queues[k].name = absl::StrCat("team-", k);
    queues[k].nominal_gpus = capacity / count;
    queues[k].cohort = absl::StrCat("cohort-", k / 10);
    queues[k].weight = 1 + k % 3;
  }
  for (size_t i = 0; i < jobs.size(); ++i) {
    const auto k = static_cast<uint32_t>(i % count);
    jobs[i].queue = k % 10 == 9 ? k - 1 : k;  // queues 9, 19, ... stay empty
  }
  return queues;
}

// Waiting jobs, and GPUs by which queues fall below their guarantee.
void QueueCounters(benchmark::State& state, const rescale::ClusterPlan& plan, uint64_t capacity) {
  uint64_t waiting = 0, short_gpus = 0;
  for (const rescale::PlannedJob& j : plan.jobs) waiting += j.replicas == 0;
  for (const rescale::PlannedQueue& q : plan.queues) {
    if (q.in_use_gpus < q.guaranteed_gpus) short_gpus += q.guaranteed_gpus - q.in_use_gpus;
  }
  state.counters["waiting"] = static_cast<double>(waiting);
  state.counters["utilization"] = double(plan.allocated_gpus) / double(capacity);
  state.counters["short"] = static_cast<double>(short_gpus);
}

// PlanCluster with queues (issue 33: 10,000 jobs in 50 queues within 50
// ms): the same jobs dealt round-robin to <queues> queues of equal nominal
// quota (the capacity split evenly), in cohorts of ten, weights 1-3; one
// queue in ten has no jobs, so its quota is lent. Counters: waiting,
// utilization, short = GPUs by which queues fall below their guarantee.
void BM_ClusterPlanQueues(benchmark::State& state) {
  std::vector<rescale::PlannerJob> jobs = ClusterPlanInstance(static_cast<int>(state.range(0)));
  const uint64_t capacity = 10 * jobs.size();
  const std::vector<rescale::QueueSpec> queues =
      DealIntoQueues(jobs, capacity, static_cast<uint32_t>(state.range(1)));
  rescale::ClusterPlan plan;
  for (auto _ : state) {
    plan = rescale::PlanCluster(jobs, capacity, {}, {}, queues);
    benchmark::DoNotOptimize(plan);
  }
  QueueCounters(state, plan, capacity);
  if (plan.allocated_gpus > capacity) state.SkipWithError("plan over capacity");
}
BENCHMARK(BM_ClusterPlanQueues)->Args({10000, 50})->Unit(benchmark::kMillisecond);

// PlanClusterTypes (issue 34: 10,000 jobs on 3 types within 60 ms): the
// jobs above on Sia's three kinds of GPU in its cluster's proportions (24
// T4, 24 RTX 2080 Ti, 16 A100 of every 64), 10 GPUs per job in all. Each
// job's speed on a type is its own: a compute share c in [0.2, 0.9] speeds
// up by the type's compute factor (1, 1.3, 3) and the rest by its network
// factor (1, 0.8, 2), so compute-bound jobs gain most from the A100s. One
// job in five may use only two of the types; running jobs run on a type
// they may use, as a previous plan placed them. Counters: gap (a Lagrangian bound, loose: see
// PlanClusterTypes), waiting, utilization, moved = running jobs moved to
// another type.
struct TypedInstance {
  std::vector<rescale::PlannerJob> jobs;
  std::vector<rescale::GpuTypeCapacity> types;
};
TypedInstance MakeTypedInstance(int count) {
  std::vector<rescale::PlannerJob> jobs = ClusterPlanInstance(count);
  const uint64_t capacity = 10 * jobs.size();
  std::vector<rescale::GpuTypeCapacity> types = {{"Tesla-T4", capacity * 24 / 64, {}},
                                                 {"GeForce-RTX-2080-Ti", capacity * 24 / 64, {}},
                                                 {"A100-SXM4-40GB", capacity * 16 / 64, {}}};
  const double compute[] = {1, 1.3, 3}, network[] = {1, 0.8, 2};
  std::mt19937 rng(34);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  uint64_t used[3] = {0, 0, 0};
  auto room = [&](int t) { return double(*types[t].total_gpus - used[t]) / *types[t].total_gpus; };
  for (rescale::PlannerJob& job : jobs) {
    const double c = std::uniform_real_distribution<double>(0.2, 0.9)(rng);
    const int excluded = pick(0, 4) == 0 ? pick(0, 2) : -1;
    job.throughput_by_type.resize(3);
    for (int t = 0; t < 3; ++t) {
      if (t == excluded) continue;
      // Step time scales as c / compute + (1 - c) / network; so does the
      // per-GPU rate of every size (the curve's shape stays the job's).
      const double speed = 1 / (c / compute[t] + (1 - c) / network[t]);
      for (double v : job.throughput) job.throughput_by_type[t].push_back(v * speed);
    }
    // Running jobs on the allowed type with the most room left, as a
    // previous plan would have placed them (at most its capacity).
    job.current_type = static_cast<uint32_t>(excluded == 0 ? 1 : 0);
    if (job.current_replicas > 0) {
      const uint64_t gpus = uint64_t{job.current_replicas} * job.gpus_per_replica;
      int best = -1;
      for (int t = 0; t < 3; ++t) {
        if (t == excluded || used[t] + gpus > *types[t].total_gpus) continue;
        if (best < 0 || room(t) > room(best)) best = t;
      }
      if (best < 0) {
        job.current_replicas = 0;
      } else {
        job.current_type = static_cast<uint32_t>(best);
        used[best] += gpus;
      }
    }
  }
  return {std::move(jobs), std::move(types)};
}

void BM_ClusterPlanTypes(benchmark::State& state) {
  const auto [jobs, types] = MakeTypedInstance(static_cast<int>(state.range(0)));
  const uint64_t capacity = 10 * jobs.size();
  rescale::ClusterPlan plan;
  for (auto _ : state) {
    plan = rescale::PlanClusterTypes(jobs, types);
    benchmark::DoNotOptimize(plan);
  }
  uint64_t waiting = 0, moved = 0;
  for (size_t i = 0; i < jobs.size(); ++i) {
    waiting += plan.jobs[i].replicas == 0;
    moved += jobs[i].current_replicas > 0 && plan.jobs[i].replicas > 0 &&
             plan.jobs[i].gpu_type != jobs[i].current_type;
  }
  state.counters["gap"] = plan.gap;
  state.counters["waiting"] = static_cast<double>(waiting);
  state.counters["utilization"] = double(plan.allocated_gpus) / double(capacity);
  state.counters["moved"] = static_cast<double>(moved);
  for (size_t t = 0; t < types.size(); ++t) {
    if (plan.allocated_gpus_by_type[t] > *types[t].total_gpus) {
      state.SkipWithError("plan over a type's capacity");
    }
  }
}
BENCHMARK(BM_ClusterPlanTypes)->Arg(1000)->Arg(10000)->Unit(benchmark::kMillisecond);

// The typed jobs above in queues as BM_ClusterPlanQueues deals them (equal
// nominal quotas, cohorts of ten, one queue in ten empty): the quotas split
// over the types, then each type planned with its shares. Counters as
// BM_ClusterPlanQueues' (short: GPUs by which queues fall below their
// guarantee, summed over the types).
void BM_ClusterPlanTypesQueues(benchmark::State& state) {
  auto [jobs, types] = MakeTypedInstance(static_cast<int>(state.range(0)));
  const uint64_t capacity = 10 * jobs.size();
  const std::vector<rescale::QueueSpec> queues =
      DealIntoQueues(jobs, capacity, static_cast<uint32_t>(state.range(1)));
  rescale::ClusterPlan plan;
  for (auto _ : state) {
    plan = rescale::PlanClusterTypes(jobs, types, {}, queues);
    benchmark::DoNotOptimize(plan);
  }
  QueueCounters(state, plan, capacity);
  for (size_t t = 0; t < types.size(); ++t) {
    if (plan.allocated_gpus_by_type[t] > *types[t].total_gpus) {
      state.SkipWithError("plan over a type's capacity");
    }
  }
}
BENCHMARK(BM_ClusterPlanTypesQueues)->Args({10000, 50})->Unit(benchmark::kMillisecond);

// One job's fit on a type of `per_node` GPUs per node: step(n) = compute +
// sync terms growing with n, k scaling every term.
rescale::engine::Fitted::TypeFit TypeFitOf(const std::string& type, double k,
                                           const std::vector<uint32_t>& sizes, uint32_t per_node,
                                           double sync) {
  rescale::engine::Fitted::TypeFit fit;
  fit.gpu_type = type;
  rescale::ModelOptions options;
  options.gpus_per_node = per_node;
  options.min_samples = 1;
  for (uint32_t n : sizes) {
    rescale::Observation o;
    o.replicas = n;
    o.nodes = (n + per_node - 1) / per_node;
    o.step_seconds =
        k * (0.2 + (n > 1 ? sync * (0.05 + 0.01 * (n - 2)) : 0) + (o.nodes > 1 ? sync * 0.2 : 0));
    o.sample_count = 50;
    o.mean_batch = 32;
    fit.observations.push_back(o);
  }
  fit.model = rescale::ThroughputModel::Fit(fit.observations, {}, options);
  return fit;
}

void BM_ModelOnType(benchmark::State& state) {
  using rescale::engine::Fitted;
  const std::vector<uint32_t> slow_sizes = {1, 2, 4, 6, 8, 16}, fast_sizes = {1, 2, 4, 8, 12, 16};
  const std::vector<rescale::GpuType> types = {{.name = "fast", .gpus_per_node = 8, .slots = {}},
                                               {.name = "slow", .gpus_per_node = 4, .slots = {}}};
  std::vector<Fitted> jobs(3);
  std::vector<const Fitted*> fits;
  for (size_t i = 0; i < jobs.size(); ++i) {
    jobs[i].by_type = {TypeFitOf("fast", 0.5 * double(i + 1), fast_sizes, 8, 0.3),
                       TypeFitOf("slow", double(i + 1), slow_sizes, 4, 1.0)};
    fits.push_back(&jobs[i]);
  }
  const rescale::engine::TypeSpeeds speeds = state.range(0) == 1
                                                 ? rescale::engine::TypeSpeeds::Learn(fits, types)
                                                 : rescale::engine::TypeSpeeds();
  Fitted job;
  job.by_type = {TypeFitOf("fast", 0.75, {1}, 8, 0.3), TypeFitOf("slow", 1.5, slow_sizes, 4, 1.0)};
  rescale::ModelOptions options;
  options.gpus_per_node = 4;
  options.min_samples = 1;
  for (auto _ : state) {
    benchmark::DoNotOptimize(rescale::engine::ModelOnType(job, types[0], speeds, options));
  }
}
BENCHMARK(BM_ModelOnType)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

}  // namespace
