// PlanClusterTypes with queues: a queue's quotas count its GPUs of every
// type together. On random small instances (two or three types, two or three
// queues, cohorts with borrowing and lending limits) every plan keeps every
// type's GPUs and every quota, summed over the types as Kueue counts a
// ClusterQueue's quota (nominal, borrowingLimit, lendingLimit; its cohort
// lends only what its members leave unused); and a team whose jobs wait
// gets its nominal quota back from a team that borrowed it, on the type
// its jobs run fastest on.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "rescale/cluster_planner.h"
#include "rescale/queues.h"

namespace rescale {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1'700'000'000);

// samples/s n x speed / (1 + comm x (n - 1)) for n = min..max.
std::vector<double> Curve(uint32_t min, uint32_t max, double speed, double comm) {
  std::vector<double> t;
  for (uint32_t n = min; n <= max; ++n) t.push_back(speed * n / (1 + comm * (n - 1)));
  return t;
}

struct Instance {
  std::vector<PlannerJob> jobs;
  std::vector<GpuTypeCapacity> types;
  std::vector<QueueSpec> queues;
  ClusterPlannerOptions options;
};

Instance RandomInstance(std::mt19937& rng) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  auto chance = [&](double p) { return std::uniform_real_distribution<double>(0, 1)(rng) < p; };
  auto unit = [&] { return std::uniform_real_distribution<double>(0, 1)(rng); };
  Instance in;
  const int types = pick(2, 3);
  for (int t = 0; t < types; ++t)
    in.types.push_back({"type-" + std::to_string(t), uint64_t(pick(0, 12)), {}});
  const int queues = pick(2, 3);
  for (int q = 0; q < queues; ++q) {
    QueueSpec spec;
    spec.name = "team-" + std::to_string(q);
    spec.nominal_gpus = uint64_t(pick(0, 12));
    if (chance(0.6)) {
      spec.cohort = "research";
      if (chance(0.4)) spec.borrowing_limit_gpus = uint64_t(pick(0, 8));
      if (chance(0.4)) spec.lending_limit_gpus = uint64_t(pick(0, int(spec.nominal_gpus)));
    }
    spec.weight = chance(0.3) ? 3 : 1;
    in.queues.push_back(spec);
  }
  const int jobs = pick(3, 10);
  for (int k = 0; k < jobs; ++k) {
    PlannerJob job;
    job.job_id = "ns/job-" + std::to_string(k);
    job.min_replicas = uint32_t(pick(1, 2));
    job.max_replicas = job.min_replicas + uint32_t(pick(0, 4));
    job.gpus_per_replica = 1u << pick(0, 1);
    job.priority = pick(0, 1);
    job.preemptible = !chance(0.15);
    // Mostly a defined queue; now and then one that is not (it waits).
    job.queue = uint32_t(chance(0.05) ? queues : pick(0, queues - 1));
    const double compute = 50 + 100 * unit();
    for (int t = 0; t < types; ++t) {
      if (t > 0 && chance(0.2)) {
        job.throughput_by_type.emplace_back();  // not allowed there
        continue;
      }
      job.throughput_by_type.push_back(
          Curve(job.min_replicas, job.max_replicas, compute * (0.5 + 2 * unit()), unit()));
    }
    if (job.throughput_by_type[0].empty()) job.throughput_by_type[0] = {100};
    if (chance(0.5)) {
      std::vector<uint32_t> allowed;
      for (uint32_t t = 0; t < uint32_t(types); ++t) {
        if (!job.throughput_by_type[t].empty()) allowed.push_back(t);
      }
      job.current_type = allowed[size_t(pick(0, int(allowed.size()) - 1))];
      job.current_replicas = uint32_t(pick(int(job.min_replicas), int(job.max_replicas)));
    }
    job.in_cooldown = chance(0.2);
    job.restart_cost_seconds = chance(0.5) ? 0 : 60;
    job.started_at = kT0 + absl::Minutes(pick(0, 5));
    in.jobs.push_back(job);
  }
  if (chance(0.3)) in.options.objective = PlanObjectiveKind::kJct;
  return in;
}

// Every quota kept over all types together, as Kueue counts it: a queue
// without a cohort holds at most its nominal quota; one in a cohort at most
// nominal + borrowing limit, and a cohort's queues draw beyond what they
// keep (nominal - lendable) at most what its members may lend.
void RequireQuotas(const Instance& in, const std::vector<uint64_t>& use) {
  std::map<std::string, int64_t> pool;  // cohort: lendable - drawn
  for (size_t q = 0; q < in.queues.size(); ++q) {
    const QueueSpec& spec = in.queues[q];
    INFO("queue " << spec.name << " uses " << use[q] << " of nominal " << spec.nominal_gpus);
    if (spec.cohort.empty()) {
      REQUIRE(use[q] <= spec.nominal_gpus);
      continue;
    }
    if (spec.borrowing_limit_gpus)
      REQUIRE(use[q] <= spec.nominal_gpus + *spec.borrowing_limit_gpus);
    const uint64_t lendable =
        std::min(spec.lending_limit_gpus.value_or(spec.nominal_gpus), spec.nominal_gpus);
    const uint64_t kept = spec.nominal_gpus - lendable;
    pool[spec.cohort] += int64_t(lendable) - int64_t(use[q] > kept ? use[q] - kept : 0);
  }
  for (const auto& [cohort, left] : pool) {
    INFO("cohort " << cohort);
    REQUIRE(left >= 0);
  }
}

TEST_CASE("typed plans with queues keep every type's GPUs and every quota over all types",
          "[planner][types][queues]") {
  std::mt19937 rng(20261207);
  int binding = 0;  // instances where some queue's quota held it back
  for (int instance = 0; instance < 80; ++instance) {
    INFO("instance " << instance);
    const Instance in = RandomInstance(rng);
    const ClusterPlan plan = PlanClusterTypes(in.jobs, in.types, in.options, in.queues);
    REQUIRE(plan.jobs.size() == in.jobs.size());
    REQUIRE(plan.queues.size() == in.queues.size());
    std::vector<uint64_t> by_type(in.types.size(), 0), by_queue(in.queues.size(), 0);
    std::vector<uint32_t> running(in.queues.size(), 0), waiting(in.queues.size(), 0);
    for (size_t i = 0; i < in.jobs.size(); ++i) {
      const PlannerJob& job = in.jobs[i];
      const PlannedJob& d = plan.jobs[i];
      INFO("job " << i << " queue " << job.queue << " replicas " << d.replicas << " type "
                  << d.gpu_type);
      REQUIRE(!d.reason.empty());
      if (job.queue >= in.queues.size()) {
        REQUIRE(d.replicas == 0);  // its queue is not defined
        continue;
      }
      ++(d.replicas > 0 ? running : waiting)[job.queue];
      if (d.replicas == 0) continue;
      REQUIRE(d.gpu_type < in.types.size());
      REQUIRE(!job.throughput_by_type[d.gpu_type].empty());
      REQUIRE(d.replicas >= job.min_replicas);
      REQUIRE(d.replicas <= job.max_replicas);
      const uint64_t gpus = uint64_t{d.replicas} * job.gpus_per_replica;
      by_type[d.gpu_type] += gpus;
      by_queue[job.queue] += gpus;
    }
    for (size_t t = 0; t < in.types.size(); ++t) {
      REQUIRE(by_type[t] <= *in.types[t].total_gpus);
      REQUIRE(by_type[t] == plan.allocated_gpus_by_type[t]);
    }
    RequireQuotas(in, by_queue);
    for (size_t q = 0; q < in.queues.size(); ++q) {
      CHECK(plan.queues[q].in_use_gpus == by_queue[q]);
      CHECK(plan.queues[q].running_jobs == running[q]);
      CHECK(plan.queues[q].waiting_jobs == waiting[q]);
    }
    // Without the queues, would some queue have held more than its nominal
    // quota and its cohort allow? Then the quotas mattered here.
    const ClusterPlan free = PlanClusterTypes(in.jobs, in.types, in.options);
    std::vector<uint64_t> free_use(in.queues.size(), 0);
    for (size_t i = 0; i < in.jobs.size(); ++i) {
      if (in.jobs[i].queue < in.queues.size())
        free_use[in.jobs[i].queue] += uint64_t{free.jobs[i].replicas} * in.jobs[i].gpus_per_replica;
    }
    for (size_t q = 0; q < in.queues.size(); ++q) {
      if (free_use[q] > in.queues[q].nominal_gpus && by_queue[q] < free_use[q]) {
        ++binding;
        break;
      }
    }
  }
  // The quotas did bind: on many instances a queue holds less than it would
  // without them.
  // (54 of the 80 with this seed.)
  INFO(binding << " of 80 instances");
  CHECK(binding >= 20);
}

// Two teams in one cohort, 8 GPUs each of a 16-GPU cluster of two types.
PlannerJob TeamJob(const std::string& id, uint32_t queue, uint32_t min, uint32_t max) {
  PlannerJob job;
  job.job_id = id;
  job.min_replicas = min;
  job.max_replicas = max;
  job.queue = queue;
  job.started_at = kT0;
  // The A100s (type 1) twice as fast as the T4s (type 0), for every job.
  job.throughput_by_type = {Curve(min, max, 100, 0.02), Curve(min, max, 200, 0.02)};
  return job;
}

TEST_CASE("on a typed cluster a team gets its nominal quota back from a team that borrowed it",
          "[planner][types][queues]") {
  const std::vector<GpuTypeCapacity> types = {{"Tesla-T4", 8, {}}, {"NVIDIA-A100", 8, {}}};
  std::vector<QueueSpec> queues(2);
  queues[0].name = "team-a";
  queues[1].name = "team-b";
  for (QueueSpec& q : queues) {
    q.nominal_gpus = 8;
    q.cohort = "research";
  }
  std::vector<PlannerJob> jobs;
  // Team A's jobs are gangs of at least 4: they cannot shrink to make room.
  for (int k = 0; k < 4; ++k) jobs.push_back(TeamJob("a/job-" + std::to_string(k), 0, 4, 8));
  // Team B idle: team A borrows B's quota and holds both types.
  ClusterPlan plan = PlanClusterTypes(jobs, types, {}, queues);
  REQUIRE(plan.queues.size() == 2);
  // Explanations cite the share of a type, not the queue's whole quota:
  // "queue team-a (its Tesla-T4 share) holds 8 of 8 GPUs it may use
  // (nominal 4, cohort research)".
  for (const PlannedJob& j : plan.jobs) {
    INFO(j.reason);
    CHECK(j.reason.find("queue team-a (its " + types[j.gpu_type].name + " share) holds") !=
          std::string::npos);
  }
  CHECK(plan.queues[0].in_use_gpus == 16);
  CHECK(plan.queues[0].borrowed_gpus == 8);
  CHECK(plan.allocated_gpus_by_type == std::vector<uint64_t>{8, 8});
  for (size_t i = 0; i < jobs.size(); ++i) {
    jobs[i].current_replicas = plan.jobs[i].replicas;
    jobs[i].current_type = plan.jobs[i].gpu_type;
  }
  // Team B submits two jobs: it gets its 8 GPUs, on the A100s where its
  // jobs run fastest, and team A keeps 8.
  jobs.push_back(TeamJob("b/job-0", 1, 1, 4));
  jobs.push_back(TeamJob("b/job-1", 1, 1, 4));
  plan = PlanClusterTypes(jobs, types, {}, queues);
  CHECK(plan.queues[0].in_use_gpus == 8);
  CHECK(plan.queues[1].in_use_gpus == 8);
  CHECK(plan.queues[1].borrowed_gpus == 0);
  for (size_t i = 4; i < jobs.size(); ++i) {
    INFO(jobs[i].job_id << ": " << plan.jobs[i].reason);
    CHECK(plan.jobs[i].replicas == 4);
    CHECK(plan.jobs[i].gpu_type == 1);
  }
  // Without the queues the newcomers would wait: team A's running gangs
  // hold every GPU, and keeping jobs running comes before starting others.
  const ClusterPlan free = PlanClusterTypes(jobs, types, {});
  CHECK(free.jobs[4].replicas + free.jobs[5].replicas == 0);
}

}  // namespace
}  // namespace rescale
