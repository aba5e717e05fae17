// The queues' model of a problem (cluster_planner_queues.h): each queue's
// quota, what it keeps and lends, its cohort's pool, its guarantee D_q and
// what it wants; and the per-queue accounting of a finished plan (use,
// borrowed, lent) with the QUOTA reasons of the jobs its queue bound.
#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cluster_planner_queues.h"

namespace rescale::planner_internal {

uint64_t UsedGpus(const Problem& p, std::span<const uint32_t> replicas) {
  uint64_t gpus = 0;
  for (size_t i = 0; i < p.size(); ++i) gpus += p.models[i].Gpus(replicas[i]);
  return gpus;
}

namespace {

// The GPUs queue q's jobs take when planned alone in `room` GPUs. With
// `running_at_current`, each running job at most at the size it runs: that
// is D_q, what the queue's jobs need of its quota as Kueue reclaims it (every
// waiting job up to its maximum, every running job at its size). A running
// job's growth is not a claim: it competes for lent GPUs by the objective
// like any other use, so an owner whose long job could soak up its whole
// quota does not take GPUs back from borrowers that would use them better
// (docs/queues.md, "Guarantee"). Without it, X_q's plan: all the jobs want.
uint64_t AloneGpus(const Problem& p, const QueueModel& q, uint64_t room,
                   const ClusterPlannerOptions& options, bool running_at_current) {
  if (q.members.empty() || room == 0) return 0;
  Problem part = Part(p, q.members);
  if (running_at_current) {
    for (JobModel& m : part.models) {
      if (m.running) m.hi = std::min(m.hi, std::max(m.current, m.lo));
    }
  }
  return UsedGpus(part, Solve(part, room, options).replicas);
}

std::string Gpus(uint64_t n) { return absl::StrCat(n, n == 1 ? " GPU" : " GPUs"); }

}  // namespace

Queues BuildQueues(const Problem& p, std::optional<uint64_t> capacity,
                   std::span<const QueueSpec> specs, const ClusterPlannerOptions& options) {
  Queues out;
  out.queues.resize(specs.size());
  uint64_t nominal_sum = 0;
  for (const QueueSpec& s : specs) nominal_sum += std::min(s.nominal_gpus, kHuge);
  out.capacity = capacity ? std::min(*capacity, kHuge) : std::min(nominal_sum, kHuge);
  std::vector<std::string_view> cohort_names;
  for (size_t k = 0; k < specs.size(); ++k) {
    const QueueSpec& s = specs[k];
    QueueModel& q = out.queues[k];
    q.nominal = std::min(s.nominal_gpus, kHuge);
    q.weight = std::max(s.weight, kMinWeight);
    if (s.cohort.empty()) {
      // A cohort of its own that lends nothing: U_q <= N_q.
      q.kept = q.nominal;
      q.cohort = out.pool.size();
      out.pool.push_back(0);
      out.cohorts.push_back({static_cast<uint32_t>(k)});
      cohort_names.push_back({});
    } else {
      q.lendable = std::min(s.lending_limit_gpus.value_or(q.nominal), q.nominal);
      q.kept = q.nominal - q.lendable;
      auto it = std::find(cohort_names.begin(), cohort_names.end(), s.cohort);
      q.cohort = it - cohort_names.begin();
      if (it == cohort_names.end()) {
        cohort_names.push_back(s.cohort);
        out.pool.push_back(0);
        out.cohorts.emplace_back();
      }
      out.pool[q.cohort] += q.lendable;
      out.cohorts[q.cohort].push_back(static_cast<uint32_t>(k));
    }
  }
  for (size_t k = 0; k < specs.size(); ++k) {
    QueueModel& q = out.queues[k];
    const uint64_t borrow = std::min(specs[k].borrowing_limit_gpus.value_or(kHuge), kHuge);
    q.cap = std::min({q.nominal + borrow, q.kept + out.pool[q.cohort], out.capacity});
  }
  for (uint32_t i = 0; i < p.size(); ++i) {
    const uint32_t k = p.models[i].job->queue;
    // Jobs of an undefined queue belong to none; they wait (hi = 0).
    if (k < specs.size()) out.queues[k].members.push_back(i);
  }
  for (QueueModel& q : out.queues) {
    q.guaranteed = AloneGpus(p, q, std::min(q.nominal, out.capacity), options, true);
    q.wanted = AloneGpus(p, q, q.cap, options, false);
  }
  // Fair sharing counts only between queues that compete for lent GPUs: in
  // a cohort where two or more queues want to borrow and together want more
  // than the pool has left after every guarantee. Alone, a borrower's share
  // is decided by the objective, not pushed to all it wishes.
  for (const std::vector<uint32_t>& members : out.cohorts) {
    const QueueModel& first = out.queues[members.front()];
    uint64_t drawn = 0, wishes = 0;
    size_t wishing = 0;
    for (uint32_t k : members) {
      const QueueModel& q = out.queues[k];
      drawn += q.Draw(std::min(q.guaranteed, q.cap));
      wishes += q.Wish();
      wishing += q.Wish() > 0 ? 1 : 0;
    }
    const uint64_t pool = out.pool[first.cohort];
    const bool compete = wishing >= 2 && wishes > pool - std::min(pool, drawn);
    for (uint32_t k : members) out.queues[k].shares = compete;
  }
  return out;
}

// Per-queue accounting of the plan, and the jobs whose queue, not the
// cluster, bound them: their binding becomes QUOTA with the queue's figures.
void ExplainQueues(const Problem& p, const Queues& qs, std::span<const QueueSpec> specs,
                   std::span<const uint32_t> replicas, ClusterPlan& plan) {
  const size_t nq = qs.queues.size();
  std::vector<uint64_t> use(nq, 0), before(nq, 0);
  plan.queues.assign(nq, PlannedQueue{});
  for (size_t i = 0; i < p.size(); ++i) {
    const JobModel& m = p.models[i];
    const uint32_t k = m.job->queue;
    if (k >= nq) continue;
    use[k] += m.Gpus(replicas[i]);
    before[k] += m.Gpus(m.current);
    ++(replicas[i] > 0 ? plan.queues[k].running_jobs : plan.queues[k].waiting_jobs);
  }
  std::vector<uint64_t> drawn(qs.pool.size(), 0), borrowed(qs.pool.size(), 0),
      lendable(qs.pool.size(), 0);
  for (size_t k = 0; k < nq; ++k) {
    const QueueModel& q = qs.queues[k];
    PlannedQueue& out = plan.queues[k];
    out.in_use_gpus = use[k];
    out.borrowed_gpus = use[k] > q.nominal ? use[k] - q.nominal : 0;
    out.guaranteed_gpus = q.guaranteed;
    out.wanted_gpus = q.wanted;
    drawn[q.cohort] += q.Draw(use[k]);
    borrowed[q.cohort] += out.borrowed_gpus;
    lendable[q.cohort] += std::min(q.lendable, q.nominal - std::min(use[k], q.nominal));
  }
  // The cohort's borrowed GPUs, split between lenders by what each may lend.
  for (size_t c = 0; c < qs.cohorts.size(); ++c) {
    uint64_t left = std::min(borrowed[c], lendable[c]);
    for (uint32_t k : qs.cohorts[c]) {
      const QueueModel& q = qs.queues[k];
      const uint64_t mine = std::min(q.lendable, q.nominal - std::min(use[k], q.nominal));
      const uint64_t share =
          lendable[c] > 0
              ? static_cast<uint64_t>(double(borrowed[c]) * double(mine) / double(lendable[c]))
              : 0;
      plan.queues[k].lent_gpus = std::min({share, mine, left});
      left -= plan.queues[k].lent_gpus;
    }
    for (uint32_t k : qs.cohorts[c]) {  // rounding leftovers, in queue order
      const QueueModel& q = qs.queues[k];
      const uint64_t mine = std::min(q.lendable, q.nominal - std::min(use[k], q.nominal));
      const uint64_t more = std::min(left, mine - plan.queues[k].lent_gpus);
      plan.queues[k].lent_gpus += more;
      left -= more;
    }
  }
  for (size_t i = 0; i < p.size(); ++i) {
    const JobModel& m = p.models[i];
    PlannedJob& d = plan.jobs[i];
    const uint32_t k = m.job->queue;
    const uint32_t r = replicas[i];
    if (k >= nq) {
      d.binding = BindingConstraint::kQuota;
      d.reason = "waits: its queue is not defined (rescalectl get queues)";
      continue;
    }
    const QueueModel& q = qs.queues[k];
    const QueueSpec& spec = specs[k];
    // The most the queue could hold with every other queue as planned.
    const uint64_t others = drawn[q.cohort] - q.Draw(use[k]);
    const uint64_t pool = qs.pool[q.cohort];
    const uint64_t most = std::min(q.cap, q.kept + (pool > others ? pool - others : 0));
    const uint64_t headroom = most > use[k] ? most - use[k] : 0;
    const std::string where = absl::StrCat(
        "queue ", spec.name, " holds ", use[k], " of ", Gpus(most), " it may use (", "nominal ",
        q.nominal, spec.cohort.empty() ? std::string() : absl::StrCat(", cohort ", spec.cohort),
        ")");
    if (m.running && r < m.current && before[k] > q.nominal && use[k] < before[k] &&
        d.binding != BindingConstraint::kCooldown) {
      // Shrunk or suspended while its queue was borrowing: the owners took
      // their GPUs back (level 1a), or fair sharing moved them.
      d.binding = BindingConstraint::kQuota;
      d.reason = absl::StrCat(r == 0 ? "suspended" : absl::StrCat("shrinks to ", r, " replicas"),
                              ": queue ", spec.name, " returns GPUs it borrowed from cohort ",
                              spec.cohort, " (", before[k] - q.nominal, " borrowed before, ",
                              use[k] > q.nominal ? use[k] - q.nominal : 0, " now)");
      continue;
    }
    if (r == 0) {
      if (!m.CanRun() || m.MinGpus() <= headroom) continue;
      d.binding = BindingConstraint::kQuota;
      d.reason = absl::StrCat("waits for its queue: needs ", Gpus(m.MinGpus()), "; ", where);
      continue;
    }
    // Kept from growing by the queue rather than by the cluster (cooldown,
    // restart cost and max_replicas explain themselves).
    if (r < m.hi && d.value_one_more > 0 && m.gpus_per_replica > headroom &&
        d.binding != BindingConstraint::kCooldown && d.binding != BindingConstraint::kRestartCost &&
        d.binding != BindingConstraint::kMaxReplicas) {
      d.binding = BindingConstraint::kQuota;
      d.reason = absl::StrCat("runs ", r, r == 1 ? " replica" : " replicas", ": one more needs ",
                              Gpus(m.gpus_per_replica), "; ", where);
    }
  }
}

}  // namespace rescale::planner_internal
