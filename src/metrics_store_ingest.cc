// MetricsStore's ingest path: validation, finding or inserting cells with
// CAS, de-duplication by step, per-size progress marks (step range, pods
// without step numbers), and per-batch accumulation flushed with one
// relaxed RMW per counter. Writers never take a mutex; the argument for each
// atomic is in rescale/metrics_store.h and, for the de-duplication mark,
// beside ClaimStep below.
#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/hash/hash.h"
#include "absl/strings/str_format.h"
#include "metrics_store_internal.h"
#include "rescale/metrics_store.h"
#include "rescale/names.h"

namespace rescale {
namespace {

using metrics_internal::Key;
using metrics_internal::kNever;
using metrics_internal::kNoStep;

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

template <typename T>
inline void MaxRelaxed(std::atomic<T>& target, T value) {
  T old = target.load(std::memory_order_relaxed);
  while (old < value && !target.compare_exchange_weak(old, value, std::memory_order_relaxed)) {
  }
}

template <typename T>
inline void MinRelaxed(std::atomic<T>& target, T value) {
  T old = target.load(std::memory_order_relaxed);
  while (value < old && !target.compare_exchange_weak(old, value, std::memory_order_relaxed)) {
  }
}

}  // namespace

// Per-batch local accumulation, flushed with one RMW per touched counter.
struct MetricsStore::PendingSize {
  SizeCell* cell = nullptr;
  JobState* job = nullptr;
  uint64_t count[kBins] = {};
  double sum[kBins] = {};
  double sum_sq[kBins] = {};
  double batch_sum = 0;
  uint64_t grad_count = 0;
  double grad_sqr_sum = 0;
  double grad_noise_sum = 0;
  uint64_t samples = 0;
  int64_t last_ns = kNever;
  // Progress marks of this batch: its step range and its samples without a step.
  uint64_t min_step = kNoStep;
  uint64_t max_step = 0;
  uint64_t unstepped = 0;

  // Counts `pod` once among the pods that sent samples without a step number
  // at `size`. fetch_or returns the previous bits, and RMWs on one atomic are
  // totally ordered, so exactly one caller sees the pod's bit clear and counts
  // it, however writers race; relaxed, as nothing is published through it. The
  // plain load first keeps the common case (bit already set) free of RMWs.
  static void CountUnsteppedPod(PodCell& pod, SizeCell& size) {
    std::atomic<uint64_t>& word = pod.unstepped_sizes[size.slot / 64];
    const uint64_t bit = uint64_t{1} << (size.slot % 64);
    if ((word.load(std::memory_order_relaxed) & bit) != 0) return;
    if ((word.fetch_or(bit, std::memory_order_relaxed) & bit) == 0) {
      size.unstepped_pods.fetch_add(1, std::memory_order_relaxed);
    }
  }

  // Credits the job steps this batch's step numbers reveal (min_step..
  // max_step, at this size) to the cell, so that each step is credited once
  // and to the size it ran at, also when the job returns to a size it ran at
  // before. Two marks, each "highest step + 1" (0 = none), only ever raised:
  //  * the job's progress word: its mark and the size slot that raised it
  //    last. Step numbers read as the trainer's global step, which
  //    checkpoint-resuming trainers keep across restarts and resizes: a batch
  //    reaching above the mark moved the job forward by max_step + 1 - mark
  //    steps, all at this size (the gap before the batch's first step is a
  //    sampling gap, mostly spent here). A job's first batch credits its own
  //    span: steps before the first report are unknown.
  //  * the cell's mark, for a batch not above the job's mark at a size other
  //    than the one that raised it: a trainer that numbers its steps afresh
  //    after a resize is counted from its first reported step at the new
  //    size, then by how far it rises. At the size that raised the job's
  //    mark, such a batch is out of order and credits nothing.
  // Exactly once: successful CASes on one atomic are totally ordered and each
  // credits (or claims) the interval between the value it replaced and the one
  // it wrote, so the intervals credited through one mark are disjoint,
  // however writers race. Every batch claims its interval in the cell's mark
  // first, so a fallback credit never reuses an interval the cell claimed
  // before. Memory orders: that claim is sequenced before the acq_rel CAS on
  // the job's word, and the word is loaded with acquire, so a writer that
  // reads the word sees every cell claim made before the word's value was
  // written (a happens-before chain through the CASes): a fallback credit at
  // a size never overlaps an interval the same size credited through the
  // job's mark. Across sizes no such order exists: a late sample from a size
  // the job left, between that size's mark and the job's, is credited at both
  // (at most one sampling gap). The credits themselves are relaxed counters.
  void CreditSteps() {
    using metrics_internal::kMaxProgressStep;
    const uint64_t last = std::min(max_step, kMaxProgressStep - 1) + 1;
    const uint64_t first = std::min(min_step, last - 1);
    uint64_t claimed_from = cell->step_mark.load(std::memory_order_relaxed);
    while (claimed_from < last &&
           !cell->step_mark.compare_exchange_weak(claimed_from, last, std::memory_order_relaxed)) {
    }
    const bool claimed = claimed_from < last;
    const uint64_t own_slot = static_cast<uint64_t>(cell->slot) + 1;
    uint64_t word = job->progress_word.load(std::memory_order_acquire);
    while (true) {
      const uint64_t mark = metrics_internal::ProgressMark(word);
      if (last <= mark) break;
      if (job->progress_word.compare_exchange_weak(
              word, metrics_internal::ProgressWord(last, own_slot), std::memory_order_acq_rel,
              std::memory_order_acquire)) {
        cell->credited_steps.fetch_add(last - (mark == 0 ? first : mark),
                                       std::memory_order_relaxed);
        return;
      }
    }
    if (claimed && metrics_internal::ProgressSlot(word) != own_slot) {
      cell->credited_steps.fetch_add(last - (claimed_from == 0 ? first : claimed_from),
                                     std::memory_order_relaxed);
    }
  }

  void Flush() {
    if (samples == 0) return;
    if (min_step <= max_step) CreditSteps();
    if (unstepped != 0) cell->unstepped.fetch_add(unstepped, std::memory_order_relaxed);
    // Sums before counts, each bin's count added with release (SizeCell::Load
    // loads it with acquire): a reader that counts a sample also sees its
    // sums, so a size with samples never reads as 0 s or 0 samples/s.
    AddRelaxed(cell->batch_sum, batch_sum);
    if (grad_count != 0) {
      AddRelaxed(cell->grad_sqr_sum, grad_sqr_sum);
      AddRelaxed(cell->grad_noise_sum, grad_noise_sum);
      cell->grad_count.fetch_add(grad_count, std::memory_order_release);
    }
    for (int b = 0; b < kBins; ++b) {
      if (count[b] == 0) continue;
      AddRelaxed(cell->sum[b], sum[b]);
      AddRelaxed(cell->sum_sq[b], sum_sq[b]);
      cell->count[b].fetch_add(count[b], std::memory_order_release);
    }
    cell->lifetime.fetch_add(samples, std::memory_order_relaxed);
    MaxRelaxed(cell->last_sample_ns, last_ns);
    // Last, with release: StatsIfChanged's revision counts a batch only once
    // all of it is visible (see StatsRevisionLocked).
    job->counters->accepted.fetch_add(samples, std::memory_order_release);
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

MetricsStore::SizeCell* MetricsStore::FindOrAddSize(JobState& job, uint32_t world_size,
                                                    std::string_view gpu_type, int64_t now_ns) {
  for (int i = 0; i < job.max_sizes; ++i) {
    SizeCell* cell = job.sizes[i].load(std::memory_order_acquire);
    if (cell == nullptr) {
      auto fresh = std::make_unique<SizeCell>(world_size, gpu_type, now_ns, i);
      if (job.sizes[i].compare_exchange_strong(cell, fresh.get(), std::memory_order_release,
                                               std::memory_order_acquire)) {
        return fresh.release();
      }
      // Lost the race: `cell` now holds the winner; it may be our size.
    }
    if (cell->world_size == world_size && cell->gpu_type == gpu_type) return cell;
  }
  return nullptr;
}

MetricsStore::PodCell* MetricsStore::FindOrAddPod(JobState& job, std::string_view pod,
                                                  int64_t now_ns) {
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
      auto fresh = std::make_unique<PodCell>(pod, hash, job.max_sizes, now_ns);
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

// Gradient statistics above this are a unit error or a diverged run: the
// bound keeps every sum (at most 2^64 samples x 2^32 grad_batch x 1e30, about
// 1e59) finite, so a window's difference of sums never becomes inf - inf.
constexpr double kMaxGradientValue = 1e30;

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
    return absl::StrFormat("step_seconds must be a positive finite number, got %g", s.step_seconds);
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
  if (!s.gpu_type.empty() && !IsGpuTypeName(s.gpu_type))
    return GpuTypeNameError("gpu_type", s.gpu_type);
  if (s.batch_size == 0 && job->local_batch_size.load(std::memory_order_relaxed) == 0) {
    return "batch_size is 0 and the job has no local_batch_size to default to";
  }
  if (s.grad_sqr.has_value() != s.grad_var.has_value()) {
    return s.grad_sqr.has_value() ? "grad_sqr is set without grad_var (set both or neither)"
                                  : "grad_var is set without grad_sqr (set both or neither)";
  }
  for (const auto& [name, value] : {std::pair{"grad_sqr", s.grad_sqr}, {"grad_var", s.grad_var}}) {
    if (!value.has_value()) continue;
    if (!std::isfinite(*value) || *value < 0) {
      return absl::StrFormat("%s must be a finite number >= 0, got %g", name, *value);
    }
    if (*value > kMaxGradientValue) {
      return absl::StrFormat("%s %g exceeds the limit of %g", name, *value, kMaxGradientValue);
    }
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
    if (!job_looked_up || (s.job_id.data() != job_key.data() && s.job_id != job_key) ||
        s.job_id.size() != job_key.size()) {
      size_pending.Flush();
      pod_pending.Flush();
      pod_key = {};
      job_key = s.job_id;
      // Loaded inside the epoch guard, as the argument beside EpochDomain
      // asks: the shard's table (and the JobState it finds) outlive the batch.
      const JobTable* table = jobs_[TableShardOf(s.job_id)].load(std::memory_order_seq_cst);
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
                       (!s.step.has_value() || *s.step <= kMaxStep) &&
                       s.grad_sqr.has_value() == s.grad_var.has_value() &&
                       (!s.grad_sqr.has_value() ||
                        (*s.grad_sqr >= 0 && *s.grad_sqr <= kMaxGradientValue &&  // false for NaN
                         *s.grad_var >= 0 && *s.grad_var <= kMaxGradientValue));
    if (!valid) {
      if (job == nullptr && !s.job_id.empty()) ++result.rejected_unknown_job;
      std::string reason = RejectReason(s, job, now);
      if (reason.empty()) reason = "rejected: the job's limits changed while ingesting";
      result.Reject(static_cast<uint32_t>(i), std::move(reason));
      continue;
    }
    if (size_pending.cell == nullptr || size_pending.cell->world_size != s.world_size ||
        size_pending.cell->gpu_type != s.gpu_type) {
      // A type is checked once per cell it opens, not once per sample: a
      // cell exists only for a valid name.
      if (!s.gpu_type.empty() && !IsGpuTypeName(s.gpu_type)) {
        result.Reject(static_cast<uint32_t>(i), GpuTypeNameError("gpu_type", s.gpu_type));
        continue;
      }
      size_pending.Flush();
      SizeCell* cell = FindOrAddSize(*job, s.world_size, s.gpu_type, now_ns);
      if (cell == nullptr) {
        result.RejectForLimit(
            static_cast<uint32_t>(i),
            absl::StrFormat("job \"%s\" already has %d distinct (GPU type, world size) pairs, "
                            "the limit "
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
      PodCell* cell = FindOrAddPod(*job, s.pod, now_ns);
      if (cell == nullptr) {
        result.RejectForLimit(
            static_cast<uint32_t>(i),
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
    if (s.step.has_value() &&
        !ClaimStep(pod_pending.cell->next_step, s.world_size, *s.step, pod_next_step)) {
      ++result.duplicates;
      continue;
    }
    if (s.step.has_value()) {
      size_pending.min_step = std::min(size_pending.min_step, *s.step);
      size_pending.max_step = std::max(size_pending.max_step, *s.step);
    } else {
      ++size_pending.unstepped;
      PendingSize::CountUnsteppedPod(*pod_pending.cell, *size_pending.cell);
    }
    const double x = s.step_seconds;
    const int bin = BinOf(x);
    const int64_t at = ts == 0 ? now_ns : ts;
    ++size_pending.count[bin];
    size_pending.sum[bin] += x;
    size_pending.sum_sq[bin] += x * x;
    const double batch = s.batch_size != 0 ? s.batch_size : local_batch;
    size_pending.batch_sum += batch;
    if (s.grad_sqr.has_value()) {
      // grad_var is the variance of a gradient averaged over grad_batch
      // samples; times that batch it is the per-sample noise, which does
      // not depend on the batch it was measured at.
      const double measured_over =
          s.grad_batch != 0 ? s.grad_batch : static_cast<double>(s.world_size) * batch;
      ++size_pending.grad_count;
      size_pending.grad_sqr_sum += *s.grad_sqr;
      size_pending.grad_noise_sum += *s.grad_var * measured_over;
    }
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

}  // namespace rescale
