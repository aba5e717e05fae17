// Cluster planner, solver 3 (see rescale/cluster_planner.h for the objective
// and cluster_planner.cc for why it decomposes per job).
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
#include <algorithm>
#include <bit>
#include <cstdint>
#include <functional>
#include <optional>
#include <queue>
#include <utility>
#include <vector>

#include "cluster_planner_internal.h"

namespace rescale::planner_internal {
namespace {

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

    // Upper concave envelope of each job's (n, U(n)); its rising segments,
    // each job's together and in order of size.
    //
    // The Lagrangian sweep goes through all segments by slope, highest
    // first (ties: the order they were made in), taking each one whose job
    // has reached its start and that fits in the GPUs left, and stopping a
    // job at its first segment that does not fit; the LP bound takes
    // segments in the same order, the first that does not fit fractionally.
    // Sorting every segment (tens of thousands at 10,000 jobs) is what that
    // costs most, and most of it is not needed: the LP's segments are a
    // prefix of that order, found by selection in linear time, and every
    // one of them fits, so each job's segments in it are taken whole. Only
    // the segments after it need their order, and only one per job can be
    // next: a heap of each job's next segment gives them in that order.
    //
    // A segment's key orders it: a positive double's bits order like the
    // double, so their complement orders slopes descending as integers, and
    // the index breaks ties (the order of making). Rounding can leave a
    // segment's slope above its predecessor's; the sweep meets it first,
    // while its job has not reached its start, and never takes it nor any
    // after it: those count for the bound only (`bound_only`).
    struct Segment {
      double gain;
      uint64_t gpus;
      uint64_t key;  // ~bits(gain / gpus)
      uint32_t job;
      uint32_t to;
      bool bound_only;
    };
    std::vector<Segment> segments;
    segments.reserve(offset[n]);                    // at most one per size
    std::vector<uint32_t> first_segment(n + 1, 0);  // job j's: [first[j], first[j + 1])
    std::vector<uint32_t> hull;
    for (uint32_t j = 0; j < n; ++j) {
      first_segment[j] = static_cast<uint32_t>(segments.size());
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
      bool bound_only = false;
      for (size_t k = 1; k < hull.size(); ++k) {
        const double gain = u(j, hull[k]) - u(j, hull[k - 1]);
        if (!(gain > 0)) break;  // envelope slopes only fall from here
        const uint64_t gpus = m.Gpus(hull[k] - hull[k - 1]);
        const uint64_t key = ~std::bit_cast<uint64_t>(gain / double(gpus));
        if (k > 1 && key < segments.back().key) bound_only = true;
        segments.push_back({gain, gpus, key, j, hull[k], bound_only});
      }
    }
    first_segment[n] = static_cast<uint32_t>(segments.size());

    // The LP's prefix: the longest run of the sweep order whose GPUs fit in
    // the slack, by weighted quickselect over (key, index), which are
    // distinct. `order` ends up with the prefix in [0, prefix_end), in no
    // particular order.
    struct SweepKey {
      uint64_t key;
      uint32_t index;
      bool operator<(const SweepKey& o) const {
        return key != o.key ? key < o.key : index < o.index;
      }
    };
    std::vector<SweepKey> order(segments.size());
    for (uint32_t k = 0; k < segments.size(); ++k) order[k] = {segments[k].key, k};
    size_t lo = 0, hi = order.size();
    // The loop ends at the first segment that does not fit, or with every
    // segment in the prefix: a range it cut off (hi = mid) held more than
    // the budget, so lo never reaches its end.
    uint64_t budget = slack_;
    double lp_gain = 0;
    while (lo < hi) {
      const SweepKey pivot = order[lo + (hi - lo) / 2];
      const auto below = std::partition(order.begin() + lo, order.begin() + hi,
                                        [&](const SweepKey& k) { return k < pivot; });
      const size_t mid = static_cast<size_t>(below - order.begin());
      std::iter_swap(below, std::find_if(below, order.begin() + hi, [&](const SweepKey& k) {
                       return k.index == pivot.index;
                     }));  // the pivot at mid, the larger keys after it
      uint64_t below_gpus = 0;
      double below_gain = 0;
      for (size_t k = lo; k < mid; ++k) {
        below_gpus += segments[order[k].index].gpus;
        below_gain += segments[order[k].index].gain;
      }
      if (below_gpus > budget) {
        hi = mid;  // the prefix ends among the smaller keys
        continue;
      }
      budget -= below_gpus;
      lp_gain += below_gain;
      const Segment& at = segments[pivot.index];
      if (at.gpus > budget) {
        // The first segment that does not fit: the bound takes part of it.
        lp_gain += at.gain * double(budget) / double(at.gpus);
        break;
      }
      budget -= at.gpus;
      lp_gain += at.gain;
      lo = mid + 1;
    }
    const size_t prefix_end = lo;
    upper_bound_ = base + lp_gain;

    // The sweep over the prefix takes every segment it may: each job's
    // prefix segments are its first ones (their keys rise along the job),
    // and they all fit.
    uint64_t left = slack_;
    std::vector<uint8_t> in_prefix(segments.size(), 0);
    for (size_t k = 0; k < prefix_end; ++k) {
      const uint32_t i = order[k].index;
      in_prefix[i] = 1;
      const Segment& s = segments[i];
      if (s.bound_only) continue;
      replicas[s.job] = std::max(replicas[s.job], s.to);
      left -= s.gpus;
    }
    // After it, in key order: each job's next segment (its first outside
    // the prefix, unless bound_only) from a min-heap; one that does not fit
    // stops its job.
    std::vector<SweepKey> next;
    for (uint32_t j = 0; j < n && left > 0; ++j) {
      for (uint32_t i = first_segment[j]; i < first_segment[j + 1]; ++i) {
        if (in_prefix[i]) continue;
        if (!segments[i].bound_only) next.push_back({segments[i].key, i});
        break;
      }
    }
    auto later = [](const SweepKey& a, const SweepKey& b) { return b < a; };
    std::make_heap(next.begin(), next.end(), later);
    while (left > 0 && !next.empty()) {
      std::pop_heap(next.begin(), next.end(), later);
      const uint32_t i = next.back().index;
      next.pop_back();
      const Segment& s = segments[i];
      if (s.gpus > left) continue;  // its job stops here
      replicas[s.job] = s.to;
      left -= s.gpus;
      if (i + 1 < first_segment[s.job + 1] && !segments[i + 1].bound_only) {
        next.push_back({segments[i + 1].key, i + 1});
        std::push_heap(next.begin(), next.end(), later);
      }
    }

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

}  // namespace

ScaleSolution SolveAtScale(const Problem& p, uint64_t capacity) {
  ScaleSolver solver(p, capacity);
  ScaleSolution solution;
  solution.replicas = solver.Solve();
  solution.upper_bound = solver.upper_bound();
  return solution;
}

}  // namespace rescale::planner_internal
