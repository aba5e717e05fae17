// Cluster planner, explanations: for every job the constraint that bound its
// size and a sentence a person can read, its queue position when waiting and
// the marginal value of one replica more or fewer.
//
// Explanations are computed from the final sizes, the same way for all three
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cluster_planner_internal.h"

namespace rescale::planner_internal {
namespace {

// "1 GPU", "4 GPUs". StrCat, not StrFormat, for the phrases made for every
// job of every plan: integers only, and several times faster.
std::string Count(uint64_t n, const char* noun) {
  return absl::StrCat(n, " ", noun, n == 1 ? "" : "s");
}

// printf's "%.<precision>f", or "%+.<precision>f" with `sign`, for the
// figures in every job's reason of every plan: std::to_chars formats as
// printf does in the C locale, without parsing a format each time.
std::string Fixed(double v, int precision, bool sign = false) {
  char buf[64];
  char* out = buf;
  if (sign && !std::signbit(v)) *out++ = '+';
  const auto [end, error] =
      std::to_chars(out, buf + sizeof buf, v, std::chars_format::fixed, precision);
  if (error != std::errc()) {
    // Two calls: absl checks a format string at compile time (clang insists).
    return sign ? absl::StrFormat("%+.*f", precision, v) : absl::StrFormat("%.*f", precision, v);
  }
  return std::string(buf, end);
}

std::string SizePhrase(const JobModel& m, uint32_t n) {
  const uint64_t gpus = m.Gpus(n);
  const std::string size =
      absl::StrCat(n, n == 1 ? " replica (" : " replicas (", gpus, gpus == 1 ? " GPU)" : " GPUs)");
  if (m.elsewhere) {
    return absl::StrCat("moves from ", m.moved_from, " (", m.job->current_replicas, ") to ",
                        m.type_name, " at ", size);
  }
  if (m.current == 0) return absl::StrCat(m.job->suspended ? "resumes at " : "starts at ", size);
  if (n == m.current) return absl::StrCat("stays at ", size);
  return absl::StrCat(n > m.current ? "grows from " : "shrinks from ", m.current, " to ", size);
}

double PercentFaster(const JobModel& m, uint32_t from, uint32_t to) {
  return 100.0 * (m.Throughput(to) / m.Throughput(from) - 1);
}

}  // namespace

std::vector<PlannedJob> Explain(const Problem& p, std::span<const uint32_t> replicas,
                                std::optional<uint64_t> capacity, uint64_t allocated) {
  const size_t n = p.size();
  std::vector<PlannedJob> out(n);
  const bool bounded = capacity.has_value();
  const uint64_t free_gpus = bounded ? *capacity - allocated : std::numeric_limits<uint64_t>::max();

  // The cheapest GPUs elsewhere: the least level-4 value lost per GPU by
  // shrinking another running job one replica (two smallest, to exclude self).
  double cheapest[2] = {std::numeric_limits<double>::infinity(),
                        std::numeric_limits<double>::infinity()};
  size_t cheapest_job[2] = {n, n};
  uint64_t guarded_need = 0;
  for (size_t i = 0; i < n; ++i) {
    const JobModel& m = p.models[i];
    const uint32_t r = replicas[i];
    if (m.guarded && m.CanRun()) guarded_need += m.MinGpus();
    if (r == 0) continue;
    PlannedJob& d = out[i];
    if (r < p.models[i].job->max_replicas) d.value_one_more = p.Utility(i, r + 1) - p.Utility(i, r);
    if (r > m.lo) d.value_one_fewer = p.Utility(i, r - 1) - p.Utility(i, r);
    const bool pinned = m.cooldown && r == m.current;
    if (r > m.lo && !pinned) {
      const double loss = -d.value_one_fewer / double(m.gpus_per_replica);
      if (loss < cheapest[0]) {
        cheapest[1] = cheapest[0];
        cheapest_job[1] = cheapest_job[0];
        cheapest[0] = loss;
        cheapest_job[0] = i;
      } else if (loss < cheapest[1]) {
        cheapest[1] = loss;
        cheapest_job[1] = i;
      }
    }
  }

  // GPUs held per priority, for the waiting reasons.
  struct Holding {
    int32_t priority;
    uint64_t gpus;
    bool guarded;
  };
  std::vector<Holding> holdings;
  for (size_t i = 0; i < n; ++i) {
    if (replicas[i] > 0) {
      holdings.push_back(
          {p.models[i].job->priority, p.models[i].Gpus(replicas[i]), p.models[i].guarded});
    }
  }
  std::sort(holdings.begin(), holdings.end(),
            [](const Holding& a, const Holding& b) { return a.priority > b.priority; });
  std::vector<uint64_t> held_prefix(1, 0), guarded_prefix(1, 0);
  for (const Holding& h : holdings) {
    held_prefix.push_back(held_prefix.back() + h.gpus);
    guarded_prefix.push_back(guarded_prefix.back() + (h.guarded ? h.gpus : 0));
  }

  std::vector<size_t> queue;
  for (size_t i = 0; i < n; ++i) {
    const JobModel& m = p.models[i];
    const PlannerJob& job = *p.models[i].job;
    PlannedJob& d = out[i];
    const uint32_t r = replicas[i];
    d.replicas = r;
    if (r == 0) {
      queue.push_back(i);
      const uint64_t need = m.MinGpus();
      if (!m.allowed) {
        // Typed plans explain a waiting job on a type it may use, if any.
        d.binding = BindingConstraint::kCapacity;
        d.reason = "cannot run: it may use none of the cluster's GPU types";
      } else if (!m.CanRun()) {
        d.binding = BindingConstraint::kMaxReplicas;
        d.reason = absl::StrFormat("cannot run: max_replicas=%d is below min_replicas=%d",
                                   job.max_replicas, m.lo);
      } else if (bounded && need > *capacity) {
        d.binding = BindingConstraint::kCapacity;
        d.reason = absl::StrFormat("needs %s (min_replicas=%d x %d); the cluster has only %d",
                                   Count(need, "GPU"), m.lo, m.gpus_per_replica, *capacity);
      } else if (m.guarded && bounded && guarded_need > *capacity) {
        d.binding = BindingConstraint::kCapacity;
        d.reason = absl::StrFormat(
            "non-preemptible, but the cluster's %d GPUs cannot hold every non-preemptible job "
            "(they need %d); needs %s; %d free",
            *capacity, guarded_need, Count(need, "GPU"), free_gpus);
      } else {
        d.binding = m.running ? BindingConstraint::kPreempted : BindingConstraint::kCapacity;
        const size_t above = static_cast<size_t>(
            std::partition_point(holdings.begin(), holdings.end(),
                                 [&](const Holding& h) { return h.priority >= job.priority; }) -
            holdings.begin());
        const uint64_t higher = held_prefix[above];
        const uint64_t guarded_lower = guarded_prefix.back() - guarded_prefix[above];
        const uint64_t lower = held_prefix.back() - higher - guarded_lower;
        std::string text =
            absl::StrCat(m.running ? "suspended: " : "", "needs ", Count(need, "GPU"), "; ",
                         bounded ? free_gpus : 0, " free; ", higher,
                         " held by jobs of higher or equal priority");
        if (lower > 0) absl::StrAppend(&text, "; ", lower, " by lower-priority jobs");
        if (guarded_lower > 0) {
          absl::StrAppend(&text, "; ", guarded_lower, " by non-preemptible jobs of lower priority");
        }
        d.reason = std::move(text);
      }
      continue;
    }

    const std::string size = SizePhrase(m, r);
    const uint64_t g = m.gpus_per_replica;
    if (m.cooldown && r == m.current) {
      d.binding = BindingConstraint::kCooldown;
      d.reason = absl::StrCat(size, ": it is in cooldown, so its size is left alone");
      continue;
    }
    if (r == m.current) {
      // Would another size pay off if resizing were free, but not with the
      // restart? Sizes that need more GPUs than are free do not count.
      const double here = p.Utility(i, r);
      uint32_t tempting = 0;
      double tempting_gain = 0;
      bool worth_with_restart = false;
      for (uint32_t other = m.lo; other <= m.hi; ++other) {
        if (other == r) continue;
        // Larger sizes need more GPUs still: none of them counts either.
        if (other > r && bounded && m.Gpus(other - r) > free_gpus) break;
        const double free_gain = p.UtilityWithoutRestart(i, other) - here;
        if (free_gain <= 0 || NearlyEqual(free_gain + here, here)) continue;
        if (p.Utility(i, other) > here && !NearlyEqual(p.Utility(i, other), here)) {
          worth_with_restart = true;
        }
        if (free_gain > tempting_gain) {
          tempting_gain = free_gain;
          tempting = other;
        }
      }
      const bool next_only_without_restart =
          r < m.hi && p.UtilityWithoutRestart(i, r + 1) > here &&
          !NearlyEqual(p.UtilityWithoutRestart(i, r + 1), here) && d.value_one_more <= 0;
      if ((tempting != 0 && !worth_with_restart) || next_only_without_restart) {
        if (tempting == 0) tempting = r + 1;
        d.binding = BindingConstraint::kRestartCost;
        // jct weighs a restart over what is left of a job about to finish.
        const std::string span =
            m.restart_horizon_seconds < p.horizon_seconds
                ? absl::StrCat("the ", Fixed(m.restart_horizon_seconds, 0), " s it has left")
                : absl::StrCat("the ", Fixed(p.horizon_seconds, 0), " s horizon");
        d.reason = absl::StrCat(
            size, ": resizing to ", Count(tempting, "replica"), " would change throughput by ",
            Fixed(PercentFaster(m, r, tempting), 1, /*sign=*/true), "%, not worth a ",
            Fixed(std::max(0.0, job.restart_cost_seconds), 0), " s restart over ", span);
        continue;
      }
    }
    if (r >= job.max_replicas) {
      d.binding = BindingConstraint::kMaxReplicas;
      d.reason = absl::StrCat(size, ", its max_replicas");
      continue;
    }
    const double gain = d.value_one_more;
    const double faster = PercentFaster(m, r, r + 1);
    if (gain > 0 && !NearlyEqual(p.Utility(i, r + 1), p.Utility(i, r)) && free_gpus < g) {
      const double elsewhere = cheapest_job[0] == i ? cheapest[1] : cheapest[0];
      if (std::isfinite(elsewhere) && gain / double(g) <= elsewhere * (1 + 1e-9)) {
        d.binding = BindingConstraint::kEfficiency;
        d.reason =
            absl::StrCat(size, ": one more replica (", Fixed(faster, 1, /*sign=*/true),
                         "% throughput) is worth less than its ", Count(g, "GPU"), " elsewhere");
      } else {
        d.binding = r == m.lo ? BindingConstraint::kMinReplicas : BindingConstraint::kCapacity;
        d.reason = absl::StrCat(size, r == m.lo ? ", its min_replicas" : "",
                                ": one more replica would add ", Fixed(faster, 1),
                                "% throughput but only ", free_gpus, " of its ", Count(g, "GPU"),
                                " are free");
      }
      continue;
    }
    d.binding = BindingConstraint::kEfficiency;
    if (faster <= 0) {
      d.reason = absl::StrCat(size, ": one more replica would not make it faster");
    } else {
      d.reason = absl::StrCat(size, ": one more replica would add only ", Fixed(faster, 1),
                              "% throughput, worth less than its ", Count(g, "GPU"));
    }
  }

  // Queue: the objective's order.
  std::sort(queue.begin(), queue.end(), [&](size_t a, size_t b) {
    const PlannerJob& ja = *p.models[a].job;
    const PlannerJob& jb = *p.models[b].job;
    if (ja.priority != jb.priority) return ja.priority > jb.priority;
    if (p.models[a].running != p.models[b].running) return p.models[a].running;
    if (ja.started_at != jb.started_at) return ja.started_at < jb.started_at;
    if (ja.job_id != jb.job_id) return ja.job_id < jb.job_id;
    return a < b;
  });
  for (size_t k = 0; k < queue.size(); ++k) out[queue[k]].queue_position = uint32_t(k + 1);
  return out;
}

void ExplainSlots(const Problem& p, std::span<const uint32_t> replicas,
                  std::span<const uint32_t> relaxed, std::span<const uint32_t> unlimited_hi,
                  const SlotLimits& limits, std::optional<uint64_t> capacity, uint64_t allocated,
                  std::vector<PlannedJob>& out) {
  const uint64_t free_gpus =
      capacity ? *capacity - std::min(*capacity, allocated) : std::numeric_limits<uint64_t>::max();
  std::vector<uint64_t> planned(limits.limits.size(), 0);
  auto class_of = [&](uint32_t g) -> std::optional<size_t> {
    auto it = std::lower_bound(limits.limits.begin(), limits.limits.end(),
                               std::make_pair(g, uint32_t{0}));
    if (it == limits.limits.end() || it->first != g) return std::nullopt;
    return size_t(it - limits.limits.begin());
  };
  for (size_t i = 0; i < p.size(); ++i) {
    if (const auto c = class_of(p.models[i].gpus_per_replica)) planned[*c] += replicas[i];
  }
  for (size_t i = 0; i < p.size(); ++i) {
    const JobModel& m = p.models[i];
    const std::optional<size_t> c = class_of(m.gpus_per_replica);
    if (!c || unlimited_hi[i] < m.lo) continue;  // unlimited, or cannot run at all
    const uint64_t limit = limits.limits[*c].second;
    const uint64_t g = m.gpus_per_replica;
    const uint32_t r = replicas[i];
    PlannedJob& d = out[i];
    if (r == 0) {
      const uint64_t room = limit - std::min(limit, planned[*c]);
      if (m.lo <= room) continue;  // the slots would take it: something else holds it back
      // The slots hold it back when the GPUs alone would not: the plan
      // without slots ran it, the free GPUs would hold it, or it fits the
      // cluster but never its slots.
      const uint64_t need = m.MinGpus();
      const bool gpus_would_do =
          relaxed[i] > 0 || need <= free_gpus || (m.lo > limit && (!capacity || need <= *capacity));
      if (!gpus_would_do) continue;
      d.binding = BindingConstraint::kNodeSlots;
      std::string fit;
      if (planned[*c] == 0 || m.lo > limit) {
        fit = limit == 0 ? std::string("none fits on the nodes' free GPUs")
                         : absl::StrCat("only ", limit, limit == 1 ? " fits" : " fit",
                                        " on the nodes' free GPUs");
      } else {
        fit = absl::StrCat("the nodes' free GPUs fit ", limit, ", ", planned[*c],
                           " of them planned for other jobs of that size");
      }
      d.reason = absl::StrCat(m.running ? "suspended: " : "", "needs ", Count(m.lo, "replica"),
                              " of ", Count(g, "GPU"), " on one node each; ", fit);
      continue;
    }
    // Running: kept from growing when its class is full and one more
    // replica would pay off (cooldown and restart cost explain themselves).
    if (planned[*c] < limit || r >= unlimited_hi[i]) continue;
    if (d.binding == BindingConstraint::kCooldown || d.binding == BindingConstraint::kRestartCost)
      continue;
    if (!(d.value_one_more > 0) || NearlyEqual(p.Utility(i, r + 1), p.Utility(i, r))) continue;
    d.binding = BindingConstraint::kNodeSlots;
    d.reason = absl::StrCat(SizePhrase(m, r), ": one more replica would add ",
                            Fixed(PercentFaster(m, r, r + 1), 1), "% throughput, but needs ",
                            Count(g, "GPU"), " on one node and the nodes' free GPUs fit only ",
                            Count(limit, "replica"), " of that size, all planned");
  }
}

}  // namespace rescale::planner_internal
