// Cluster planner (rescale/cluster_planner.h): the lexicographic objective,
// the three solvers that optimise it, and the per-job explanations.
//
// Why the objective decomposes. Every job's choice n_i contributes a vector
//   [kept non-preemptible, kept-running / started-waiting at its priority,
//    unchanged-in-cooldown, U_p(f_i s_i)]
// and the objective is the sum of these vectors compared lexicographically
// (level 3 counted as "cooldown jobs left unchanged", which orders plans the
// same way as "minus changed ones"). Lexicographic order is a total order
// compatible with addition (a >= b implies a + c >= b + c), so anything that
// is exact for a knapsack with additive scalar values is exact here too.
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
//
// Solver 3, scalable (everything else):
//  Levels 1-2. A digit counts one group of jobs; each job costs its minimum
//  gang (min x gpus_per_replica) to count. When groups are disjoint, the most
//  jobs of a group that fit in the GPUs left are its cheapest ones, and that
//  cheapest choice also leaves the most GPUs for every later digit; by an
//  exchange argument, digit-by-digit cheapest-first is exact. Running
//  non-preemptible jobs count at level 1 and at their priority's running
//  digit. When all of them fit (the usual case) they are all kept and the
//  remaining digits are disjoint again. When they do not, the cheapest way to
//  meet the targets fixed so far is a separable convex allocation: per
//  priority, h(a) = (a cheapest non-preemptible) + (r - a cheapest
//  preemptible running) is convex in a, and sum a >= K1 is met exactly by
//  taking the smallest marginals; each digit's maximum is found by binary
//  search on that oracle. Both are exact for levels 1-2.
//  Level 3. With the count of every subgroup fixed (kept non-preemptible,
//  kept preemptible and started waiting jobs per priority), the fewest GPUs
//  that leave t cooldown jobs unchanged is convex in t in each subgroup (a
//  min-cost flow value as a function of its demand) and the subgroups share
//  only the GPU slack, so taking the cheapest next step across subgroups is
//  exact. The steps are the shortest augmenting paths: pin a kept cooldown
//  job at its current size (extra = (current - min) x gpus), or pin a
//  dropped one while dropping the costliest unpinned job; for waiting jobs,
//  start the cheapest non-cooldown job instead of the costliest cooldown one.
//  Exact for level 3, except when capacity is below what the non-preemptible
//  jobs need: then their split across priorities is the cheapest one for
//  levels 1-2 and level 3 is optimal given that split.
//  Level 4. The admitted set is fixed (pinned jobs at their current size).
//  For a price lambda per GPU each job would pick n maximising
//  U(f s(n)) - lambda n g; the maximisers over all lambda are the vertices of
//  the job's upper concave envelope of (n, U), which handles non-concave
//  curves per job exactly. Sorting all envelope segments by value per GPU and
//  taking them while they fit is the Lagrangian solution swept over lambda;
//  a greedy fill then spends the leftover GPUs on the best value per GPU
//  among all sizes (envelope or not), and is compared with taking the single
//  largest step first. The Lagrangian dual
//    min_lambda [ sum_i max_n (U_i(n) - lambda n g_i) + lambda C ]
//  equals the LP relaxation over the envelopes, i.e. the same segment sweep
//  taken fractionally at the first segment that does not fit; it is an upper
//  bound on level 4 for the admitted set, and the plan reports it and the
//  relative gap.
//  What is not optimised at scale: which of several count-equivalent sets
//  is admitted. Levels 1-3 take the cheapest gangs (leaving the most GPUs for
//  level 4); equal gangs go to the job worth more at its minimum (one shrunk
//  from its current size pays the restart), then the tie rule. The bound is
//  relative to that set. On the benchmark clusters (bench/rescale_bench.cc,
//  1,000 and 10,000 jobs) the gap is below 1e-5; with a handful of jobs and
//  non-concave curves the greedy can be far from the bound, which is why
//  small instances go to the exact DP.
//
// Explanations are computed from the final sizes, the same way for all three
// solvers, so a plan reads the same whichever solver produced it.
#include "rescale/cluster_planner.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <optional>
#include <queue>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"

namespace rescale {
namespace {

constexpr double kMinRestartFactor = 0.01;
// The packed score and the seniority mask need at most this many jobs.
constexpr size_t kMaxExactJobs = 40;
// Utilities this close (relative) count as equal, so exact ties fall through
// to the stated tie rule rather than to rounding noise.
constexpr double kTieTolerance = 1e-12;

double FairUtility(double x, double p) {
  if (p == -1) return 1 - 1 / x;
  if (p == 0) return std::log(x);
  if (p == 1) return x - 1;
  return (std::pow(x, p) - 1) / p;
}

bool NearlyEqual(double a, double b) {
  return std::abs(a - b) <= kTieTolerance * std::max({1.0, std::abs(a), std::abs(b)});
}

// One job, sanitised: the sizes it may take and how its utility is computed.
struct JobModel {
  const PlannerJob* job = nullptr;
  uint32_t lo = 1;  // smallest running size
  uint32_t hi = 0;  // largest; hi < lo: cannot run
  uint32_t gpus_per_replica = 1;
  uint32_t current = 0;
  int level = 0;  // index of its priority, 0 = highest
  bool running = false;
  bool guarded = false;  // running and non-preemptible: counted at level 1
  bool cooldown = false;
  bool pinnable = false;   // running in cooldown at a size it may keep
  uint32_t seniority = 0;  // 0 = started (or registered) first
  double restart_factor = 1;
  double base_throughput = 1;
  bool flat = false;  // no usable curve: no size gains over min

  bool CanRun() const { return hi >= lo; }
  uint64_t Gpus(uint32_t n) const { return uint64_t{n} * gpus_per_replica; }
  uint64_t MinGpus() const { return Gpus(lo); }
  uint64_t PinnedGpus() const { return Gpus(current); }

  double Throughput(uint32_t n) const {
    if (flat) return base_throughput;
    const std::vector<double>& t = job->throughput;
    const size_t index = n > job->min_replicas ? n - job->min_replicas : 0;
    const double v = t[std::min(index, t.size() - 1)];
    return (v > 0 && std::isfinite(v)) ? v : base_throughput;
  }
};

struct Problem {
  std::span<const PlannerJob> jobs;
  std::vector<JobModel> models;
  std::vector<int32_t> priorities;  // distinct, highest first
  double fairness = -1;
  double horizon_seconds = 600;

  size_t size() const { return models.size(); }
  // Level-4 term of job i at n (0 when not running).
  double Utility(size_t i, uint32_t n) const {
    if (n == 0) return 0;
    const JobModel& m = models[i];
    const double f = (m.current > 0 && n != m.current) ? m.restart_factor : 1.0;
    return FairUtility(f * m.Throughput(n) / m.base_throughput, fairness);
  }
  // The same term as if resizing were free (for the RESTART_COST wording).
  double UtilityWithoutRestart(size_t i, uint32_t n) const {
    const JobModel& m = models[i];
    return FairUtility(m.Throughput(n) / m.base_throughput, fairness);
  }
};

Problem BuildProblem(std::span<const PlannerJob> jobs, const ClusterPlannerOptions& options) {
  Problem p;
  p.jobs = jobs;
  p.fairness = std::isfinite(options.fairness) ? options.fairness : -1;
  p.horizon_seconds = options.horizon_seconds;
  const size_t n = jobs.size();
  for (const PlannerJob& job : jobs) p.priorities.push_back(job.priority);
  std::sort(p.priorities.begin(), p.priorities.end(), std::greater<>());
  p.priorities.erase(std::unique(p.priorities.begin(), p.priorities.end()), p.priorities.end());

  std::vector<uint32_t> by_age(n);
  std::iota(by_age.begin(), by_age.end(), 0);
  std::sort(by_age.begin(), by_age.end(), [&](uint32_t a, uint32_t b) {
    if (jobs[a].started_at != jobs[b].started_at) return jobs[a].started_at < jobs[b].started_at;
    if (jobs[a].job_id != jobs[b].job_id) return jobs[a].job_id < jobs[b].job_id;
    return a < b;
  });

  p.models.resize(n);
  for (uint32_t rank = 0; rank < n; ++rank) p.models[by_age[rank]].seniority = rank;
  const double horizon = options.horizon_seconds;
  for (size_t i = 0; i < n; ++i) {
    const PlannerJob& job = jobs[i];
    JobModel& m = p.models[i];
    m.job = &job;
    m.lo = std::max<uint32_t>(job.min_replicas, 1);
    m.gpus_per_replica = std::max<uint32_t>(job.gpus_per_replica, 1);
    m.current = job.current_replicas;
    m.level = static_cast<int>(
        std::lower_bound(p.priorities.begin(), p.priorities.end(), job.priority, std::greater<>()) -
        p.priorities.begin());
    m.running = m.current > 0;
    m.guarded = m.running && !job.preemptible;
    m.cooldown = job.in_cooldown;
    const double cost = job.restart_cost_seconds >= 0 ? job.restart_cost_seconds : 0;
    // A horizon that is not positive leaves no time to recoup a restart.
    m.restart_factor =
        horizon > 0 ? std::clamp(1 - cost / horizon, kMinRestartFactor, 1.0) : kMinRestartFactor;
    const size_t base_index = m.lo - std::min(m.lo, job.min_replicas);
    if (base_index < job.throughput.size() && job.throughput[base_index] > 0 &&
        std::isfinite(job.throughput[base_index])) {
      m.base_throughput = job.throughput[base_index];
    } else {
      m.flat = true;
      m.base_throughput = 1;
    }
    // Sizes past the end of the curve gain nothing over its last point, so
    // they are only ever worth their current size (no restart): the search
    // stops there, which also bounds the work by the curves' length.
    const uint64_t predicted = m.flat ? 1 : job.throughput.size() - base_index;
    const uint64_t useful = std::max<uint64_t>(m.lo + predicted - 1, m.current);
    m.hi = static_cast<uint32_t>(std::min<uint64_t>(job.max_replicas, useful));
    m.pinnable = m.cooldown && m.running && m.current >= m.lo && m.current <= m.hi;
  }
  return p;
}

PlanObjective Evaluate(const Problem& p, std::span<const uint32_t> replicas) {
  PlanObjective out;
  out.levels.assign(2 + 2 * p.priorities.size(), 0);
  for (size_t i = 0; i < p.size(); ++i) {
    const JobModel& m = p.models[i];
    const uint32_t n = i < replicas.size() ? replicas[i] : 0;
    if (n > 0) {
      if (m.guarded) ++out.levels[0];
      ++out.levels[1 + 2 * m.level + (m.running ? 0 : 1)];
      out.utility += p.Utility(i, n);
    }
    if (m.cooldown && n != m.current) --out.levels.back();
  }
  return out;
}

// ---- exact solvers ----------------------------------------------------------

// Weights of the mixed-radix packing of levels 1-3 (see the file comment).
struct ScoreWeights {
  int64_t guarded = 0;
  std::vector<int64_t> running, waiting;
  int64_t unchanged = 1;
};

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
  if (m.cooldown && n == m.current) score += w.unchanged;
  return score;
}

// A partial plan's value in the DP: levels 1-3 packed, then level 4, then
// the tie rule (earlier-started jobs running), then fewer GPUs.
struct DpValue {
  int64_t score = 0;
  double utility = 0;
  uint64_t seniority_mask = 0;
  uint64_t gpus = 0;
};

bool Better(const DpValue& a, const DpValue& b) {
  if (a.score != b.score) return a.score > b.score;
  if (!NearlyEqual(a.utility, b.utility)) return a.utility > b.utility;
  if (a.seniority_mask != b.seniority_mask) return a.seniority_mask > b.seniority_mask;
  return a.gpus < b.gpus;
}

uint64_t SeniorityBit(const JobModel& m) {
  return m.seniority < 64 ? uint64_t{1} << (63 - m.seniority) : 0;
}

// Nothing competes for GPUs: every job takes its own best option.
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

// Multiple-choice knapsack over capacity cells of `unit` GPUs; dp[c] is the
// best value of the jobs so far within c cells.
std::vector<uint32_t> SolveExactDp(const Problem& p, const ScoreWeights& weights, uint64_t cells,
                                   uint64_t unit) {
  struct Option {
    uint32_t replicas;
    uint64_t cells;
    DpValue value;
  };
  const size_t n = p.size();
  const size_t width = cells + 1;
  std::vector<DpValue> best(width), next(width);
  for (DpValue& v : best) v = DpValue{};
  std::vector<uint32_t> choice(n * width, 0);
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
    uint32_t* row = &choice[j * width];
    for (size_t c = 0; c < width; ++c) {
      DpValue top = best[c];
      top.score += off.score;
      uint32_t top_replicas = 0;
      for (const Option& o : options) {
        if (o.cells > c) break;  // options are in increasing size
        const DpValue& base = best[c - o.cells];
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
  std::vector<uint32_t> replicas(n, 0);
  uint64_t c = cells;
  for (size_t j = n; j-- > 0;) {
    const uint32_t r = choice[j * width + c];
    replicas[j] = r;
    c -= p.models[j].Gpus(r) / unit;
  }
  return replicas;
}

// ---- scalable solver --------------------------------------------------------

enum JobState : uint8_t { kOff = 0, kOn = 1, kPinned = 2 };

// Jobs of one priority that can run, each list cheapest gang first (ties:
// earliest started first), with prefix sums of their minimum gangs.
struct LevelGroups {
  std::vector<uint32_t> guarded, preemptible, waiting;
  std::vector<uint64_t> guarded_prefix, preemptible_prefix, waiting_prefix;
};

// Largest k with prefix[k] <= budget.
size_t MostThatFit(const std::vector<uint64_t>& prefix, uint64_t budget) {
  return static_cast<size_t>(std::upper_bound(prefix.begin(), prefix.end(), budget) -
                             prefix.begin()) -
         1;
}

// Heap entries: (key, seniority, job), compared in that order.
struct HeapEntry {
  int64_t key;
  uint32_t seniority;
  uint32_t job;
  friend bool operator<(const HeapEntry& a, const HeapEntry& b) {
    if (a.key != b.key) return a.key < b.key;
    if (a.seniority != b.seniority) return a.seniority < b.seniority;
    return a.job < b.job;
  }
  friend bool operator>(const HeapEntry& a, const HeapEntry& b) { return b < a; }
};
using MinHeap = std::priority_queue<HeapEntry, std::vector<HeapEntry>, std::greater<>>;
using MaxHeap = std::priority_queue<HeapEntry>;

template <typename Heap>
void DropStale(Heap& heap, const std::vector<uint8_t>& state, uint8_t wanted) {
  while (!heap.empty() && state[heap.top().job] != wanted) heap.pop();
}

// A level-3 step: `extra` more GPUs leave one more cooldown job unchanged.
struct Level3Step {
  uint64_t extra = 0;
  uint32_t start = 0;  // job that becomes pinned (running) or starts (waiting)
  int64_t stop = -1;   // job that stops, or -1
};

// Running jobs of one subgroup, `keep` of which stay running; steps pin one
// more cooldown job at its current size.
class RunningSubgroup {
 public:
  RunningSubgroup(const Problem& p, const std::vector<uint32_t>& items, size_t keep,
                  std::vector<uint8_t>& state)
      : p_(p), state_(state) {
    for (size_t k = 0; k < items.size(); ++k) {
      const uint32_t j = items[k];
      const JobModel& m = p.models[j];
      state_[j] = k < keep ? kOn : kOff;
      if (k < keep) drop_.push({static_cast<int64_t>(m.MinGpus()), m.seniority, j});
      if (!m.pinnable) continue;
      if (k < keep) {
        pin_kept_.push({static_cast<int64_t>(m.PinnedGpus() - m.MinGpus()), m.seniority, j});
      } else {
        pin_dropped_.push({static_cast<int64_t>(m.PinnedGpus()), m.seniority, j});
      }
    }
  }

  std::optional<Level3Step> Next() {
    DropStale(pin_kept_, state_, kOn);
    DropStale(pin_dropped_, state_, kOff);
    DropStale(drop_, state_, kOn);
    std::optional<Level3Step> step;
    if (!pin_kept_.empty())
      step = Level3Step{uint64_t(pin_kept_.top().key), pin_kept_.top().job, -1};
    if (!pin_dropped_.empty() && !drop_.empty()) {
      const uint64_t extra =
          uint64_t(std::max<int64_t>(0, pin_dropped_.top().key - drop_.top().key));
      if (!step || extra < step->extra) {
        step = Level3Step{extra, pin_dropped_.top().job, int64_t{drop_.top().job}};
      }
    }
    return step;
  }

  void Apply(const Level3Step& step) {
    state_[step.start] = kPinned;
    if (step.stop < 0) return;
    const uint32_t j = static_cast<uint32_t>(step.stop);
    state_[j] = kOff;
    const JobModel& m = p_.models[j];
    if (m.pinnable) pin_dropped_.push({static_cast<int64_t>(m.PinnedGpus()), m.seniority, j});
  }

 private:
  const Problem& p_;
  std::vector<uint8_t>& state_;
  MinHeap pin_kept_;     // running, pinnable: extra GPUs to pin
  MinHeap pin_dropped_;  // dropped, pinnable: GPUs to run it pinned
  MaxHeap drop_;         // running unpinned: GPUs freed by dropping it (newest first on ties)
};

// Waiting jobs of one priority, `start` of which start; steps start a
// non-cooldown job instead of a cooldown one.
class WaitingSubgroup {
 public:
  WaitingSubgroup(const Problem& p, const std::vector<uint32_t>& items, size_t start,
                  std::vector<uint8_t>& state)
      : state_(state) {
    for (size_t k = 0; k < items.size(); ++k) {
      const uint32_t j = items[k];
      const JobModel& m = p.models[j];
      state_[j] = k < start ? kOn : kOff;
      const HeapEntry e{static_cast<int64_t>(m.MinGpus()), m.seniority, j};
      if (k < start && m.cooldown) cooldown_started_.push(e);
      if (k >= start && !m.cooldown) plain_waiting_.push(e);
    }
  }

  std::optional<Level3Step> Next() {
    DropStale(cooldown_started_, state_, kOn);
    DropStale(plain_waiting_, state_, kOff);
    if (cooldown_started_.empty() || plain_waiting_.empty()) return std::nullopt;
    const int64_t extra = plain_waiting_.top().key - cooldown_started_.top().key;
    return Level3Step{uint64_t(std::max<int64_t>(0, extra)), plain_waiting_.top().job,
                      int64_t{cooldown_started_.top().job}};
  }

  void Apply(const Level3Step& step) {
    state_[step.start] = kOn;
    state_[static_cast<uint32_t>(step.stop)] = kOff;
  }

 private:
  std::vector<uint8_t>& state_;
  MaxHeap cooldown_started_;  // costliest (newest on ties) first
  MinHeap plain_waiting_;
};

class ScaleSolver {
 public:
  ScaleSolver(const Problem& p, uint64_t capacity) : p_(p), capacity_(capacity) {}

  std::vector<uint32_t> Solve() {
    BuildGroups();
    ChooseCounts();
    AdmitAndPin();
    return Allocate();
  }
  double upper_bound() const { return upper_bound_; }

 private:
  void BuildGroups() {
    levels_.resize(p_.priorities.size());
    for (uint32_t j = 0; j < p_.size(); ++j) {
      const JobModel& m = p_.models[j];
      if (!m.CanRun() || m.MinGpus() > capacity_) continue;  // can never run
      LevelGroups& g = levels_[m.level];
      (m.guarded ? g.guarded : m.running ? g.preemptible : g.waiting).push_back(j);
    }
    // Equal gangs are interchangeable for levels 1-3; prefer the one worth
    // more at its minimum (a running job shrunk to it pays the restart),
    // then the tie rule.
    std::vector<double> at_min(p_.size(), 0);
    for (size_t j = 0; j < p_.size(); ++j) {
      if (p_.models[j].CanRun()) at_min[j] = p_.Utility(j, p_.models[j].lo);
    }
    auto cheapest_first = [&](uint32_t a, uint32_t b) {
      const JobModel& ma = p_.models[a];
      const JobModel& mb = p_.models[b];
      if (ma.MinGpus() != mb.MinGpus()) return ma.MinGpus() < mb.MinGpus();
      if (!NearlyEqual(at_min[a], at_min[b])) return at_min[a] > at_min[b];
      return ma.seniority < mb.seniority;
    };
    auto prepare = [&](std::vector<uint32_t>& items, std::vector<uint64_t>& prefix) {
      std::sort(items.begin(), items.end(), cheapest_first);
      prefix.assign(1, 0);
      for (uint32_t j : items) prefix.push_back(prefix.back() + p_.models[j].MinGpus());
    };
    for (LevelGroups& g : levels_) {
      prepare(g.guarded, g.guarded_prefix);
      prepare(g.preemptible, g.preemptible_prefix);
      prepare(g.waiting, g.waiting_prefix);
    }
  }

  // Levels 1-2: how many jobs of each subgroup run.
  void ChooseCounts() {
    const size_t levels = levels_.size();
    keep_guarded_.assign(levels, 0);
    keep_preemptible_.assign(levels, 0);
    start_waiting_.assign(levels, 0);
    std::vector<uint64_t> guarded_costs;
    for (const LevelGroups& g : levels_) {
      for (uint32_t j : g.guarded) guarded_costs.push_back(p_.models[j].MinGpus());
    }
    std::sort(guarded_costs.begin(), guarded_costs.end());
    uint64_t guarded_total = 0;
    size_t guarded_target = 0;
    for (uint64_t c : guarded_costs) {
      if (guarded_total + c > capacity_) break;
      guarded_total += c;
      ++guarded_target;
    }

    if (guarded_target == guarded_costs.size()) {
      // Every non-preemptible job is kept: the digits are disjoint.
      uint64_t left = capacity_ - guarded_total;
      for (size_t l = 0; l < levels; ++l) {
        const LevelGroups& g = levels_[l];
        keep_guarded_[l] = g.guarded.size();
        keep_preemptible_[l] = MostThatFit(g.preemptible_prefix, left);
        left -= g.preemptible_prefix[keep_preemptible_[l]];
        start_waiting_[l] = MostThatFit(g.waiting_prefix, left);
        left -= g.waiting_prefix[start_waiting_[l]];
      }
      return;
    }

    // Capacity is below what the non-preemptible jobs need: maximise each
    // digit in turn against the exact min-GPU oracle.
    std::vector<size_t> running(levels, 0), waiting(levels, 0), split(levels, 0);
    auto fits = [&] {
      std::optional<uint64_t> need = MinGpusFor(guarded_target, running, waiting, &split);
      return need && *need <= capacity_;
    };
    auto maximise = [&](size_t& target, size_t most) {
      target = most;
      if (fits()) return;
      size_t lo = 0, hi = most;  // fits(lo), !fits(hi)
      while (hi - lo > 1) {
        target = lo + (hi - lo) / 2;
        (fits() ? lo : hi) = target;
      }
      target = lo;
    };
    for (size_t l = 0; l < levels; ++l) {
      maximise(running[l], levels_[l].guarded.size() + levels_[l].preemptible.size());
      maximise(waiting[l], levels_[l].waiting.size());
    }
    MinGpusFor(guarded_target, running, waiting, &split);
    for (size_t l = 0; l < levels; ++l) {
      keep_guarded_[l] = split[l];
      keep_preemptible_[l] = running[l] > split[l] ? running[l] - split[l] : 0;
      start_waiting_[l] = waiting[l];
    }
  }

  // The fewest GPUs (minimum gangs) that keep `guarded_target` non-preemptible
  // jobs and, per priority, running[l] running and waiting[l] waiting jobs;
  // nullopt when impossible. split[l] = non-preemptible jobs kept at l.
  std::optional<uint64_t> MinGpusFor(size_t guarded_target, const std::vector<size_t>& running,
                                     const std::vector<size_t>& waiting,
                                     std::vector<size_t>* split) const {
    uint64_t total = 0;
    size_t taken = 0;
    struct Marginal {
      int64_t cost;
      size_t level;
      bool operator>(const Marginal& o) const {
        return cost != o.cost ? cost > o.cost : level > o.level;
      }
    };
    std::priority_queue<Marginal, std::vector<Marginal>, std::greater<>> heap;
    // h_l(a + 1) - h_l(a): one more non-preemptible job, one fewer preemptible.
    auto marginal = [&](size_t l, size_t a) {
      const LevelGroups& g = levels_[l];
      int64_t cost = static_cast<int64_t>(g.guarded_prefix[a + 1] - g.guarded_prefix[a]);
      if (a < running[l]) {
        const size_t k = running[l] - a;  // preemptible jobs needed before the step
        cost -= static_cast<int64_t>(g.preemptible_prefix[k] - g.preemptible_prefix[k - 1]);
      }
      return cost;
    };
    for (size_t l = 0; l < levels_.size(); ++l) {
      const LevelGroups& g = levels_[l];
      if (waiting[l] > g.waiting.size()) return std::nullopt;
      total += g.waiting_prefix[waiting[l]];
      const size_t guarded = g.guarded.size(), preemptible = g.preemptible.size();
      size_t a = running[l] > preemptible ? running[l] - preemptible : 0;
      if (a > guarded) return std::nullopt;
      while (a < guarded && marginal(l, a) < 0) ++a;
      (*split)[l] = a;
      taken += a;
      total += g.guarded_prefix[a] + g.preemptible_prefix[running[l] > a ? running[l] - a : 0];
      if (a < guarded) heap.push({marginal(l, a), l});
    }
    while (taken < guarded_target) {
      if (heap.empty()) return std::nullopt;
      const Marginal top = heap.top();
      heap.pop();
      total += static_cast<uint64_t>(top.cost);
      const size_t a = ++(*split)[top.level];
      ++taken;
      if (a < levels_[top.level].guarded.size()) heap.push({marginal(top.level, a), top.level});
    }
    return total;
  }

  // Level 3: select the running set and pin cooldown jobs, cheapest steps first.
  void AdmitAndPin() {
    state_.assign(p_.size(), kOff);
    std::vector<RunningSubgroup> running;
    std::vector<WaitingSubgroup> waiting;
    running.reserve(2 * levels_.size());
    waiting.reserve(levels_.size());
    for (size_t l = 0; l < levels_.size(); ++l) {
      running.emplace_back(p_, levels_[l].guarded, keep_guarded_[l], state_);
      running.emplace_back(p_, levels_[l].preemptible, keep_preemptible_[l], state_);
      waiting.emplace_back(p_, levels_[l].waiting, start_waiting_[l], state_);
    }
    uint64_t used = 0;
    for (size_t j = 0; j < p_.size(); ++j) {
      if (state_[j] != kOff) used += p_.models[j].MinGpus();
    }
    uint64_t slack = capacity_ - used;
    struct Pending {
      uint64_t extra;
      size_t group;  // running subgroups first, then waiting ones
      Level3Step step;
      bool operator>(const Pending& o) const {
        return extra != o.extra ? extra > o.extra : group > o.group;
      }
    };
    std::priority_queue<Pending, std::vector<Pending>, std::greater<>> heap;
    auto offer = [&](size_t group) {
      std::optional<Level3Step> step =
          group < running.size() ? running[group].Next() : waiting[group - running.size()].Next();
      if (step) heap.push({step->extra, group, *step});
    };
    for (size_t group = 0; group < running.size() + waiting.size(); ++group) offer(group);
    while (!heap.empty() && heap.top().extra <= slack) {
      const Pending top = heap.top();
      heap.pop();
      if (top.group < running.size()) {
        running[top.group].Apply(top.step);
      } else {
        waiting[top.group - running.size()].Apply(top.step);
      }
      slack -= top.extra;
      offer(top.group);
    }
    slack_ = slack;
  }

  // Level 4: sizes of the admitted, unpinned jobs.
  std::vector<uint32_t> Allocate() {
    const size_t n = p_.size();
    std::vector<uint32_t> replicas(n, 0);
    // Utility of every size of every admitted job, flat.
    std::vector<size_t> offset(n + 1, 0);
    for (size_t j = 0; j < n; ++j) {
      const JobModel& m = p_.models[j];
      offset[j + 1] = offset[j] + (state_[j] == kOn ? m.hi - m.lo + 1 : 0);
    }
    std::vector<double> utility(offset[n]);
    double base = 0;
    for (size_t j = 0; j < n; ++j) {
      const JobModel& m = p_.models[j];
      if (state_[j] == kPinned) {
        replicas[j] = m.current;
        base += p_.Utility(j, m.current);
      } else if (state_[j] == kOn) {
        replicas[j] = m.lo;
        for (uint32_t r = m.lo; r <= m.hi; ++r) utility[offset[j] + r - m.lo] = p_.Utility(j, r);
        base += utility[offset[j]];
      }
    }
    auto u = [&](size_t j, uint32_t r) { return utility[offset[j] + r - p_.models[j].lo]; };

    // Upper concave envelope of each job's (n, U(n)); its rising segments.
    struct Segment {
      double slope;  // utility per GPU
      double gain;
      uint64_t gpus;
      uint32_t job;
      uint32_t from, to;
    };
    std::vector<Segment> segments;
    std::vector<uint32_t> hull;
    for (uint32_t j = 0; j < n; ++j) {
      if (state_[j] != kOn) continue;
      const JobModel& m = p_.models[j];
      hull.clear();
      for (uint32_t r = m.lo; r <= m.hi; ++r) {
        while (hull.size() >= 2) {
          const uint32_t a = hull[hull.size() - 2], b = hull.back();
          // Drop b when it lies on or below the chord from a to r.
          const double cross =
              double(b - a) * (u(j, r) - u(j, a)) - (u(j, b) - u(j, a)) * double(r - a);
          if (cross < 0) break;
          hull.pop_back();
        }
        hull.push_back(r);
      }
      for (size_t k = 1; k < hull.size(); ++k) {
        const double gain = u(j, hull[k]) - u(j, hull[k - 1]);
        if (!(gain > 0)) break;  // envelope slopes only fall from here
        const uint64_t gpus = m.Gpus(hull[k] - hull[k - 1]);
        segments.push_back({gain / double(gpus), gain, gpus, j, hull[k - 1], hull[k]});
      }
    }
    std::sort(segments.begin(), segments.end(), [](const Segment& a, const Segment& b) {
      if (a.slope != b.slope) return a.slope > b.slope;
      if (a.job != b.job) return a.job < b.job;
      return a.from < b.from;
    });

    // The Lagrangian sweep (integral, skipping what does not fit) and the LP
    // bound (fractional at the first segment that does not fit).
    uint64_t left = slack_;
    double lp_gain = 0;
    uint64_t lp_left = slack_;
    bool lp_done = false;
    std::vector<uint8_t> blocked(n, 0);
    for (const Segment& s : segments) {
      if (!lp_done) {
        if (s.gpus <= lp_left) {
          lp_gain += s.gain;
          lp_left -= s.gpus;
        } else {
          lp_gain += s.gain * double(lp_left) / double(s.gpus);
          lp_done = true;
        }
      }
      if (blocked[s.job] || replicas[s.job] != s.from) continue;
      if (s.gpus <= left) {
        replicas[s.job] = s.to;
        left -= s.gpus;
      } else {
        blocked[s.job] = 1;
      }
    }
    upper_bound_ = base + lp_gain;

    // Greedy fill: the best value per GPU among all sizes that still fit.
    // Returns the utility it adds.
    struct Candidate {
      double ratio;
      uint32_t job;
      uint32_t to;
      uint32_t version;
      bool operator<(const Candidate& o) const {
        if (ratio != o.ratio) return ratio < o.ratio;
        return job > o.job;
      }
    };
    std::vector<uint32_t> version(n, 0);
    auto fill = [&](std::vector<uint32_t>& sizes, uint64_t& left) {
      double added = 0;
      std::priority_queue<Candidate> heap;
      auto offer = [&](uint32_t j) {
        const JobModel& m = p_.models[j];
        const uint32_t from = sizes[j];
        const uint64_t affordable = left / m.gpus_per_replica;
        const uint32_t top = static_cast<uint32_t>(std::min<uint64_t>(m.hi, from + affordable));
        double best_ratio = 0;
        uint32_t best_to = 0;
        for (uint32_t r = from + 1; r <= top; ++r) {
          const double gain = u(j, r) - u(j, from);
          if (gain <= 0 || NearlyEqual(u(j, r), u(j, from))) continue;
          const double ratio = gain / double(m.Gpus(r - from));
          if (ratio > best_ratio) {
            best_ratio = ratio;
            best_to = r;
          }
        }
        if (best_to != 0) heap.push({best_ratio, j, best_to, ++version[j]});
      };
      for (uint32_t j = 0; j < n; ++j) {
        if (state_[j] == kOn && sizes[j] < p_.models[j].hi) offer(j);
      }
      while (!heap.empty()) {
        const Candidate c = heap.top();
        heap.pop();
        if (c.version != version[c.job]) continue;
        const uint64_t gpus = p_.models[c.job].Gpus(c.to - sizes[c.job]);
        if (gpus <= left) {
          added += u(c.job, c.to) - u(c.job, sizes[c.job]);
          sizes[c.job] = c.to;
          left -= gpus;
        }
        ++version[c.job];
        offer(c.job);
      }
      return added;
    };

    // By value per GPU alone the fill can spend the last GPUs on small steps
    // and miss one large one; so also try the largest single step first and
    // keep the better of the two.
    const std::vector<uint32_t> swept = replicas;
    const uint64_t swept_left = left;
    const double greedy = fill(replicas, left);
    uint32_t step_job = 0, step_to = 0;
    double step_gain = 0;
    for (uint32_t j = 0; j < n; ++j) {
      if (state_[j] != kOn) continue;
      const JobModel& m = p_.models[j];
      const uint64_t affordable = swept_left / m.gpus_per_replica;
      const uint32_t top = static_cast<uint32_t>(std::min<uint64_t>(m.hi, swept[j] + affordable));
      for (uint32_t r = swept[j] + 1; r <= top; ++r) {
        const double gain = u(j, r) - u(j, swept[j]);
        if (gain > step_gain) {
          step_gain = gain;
          step_job = j;
          step_to = r;
        }
      }
    }
    if (step_to != 0 && step_gain > greedy && !NearlyEqual(step_gain, greedy)) {
      std::vector<uint32_t> alternative = swept;
      uint64_t alternative_left = swept_left - p_.models[step_job].Gpus(step_to - swept[step_job]);
      alternative[step_job] = step_to;
      const double total = step_gain + fill(alternative, alternative_left);
      if (total > greedy && !NearlyEqual(total, greedy)) replicas = std::move(alternative);
    }
    return replicas;
  }

  const Problem& p_;
  const uint64_t capacity_;
  std::vector<LevelGroups> levels_;
  std::vector<size_t> keep_guarded_, keep_preemptible_, start_waiting_;
  std::vector<uint8_t> state_;
  uint64_t slack_ = 0;
  double upper_bound_ = 0;
};

// ---- explanations -----------------------------------------------------------

// "1 GPU", "4 GPUs".
std::string Count(uint64_t n, const char* noun) {
  return absl::StrFormat("%d %s%s", n, noun, n == 1 ? "" : "s");
}

std::string SizePhrase(const JobModel& m, uint32_t n) {
  const std::string size = absl::StrFormat("%s (%s)", Count(n, "replica"), Count(m.Gpus(n), "GPU"));
  if (m.current == 0) {
    return absl::StrFormat("%s at %s", m.job->suspended ? "resumes" : "starts", size);
  }
  if (n == m.current) return "stays at " + size;
  return absl::StrFormat("%s from %d to %s", n > m.current ? "grows" : "shrinks", m.current, size);
}

double PercentFaster(const JobModel& m, uint32_t from, uint32_t to) {
  return 100.0 * (m.Throughput(to) / m.Throughput(from) - 1);
}

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
    if (r < p.jobs[i].max_replicas) d.value_one_more = p.Utility(i, r + 1) - p.Utility(i, r);
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
      holdings.push_back({p.jobs[i].priority, p.models[i].Gpus(replicas[i]), p.models[i].guarded});
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
    const PlannerJob& job = p.jobs[i];
    PlannedJob& d = out[i];
    const uint32_t r = replicas[i];
    d.replicas = r;
    if (r == 0) {
      queue.push_back(i);
      const uint64_t need = m.MinGpus();
      if (!m.CanRun()) {
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
        std::string text = absl::StrFormat(
            "%sneeds %s; %d free; %d held by jobs of higher or equal priority",
            m.running ? "suspended: " : "", Count(need, "GPU"), bounded ? free_gpus : 0, higher);
        if (lower > 0) absl::StrAppendFormat(&text, "; %d by lower-priority jobs", lower);
        if (guarded_lower > 0) {
          absl::StrAppendFormat(&text, "; %d by non-preemptible jobs of lower priority",
                                guarded_lower);
        }
        d.reason = std::move(text);
      }
      continue;
    }

    const std::string size = SizePhrase(m, r);
    const uint64_t g = m.gpus_per_replica;
    if (m.cooldown && r == m.current) {
      d.binding = BindingConstraint::kCooldown;
      d.reason = absl::StrFormat("%s: it is in cooldown, so its size is left alone", size);
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
        if (other > r && bounded && m.Gpus(other - r) > free_gpus) continue;
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
        d.reason = absl::StrFormat(
            "%s: resizing to %s would change throughput by %+.1f%%, not worth a "
            "%.0f s restart over the %.0f s horizon",
            size, Count(tempting, "replica"), PercentFaster(m, r, tempting),
            std::max(0.0, job.restart_cost_seconds), p.horizon_seconds);
        continue;
      }
    }
    if (r >= job.max_replicas) {
      d.binding = BindingConstraint::kMaxReplicas;
      d.reason = absl::StrFormat("%s, its max_replicas", size);
      continue;
    }
    const double gain = d.value_one_more;
    const double faster = PercentFaster(m, r, r + 1);
    if (gain > 0 && !NearlyEqual(p.Utility(i, r + 1), p.Utility(i, r)) && free_gpus < g) {
      const double elsewhere = cheapest_job[0] == i ? cheapest[1] : cheapest[0];
      if (std::isfinite(elsewhere) && gain / double(g) <= elsewhere * (1 + 1e-9)) {
        d.binding = BindingConstraint::kEfficiency;
        d.reason = absl::StrFormat(
            "%s: one more replica (%+.1f%% throughput) is worth less than its %s elsewhere", size,
            faster, Count(g, "GPU"));
      } else {
        d.binding = r == m.lo ? BindingConstraint::kMinReplicas : BindingConstraint::kCapacity;
        d.reason = absl::StrFormat(
            "%s%s: one more replica would add %.1f%% throughput but only %d of its %s are free",
            size, r == m.lo ? ", its min_replicas" : "", faster, free_gpus, Count(g, "GPU"));
      }
      continue;
    }
    d.binding = BindingConstraint::kEfficiency;
    if (faster <= 0) {
      d.reason = absl::StrFormat("%s: one more replica would not make it faster", size);
    } else {
      d.reason = absl::StrFormat(
          "%s: one more replica would add only %.1f%% throughput, worth less than its %s", size,
          faster, Count(g, "GPU"));
    }
  }

  // Queue: the objective's order.
  std::sort(queue.begin(), queue.end(), [&](size_t a, size_t b) {
    const PlannerJob& ja = p.jobs[a];
    const PlannerJob& jb = p.jobs[b];
    if (ja.priority != jb.priority) return ja.priority > jb.priority;
    if (p.models[a].running != p.models[b].running) return p.models[a].running;
    if (ja.started_at != jb.started_at) return ja.started_at < jb.started_at;
    if (ja.job_id != jb.job_id) return ja.job_id < jb.job_id;
    return a < b;
  });
  for (size_t k = 0; k < queue.size(); ++k) out[queue[k]].queue_position = uint32_t(k + 1);
  return out;
}

}  // namespace

ClusterPlan PlanCluster(std::span<const PlannerJob> jobs, std::optional<uint64_t> capacity,
                        const ClusterPlannerOptions& options) {
  const Problem p = BuildProblem(jobs, options);
  uint64_t everything_at_max = 0;
  uint64_t unit = 0;
  for (const JobModel& m : p.models) {
    if (!m.CanRun()) continue;
    everything_at_max += m.Gpus(m.hi);
    unit = std::gcd(unit, uint64_t{m.gpus_per_replica});
  }

  ClusterPlan plan;
  std::vector<uint32_t> replicas;
  double bound = 0;
  bool have_bound = false;
  if (!capacity || *capacity >= everything_at_max) {
    replicas = SolveSeparable(p);
    plan.exact = true;
  } else {
    const uint64_t cells = *capacity / std::max<uint64_t>(unit, 1);
    uint64_t options_count = 0;
    for (const JobModel& m : p.models) options_count += 1 + (m.CanRun() ? m.hi - m.lo + 1 : 0);
    const double work = double(options_count) * double(cells + 1);
    const bool few_jobs =
        p.size() <= std::min<size_t>(kMaxExactJobs, size_t(std::max(0, options.exact_job_limit)));
    const bool small =
        p.size() <= kMaxExactJobs && ((few_jobs && work <= double(options.exact_work_limit)) ||
                                      work <= double(options.exact_work_limit) / 16);
    std::optional<ScoreWeights> weights;
    if (small) weights = MakeScoreWeights(p);
    if (weights) {
      replicas = SolveExactDp(p, *weights, cells, std::max<uint64_t>(unit, 1));
      plan.exact = true;
    } else {
      ScaleSolver solver(p, *capacity);
      replicas = solver.Solve();
      bound = solver.upper_bound();
      have_bound = true;
    }
  }

  for (size_t i = 0; i < p.size(); ++i) plan.allocated_gpus += p.models[i].Gpus(replicas[i]);
  plan.utility = Evaluate(p, replicas).utility;
  plan.upper_bound = have_bound ? std::max(bound, plan.utility) : plan.utility;
  const double diff = plan.upper_bound - plan.utility;
  plan.gap = diff > 0 ? diff / std::max(std::abs(plan.upper_bound), 1e-9) : 0;
  plan.jobs = Explain(p, replicas, capacity, plan.allocated_gpus);
  return plan;
}

PlanObjective EvaluatePlan(std::span<const PlannerJob> jobs, std::span<const uint32_t> replicas,
                           const ClusterPlannerOptions& options) {
  return Evaluate(BuildProblem(jobs, options), replicas);
}

int CompareObjectives(const PlanObjective& a, const PlanObjective& b, double relative_tolerance) {
  if (a.levels != b.levels) return a.levels < b.levels ? -1 : 1;
  const double scale = std::max({1.0, std::abs(a.utility), std::abs(b.utility)});
  if (std::abs(a.utility - b.utility) <= relative_tolerance * scale) return 0;
  return a.utility < b.utility ? -1 : 1;
}

}  // namespace rescale
