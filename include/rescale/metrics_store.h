// MetricsStore: lock-free ingest of step-time samples, and the windowed,
// robust per-job statistics the planner reads.
//
// Shape. A copy-on-write table maps job ids to JobStates. A JobState holds a
// fixed array of per-world-size cells (SizeCell) and an open-addressed table
// of per-pod cells (PodCell). Writers find or insert cells with CAS and add
// to them with atomic read-modify-writes; they never take a mutex. Readers
// (planner, queries) and the administrative path (register, deregister,
// Tick) synchronise on `admin_mu_` (shared by readers, exclusive for the
// administrative path), which writers never touch.
//
// Statistics. A SizeCell keeps cumulative (never reset) per-bin histograms of
// step time: octave bins, each with count, sum and sum of squares. Tick()
// copies the cumulative state into a ring of kSnapshots snapshots, one per
// window/(kSnapshots-1); a windowed aggregate is the cumulative state minus
// the newest snapshot taken at or before the window's start. Writers therefore never reset
// anything, and no sample is lost or counted twice by a window rotation.
// The robust central step time is the mean over the median's bin and its two
// neighbours: a sample 10x off the median lies at least three octaves away
// and is trimmed, so one outlier moves the estimate by at most one rank.
//
// Progress. Each size cell also counts the job steps credited to it by
// their step numbers, and the samples without a step number with the
// distinct pods that sent them; SamplesProcessed turns these into job
// samples (ProgressOf in metrics_store_stats.cc says how). Step numbers are
// read as the trainer's global step (kept across restarts and resizes by a
// trainer that resumes from its checkpoint): a batch is credited, at its
// size, with how far it moved the job's highest step. Robust to pods that
// report only some steps, to only some pods reporting, to resends with step
// numbers, and to a job returning to a size it ran at before. A trainer that
// numbers its steps afresh after a resize is counted at the new size from
// its first reported step on (until it passes the old numbering), but not
// when it returns to a size it ran at before (its steps there count only
// once they pass that size's earlier ones). Not robust to resends without
// step numbers (counted twice), or to a pod forgotten after pod_ttl that
// returns without step numbers (counted as a second pod: an underestimate).
// Samples at a (GPU type, size) beyond max_sizes_per_job are rejected, so their progress
// is lost: the total is then a lower bound.
//
// Thread safety and memory ordering (the argument, per atomic):
//  * jobs_ (the table pointers, one per shard) and JobState::pods (the pod-table pointer) are
//    loaded and stored seq_cst, and the objects they point to are freed only
//    through EpochDomain (see epoch.h for why that is safe).
//  * SizeCell / PodCell pointers in their tables are published with a
//    release CAS and loaded with acquire, so a writer that finds a cell also
//    sees its constructor's writes (world_size, pod name). Slots are filled
//    once and never emptied in place (only whole pod tables are replaced),
//    so "first empty slot" insertion cannot create duplicates: a writer that
//    loses the CAS re-examines the slot the winner filled.
//  * Statistic counters are relaxed: nothing else is published through them,
//    each is individually exact (atomic RMW), and a reader may see one batch
//    half-applied across counters — harmless for a statistic and exact again
//    as soon as the batch's RMWs are done. Exactly-once accounting holds per
//    counter: every accepted sample is added to its job's `accepted` once.
//    Two exceptions: a histogram bin's count is added with release after the
//    batch's sums, and read with acquire before them, so a reader's sums are
//    never behind its counts (release sequences: later RMWs of the count by
//    other writers keep the edge), and a size with samples never reads as a
//    zero step time or throughput; and the job's `accepted` (below).
//  * De-duplication: each PodCell holds a mark, the world size of the pod's
//    current run and one past the highest `step` accepted in it, moved by a
//    relaxed CAS loop (a fetch-max within a run, a reset when the world size
//    changes, since resized training may number its steps afresh). A sample
//    is stored only if its CAS succeeded, and successful CASes on one atomic
//    are totally ordered and claim disjoint step intervals, so no step of a
//    pod is stored twice, however writers race; relaxed is enough because
//    nothing else is published through the mark (argument in full beside
//    ClaimStep in metrics_store_ingest.cc).
//  * Progress marks: the job's progress word is raised by an acq_rel CAS
//    and loaded with acquire, after the batch claimed its steps in its
//    size's mark (relaxed CAS), so credits through the two marks never
//    overlap at one size (argument beside PendingSize::CreditSteps in
//    metrics_store_ingest.cc). Credited steps, unstepped samples and pods
//    (counters) and a pod's unstepped-size bits (fetch_or) are relaxed:
//    each is individually exact, nothing is published through them
//    (argument beside CountUnsteppedPod).
//  * A job's `accepted` counter is added last in a batch's flush, with
//    release, and loaded with acquire by StatsIfChanged: a revision that
//    counts a batch sees all of it (argument beside StatsRevisionLocked).
//    StatsIfChanged's lock-free "unchanged" answer rests on the same load,
//    plus the roll generation and the removed flag (argument beside it).
//  * Gradient statistics (SizeCell::grad_*) follow the bins' rule: the sums
//    are added first (relaxed), the count last with release, and Load reads
//    the count with acquire before the sums, so a reader that counts a
//    sample's statistics also sees them.
//  * The limits in JobState (max_replicas, local_batch_size) are relaxed
//    atomics: a sample racing with UpdateJob is validated against the old or
//    the new limit, either of which was valid at some instant.
#ifndef RESCALE_METRICS_STORE_H_
#define RESCALE_METRICS_STORE_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "rescale/epoch.h"
#include "rescale/mutex.h"
#include "rescale/types.h"

namespace rescale {

// The most sizes one job's progress marks can tell apart (20 bits).
inline constexpr int kMaxSizesPerJob = (1 << 20) - 1;

struct MetricsStoreOptions {
  // Span of the windowed statistics; older data is dropped, in steps of
  // window / 6, as Tick() runs.
  absl::Duration window = absl::Minutes(10);
  // Span of the gradient noise scale (GradientNoiseScale); 0 = one step of
  // the window (window / 6, the finest its snapshots resolve). Shorter than
  // the step-time window because the noise scale moves with training, often
  // tenfold within ten minutes early on, and a ratio of sums over a long
  // span is ruled by its oldest samples, whose |G|^2 is largest: over the
  // whole window the simulator's cifar10 job read 0.31 where its true
  // efficiency was 0.74. AdaptDL's own smoothing (0.999 per step at M0)
  // forgets in about a thousand steps, tens of seconds for cifar10.
  absl::Duration gradient_window = absl::ZeroDuration();
  // Samples stamped earlier than this before ingest are rejected.
  absl::Duration max_sample_age = absl::Minutes(10);
  // Samples stamped further than this in the future are rejected (skew).
  absl::Duration max_future_skew = absl::Minutes(1);
  // Plausible step_seconds; outside is a unit error or a broken reporter.
  double min_step_seconds = 1e-6;
  double max_step_seconds = 3600;
  // Pod names longer than this are rejected (Kubernetes names are <= 253).
  size_t max_pod_name_length = 253;
  // Pods unseen for this long are forgotten by Tick().
  absl::Duration pod_ttl = absl::Minutes(5);
  // Limits that bound memory. Samples beyond them are rejected with a reason.
  int max_jobs = 10'000;
  int max_pods_per_job = 1024;
  int max_sizes_per_job = 64;  // at most kMaxSizesPerJob
  // A pod whose recent step time exceeds the gang median by this factor is
  // reported as a straggler.
  double straggler_ratio = 1.5;
};

// Aggregate of the samples measured at one world size.
struct SizeStats {
  uint32_t world_size = 0;
  // The GPU type it ran on (StepSample::gpu_type; empty = not said). Sizes
  // are kept per (type, size), ordered by type, then size.
  std::string gpu_type = {};
  // Samples inside the window, and since the size was first seen.
  uint64_t sample_count = 0;
  uint64_t lifetime_count = 0;
  // Robust (trimmed) mean step time and the spread (standard deviation of the
  // same trimmed samples), seconds. Over the window when it holds samples,
  // else over the lifetime (then `from_window` is false).
  double step_seconds = 0;
  double spread_seconds = 0;
  // Mean samples per pod-step.
  double mean_batch = 0;
  // Job steps and samples processed at this size since it was first seen
  // (see "Progress" above MetricsStore); exact once concurrent Ingest calls
  // have returned (while they run, off by the batches in flight).
  uint64_t steps_processed = 0;
  uint64_t samples_processed = 0;
  // Job throughput at this size: world_size x mean_batch / step_seconds.
  double samples_per_second = 0;
  // Gradient statistics reported with the samples (goodput.h), averaged
  // over the window when it holds some, else over the lifetime: how many
  // samples carried them, the mean |G|^2, and the mean per-sample gradient
  // noise (grad_var x the batch it was measured over; divided by a batch M
  // it is the variance at M). 0 when none.
  uint64_t gradient_count = 0;
  double gradient_sqr = 0;
  double gradient_noise = 0;
  bool from_window = false;
  absl::Time last_sample_at = absl::InfinitePast();
};

using PodStats = PodStatus;

class MetricsStore {
 public:
  // Octaves 2^-10 s (about 1 ms) to 2^10 s; samples outside go to the end
  // bins, whose sums stay exact.
  static constexpr int kBins = 20;
  static constexpr int kMinOctave = -10;
  // Window snapshots, one per window / (kSnapshots - 1).
  static constexpr int kSnapshots = 7;

  explicit MetricsStore(MetricsStoreOptions options = {});
  ~MetricsStore();
  MetricsStore(const MetricsStore&) = delete;
  MetricsStore& operator=(const MetricsStore&) = delete;

  // Starts accepting samples for `job_id`, or updates its limits when known
  // (data is kept). RESOURCE_EXHAUSTED beyond max_jobs.
  absl::Status AddJob(std::string_view job_id, uint32_t max_replicas, uint32_t local_batch_size);
  // Forgets the job and all its data (memory is reclaimed once no writer can
  // still be inside it).
  void RemoveJob(std::string_view job_id);

  // Validates and stores samples; never blocks. `now` stamps samples whose
  // timestamp is 0 and bounds their age. Each sample is accepted, rejected
  // with a reason naming the field and the limit, or — when it carries a
  // `step` not above the highest step already accepted for its pod at the
  // same world size (a new world size starts afresh) — counted
  // as a duplicate and not stored (see StepSample::step).
  IngestResult Ingest(std::span<const StepSample> samples, absl::Time now);

  // Rotates window snapshots, forgets pods unseen for pod_ttl and frees
  // memory retired by earlier removals. Call periodically (the engine does,
  // before each plan); statistics age only as Tick runs.
  void Tick(absl::Time now);

  // Per-size statistics of a job, ordered by world size. Empty if unknown.
  std::vector<SizeStats> Stats(std::string_view job_id, absl::Time now) const;
  struct JobCounters;
  // Where a job's statistics stood when StatsIfChanged last looked, for the
  // caller to keep. Besides the revision itself it holds what lets the next
  // call answer "unchanged" without finding the job: the job's accepted
  // counter (shared) and its value then, the store's roll generation (Tick
  // passes that took snapshots) and the window start before which no
  // size's window base can move with time alone.
  struct StatsRevision {
    uint64_t value = 0;  // 0 = never set
    std::shared_ptr<const JobCounters> counters;
    uint64_t accepted = 0;
    uint64_t roll_generation = 0;
    int64_t bases_valid_before_ns = 0;
    friend bool operator==(const StatsRevision&, const StatsRevision&) = default;
  };
  // Stats(job_id, now) when it may differ from what it was when `revision`
  // was set here (default = never), updating `revision`; nullopt when it
  // cannot differ: no sample was accepted for the job since and its window
  // has the same bases. Lets a caller keep what it derives from the
  // statistics (the engine's fitted curves) until they move. An unchanged
  // job costs two loads and no lock while no Tick took snapshots and time
  // moved no window base; otherwise a lookup and a pass over its sizes.
  std::optional<std::vector<SizeStats>> StatsIfChanged(std::string_view job_id, absl::Time now,
                                                       StatsRevision& revision) const;
  // The job's live pods, ordered by name, with stragglers flagged.
  std::vector<PodStats> Pods(std::string_view job_id) const;
  // Samples accepted for the job since AddJob (0 if unknown).
  uint64_t SamplesAccepted(std::string_view job_id) const;
  // Training samples the job has processed, summed over its sizes (see
  // "Progress" above); 0 if unknown.
  uint64_t SamplesProcessed(std::string_view job_id) const;
  // The job's gradient noise scale, in samples: the mean per-sample
  // gradient noise over the mean |G|^2 of the samples that carried gradient
  // statistics, over the gradient window (MetricsStoreOptions::
  // gradient_window) when it holds some, else over the window, else over
  // the lifetime. nullopt when unknown, none did, or |G|^2 is 0.
  std::optional<double> GradientNoiseScale(std::string_view job_id, absl::Time now) const;
  // Samples accepted for all jobs ever, removed ones included. Exact once
  // concurrent Ingest calls have returned.
  uint64_t TotalAccepted() const;
  int job_count() const;

 private:
  // Tests reach a size cell's counters to take them past 2^32 samples
  // without ingesting that many (tests/metrics_store_test.cc).
  friend class MetricsStoreTestPeer;

  struct SizeCell;
  struct PodCell;
  struct PodTable;
  struct JobState;
  struct JobTable;
  struct Retired;
  struct PendingSize;
  struct PendingPod;
  struct Progress {
    uint64_t steps = 0;
    uint64_t samples = 0;
  };
  // The snapshot a windowed statistic subtracts (index -1: none) and when
  // it was taken.
  struct WindowBase {
    int index = -1;
    int64_t taken_ns = 0;
  };
  static WindowBase BaseOf(const SizeCell& cell, int64_t window_start);
  std::vector<SizeStats> StatsLocked(const JobState& job, int64_t window_start) const
      ABSL_SHARED_LOCKS_REQUIRED(admin_mu_);
  StatsRevision StatsRevisionLocked(const JobState& job, int64_t window_start) const
      ABSL_SHARED_LOCKS_REQUIRED(admin_mu_);
  static Progress ProgressOf(const SizeCell& cell);
  void FreeRetired(Retired& retired);

  std::string RejectReason(const StepSample& sample, const JobState* job, absl::Time now) const;
  // Null when the job already has max_sizes_per_job sizes.
  SizeCell* FindOrAddSize(JobState& job, uint32_t world_size, std::string_view gpu_type,
                          int64_t now_ns);
  // Null when the job's pod limit is reached.
  PodCell* FindOrAddPod(JobState& job, std::string_view pod, int64_t now_ns);

  // The job table is split in kTableShards by a hash of the job id, each
  // replaced whole (copy-on-write) when a job is added or removed there:
  // registering a job copies 1/kTableShards of the jobs, not all of them.
  static constexpr int kTableShards = 64;
  static size_t TableShardOf(std::string_view job_id);
  // Replaces shard `shard` of the job table; the old one is retired.
  void PublishTable(size_t shard, std::unique_ptr<JobTable> table)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(admin_mu_);
  // Rebuilds a job's pod table without pods unseen since `forget_before`,
  // with room for `capacity` slots.
  void RebuildPods(JobState& job, absl::Time forget_before, size_t capacity)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(admin_mu_);
  void RetireLocked(Retired retired) ABSL_EXCLUSIVE_LOCKS_REQUIRED(admin_mu_);
  // Frees retired objects no reader can still reach.
  void ReclaimLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(admin_mu_);
  const JobState* FindLocked(std::string_view job_id) const ABSL_SHARED_LOCKS_REQUIRED(admin_mu_);

  const MetricsStoreOptions options_;
  EpochDomain& epochs_;

  // The current job table, by shard; each replaced (never mutated) under
  // admin_mu_.
  std::array<std::atomic<const JobTable*>, kTableShards> jobs_;
  int job_count_ ABSL_GUARDED_BY(admin_mu_) = 0;

  // Exclusive for changes (AddJob, RemoveJob, Tick), shared by queries:
  // a plan reading 10,000 jobs' statistics never makes a GetJob wait,
  // even when the plan's thread is preempted holding it.
  mutable SharedMutex admin_mu_;
  std::vector<Retired> retired_ ABSL_GUARDED_BY(admin_mu_);
  // When Tick next passes over every job (see Tick).
  int64_t next_full_pass_ns_ ABSL_GUARDED_BY(admin_mu_) = 0;
  // Jobs by the earliest moment one of their pods can go stale (JobState::
  // pod_due_ns), so that Tick between full passes visits only those.
  std::set<std::pair<int64_t, JobState*>> pod_due_ ABSL_GUARDED_BY(admin_mu_);
  // Forgets the job's pods unseen since now - pod_ttl and files it in
  // pod_due_ under its next due time.
  void ExpirePodsLocked(JobState& job, int64_t now_ns) ABSL_EXCLUSIVE_LOCKS_REQUIRED(admin_mu_);
  // Tick passes that took window snapshots (which may move a window base),
  // bumped once per table shard whose jobs got one: a StatsRevision from an
  // older generation is checked the slow way. Written under admin_mu_
  // (exclusive) after that shard's snapshots, with release.
  std::atomic<uint64_t> roll_generation_{0};
  // `accepted` of jobs freed after removal, so TotalAccepted stays exact.
  std::atomic<uint64_t> removed_accepted_{0};
};

}  // namespace rescale

#endif  // RESCALE_METRICS_STORE_H_
