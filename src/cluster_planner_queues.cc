// Cluster planner with queues: quotas, cohorts that lend and borrow, and
// weighted fair sharing of what exceeds nominal. The constraints and the
// objective are stated in rescale/cluster_planner.h ("Queues"); this file
// holds the two solvers, the node-slot trimming and the objective's queue
// levels (the queues' model and per-queue accounting live in
// cluster_planner_queues_model.cc).
//
// Why the exact solver is exact. Every level of the objective is a sum over
// queues of a term that depends only on that queue's jobs: levels 1, 2-4 are
// sums over jobs, 1a and 1b sums over queues of functions of U_q. So for a
// fixed usage u of queue q the best plan of its jobs is independent of the
// other queues: a knapsack DP over exactly u cells (RunKnapsack with
// exact_fill) gives it for every u at once. The constraints couple queues
// only through the capacity (sum of U_q) and, within a cohort, through the
// pool (sum of max(0, U_q - G_q)), both sums of per-queue quantities: a DP
// over queues with state (cells used, pool drawn) per cohort, then over
// cohorts with state (cells used), enumerates every feasible combination of
// usages, and lexicographic order is compatible with addition.
//
// The scalable solver is a heuristic (see the header); it keeps every
// constraint because each queue is planned inside a budget, and the budgets
// keep the constraints.
#include "cluster_planner_queues.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace rescale::planner_internal {
namespace {

// A combination's value: levels 1, 1a, 1b, then the knapsack's value.
struct QueueValue {
  bool valid = false;
  int64_t guarded = 0;
  int64_t guarantee = 0;
  double fair = 0;
  DpValue rest;
};

bool Better(const QueueValue& a, const QueueValue& b) {
  if (a.valid != b.valid) return a.valid;
  if (a.guarded != b.guarded) return a.guarded > b.guarded;
  if (a.guarantee != b.guarantee) return a.guarantee > b.guarantee;
  if (!NearlyEqual(a.fair, b.fair)) return a.fair > b.fair;
  return planner_internal::Better(a.rest, b.rest);
}

QueueValue Plus(const QueueValue& a, const QueueValue& b) {
  QueueValue v;
  v.valid = a.valid && b.valid;
  v.guarded = a.guarded + b.guarded;
  v.guarantee = a.guarantee + b.guarantee;
  v.fair = a.fair + b.fair;
  v.rest = {a.rest.score + b.rest.score, a.rest.utility + b.rest.utility,
            a.rest.seniority_mask | b.rest.seniority_mask, a.rest.gpus + b.rest.gpus, v.valid};
  return v;
}

// Work of the exact solver, in DP cells visited; nullopt past `limit`.
std::optional<double> ExactWork(const Problem& p, const Queues& qs, uint64_t unit, double limit) {
  double work = 0;
  for (const QueueModel& q : qs.queues) {
    double options = 1;
    for (uint32_t i : q.members) {
      const JobModel& m = p.models[i];
      options += 1 + (m.CanRun() ? m.hi - m.lo + 1 : 0);
    }
    const double cells = double(q.cap / unit) + 1;
    work += options * cells;  // its table
    work += cells * (double(qs.capacity / unit) + 1) *
            (double(std::min(qs.pool[q.cohort], qs.capacity)) + 1);  // combine
    if (work > limit) return std::nullopt;
  }
  return work;
}

// The exact solver (see the top of this file).
std::vector<uint32_t> SolveQueuesExactly(const Problem& p, const Queues& qs,
                                         const ScoreWeights& weights, uint64_t unit) {
  const size_t nq = qs.queues.size();
  const uint64_t cells = qs.capacity / unit;
  const size_t width = cells + 1;
  // Per queue: the best plan of its jobs at exactly u cells, as a QueueValue.
  std::vector<Problem> parts(nq);
  std::vector<KnapsackTable> tables(nq);
  std::vector<std::vector<QueueValue>> values(nq);
  for (size_t k = 0; k < nq; ++k) {
    const QueueModel& q = qs.queues[k];
    // The part keeps the whole problem's levels and seniority, so the packed
    // scores of different queues add up to the whole problem's score.
    parts[k] = p;
    parts[k].models.clear();
    for (uint32_t i : q.members) parts[k].models.push_back(p.models[i]);
    const uint64_t qcells = q.cap / unit;
    tables[k] = RunKnapsack(parts[k], weights, qcells, unit, /*exact_fill=*/true);
    values[k].resize(qcells + 1);
    for (uint64_t u = 0; u <= qcells; ++u) {
      const DpValue& d = tables[k].best[u];
      if (!d.valid) continue;
      QueueValue& v = values[k][u];
      v.valid = true;
      v.guarded = weights.guarded > 0 ? d.score / weights.guarded : 0;
      v.guarantee = static_cast<int64_t>(std::min(u * unit, q.guaranteed));
      v.fair = q.Fair(u * unit);
      v.rest = d;
    }
  }
  // Per cohort: state (cells, pool drawn) -> best value; then over cohorts.
  std::vector<QueueValue> total(width);
  total[0].valid = true;
  // choice[queue][cohort-state] = cells of that queue; cohort_choice[c][cells].
  std::vector<std::vector<uint32_t>> queue_choice(nq);
  std::vector<uint64_t> cohort_depth(qs.cohorts.size());
  std::vector<std::vector<uint64_t>> cohort_draw(qs.cohorts.size());
  std::vector<std::vector<uint32_t>> total_choice(qs.cohorts.size());
  for (size_t c = 0; c < qs.cohorts.size(); ++c) {
    const uint64_t pool = std::min(qs.pool[c], qs.capacity);
    const size_t depth = pool + 1;
    std::vector<QueueValue> state(width * depth), next(width * depth);
    state[0].valid = true;
    state[0].rest.valid = true;
    for (uint32_t k : qs.cohorts[c]) {
      const QueueModel& q = qs.queues[k];
      queue_choice[k].assign(width * depth, 0);
      std::fill(next.begin(), next.end(), QueueValue{});
      for (size_t s = 0; s < width * depth; ++s) {
        if (!state[s].valid) continue;
        const uint64_t used = s / depth, drawn = s % depth;
        for (uint64_t u = 0; u < values[k].size() && used + u < width; ++u) {
          if (!values[k][u].valid) continue;
          const uint64_t draw = drawn + q.Draw(u * unit);
          if (draw > pool) break;  // draws grow with u
          const size_t t = (used + u) * depth + draw;
          const QueueValue cand = Plus(state[s], values[k][u]);
          if (Better(cand, next[t])) {
            next[t] = cand;
            queue_choice[k][t] = static_cast<uint32_t>(u);
          }
        }
      }
      state.swap(next);
    }
    // Collapse the pool, then add the cohort to the total.
    cohort_draw[c].assign(width, 0);
    std::vector<QueueValue> by_cells(width);
    for (size_t s = 0; s < width * depth; ++s) {
      if (Better(state[s], by_cells[s / depth])) {
        by_cells[s / depth] = state[s];
        cohort_draw[c][s / depth] = s % depth;
      }
    }
    std::vector<QueueValue> grown(width);
    total_choice[c].assign(width, 0);
    for (size_t a = 0; a < width; ++a) {
      if (!total[a].valid) continue;
      for (size_t b = 0; a + b < width; ++b) {
        if (!by_cells[b].valid) continue;
        const QueueValue cand = Plus(total[a], by_cells[b]);
        if (Better(cand, grown[a + b])) {
          grown[a + b] = cand;
          total_choice[c][a + b] = static_cast<uint32_t>(b);
        }
      }
    }
    total.swap(grown);
    // queue_choice of this cohort's queues is indexed by its own (cells,
    // drawn) states, which the backtrack below walks.
    cohort_depth[c] = depth;
  }
  // Backtrack: the best total, then each cohort's cells and pool drawn,
  // then each queue's usage, then each queue's jobs.
  size_t best = 0;
  for (size_t a = 1; a < width; ++a) {
    if (Better(total[a], total[best])) best = a;
  }
  std::vector<uint32_t> replicas(p.size(), 0);
  uint64_t cell = best;
  for (size_t c = qs.cohorts.size(); c-- > 0;) {
    const uint64_t mine = total_choice[c][cell];
    cell -= mine;
    const uint64_t depth = cohort_depth[c];
    uint64_t used = mine, drawn = cohort_draw[c][mine];
    const std::vector<uint32_t>& members = qs.cohorts[c];
    for (size_t j = members.size(); j-- > 0;) {
      const uint32_t k = members[j];
      const uint32_t u = queue_choice[k][used * depth + drawn];
      const std::vector<uint32_t> part = Reconstruct(parts[k], tables[k], u, unit);
      for (size_t m = 0; m < part.size(); ++m) replicas[qs.queues[k].members[m]] = part[m];
      used -= u;
      drawn -= qs.queues[k].Draw(u * unit);
    }
  }
  return replicas;
}

// Water-fills `amount` GPUs over the queues `who` by weight, each up to
// wish[k] (b_k / w_k balanced, the optimum of level 1b); adds to `given`.
void WaterFill(const Queues& qs, std::span<const uint32_t> who, std::vector<uint64_t>& wish,
               uint64_t amount, std::vector<uint64_t>& given) {
  std::vector<uint32_t> active;
  for (uint32_t k : who) {
    if (wish[k] > 0) active.push_back(k);
  }
  while (amount > 0 && !active.empty()) {
    double weights = 0;
    for (uint32_t k : active) weights += qs.queues[k].weight;
    // Every active queue gets its weighted share, at most its wish; a share
    // that rounds to 0 goes to the queue that has the least per weight.
    uint64_t handed = 0;
    for (uint32_t k : active) {
      const double share = double(amount) * qs.queues[k].weight / weights;
      const uint64_t g = std::min<uint64_t>(wish[k], static_cast<uint64_t>(share));
      given[k] += g;
      wish[k] -= g;
      handed += g;
    }
    if (handed == 0) {
      const uint32_t k =
          *std::min_element(active.begin(), active.end(), [&](uint32_t a, uint32_t b) {
            return double(given[a]) / qs.queues[a].weight < double(given[b]) / qs.queues[b].weight;
          });
      ++given[k];
      --wish[k];
      handed = 1;
    }
    amount -= handed;
    std::erase_if(active, [&](uint32_t k) { return wish[k] == 0; });
  }
}

// The scalable solver: guarantees, then the lendable GPUs water-filled over
// the queues' wishes, each queue planned in its budget; twice, so what gangs
// left over in the first round goes to queues that still want it.
std::vector<uint32_t> SolveQueuesAtScale(const Problem& p, const Queues& qs,
                                         const ClusterPlannerOptions& options) {
  const size_t nq = qs.queues.size();
  std::vector<uint64_t> budget(nq), used(nq, 0);
  uint64_t guaranteed = 0;
  for (size_t k = 0; k < nq; ++k) {
    budget[k] = std::min(qs.queues[k].guaranteed, qs.queues[k].cap);
    guaranteed += budget[k];
  }
  // Nominal quotas may add up to more than the capacity: scale down.
  if (guaranteed > qs.capacity) {
    for (uint64_t& b : budget) {
      b = static_cast<uint64_t>(double(b) * double(qs.capacity) / double(guaranteed));
    }
  }
  std::vector<uint32_t> replicas(p.size(), 0);
  for (int round = 0; round < 2; ++round) {
    // What each queue still wants, and where it may come from.
    uint64_t held = 0;
    for (size_t k = 0; k < nq; ++k) held += budget[k];
    uint64_t free_gpus = qs.capacity - std::min(qs.capacity, held);
    std::vector<uint64_t> wish(nq, 0), given(nq, 0);
    for (size_t k = 0; k < nq; ++k) {
      const QueueModel& q = qs.queues[k];
      const uint64_t want = std::min(q.wanted, q.cap);
      wish[k] = want > budget[k] ? want - budget[k] : 0;
      // Below what it keeps for itself a queue draws nothing from the pool.
      const uint64_t own =
          std::min({wish[k], q.kept > budget[k] ? q.kept - budget[k] : 0, free_gpus});
      given[k] += own;
      wish[k] -= own;
      free_gpus -= own;
    }
    for (size_t c = 0; c < qs.cohorts.size(); ++c) {
      uint64_t drawn = 0;
      for (uint32_t k : qs.cohorts[c]) drawn += qs.queues[k].Draw(budget[k] + given[k]);
      const uint64_t pool = qs.pool[c] - std::min(qs.pool[c], drawn);
      const uint64_t amount = std::min(pool, free_gpus);
      std::vector<uint64_t> before = given;
      WaterFill(qs, qs.cohorts[c], wish, amount, given);
      for (uint32_t k : qs.cohorts[c]) free_gpus -= given[k] - before[k];
    }
    bool changed = false;
    for (size_t k = 0; k < nq; ++k) {
      const QueueModel& q = qs.queues[k];
      if (round > 0 && given[k] == 0) continue;
      budget[k] += given[k];
      changed = true;
      if (q.members.empty()) continue;
      const Problem part = Part(p, q.members);
      const std::vector<uint32_t> planned = Solve(part, budget[k], options).replicas;
      for (size_t m = 0; m < planned.size(); ++m) replicas[q.members[m]] = planned[m];
      used[k] = UsedGpus(part, planned);
    }
    // The next round hands out what the plans left of their budgets.
    for (size_t k = 0; k < nq; ++k) budget[k] = used[k];
    if (!changed) break;
  }
  return replicas;
}

// Cuts a plan back to the node slots: in every class that overruns, the
// lowest priority, then latest started, job loses replicas first (down to
// its minimum, then all of them).
void TrimToSlots(const Problem& p, std::span<const ReplicaSlots> slots,
                 std::vector<uint32_t>& replicas) {
  for (const ReplicaSlots& s : slots) {
    if (s.gpus_per_replica == 0) continue;
    uint64_t limit = s.replicas;
    for (const ReplicaSlots& t : slots) {
      if (t.gpus_per_replica == s.gpus_per_replica) limit = std::min<uint64_t>(limit, t.replicas);
    }
    std::vector<uint32_t> members;
    uint64_t use = 0;
    for (uint32_t i = 0; i < p.size(); ++i) {
      if (p.models[i].gpus_per_replica != s.gpus_per_replica || replicas[i] == 0) continue;
      members.push_back(i);
      use += replicas[i];
    }
    std::sort(members.begin(), members.end(), [&](uint32_t a, uint32_t b) {
      if (p.models[a].level != p.models[b].level) return p.models[a].level > p.models[b].level;
      return p.models[a].seniority > p.models[b].seniority;
    });
    for (uint32_t i : members) {
      if (use <= limit) break;
      const JobModel& m = p.models[i];
      const uint64_t over = use - limit;
      const uint32_t keep = replicas[i] > m.lo + over ? static_cast<uint32_t>(replicas[i] - over)
                                                      : (replicas[i] > m.lo ? m.lo : 0);
      use -= replicas[i] - keep;
      replicas[i] = keep;
    }
  }
}

bool FitsSlots(const Problem& p, std::span<const ReplicaSlots> slots,
               std::span<const uint32_t> replicas) {
  for (const ReplicaSlots& s : slots) {
    if (s.gpus_per_replica == 0) continue;
    uint64_t use = 0;
    for (size_t i = 0; i < p.size(); ++i) {
      if (p.models[i].gpus_per_replica == s.gpus_per_replica) use += replicas[i];
    }
    if (use > s.replicas) return false;
  }
  return true;
}

// Whether `replicas` keeps the quota constraints and the capacity.
bool Feasible(const Problem& p, const Queues& qs, std::span<const uint32_t> replicas) {
  std::vector<uint64_t> use(qs.queues.size(), 0);
  uint64_t total = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    const uint64_t g = p.models[i].Gpus(replicas[i]);
    total += g;
    const uint32_t k = p.models[i].job->queue;
    if (k >= use.size()) {
      if (g > 0) return false;
      continue;
    }
    use[k] += g;
  }
  if (total > qs.capacity) return false;
  std::vector<uint64_t> drawn(qs.pool.size(), 0);
  for (size_t k = 0; k < use.size(); ++k) {
    if (use[k] > qs.queues[k].cap) return false;
    drawn[qs.queues[k].cohort] += qs.queues[k].Draw(use[k]);
  }
  for (size_t c = 0; c < drawn.size(); ++c) {
    if (drawn[c] > qs.pool[c]) return false;
  }
  return true;
}

// Levels 1a and 1b of `replicas`, into `out`.
void QueueLevels(const Problem& p, const Queues& qs, std::span<const uint32_t> replicas,
                 PlanObjective& out) {
  int64_t guarded = 0, guarantee = 0;
  double fair = 0;
  std::vector<uint64_t> use(qs.queues.size(), 0);
  for (size_t i = 0; i < p.size(); ++i) {
    const JobModel& m = p.models[i];
    if (replicas[i] > 0 && m.guarded) ++guarded;
    if (m.job->queue < use.size()) use[m.job->queue] += m.Gpus(replicas[i]);
  }
  for (size_t k = 0; k < use.size(); ++k) {
    guarantee += static_cast<int64_t>(std::min(use[k], qs.queues[k].guaranteed));
    fair += qs.queues[k].Fair(use[k]);
  }
  out.queue_levels = {guarded, guarantee};
  out.fair_share = fair;
}

}  // namespace

bool QueuesMatter(std::span<const QueueSpec> queues, std::span<const PlannerJob> jobs,
                  std::optional<uint64_t> capacity) {
  if (queues.empty()) return false;
  if (queues.size() > 1 || !queues[0].cohort.empty()) return true;
  const bool whole =
      capacity ? queues[0].nominal_gpus >= *capacity : queues[0].nominal_gpus >= kHuge;
  if (!whole) return true;
  return std::any_of(jobs.begin(), jobs.end(), [](const PlannerJob& j) { return j.queue != 0; });
}

ClusterPlan PlanWithQueues(Problem p, std::optional<uint64_t> capacity,
                           const ClusterPlannerOptions& options,
                           std::span<const ReplicaSlots> slots, std::span<const QueueSpec> specs) {
  for (JobModel& m : p.models) {
    if (m.job->queue >= specs.size()) {
      m.hi = 0;  // cannot run: its queue is not defined
      m.pinnable = false;
    }
    // No job of a class can run more replicas than the class's slots.
    for (const ReplicaSlots& s : slots) {
      if (s.gpus_per_replica == m.gpus_per_replica && s.gpus_per_replica > 0) {
        m.hi = std::min(m.hi, s.replicas);
        m.pinnable = m.pinnable && m.current <= m.hi;
      }
    }
  }
  const Queues qs = BuildQueues(p, capacity, specs, options);
  uint64_t unit = 0;
  for (const JobModel& m : p.models) {
    if (m.CanRun()) unit = std::gcd(unit, uint64_t{m.gpus_per_replica});
  }
  unit = std::max<uint64_t>(unit, 1);
  Solution solution;
  const double limit = double(options.exact_work_limit);
  const bool few_jobs =
      p.size() <= std::min<size_t>(kMaxExactJobs, size_t(std::max(0, options.exact_job_limit)));
  std::optional<double> work;
  if (p.size() <= kMaxExactJobs) work = ExactWork(p, qs, unit, limit);
  std::optional<ScoreWeights> weights;
  if (work && (few_jobs || *work <= limit / 16)) weights = MakeScoreWeights(p);
  if (weights) {
    solution.replicas = SolveQueuesExactly(p, qs, *weights, unit);
    solution.exact = true;
  } else {
    solution.replicas = SolveQueuesAtScale(p, qs, options);
  }
  if (!slots.empty() && !FitsSlots(p, slots, solution.replicas)) {
    TrimToSlots(p, slots, solution.replicas);
    solution.exact = false;
  }
  ClusterPlan plan = Finish(p, solution, capacity ? capacity : std::optional(qs.capacity));
  ExplainQueues(p, qs, specs, solution.replicas, plan);
  return plan;
}

}  // namespace rescale::planner_internal

namespace rescale {

QueuePlanObjective EvaluateQueuePlan(std::span<const PlannerJob> jobs,
                                     std::span<const uint32_t> replicas,
                                     std::optional<uint64_t> capacity,
                                     std::span<const QueueSpec> queues,
                                     const ClusterPlannerOptions& options) {
  using namespace planner_internal;
  Problem p = BuildProblem(jobs, options);
  for (JobModel& m : p.models) {
    if (m.job->queue >= queues.size()) m.hi = 0;
  }
  const Queues qs = BuildQueues(p, capacity, queues, options);
  QueuePlanObjective out;
  out.feasible = Feasible(p, qs, replicas);
  out.objective = Evaluate(p, replicas);
  QueueLevels(p, qs, replicas, out.objective);
  return out;
}

}  // namespace rescale
