// Cluster planner with GPU types at scale (PlanClusterTypes beyond the exact
// DP): give every job a type, plan each type with PlanCluster's solvers, move
// jobs between types where the types' prices of a GPU say it gains, plan the
// changed types again (kRounds rounds); and a Lagrangian upper bound on
// level 4 with one price per type.
//
// The rounds. Start: a running job stays on its type; waiting jobs, by
// priority then seniority, take the allowed type with room for their
// minimum where they are fastest (else the fastest, where they wait). After
// each round's per-type plans, each type t has
//   free_t   GPUs it leaves unused;
//   grow_t   the most one more GPU is worth to a job on t (what GPUs freed
//            on t are worth);
//   shrink_t the least one GPU fewer costs a job on t that can shrink (what
//            taking GPUs on t costs beyond free_t; no such job: only free_t
//            can be taken).
// A job at (a, n_a) moves to (b, n) when U_b(n) - cost_b(n) beats U_a(n_a) -
// grow_a x GPUs(n_a): first waiting jobs that can start within a type's free
// GPUs (level 2), then running jobs by gain, never one in cooldown (level
// 3), each type taking no more than its free GPUs plus what its jobs hold
// above their minimums. The types that changed are planned again; the best
// plan by the whole objective is kept, so a round never makes it worse.
//
// The bound, as PlanCluster's scalable solver reports it: on level 4 among
// the plans that run the same jobs (levels 1-3 chose them). For prices
// lambda_t >= 0 and any such plan that keeps every type's capacity C_t,
// sum_i U_i <= sum_i [U_i - lambda_t(i) GPUs_i] + sum_t lambda_t C_t <=
// sum over running jobs i of max over allowed (t, n >= min) of U_i(t, n) -
// lambda_t GPUs(n), plus sum_t lambda_t C_t. The maximum per job is taken
// over the upper concave hull of its sizes on each type (binary search on
// the hull's slopes). The bound is convex in the prices; starting from each
// type's LP price for the jobs the plan puts there, a few steps raise the
// price of a type asked for more GPUs than it has and lower the others',
// and the least bound seen is reported.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "cluster_planner_types.h"

namespace rescale::planner_internal {
namespace {

constexpr int kRounds = 1;
constexpr double kInf = std::numeric_limits<double>::infinity();

struct Prices {
  std::vector<uint64_t> free;
  std::vector<uint64_t> above_min;  // GPUs held above minimums
  std::vector<double> grow, shrink;
};

// Plans type t's members in place (a.replicas of its members).
void PlanType(const TypedProblem& x, TypedAssignment& a, uint32_t t,
              const ClusterPlannerOptions& options) {
  const std::vector<uint32_t> members = Members(x, a, t);
  if (members.empty()) return;
  Problem part = Part(x.problems[t], members);
  const std::vector<ReplicaSlots>& slots = x.types[t].slots;
  if (slots.empty()) {
    const Solution s = Solve(part, x.capacity[t], options);
    for (size_t k = 0; k < members.size(); ++k) a.replicas[members[k]] = s.replicas[k];
    return;
  }
  const ClusterPlan plan = PlanWithSlots(std::move(part), x.capacity[t], options, slots);
  for (size_t k = 0; k < members.size(); ++k) a.replicas[members[k]] = plan.jobs[k].replicas;
}

Prices PricesOf(const TypedProblem& x, const TypedAssignment& a) {
  const size_t k = x.types.size();
  Prices out;
  out.free.assign(k, 0);
  out.above_min.assign(k, 0);
  out.grow.assign(k, 0);
  out.shrink.assign(k, kInf);
  std::vector<uint64_t> used(k, 0);
  for (size_t i = 0; i < x.size(); ++i) {
    const uint32_t n = a.replicas[i];
    if (n == 0) continue;
    const uint32_t t = a.types[i];
    const JobModel& m = x.Model(i, t);
    const Problem& p = x.problems[t];
    const double g = m.gpus_per_replica;
    used[t] += m.Gpus(n);
    if (n < m.hi) out.grow[t] = std::max(out.grow[t], (p.Utility(i, n + 1) - p.Utility(i, n)) / g);
    if (n > m.lo && !(m.cooldown && Unchanged(m, n))) {
      out.above_min[t] += m.Gpus(n - m.lo);
      out.shrink[t] = std::min(out.shrink[t], (p.Utility(i, n) - p.Utility(i, n - 1)) / g);
    }
  }
  for (size_t t = 0; t < k; ++t) {
    out.free[t] = x.capacity[t] > used[t] ? x.capacity[t] - used[t] : 0;
    out.shrink[t] = std::max(out.shrink[t], 0.0);
  }
  return out;
}

// The start: running jobs on their type, waiting ones where they are fastest
// among the types with room for their minimum.
TypedAssignment Start(const TypedProblem& x) {
  const size_t jobs = x.size();
  const size_t k = x.types.size();
  TypedAssignment a;
  a.replicas.assign(jobs, 0);
  a.types.resize(jobs);
  std::vector<uint64_t> room(x.capacity.begin(), x.capacity.end());
  std::vector<uint32_t> waiting;
  for (uint32_t i = 0; i < jobs; ++i) {
    a.types[i] = x.Home(i);
    const JobModel& home = x.Model(i, a.types[i]);
    if (home.running && !home.elsewhere && home.CanRun()) {
      room[a.types[i]] -= std::min(room[a.types[i]], home.MinGpus());
    } else {
      waiting.push_back(i);
    }
  }
  const Problem& first = x.problems.front();
  std::stable_sort(waiting.begin(), waiting.end(), [&](uint32_t l, uint32_t r) {
    if (first.models[l].level != first.models[r].level)
      return first.models[l].level < first.models[r].level;
    return first.models[l].seniority < first.models[r].seniority;
  });
  for (uint32_t i : waiting) {
    int best_fit = -1, best_any = -1;
    double fit_speed = 0, any_speed = 0;
    for (uint32_t t = 0; t < k; ++t) {
      const JobModel& m = x.Model(i, t);
      if (!m.CanRun()) continue;
      const double speed = m.Throughput(m.lo);
      if (best_any < 0 || speed > any_speed) best_any = int(t), any_speed = speed;
      if (room[t] >= m.MinGpus() && (best_fit < 0 || speed > fit_speed)) {
        best_fit = int(t), fit_speed = speed;
      }
    }
    const int t = best_fit >= 0 ? best_fit : best_any;
    if (t < 0) continue;  // no type it may use: it waits on its home type
    a.types[i] = uint32_t(t);
    if (best_fit >= 0) room[t] -= x.Model(i, t).MinGpus();
  }
  return a;
}

struct Move {
  uint32_t job, type;
  uint64_t gpus;
  bool starts;  // a waiting job that starts (level 2)
  double gain;
};

// The moves of one round, best first, within each type's budget; returns
// the types whose members changed.
std::vector<bool> MoveJobs(const TypedProblem& x, TypedAssignment& a, const Prices& prices) {
  const size_t k = x.types.size();
  std::vector<Move> moves;
  for (uint32_t i = 0; i < x.size(); ++i) {
    const uint32_t from = a.types[i];
    const uint32_t n_from = a.replicas[i];
    const JobModel& here = x.Model(i, from);
    if (here.cooldown && n_from > 0) continue;  // a move would change it (level 3)
    const double stay = n_from > 0 ? x.problems[from].Utility(i, n_from) -
                                         prices.grow[from] * double(here.Gpus(n_from))
                                   : 0;
    Move best{i, from, 0, false, 0};
    for (uint32_t t = 0; t < k; ++t) {
      if (t == from) continue;
      const JobModel& m = x.Model(i, t);
      if (!m.CanRun()) continue;
      for (uint32_t n = m.lo; n <= m.hi; ++n) {
        const uint64_t gpus = m.Gpus(n);
        const uint64_t taken = gpus > prices.free[t] ? gpus - prices.free[t] : 0;
        if (taken > 0 && (n_from == 0 || taken > prices.above_min[t])) break;
        const double cost = taken > 0 ? prices.shrink[t] * double(taken) : 0;
        const double gain = x.problems[t].Utility(i, n) - cost - stay;
        const bool starts = n_from == 0;
        if (starts ? (!best.starts || gain > best.gain) : (!best.starts && gain > best.gain)) {
          best = {i, t, gpus, starts, gain};
        }
      }
    }
    if (best.type != from && (best.starts || best.gain > 1e-9)) moves.push_back(best);
  }
  std::sort(moves.begin(), moves.end(), [](const Move& l, const Move& r) {
    if (l.starts != r.starts) return l.starts;
    if (l.gain != r.gain) return l.gain > r.gain;
    return l.job < r.job;
  });
  std::vector<uint64_t> free = prices.free;
  std::vector<uint64_t> above_min = prices.above_min;
  std::vector<bool> changed(k, false);
  for (const Move& mv : moves) {
    uint64_t& f = free[mv.type];
    if (mv.gpus > f) {
      const uint64_t taken = mv.gpus - f;
      if (mv.starts || taken > above_min[mv.type]) continue;
      above_min[mv.type] -= taken;
      f = 0;
    } else {
      f -= mv.gpus;
    }
    changed[a.types[mv.job]] = true;
    changed[mv.type] = true;
    a.types[mv.job] = mv.type;
  }
  return changed;
}

// Each (job, type)'s options as the upper concave hull of (GPUs, U) with the
// origin (not running): max over n of U(n) - lambda GPUs(n), or 0, is
// attained at a hull vertex, found by binary search on the hull's slopes.
class Hulls {
 public:
  Hulls(const TypedProblem& x, const TypedAssignment& admitted) : types_(x.types.size()) {
    start_.reserve(x.size() * types_ + 1);
    for (size_t i = 0; i < x.size(); ++i) {
      for (uint32_t t = 0; t < types_; ++t) {
        start_.push_back(uint32_t(points_.size()));
        const JobModel& m = x.Model(i, t);
        if (admitted.replicas[i] == 0 || !m.CanRun()) continue;
        const size_t first = points_.size();
        for (uint32_t n = m.lo; n <= m.hi; ++n) {
          const Point p{double(m.Gpus(n)), x.problems[t].Utility(i, n)};
          // Pop vertices that fall on or below the chord to p.
          while (points_.size() - first >= 2) {
            const Point& a = points_[points_.size() - 2];
            const Point& b = points_.back();
            if ((b.y - a.y) * (p.x - a.x) > (p.y - a.y) * (b.x - a.x)) break;
            points_.pop_back();
          }
          points_.push_back(p);
        }
      }
    }
    start_.push_back(uint32_t(points_.size()));
  }

  // max of U - lambda_t GPUs over job i's running sizes on type t, and the
  // GPUs there; nullopt when it cannot run there or is not admitted.
  std::optional<std::pair<double, double>> Best(size_t i, uint32_t t, double lambda) const {
    const size_t lo = start_[i * types_ + t], hi = start_[i * types_ + t + 1];
    if (lo == hi) return std::nullopt;
    // The first vertex k whose next edge's slope is below lambda.
    size_t a = lo, b = hi - 1;
    while (a < b) {
      const size_t k = (a + b) / 2;
      const Point& p = points_[k];
      const Point& q = points_[k + 1];
      if (q.y - p.y > lambda * (q.x - p.x)) {
        a = k + 1;
      } else {
        b = k;
      }
    }
    return std::make_pair(points_[a].y - lambda * points_[a].x, points_[a].x);
  }

  struct Point {
    double x, y;
  };
  std::span<const Point> Vertices(size_t i, uint32_t t) const {
    const size_t lo = start_[i * types_ + t], hi = start_[i * types_ + t + 1];
    return {points_.data() + lo, hi - lo};
  }

 private:
  size_t types_;
  std::vector<uint32_t> start_;
  std::vector<Point> points_;
};

// The Lagrangian bound at prices lambda, and each type's demand there.
double Bound(const TypedProblem& x, const Hulls& hulls, const std::vector<double>& lambda,
             std::vector<double>& demand) {
  const size_t k = x.types.size();
  double total = 0;
  for (size_t t = 0; t < k; ++t) total += lambda[t] * double(x.capacity[t]);
  std::fill(demand.begin(), demand.end(), 0.0);
  for (size_t i = 0; i < x.size(); ++i) {
    std::optional<std::pair<double, double>> best;
    uint32_t type = 0;
    for (uint32_t t = 0; t < k; ++t) {
      const auto here = hulls.Best(i, t, lambda[t]);
      if (here && (!best || here->first > best->first)) best = here, type = t;
    }
    if (!best) continue;
    total += best->first;
    demand[type] += best->second;
  }
  return total;
}

// Each type's LP price for the jobs the plan runs there: their hull
// segments above their minimums, best value per GPU first, fill the GPUs the
// minimums leave; the price is the value per GPU of the first segment that
// does not fit (0 if all fit). It is what PlanCluster's bound uses per type.
std::vector<double> TypePrices(const TypedProblem& x, const Hulls& hulls,
                               const TypedAssignment& plan) {
  const size_t k = x.types.size();
  std::vector<double> out(k, 0);
  for (uint32_t t = 0; t < k; ++t) {
    struct Segment {
      double per_gpu, gpus;
    };
    std::vector<Segment> segments;
    double budget = double(x.capacity[t]);
    for (size_t i = 0; i < x.size(); ++i) {
      if (plan.replicas[i] == 0 || plan.types[i] != t) continue;
      const std::span<const Hulls::Point> v = hulls.Vertices(i, t);
      if (v.empty()) continue;
      budget -= v[0].x;
      for (size_t j = 1; j < v.size(); ++j) {
        const double dx = v[j].x - v[j - 1].x, dy = v[j].y - v[j - 1].y;
        if (dy > 0) segments.push_back({dy / dx, dx});
      }
    }
    std::sort(segments.begin(), segments.end(),
              [](const Segment& a, const Segment& b) { return a.per_gpu > b.per_gpu; });
    for (const Segment& seg : segments) {
      if (seg.gpus > budget) {
        out[t] = seg.per_gpu;
        break;
      }
      budget -= seg.gpus;
    }
  }
  return out;
}

// The least bound a few steps from the types' own LP prices find: a type
// asked for more GPUs than it has gets dearer, one asked for fewer cheaper
// (the bound is convex in the prices, and any prices give a valid bound).
double LeastBound(const TypedProblem& x, const TypedAssignment& plan) {
  constexpr int kSteps = 5;
  const size_t k = x.types.size();
  const Hulls hulls(x, plan);
  std::vector<double> lambda = TypePrices(x, hulls, plan), demand(k);
  std::vector<double> best_lambda = lambda;
  double least = kInf;
  double step = 0.25;
  for (int s = 0; s < kSteps; ++s) {
    const double b = Bound(x, hulls, lambda, demand);
    if (b < least) {
      least = b;
      best_lambda = lambda;
    } else {
      step /= 2;
      lambda = best_lambda;
    }
    for (size_t t = 0; t < k; ++t) {
      const double cap = std::max(1.0, double(x.capacity[t]));
      const double excess = std::clamp((demand[t] - cap) / cap, -1.0, 1.0);
      lambda[t] = std::max(0.0, lambda[t] * (1 + step * excess));
    }
  }
  return least;
}

}  // namespace

TypedScaleSolution SolveTypesAtScale(const TypedProblem& x, const ClusterPlannerOptions& options) {
  const size_t k = x.types.size();
  TypedAssignment a = Start(x);
  for (uint32_t t = 0; t < k; ++t) PlanType(x, a, t, options);
  TypedAssignment best = a;
  PlanObjective best_value = EvaluateTyped(x, a);
  Prices prices = PricesOf(x, a);
  for (int round = 0; round < kRounds; ++round) {
    const std::vector<bool> changed = MoveJobs(x, a, prices);
    if (std::none_of(changed.begin(), changed.end(), [](bool c) { return c; })) break;
    for (uint32_t t = 0; t < k; ++t) {
      if (changed[t]) PlanType(x, a, t, options);
    }
    const PlanObjective value = EvaluateTyped(x, a);
    if (CompareObjectives(value, best_value) <= 0) break;
    best = a;
    best_value = value;
    prices = PricesOf(x, a);
  }
  // Jobs left at 0 are reported where TypedProblem::WaitType says.
  for (size_t i = 0; i < x.size(); ++i) {
    if (best.replicas[i] == 0) best.types[i] = x.WaitType(i);
  }
  TypedScaleSolution out;
  out.upper_bound = LeastBound(x, best);
  out.assignment = std::move(best);
  return out;
}

}  // namespace rescale::planner_internal
