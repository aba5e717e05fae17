// Tests of rescale::PlanClusterTypes, the planner over GPU types. The core
// check compares the plan's objective with brute-force enumeration of every
// (type, size) per job on seeded random instances with 2 and 3 types, using
// an objective written here from cluster_planner.h's definitions (speedup
// over the slowest allowed type at min, a change of type is a restart and a
// change); the planner's own EvaluateTypedPlan must agree with it. One type
// must give PlanCluster's plan bit for bit. The scalable method (forced
// through the options) must keep every type's capacity and the jobs' allowed
// types, and its upper bound must hold the optimum. Behaviour tests pin what
// users see: the job that gains most from the fast type gets it, a move
// between types is weighed as a restart and explained, a job never lands on
// a type it may not use.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "rescale/cluster_planner.h"

namespace rescale {
namespace {

using Catch::Matchers::Contains;

const absl::Time kT0 = absl::FromUnixSeconds(1'700'000'000);

// samples/s n x speed / (1 + comm x (n - 1)) for n = min..max.
std::vector<double> Curve(uint32_t min, uint32_t max, double speed, double comm) {
  std::vector<double> t;
  for (uint32_t n = min; n <= max; ++n) t.push_back(speed * n / (1 + comm * (n - 1)));
  return t;
}

PlannerJob Job(const std::string& id, uint32_t min, uint32_t max,
               std::vector<std::vector<double>> curves) {
  PlannerJob job;
  job.job_id = id;
  job.min_replicas = min;
  job.max_replicas = max;
  job.started_at = kT0;
  job.throughput_by_type = std::move(curves);
  return job;
}

// ---- an objective written from the header's definitions --------------------

struct Reference {
  std::vector<int64_t> levels;
  double utility = 0;
};

double At(const std::vector<double>& c, const PlannerJob& job, uint32_t n) {
  return c[std::min<size_t>(n - job.min_replicas, c.size() - 1)];
}
double Slowest(const PlannerJob& job) {
  double s = 0;
  for (const auto& c : job.throughput_by_type) {
    if (!c.empty() && (s == 0 || c[0] < s)) s = c[0];
  }
  return s;
}
double RemainingSeconds(const PlannerJob& job, const ClusterPlannerOptions& options) {
  const double rate =
      job.samples_per_second_at_min > 0 ? job.samples_per_second_at_min : Slowest(job);
  double seconds = job.remaining_samples.value_or(job.attained_samples) / rate;
  if (job.current_replicas == 0) seconds -= job.waiting_seconds;
  return std::max(seconds, options.min_remaining_seconds);
}

Reference ReferenceObjective(const std::vector<PlannerJob>& jobs, const std::vector<uint32_t>& n,
                             const std::vector<uint32_t>& type,
                             const ClusterPlannerOptions& options) {
  std::vector<int32_t> priorities;
  for (const PlannerJob& j : jobs) priorities.push_back(j.priority);
  std::sort(priorities.rbegin(), priorities.rend());
  priorities.erase(std::unique(priorities.begin(), priorities.end()), priorities.end());
  Reference r;
  r.levels.assign(2 + 2 * priorities.size(), 0);
  const bool jct = options.objective == PlanObjectiveKind::kJct;
  for (size_t i = 0; i < jobs.size(); ++i) {
    const PlannerJob& job = jobs[i];
    const bool running = job.current_replicas > 0;
    const bool same =
        running ? (n[i] == job.current_replicas && type[i] == job.current_type) : n[i] == 0;
    if (job.in_cooldown && !same) --r.levels.back();
    if (n[i] == 0) continue;
    const size_t level =
        std::find(priorities.begin(), priorities.end(), job.priority) - priorities.begin();
    if (running && !job.preemptible) ++r.levels[0];
    ++r.levels[1 + 2 * level + (running ? 0 : 1)];
    const double s = At(job.throughput_by_type[type[i]], job, n[i]) / Slowest(job);
    double f = 1;
    if (running && !(n[i] == job.current_replicas && type[i] == job.current_type)) {
      double horizon = options.horizon_seconds;
      if (jct && job.remaining_samples) {
        const double rate_at_min =
            job.samples_per_second_at_min > 0 ? job.samples_per_second_at_min : Slowest(job);
        const double now = At(job.throughput_by_type[job.current_type], job, job.current_replicas);
        horizon = std::min(horizon, *job.remaining_samples / (rate_at_min * now / Slowest(job)));
      }
      f = horizon > 0 ? std::clamp(1 - job.restart_cost_seconds / horizon, 0.01, 1.0) : 0.01;
    }
    if (jct) {
      auto weight = [&](const PlannerJob& of) {
        const double mine = RemainingSeconds(of, options);
        double rank = 1;
        for (const PlannerJob& other : jobs) rank += RemainingSeconds(other, options) > mine;
        const double m = static_cast<double>(jobs.size());
        return std::sqrt((rank / m) * (rank / m) - ((rank - 1) / m) * ((rank - 1) / m));
      };
      const double w = weight(job);
      if (same || !running) {
        r.utility += w * s;
        continue;
      }
      // The restart's loss at no less than the floor x the mean weight; a
      // shrink on the same type also pays the restart back at its size.
      double mean = 0;
      for (const PlannerJob& other : jobs) mean += weight(other) / jobs.size();
      const double lost = std::max(w, kRestartWeightFloor * mean) * (1 - f);
      const bool shrink = type[i] == job.current_type && n[i] < job.current_replicas;
      const double back =
          shrink ? At(job.throughput_by_type[job.current_type], job, job.current_replicas) /
                       Slowest(job)
                 : 0;
      r.utility += std::max(0.01 * w, w - lost) * s - lost * back;
    } else {
      const double p = options.fairness, x = f * s;
      r.utility += p == 0 ? std::log(x) : (std::pow(x, p) - 1) / p;
    }
  }
  return r;
}

int Compare(const Reference& a, const Reference& b) {
  if (a.levels != b.levels) return a.levels < b.levels ? -1 : 1;
  const double scale = std::max({1.0, std::abs(a.utility), std::abs(b.utility)});
  if (std::abs(a.utility - b.utility) <= 1e-9 * scale) return 0;
  return a.utility < b.utility ? -1 : 1;
}

struct Instance {
  std::vector<PlannerJob> jobs;
  std::vector<GpuTypeCapacity> types;
  ClusterPlannerOptions options;
};

Instance RandomInstance(std::mt19937& rng, int max_jobs, int types, uint32_t max_extra) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  auto chance = [&](double p) { return std::uniform_real_distribution<double>(0, 1)(rng) < p; };
  auto unit = [&] { return std::uniform_real_distribution<double>(0, 1)(rng); };
  Instance in;
  for (int t = 0; t < types; ++t) {
    GpuTypeCapacity type;
    type.name = "type-" + std::to_string(t);
    type.total_gpus = uint64_t(pick(0, 10));
    in.types.push_back(type);
  }
  const int jobs = pick(2, max_jobs);
  for (int k = 0; k < jobs; ++k) {
    PlannerJob job;
    job.job_id = "ns/job-" + std::to_string(k);
    job.min_replicas = uint32_t(pick(1, 2));
    job.max_replicas = job.min_replicas + uint32_t(pick(0, int(max_extra)));
    job.gpus_per_replica = 1u << pick(0, 1);
    job.priority = pick(0, 1);
    job.preemptible = !chance(0.15);
    const double compute = 50 + 100 * unit();
    for (int t = 0; t < types; ++t) {
      // Each type its own speed and interconnect; some types not allowed.
      if (t > 0 && chance(0.2)) {
        job.throughput_by_type.emplace_back();
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
    const double costs[] = {0, 60, 300};
    job.restart_cost_seconds = costs[pick(0, 2)];
    job.started_at = kT0 + absl::Minutes(pick(0, 5));
    if (chance(0.3)) {
      job.attained_samples = 1e4 * pick(0, 50);
      if (chance(0.5)) job.remaining_samples = 1e4 * pick(0, 50);
    }
    in.jobs.push_back(job);
  }
  const double fairness[] = {-1, 0, 1, 0.5};
  in.options.fairness = fairness[pick(0, 3)];
  if (chance(0.3)) in.options.objective = PlanObjectiveKind::kJct;
  return in;
}

// Every (type, size) per job within the types' GPUs: the best by the
// reference objective.
Reference BruteForce(const Instance& in) {
  const size_t jobs = in.jobs.size();
  std::vector<std::vector<std::pair<uint32_t, uint32_t>>> options(jobs);
  for (size_t i = 0; i < jobs; ++i) {
    options[i].push_back({0, 0});
    for (uint32_t t = 0; t < in.types.size(); ++t) {
      if (in.jobs[i].throughput_by_type[t].empty()) continue;
      for (uint32_t n = in.jobs[i].min_replicas; n <= in.jobs[i].max_replicas; ++n) {
        options[i].push_back({t, n});
      }
    }
  }
  std::optional<Reference> best;
  std::vector<size_t> pick(jobs, 0);
  std::vector<uint32_t> n(jobs), type(jobs);
  while (true) {
    std::vector<uint64_t> used(in.types.size(), 0);
    for (size_t i = 0; i < jobs; ++i) {
      std::tie(type[i], n[i]) = options[i][pick[i]];
      used[type[i]] += uint64_t{n[i]} * in.jobs[i].gpus_per_replica;
    }
    bool fits = true;
    for (size_t t = 0; t < in.types.size(); ++t) fits = fits && used[t] <= *in.types[t].total_gpus;
    if (fits) {
      const Reference r = ReferenceObjective(in.jobs, n, type, in.options);
      if (!best || Compare(r, *best) > 0) best = r;
    }
    size_t i = 0;
    for (; i < jobs; ++i) {
      if (++pick[i] < options[i].size()) break;
      pick[i] = 0;
    }
    if (i == jobs) break;
  }
  return *best;
}

std::vector<uint32_t> Replicas(const ClusterPlan& plan) {
  std::vector<uint32_t> out;
  for (const PlannedJob& j : plan.jobs) out.push_back(j.replicas);
  return out;
}
std::vector<uint32_t> Types(const ClusterPlan& plan) {
  std::vector<uint32_t> out;
  for (const PlannedJob& j : plan.jobs) out.push_back(j.gpu_type);
  return out;
}

// Sizes in range, allowed types only, every type within its GPUs, totals
// that add up, and a reason for every job.
void RequireFeasible(const Instance& in, const ClusterPlan& plan) {
  REQUIRE(plan.jobs.size() == in.jobs.size());
  REQUIRE(plan.allocated_gpus_by_type.size() == in.types.size());
  std::vector<uint64_t> used(in.types.size(), 0);
  for (size_t i = 0; i < in.jobs.size(); ++i) {
    const PlannedJob& d = plan.jobs[i];
    INFO("job " << i << " replicas " << d.replicas << " type " << d.gpu_type);
    REQUIRE(!d.reason.empty());
    if (d.replicas == 0) continue;
    REQUIRE(d.gpu_type < in.types.size());
    REQUIRE(!in.jobs[i].throughput_by_type[d.gpu_type].empty());
    REQUIRE(d.replicas >= in.jobs[i].min_replicas);
    REQUIRE(d.replicas <= in.jobs[i].max_replicas);
    used[d.gpu_type] += uint64_t{d.replicas} * in.jobs[i].gpus_per_replica;
  }
  uint64_t total = 0;
  for (size_t t = 0; t < in.types.size(); ++t) {
    REQUIRE(used[t] <= *in.types[t].total_gpus);
    REQUIRE(used[t] == plan.allocated_gpus_by_type[t]);
    total += used[t];
  }
  REQUIRE(total == plan.allocated_gpus);
}

TEST_CASE("typed plans equal brute force over every type and size", "[planner][types]") {
  std::mt19937 rng(20261206);
  constexpr int kInstances = 120;
  int moved = 0, on_other_type = 0;
  for (int k = 0; k < kInstances; ++k) {
    const Instance in = RandomInstance(rng, 5, 2 + k % 2, 2);
    INFO("instance " << k);
    const ClusterPlan plan = PlanClusterTypes(in.jobs, in.types, in.options);
    RequireFeasible(in, plan);
    REQUIRE(plan.exact);
    const Reference got = ReferenceObjective(in.jobs, Replicas(plan), Types(plan), in.options);
    const Reference best = BruteForce(in);
    REQUIRE(got.levels == best.levels);
    REQUIRE(Compare(got, best) == 0);
    // The planner's own evaluation agrees with the reference.
    const QueuePlanObjective own =
        EvaluateTypedPlan(in.jobs, Replicas(plan), Types(plan), in.types, in.options);
    REQUIRE(own.feasible);
    REQUIRE(own.objective.levels == got.levels);
    REQUIRE(own.objective.utility == Approx(got.utility).margin(1e-9));
    REQUIRE(plan.utility == Approx(got.utility).margin(1e-9));
    for (size_t i = 0; i < in.jobs.size(); ++i) {
      if (plan.jobs[i].replicas == 0) continue;
      on_other_type += plan.jobs[i].gpu_type != 0;
      moved += in.jobs[i].current_replicas > 0 && plan.jobs[i].gpu_type != in.jobs[i].current_type;
    }
  }
  // The instances exercise what the types add: jobs on every type, and
  // running jobs moved between types.
  CHECK(on_other_type > 50);
  CHECK(moved > 5);
}

TEST_CASE("the scalable method keeps types and capacities, and its bound holds the optimum",
          "[planner][types]") {
  std::mt19937 rng(8080);
  int within_one_percent = 0;
  constexpr int kInstances = 60;
  for (int k = 0; k < kInstances; ++k) {
    Instance in = RandomInstance(rng, 5, 2 + k % 2, 2);
    INFO("instance " << k);
    const Reference best = BruteForce(in);
    in.options.exact_work_limit = 0;
    const ClusterPlan plan = PlanClusterTypes(in.jobs, in.types, in.options);
    RequireFeasible(in, plan);
    REQUIRE(!plan.exact);
    const Reference got = ReferenceObjective(in.jobs, Replicas(plan), Types(plan), in.options);
    REQUIRE(Compare(got, best) <= 0);
    REQUIRE(plan.upper_bound >= plan.utility);
    if (got.levels == best.levels) {
      REQUIRE(plan.upper_bound >= best.utility - 1e-9 * std::max(1.0, std::abs(best.utility)));
      within_one_percent +=
          best.utility - got.utility <= 0.01 * std::max(1.0, std::abs(best.utility));
    }
  }
  // A heuristic, but not a poor one on small instances.
  CHECK(within_one_percent >= kInstances * 3 / 4);
}

TEST_CASE("one type plans exactly as PlanCluster on that type's curves", "[planner][types]") {
  std::mt19937 rng(1234);
  for (int k = 0; k < 100; ++k) {
    Instance in = RandomInstance(rng, 6, 1, 4);
    INFO("instance " << k);
    if (k % 3 == 0) in.types[0].slots = {{1, uint32_t(k % 5)}};
    if (k % 4 == 0) in.options.exact_work_limit = 0;
    std::vector<PlannerJob> single = in.jobs;
    for (PlannerJob& job : single) job.throughput = job.throughput_by_type[0];
    const ClusterPlan typed = PlanClusterTypes(in.jobs, in.types, in.options);
    const ClusterPlan plain =
        PlanCluster(single, in.types[0].total_gpus, in.options, in.types[0].slots);
    REQUIRE(Replicas(typed) == Replicas(plain));
    REQUIRE(typed.utility == plain.utility);
    REQUIRE(typed.exact == plain.exact);
    for (size_t i = 0; i < in.jobs.size(); ++i)
      REQUIRE(typed.jobs[i].reason == plain.jobs[i].reason);
  }
}

TEST_CASE("the fast type goes to the job that gains most from it", "[planner][types]") {
  // Sia's observation: a compute-bound job speeds up 3x on the fast type, a
  // communication-bound one 1.2x. With one node of each, the compute-bound
  // job belongs on the fast type whichever order they come in.
  const std::vector<GpuTypeCapacity> types = {{"t4", 8, {}}, {"a100", 8, {}}};
  for (bool swap : {false, true}) {
    std::vector<PlannerJob> jobs = {
        Job("ns/compute", 1, 8, {Curve(1, 8, 100, 0.05), Curve(1, 8, 300, 0.05)}),
        Job("ns/comm", 1, 8, {Curve(1, 8, 100, 0.3), Curve(1, 8, 120, 0.3)})};
    if (swap) std::swap(jobs[0], jobs[1]);
    const ClusterPlan plan = PlanClusterTypes(jobs, types);
    INFO("swapped " << swap);
    const PlannedJob& compute = plan.jobs[swap ? 1 : 0];
    const PlannedJob& comm = plan.jobs[swap ? 0 : 1];
    CHECK(compute.gpu_type == 1);
    CHECK(compute.replicas == 8);
    CHECK(comm.gpu_type == 0);
    CHECK(comm.replicas == 8);
    CHECK(plan.exact);
    CHECK(plan.allocated_gpus_by_type == std::vector<uint64_t>{8, 8});
  }
}

TEST_CASE("a move between types is a restart: weighed, then explained", "[planner][types]") {
  const std::vector<GpuTypeCapacity> types = {{"t4", 8, {}}, {"a100", 8, {}}};
  // Runs on 4 T4s; 4 A100s are 10% faster.
  PlannerJob job = Job("ns/train", 1, 4, {Curve(1, 4, 100, 0.1), Curve(1, 4, 110, 0.1)});
  job.current_type = 0;
  job.current_replicas = 4;
  job.restart_cost_seconds = 300;  // f = 0.5 over the 600 s horizon
  std::vector<PlannerJob> jobs = {job};
  ClusterPlan plan = PlanClusterTypes(jobs, types);
  CHECK(plan.jobs[0].gpu_type == 0);
  CHECK(plan.jobs[0].replicas == 4);
  CHECK_THAT(plan.jobs[0].reason, Contains("stays at 4 replicas"));
  // A free restart: the move pays, and the reason says where from.
  jobs[0].restart_cost_seconds = 0;
  plan = PlanClusterTypes(jobs, types);
  CHECK(plan.jobs[0].gpu_type == 1);
  CHECK(plan.jobs[0].replicas == 4);
  CHECK_THAT(plan.jobs[0].reason, Contains("moves from t4 (4) to a100 at 4 replicas"));
  // In cooldown, a move is a change like a resize: it stays.
  jobs[0].in_cooldown = true;
  plan = PlanClusterTypes(jobs, types);
  CHECK(plan.jobs[0].gpu_type == 0);
  CHECK(plan.jobs[0].replicas == 4);
}

TEST_CASE("a job never runs on a type it may not use", "[planner][types]") {
  // The A100s are free, but the job lists only T4s, which are full.
  const std::vector<GpuTypeCapacity> types = {{"t4", 4, {}}, {"a100", 16, {}}};
  PlannerJob holder = Job("ns/holder", 4, 4, {Curve(4, 4, 100, 0), {}});
  holder.current_replicas = 4;
  const PlannerJob t4_only = Job("ns/t4-only", 1, 4, {Curve(1, 4, 100, 0), {}});
  const PlannerJob any = Job("ns/any", 1, 4, {Curve(1, 4, 100, 0), Curve(1, 4, 200, 0)});
  const std::vector<PlannerJob> jobs = {holder, t4_only, any};
  for (uint64_t limit : {uint64_t{10'000'000}, uint64_t{0}}) {
    ClusterPlannerOptions options;
    options.exact_work_limit = limit;
    const ClusterPlan plan = PlanClusterTypes(jobs, types, options);
    INFO("work limit " << limit);
    CHECK(plan.jobs[0].replicas == 4);
    CHECK(plan.jobs[1].replicas == 0);
    CHECK(plan.jobs[1].queue_position == 1);
    CHECK(plan.jobs[2].gpu_type == 1);
    CHECK(plan.jobs[2].replicas == 4);
  }
}

TEST_CASE("a waiting job is explained on a type it may use", "[planner][types]") {
  // The A100s are full and the job may use only them: it waits there, for
  // GPUs, not "cannot run" on the T4s it never asked for. A job that may use
  // no type says that.
  const std::vector<GpuTypeCapacity> types = {{"t4", 8, {}}, {"a100", 4, {}}};
  PlannerJob holder = Job("ns/holder", 4, 4, {{}, Curve(4, 4, 100, 0)});
  holder.current_type = 1;
  holder.current_replicas = 4;
  const std::vector<PlannerJob> jobs = {holder,
                                        Job("ns/a100-only", 2, 4, {{}, Curve(2, 4, 100, 0)}),
                                        Job("ns/nowhere", 1, 2, {{}, {}})};
  for (uint64_t limit : {uint64_t{10'000'000}, uint64_t{0}}) {
    ClusterPlannerOptions options;
    options.exact_work_limit = limit;
    const ClusterPlan plan = PlanClusterTypes(jobs, types, options);
    INFO("work limit " << limit);
    CHECK(plan.jobs[1].replicas == 0);
    CHECK(plan.jobs[1].gpu_type == 1);
    CHECK_THAT(plan.jobs[1].reason, !Contains("cannot run"));
    CHECK(plan.jobs[2].replicas == 0);
    CHECK_THAT(plan.jobs[2].reason, Contains("may use none of the cluster's GPU types"));
  }
}

TEST_CASE("without types every job waits", "[planner][types]") {
  const std::vector<PlannerJob> jobs = {Job("ns/a", 1, 2, {Curve(1, 2, 100, 0)})};
  const ClusterPlan plan = PlanClusterTypes(jobs, {});
  CHECK(plan.jobs[0].replicas == 0);
  CHECK(!plan.jobs[0].reason.empty());
}

}  // namespace
}  // namespace rescale
