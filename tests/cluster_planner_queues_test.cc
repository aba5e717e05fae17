// Tests of queues in the cluster planner ("Queues" in
// rescale/cluster_planner.h) and of the queue file (rescale/queues.h):
// brute force over every assignment on random small instances with 2-3
// queues, cohorts and limits; the owner of a quota getting it back within one
// plan; fair sharing by weight; the scalable solver keeping every constraint;
// and the queue file's errors naming the field.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "rescale/cluster_planner.h"
#include "rescale/queues.h"
#include "tests/plan_brute_force.h"

namespace rescale {
namespace {

using Catch::Matchers::Contains;

const absl::Time kT0 = absl::FromUnixSeconds(1'700'000'000);

// Throughput n / (1 + b n) for n = min..max: concave, saturating.
std::vector<double> Saturating(uint32_t min, uint32_t max, double b) {
  std::vector<double> t;
  for (uint32_t n = min; n <= max; ++n) t.push_back(100.0 * n / (1 + b * n));
  return t;
}

PlannerJob Job(const std::string& id, uint32_t queue, uint32_t min, uint32_t max,
               uint32_t gpus_per_replica = 1, int32_t priority = 0, uint32_t current = 0) {
  PlannerJob job;
  job.job_id = id;
  job.queue = queue;
  job.min_replicas = min;
  job.max_replicas = max;
  job.gpus_per_replica = gpus_per_replica;
  job.priority = priority;
  job.current_replicas = current;
  job.started_at = kT0;
  job.throughput = Saturating(min, max, 0.02);
  return job;
}

QueueSpec Queue(const std::string& name, uint64_t nominal, const std::string& cohort = "",
                double weight = 1) {
  QueueSpec q;
  q.name = name;
  q.nominal_gpus = nominal;
  q.cohort = cohort;
  q.weight = weight;
  return q;
}

uint64_t QueueGpus(const std::vector<PlannerJob>& jobs, const ClusterPlan& plan, uint32_t queue) {
  uint64_t gpus = 0;
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (jobs[i].queue == queue) gpus += uint64_t{plan.jobs[i].replicas} * jobs[i].gpus_per_replica;
  }
  return gpus;
}

// Every assignment of {0} U [min, max] to each job: the best feasible
// objective (nullopt when none is feasible).
std::optional<PlanObjective> BruteForce(const std::vector<PlannerJob>& jobs, uint64_t capacity,
                                        const std::vector<QueueSpec>& queues,
                                        const ClusterPlannerOptions& options) {
  std::optional<PlanObjective> best;
  testing::ForEachAssignment(jobs, [&](const std::vector<uint32_t>& n) {
    const QueuePlanObjective v = EvaluateQueuePlan(jobs, n, capacity, queues, options);
    if (v.feasible && (!best || CompareObjectives(v.objective, *best) > 0)) best = v.objective;
  });
  return best;
}

struct Instance {
  std::vector<PlannerJob> jobs;
  std::vector<QueueSpec> queues;
  uint64_t capacity = 0;
};

// 2-3 queues, one or two cohorts, random limits; 4-6 jobs with random
// gangs, priorities, sizes and running state.
Instance RandomInstance(std::mt19937& rng) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  Instance in;
  const int queues = pick(2, 3);
  for (int k = 0; k < queues; ++k) {
    QueueSpec q =
        Queue(absl::StrCat("q", k), pick(0, 8),
              pick(0, 3) == 0 ? "" : absl::StrCat("c", pick(0, 1)), pick(0, 2) == 0 ? 3.0 : 1.0);
    if (!q.cohort.empty() && pick(0, 2) == 0) q.borrowing_limit_gpus = pick(0, 4);
    if (!q.cohort.empty() && pick(0, 2) == 0)
      q.lending_limit_gpus = pick(0, static_cast<int>(q.nominal_gpus));
    in.queues.push_back(q);
  }
  in.capacity = pick(6, 16);
  const int jobs = pick(4, 6);
  for (int j = 0; j < jobs; ++j) {
    const uint32_t min = pick(1, 2);
    const uint32_t max = min + pick(0, 3);
    PlannerJob job = Job(absl::StrCat("ns/j", j), pick(0, queues - (pick(0, 9) == 0 ? 0 : 1)), min,
                         max, pick(0, 3) == 0 ? 2 : 1, pick(0, 1));
    job.throughput = Saturating(min, max, 0.05 * pick(0, 6));
    if (pick(0, 2) == 0) job.current_replicas = pick(min, max);
    job.in_cooldown = job.current_replicas > 0 && pick(0, 4) == 0;
    job.preemptible = pick(0, 5) != 0;
    job.started_at = kT0 + absl::Seconds(pick(0, 100));
    in.jobs.push_back(job);
  }
  return in;
}

TEST_CASE("queue plans equal brute force on random small instances", "[planner][queues]") {
  std::mt19937 rng(20261206);
  int quota_bound = 0;
  for (int round = 0; round < 60; ++round) {
    const Instance in = RandomInstance(rng);
    for (PlanObjectiveKind objective : {PlanObjectiveKind::kFair, PlanObjectiveKind::kJct}) {
      ClusterPlannerOptions options;
      options.objective = objective;
      const ClusterPlan plan = PlanCluster(in.jobs, in.capacity, options, {}, in.queues);
      REQUIRE(plan.exact);
      std::vector<uint32_t> replicas;
      for (const PlannedJob& j : plan.jobs) replicas.push_back(j.replicas);
      const QueuePlanObjective got =
          EvaluateQueuePlan(in.jobs, replicas, in.capacity, in.queues, options);
      const std::optional<PlanObjective> best =
          BruteForce(in.jobs, in.capacity, in.queues, options);
      INFO("round " << round << " objective " << PlanObjectiveName(objective));
      REQUIRE(got.feasible);
      REQUIRE(best);
      CHECK(CompareObjectives(got.objective, *best) == 0);
      // Plans where a queue's quota, not the capacity, held a job back.
      quota_bound += std::any_of(plan.jobs.begin(), plan.jobs.end(), [](const PlannedJob& j) {
        return j.binding == BindingConstraint::kQuota;
      });

      // The scalable solver keeps every constraint too.
      ClusterPlannerOptions scale = options;
      scale.exact_work_limit = 0;
      const ClusterPlan approx = PlanCluster(in.jobs, in.capacity, scale, {}, in.queues);
      CHECK_FALSE(approx.exact);
      std::vector<uint32_t> approx_replicas;
      for (const PlannedJob& j : approx.jobs) approx_replicas.push_back(j.replicas);
      CHECK(EvaluateQueuePlan(in.jobs, approx_replicas, in.capacity, in.queues, options).feasible);
    }
  }
  // The instances exercise the quotas, not just the capacity.
  CHECK(quota_bound >= 20);
}

// Team A's elastic jobs, running at `current` replicas each.
std::vector<PlannerJob> TeamA(uint32_t min, uint32_t current) {
  std::vector<PlannerJob> jobs;
  for (int j = 0; j < 4; ++j) {
    jobs.push_back(Job(absl::StrCat("a/train-", j), 0, min, 16, 1, j % 2, current));
    jobs.back().started_at = kT0 + absl::Seconds(j);
  }
  return jobs;
}

TEST_CASE("an idle team's quota is lent, and returned within one plan when it submits",
          "[planner][queues]") {
  const std::vector<QueueSpec> queues = {Queue("team-a", 32, "research"),
                                         Queue("team-b", 32, "research")};
  // B idle: A's four elastic jobs take all 64 GPUs.
  std::vector<PlannerJob> jobs = TeamA(2, 0);
  const ClusterPlan idle = PlanCluster(jobs, 64, {}, {}, queues);
  CHECK(QueueGpus(jobs, idle, 0) == 64);
  CHECK(idle.queues[0].borrowed_gpus == 32);
  CHECK(idle.queues[1].lent_gpus == 32);

  // B submits two jobs that can use 32: A shrinks (nobody is suspended).
  for (size_t i = 0; i < jobs.size(); ++i) jobs[i].current_replicas = idle.jobs[i].replicas;
  jobs.push_back(Job("b/train-0", 1, 4, 16));
  jobs.push_back(Job("b/train-1", 1, 4, 16));
  const ClusterPlan back = PlanCluster(jobs, 64, {}, {}, queues);
  CHECK(QueueGpus(jobs, back, 1) == 32);
  CHECK(QueueGpus(jobs, back, 0) == 32);
  CHECK(back.queues[0].borrowed_gpus == 0);
  for (int j = 0; j < 4; ++j) {
    CHECK(back.jobs[j].replicas >= 2);  // shrunk, still running
    CHECK(back.jobs[j].binding == BindingConstraint::kQuota);
    CHECK_THAT(back.jobs[j].reason, Contains("returns GPUs it borrowed from cohort research"));
  }
}

TEST_CASE("the guarantee is what the owner's jobs need: what waits, and what runs at its size",
          "[planner][queues]") {
  const std::vector<QueueSpec> queues = {Queue("team-a", 32, "research"),
                                         Queue("team-b", 32, "research")};
  // A's four jobs scale well and borrow 24 of B's GPUs; B's one job runs at
  // 8 and scales poorly. It could use all 32 of its quota, but growing is
  // not a claim on lent GPUs: its size is the guarantee, and the objective
  // decides whether it grows (here it does not: that would restart five
  // jobs for little gain).
  std::vector<PlannerJob> jobs = TeamA(1, 14);
  for (PlannerJob& job : jobs) job.throughput = Saturating(1, 16, 0.0);
  jobs.push_back(Job("b/long", 1, 1, 32, 1, 0, 8));
  jobs.back().throughput = Saturating(1, 32, 1.0);
  const ClusterPlan kept = PlanCluster(jobs, 64, {}, {}, queues);
  CHECK(kept.queues[1].guaranteed_gpus == 8);
  CHECK(kept.jobs[4].replicas == 8);
  CHECK(kept.queues[0].borrowed_gpus == 24);
  // A's four jobs keep 14 GPUs each (the old rule gave the same here; the
  // block below, where resizing is free, is what tells the rules apart).
  for (int j = 0; j < 4; ++j) CHECK(kept.jobs[j].replicas == 14);

  // Fair sharing does not push a lone borrower either: with resizing free,
  // and A's jobs saturating while B's scales linearly, B's job grows into
  // GPUs A borrowed (with the fair-sharing level always on, A would keep
  // all 24: the level would rank borrowing above the objective).
  {
    std::vector<PlannerJob> free_resizes = jobs;
    for (PlannerJob& job : free_resizes) {
      job.restart_cost_seconds = 0;
      job.throughput = Saturating(1, 16, 1.0);
    }
    free_resizes.back().throughput = Saturating(1, 32, 0.0);
    const ClusterPlan grown = PlanCluster(free_resizes, 64, {}, {}, queues);
    CHECK(grown.queues[1].guaranteed_gpus == 8);
    CHECK(grown.jobs[4].replicas > 8);
    CHECK(grown.queues[0].borrowed_gpus < 24);
    CHECK(grown.queues[0].borrowed_gpus + 32 + grown.jobs[4].replicas == 64);
  }

  // B submits a job: a waiting job is a claim, up to its maximum. B gets it
  // within this plan, and A returns what that takes.
  jobs.push_back(Job("b/new", 1, 1, 16));
  const ClusterPlan back = PlanCluster(jobs, 64, {}, {}, queues);
  CHECK(back.queues[1].guaranteed_gpus == 24);
  CHECK(back.jobs[4].replicas == 8);
  CHECK(back.jobs[5].replicas == 16);
  CHECK(back.queues[0].borrowed_gpus == 8);
}

TEST_CASE("borrowers that cannot shrink enough are suspended, lowest priority first",
          "[planner][queues]") {
  const std::vector<QueueSpec> queues = {Queue("team-a", 32, "research"),
                                         Queue("team-b", 32, "research")};
  // A's four jobs need 16 GPUs each at their minimum: all four hold 64.
  std::vector<PlannerJob> jobs = TeamA(16, 16);
  jobs.push_back(Job("b/train-0", 1, 8, 16));
  jobs.push_back(Job("b/train-1", 1, 8, 16));
  const ClusterPlan plan = PlanCluster(jobs, 64, {}, {}, queues);
  CHECK(QueueGpus(jobs, plan, 1) == 32);
  // Jobs 1 and 3 have priority 1, jobs 0 and 2 priority 0: 0 and 2 go.
  CHECK(plan.jobs[0].replicas == 0);
  CHECK(plan.jobs[2].replicas == 0);
  CHECK(plan.jobs[1].replicas == 16);
  CHECK(plan.jobs[3].replicas == 16);
  // No job of A is left on borrowed GPUs.
  CHECK(plan.queues[0].borrowed_gpus == 0);
}

TEST_CASE("competing borrowers share the lendable GPUs by weight", "[planner][queues]") {
  // Team C lends all 40; A (weight 1) and B (weight 3) want all of it.
  const std::vector<QueueSpec> queues = {
      Queue("team-a", 4, "pool", 1), Queue("team-b", 4, "pool", 3), Queue("team-c", 40, "pool", 1)};
  std::vector<PlannerJob> jobs;
  for (int j = 0; j < 4; ++j) jobs.push_back(Job(absl::StrCat("a/j", j), 0, 1, 16));
  for (int j = 0; j < 4; ++j) jobs.push_back(Job(absl::StrCat("b/j", j), 1, 1, 16));
  for (ClusterPlannerOptions options : {ClusterPlannerOptions{}, [] {
                                          ClusterPlannerOptions o;
                                          o.exact_work_limit = 0;
                                          return o;
                                        }()}) {
    const ClusterPlan plan = PlanCluster(jobs, 48, options, {}, queues);
    INFO("exact " << plan.exact);
    CHECK(plan.queues[0].borrowed_gpus == 10);
    CHECK(plan.queues[1].borrowed_gpus == 30);
    CHECK(plan.queues[2].lent_gpus == 40);
  }
}

TEST_CASE("queue limits: borrowing limit, lending limit, no cohort", "[planner][queues]") {
  std::vector<QueueSpec> queues = {Queue("team-a", 8, "c"), Queue("team-b", 8, "c"),
                                   Queue("solo", 8)};
  queues[0].borrowing_limit_gpus = 2;
  queues[1].lending_limit_gpus = 5;
  std::vector<PlannerJob> jobs = {Job("a/j", 0, 1, 32), Job("s/j", 2, 1, 32)};
  const ClusterPlan plan = PlanCluster(jobs, 100, {}, {}, queues);
  CHECK(plan.jobs[0].replicas == 10);  // 8 + borrowing limit 2
  CHECK(plan.jobs[1].replicas == 8);   // no cohort: its nominal
  CHECK(plan.jobs[1].binding == BindingConstraint::kQuota);
  CHECK_THAT(plan.jobs[1].reason, Contains("queue solo holds 8 of 8 GPUs"));
  queues[0].borrowing_limit_gpus.reset();
  const ClusterPlan lent = PlanCluster(jobs, 100, {}, {}, queues);
  CHECK(lent.jobs[0].replicas == 13);  // B lends at most 5
  CHECK(lent.queues[1].lent_gpus == 5);
}

TEST_CASE("a job of an undefined queue waits; one whole queue plans as no queues",
          "[planner][queues]") {
  const std::vector<QueueSpec> queues = {Queue("team-a", 8)};
  std::vector<PlannerJob> jobs = {Job("a/j", 0, 1, 4), Job("x/j", 7, 1, 4)};
  const ClusterPlan plan = PlanCluster(jobs, 8, {}, {}, queues);
  CHECK(plan.jobs[1].replicas == 0);
  CHECK(plan.jobs[1].binding == BindingConstraint::kQuota);
  CHECK_THAT(plan.jobs[1].reason, Contains("not defined"));

  jobs[1].queue = 0;
  const std::vector<QueueSpec> whole = ResolveQueues({}, 6);
  const ClusterPlan a = PlanCluster(jobs, 6, {}, {}, whole);
  const ClusterPlan b = PlanCluster(jobs, 6);
  REQUIRE(a.jobs.size() == b.jobs.size());
  for (size_t i = 0; i < a.jobs.size(); ++i) {
    CHECK(a.jobs[i].replicas == b.jobs[i].replicas);
    CHECK(a.jobs[i].reason == b.jobs[i].reason);
  }
  CHECK(a.queues.empty());
}

TEST_CASE("ResolveQueues adds a default queue with the unclaimed capacity", "[queues]") {
  CHECK(ResolveQueues({}, 64).at(0).nominal_gpus == 64);
  const std::vector<QueueSpec> two = {Queue("a", 20), Queue("b", 30)};
  const std::vector<QueueSpec> resolved = ResolveQueues(two, 64);
  REQUIRE(resolved.size() == 3);
  CHECK(resolved[2].name == "default");
  CHECK(resolved[2].nominal_gpus == 14);
  CHECK(ResolveQueues(two, 40)[2].nominal_gpus == 0);  // over-committed quotas
  const std::vector<QueueSpec> own = {Queue("default", 5)};
  CHECK(ResolveQueues(own, 64).size() == 1);
  CHECK(FindQueue(resolved, "") == 2u);
  CHECK(FindQueue(resolved, "b") == 1u);
  CHECK_FALSE(FindQueue(resolved, "c"));
}

TEST_CASE("the queue file parses, round-trips and names the field in errors", "[queues]") {
  const char* text = R"(queues:
- name: team-a              # DNS-1123 label
  nominal_gpus: 32
  cohort: research
  borrowing_limit_gpus: 32
  lending_limit_gpus: 16
  weight: 2
- name: team-b
  nominal_gpus: 32
)";
  const absl::StatusOr<std::vector<QueueSpec>> parsed = ParseQueuesYaml(text, "q.yaml");
  REQUIRE(parsed.ok());
  REQUIRE(parsed->size() == 2);
  CHECK((*parsed)[0].cohort == "research");
  CHECK((*parsed)[0].borrowing_limit_gpus == 32u);
  CHECK((*parsed)[0].lending_limit_gpus == 16u);
  CHECK((*parsed)[0].weight == 2);
  CHECK((*parsed)[1].weight == 1);
  CHECK_FALSE((*parsed)[1].borrowing_limit_gpus);
  const absl::StatusOr<std::vector<QueueSpec>> again =
      ParseQueuesYaml(QueuesToYaml(*parsed), "again");
  REQUIRE(again.ok());
  CHECK(*again == *parsed);
  CHECK(ParseQueuesYaml("queues: []", "f")->empty());

  auto error = [](const std::string& yaml) {
    const absl::StatusOr<std::vector<QueueSpec>> r = ParseQueuesYaml(yaml, "f.yaml");
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == absl::StatusCode::kInvalidArgument);
    return std::string(r.status().message());
  };
  CHECK_THAT(error("queues:\n- name: a\n  nominal_gpus: -1\n"),
             Contains("queues[0].nominal_gpus must be a whole number"));
  CHECK_THAT(error("queues:\n- name: a\n  nominal_gpus: 4\n  borowing_limit_gpus: 2\n"),
             Contains("unknown key \"borowing_limit_gpus\""));
  CHECK_THAT(error("queues:\n- name: a\n  nominal_gpus: 4\n  cohort: c\n  lending_limit_gpus: 5\n"),
             Contains("queues[0].lending_limit_gpus = 5 is more than queues[0].nominal_gpus = 4"));
  CHECK_THAT(error("queues:\n- name: a\n  nominal_gpus: 4\n  borrowing_limit_gpus: 2\n"),
             Contains("queues[0].borrowing_limit_gpus is set but the queue has no cohort"));
  CHECK_THAT(error("queues:\n- {name: a, nominal_gpus: 1}\n- {name: a, nominal_gpus: 2}\n"),
             Contains("queues[1].name \"a\" is defined twice"));
  CHECK_THAT(error("queues:\n- {name: Team_A, nominal_gpus: 1}\n"),
             Contains("queues[0].name \"Team_A\" is not a DNS-1123 label"));
  CHECK_THAT(error("queues:\n- {name: a}\n"), Contains("queues[0].nominal_gpus is required"));
  CHECK_THAT(error("queues:\n- {name: a, nominal_gpus: 1, weight: -1}\n"),
             Contains("queues[0].weight = -1 must be between 0"));
  CHECK_THAT(error("teams: []\n"), Contains("expected a mapping with a \"queues\" list"));
  CHECK_THAT(error("queues: [\n"), Contains("not valid YAML"));
}

}  // namespace
}  // namespace rescale
