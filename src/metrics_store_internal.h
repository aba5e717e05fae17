// Internal to the metrics store, not installed: the cells and tables the
// lock-free ingest path writes and the statistics read, and the plain
// histogram both sides share. The store is split across
//   metrics_store.cc        registration, table replacement, reclamation
//   metrics_store_ingest.cc the lock-free ingest path (validation, cells,
//                           de-duplication, batched counter updates)
//   metrics_store_stats.cc  window snapshots (Tick), summaries and queries
// The memory-ordering argument is in rescale/metrics_store.h, with each
// step's detail beside the code it justifies.
#ifndef RESCALE_SRC_METRICS_STORE_INTERNAL_H_
#define RESCALE_SRC_METRICS_STORE_INTERNAL_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <iterator>
#include <limits>
#include <memory>
#include <string>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/string_view.h"
#include "rescale/metrics_store.h"

namespace rescale {
namespace metrics_internal {

// "No time yet" in the nanosecond timestamps below.
inline constexpr int64_t kNever = std::numeric_limits<int64_t>::min();
// "No step number in this batch" in PendingSize::min_step.
inline constexpr uint64_t kNoStep = std::numeric_limits<uint64_t>::max();
// JobState::progress_word packs the job's step mark (highest step + 1, 0 =
// none) above the slot + 1 of the size that raised it last (0 = none), so
// one CAS moves both. Steps beyond kMaxProgressStep count as that step.
inline constexpr int kProgressSlotBits = 20;
static_assert(kMaxSizesPerJob < (1 << kProgressSlotBits), "a size slot + 1 must fit its bits");
inline constexpr uint64_t kMaxProgressStep = (uint64_t{1} << (64 - kProgressSlotBits)) - 1;
inline constexpr uint64_t ProgressWord(uint64_t mark, uint64_t slot_plus_one) {
  return (mark << kProgressSlotBits) | slot_plus_one;
}
inline constexpr uint64_t ProgressMark(uint64_t word) { return word >> kProgressSlotBits; }
inline constexpr uint64_t ProgressSlot(uint64_t word) {
  return word & ((uint64_t{1} << kProgressSlotBits) - 1);
}

// Debian's Abseil has its own string_view type; heterogeneous lookups in
// absl containers need it.
inline absl::string_view Key(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// Plain (non-atomic) histogram: what a snapshot or a windowed delta holds.
// Counts are 64-bit like the sums they divide: a 32-bit count wrapped after
// 2^32 samples in one bin while the sums kept growing, so the lifetime mean
// came out billions of times too large.
struct Histogram {
  uint64_t count[MetricsStore::kBins] = {};
  double sum[MetricsStore::kBins] = {};
  double sum_sq[MetricsStore::kBins] = {};
  double batch_sum = 0;
  // Samples that carried gradient statistics, and their sums: |G|^2 and the
  // per-sample gradient noise (grad_var x the batch it was measured over).
  uint64_t grad_count = 0;
  double grad_sqr_sum = 0;
  double grad_noise_sum = 0;

  uint64_t Total() const {
    uint64_t n = 0;
    for (uint64_t c : count) n += c;
    return n;
  }
  // this - older. Counts only grow (never reset), so each difference is
  // exact; 2^64 samples are out of reach.
  Histogram Minus(const Histogram& older) const {
    Histogram d;
    for (int b = 0; b < MetricsStore::kBins; ++b) {
      d.count[b] = count[b] - older.count[b];
      d.sum[b] = d.count[b] == 0 ? 0 : sum[b] - older.sum[b];
      d.sum_sq[b] = d.count[b] == 0 ? 0 : sum_sq[b] - older.sum_sq[b];
    }
    d.batch_sum = batch_sum - older.batch_sum;
    d.grad_count = grad_count - older.grad_count;
    d.grad_sqr_sum = d.grad_count == 0 ? 0 : grad_sqr_sum - older.grad_sqr_sum;
    d.grad_noise_sum = d.grad_count == 0 ? 0 : grad_noise_sum - older.grad_noise_sum;
    return d;
  }
};

struct RobustSummary {
  uint64_t count = 0;
  double mean = 0;
  double spread = 0;
  double mean_batch = 0;
};

// Trimmed mean over the median's octave and its neighbours (see
// rescale/metrics_store.h); in metrics_store_stats.cc.
RobustSummary Summarize(const Histogram& h);

}  // namespace metrics_internal

struct MetricsStore::SizeCell {
  SizeCell(uint32_t size, std::string_view type, int64_t created, int slot_index)
      : world_size(size), gpu_type(type), created_ns(created), slot(slot_index) {
    std::fill(std::begin(snapshot_ns), std::end(snapshot_ns), metrics_internal::kNever);
    // The empty state it starts from is its first snapshot, so Tick need
    // not visit a new size before its first period is up (see Tick).
    snapshot_ns[0] = created;
    next_snapshot = 1;
  }

  metrics_internal::Histogram Load() const {
    metrics_internal::Histogram h;
    for (int b = 0; b < kBins; ++b) {
      // Acquire pairs with the release add in PendingSize::Flush: the sums
      // read next are at least those of the samples counted here.
      h.count[b] = count[b].load(std::memory_order_acquire);
      h.sum[b] = sum[b].load(std::memory_order_relaxed);
      h.sum_sq[b] = sum_sq[b].load(std::memory_order_relaxed);
    }
    h.batch_sum = batch_sum.load(std::memory_order_relaxed);
    // Acquire, as the bin counts: the sums read next cover the samples
    // counted here (PendingSize::Flush adds them first).
    h.grad_count = grad_count.load(std::memory_order_acquire);
    h.grad_sqr_sum = grad_sqr_sum.load(std::memory_order_relaxed);
    h.grad_noise_sum = grad_noise_sum.load(std::memory_order_relaxed);
    return h;
  }

  const uint32_t world_size;
  // The GPU type its samples ran on (empty = not said). A cell is one (type,
  // size): published with the cell, as world_size is.
  const std::string gpu_type;
  const int64_t created_ns;  // ingest time of its first sample
  const int slot;            // index in JobState::sizes, the bit in PodCell::unstepped_sizes
  // Written by ingest (relaxed RMWs), read by anyone.
  // 64-bit relaxed RMWs, lock-free like the 32-bit ones they replace (the
  // static_assert below), so the argument in the header is unchanged.
  std::atomic<uint64_t> count[kBins] = {};
  std::atomic<double> sum[kBins] = {};
  std::atomic<double> sum_sq[kBins] = {};
  std::atomic<double> batch_sum{0};
  // Gradient statistics (Histogram::grad_*): count added with release after
  // the sums, loaded with acquire before them.
  std::atomic<uint64_t> grad_count{0};
  std::atomic<double> grad_sqr_sum{0};
  std::atomic<double> grad_noise_sum{0};
  std::atomic<uint64_t> lifetime{0};
  std::atomic<int64_t> last_sample_ns{metrics_internal::kNever};
  // Progress at this size (ProgressOf in metrics_store_stats.cc): job steps credited here by
  // their numbers, and this size's own step mark (highest step + 1, 0 = none); the samples
  // that carried no step number, and how many distinct pods sent them. How steps are credited,
  // and the argument for the memory orders, are beside PendingSize::CreditSteps in
  // metrics_store_ingest.cc.
  std::atomic<uint64_t> credited_steps{0};
  std::atomic<uint64_t> step_mark{0};
  std::atomic<uint64_t> unstepped{0};
  std::atomic<uint64_t> unstepped_pods{0};
  // Window snapshots; guarded by the store's admin_mu_.
  metrics_internal::Histogram snapshots[kSnapshots];
  int64_t snapshot_ns[kSnapshots];
  int next_snapshot = 0;
};

struct MetricsStore::PodCell {
  PodCell(std::string_view pod_name, size_t name_hash, int size_slots, int64_t now_ns)
      : name(pod_name),
        hash(name_hash),
        unstepped_sizes(std::make_unique<std::atomic<uint64_t>[]>((size_slots + 63) / 64)),
        last_seen_ns(now_ns) {}
  const std::string name;
  const size_t hash;
  // Bit i: the pod has sent a sample without a step number at the size in JobState::sizes[i];
  // set once with fetch_or, so each pod is counted once in SizeCell::unstepped_pods.
  const std::unique_ptr<std::atomic<uint64_t>[]> unstepped_sizes;  // value-initialised: 0
  // Seen at insertion: a pod whose first batch is still being ingested is not
  // stale, so a concurrent Tick does not forget it (and count it again, among
  // the pods without step numbers, when it is re-inserted).
  std::atomic<int64_t> last_seen_ns;
  std::atomic<double> recent_step{0};
  std::atomic<uint32_t> world_size{0};
  std::atomic<uint64_t> count{0};
  // De-duplication mark: the world size of the pod's current run and one
  // past the highest `step` accepted in it; 0 = none (ClaimStep). Kept when the pod table is
  // rebuilt (cells are moved, not copied); lost when the pod is forgotten after pod_ttl.
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

// A job's accepted count, shared with callers that keep a StatsRevision, so
// they can tell whether a job's samples moved without finding the job (one
// load; see StatsIfChanged). `removed` is set when the store forgets the job.
struct MetricsStore::JobCounters {
  std::atomic<uint64_t> accepted{0};
  std::atomic<bool> removed{false};
};

struct MetricsStore::JobState {
  JobState(std::string_view id, uint32_t max_rep, uint32_t batch, int size_slots,
           size_t pod_capacity, int pod_limit_)
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
    for (size_t i = 0; i < table->capacity(); ++i)
      delete table->slots[i].load(std::memory_order_relaxed);
    delete table;
  }

  const std::string job_id;
  std::atomic<uint32_t> max_replicas;
  std::atomic<uint32_t> local_batch_size;
  // Samples accepted (added last in a batch's flush, with release).
  const std::shared_ptr<JobCounters> counters = std::make_shared<JobCounters>();
  // The job's step mark and the size that raised it (ProgressWord).
  std::atomic<uint64_t> progress_word{0};
  const int max_sizes;
  const std::unique_ptr<std::atomic<SizeCell*>[]> sizes;
  std::atomic<PodTable*> pods;
  std::atomic<int> pod_limit;
  // Its key in MetricsStore::pod_due_ (kNever: not filed, no pods then).
  // Under admin_mu_.
  int64_t pod_due_ns = metrics_internal::kNever;
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

static_assert(std::atomic<uint64_t>::is_always_lock_free,
              "the ingest path must not take a lock inside an atomic");

}  // namespace rescale

#endif  // RESCALE_SRC_METRICS_STORE_INTERNAL_H_
