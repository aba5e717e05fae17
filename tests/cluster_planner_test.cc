// Tests of rescale::PlanCluster, the cluster planner. The core check compares
// the planner's lexicographic objective with brute-force enumeration on
// hundreds of seeded random instances (up to 6 jobs and 24 GPUs; concave and
// non-concave curves, mixed priorities, gpus_per_replica in {1,2,4,8}, some
// jobs running, in cooldown or non-preemptible), using an objective written
// independently of the planner's. The scalable solver (forced through the
// options) is checked against the same optimum for levels 1-3 and against its
// own upper bound. Behaviour tests, named by behaviour, pin down what users
// see: who waits and why, who is preempted, shrunk or pinned, where spare
// GPUs go, and the wording of reasons and queue positions.
#include "rescale/cluster_planner.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace rescale {
namespace {

using Catch::Matchers::Contains;

const absl::Time kT0 = absl::FromUnixSeconds(1'700'000'000);

// Throughput n / (a + b n) for n = min..max: concave, saturating.
std::vector<double> Saturating(uint32_t min, uint32_t max, double a, double b) {
  std::vector<double> t;
  for (uint32_t n = min; n <= max; ++n) t.push_back(100.0 * n / (a + b * n));
  return t;
}
std::vector<double> Linear(uint32_t min, uint32_t max) { return Saturating(min, max, 1, 0); }
std::vector<double> Flat(uint32_t min, uint32_t max) {
  return std::vector<double>(max - min + 1, 100.0);
}

PlannerJob Job(const std::string& id, uint32_t min, uint32_t max, uint32_t gpus_per_replica,
               int32_t priority = 0) {
  PlannerJob job;
  job.job_id = id;
  job.min_replicas = min;
  job.max_replicas = max;
  job.gpus_per_replica = gpus_per_replica;
  job.priority = priority;
  job.started_at = kT0;
  job.throughput = Linear(min, max);
  return job;
}

PlannerJob Running(PlannerJob job, uint32_t replicas, absl::Duration started_after = {}) {
  job.current_replicas = replicas;
  job.started_at = kT0 + started_after;
  return job;
}

// ---- an objective written independently of the planner's --------------------

struct Reference {
  std::vector<int64_t> levels;
  double utility = 0;
};

std::vector<int32_t> PrioritiesHighFirst(const std::vector<PlannerJob>& jobs) {
  std::vector<int32_t> p;
  for (const PlannerJob& j : jobs) p.push_back(j.priority);
  std::sort(p.rbegin(), p.rend());
  p.erase(std::unique(p.begin(), p.end()), p.end());
  return p;
}

// Samples/s of `job` at n, the last point standing for sizes past the curve.
double ThroughputAt(const PlannerJob& job, uint32_t n) {
  return job.throughput[std::min<size_t>(n - job.min_replicas, job.throughput.size() - 1)];
}

// jct: samples/s at min_replicas, stated or the curve's.
double RateAtMin(const PlannerJob& job) {
  return job.samples_per_second_at_min > 0 ? job.samples_per_second_at_min : job.throughput[0];
}

// jct: remaining work in seconds at min_replicas, as cluster_planner.h defines it.
double RemainingSeconds(const PlannerJob& job, const ClusterPlannerOptions& options) {
  const double work = job.remaining_samples.value_or(job.attained_samples);
  double seconds = work / RateAtMin(job);
  if (job.current_replicas == 0) seconds -= job.waiting_seconds;
  return std::max(seconds, options.min_remaining_seconds);
}

// jct: the heSRPT weight of jobs[i] from its rank (1 = most remaining work;
// equal remaining work shares the rank of the first of them, the smaller).
double JctWeight(const std::vector<PlannerJob>& jobs, size_t i,
                 const ClusterPlannerOptions& options) {
  const double mine = RemainingSeconds(jobs[i], options);
  double rank = 1;
  for (const PlannerJob& other : jobs) rank += RemainingSeconds(other, options) > mine;
  const double m = static_cast<double>(jobs.size());
  return std::sqrt((rank / m) * (rank / m) - ((rank - 1) / m) * ((rank - 1) / m));
}

double ReferenceUtility(const std::vector<PlannerJob>& jobs, size_t i, uint32_t n,
                        const ClusterPlannerOptions& options) {
  const PlannerJob& job = jobs[i];
  const double s = job.throughput[n - job.min_replicas] / job.throughput[0];
  const bool jct = options.objective == PlanObjectiveKind::kJct;
  double f = 1;
  if (job.current_replicas > 0 && n != job.current_replicas) {
    double horizon = options.horizon_seconds;
    if (jct && job.remaining_samples) {
      const double rate =
          RateAtMin(job) * ThroughputAt(job, job.current_replicas) / job.throughput[0];
      horizon = std::min(horizon, *job.remaining_samples / rate);
    }
    f = horizon > 0 ? std::clamp(1 - job.restart_cost_seconds / horizon, 0.01, 1.0) : 0.01;
  }
  if (jct) {
    const double w = JctWeight(jobs, i, options);
    if (job.current_replicas == 0 || n == job.current_replicas) return w * s;
    // The restart's loss, priced at no less than the floor x the mean weight;
    // a shrink also pays the restart back at the current size.
    double mean = 0;
    for (size_t k = 0; k < jobs.size(); ++k) mean += JctWeight(jobs, k, options) / jobs.size();
    const double lost = std::max(w, kRestartWeightFloor * mean) * (1 - f);
    const double back =
        n < job.current_replicas ? ThroughputAt(job, job.current_replicas) / job.throughput[0] : 0;
    return std::max(0.01 * w, w - lost) * s - lost * back;
  }
  const double x = f * s;
  const double p = options.fairness;
  return p == 0 ? std::log(x) : (std::pow(x, p) - 1) / p;
}

// Levels and utility contributed by one job at n.
Reference JobContribution(const std::vector<PlannerJob>& jobs, size_t i, uint32_t n,
                          const std::vector<int32_t>& priorities,
                          const ClusterPlannerOptions& options) {
  const PlannerJob& job = jobs[i];
  Reference r;
  r.levels.assign(2 + 2 * priorities.size(), 0);
  const size_t level =
      std::find(priorities.begin(), priorities.end(), job.priority) - priorities.begin();
  const bool running = job.current_replicas > 0;
  if (n > 0) {
    if (running && !job.preemptible) r.levels[0] = 1;
    r.levels[1 + 2 * level + (running ? 0 : 1)] = 1;
    r.utility = ReferenceUtility(jobs, i, n, options);
  }
  if (job.in_cooldown && n != job.current_replicas) r.levels.back() = -1;
  return r;
}

Reference ReferenceObjective(const std::vector<PlannerJob>& jobs, const std::vector<uint32_t>& n,
                             const ClusterPlannerOptions& options) {
  const std::vector<int32_t> priorities = PrioritiesHighFirst(jobs);
  Reference total;
  total.levels.assign(2 + 2 * priorities.size(), 0);
  for (size_t i = 0; i < jobs.size(); ++i) {
    Reference c = JobContribution(jobs, i, n[i], priorities, options);
    for (size_t k = 0; k < c.levels.size(); ++k) total.levels[k] += c.levels[k];
    total.utility += c.utility;
  }
  return total;
}

// -1/0/1: levels exactly, then utility within 1e-9 relative.
int Compare(const Reference& a, const Reference& b) {
  if (a.levels != b.levels) return a.levels < b.levels ? -1 : 1;
  const double scale = std::max({1.0, std::abs(a.utility), std::abs(b.utility)});
  if (std::abs(a.utility - b.utility) <= 1e-9 * scale) return 0;
  return a.utility < b.utility ? -1 : 1;
}

struct Optimum {
  Reference value;
  std::vector<uint32_t> replicas;  // one optimal assignment
};

// The best objective over every gang-feasible assignment within capacity.
Optimum BruteForce(const std::vector<PlannerJob>& jobs, std::optional<uint64_t> capacity,
                   const ClusterPlannerOptions& options) {
  const std::vector<int32_t> priorities = PrioritiesHighFirst(jobs);
  struct Choice {
    uint32_t replicas;
    uint64_t gpus;
    Reference value;
  };
  std::vector<std::vector<Choice>> choices(jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i) {
    choices[i].push_back({0, 0, JobContribution(jobs, i, 0, priorities, options)});
    for (uint32_t n = jobs[i].min_replicas; n <= jobs[i].max_replicas; ++n) {
      choices[i].push_back({n, uint64_t{n} * jobs[i].gpus_per_replica,
                            JobContribution(jobs, i, n, priorities, options)});
    }
  }
  Optimum best;
  bool have_best = false;
  Reference sum;
  sum.levels.assign(2 + 2 * priorities.size(), 0);
  std::vector<uint32_t> assignment(jobs.size(), 0);
  std::function<void(size_t, uint64_t)> walk = [&](size_t i, uint64_t used) {
    if (i == jobs.size()) {
      if (!have_best || Compare(sum, best.value) > 0) {
        best = {sum, assignment};
        have_best = true;
      }
      return;
    }
    for (const Choice& c : choices[i]) {
      if (capacity && used + c.gpus > *capacity) continue;
      for (size_t k = 0; k < sum.levels.size(); ++k) sum.levels[k] += c.value.levels[k];
      sum.utility += c.value.utility;
      assignment[i] = c.replicas;
      walk(i + 1, used + c.gpus);
      for (size_t k = 0; k < sum.levels.size(); ++k) sum.levels[k] -= c.value.levels[k];
      sum.utility -= c.value.utility;
    }
  };
  walk(0, 0);
  return best;
}

// ---- random instances -------------------------------------------------------

struct Instance {
  std::vector<PlannerJob> jobs;
  std::optional<uint64_t> capacity;
  ClusterPlannerOptions options;
};

std::vector<double> RandomCurve(std::mt19937& rng, uint32_t min, uint32_t max) {
  std::uniform_real_distribution<double> unit(0, 1);
  const int shape = std::uniform_int_distribution<int>(0, 3)(rng);
  if (shape <= 1) return Saturating(min, max, 0.2 + 2 * unit(rng), 0.5 * unit(rng));
  std::vector<double> t;
  double v = 50 + 100 * unit(rng);
  for (uint32_t n = min; n <= max; ++n) {
    if (shape == 2) {
      v *= 0.7 + 0.9 * unit(rng);  // a non-concave random walk
    } else {
      v = 100.0 * n * ((n % 2 == 0) ? 1.0 : 0.6);  // even sizes are efficient
    }
    t.push_back(v);
  }
  return t;
}

Instance RandomInstance(std::mt19937& rng, int max_jobs, uint64_t max_capacity,
                        uint32_t max_extra_sizes, double non_preemptible = 0.2) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  auto chance = [&](double p) { return std::uniform_real_distribution<double>(0, 1)(rng) < p; };
  Instance in;
  const int jobs = pick(std::min(2, max_jobs), max_jobs);
  const bool one_priority = chance(0.2);
  for (int k = 0; k < jobs; ++k) {
    PlannerJob job;
    job.job_id = "ns/job-" + std::to_string(pick(0, 99));  // duplicates are fine
    job.min_replicas = static_cast<uint32_t>(pick(1, 3));
    job.max_replicas = job.min_replicas + static_cast<uint32_t>(pick(0, int(max_extra_sizes)));
    job.gpus_per_replica = 1u << pick(0, 3);
    job.priority = one_priority ? 0 : pick(0, 2);
    job.preemptible = !chance(non_preemptible);
    if (chance(0.5)) {
      job.current_replicas =
          static_cast<uint32_t>(pick(int(job.min_replicas), int(job.max_replicas)));
      if (chance(0.1)) job.current_replicas = job.max_replicas + 1;  // spec shrank under it
    } else {
      job.suspended = chance(0.3);
    }
    job.in_cooldown = chance(0.25);
    const double costs[] = {0, 30, 60, 300, 700};
    job.restart_cost_seconds = costs[pick(0, 4)];
    job.started_at = kT0 + absl::Minutes(pick(0, 5));
    job.throughput = RandomCurve(rng, job.min_replicas, job.max_replicas);
    in.jobs.push_back(job);
  }
  if (!chance(0.08)) in.capacity = static_cast<uint64_t>(pick(0, int(max_capacity)));
  const double fairness[] = {-1, -1, 0, 1, 0.5, -2};
  in.options.fairness = fairness[pick(0, 5)];
  if (chance(0.4)) {
    // jct: some sizes known, some not; some jobs waited, some remaining work
    // below the floor; equal remaining work now and then (shared ranks).
    in.options.objective = PlanObjectiveKind::kJct;
    for (PlannerJob& job : in.jobs) {
      const double works[] = {0, 5e3, 5e4, 2e5, 2e5, 1e6};
      job.attained_samples = works[pick(0, 5)];
      if (chance(0.6)) job.remaining_samples = works[pick(0, 5)];
      if (job.current_replicas == 0 && chance(0.5)) job.waiting_seconds = 60.0 * pick(1, 60);
      if (chance(0.3)) job.samples_per_second_at_min = 10.0 * pick(1, 100);
    }
  }
  const double horizons[] = {600, 300, 1200};
  in.options.horizon_seconds = horizons[pick(0, 2)];
  return in;
}

void RequireFeasible(const Instance& in, const ClusterPlan& plan) {
  REQUIRE(plan.jobs.size() == in.jobs.size());
  uint64_t used = 0;
  for (size_t i = 0; i < in.jobs.size(); ++i) {
    const uint32_t n = plan.jobs[i].replicas;
    INFO("job " << i << " replicas " << n);
    REQUIRE((n == 0 || (n >= in.jobs[i].min_replicas && n <= in.jobs[i].max_replicas)));
    REQUIRE(((n == 0) == (plan.jobs[i].queue_position > 0)));
    REQUIRE(!plan.jobs[i].reason.empty());
    used += uint64_t{n} * in.jobs[i].gpus_per_replica;
  }
  REQUIRE(used == plan.allocated_gpus);
  if (in.capacity) REQUIRE(used <= *in.capacity);
}

bool NonPreemptibleFit(const Instance& in) {
  if (!in.capacity) return true;
  uint64_t need = 0;
  for (const PlannerJob& j : in.jobs) {
    if (j.current_replicas > 0 && !j.preemptible) {
      const uint64_t gang = uint64_t{j.min_replicas} * j.gpus_per_replica;
      if (gang <= *in.capacity) need += gang;
    }
  }
  return need <= *in.capacity;
}

std::vector<uint32_t> ReplicasOf(const ClusterPlan& plan) {
  std::vector<uint32_t> n;
  for (const PlannedJob& j : plan.jobs) n.push_back(j.replicas);
  return n;
}

// Whether two assignments run the same jobs and leave the same cooldown jobs
// unchanged: then the scalable solver's bound covers the other's utility.
bool SameAdmission(const std::vector<PlannerJob>& jobs, const std::vector<uint32_t>& a,
                   const std::vector<uint32_t>& b) {
  for (size_t i = 0; i < jobs.size(); ++i) {
    if ((a[i] > 0) != (b[i] > 0)) return false;
    if (jobs[i].in_cooldown &&
        (a[i] == jobs[i].current_replicas) != (b[i] == jobs[i].current_replicas)) {
      return false;
    }
  }
  return true;
}

Reference ObjectiveOf(const Instance& in, const ClusterPlan& plan) {
  return ReferenceObjective(in.jobs, ReplicasOf(plan), in.options);
}

ClusterPlannerOptions ScalableOnly(ClusterPlannerOptions options) {
  options.exact_job_limit = 0;
  options.exact_work_limit = 0;
  return options;
}

// ---- exactness ---------------------------------------------------------------

TEST_CASE("planner objective equals brute force on random small instances", "[planner]") {
  std::mt19937 rng(20240611);
  constexpr int kInstances = 600;
  int equal = 0, exact_plans = 0;
  for (int k = 0; k < kInstances; ++k) {
    const Instance in = RandomInstance(rng, 6, 24, 4);
    const ClusterPlan plan = PlanCluster(in.jobs, in.capacity, in.options);
    INFO("instance " << k);
    RequireFeasible(in, plan);
    const Reference best = BruteForce(in.jobs, in.capacity, in.options).value;
    const Reference got = ObjectiveOf(in, plan);
    // The planner's own evaluation agrees with the reference one.
    const PlanObjective own = EvaluatePlan(in.jobs, ReplicasOf(plan), in.options);
    REQUIRE(own.levels == got.levels);
    REQUIRE(own.utility == Approx(got.utility).margin(1e-12));
    REQUIRE(plan.utility == Approx(got.utility).margin(1e-12));
    REQUIRE(got.levels == best.levels);
    REQUIRE(Compare(got, best) == 0);
    REQUIRE(plan.gap == 0);
    equal += Compare(got, best) == 0;
    exact_plans += plan.exact;
  }
  CHECK(equal == kInstances);
  CHECK(exact_plans == kInstances);
}

TEST_CASE("scalable solver meets the optimal levels 1-3 and stays within its bound", "[planner]") {
  std::mt19937 rng(777);
  int level3_checked = 0, bound_checked = 0, overcommitted = 0;
  for (int k = 0; k < 400; ++k) {
    // Every other instance is rich in non-preemptible jobs, so capacity is
    // often below what they need.
    const Instance in = RandomInstance(rng, 6, 24, 4, k % 2 ? 0.2 : 0.8);
    const ClusterPlan plan = PlanCluster(in.jobs, in.capacity, ScalableOnly(in.options));
    INFO("instance " << k);
    RequireFeasible(in, plan);
    const Optimum optimum = BruteForce(in.jobs, in.capacity, in.options);
    const Reference& best = optimum.value;
    const Reference got = ObjectiveOf(in, plan);
    // Levels 1-2 always; level 3 whenever the non-preemptible jobs fit.
    REQUIRE(std::vector<int64_t>(got.levels.begin(), got.levels.end() - 1) ==
            std::vector<int64_t>(best.levels.begin(), best.levels.end() - 1));
    if (NonPreemptibleFit(in)) {
      REQUIRE(got.levels.back() == best.levels.back());
      ++level3_checked;
    } else {
      REQUIRE(got.levels.back() <= best.levels.back());
      ++overcommitted;
    }
    REQUIRE(plan.utility <= plan.upper_bound + 1e-9);
    REQUIRE(plan.gap >= 0);
    if (SameAdmission(in.jobs, ReplicasOf(plan), optimum.replicas)) {
      REQUIRE(best.utility <= plan.upper_bound + 1e-9 * std::max(1.0, std::abs(best.utility)));
      ++bound_checked;
    }
  }
  CHECK(level3_checked > 250);
  CHECK(bound_checked > 250);
  CHECK(overcommitted > 10);
}

TEST_CASE("scalable solver matches the exact DP on medium instances", "[planner]") {
  std::mt19937 rng(4242);
  for (int k = 0; k < 60; ++k) {
    Instance in = RandomInstance(rng, 30, 160, 6);
    ClusterPlannerOptions exact = in.options;
    exact.exact_job_limit = 40;
    exact.exact_work_limit = 1'000'000'000;
    const ClusterPlan reference = PlanCluster(in.jobs, in.capacity, exact);
    const ClusterPlan plan = PlanCluster(in.jobs, in.capacity, ScalableOnly(in.options));
    INFO("instance " << k << " jobs " << in.jobs.size());
    REQUIRE(reference.exact);
    RequireFeasible(in, reference);
    RequireFeasible(in, plan);
    const Reference best = ObjectiveOf(in, reference);
    const Reference got = ObjectiveOf(in, plan);
    REQUIRE(std::vector<int64_t>(got.levels.begin(), got.levels.end() - 1) ==
            std::vector<int64_t>(best.levels.begin(), best.levels.end() - 1));
    if (NonPreemptibleFit(in)) REQUIRE(got.levels.back() == best.levels.back());
    REQUIRE(plan.utility <= plan.upper_bound + 1e-9);
    if (got.levels == best.levels) REQUIRE(plan.utility <= reference.utility + 1e-9);
    if (SameAdmission(in.jobs, ReplicasOf(plan), ReplicasOf(reference))) {
      REQUIRE(reference.utility <=
              plan.upper_bound + 1e-9 * std::max(1.0, std::abs(reference.utility)));
    }
  }
}

TEST_CASE("never over capacity and never a partial gang", "[planner]") {
  std::mt19937 rng(99);
  for (int k = 0; k < 200; ++k) {
    const Instance small = RandomInstance(rng, 12, 64, 8);
    RequireFeasible(small, PlanCluster(small.jobs, small.capacity, small.options));
    RequireFeasible(small, PlanCluster(small.jobs, small.capacity, ScalableOnly(small.options)));
  }
  for (int k = 0; k < 5; ++k) {
    const Instance large = RandomInstance(rng, 400, 2000, 24);
    RequireFeasible(large, PlanCluster(large.jobs, large.capacity, large.options));
  }
}

// ---- behaviour ---------------------------------------------------------------

TEST_CASE("a job waits only for GPUs held by jobs of higher or equal priority", "[planner]") {
  // W (priority 1) needs 16 GPUs. R, of equal priority, holds 4; L, of lower
  // priority, could be preempted but its 8 GPUs would not be enough.
  std::vector<PlannerJob> jobs = {
      Running(Job("ns/r", 1, 1, 4, 1), 1),
      Job("ns/w", 2, 4, 8, 1),
      Running(Job("ns/l", 1, 4, 2, 0), 1),
  };
  ClusterPlan plan = PlanCluster(jobs, 16);
  CHECK(plan.jobs[0].replicas == 1);
  CHECK(plan.jobs[1].replicas == 0);
  CHECK(plan.jobs[2].replicas == 4);  // the spare GPUs go to L meanwhile
  CHECK(plan.jobs[1].binding == BindingConstraint::kCapacity);
  CHECK(plan.jobs[1].reason ==
        "needs 16 GPUs; 4 free; 4 held by jobs of higher or equal priority; 8 by lower-priority "
        "jobs");
  CHECK(plan.jobs[1].queue_position == 1);

  // When R is of lower priority too, W starts and both lower jobs make room.
  jobs[0].priority = 0;
  plan = PlanCluster(jobs, 16);
  CHECK(plan.jobs[1].replicas == 2);
  CHECK(plan.allocated_gpus <= 16);
}

TEST_CASE("equal priority never preempts", "[planner]") {
  // B waits even though it was registered before A started and would use the
  // GPUs better: a running job is kept before a waiting one of equal priority.
  PlannerJob a = Running(Job("ns/a", 3, 3, 4), 3, absl::Minutes(10));
  a.throughput = Flat(3, 3);
  PlannerJob b = Job("ns/b", 2, 4, 4);
  b.started_at = kT0;
  const std::vector<PlannerJob> jobs = {a, b};
  const ClusterPlan plan = PlanCluster(jobs, 16);
  CHECK(plan.jobs[0].replicas == 3);
  CHECK(plan.jobs[1].replicas == 0);
  CHECK(plan.jobs[1].reason == "needs 8 GPUs; 4 free; 12 held by jobs of higher or equal priority");
}

TEST_CASE("lower-priority jobs shrink to min before any is suspended", "[planner]") {
  const std::vector<PlannerJob> jobs = {
      Running(Job("ns/low-1", 1, 4, 4, 0), 4),
      Running(Job("ns/low-2", 1, 4, 4, 0), 4),
      Job("ns/high", 4, 4, 4, 5),
  };
  ClusterPlan plan = PlanCluster(jobs, 32);
  CHECK(plan.jobs[2].replicas == 4);
  CHECK(plan.jobs[0].replicas > 0);
  CHECK(plan.jobs[1].replicas > 0);
  CHECK(plan.jobs[0].replicas + plan.jobs[1].replicas == 4);

  // With room for only one of them at its minimum, exactly one is suspended.
  plan = PlanCluster(jobs, 20);
  CHECK(plan.jobs[2].replicas == 4);
  CHECK(plan.jobs[0].replicas + plan.jobs[1].replicas == 1);
  const size_t suspended = plan.jobs[0].replicas == 0 ? 0 : 1;
  CHECK(plan.jobs[suspended].binding == BindingConstraint::kPreempted);
  CHECK_THAT(plan.jobs[suspended].reason, Contains("suspended: needs 4 GPUs"));
}

TEST_CASE("non-preemptible jobs survive until capacity itself is too small", "[planner]") {
  PlannerJob guarded = Running(Job("ns/guarded", 2, 2, 4, 0), 2);
  guarded.preemptible = false;
  const PlannerJob high = Job("ns/high", 3, 3, 4, 9);
  std::vector<PlannerJob> jobs = {guarded, high};
  ClusterPlan plan = PlanCluster(jobs, 16);
  CHECK(plan.jobs[0].replicas == 2);
  CHECK(plan.jobs[1].replicas == 0);
  CHECK(plan.jobs[1].reason ==
        "needs 12 GPUs; 8 free; 0 held by jobs of higher or equal priority; 8 by non-preemptible "
        "jobs of lower priority");

  // Two non-preemptible jobs on a cluster that holds only one: the cheaper
  // one is kept, the other stops because of capacity, not preemption.
  PlannerJob other = Running(Job("ns/guarded-2", 3, 3, 4, 9), 3);
  other.preemptible = false;
  jobs = {guarded, other};
  plan = PlanCluster(jobs, 12);
  CHECK(plan.jobs[0].replicas == 0);  // priority 9 wins level 2 at equal count
  CHECK(plan.jobs[1].replicas == 3);
  CHECK(plan.jobs[0].binding == BindingConstraint::kCapacity);
  CHECK_THAT(plan.jobs[0].reason, Contains("cannot hold every non-preemptible job"));
  plan = PlanCluster(jobs, 10);
  CHECK(plan.jobs[0].replicas == 2);
  CHECK(plan.jobs[1].replicas == 0);
}

TEST_CASE("cooldown jobs are left alone unless priorities force it", "[planner]") {
  PlannerJob cooling = Running(Job("ns/cooling", 1, 8, 4, 0), 2);
  cooling.in_cooldown = true;
  const PlannerJob free_job = Running(Job("ns/free", 1, 8, 4, 0), 2);
  std::vector<PlannerJob> jobs = {cooling, free_job};
  ClusterPlan plan = PlanCluster(jobs, 32);
  CHECK(plan.jobs[0].replicas == 2);
  CHECK(plan.jobs[0].binding == BindingConstraint::kCooldown);
  CHECK(plan.jobs[0].reason ==
        "stays at 2 replicas (8 GPUs): it is in cooldown, so its size is left alone");
  CHECK(plan.jobs[1].replicas == 6);

  // Capacity for both only if the cooling job shrinks: equal priority keeps
  // both running, so it shrinks despite the cooldown.
  plan = PlanCluster(jobs, 8);
  CHECK(plan.jobs[0].replicas == 1);
  CHECK(plan.jobs[1].replicas == 1);

  // A higher-priority job that needs all GPUs suspends it.
  jobs.push_back(Job("ns/urgent", 8, 8, 4, 3));
  plan = PlanCluster(jobs, 32);
  CHECK(plan.jobs[2].replicas == 8);
  CHECK(plan.jobs[0].replicas == 0);
  CHECK(plan.jobs[0].binding == BindingConstraint::kPreempted);
}

TEST_CASE("leftover GPUs go to the job with the best speedup", "[planner]") {
  PlannerJob flat = Running(Job("ns/flat", 1, 8, 2), 1);
  flat.throughput = Flat(1, 8);
  PlannerJob scaling = Running(Job("ns/scaling", 1, 8, 2), 1);
  scaling.throughput = Saturating(1, 8, 1, 0.05);
  PlannerJob modest = Running(Job("ns/modest", 1, 8, 2), 1);
  modest.throughput = Saturating(1, 8, 1, 0.8);
  const std::vector<PlannerJob> jobs = {flat, scaling, modest};
  ClusterPlannerOptions total_speedup;
  total_speedup.fairness = 1;
  total_speedup.horizon_seconds = 1e9;  // restarts are free here
  ClusterPlan plan = PlanCluster(jobs, 10, total_speedup);
  CHECK(plan.jobs[0].replicas == 1);
  CHECK(plan.jobs[0].binding == BindingConstraint::kEfficiency);
  CHECK(plan.jobs[1].replicas == 3);  // both spare replicas
  CHECK(plan.jobs[2].replicas == 1);
  // Every spare GPU of a cheap cluster is used where it helps.
  CHECK(plan.allocated_gpus == 10);
  CHECK(plan.jobs[1].value_one_more > 0);
  CHECK(plan.jobs[1].value_one_fewer < 0);
}

TEST_CASE("restart cost keeps a running job at its size when the gain is small", "[planner]") {
  PlannerJob job = Running(Job("ns/steady", 1, 8, 1), 4);
  job.throughput = Saturating(1, 8, 1, 1.5);  // nearly saturated at 4
  std::vector<PlannerJob> jobs = {job};
  ClusterPlan plan = PlanCluster(jobs, 6);
  CHECK(plan.jobs[0].replicas == 4);
  CHECK(plan.jobs[0].binding == BindingConstraint::kRestartCost);
  CHECK_THAT(plan.jobs[0].reason, Contains("not worth a 60 s restart over the 600 s horizon"));
  // The marginal values are level-4 differences, restart included.
  const ClusterPlannerOptions defaults;
  CHECK(plan.jobs[0].value_one_more < 0);
  CHECK(plan.jobs[0].value_one_more ==
        Approx(ReferenceUtility(jobs, 0, 5, defaults) - ReferenceUtility(jobs, 0, 4, defaults)));
  CHECK(plan.jobs[0].value_one_fewer ==
        Approx(ReferenceUtility(jobs, 0, 3, defaults) - ReferenceUtility(jobs, 0, 4, defaults)));

  jobs[0].restart_cost_seconds = 0;
  plan = PlanCluster(jobs, 6);
  CHECK(plan.jobs[0].replicas == 6);
}

TEST_CASE("capacity drop shrinks jobs then suspends the most recently started first", "[planner]") {
  std::vector<PlannerJob> jobs;
  for (int k = 0; k < 3; ++k) {
    jobs.push_back(Running(Job("ns/job-" + std::to_string(k), 2, 4, 4), 4, absl::Minutes(k)));
  }
  ClusterPlan plan = PlanCluster(jobs, 48);
  for (const PlannedJob& j : plan.jobs) CHECK(j.replicas == 4);
  plan = PlanCluster(jobs, 24);
  for (const PlannedJob& j : plan.jobs) CHECK(j.replicas == 2);
  plan = PlanCluster(jobs, 20);
  CHECK(plan.jobs[0].replicas > 0);
  CHECK(plan.jobs[1].replicas > 0);
  CHECK(plan.jobs[2].replicas == 0);  // started last
  CHECK(plan.jobs[2].queue_position == 1);
  plan = PlanCluster(jobs, 8);
  CHECK(plan.jobs[0].replicas == 2);
  CHECK(plan.jobs[1].replicas == 0);
  CHECK(plan.jobs[2].replicas == 0);
  CHECK(plan.jobs[1].queue_position == 1);
  CHECK(plan.jobs[2].queue_position == 2);
  // The scalable solver follows the same rule.
  plan = PlanCluster(jobs, 8, ScalableOnly({}));
  CHECK(plan.jobs[0].replicas == 2);
}

TEST_CASE("unbounded capacity runs every job at its best size", "[planner]") {
  PlannerJob cooling = Running(Job("ns/cooling", 1, 8, 4), 3);
  cooling.in_cooldown = true;
  PlannerJob peaked = Job("ns/peaked", 1, 6, 2);
  peaked.throughput = {100, 190, 260, 250, 240, 230};  // best at 3
  std::vector<PlannerJob> jobs = {Job("ns/linear", 2, 16, 8, 0), cooling, peaked};
  jobs.push_back(Job("ns/broken", 4, 2, 1));  // max < min: cannot run
  const ClusterPlan plan = PlanCluster(jobs, std::nullopt);
  CHECK(plan.exact);
  CHECK(plan.gap == 0);
  CHECK(plan.jobs[0].replicas == 16);
  CHECK(plan.jobs[0].binding == BindingConstraint::kMaxReplicas);
  CHECK(plan.jobs[0].reason == "starts at 16 replicas (128 GPUs), its max_replicas");
  CHECK(plan.jobs[1].replicas == 3);
  CHECK(plan.jobs[2].replicas == 3);
  CHECK(plan.jobs[2].binding == BindingConstraint::kEfficiency);
  CHECK(plan.jobs[3].replicas == 0);
  CHECK_THAT(plan.jobs[3].reason, Contains("cannot run"));
  CHECK(plan.allocated_gpus == 128 + 12 + 6);
}

TEST_CASE("degenerate inputs plan without failing", "[planner]") {
  CHECK(PlanCluster({}, 16).jobs.empty());
  CHECK(PlanCluster({}, std::nullopt).exact);

  std::vector<PlannerJob> jobs = {Running(Job("ns/a", 1, 4, 2), 2), Job("ns/b", 1, 1, 1)};
  ClusterPlan plan = PlanCluster(jobs, 0);
  CHECK(plan.jobs[0].replicas == 0);
  CHECK(plan.jobs[1].replicas == 0);
  CHECK(plan.allocated_gpus == 0);

  // A huge max_replicas with a short curve: sizes past the curve gain
  // nothing, so the job stays at the end of its curve (and planning is fast).
  PlannerJob wide = Job("ns/wide", 1, 4'000'000, 1);
  wide.throughput = Linear(1, 4);
  PlannerJob empty = Job("ns/no-curve", 2, 8, 1);
  empty.throughput.clear();
  PlannerJob zero = Job("ns/zero-gpus", 1, 2, 1);
  zero.gpus_per_replica = 0;  // read as 1
  jobs = {wide, empty, zero};
  for (std::optional<uint64_t> capacity :
       {std::optional<uint64_t>(), std::optional<uint64_t>(40)}) {
    plan = PlanCluster(jobs, capacity);
    CHECK(plan.jobs[0].replicas == 4);
    CHECK(plan.jobs[0].binding == BindingConstraint::kEfficiency);
    CHECK(plan.jobs[1].replicas == 2);
    CHECK(plan.jobs[2].replicas == 2);
  }
}

TEST_CASE("planning is deterministic", "[planner]") {
  std::mt19937 rng(5);
  for (int k = 0; k < 20; ++k) {
    const Instance in = RandomInstance(rng, 60, 300, 10);
    for (const ClusterPlannerOptions& options : {in.options, ScalableOnly(in.options)}) {
      const ClusterPlan a = PlanCluster(in.jobs, in.capacity, options);
      const ClusterPlan b = PlanCluster(in.jobs, in.capacity, options);
      REQUIRE(a.jobs.size() == b.jobs.size());
      for (size_t i = 0; i < a.jobs.size(); ++i) {
        REQUIRE(a.jobs[i].replicas == b.jobs[i].replicas);
        REQUIRE(a.jobs[i].reason == b.jobs[i].reason);
        REQUIRE(a.jobs[i].queue_position == b.jobs[i].queue_position);
      }
      REQUIRE(a.utility == b.utility);
      REQUIRE(a.upper_bound == b.upper_bound);
    }
  }
}

TEST_CASE("waiting reasons and queue positions follow the objective's order", "[planner]") {
  PlannerJob resumed = Job("ns/b-suspended", 2, 2, 8, 1);
  resumed.suspended = true;
  resumed.started_at = kT0 + absl::Minutes(5);
  PlannerJob older = Job("ns/c-older", 2, 2, 8, 1);
  older.started_at = kT0;
  PlannerJob low = Job("ns/a-low", 1, 1, 8, 0);
  PlannerJob top = Job("ns/z-top", 3, 3, 8, 2);  // larger than the cluster
  const std::vector<PlannerJob> jobs = {
      Running(Job("ns/holder", 3, 3, 4, 2), 3), resumed, older, low, top,
  };
  const ClusterPlan plan = PlanCluster(jobs, 16);
  CHECK(plan.jobs[0].replicas == 3);
  CHECK(plan.jobs[1].replicas == 0);
  CHECK(plan.jobs[2].replicas == 0);
  CHECK(plan.jobs[3].replicas == 0);
  CHECK(plan.jobs[4].replicas == 0);
  CHECK(plan.jobs[4].queue_position == 1);
  CHECK(plan.jobs[4].reason == "needs 24 GPUs (min_replicas=3 x 8); the cluster has only 16");
  CHECK(plan.jobs[2].queue_position == 2);  // registered before the other priority-1 job
  CHECK(plan.jobs[1].queue_position == 3);
  CHECK(plan.jobs[3].queue_position == 4);
  CHECK(plan.jobs[1].reason ==
        "needs 16 GPUs; 4 free; 12 held by jobs of higher or equal priority");
  CHECK(plan.jobs[3].reason == "needs 8 GPUs; 4 free; 12 held by jobs of higher or equal priority");
  CHECK(plan.jobs[0].queue_position == 0);
}

TEST_CASE("a suspended job that fits resumes with resume wording", "[planner]") {
  PlannerJob job = Job("ns/back", 2, 2, 4);
  job.suspended = true;
  const std::vector<PlannerJob> jobs = {job};
  const ClusterPlan plan = PlanCluster(jobs, 8);
  CHECK(plan.jobs[0].replicas == 2);
  CHECK(plan.jobs[0].reason == "resumes at 2 replicas (8 GPUs), its max_replicas");
}

TEST_CASE("scalable solver keeps its gap small on a large instance", "[planner]") {
  std::mt19937 rng(31337);
  std::vector<PlannerJob> jobs;
  for (int k = 0; k < 1000; ++k) {
    PlannerJob job =
        Job("ns/job-" + std::to_string(k), 1 + k % 4, 1 + k % 4 + k % 29, 1u << (k % 4), k % 4);
    job.throughput =
        Saturating(job.min_replicas, job.max_replicas, 0.5 + (k % 7) * 0.2, 0.01 + (k % 11) * 0.02);
    if (k % 3 == 0)
      job.current_replicas = job.min_replicas + (k % 5) % (job.max_replicas - job.min_replicas + 1);
    job.started_at = kT0 + absl::Seconds(k);
    jobs.push_back(job);
  }
  const ClusterPlan plan = PlanCluster(jobs, 10'000);
  CHECK_FALSE(plan.exact);
  CHECK(plan.allocated_gpus <= 10'000);
  CHECK(plan.utility <= plan.upper_bound + 1e-9);
  CHECK(plan.gap <= 0.01);
}

// ---- the jct objective --------------------------------------------------------

ClusterPlannerOptions Jct() {
  ClusterPlannerOptions options;
  options.objective = PlanObjectiveKind::kJct;
  return options;
}

PlannerJob WithRemaining(PlannerJob job, double samples) {
  job.remaining_samples = samples;
  return job;
}

TEST_CASE("jct gives spare GPUs to the job with less work left, fair splits them", "[planner]") {
  // Two new jobs with the same concave curve; one has 10x the work left.
  PlannerJob short_job = WithRemaining(Job("ns/short", 1, 16, 1), 1e5);
  PlannerJob long_job = WithRemaining(Job("ns/long", 1, 16, 1), 1e6);
  short_job.throughput = long_job.throughput = Saturating(1, 16, 1, 0.05);
  const std::vector<PlannerJob> jobs = {short_job, long_job};
  const ClusterPlan fair = PlanCluster(jobs, 16);
  CHECK(fair.jobs[0].replicas == 8);
  CHECK(fair.jobs[1].replicas == 8);
  const ClusterPlan jct = PlanCluster(jobs, 16, Jct());
  CHECK(jct.jobs[0].replicas > jct.jobs[1].replicas);
  CHECK(jct.jobs[1].replicas >= 1);  // the long job is not starved
  CHECK(jct.exact);
}

TEST_CASE("jct weights depend on the order of remaining work, not its scale", "[planner]") {
  std::vector<PlannerJob> jobs;
  for (int k = 0; k < 4; ++k) {
    PlannerJob job = WithRemaining(Job("ns/j" + std::to_string(k), 1, 12, 1), 1e5 * (k + 1));
    job.throughput = Saturating(1, 12, 1, 0.04 * (k + 1));
    jobs.push_back(job);
  }
  const std::vector<uint32_t> plan = ReplicasOf(PlanCluster(jobs, 20, Jct()));
  // Every size off by the same factor (a misestimate common to all jobs):
  // the same plan.
  std::vector<PlannerJob> scaled = jobs;
  for (PlannerJob& job : scaled) job.remaining_samples = *job.remaining_samples * 7.5;
  CHECK(ReplicasOf(PlanCluster(scaled, 20, Jct())) == plan);
  // Reversing the order of the sizes changes it.
  std::vector<PlannerJob> reversed = jobs;
  for (size_t k = 0; k < reversed.size(); ++k)
    reversed[k].remaining_samples = jobs[jobs.size() - 1 - k].remaining_samples;
  CHECK(ReplicasOf(PlanCluster(reversed, 20, Jct())) != plan);
}

TEST_CASE("jct turns samples into seconds with the stated rate when the curve is a shape",
          "[planner]") {
  // Two jobs whose curves only say "linear up to the wish" (a per-job
  // policy's ceiling): a samples/s at min_replicas of 1. ns/a has 10x the
  // samples left, but processes them 100x faster.
  PlannerJob a = WithRemaining(Job("ns/a", 1, 8, 1), 1e6);
  PlannerJob b = WithRemaining(Job("ns/b", 1, 8, 1), 1e5);
  a.throughput = b.throughput = Saturating(1, 8, 1, 0.1);
  ClusterPlan plan = PlanCluster(std::vector<PlannerJob>{a, b}, 9, Jct());
  CHECK(plan.jobs[0].replicas < plan.jobs[1].replicas);  // by samples: b is shorter
  a.samples_per_second_at_min = 1000;                    // 1000 s left
  b.samples_per_second_at_min = 10;                      // 10000 s left
  plan = PlanCluster(std::vector<PlannerJob>{a, b}, 9, Jct());
  CHECK(plan.jobs[0].replicas > plan.jobs[1].replicas);
}

TEST_CASE("jct without sizes favours the job with less attained service", "[planner]") {
  PlannerJob young = Job("ns/young", 1, 16, 1);
  PlannerJob old = Job("ns/old", 1, 16, 1);
  young.throughput = old.throughput = Saturating(1, 16, 1, 0.05);
  young.attained_samples = 2e4;
  old.attained_samples = 5e6;
  const ClusterPlan plan = PlanCluster(std::vector<PlannerJob>{young, old}, 16, Jct());
  CHECK(plan.jobs[0].replicas > plan.jobs[1].replicas);
  CHECK(plan.jobs[1].replicas >= 1);
}

TEST_CASE("jct never suspends a running job for a shorter one, aging starts the oldest",
          "[planner]") {
  // One slot; a long job runs in it, a short one waits: the long job keeps it.
  PlannerJob running = Running(WithRemaining(Job("ns/long", 1, 1, 4), 1e7), 1);
  PlannerJob waiting = WithRemaining(Job("ns/short", 1, 1, 4), 1e3);
  ClusterPlan plan = PlanCluster(std::vector<PlannerJob>{running, waiting}, 4, Jct());
  CHECK(plan.jobs[0].replicas == 1);
  CHECK(plan.jobs[1].replicas == 0);
  // Two waiting jobs, one slot: the shorter starts...
  PlannerJob big = WithRemaining(Job("ns/big", 1, 1, 4), 100 * 3600.0);  // 3600 s at 100/s
  PlannerJob small = WithRemaining(Job("ns/small", 1, 1, 4), 100 * 600.0);
  plan = PlanCluster(std::vector<PlannerJob>{big, small}, 4, Jct());
  CHECK(plan.jobs[0].replicas == 0);
  CHECK(plan.jobs[1].replicas == 1);
  // ...unless the longer one has waited for more than the difference.
  big.waiting_seconds = 3100;
  plan = PlanCluster(std::vector<PlannerJob>{big, small}, 4, Jct());
  CHECK(plan.jobs[0].replicas == 1);
  CHECK(plan.jobs[1].replicas == 0);
}

TEST_CASE("jct does not restart a job about to finish", "[planner]") {
  // Linear scaling, 8 free GPUs, a restart of 60 s: worth it for a job with
  // an hour left, not for one with 50 s left at its current size.
  PlannerJob job = Running(Job("ns/job", 1, 8, 1), 2);
  job.restart_cost_seconds = 60;
  job.remaining_samples = 200.0 * 3600;  // Linear: 200 samples/s at 2 replicas
  CHECK(PlanCluster(std::vector<PlannerJob>{job}, 8, Jct()).jobs[0].replicas == 8);
  job.remaining_samples = 200.0 * 50;
  const ClusterPlan plan = PlanCluster(std::vector<PlannerJob>{job}, 8, Jct());
  CHECK(plan.jobs[0].replicas == 2);
  CHECK(plan.jobs[0].binding == BindingConstraint::kRestartCost);
  CHECK_THAT(plan.jobs[0].reason, Contains("not worth a 60 s restart over the 50 s it has left"));
  // The fair objective weighs the restart over the whole horizon and resizes.
  CHECK(PlanCluster(std::vector<PlannerJob>{job}, 8).jobs[0].replicas == 8);
}

TEST_CASE("jct prices a shrink with its way back and a restart at no less than the floor",
          "[planner]") {
  // Two running jobs on linear curves (s = n), 60 s restarts over the 600 s
  // horizon (f = 0.9). ns/long has 1000x the service of ns/short: ranks 1
  // and 2 of 2, w = 1/2 and sqrt(3)/2.
  PlannerJob long_job = Running(Job("ns/long", 1, 8, 1), 4);
  PlannerJob short_job = Running(Job("ns/short", 1, 8, 1), 2);
  long_job.restart_cost_seconds = short_job.restart_cost_seconds = 60;
  long_job.attained_samples = 1e6;
  short_job.attained_samples = 1e3;
  const double w_long = 0.5, w_short = std::sqrt(3.0) / 2;
  const double r_long = std::max(w_long, kRestartWeightFloor * (w_long + w_short) / 2);
  const double l_long = r_long * (1 - 0.9);
  REQUIRE(r_long > w_long);  // the floor binds for the job weighted least
  const std::vector<uint32_t> shrink = {2, 2};
  // Shrunk 4 -> 2: its work at 2 less the restart at 2 and the one back at 4.
  CHECK(EvaluatePlan(std::vector<PlannerJob>{long_job, short_job}, shrink, Jct()).utility ==
        Approx((w_long - l_long) * 2 - l_long * 4 + w_short * 2));
  // Grown 4 -> 6: no way back to pay.
  CHECK(
      EvaluatePlan(std::vector<PlannerJob>{long_job, short_job}, std::vector<uint32_t>{6, 2}, Jct())
          .utility == Approx((w_long - l_long) * 6 + w_short * 2));
  // A per-job policy's shape keeps the plain price, w x f x s.
  long_job.curve_is_shape = short_job.curve_is_shape = true;
  CHECK(EvaluatePlan(std::vector<PlannerJob>{long_job, short_job}, shrink, Jct()).utility ==
        Approx(w_long * 0.9 * 2 + w_short * 2));
}

TEST_CASE("objective names parse and print", "[planner]") {
  CHECK(ParsePlanObjective("jct") == PlanObjectiveKind::kJct);
  CHECK(ParsePlanObjective("fair") == PlanObjectiveKind::kFair);
  CHECK_FALSE(ParsePlanObjective("JCT").has_value());
  CHECK(PlanObjectiveName(PlanObjectiveKind::kJct) == "jct");
  CHECK(PlanObjectiveName(PlanObjectiveKind::kFair) == "fair");
}

}  // namespace
}  // namespace rescale

// ---- node slots -------------------------------------------------------------
// Per size class, the replicas that fit on the nodes' free GPUs (ReplicaSlots):
// the planner never plans more of a class than fit, explains who they hold
// back, and plans exactly as before when they hold nobody back.

namespace rescale {
namespace {

// Two nodes with 4 free GPUs each: no 8-GPU replica, two 4-GPU, eight 1-GPU.
const std::vector<ReplicaSlots> kTwoHalfNodes = {{8, 0}, {4, 2}, {1, 8}};

// Replicas planned per class, for the classes of `slots`.
uint64_t ClassReplicas(const std::vector<PlannerJob>& jobs, const ClusterPlan& plan, uint32_t g) {
  uint64_t n = 0;
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (std::max<uint32_t>(jobs[i].gpus_per_replica, 1) == g) n += plan.jobs[i].replicas;
  }
  return n;
}

void RequireSamePlan(const ClusterPlan& a, const ClusterPlan& b) {
  REQUIRE(a.jobs.size() == b.jobs.size());
  for (size_t i = 0; i < a.jobs.size(); ++i) {
    INFO("job " << i);
    REQUIRE(a.jobs[i].replicas == b.jobs[i].replicas);
    REQUIRE(a.jobs[i].binding == b.jobs[i].binding);
    REQUIRE(a.jobs[i].reason == b.jobs[i].reason);
    REQUIRE(a.jobs[i].queue_position == b.jobs[i].queue_position);
    // Bit for bit: the same computation, not merely a close one.
    REQUIRE(a.jobs[i].value_one_more == b.jobs[i].value_one_more);
    REQUIRE(a.jobs[i].value_one_fewer == b.jobs[i].value_one_fewer);
  }
  REQUIRE(a.allocated_gpus == b.allocated_gpus);
  REQUIRE(a.utility == b.utility);
  REQUIRE(a.upper_bound == b.upper_bound);
  REQUIRE(a.gap == b.gap);
  REQUIRE(a.exact == b.exact);
}

// The best assignment under capacity and slots, by enumeration.
Reference BruteForceWithSlots(const Instance& in, const std::vector<ReplicaSlots>& slots) {
  const size_t n = in.jobs.size();
  std::vector<uint32_t> assignment(n, 0);
  Reference best;
  bool have = false;
  std::function<void(size_t)> walk = [&](size_t i) {
    if (i == n) {
      uint64_t used = 0;
      for (size_t k = 0; k < n; ++k) used += uint64_t{assignment[k]} * in.jobs[k].gpus_per_replica;
      if (in.capacity && used > *in.capacity) return;
      for (const ReplicaSlots& s : slots) {
        uint64_t planned = 0;
        for (size_t k = 0; k < n; ++k) {
          if (in.jobs[k].gpus_per_replica == s.gpus_per_replica) planned += assignment[k];
        }
        if (planned > s.replicas) return;
      }
      const Reference r = ReferenceObjective(in.jobs, assignment, in.options);
      if (!have || Compare(r, best) > 0) {
        best = r;
        have = true;
      }
      return;
    }
    assignment[i] = 0;
    walk(i + 1);
    for (uint32_t r = in.jobs[i].min_replicas; r <= in.jobs[i].max_replicas; ++r) {
      assignment[i] = r;
      walk(i + 1);
    }
    assignment[i] = 0;
  };
  walk(0);
  return best;
}

// Random slots for the classes {1, 2, 4, 8}: some classes without an entry,
// counts from none to a few, never more GPUs than the capacity.
std::vector<ReplicaSlots> RandomSlots(std::mt19937& rng, std::optional<uint64_t> capacity) {
  std::vector<ReplicaSlots> slots;
  for (uint32_t g : {1u, 2u, 4u, 8u}) {
    if (std::uniform_int_distribution<int>(0, 3)(rng) == 0) continue;
    uint32_t count = static_cast<uint32_t>(std::uniform_int_distribution<int>(0, 6)(rng));
    if (capacity) count = static_cast<uint32_t>(std::min<uint64_t>(count, *capacity / g));
    slots.push_back({g, count});
  }
  return slots;
}

TEST_CASE("an 8-GPU job waits for node slots although the total GPUs would admit it",
          "[planner][slots]") {
  const std::vector<PlannerJob> jobs = {Job("ns/big", 1, 1, 8)};
  const ClusterPlan unlimited = PlanCluster(jobs, 8);
  REQUIRE(unlimited.jobs[0].replicas == 1);  // the total alone admits it

  const ClusterPlan plan = PlanCluster(jobs, 8, {}, kTwoHalfNodes);
  CHECK(plan.jobs[0].replicas == 0);
  CHECK(plan.jobs[0].binding == BindingConstraint::kNodeSlots);
  CHECK(plan.jobs[0].reason ==
        "needs 1 replica of 8 GPUs on one node each; none fits on the nodes' free GPUs");
  CHECK(plan.jobs[0].queue_position == 1);
  CHECK(plan.allocated_gpus == 0);

  // A gang of two where one replica fits.
  const std::vector<PlannerJob> gang = {Job("ns/gang", 2, 2, 8)};
  const ClusterPlan held = PlanCluster(gang, 16, {}, std::vector<ReplicaSlots>{{8, 1}});
  CHECK(held.jobs[0].replicas == 0);
  CHECK(held.jobs[0].binding == BindingConstraint::kNodeSlots);
  CHECK(held.jobs[0].reason ==
        "needs 2 replicas of 8 GPUs on one node each; only 1 fits on the nodes' free GPUs");
  // When the total is what is short, the total is named.
  const ClusterPlan short_total = PlanCluster(gang, 8, {}, std::vector<ReplicaSlots>{{8, 1}});
  CHECK(short_total.jobs[0].binding == BindingConstraint::kCapacity);
}

TEST_CASE("4-GPU jobs run on the half-free nodes where the 8-GPU job cannot", "[planner][slots]") {
  std::vector<PlannerJob> jobs = {Job("ns/big", 1, 1, 8, /*priority=*/1), Job("ns/half", 1, 4, 4),
                                  Job("ns/single", 1, 8, 1)};
  const ClusterPlan plan = PlanCluster(jobs, 8, {}, kTwoHalfNodes);
  CHECK(plan.jobs[0].replicas == 0);  // higher priority, yet nothing to place it on
  CHECK(plan.jobs[0].binding == BindingConstraint::kNodeSlots);
  CHECK(ClassReplicas(jobs, plan, 4) <= 2);
  CHECK(ClassReplicas(jobs, plan, 1) <= 8);
  CHECK(plan.jobs[1].replicas >= 1);
  CHECK(plan.jobs[2].replicas >= 1);
  CHECK(plan.allocated_gpus == 8);  // the other classes use the GPUs
}

TEST_CASE("slot repair gives the GPUs a full class cannot use to another class",
          "[planner][slots]") {
  // Without slots the fair split is 2 x 8 GPUs + 2 x 4 GPUs.
  const std::vector<PlannerJob> one = {Job("ns/a", 1, 2, 8), Job("ns/c", 1, 4, 4)};
  const ClusterPlan free_plan = PlanCluster(one, 24);
  REQUIRE(free_plan.jobs[0].replicas == 2);
  REQUIRE(free_plan.jobs[1].replicas == 2);
  const ClusterPlan capped = PlanCluster(one, 24, {}, std::vector<ReplicaSlots>{{8, 1}});
  CHECK(capped.jobs[0].replicas == 1);
  CHECK(capped.jobs[0].binding == BindingConstraint::kNodeSlots);
  CHECK_THAT(capped.jobs[0].reason,
             Contains("needs 8 GPUs on one node and the nodes' free GPUs fit only 1 replica"));
  CHECK(capped.jobs[1].replicas == 4);  // the 8 GPUs it could not place
  CHECK(capped.allocated_gpus == 24);
  // One job in the class: capping it is exact (step 1).
  CHECK(capped.exact);

  // Two jobs share the class: the class is planned alone in its slots (step 2).
  const std::vector<PlannerJob> two = {Job("ns/a1", 1, 2, 8), Job("ns/a2", 1, 2, 8),
                                       Job("ns/c", 1, 4, 4)};
  REQUIRE(ClassReplicas(two, PlanCluster(two, 32), 8) == 3);
  const ClusterPlan repaired = PlanCluster(two, 32, {}, std::vector<ReplicaSlots>{{8, 2}});
  CHECK(repaired.jobs[0].replicas == 1);
  CHECK(repaired.jobs[1].replicas == 1);
  CHECK(repaired.jobs[2].replicas == 4);
  CHECK(repaired.allocated_gpus == 32);
  CHECK_FALSE(repaired.exact);
  CHECK(repaired.gap == 0);
  CHECK(repaired.upper_bound == repaired.utility);
}

TEST_CASE("a job the total cannot hold is explained by the total, also when slots repair the plan",
          "[planner][slots]") {
  // The 4-GPU job overruns its one slot, so the plan is repaired; the 8-GPU
  // gang of two needs 16 GPUs of 8: the total, not the slots, holds it back.
  const std::vector<PlannerJob> jobs = {Job("ns/gang", 2, 2, 8), Job("ns/half", 1, 2, 4)};
  REQUIRE(PlanCluster(jobs, 8).jobs[1].replicas == 2);
  const ClusterPlan plan = PlanCluster(jobs, 8, {}, std::vector<ReplicaSlots>{{8, 0}, {4, 1}});
  CHECK(plan.jobs[1].replicas == 1);
  CHECK(plan.jobs[0].replicas == 0);
  CHECK(plan.jobs[0].binding == BindingConstraint::kCapacity);
  CHECK(plan.jobs[0].reason == "needs 16 GPUs (min_replicas=2 x 8); the cluster has only 8");
}

TEST_CASE("priorities decide within a class whose slots are short", "[planner][slots]") {
  // One 8-GPU slot, two jobs wanting it: the higher priority runs, even over
  // a lower-priority job that runs now.
  std::vector<PlannerJob> jobs = {Running(Job("ns/low", 1, 1, 8, 0), 1),
                                  Job("ns/high", 1, 1, 8, 5)};
  const ClusterPlan plan = PlanCluster(jobs, 16, {}, std::vector<ReplicaSlots>{{8, 1}});
  CHECK(plan.jobs[1].replicas == 1);
  CHECK(plan.jobs[0].replicas == 0);
  CHECK(plan.jobs[0].binding == BindingConstraint::kNodeSlots);
  CHECK(plan.jobs[0].reason ==
        "suspended: needs 1 replica of 8 GPUs on one node each; the nodes' free GPUs fit 1, 1 "
        "of them planned for other jobs of that size");
  // Equal priority: the running job keeps its slot.
  jobs[1].priority = 0;
  const ClusterPlan equal = PlanCluster(jobs, 16, {}, std::vector<ReplicaSlots>{{8, 1}});
  CHECK(equal.jobs[0].replicas == 1);
  CHECK(equal.jobs[1].replicas == 0);
  CHECK(equal.jobs[1].binding == BindingConstraint::kNodeSlots);
}

TEST_CASE("slots that hold nobody back leave the plan exactly as without slots",
          "[planner][slots]") {
  std::mt19937 rng(17017);
  int repaired_never = 0;
  for (int k = 0; k < 300; ++k) {
    const Instance in = RandomInstance(rng, k % 3 == 0 ? 40 : 8, k % 3 == 0 ? 200 : 48, 6);
    for (const ClusterPlannerOptions& options : {in.options, ScalableOnly(in.options)}) {
      INFO("instance " << k << " scalable " << (options.exact_work_limit == 0));
      const ClusterPlan before = PlanCluster(in.jobs, in.capacity, options);
      // Loose slots: every class may run all its jobs at max.
      std::vector<ReplicaSlots> loose;
      for (uint32_t g : {1u, 2u, 4u, 8u}) {
        uint32_t all = 0;
        for (const PlannerJob& job : in.jobs)
          all += job.gpus_per_replica == g ? job.max_replicas : 0;
        loose.push_back({g, all});
      }
      RequireSamePlan(before, PlanCluster(in.jobs, in.capacity, options, loose));
      // Tight slots: each class exactly what the plan uses of it.
      std::vector<ReplicaSlots> tight;
      for (uint32_t g : {1u, 2u, 4u, 8u}) {
        tight.push_back({g, static_cast<uint32_t>(ClassReplicas(in.jobs, before, g))});
      }
      RequireSamePlan(before, PlanCluster(in.jobs, in.capacity, options, tight));
      // And no slots at all.
      RequireSamePlan(before, PlanCluster(in.jobs, in.capacity, options, {}));
      ++repaired_never;
    }
  }
  CHECK(repaired_never == 600);
}

TEST_CASE("the planner never plans more replicas of a class than fit", "[planner][slots]") {
  std::mt19937 rng(4711);
  int held_back = 0, exact_checked = 0;
  for (int k = 0; k < 400; ++k) {
    const bool small = k % 4 != 0;
    const Instance in = small ? RandomInstance(rng, 5, 24, 2) : RandomInstance(rng, 60, 300, 8);
    const std::vector<ReplicaSlots> slots = RandomSlots(rng, in.capacity);
    for (const ClusterPlannerOptions& options : {in.options, ScalableOnly(in.options)}) {
      INFO("instance " << k << " scalable " << (options.exact_work_limit == 0));
      const ClusterPlan plan = PlanCluster(in.jobs, in.capacity, options, slots);
      RequireFeasible(in, plan);
      for (const ReplicaSlots& s : slots) {
        INFO("class " << s.gpus_per_replica);
        REQUIRE(ClassReplicas(in.jobs, plan, s.gpus_per_replica) <= s.replicas);
      }
      for (const PlannedJob& job : plan.jobs) {
        held_back += job.binding == BindingConstraint::kNodeSlots;
      }
      // Where the plan claims to be exact it is the optimum under the slots.
      if (small && plan.exact && options.exact_work_limit != 0) {
        const Reference best = BruteForceWithSlots(in, slots);
        const Reference got = ObjectiveOf(in, plan);
        REQUIRE(got.levels == best.levels);
        REQUIRE(Compare(got, best) == 0);
        ++exact_checked;
      }
    }
  }
  CHECK(held_back > 50);  // the slots did bind, often
  CHECK(exact_checked > 100);
}

}  // namespace
}  // namespace rescale
