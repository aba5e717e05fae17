// MetricsStore: registration of jobs, replacement of the job and pod tables,
// and reclamation of what they retire (see rescale/metrics_store.h for the
// design and the memory-ordering argument). The lock-free ingest path is in
// metrics_store_ingest.cc, window snapshots and queries in
// metrics_store_stats.cc.
#include "rescale/metrics_store.h"

#include <algorithm>
#include <bit>
#include <memory>
#include <string>

#include "absl/hash/hash.h"
#include "absl/strings/str_format.h"
#include "metrics_store_internal.h"

namespace rescale {
namespace {

using metrics_internal::Key;
using metrics_internal::kNever;

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

}  // namespace

MetricsStore::MetricsStore(MetricsStoreOptions options)
    : options_(options), epochs_(EpochDomain::Global()) {
  for (auto& shard : jobs_) shard.store(new JobTable(), std::memory_order_relaxed);
}

MetricsStore::~MetricsStore() {
  // Precondition: no concurrent calls, so everything can go at once.
  for (auto& shard : jobs_) {
    const JobTable* table = shard.load(std::memory_order_relaxed);
    for (const auto& [id, job] : table->jobs) delete job;
    delete table;
  }
  WriterMutexLock lock(admin_mu_);
  for (Retired& r : retired_) FreeRetired(r);
}

absl::Status MetricsStore::AddJob(std::string_view job_id, uint32_t max_replicas,
                                  uint32_t local_batch_size) {
  WriterMutexLock lock(admin_mu_);
  const size_t shard = TableShardOf(job_id);
  const JobTable* current = jobs_[shard].load(std::memory_order_relaxed);  // only we replace it
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
  if (job_count_ >= options_.max_jobs) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "the metrics store holds %d jobs, its limit (--max_jobs)", options_.max_jobs));
  }
  const int pod_limit = PodLimitFor(max_replicas, options_.max_pods_per_job);
  auto next = std::make_unique<JobTable>(*current);
  next->jobs.emplace(std::string(job_id), new JobState(job_id, max_replicas, local_batch_size,
                                                       options_.max_sizes_per_job,
                                                       PodCapacityFor(pod_limit), pod_limit));
  PublishTable(shard, std::move(next));
  ++job_count_;
  ReclaimLocked();
  return absl::OkStatus();
}

void MetricsStore::RemoveJob(std::string_view job_id) {
  WriterMutexLock lock(admin_mu_);
  const size_t shard = TableShardOf(job_id);
  const JobTable* current = jobs_[shard].load(std::memory_order_relaxed);
  auto it = current->jobs.find(Key(job_id));
  if (it == current->jobs.end()) return;
  JobState* job = it->second;
  if (job->pod_due_ns != metrics_internal::kNever) pod_due_.erase({job->pod_due_ns, job});
  // Holders of a StatsRevision learn it without a lookup (release: their
  // acquire load that sees it then takes the slow path, which finds no job).
  job->counters->removed.store(true, std::memory_order_release);
  auto next = std::make_unique<JobTable>(*current);
  next->jobs.erase(Key(job_id));
  PublishTable(shard, std::move(next));
  --job_count_;
  Retired retired;
  retired.epoch = epochs_.Advance();
  retired.job.reset(job);
  RetireLocked(std::move(retired));
  ReclaimLocked();
}

size_t MetricsStore::TableShardOf(std::string_view job_id) {
  return absl::HashOf(Key(job_id)) % kTableShards;
}

void MetricsStore::PublishTable(size_t shard, std::unique_ptr<JobTable> table) {
  const JobTable* old = jobs_[shard].exchange(table.release(), std::memory_order_seq_cst);
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
    while (fresh->slots[slot].load(std::memory_order_relaxed) != nullptr)
      slot = (slot + 1) & fresh->mask;
    fresh->slots[slot].store(cell,
                             std::memory_order_relaxed);  // published by the seq_cst store below
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
    removed_accepted_.fetch_add(r.job->counters->accepted.load(std::memory_order_relaxed),
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

}  // namespace rescale
