// Cluster planner, solvers 1 and 2 (see rescale/cluster_planner.h for the
// objective and cluster_planner.cc for why it decomposes per job).
//
// Solver 1, separable (capacity unknown, or at least every job at its
// max_replicas): nothing competes, so each job takes its own best option:
// run (levels 1-2), at its current size when in cooldown (level 3), else at
// the size of highest utility (level 4; ties take fewer GPUs). Exact, O(sizes).
//
// Solver 2, exact DP (few jobs, bounded work): levels 1-3 are packed into one
// int64 in mixed radix, one digit per count with radix (jobs it counts + 1),
// so sums never carry between digits and integer order is the lexicographic
// order. A multiple-choice knapsack DP over capacity (in units of the gcd of
// gpus_per_replica) with values (packed score, utility, seniority mask, GPUs)
// is then exact; the seniority mask gives the stated tie rule (keep the
// earliest started), fewer GPUs break the remaining ties.
#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include "cluster_planner_internal.h"

namespace rescale::planner_internal {
std::optional<ScoreWeights> MakeScoreWeights(const Problem& p) {
  const size_t levels = p.priorities.size();
  std::vector<int64_t> running_count(levels, 0), waiting_count(levels, 0);
  int64_t guarded_count = 0, cooldown_count = 0;
  for (const JobModel& m : p.models) {
    (m.running ? running_count : waiting_count)[m.level]++;
    guarded_count += m.guarded;
    cooldown_count += m.cooldown;
  }
  ScoreWeights w;
  w.running.resize(levels);
  w.waiting.resize(levels);
  constexpr __int128 kMax = std::numeric_limits<int64_t>::max();
  __int128 weight = 1;
  auto next = [&](int64_t count) {
    weight *= count + 1;
    return weight <= kMax;
  };
  w.unchanged = 1;
  if (!next(cooldown_count)) return std::nullopt;
  for (size_t l = levels; l-- > 0;) {
    w.waiting[l] = static_cast<int64_t>(weight);
    if (!next(waiting_count[l])) return std::nullopt;
    w.running[l] = static_cast<int64_t>(weight);
    if (!next(running_count[l])) return std::nullopt;
  }
  w.guarded = static_cast<int64_t>(weight);
  if (!next(guarded_count)) return std::nullopt;
  return w;
}

int64_t OptionScore(const ScoreWeights& w, const JobModel& m, uint32_t n) {
  int64_t score = 0;
  if (n > 0) {
    if (m.guarded) score += w.guarded;
    score += m.running ? w.running[m.level] : w.waiting[m.level];
  }
  if (m.cooldown && Unchanged(m, n)) score += w.unchanged;
  return score;
}

uint64_t SeniorityBit(const JobModel& m) {
  return m.seniority < 64 ? uint64_t{1} << (63 - m.seniority) : 0;
}

bool Better(const DpValue& a, const DpValue& b) {
  if (a.valid != b.valid) return a.valid;
  if (a.score != b.score) return a.score > b.score;
  if (!NearlyEqual(a.utility, b.utility)) return a.utility > b.utility;
  if (a.seniority_mask != b.seniority_mask) return a.seniority_mask > b.seniority_mask;
  return a.gpus < b.gpus;
}

std::vector<uint32_t> SolveSeparable(const Problem& p) {
  std::vector<uint32_t> replicas(p.size(), 0);
  for (size_t i = 0; i < p.size(); ++i) {
    const JobModel& m = p.models[i];
    if (!m.CanRun()) continue;
    if (m.pinnable) {
      replicas[i] = m.current;
      continue;
    }
    uint32_t best = m.lo;
    double best_utility = p.Utility(i, best);
    for (uint32_t n = m.lo + 1; n <= m.hi; ++n) {
      const double u = p.Utility(i, n);
      if (u > best_utility && !NearlyEqual(u, best_utility)) {
        best = n;
        best_utility = u;
      }
    }
    replicas[i] = best;
  }
  return replicas;
}

// dp[c] is the best value of the jobs so far within c cells (exactly c
// cells with exact_fill).
KnapsackTable RunKnapsack(const Problem& p, const ScoreWeights& weights, uint64_t cells,
                          uint64_t unit, bool exact_fill) {
  struct Option {
    uint32_t replicas;
    uint64_t cells;
    DpValue value;
  };
  const size_t n = p.size();
  KnapsackTable table;
  table.width = cells + 1;
  const size_t width = table.width;
  std::vector<DpValue> best(width), next(width);
  for (DpValue& v : best) v = DpValue{};
  if (exact_fill) {
    for (size_t c = 1; c < width; ++c) best[c].valid = false;
  }
  table.choice.assign(n * width, 0);
  std::vector<Option> options;
  for (size_t j = 0; j < n; ++j) {
    const JobModel& m = p.models[j];
    options.clear();
    const DpValue off{OptionScore(weights, m, 0), 0, 0, 0};
    if (m.CanRun()) {
      for (uint32_t r = m.lo; r <= m.hi && m.Gpus(r) / unit <= cells; ++r) {
        options.push_back(
            {r,
             m.Gpus(r) / unit,
             {OptionScore(weights, m, r), p.Utility(j, r), SeniorityBit(m), m.Gpus(r)}});
      }
    }
    uint32_t* row = &table.choice[j * width];
    for (size_t c = 0; c < width; ++c) {
      DpValue top = best[c];
      top.score += off.score;
      uint32_t top_replicas = 0;
      for (const Option& o : options) {
        if (o.cells > c) break;  // options are in increasing size
        const DpValue& base = best[c - o.cells];
        if (!base.valid) continue;
        DpValue cand{base.score + o.value.score, base.utility + o.value.utility,
                     base.seniority_mask | o.value.seniority_mask, base.gpus + o.value.gpus};
        if (Better(cand, top)) {
          top = cand;
          top_replicas = o.replicas;
        }
      }
      next[c] = top;
      row[c] = top_replicas;
    }
    best.swap(next);
  }
  table.best = std::move(best);
  return table;
}

std::vector<uint32_t> Reconstruct(const Problem& p, const KnapsackTable& table, uint64_t cell,
                                  uint64_t unit) {
  std::vector<uint32_t> replicas(p.size(), 0);
  uint64_t c = cell;
  for (size_t j = p.size(); j-- > 0;) {
    const uint32_t r = table.choice[j * table.width + c];
    replicas[j] = r;
    c -= p.models[j].Gpus(r) / unit;
  }
  return replicas;
}

std::vector<uint32_t> SolveExactDp(const Problem& p, const ScoreWeights& weights, uint64_t cells,
                                   uint64_t unit) {
  return Reconstruct(p, RunKnapsack(p, weights, cells, unit, /*exact_fill=*/false), cells, unit);
}

}  // namespace rescale::planner_internal
