// MetricsStore (see rescale/metrics_store.h for the design and the
// memory-ordering argument).
#include "rescale/metrics_store.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "absl/container/flat_hash_set.h"
#include "absl/hash/hash.h"
#include "absl/strings/str_format.h"

namespace rescale {
namespace {

constexpr int64_t kNever = std::numeric_limits<int64_t>::min();
// A pod's de-duplication mark packs the world size of the run it belongs to
// (high bits) with one past the highest step accepted in that run (low
// bits), so one relaxed CAS covers both; see ClaimStep.
constexpr int kMarkStepBits = 44;
constexpr uint64_t kMarkStepMask = (uint64_t{1} << kMarkStepBits) - 1;
constexpr uint64_t kMarkWorldSizeMask = (uint64_t{1} << (64 - kMarkStepBits)) - 1;
// step + 1 must fit the low bits.
constexpr uint64_t kMaxStep = kMarkStepMask - 1;

// Octave of a positive finite double, read off its exponent bits (frexp is
// several times slower on this path), clamped to the histogram.
inline int BinOf(double seconds) {
  const uint64_t bits = std::bit_cast<uint64_t>(seconds);
  const int octave = static_cast<int>((bits >> 52) & 0x7ff) - 1023;
  return std::clamp(octave - MetricsStore::kMinOctave, 0, MetricsStore::kBins - 1);
}

// Adds to an atomic double. fetch_add on atomic<double> is a CAS loop too;
// spelled out so the memory order is explicit: relaxed, see the header.
inline void AddRelaxed(std::atomic<double>& target, double value) {
  double old = target.load(std::memory_order_relaxed);
  while (!target.compare_exchange_weak(old, old + value, std::memory_order_relaxed)) {
  }
}

// De-duplication by step. `next` is the pod's mark: the world size of its
// current run and one past the highest step accepted in it (0: none yet);
// `seen` is the caller's cached copy. A sample of the run's world size is a
// duplicate when its step is not above that highest step. A sample of
// another world size starts a new run: training that is resized restarts
// and may number its steps afresh (the ImageNet example's epoch x batches
// per epoch + i shrinks when the world grows), and those samples are the
// ones the planner needs. Returns whether the sample is new, and then moves
// the mark to it: the caller stores the sample.
//
// Why relaxed suffices: within one run every successful CAS moves the mark
// from some v to a larger step + 1, claiming the steps [v, step] for its
// caller. All RMWs on one atomic fall in a single modification order (in any
// memory order), so the intervals claimed in a run are disjoint and no step
// is stored twice, whichever writers race. Nothing else is published through
// the mark: the sample's statistics are relaxed counters of their own (see
// the header), and no reader infers anything about them from it, so no
// acquire/release is needed. De-duplication assumes each pod's samples
// arrive in order, which the agent guarantees: if a writer claims step 10
// while another is still at step 7, steps 7..9 of the second are counted as
// duplicates, and a resend of the old world size's samples after the new
// one's would be stored again. World sizes are compared modulo 2^20.
inline bool ClaimStep(std::atomic<uint64_t>& next, uint32_t world_size, uint64_t step,
                      uint64_t& seen) {
  const uint64_t run = world_size & kMarkWorldSizeMask;
  const uint64_t mark = (run << kMarkStepBits) | (step + 1);
  for (;;) {
    const bool same_run = (seen >> kMarkStepBits) == run;
    if (same_run && step < (seen & kMarkStepMask)) return false;
    if (next.compare_exchange_weak(seen, mark, std::memory_order_relaxed,
                                   std::memory_order_relaxed)) {
      seen = mark;
      return true;
    }
    // `seen` now holds the current mark; re-test.
  }
}

inline void MaxRelaxed(std::atomic<int64_t>& target, int64_t value) {
  int64_t old = target.load(std::memory_order_relaxed);
  while (old < value &&
         !target.compare_exchange_weak(old, value, std::memory_order_relaxed)) {
  }
}

// Debian's Abseil has its own string_view type; heterogeneous lookups in
// absl containers need it.
inline absl::string_view Key(std::string_view s) { return absl::string_view(s.data(), s.size()); }

size_t NextPow2(size_t n) { return std::bit_ceil(std::max<size_t>(n, 8)); }

// Pods a job may have at once: every worker restarted a few times within
// pod_ttl, and at most the configured limit.
int PodLimitFor(uint32_t max_replicas, int max_pods) {
  const size_t plausible = 4 * size_t{max_replicas} + 16;
  return static_cast<int>(std::min<size_t>(plausible, static_cast<size_t>(max_pods)));
}

// Pod-table slots for a limit: load factor at most one half, so linear
// probes stay short.
size_t PodCapacityFor(int pod_limit) { return NextPow2(2 * static_cast<size_t>(pod_limit)); }

// Plain (non-atomic) histogram: what a snapshot or a windowed delta holds.
struct Histogram {
  uint32_t count[MetricsStore::kBins] = {};
  double sum[MetricsStore::kBins] = {};
  double sum_sq[MetricsStore::kBins] = {};
  double batch_sum = 0;

  uint64_t Total() const {
    uint64_t n = 0;
    for (uint32_t c : count) n += c;
    return n;
  }
  // this - older. Counts wrap modulo 2^32, so the difference is exact as
  // long as fewer than 2^32 samples fall between the two.
  Histogram Minus(const Histogram& older) const {
    Histogram d;
    for (int b = 0; b < MetricsStore::kBins; ++b) {
      d.count[b] = count[b] - older.count[b];
      d.sum[b] = d.count[b] == 0 ? 0 : sum[b] - older.sum[b];
      d.sum_sq[b] = d.count[b] == 0 ? 0 : sum_sq[b] - older.sum_sq[b];
    }
    d.batch_sum = batch_sum - older.batch_sum;
    return d;
  }
};

struct RobustSummary {
  uint64_t count = 0;
  double mean = 0;
  double spread = 0;
  double mean_batch = 0;
};

// Trimmed mean over the median's octave and its neighbours (see header).
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

}  // namespace

// ---- cells and tables ---------------------------------------------------------

struct MetricsStore::SizeCell {
  SizeCell(uint32_t size, int64_t created) : world_size(size), created_ns(created) {
    std::fill(std::begin(snapshot_ns), std::end(snapshot_ns), kNever);
  }

  Histogram Load() const {
    Histogram h;
    for (int b = 0; b < kBins; ++b) {
      h.count[b] = count[b].load(std::memory_order_relaxed);
      h.sum[b] = sum[b].load(std::memory_order_relaxed);
      h.sum_sq[b] = sum_sq[b].load(std::memory_order_relaxed);
    }
    h.batch_sum = batch_sum.load(std::memory_order_relaxed);
    return h;
  }

  const uint32_t world_size;
  const int64_t created_ns;  // ingest time of its first sample
  // Written by ingest (relaxed RMWs), read by anyone.
  std::atomic<uint32_t> count[kBins] = {};
  std::atomic<double> sum[kBins] = {};
  std::atomic<double> sum_sq[kBins] = {};
  std::atomic<double> batch_sum{0};
  std::atomic<uint64_t> lifetime{0};
  std::atomic<int64_t> last_sample_ns{kNever};
  // Window snapshots; guarded by the store's admin_mu_.
  Histogram snapshots[kSnapshots];
  int64_t snapshot_ns[kSnapshots];
  int next_snapshot = 0;
};

struct MetricsStore::PodCell {
  PodCell(std::string_view pod_name, size_t name_hash) : name(pod_name), hash(name_hash) {}
  const std::string name;
  const size_t hash;
  std::atomic<int64_t> last_seen_ns{kNever};
  std::atomic<double> recent_step{0};
  std::atomic<uint32_t> world_size{0};
  std::atomic<uint64_t> count{0};
  // De-duplication mark: the world size of the pod's current run and one
  // past the highest `step` accepted in it; 0 = none (ClaimStep). Kept when the pod table is rebuilt (cells are moved, not
  // copied); lost when the pod is forgotten after pod_ttl.
  std::atomic<uint64_t> next_step{0};
};

struct MetricsStore::PodTable {
  explicit PodTable(size_t capacity)
      : mask(capacity - 1), slots(std::make_unique<std::atomic<PodCell*>[]>(capacity)) {}
  size_t capacity() const { return mask + 1; }
  const size_t mask;
  const std::unique_ptr<std::atomic<PodCell*>[]> slots;  // value-initialised: null
  std::atomic<int> live{0};
};

struct MetricsStore::JobState {
  JobState(std::string_view id, uint32_t max_rep, uint32_t batch, int size_slots, size_t pod_capacity,
           int pod_limit_)
      : job_id(id),
        max_replicas(max_rep),
        local_batch_size(batch),
        max_sizes(size_slots),
        sizes(std::make_unique<std::atomic<SizeCell*>[]>(size_slots)),
        pods(new PodTable(pod_capacity)),
        pod_limit(pod_limit_) {}

  ~JobState() {
    for (int i = 0; i < max_sizes; ++i) delete sizes[i].load(std::memory_order_relaxed);
    PodTable* table = pods.load(std::memory_order_relaxed);
    for (size_t i = 0; i < table->capacity(); ++i) delete table->slots[i].load(std::memory_order_relaxed);
    delete table;
  }

  const std::string job_id;
  std::atomic<uint32_t> max_replicas;
  std::atomic<uint32_t> local_batch_size;
  std::atomic<uint64_t> accepted{0};
  const int max_sizes;
  const std::unique_ptr<std::atomic<SizeCell*>[]> sizes;
  std::atomic<PodTable*> pods;
  std::atomic<int> pod_limit;
};

// Immutable once published; does not own the JobStates.
struct MetricsStore::JobTable {
  absl::flat_hash_map<std::string, JobState*> jobs;
};

struct MetricsStore::Retired {
  uint64_t epoch = 0;
  std::unique_ptr<const JobTable> table;
  std::unique_ptr<JobState> job;
  // A replaced pod table, and the cells copied into its successor: the rest
  // (forgotten pods, and pods inserted after the copy) are freed with it.
  std::unique_ptr<PodTable> pod_table;
  absl::flat_hash_set<PodCell*> copied;
};

// Per-batch local accumulation, flushed with one RMW per touched counter.
struct MetricsStore::PendingSize {
  SizeCell* cell = nullptr;
  JobState* job = nullptr;
  uint32_t count[kBins] = {};
  double sum[kBins] = {};
  double sum_sq[kBins] = {};
  double batch_sum = 0;
  uint64_t samples = 0;
  int64_t last_ns = kNever;

  void Flush() {
    if (samples == 0) return;
    for (int b = 0; b < kBins; ++b) {
      if (count[b] == 0) continue;
      cell->count[b].fetch_add(count[b], std::memory_order_relaxed);
      AddRelaxed(cell->sum[b], sum[b]);
      AddRelaxed(cell->sum_sq[b], sum_sq[b]);
    }
    AddRelaxed(cell->batch_sum, batch_sum);
    cell->lifetime.fetch_add(samples, std::memory_order_relaxed);
    MaxRelaxed(cell->last_sample_ns, last_ns);
    job->accepted.fetch_add(samples, std::memory_order_relaxed);
    *this = PendingSize();
  }
};

struct MetricsStore::PendingPod {
  PodCell* cell = nullptr;
  uint64_t samples = 0;
  double step_sum = 0;
  uint32_t world_size = 0;
  int64_t last_ns = kNever;

  // Weight of this batch in the pod's recent step time: as if each sample
  // moved an exponential average by 10%.
  void Flush() {
    if (samples == 0) return;
    const double batch_mean = step_sum / static_cast<double>(samples);
    const double keep = std::pow(0.9, static_cast<double>(samples));
    const double old = cell->recent_step.load(std::memory_order_relaxed);
    // A racing update from another stream of the same pod may be lost; the
    // average is a display statistic, and the next batch corrects it.
    cell->recent_step.store(old == 0 ? batch_mean : old * keep + batch_mean * (1 - keep),
                            std::memory_order_relaxed);
    cell->world_size.store(world_size, std::memory_order_relaxed);
    cell->count.fetch_add(samples, std::memory_order_relaxed);
    MaxRelaxed(cell->last_seen_ns, last_ns);
    *this = PendingPod();
  }
};

// ---- store ------------------------------------------------------------------------

MetricsStore::MetricsStore(MetricsStoreOptions options)
    : options_(options), epochs_(EpochDomain::Global()), jobs_(new JobTable()) {}

MetricsStore::~MetricsStore() {
  // Precondition: no concurrent calls, so everything can go at once.
  const JobTable* table = jobs_.load(std::memory_order_relaxed);
  for (const auto& [id, job] : table->jobs) delete job;
  delete table;
  std::lock_guard<std::mutex> lock(admin_mu_);
  for (Retired& r : retired_) FreeRetired(r);
}

absl::Status MetricsStore::AddJob(std::string_view job_id, uint32_t max_replicas,
                                  uint32_t local_batch_size) {
  std::lock_guard<std::mutex> lock(admin_mu_);
  const JobTable* current = jobs_.load(std::memory_order_relaxed);  // only we replace it
  if (auto it = current->jobs.find(Key(job_id)); it != current->jobs.end()) {
    JobState& job = *it->second;
    job.max_replicas.store(max_replicas, std::memory_order_relaxed);
    job.local_batch_size.store(local_batch_size, std::memory_order_relaxed);
    const int pod_limit = PodLimitFor(max_replicas, options_.max_pods_per_job);
    const size_t capacity = PodCapacityFor(pod_limit);
    job.pod_limit.store(pod_limit, std::memory_order_relaxed);
    if (capacity > job.pods.load(std::memory_order_relaxed)->capacity()) {
      RebuildPods(job, absl::InfinitePast(), capacity);
    }
    return absl::OkStatus();
  }
  if (static_cast<int>(current->jobs.size()) >= options_.max_jobs) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "the metrics store holds %d jobs, its limit (--max_jobs)", options_.max_jobs));
  }
  const int pod_limit = PodLimitFor(max_replicas, options_.max_pods_per_job);
  auto next = std::make_unique<JobTable>(*current);
  next->jobs.emplace(std::string(job_id),
                     new JobState(job_id, max_replicas, local_batch_size, options_.max_sizes_per_job,
                                  PodCapacityFor(pod_limit), pod_limit));
  PublishTable(std::move(next));
  ReclaimLocked();
  return absl::OkStatus();
}

void MetricsStore::RemoveJob(std::string_view job_id) {
  std::lock_guard<std::mutex> lock(admin_mu_);
  const JobTable* current = jobs_.load(std::memory_order_relaxed);
  auto it = current->jobs.find(Key(job_id));
  if (it == current->jobs.end()) return;
  JobState* job = it->second;
  auto next = std::make_unique<JobTable>(*current);
  next->jobs.erase(Key(job_id));
  PublishTable(std::move(next));
  Retired retired;
  retired.epoch = epochs_.Advance();
  retired.job.reset(job);
  RetireLocked(std::move(retired));
  ReclaimLocked();
}

void MetricsStore::PublishTable(std::unique_ptr<JobTable> table) {
  const JobTable* old = jobs_.exchange(table.release(), std::memory_order_seq_cst);
  Retired retired;
  retired.epoch = epochs_.Advance();
  retired.table.reset(old);
  RetireLocked(std::move(retired));
}

void MetricsStore::RebuildPods(JobState& job, absl::Time forget_before, size_t capacity) {
  PodTable* old = job.pods.load(std::memory_order_relaxed);
  auto fresh = std::make_unique<PodTable>(capacity);
  Retired retired;
  const int64_t cutoff =
      forget_before == absl::InfinitePast() ? kNever : absl::ToUnixNanos(forget_before);
  int live = 0;
  for (size_t i = 0; i < old->capacity(); ++i) {
    PodCell* cell = old->slots[i].load(std::memory_order_acquire);
    if (cell == nullptr) continue;
    if (cutoff != kNever && cell->last_seen_ns.load(std::memory_order_relaxed) < cutoff) continue;
    size_t slot = cell->hash & fresh->mask;
    while (fresh->slots[slot].load(std::memory_order_relaxed) != nullptr) slot = (slot + 1) & fresh->mask;
    fresh->slots[slot].store(cell, std::memory_order_relaxed);  // published by the seq_cst store below
    retired.copied.insert(cell);
    ++live;
  }
  fresh->live.store(live, std::memory_order_relaxed);
  job.pods.store(fresh.release(), std::memory_order_seq_cst);
  retired.epoch = epochs_.Advance();
  retired.pod_table.reset(old);
  RetireLocked(std::move(retired));
}

void MetricsStore::RetireLocked(Retired retired) { retired_.push_back(std::move(retired)); }

void MetricsStore::FreeRetired(Retired& r) {
  if (r.job != nullptr) {
    removed_accepted_.fetch_add(r.job->accepted.load(std::memory_order_relaxed),
                                std::memory_order_relaxed);
    r.job.reset();
  }
  if (r.pod_table != nullptr) {
    for (size_t i = 0; i < r.pod_table->capacity(); ++i) {
      PodCell* cell = r.pod_table->slots[i].load(std::memory_order_relaxed);
      if (cell != nullptr && !r.copied.contains(cell)) delete cell;
    }
    r.pod_table.reset();
  }
  r.table.reset();
}

void MetricsStore::ReclaimLocked() {
  auto keep = std::partition(retired_.begin(), retired_.end(),
                             [&](const Retired& r) { return !epochs_.IsSafe(r.epoch); });
  for (auto it = keep; it != retired_.end(); ++it) FreeRetired(*it);
  retired_.erase(keep, retired_.end());
}

MetricsStore::SizeCell* MetricsStore::FindOrAddSize(JobState& job, uint32_t world_size,
                                                    int64_t now_ns) {
  for (int i = 0; i < job.max_sizes; ++i) {
    SizeCell* cell = job.sizes[i].load(std::memory_order_acquire);
    if (cell == nullptr) {
      auto fresh = std::make_unique<SizeCell>(world_size, now_ns);
      if (job.sizes[i].compare_exchange_strong(cell, fresh.get(), std::memory_order_release,
                                               std::memory_order_acquire)) {
        return fresh.release();
      }
      // Lost the race: `cell` now holds the winner; it may be our size.
    }
    if (cell->world_size == world_size) return cell;
  }
  return nullptr;
}

MetricsStore::PodCell* MetricsStore::FindOrAddPod(JobState& job, std::string_view pod) {
  PodTable* table = job.pods.load(std::memory_order_seq_cst);
  const size_t hash = absl::HashOf(Key(pod));
  size_t slot = hash & table->mask;
  for (size_t probes = 0; probes < table->capacity(); ++probes, slot = (slot + 1) & table->mask) {
    PodCell* cell = table->slots[slot].load(std::memory_order_acquire);
    if (cell == nullptr) {
      if (table->live.fetch_add(1, std::memory_order_relaxed) >=
          job.pod_limit.load(std::memory_order_relaxed)) {
        table->live.fetch_sub(1, std::memory_order_relaxed);
        return nullptr;
      }
      auto fresh = std::make_unique<PodCell>(pod, hash);
      if (table->slots[slot].compare_exchange_strong(cell, fresh.get(), std::memory_order_release,
                                                     std::memory_order_acquire)) {
        return fresh.release();
      }
      table->live.fetch_sub(1, std::memory_order_relaxed);
    }
    if (cell->hash == hash && cell->name == pod) return cell;
  }
  return nullptr;
}

std::string MetricsStore::RejectReason(const StepSample& s, const JobState* job,
                                       absl::Time now) const {
  if (s.job_id.empty()) return "job_id is empty (set it on the sample or the batch)";
  if (job == nullptr) {
    return absl::StrFormat("job_id \"%s\" is not registered (NOT_FOUND)", s.job_id);
  }
  if (s.pod.empty()) return "pod is empty (set it on the sample or the batch)";
  if (s.pod.size() > options_.max_pod_name_length) {
    return absl::StrFormat("pod name has %d characters; the limit is %d", s.pod.size(),
                           options_.max_pod_name_length);
  }
  if (!std::isfinite(s.step_seconds) || s.step_seconds <= 0) {
    return absl::StrFormat("step_seconds must be a positive finite number, got %g",
                           s.step_seconds);
  }
  if (s.step_seconds < options_.min_step_seconds || s.step_seconds > options_.max_step_seconds) {
    return absl::StrFormat("step_seconds %g is outside the plausible range [%g, %g]",
                           s.step_seconds, options_.min_step_seconds, options_.max_step_seconds);
  }
  const uint32_t max_replicas = job->max_replicas.load(std::memory_order_relaxed);
  if (s.world_size == 0) return "world_size must be at least 1 (set it on the sample or the batch)";
  if (s.world_size > max_replicas) {
    return absl::StrFormat("world_size %d exceeds the job's max_replicas %d", s.world_size,
                           max_replicas);
  }
  if (s.batch_size == 0 && job->local_batch_size.load(std::memory_order_relaxed) == 0) {
    return "batch_size is 0 and the job has no local_batch_size to default to";
  }
  if (s.step.has_value() && *s.step > kMaxStep) {
    return absl::StrFormat("step %d exceeds the limit of %d (2^44-2)", *s.step, kMaxStep);
  }
  if (s.timestamp_unix_nanos != 0) {
    absl::Time at = absl::FromUnixNanos(s.timestamp_unix_nanos);
    if (at > now + options_.max_future_skew) {
      return absl::StrFormat("timestamp_unix_nanos is %s in the future; the limit is %s",
                             absl::FormatDuration(at - now),
                             absl::FormatDuration(options_.max_future_skew));
    }
    if (at < now - options_.max_sample_age) {
      return absl::StrFormat("timestamp_unix_nanos is %s old; the limit is %s",
                             absl::FormatDuration(now - at),
                             absl::FormatDuration(options_.max_sample_age));
    }
  }
  return "";
}

IngestResult MetricsStore::Ingest(std::span<const StepSample> samples, absl::Time now) {
  IngestResult result;
  if (samples.empty()) return result;
  EpochDomain::Guard guard(epochs_);
  const JobTable* table = jobs_.load(std::memory_order_seq_cst);

  const int64_t now_ns = absl::ToUnixNanos(now);
  const int64_t oldest_ns = absl::ToUnixNanos(now - options_.max_sample_age);
  const int64_t newest_ns = absl::ToUnixNanos(now + options_.max_future_skew);

  // Samples of a batch almost always share job, pod and size (the batch-level
  // fields), so each lookup is cached until the key changes.
  std::string_view job_key;
  JobState* job = nullptr;
  bool job_looked_up = false;
  uint32_t max_replicas = 0, local_batch = 0;
  PendingSize size_pending;
  PendingPod pod_pending;
  std::string_view pod_key;
  uint64_t pod_next_step = 0;  // cached PodCell::next_step of pod_pending.cell

  for (size_t i = 0; i < samples.size(); ++i) {
    const StepSample& s = samples[i];
    // Views into one batch-level string share the pointer: skip the compare.
    if (!job_looked_up ||
        (s.job_id.data() != job_key.data() && s.job_id != job_key) ||
        s.job_id.size() != job_key.size()) {
      size_pending.Flush();
      pod_pending.Flush();
      pod_key = {};
      job_key = s.job_id;
      auto it = table->jobs.find(Key(s.job_id));
      job = it == table->jobs.end() ? nullptr : it->second;
      job_looked_up = true;
      if (job != nullptr) {
        max_replicas = job->max_replicas.load(std::memory_order_relaxed);
        local_batch = job->local_batch_size.load(std::memory_order_relaxed);
      }
    }
    // Fast validity test; the slow path explains.
    const int64_t ts = s.timestamp_unix_nanos;
    const bool valid = job != nullptr && !s.pod.empty() &&
                       s.pod.size() <= options_.max_pod_name_length &&
                       s.step_seconds >= options_.min_step_seconds &&
                       s.step_seconds <= options_.max_step_seconds &&  // false for NaN
                       s.world_size >= 1 && s.world_size <= max_replicas &&
                       (s.batch_size != 0 || local_batch != 0) &&
                       (ts == 0 || (ts >= oldest_ns && ts <= newest_ns)) &&
                       (!s.step.has_value() || *s.step <= kMaxStep);
    if (!valid) {
      if (job == nullptr && !s.job_id.empty()) ++result.rejected_unknown_job;
      std::string reason = RejectReason(s, job, now);
      if (reason.empty()) reason = "rejected: the job's limits changed while ingesting";
      result.Reject(static_cast<uint32_t>(i), std::move(reason));
      continue;
    }
    if (size_pending.cell == nullptr || size_pending.cell->world_size != s.world_size) {
      size_pending.Flush();
      SizeCell* cell = FindOrAddSize(*job, s.world_size, now_ns);
      if (cell == nullptr) {
        result.RejectForLimit(static_cast<uint32_t>(i),
                      absl::StrFormat("job \"%s\" already has %d distinct world sizes, the limit "
                                      "(--max_sizes_per_job)",
                                      job->job_id, options_.max_sizes_per_job));
        continue;
      }
      size_pending.cell = cell;
      size_pending.job = job;
    }
    if (pod_pending.cell == nullptr || s.pod.size() != pod_key.size() ||
        (s.pod.data() != pod_key.data() && s.pod != pod_key)) {
      pod_pending.Flush();
      PodCell* cell = FindOrAddPod(*job, s.pod);
      if (cell == nullptr) {
        result.RejectForLimit(static_cast<uint32_t>(i),
                      absl::StrFormat("job \"%s\" has %d pods seen within %s, its limit "
                                      "(--max_pods_per_job, or 4 x max_replicas + 16)",
                                      job->job_id, job->pod_limit.load(std::memory_order_relaxed),
                                      absl::FormatDuration(options_.pod_ttl)));
        continue;
      }
      pod_pending.cell = cell;
      pod_key = s.pod;
      pod_next_step = cell->next_step.load(std::memory_order_relaxed);
    }
    // Last check before storing: a claimed step is never given back.
    if (s.step.has_value() && !ClaimStep(pod_pending.cell->next_step, s.world_size, *s.step,
                                         pod_next_step)) {
      ++result.duplicates;
      continue;
    }
    const double x = s.step_seconds;
    const int bin = BinOf(x);
    const int64_t at = ts == 0 ? now_ns : ts;
    ++size_pending.count[bin];
    size_pending.sum[bin] += x;
    size_pending.sum_sq[bin] += x * x;
    size_pending.batch_sum += s.batch_size != 0 ? s.batch_size : local_batch;
    ++size_pending.samples;
    size_pending.last_ns = std::max(size_pending.last_ns, at);
    ++pod_pending.samples;
    pod_pending.step_sum += x;
    pod_pending.world_size = s.world_size;
    pod_pending.last_ns = std::max(pod_pending.last_ns, at);
    ++result.accepted;
  }
  size_pending.Flush();
  pod_pending.Flush();
  return result;
}

void MetricsStore::Tick(absl::Time now) {
  std::lock_guard<std::mutex> lock(admin_mu_);
  const JobTable* table = jobs_.load(std::memory_order_relaxed);
  const int64_t now_ns = absl::ToUnixNanos(now);
  // kSnapshots - 1 periods span the window, so the ring always holds a
  // snapshot from about the window's start.
  const int64_t period_ns = absl::ToInt64Nanoseconds(options_.window / (kSnapshots - 1));
  const int64_t pod_cutoff = absl::ToUnixNanos(now - options_.pod_ttl);
  for (const auto& [id, job] : table->jobs) {
    for (int i = 0; i < job->max_sizes; ++i) {
      SizeCell* cell = job->sizes[i].load(std::memory_order_acquire);
      if (cell == nullptr) break;
      const int newest = (cell->next_snapshot + kSnapshots - 1) % kSnapshots;
      if (cell->snapshot_ns[newest] == kNever || now_ns - cell->snapshot_ns[newest] >= period_ns) {
        cell->snapshots[cell->next_snapshot] = cell->Load();
        cell->snapshot_ns[cell->next_snapshot] = now_ns;
        cell->next_snapshot = (cell->next_snapshot + 1) % kSnapshots;
      }
    }
    PodTable* pods = job->pods.load(std::memory_order_relaxed);
    bool stale = false;
    for (size_t i = 0; i < pods->capacity() && !stale; ++i) {
      PodCell* cell = pods->slots[i].load(std::memory_order_acquire);
      stale = cell != nullptr && cell->last_seen_ns.load(std::memory_order_relaxed) < pod_cutoff;
    }
    if (stale) RebuildPods(*job, now - options_.pod_ttl, pods->capacity());
  }
  ReclaimLocked();
}

const MetricsStore::JobState* MetricsStore::FindLocked(std::string_view job_id) const {
  const JobTable* table = jobs_.load(std::memory_order_relaxed);  // stable under admin_mu_
  auto it = table->jobs.find(Key(job_id));
  return it == table->jobs.end() ? nullptr : it->second;
}

std::vector<SizeStats> MetricsStore::Stats(std::string_view job_id, absl::Time now) const {
  std::vector<SizeStats> out;
  std::lock_guard<std::mutex> lock(admin_mu_);
  const JobState* job = FindLocked(job_id);
  if (job == nullptr) return out;
  const int64_t window_start = absl::ToUnixNanos(now - options_.window);
  for (int i = 0; i < job->max_sizes; ++i) {
    const SizeCell* cell = job->sizes[i].load(std::memory_order_acquire);
    if (cell == nullptr) break;
    const Histogram cumulative = cell->Load();
    // Base of the window: the newest snapshot taken at or before its start.
    // Without one, a cell created inside the window has nothing to subtract;
    // an older cell (Tick has not kept up) uses its oldest snapshot.
    int base = -1;
    bool subtract = true;
    for (int k = 0; k < kSnapshots; ++k) {
      const int64_t t = cell->snapshot_ns[k];
      if (t != kNever && t <= window_start && (base < 0 || t > cell->snapshot_ns[base])) base = k;
    }
    if (base < 0) {
      if (cell->created_ns >= window_start) {
        subtract = false;
      } else {
        for (int k = 0; k < kSnapshots; ++k) {
          const int64_t t = cell->snapshot_ns[k];
          if (t != kNever && (base < 0 || t < cell->snapshot_ns[base])) base = k;
        }
        subtract = base >= 0;
      }
    }
    const Histogram windowed = subtract ? cumulative.Minus(cell->snapshots[base]) : cumulative;
    RobustSummary summary = Summarize(windowed);
    SizeStats stats;
    stats.world_size = cell->world_size;
    stats.sample_count = summary.count;
    stats.lifetime_count = cell->lifetime.load(std::memory_order_relaxed);
    stats.from_window = summary.count > 0;
    if (!stats.from_window) summary = Summarize(cumulative);
    if (summary.count == 0) continue;  // cell created, first flush not visible yet
    stats.step_seconds = summary.mean;
    stats.spread_seconds = summary.spread;
    stats.mean_batch = summary.mean_batch;
    stats.samples_per_second = cell->world_size * summary.mean_batch / summary.mean;
    const int64_t last = cell->last_sample_ns.load(std::memory_order_relaxed);
    stats.last_sample_at = last == kNever ? absl::InfinitePast() : absl::FromUnixNanos(last);
    out.push_back(stats);
  }
  std::sort(out.begin(), out.end(),
            [](const SizeStats& a, const SizeStats& b) { return a.world_size < b.world_size; });
  return out;
}

std::vector<PodStats> MetricsStore::Pods(std::string_view job_id) const {
  std::vector<PodStats> out;
  std::lock_guard<std::mutex> lock(admin_mu_);
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
    p.straggler = it != median.end() && p.recent_step_seconds > options_.straggler_ratio * it->second;
  }
  std::sort(out.begin(), out.end(), [](const PodStats& a, const PodStats& b) { return a.pod < b.pod; });
  return out;
}

uint64_t MetricsStore::SamplesAccepted(std::string_view job_id) const {
  std::lock_guard<std::mutex> lock(admin_mu_);
  const JobState* job = FindLocked(job_id);
  return job == nullptr ? 0 : job->accepted.load(std::memory_order_relaxed);
}

uint64_t MetricsStore::TotalAccepted() const {
  std::lock_guard<std::mutex> lock(admin_mu_);
  uint64_t total = removed_accepted_.load(std::memory_order_relaxed);
  for (const auto& [id, job] : jobs_.load(std::memory_order_relaxed)->jobs) {
    total += job->accepted.load(std::memory_order_relaxed);
  }
  for (const Retired& r : retired_) {
    if (r.job != nullptr) total += r.job->accepted.load(std::memory_order_relaxed);
  }
  return total;
}

int MetricsStore::job_count() const {
  std::lock_guard<std::mutex> lock(admin_mu_);
  return static_cast<int>(jobs_.load(std::memory_order_relaxed)->jobs.size());
}

}  // namespace rescale
