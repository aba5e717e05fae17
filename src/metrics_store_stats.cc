// MetricsStore's read side: the robust summary of a histogram, the window
// snapshots Tick() takes, and the queries (per-size statistics, pods with
// stragglers flagged, accepted counts, progress). Queries share admin_mu_ with
// each other (Tick takes it alone) and read the writers' counters with
// relaxed loads (see rescale/metrics_store.h).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/hash/hash.h"
#include "metrics_store_internal.h"
#include "rescale/job_rules.h"
#include "rescale/metrics_store.h"

namespace rescale {
namespace metrics_internal {

// Trimmed mean over the median's octave and its neighbours (see
// rescale/metrics_store.h).
RobustSummary Summarize(const Histogram& h) {
  RobustSummary out;
  out.count = h.Total();
  if (out.count == 0) return out;
  uint64_t seen = 0;
  int median_bin = 0;
  for (int b = 0; b < MetricsStore::kBins; ++b) {
    seen += h.count[b];
    if (2 * seen >= out.count) {
      median_bin = b;
      break;
    }
  }
  const int lo = std::max(0, median_bin - 1);
  const int hi = std::min(MetricsStore::kBins - 1, median_bin + 1);
  double n = 0, s = 0, ss = 0;
  for (int b = lo; b <= hi; ++b) {
    n += h.count[b];
    s += h.sum[b];
    ss += h.sum_sq[b];
  }
  out.mean = s / n;
  const double variance = std::max(0.0, ss / n - out.mean * out.mean);
  out.spread = n > 1 ? std::sqrt(variance * n / (n - 1)) : 0;
  out.mean_batch = std::max(0.0, h.batch_sum) / static_cast<double>(out.count);
  return out;
}

}  // namespace metrics_internal

namespace {

// Whether a window's gradient statistics can be used. A batch in flight
// while Tick copied the window's base snapshot can be in the snapshot's
// sums but not its count (sums are added first, see PendingSize::Flush):
// the window then counts it without its sums. Where that leaves no |G|^2
// at all, the window stands aside for the lifetime, as the step times'
// window does; otherwise the error is one batch among the window's.
bool WindowHoldsGradients(const metrics_internal::Histogram& window) {
  return window.grad_count > 0 && window.grad_sqr_sum > 0 && window.grad_noise_sum >= 0;
}

}  // namespace

using metrics_internal::Histogram;
using metrics_internal::Key;
using metrics_internal::kNever;
using metrics_internal::RobustSummary;
using metrics_internal::Summarize;

// Job steps and samples processed at one size. In synchronous data-parallel
// training every pod takes every step, and one job step processes
// world_size x local batch samples. Steps are counted by their numbers, as
// credited at ingest (PendingSize::CreditSteps): how far each batch moved
// the job's highest step, so pods that report only some of their steps, or
// only some pods reporting, still give the full count, resends are already
// de-duplicated (ClaimStep), and a job that returns to a size it ran at
// before is not credited there for the steps it took elsewhere.
// Only at a size where no pod sent a step number, the samples fall back to
// their count divided by the distinct pods that sent them (each pod sends
// each of its steps once); a resend of those cannot be told from a new step,
// so it is counted twice.
MetricsStore::Progress MetricsStore::ProgressOf(const SizeCell& cell) {
  Progress out;
  const uint64_t pods = cell.unstepped_pods.load(std::memory_order_relaxed);
  if (cell.step_mark.load(std::memory_order_relaxed) != 0) {
    // The credited steps already count every job step, including those that
    // pods without step numbers reported too: adding theirs would count twice.
    out.steps = cell.credited_steps.load(std::memory_order_relaxed);
  } else if (pods > 0) {
    out.steps = cell.unstepped.load(std::memory_order_relaxed) / pods;
  }
  const uint64_t lifetime = cell.lifetime.load(std::memory_order_relaxed);
  if (lifetime == 0) return out;
  const double mean_batch =
      std::max(0.0, cell.batch_sum.load(std::memory_order_relaxed)) / static_cast<double>(lifetime);
  out.samples = static_cast<uint64_t>(
      std::llround(static_cast<double>(out.steps) * cell.world_size * mean_batch));
  return out;
}

void MetricsStore::ExpirePodsLocked(JobState& job, int64_t now_ns) {
  const int64_t ttl_ns = absl::ToInt64Nanoseconds(options_.pod_ttl);
  const int64_t pod_cutoff = now_ns - ttl_ns;
  PodTable* pods = job.pods.load(std::memory_order_relaxed);
  bool stale = false;
  int64_t due = metrics_internal::kNever;
  for (size_t i = 0; i < pods->capacity(); ++i) {
    PodCell* cell = pods->slots[i].load(std::memory_order_acquire);
    if (cell == nullptr) continue;
    const int64_t seen = cell->last_seen_ns.load(std::memory_order_relaxed);
    if (seen < pod_cutoff) {
      stale = true;
    } else {
      // Stale once seen < now - ttl; last_seen only grows, so this is the
      // earliest it can be.
      const int64_t pod_due = seen + ttl_ns + 1;
      due = due == metrics_internal::kNever ? pod_due : std::min(due, pod_due);
    }
  }
  if (stale) RebuildPods(job, absl::FromUnixNanos(pod_cutoff), pods->capacity());
  if (job.pod_due_ns != metrics_internal::kNever) pod_due_.erase({job.pod_due_ns, &job});
  job.pod_due_ns = due;
  if (due != metrics_internal::kNever) pod_due_.insert({due, &job});
}

void MetricsStore::Tick(absl::Time now) {
  const int64_t now_ns = absl::ToUnixNanos(now);
  // The engine ticks before every plan, many a second while jobs register,
  // and a pass over every job's cells and pods costs about 1 us a cell, 40 ms
  // at 10,000 jobs. So a full pass comes only when window snapshots are due
  // (once a period) and at least once a pod_ttl; between them Tick visits
  // only the jobs in pod_due_ whose pods may have gone stale. What Ingest
  // adds meanwhile cannot be due sooner: a new size starts with its empty
  // snapshot taken then, due in the next period, and a pod added after a
  // full pass was seen after it, stale a pod_ttl later, by when the next
  // full pass has come. (An Ingest whose `now` ran slightly behind this
  // pass's is at most that much late.)
  {
    WriterMutexLock lock(admin_mu_);
    if (now_ns < next_full_pass_ns_) {
      while (!pod_due_.empty() && pod_due_.begin()->first <= now_ns) {
        ExpirePodsLocked(*pod_due_.begin()->second, now_ns);  // files it later
      }
      ReclaimLocked();
      return;
    }
  }
  // kSnapshots - 1 periods span the window, so the ring always holds a
  // snapshot from about the window's start.
  const int64_t period_ns = absl::ToInt64Nanoseconds(options_.window / (kSnapshots - 1));
  const int64_t ttl_ns = absl::ToInt64Nanoseconds(options_.pod_ttl);
  // Snapshots are taken on a grid of periods, one per cell in each period
  // (the first pass in it), so every cell comes due at once: a pass per
  // period, not one whenever some cell's own period is up.
  const int64_t period_start = now_ns - ((now_ns % period_ns) + period_ns) % period_ns;
  // A table shard at a time, admin_mu_ released in between: readers (Stats,
  // Pods) and registrations wait for one shard's share of the pass, not for
  // all of it. The engine ticks on its plan thread, which runs at a lower
  // priority: on a busy machine a reader stuck behind the whole pass would
  // wait as long as the scheduler kept that thread off the CPU. Each cell is
  // rolled at most once a period whoever gets to it first, so a concurrent
  // Tick or a change between shards only moves work from one pass to the
  // other.
  for (int shard = 0; shard < kTableShards; ++shard) {
    WriterMutexLock lock(admin_mu_);
    bool rolled = false;
    for (const auto& [id, job] : jobs_[shard].load(std::memory_order_relaxed)->jobs) {
      for (int i = 0; i < job->max_sizes; ++i) {
        SizeCell* cell = job->sizes[i].load(std::memory_order_acquire);
        if (cell == nullptr) break;
        const int newest = (cell->next_snapshot + kSnapshots - 1) % kSnapshots;
        if (cell->snapshot_ns[newest] == kNever || cell->snapshot_ns[newest] < period_start) {
          cell->snapshots[cell->next_snapshot] = cell->Load();
          cell->snapshot_ns[cell->next_snapshot] = now_ns;
          cell->next_snapshot = (cell->next_snapshot + 1) % kSnapshots;
          rolled = true;
        }
      }
      ExpirePodsLocked(*job, now_ns);
    }
    // After this shard's snapshots (see StatsIfChanged's fast path).
    if (rolled) roll_generation_.fetch_add(1, std::memory_order_release);
  }
  WriterMutexLock lock(admin_mu_);
  next_full_pass_ns_ = std::min(period_start + period_ns, now_ns + ttl_ns + 1);
  ReclaimLocked();
}

const MetricsStore::JobState* MetricsStore::FindLocked(std::string_view job_id) const {
  // Stable under admin_mu_.
  const JobTable* table = jobs_[TableShardOf(job_id)].load(std::memory_order_relaxed);
  auto it = table->jobs.find(Key(job_id));
  return it == table->jobs.end() ? nullptr : it->second;
}

MetricsStore::WindowBase MetricsStore::BaseOf(const SizeCell& cell, int64_t window_start) {
  // Base of the window: the newest snapshot taken at or before its start.
  // Without one, a cell created inside the window has nothing to subtract;
  // an older cell (Tick has not kept up) uses its oldest snapshot.
  int base = -1;
  for (int k = 0; k < kSnapshots; ++k) {
    const int64_t t = cell.snapshot_ns[k];
    if (t != kNever && t <= window_start && (base < 0 || t > cell.snapshot_ns[base])) base = k;
  }
  if (base < 0 && cell.created_ns < window_start) {
    for (int k = 0; k < kSnapshots; ++k) {
      const int64_t t = cell.snapshot_ns[k];
      if (t != kNever && (base < 0 || t < cell.snapshot_ns[base])) base = k;
    }
  }
  return {base, base < 0 ? kNever : cell.snapshot_ns[base]};
}

MetricsStore::StatsRevision MetricsStore::StatsRevisionLocked(const JobState& job,
                                                              int64_t window_start) const {
  // Stats reads the cumulative histograms (they change only with accepted
  // samples) and each size's window base (it changes as time passes a
  // snapshot or Tick overwrites one). `accepted` is loaded with acquire and
  // added last, with release, by each batch's Flush: every batch counted in
  // the value read here is then visible whole to the Stats that follows, and
  // a batch not yet counted changes the value when it is.
  StatsRevision out;
  out.counters = job.counters;
  // Under admin_mu_ no Tick runs, so the generation matches the snapshots
  // read below.
  out.roll_generation = roll_generation_.load(std::memory_order_acquire);
  out.accepted = job.counters->accepted.load(std::memory_order_acquire);
  uint64_t revision = absl::HashOf(out.accepted);
  // Time alone moves a base when the window's start reaches a snapshot
  // newer than the base (BaseOf takes t <= window_start) or passes the
  // cell's creation (its fallback): the first such moment bounds the fast
  // path's answer.
  int64_t valid_before = std::numeric_limits<int64_t>::max();
  for (int i = 0; i < job.max_sizes; ++i) {
    const SizeCell* cell = job.sizes[i].load(std::memory_order_acquire);
    if (cell == nullptr) break;
    const WindowBase base = BaseOf(*cell, window_start);
    revision = absl::HashOf(revision, cell->world_size, base.index, base.taken_ns);
    for (int k = 0; k < kSnapshots; ++k) {
      const int64_t t = cell->snapshot_ns[k];
      if (t != kNever && t > window_start) valid_before = std::min(valid_before, t);
    }
    if (cell->created_ns >= window_start)
      valid_before = std::min(valid_before, cell->created_ns + 1);
  }
  out.value = revision | 1;  // never 0, the caller's "none yet"
  out.bases_valid_before_ns = valid_before;
  return out;
}

std::optional<std::vector<SizeStats>> MetricsStore::StatsIfChanged(std::string_view job_id,
                                                                   absl::Time now,
                                                                   StatsRevision& revision) const {
  const int64_t window_start = absl::ToUnixNanos(now - options_.window);
  // The fast path, without the lock or a lookup. The revision was taken
  // (slow path, under admin_mu_) with `accepted` = A and generation G. If
  // the acquire loads below read A and G again, and the job is not marked
  // removed: no batch's flush completed its release add in between (each
  // adds a positive count, so A would have moved), so the statistics hold
  // what they held then, apart from a batch still in flight, which moves A
  // when it completes; no Tick pass took a snapshot (those bump G with
  // release after writing); and the window's start has not reached the
  // first moment time alone moves a base. So Stats would say what it said.
  // A removal sets `removed` (release) before the job leaves the table.
  if (revision.value != 0 && revision.counters != nullptr &&
      window_start < revision.bases_valid_before_ns &&
      revision.counters->accepted.load(std::memory_order_acquire) == revision.accepted &&
      roll_generation_.load(std::memory_order_acquire) == revision.roll_generation &&
      !revision.counters->removed.load(std::memory_order_acquire)) {
    return std::nullopt;
  }
  ReaderMutexLock lock(admin_mu_);
  const JobState* job = FindLocked(job_id);
  if (job == nullptr) {
    if (revision.value == 0) return std::nullopt;
    revision = StatsRevision();
    return std::vector<SizeStats>();
  }
  StatsRevision current = StatsRevisionLocked(*job, window_start);
  const bool same = current.value == revision.value;
  revision = std::move(current);
  if (same) return std::nullopt;
  return StatsLocked(*job, window_start);
}

std::vector<SizeStats> MetricsStore::Stats(std::string_view job_id, absl::Time now) const {
  ReaderMutexLock lock(admin_mu_);
  const JobState* job = FindLocked(job_id);
  if (job == nullptr) return {};
  return StatsLocked(*job, absl::ToUnixNanos(now - options_.window));
}

std::vector<SizeStats> MetricsStore::StatsLocked(const JobState& job, int64_t window_start) const {
  std::vector<SizeStats> out;
  for (int i = 0; i < job.max_sizes; ++i) {
    const SizeCell* cell = job.sizes[i].load(std::memory_order_acquire);
    if (cell == nullptr) break;
    const Histogram cumulative = cell->Load();
    const int base = BaseOf(*cell, window_start).index;
    const bool subtract = base >= 0;
    const Histogram windowed = subtract ? cumulative.Minus(cell->snapshots[base]) : cumulative;
    RobustSummary summary = Summarize(windowed);
    SizeStats stats;
    stats.world_size = cell->world_size;
    stats.gpu_type = cell->gpu_type;
    const Progress progress = ProgressOf(*cell);
    stats.steps_processed = progress.steps;
    stats.samples_processed = progress.samples;
    stats.sample_count = summary.count;
    stats.lifetime_count = cell->lifetime.load(std::memory_order_relaxed);
    // A sample in flight while Tick copied the base snapshot can be in its
    // sums but not its counts (sums go first, see PendingSize::Flush): the
    // window then holds its count without its sums. Such a window stands
    // aside for the lifetime summary, as an empty one does.
    stats.from_window = summary.count > 0 && summary.mean > 0 && summary.mean_batch > 0;
    if (!stats.from_window) summary = Summarize(cumulative);
    if (summary.count == 0) continue;  // cell created, first flush not visible yet
    stats.step_seconds = summary.mean;
    stats.spread_seconds = summary.spread;
    stats.mean_batch = summary.mean_batch;
    stats.samples_per_second =
        ObservedSamplesPerSecond(cell->world_size, summary.mean_batch, summary.mean);
    // Gradient statistics over the window when it holds some, else over
    // the lifetime, as the step times (WindowHoldsGradients says why a
    // window can stand aside).
    const Histogram& gradients = WindowHoldsGradients(windowed) ? windowed : cumulative;
    if (gradients.grad_count > 0) {
      const double n = static_cast<double>(gradients.grad_count);
      stats.gradient_count = gradients.grad_count;
      stats.gradient_sqr = std::max(0.0, gradients.grad_sqr_sum / n);
      stats.gradient_noise = std::max(0.0, gradients.grad_noise_sum / n);
    }
    const int64_t last = cell->last_sample_ns.load(std::memory_order_relaxed);
    stats.last_sample_at = last == kNever ? absl::InfinitePast() : absl::FromUnixNanos(last);
    out.push_back(stats);
  }
  std::sort(out.begin(), out.end(), [](const SizeStats& a, const SizeStats& b) {
    return std::tie(a.gpu_type, a.world_size) < std::tie(b.gpu_type, b.world_size);
  });
  return out;
}

std::optional<double> MetricsStore::GradientNoiseScale(std::string_view job_id,
                                                       absl::Time now) const {
  ReaderMutexLock lock(admin_mu_);
  const JobState* job = FindLocked(job_id);
  if (job == nullptr) return std::nullopt;
  const int64_t window_start = absl::ToUnixNanos(now - options_.window);
  const absl::Duration span = options_.gradient_window > absl::ZeroDuration()
                                  ? std::min(options_.gradient_window, options_.window)
                                  : options_.window / (kSnapshots - 1);
  const int64_t latest_start = absl::ToUnixNanos(now - span);
  // Sums over the sizes' gradient windows and windows, and over their
  // lifetimes for when no window holds any.
  Histogram latest;
  Histogram recent;
  Histogram lifetime;
  for (int i = 0; i < job->max_sizes; ++i) {
    const SizeCell* cell = job->sizes[i].load(std::memory_order_acquire);
    if (cell == nullptr) break;
    const Histogram cumulative = cell->Load();
    const int base = BaseOf(*cell, window_start).index;
    const Histogram windowed = base >= 0 ? cumulative.Minus(cell->snapshots[base]) : cumulative;
    const int latest_base = BaseOf(*cell, latest_start).index;
    const Histogram newest =
        latest_base >= 0 ? cumulative.Minus(cell->snapshots[latest_base]) : cumulative;
    for (auto [into, from] : {std::pair{&latest, &newest}, std::pair{&recent, &windowed},
                              std::pair{&lifetime, &cumulative}}) {
      into->grad_count += from->grad_count;
      into->grad_sqr_sum += from->grad_sqr_sum;
      into->grad_noise_sum += from->grad_noise_sum;
    }
  }
  const Histogram& use = WindowHoldsGradients(latest)   ? latest
                         : WindowHoldsGradients(recent) ? recent
                                                        : lifetime;
  if (use.grad_count == 0 || !(use.grad_sqr_sum > 0)) return std::nullopt;
  return std::max(0.0, use.grad_noise_sum) / use.grad_sqr_sum;
}

std::vector<PodStats> MetricsStore::Pods(std::string_view job_id) const {
  std::vector<PodStats> out;
  ReaderMutexLock lock(admin_mu_);
  const JobState* job = FindLocked(job_id);
  if (job == nullptr) return out;
  const PodTable* table = job->pods.load(std::memory_order_relaxed);
  for (size_t i = 0; i < table->capacity(); ++i) {
    const PodCell* cell = table->slots[i].load(std::memory_order_acquire);
    if (cell == nullptr || cell->count.load(std::memory_order_relaxed) == 0) continue;
    PodStats pod;
    pod.pod = cell->name;
    pod.world_size = cell->world_size.load(std::memory_order_relaxed);
    pod.recent_step_seconds = cell->recent_step.load(std::memory_order_relaxed);
    pod.last_seen = absl::FromUnixNanos(cell->last_seen_ns.load(std::memory_order_relaxed));
    pod.sample_count = cell->count.load(std::memory_order_relaxed);
    out.push_back(std::move(pod));
  }
  // A straggler is slow relative to the median of the pods at its size.
  absl::flat_hash_map<uint32_t, std::vector<double>> by_size;
  for (const PodStats& p : out) by_size[p.world_size].push_back(p.recent_step_seconds);
  absl::flat_hash_map<uint32_t, double> median;
  for (auto& [size, steps] : by_size) {
    if (steps.size() < 2) continue;
    std::sort(steps.begin(), steps.end());
    const size_t n = steps.size();
    median[size] = n % 2 ? steps[n / 2] : (steps[n / 2 - 1] + steps[n / 2]) / 2;
  }
  for (PodStats& p : out) {
    auto it = median.find(p.world_size);
    p.straggler =
        it != median.end() && p.recent_step_seconds > options_.straggler_ratio * it->second;
  }
  std::sort(out.begin(), out.end(),
            [](const PodStats& a, const PodStats& b) { return a.pod < b.pod; });
  return out;
}

uint64_t MetricsStore::SamplesAccepted(std::string_view job_id) const {
  ReaderMutexLock lock(admin_mu_);
  const JobState* job = FindLocked(job_id);
  return job == nullptr ? 0 : job->counters->accepted.load(std::memory_order_relaxed);
}

uint64_t MetricsStore::SamplesProcessed(std::string_view job_id) const {
  ReaderMutexLock lock(admin_mu_);
  const JobState* job = FindLocked(job_id);
  if (job == nullptr) return 0;
  uint64_t total = 0;
  for (int i = 0; i < job->max_sizes; ++i) {
    const SizeCell* cell = job->sizes[i].load(std::memory_order_acquire);
    if (cell == nullptr) break;
    total += ProgressOf(*cell).samples;
  }
  return total;
}

uint64_t MetricsStore::TotalAccepted() const {
  ReaderMutexLock lock(admin_mu_);
  uint64_t total = removed_accepted_.load(std::memory_order_relaxed);
  for (const auto& shard : jobs_) {
    for (const auto& [id, job] : shard.load(std::memory_order_relaxed)->jobs) {
      total += job->counters->accepted.load(std::memory_order_relaxed);
    }
  }
  for (const Retired& r : retired_) {
    if (r.job != nullptr) total += r.job->counters->accepted.load(std::memory_order_relaxed);
  }
  return total;
}

int MetricsStore::job_count() const {
  ReaderMutexLock lock(admin_mu_);
  return job_count_;
}

}  // namespace rescale
