// Tests of rescale::MetricsStore: each sample of a batch is accepted or
// rejected on its own with a reason naming the field and the limit, and the
// valid rest of the batch is still stored; rejections carry the sample's
// index and at most 16 are reported while `rejected` counts all. Stats give
// the (robust) mean step time and the whole-gang throughput per world size.
// All ingests use a fixed absl::Time so ages and skews are deterministic.
#include "rescale/metrics_store.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <limits>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/time/time.h"
#include "src/metrics_store_internal.h"

namespace rescale {
namespace {

using Catch::Matchers::Contains;

const absl::Time kNow = absl::FromUnixSeconds(1'700'000'000);
const std::string kJob = "ns/job";

StepSample Sample(uint32_t world_size = 2, double step_seconds = 0.5, uint32_t batch = 32) {
  StepSample s;
  s.job_id = kJob;
  s.pod = "job-worker-0";
  s.world_size = world_size;
  s.step_seconds = step_seconds;
  s.batch_size = batch;
  return s;
}

int64_t NanosAt(absl::Time t) { return absl::ToUnixNanos(t); }

TEST_CASE("store accepts valid samples and counts them") {
  MetricsStore store;
  REQUIRE(store.AddJob(kJob, 8, 32).ok());
  std::vector<StepSample> batch = {Sample(), Sample(4, 0.6, 32)};
  IngestResult r = store.Ingest(batch, kNow);
  CHECK(r.accepted == 2);
  CHECK(r.rejected == 0);
  CHECK(r.rejections.empty());
  CHECK(store.SamplesAccepted(kJob) == 2);
}

TEST_CASE("store rejects each bad sample with its index and reason while accepting the rest") {
  MetricsStore store;
  REQUIRE(store.AddJob(kJob, 8, /*local_batch_size=*/0).ok());

  struct Bad {
    StepSample sample;
    std::string reason_fragment;
  };
  std::vector<Bad> bads;
  {
    StepSample s = Sample();
    s.job_id = "ns/unknown";
    bads.push_back({s, "job_id \"ns/unknown\" is not registered"});
  }
  {
    StepSample s = Sample();
    s.job_id = "";
    bads.push_back({s, "job_id is empty"});
  }
  {
    StepSample s = Sample();
    s.pod = "";
    bads.push_back({s, "pod is empty"});
  }
  const std::string long_pod(254, 'p');  // StepSample holds a view of it
  {
    StepSample s = Sample();
    s.pod = long_pod;
    bads.push_back({s, "pod name has 254 characters; the limit is 253"});
  }
  bads.push_back(
      {Sample(2, std::nan("")), "step_seconds must be a positive finite number, got nan"});
  bads.push_back({Sample(2, std::numeric_limits<double>::infinity()),
                  "step_seconds must be a positive finite number, got inf"});
  bads.push_back({Sample(2, 0), "step_seconds must be a positive finite number, got 0"});
  bads.push_back({Sample(2, -0.5), "step_seconds must be a positive finite number, got -0.5"});
  bads.push_back(
      {Sample(2, 4000), "step_seconds 4000 is outside the plausible range [1e-06, 3600]"});
  bads.push_back(
      {Sample(2, 1e-7), "step_seconds 1e-07 is outside the plausible range [1e-06, 3600]"});
  bads.push_back({Sample(0), "world_size must be at least 1"});
  bads.push_back({Sample(9), "world_size 9 exceeds the job's max_replicas 8"});
  bads.push_back({Sample(2, 0.5, 0), "batch_size is 0 and the job has no local_batch_size"});
  {
    StepSample s = Sample();
    s.timestamp_unix_nanos = NanosAt(kNow + absl::Minutes(2));
    bads.push_back({s, "timestamp_unix_nanos is 2m in the future; the limit is 1m"});
  }
  {
    StepSample s = Sample();
    s.timestamp_unix_nanos = NanosAt(kNow - absl::Minutes(11));
    bads.push_back({s, "timestamp_unix_nanos is 11m old; the limit is 10m"});
  }
  REQUIRE(bads.size() <= IngestResult::kMaxReportedRejections);

  // Interleave: good at even indices, bad at odd ones.
  std::vector<StepSample> batch;
  std::vector<uint32_t> bad_indices;
  for (const Bad& b : bads) {
    batch.push_back(Sample());
    bad_indices.push_back(static_cast<uint32_t>(batch.size()));
    batch.push_back(b.sample);
  }
  batch.push_back(Sample());

  IngestResult r = store.Ingest(batch, kNow);
  CHECK(r.accepted == bads.size() + 1);
  CHECK(r.rejected == bads.size());
  REQUIRE(r.rejections.size() == bads.size());
  for (size_t i = 0; i < bads.size(); ++i) {
    CAPTURE(i, r.rejections[i].reason);
    CHECK(r.rejections[i].index == bad_indices[i]);
    CHECK_THAT(r.rejections[i].reason, Contains(bads[i].reason_fragment));
  }
  CHECK(store.SamplesAccepted(kJob) == bads.size() + 1);
  std::vector<SizeStats> stats = store.Stats(kJob, kNow);
  REQUIRE(stats.size() == 1);
  CHECK(stats[0].world_size == 2);
  CHECK(stats[0].sample_count == bads.size() + 1);
}

TEST_CASE("store accepts timestamps just inside the skew and age limits") {
  MetricsStore store;
  REQUIRE(store.AddJob(kJob, 8, 32).ok());
  StepSample future = Sample();
  future.timestamp_unix_nanos = NanosAt(kNow + absl::Minutes(1));
  StepSample old = Sample();
  old.timestamp_unix_nanos = NanosAt(kNow - absl::Minutes(10));
  std::vector<StepSample> batch = {future, old};
  IngestResult r = store.Ingest(batch, kNow);
  CHECK(r.accepted == 2);
  CHECK(r.rejected == 0);
}

TEST_CASE("store reports at most 16 rejections but counts every rejected sample") {
  MetricsStore store;
  REQUIRE(store.AddJob(kJob, 8, 32).ok());
  std::vector<StepSample> batch;
  for (int i = 0; i < 40; ++i) batch.push_back(Sample(0));  // world_size 0
  batch.push_back(Sample());
  IngestResult r = store.Ingest(batch, kNow);
  CHECK(r.rejected == 40);
  CHECK(r.accepted == 1);
  REQUIRE(r.rejections.size() == IngestResult::kMaxReportedRejections);
  for (uint32_t i = 0; i < r.rejections.size(); ++i) CHECK(r.rejections[i].index == i);
}

// The store's central step time is a trimmed mean over the median's octave
// and its neighbours; the samples here lie within neighbouring octaves, so
// it equals the plain mean.
TEST_CASE("store stats give the mean step time and world_size * batch / mean step") {
  MetricsStore store;
  REQUIRE(store.AddJob(kJob, 8, 32).ok());
  std::vector<StepSample> batch = {Sample(4, 0.5, 32), Sample(4, 1.5, 32), Sample(2, 0.25, 16),
                                   Sample(8, 2.0, 64)};
  REQUIRE(store.Ingest(batch, kNow).accepted == 4);
  std::vector<SizeStats> stats = store.Stats(kJob, kNow);
  REQUIRE(stats.size() == 3);
  // Ordered by world size.
  CHECK(stats[0].world_size == 2);
  CHECK(stats[1].world_size == 4);
  CHECK(stats[2].world_size == 8);

  CHECK(stats[0].sample_count == 1);
  CHECK(stats[0].step_seconds == Approx(0.25));
  CHECK(stats[0].samples_per_second == Approx(2 * 16 / 0.25));

  CHECK(stats[1].sample_count == 2);
  CHECK(stats[1].step_seconds == Approx(1.0));
  CHECK(stats[1].mean_batch == Approx(32));
  CHECK(stats[1].samples_per_second == Approx(4 * 32 / 1.0));

  CHECK(stats[2].samples_per_second == Approx(8 * 64 / 2.0));
  // Samples without a timestamp are stamped with the ingest time.
  CHECK(stats[1].last_sample_at == kNow);
}

TEST_CASE("store records the newest sample time per size") {
  MetricsStore store;
  REQUIRE(store.AddJob(kJob, 8, 32).ok());
  StepSample a = Sample();
  a.timestamp_unix_nanos = NanosAt(kNow - absl::Seconds(30));
  StepSample b = Sample();
  b.timestamp_unix_nanos = NanosAt(kNow - absl::Seconds(90));
  std::vector<StepSample> batch = {a, b};
  REQUIRE(store.Ingest(batch, kNow).accepted == 2);
  std::vector<SizeStats> stats = store.Stats(kJob, kNow);
  REQUIRE(stats.size() == 1);
  CHECK(stats[0].last_sample_at == kNow - absl::Seconds(30));
}

TEST_CASE("store defaults batch_size 0 to the job's local_batch_size") {
  MetricsStore store;
  REQUIRE(store.AddJob(kJob, 8, /*local_batch_size=*/64).ok());
  std::vector<StepSample> batch = {Sample(2, 0.5, 0), Sample(2, 0.5, 0)};
  IngestResult r = store.Ingest(batch, kNow);
  REQUIRE(r.accepted == 2);
  std::vector<SizeStats> stats = store.Stats(kJob, kNow);
  REQUIRE(stats.size() == 1);
  CHECK(stats[0].samples_per_second == Approx(2 * 64 / 0.5));
}

TEST_CASE("store forgets a removed job and rejects its samples afterwards") {
  MetricsStore store;
  REQUIRE(store.AddJob(kJob, 8, 32).ok());
  std::vector<StepSample> batch = {Sample()};
  REQUIRE(store.Ingest(batch, kNow).accepted == 1);
  store.RemoveJob(kJob);
  CHECK(store.Stats(kJob, kNow).empty());
  CHECK(store.SamplesAccepted(kJob) == 0);
  IngestResult r = store.Ingest(batch, kNow);
  CHECK(r.accepted == 0);
  REQUIRE(r.rejections.size() == 1);
  CHECK_THAT(r.rejections[0].reason, Contains("not registered"));

  // Re-adding starts from nothing.
  REQUIRE(store.AddJob(kJob, 8, 32).ok());
  CHECK(store.Stats(kJob, kNow).empty());
  CHECK(store.SamplesAccepted(kJob) == 0);
}

TEST_CASE("store AddJob on a known job keeps its data and updates max_replicas") {
  MetricsStore store;
  REQUIRE(store.AddJob(kJob, 4, 32).ok());
  std::vector<StepSample> batch = {Sample(4)};
  REQUIRE(store.Ingest(batch, kNow).accepted == 1);

  std::vector<StepSample> big = {Sample(6)};
  IngestResult before = store.Ingest(big, kNow);
  CHECK(before.accepted == 0);
  REQUIRE(before.rejections.size() == 1);
  CHECK_THAT(before.rejections[0].reason,
             Contains("world_size 6 exceeds the job's max_replicas 4"));

  REQUIRE(store.AddJob(kJob, 8, 32).ok());
  CHECK(store.SamplesAccepted(kJob) == 1);
  REQUIRE(store.Stats(kJob, kNow).size() == 1);

  IngestResult after = store.Ingest(big, kNow);
  CHECK(after.accepted == 1);
  CHECK(store.SamplesAccepted(kJob) == 2);
  std::vector<SizeStats> stats = store.Stats(kJob, kNow);
  REQUIRE(stats.size() == 2);
  CHECK(stats[0].world_size == 4);
  CHECK(stats[1].world_size == 6);
}

TEST_CASE("store keeps jobs apart") {
  MetricsStore store;
  REQUIRE(store.AddJob(kJob, 8, 32).ok());
  REQUIRE(store.AddJob("ns/other", 8, 32).ok());
  StepSample other = Sample(3);
  other.job_id = "ns/other";
  std::vector<StepSample> batch = {Sample(2), other, other};
  REQUIRE(store.Ingest(batch, kNow).accepted == 3);
  CHECK(store.SamplesAccepted(kJob) == 1);
  CHECK(store.SamplesAccepted("ns/other") == 2);
  REQUIRE(store.Stats("ns/other", kNow).size() == 1);
  CHECK(store.Stats("ns/other", kNow)[0].world_size == 3);
  CHECK(store.Stats("ns/unknown", kNow).empty());
}

TEST_CASE("IngestResult::Merge offsets indices and caps reported rejections") {
  IngestResult a;
  for (uint32_t i = 0; i < 10; ++i) a.Reject(i, "a");
  a.accepted = 3;
  IngestResult b;
  for (uint32_t i = 0; i < 10; ++i) b.Reject(i, "b");
  b.accepted = 2;
  a.Merge(b, 100);
  CHECK(a.accepted == 5);
  CHECK(a.rejected == 20);
  REQUIRE(a.rejections.size() == IngestResult::kMaxReportedRejections);
  CHECK(a.rejections[10].index == 100);
  CHECK(a.rejections[10].reason == "b");
  CHECK(a.rejections[15].index == 105);
}

}  // namespace

// ---- windowed robust statistics, pods, limits -------------------------------

std::vector<StepSample> Repeat(int n, double step_seconds, uint32_t world_size = 2,
                               const std::string* pod = nullptr) {
  std::vector<StepSample> out(n, Sample(world_size, step_seconds));
  if (pod != nullptr) {
    for (StepSample& s : out) s.pod = *pod;
  }
  return out;
}

TEST_CASE("store's robust step time moves less than 1% for one 10x outlier") {
  MetricsStore store;
  REQUIRE(store.AddJob(kJob, 8, 32).ok());
  std::vector<StepSample> batch;
  for (int i = 0; i < 50; ++i) batch.push_back(Sample(2, 0.95 + 0.002 * i));  // mean 0.999
  store.Ingest(batch, kNow);
  const double before = store.Stats(kJob, kNow).at(0).step_seconds;
  CHECK(before == Approx(0.999));
  store.Ingest(Repeat(1, 9.99), kNow);
  const SizeStats after = store.Stats(kJob, kNow).at(0);
  CHECK(after.sample_count == 51);
  CHECK(std::abs(after.step_seconds - before) / before < 0.01);
  CHECK(after.spread_seconds == Approx(0.0291).epsilon(0.02));  // sd of the 50, not the outlier
}

TEST_CASE("store drops samples older than the window as Tick runs, keeping lifetime counts") {
  MetricsStoreOptions options;
  options.window = absl::Minutes(6);  // snapshots every minute
  MetricsStore store(options);
  REQUIRE(store.AddJob(kJob, 8, 32).ok());
  absl::Time now = kNow;
  store.Ingest(Repeat(100, 1.0), now);
  store.Tick(now);
  for (int minute = 1; minute <= 3; ++minute) store.Tick(now + absl::Minutes(minute));
  now += absl::Minutes(3);
  store.Ingest(Repeat(100, 2.0), now);
  SizeStats mixed = store.Stats(kJob, now).at(0);
  CHECK(mixed.sample_count == 200);
  CHECK(mixed.step_seconds > 1.0);
  for (int minute = 4; minute <= 8; ++minute) store.Tick(kNow + absl::Minutes(minute));
  now = kNow + absl::Minutes(8);
  SizeStats recent = store.Stats(kJob, now).at(0);
  CHECK(recent.from_window);
  CHECK(recent.sample_count == 100);
  CHECK(recent.lifetime_count == 200);
  CHECK(recent.step_seconds == Approx(2.0));
  CHECK(recent.samples_per_second == Approx(2 * 32 / 2.0));
}

// Tick passes over every cell only when something is due; sizes and pods
// added between passes must still age and expire on time.
TEST_CASE("Tick ages a size and forgets a pod added between its passes on time") {
  MetricsStoreOptions options;
  options.window = absl::Minutes(6);  // snapshots every minute
  options.pod_ttl = absl::Minutes(5);
  MetricsStore store(options);
  REQUIRE(store.AddJob(kJob, 8, 32).ok());
  store.Tick(kNow);  // a pass: nothing due for a minute
  const std::string early_pod = "job-worker-early";
  store.Ingest(Repeat(100, 1.0, 2, &early_pod), kNow + absl::Seconds(10));
  store.Tick(kNow + absl::Seconds(30));  // skipped: nothing due yet
  const std::string late_pod = "job-worker-late";
  for (int second = 60; second <= 9 * 60; second += 20) {
    const absl::Time t = kNow + absl::Seconds(second);
    if (second == 180) store.Ingest(Repeat(100, 2.0, 2, &late_pod), t);
    store.Tick(t);
    if (second == 5 * 60) {
      // 4 min 50 s after its only sample: still live.
      CHECK(store.Pods(kJob).size() == 2);
    }
    if (second == 5 * 60 + 20) {
      // 5 min 10 s: forgotten.
      REQUIRE(store.Pods(kJob).size() == 1);
      CHECK(store.Pods(kJob)[0].pod == late_pod);
    }
  }
  // At 9 min the window (6 min) holds the samples of minute 3, not those
  // of second 10, which the snapshots ring put out of it.
  const SizeStats recent = store.Stats(kJob, kNow + absl::Minutes(9)).at(0);
  CHECK(recent.from_window);
  CHECK(recent.sample_count == 100);
  CHECK(recent.lifetime_count == 200);
  CHECK(recent.step_seconds == Approx(2.0));
}

TEST_CASE("StatsIfChanged answers only when samples arrived or the window moved") {
  MetricsStoreOptions options;
  options.window = absl::Minutes(6);  // snapshots every minute
  MetricsStore store(options);
  REQUIRE(store.AddJob(kJob, 8, 32).ok());
  MetricsStore::StatsRevision revision;
  // An unknown job, and a known one without samples, read as empty.
  MetricsStore::StatsRevision unknown;
  CHECK_FALSE(store.StatsIfChanged("ns/other", kNow, unknown).has_value());
  std::optional<std::vector<SizeStats>> stats = store.StatsIfChanged(kJob, kNow, revision);
  REQUIRE(stats.has_value());
  CHECK(stats->empty());
  CHECK(revision.value != 0);
  CHECK_FALSE(store.StatsIfChanged(kJob, kNow, revision).has_value());

  store.Ingest(Repeat(100, 1.0), kNow);
  stats = store.StatsIfChanged(kJob, kNow, revision);
  REQUIRE(stats.has_value());
  CHECK(stats->at(0).sample_count == 100);
  // Nothing new, later within the window: the same statistics.
  CHECK_FALSE(store.StatsIfChanged(kJob, kNow + absl::Seconds(30), revision).has_value());
  // A rejected sample changes nothing.
  StepSample bad = Sample(2, -1.0);
  store.Ingest(std::span<const StepSample>(&bad, 1), kNow);
  CHECK_FALSE(store.StatsIfChanged(kJob, kNow + absl::Seconds(30), revision).has_value());

  // Tick's snapshots, once the window's start passes one, move the window:
  // the samples age out, without a new sample.
  for (int minute = 0; minute <= 7; ++minute) store.Tick(kNow + absl::Minutes(minute));
  const absl::Time later = kNow + absl::Minutes(7);
  stats = store.StatsIfChanged(kJob, later, revision);
  REQUIRE(stats.has_value());
  CHECK_FALSE(stats->at(0).from_window);
  CHECK(stats->at(0).lifetime_count == 100);
  CHECK_FALSE(store.StatsIfChanged(kJob, later, revision).has_value());
  // What Stats says at the same time, in full.
  CHECK(store.Stats(kJob, later).at(0).sample_count == stats->at(0).sample_count);

  // A forgotten job reads as empty once, then as unchanged; registered
  // again, it reads as its new self.
  MetricsStore::StatsRevision before_removal = revision;
  store.RemoveJob(kJob);
  stats = store.StatsIfChanged(kJob, later, revision);
  REQUIRE(stats.has_value());
  CHECK(stats->empty());
  CHECK_FALSE(store.StatsIfChanged(kJob, later, revision).has_value());
  REQUIRE(store.AddJob(kJob, 8, 32).ok());
  stats = store.StatsIfChanged(kJob, later, before_removal);
  REQUIRE(stats.has_value());
  CHECK(stats->empty());
}

// Between full passes (one per window period, or per pod_ttl), Tick visits
// only the jobs one of whose pods may have gone stale (MetricsStore::pod_due_),
// which costs nothing when none did, instead of every job's every pod.
TEST_CASE("Tick between full passes forgets exactly the pods gone stale, and no removed job's") {
  MetricsStoreOptions options;
  options.window = absl::Minutes(60);  // full passes every 10 min, or 5 (pod_ttl)
  options.pod_ttl = absl::Minutes(5);
  MetricsStore store(options);
  for (const char* id : {"ns/a", "ns/b", "ns/c"}) REQUIRE(store.AddJob(id, 8, 32).ok());
  auto feed = [&](const std::string& job, const std::string& pod, absl::Time t) {
    StepSample s = Sample();
    s.job_id = job;
    s.pod = pod;
    REQUIRE(store.Ingest(std::span<const StepSample>(&s, 1), t).accepted == 1);
  };
  const std::string a = "ns/a", b = "ns/b", c = "ns/c";
  feed(a, "a-0", kNow);
  feed(c, "c-0", kNow);
  feed(b, "b-0", kNow + absl::Minutes(4));
  store.Tick(kNow + absl::Minutes(4));  // a full pass files all three
  store.RemoveJob(c);                   // filed, then gone
  // A minute later a's and c's pods are due; the next full pass is not.
  store.Tick(kNow + absl::Minutes(5) + absl::Seconds(1));
  CHECK(store.Pods(a).empty());
  CHECK(store.Pods(b).size() == 1);
  // b's is due at 9 min; a's pod came back meanwhile.
  feed(a, "a-0", kNow + absl::Minutes(6));
  store.Tick(kNow + absl::Minutes(8));
  CHECK(store.Pods(b).size() == 1);
  CHECK(store.Pods(a).size() == 1);
  store.Tick(kNow + absl::Minutes(9) + absl::Seconds(1));
  CHECK(store.Pods(b).empty());
  CHECK(store.Pods(a).size() == 1);
  store.Tick(kNow + absl::Minutes(11) + absl::Seconds(1));
  CHECK(store.Pods(a).empty());
}

TEST_CASE("StatsIfChanged sees a window base move with time alone, without a Tick") {
  MetricsStoreOptions options;
  options.window = absl::Minutes(6);
  MetricsStore store(options);
  REQUIRE(store.AddJob(kJob, 8, 32).ok());
  store.Ingest(Repeat(100, 1.0), kNow);  // the size starts with its empty snapshot
  store.Ingest(Repeat(50, 3.0), kNow + absl::Minutes(1));
  MetricsStore::StatsRevision revision;
  REQUIRE(store.StatsIfChanged(kJob, kNow + absl::Minutes(2), revision).has_value());
  // Until the window's start reaches the size's creation, nothing moves...
  CHECK_FALSE(
      store.StatsIfChanged(kJob, kNow + absl::Minutes(6) - absl::Seconds(1), revision).has_value());
  // ...then its base does (the empty snapshot now lies at or before it),
  // though no Tick ran and no sample came: the fast path must not hide it.
  CHECK(store.StatsIfChanged(kJob, kNow + absl::Minutes(6), revision).has_value());
  // A Tick that takes snapshots sends every revision down the slow path;
  // it answers "unchanged" when the bases did not move, and "changed" once
  // the new snapshot is the base.
  store.Tick(kNow + absl::Minutes(7));
  const std::optional<std::vector<SizeStats>> after_tick =
      store.StatsIfChanged(kJob, kNow + absl::Minutes(7), revision);
  CHECK_FALSE(after_tick.has_value());
  const std::optional<std::vector<SizeStats>> aged =
      store.StatsIfChanged(kJob, kNow + absl::Minutes(13), revision);
  REQUIRE(aged.has_value());
  CHECK(aged->at(0).sample_count == store.Stats(kJob, kNow + absl::Minutes(13)).at(0).sample_count);
}

TEST_CASE("store falls back to lifetime statistics for a size with no samples in the window") {
  MetricsStoreOptions options;
  options.window = absl::Minutes(6);
  MetricsStore store(options);
  REQUIRE(store.AddJob(kJob, 8, 32).ok());
  store.Ingest(Repeat(10, 0.5, 4), kNow);
  for (int minute = 0; minute <= 12; ++minute) store.Tick(kNow + absl::Minutes(minute));
  SizeStats old = store.Stats(kJob, kNow + absl::Minutes(12)).at(0);
  CHECK_FALSE(old.from_window);
  CHECK(old.sample_count == 0);
  CHECK(old.lifetime_count == 10);
  CHECK(old.step_seconds == Approx(0.5));
}

// Reaches into a size cell so a test can count more samples than it could
// ingest: AddCopies adds the cell's current per-bin counts, sums and batch
// sum `copies` more times, as if the same samples had been ingested again.
class MetricsStoreTestPeer {
 public:
  static void AddCopies(MetricsStore& store, std::string_view job_id, uint32_t world_size,
                        uint64_t copies) {
    rescale::WriterMutexLock lock(store.admin_mu_);
    const MetricsStore::JobState* job = store.FindLocked(job_id);
    REQUIRE(job != nullptr);
    for (int i = 0; i < job->max_sizes; ++i) {
      MetricsStore::SizeCell* cell = job->sizes[i].load();
      if (cell == nullptr || cell->world_size != world_size) continue;
      const metrics_internal::Histogram h = cell->Load();
      for (int b = 0; b < MetricsStore::kBins; ++b) {
        cell->count[b].fetch_add(copies * h.count[b]);
        cell->sum[b].store(h.sum[b] * static_cast<double>(copies + 1));
        cell->sum_sq[b].store(h.sum_sq[b] * static_cast<double>(copies + 1));
      }
      cell->batch_sum.store(h.batch_sum * static_cast<double>(copies + 1));
      cell->lifetime.fetch_add(copies * cell->lifetime.load());
      return;
    }
    FAIL("no cell of that world size");
  }
};

TEST_CASE("store counts more than 2^32 samples in one bin without wrapping") {
  MetricsStoreOptions options;
  options.window = absl::Minutes(6);
  MetricsStore store(options);
  REQUIRE(store.AddJob(kJob, 8, 32).ok());
  REQUIRE(store.Ingest(Repeat(2, 0.5), kNow).accepted == 2);
  // 2 + 2 x 2^31 = 2^32 + 2 samples of 0.5 s, all in the bin of 0.5 s.
  MetricsStoreTestPeer::AddCopies(store, kJob, 2, uint64_t{1} << 31);
  const uint64_t total = (uint64_t{1} << 32) + 2;

  SizeStats windowed = store.Stats(kJob, kNow).at(0);
  CHECK(windowed.from_window);
  CHECK(windowed.sample_count == total);
  CHECK(windowed.step_seconds == Approx(0.5));
  CHECK(windowed.samples_per_second == Approx(2 * 32 / 0.5));

  // Past the window: the lifetime fallback divides the same sums by the
  // same (unwrapped) count.
  for (int minute = 0; minute <= 12; ++minute) store.Tick(kNow + absl::Minutes(minute));
  SizeStats lifetime = store.Stats(kJob, kNow + absl::Minutes(12)).at(0);
  CHECK_FALSE(lifetime.from_window);
  CHECK(lifetime.lifetime_count == total);
  CHECK(lifetime.step_seconds == Approx(0.5));
  CHECK(lifetime.mean_batch == Approx(32));
}

TEST_CASE("store tracks pods, flags stragglers and forgets pods unseen for pod_ttl") {
  MetricsStoreOptions options;
  options.pod_ttl = absl::Minutes(2);
  MetricsStore store(options);
  REQUIRE(store.AddJob(kJob, 8, 32).ok());
  const std::string pods[] = {"w-0", "w-1", "w-2", "w-3"};
  for (int p = 0; p < 4; ++p) store.Ingest(Repeat(20, p == 3 ? 1.0 : 0.5, 4, &pods[p]), kNow);
  std::vector<PodStats> seen = store.Pods(kJob);
  REQUIRE(seen.size() == 4);
  CHECK(seen[0].pod == "w-0");
  CHECK(seen[0].recent_step_seconds == Approx(0.5));
  CHECK(seen[0].world_size == 4);
  CHECK(seen[0].sample_count == 20);
  CHECK(seen[0].last_seen == kNow);
  CHECK_FALSE(seen[0].straggler);
  CHECK(seen[3].straggler);

  // w-0 keeps reporting; the others go quiet and are forgotten.
  store.Ingest(Repeat(1, 0.5, 4, &pods[0]), kNow + absl::Minutes(3));
  store.Tick(kNow + absl::Minutes(3));
  seen = store.Pods(kJob);
  REQUIRE(seen.size() == 1);
  CHECK(seen[0].pod == "w-0");
  CHECK(seen[0].sample_count == 21);
  // A forgotten pod that comes back starts afresh.
  store.Ingest(Repeat(2, 0.7, 4, &pods[1]), kNow + absl::Minutes(3));
  seen = store.Pods(kJob);
  REQUIRE(seen.size() == 2);
  CHECK(seen[1].sample_count == 2);
}

TEST_CASE("store rejects samples beyond its size and pod limits with a reason") {
  MetricsStoreOptions options;
  options.max_sizes_per_job = 2;
  options.max_pods_per_job = 3;
  MetricsStore store(options);
  REQUIRE(store.AddJob(kJob, 8, 32).ok());
  IngestResult sizes =
      store.Ingest(std::vector<StepSample>{Sample(1), Sample(2), Sample(3), Sample(2)}, kNow);
  CHECK(sizes.accepted == 3);
  CHECK(sizes.rejected_for_limits == 1);
  REQUIRE(sizes.rejections.size() == 1);
  CHECK(sizes.rejections[0].index == 2);
  CHECK_THAT(sizes.rejections[0].reason, Contains("--max_sizes_per_job"));

  std::vector<std::string> names;
  for (int p = 0; p < 5; ++p) names.push_back("pod-" + std::to_string(p));
  std::vector<StepSample> batch;
  for (const std::string& name : names) {
    StepSample s = Sample(1);
    s.pod = name;
    batch.push_back(s);
  }
  IngestResult pods = store.Ingest(batch, kNow);
  // job-worker-0 from before plus pod-0 and pod-1 fill the limit of 3.
  CHECK(pods.accepted == 2);
  CHECK(pods.rejected_for_limits == 3);
  CHECK_THAT(pods.limit_reason, Contains("--max_pods_per_job"));
}

// The job table is sharded by job id: jobs in every shard are found, counted
// against max_jobs, and removed from their own shard only.
TEST_CASE("store keeps a thousand jobs across its table's shards, each found and counted") {
  MetricsStoreOptions options;
  options.max_jobs = 1000;
  MetricsStore store(options);
  std::vector<std::string> ids;  // samples view their job ids
  for (int i = 0; i < 1000; ++i) ids.push_back("ns/job-" + std::to_string(i));
  auto id = [&](int i) -> const std::string& { return ids[i]; };
  for (int i = 0; i < 1000; ++i) REQUIRE(store.AddJob(id(i), 8, 32).ok());
  CHECK(store.job_count() == 1000);
  CHECK(store.AddJob("ns/one-more", 8, 32).code() == absl::StatusCode::kResourceExhausted);
  std::vector<StepSample> batch;
  for (int i = 0; i < 1000; ++i) {
    StepSample s = Sample();
    s.job_id = id(i);
    batch.push_back(s);
  }
  CHECK(store.Ingest(batch, kNow).accepted == 1000);
  for (int i = 0; i < 1000; i += 7) CHECK(store.SamplesAccepted(id(i)) == 1);
  for (int i = 0; i < 1000; i += 2) store.RemoveJob(id(i));
  CHECK(store.job_count() == 500);
  CHECK(store.SamplesAccepted(id(2)) == 0);
  CHECK(store.SamplesAccepted(id(3)) == 1);
  CHECK(store.TotalAccepted() == 1000);  // removed jobs' samples still count
  REQUIRE(store.AddJob("ns/one-more", 8, 32).ok());
  CHECK(store.job_count() == 501);
  store.Tick(kNow);
  CHECK(store.Stats(id(3), kNow).at(0).sample_count == 1);
}

TEST_CASE("store refuses jobs beyond max_jobs with RESOURCE_EXHAUSTED") {
  MetricsStoreOptions options;
  options.max_jobs = 1;
  MetricsStore store(options);
  REQUIRE(store.AddJob("ns/a", 8, 32).ok());
  absl::Status status = store.AddJob("ns/b", 8, 32);
  CHECK(status.code() == absl::StatusCode::kResourceExhausted);
  CHECK_THAT(std::string(status.message()), Contains("--max_jobs"));
  CHECK(store.AddJob("ns/a", 16, 32).ok());  // updating a known job is not a new one
}

TEST_CASE("store's total counts samples of removed jobs exactly once") {
  MetricsStore store;
  REQUIRE(store.AddJob("ns/a", 8, 32).ok());
  REQUIRE(store.AddJob("ns/b", 8, 32).ok());
  std::vector<StepSample> a = Repeat(7, 0.5);
  for (StepSample& s : a) s.job_id = "ns/a";
  std::vector<StepSample> b = Repeat(5, 0.5);
  for (StepSample& s : b) s.job_id = "ns/b";
  store.Ingest(a, kNow);
  store.Ingest(b, kNow);
  CHECK(store.TotalAccepted() == 12);
  store.RemoveJob("ns/a");
  CHECK(store.TotalAccepted() == 12);
  store.Tick(kNow);  // frees the removed job
  CHECK(store.TotalAccepted() == 12);
  CHECK(store.job_count() == 1);
}

// ---- de-duplication by step -------------------------------------------------

std::vector<StepSample> Steps(uint64_t first, uint64_t last, const std::string* pod = nullptr,
                              uint32_t world_size = 2) {
  std::vector<StepSample> out;
  for (uint64_t step = first; step <= last; ++step) {
    StepSample s = Sample(world_size);
    if (pod != nullptr) s.pod = *pod;
    s.step = step;
    out.push_back(s);
  }
  return out;
}

TEST_CASE("store counts a resent batch as duplicates, not as accepted or rejected") {
  MetricsStore store;
  REQUIRE(store.AddJob(kJob, 8, 32).ok());
  IngestResult first = store.Ingest(Steps(0, 9), kNow);
  CHECK(first.accepted == 10);
  CHECK(first.duplicates == 0);
  IngestResult again = store.Ingest(Steps(0, 9), kNow);
  CHECK(again.accepted == 0);
  CHECK(again.duplicates == 10);
  CHECK(again.rejected == 0);
  CHECK(again.rejections.empty());
  CHECK(store.SamplesAccepted(kJob) == 10);
  // An overlapping batch stores only the new steps.
  IngestResult overlap = store.Ingest(Steps(5, 14), kNow);
  CHECK(overlap.accepted == 5);
  CHECK(overlap.duplicates == 5);
  CHECK(store.SamplesAccepted(kJob) == 15);
  CHECK(store.Pods(kJob)[0].sample_count == 15);
}

TEST_CASE("store de-duplicates steps per pod, and a step behind the pod's highest is a duplicate") {
  MetricsStore store;
  REQUIRE(store.AddJob(kJob, 8, 32).ok());
  const std::string a = "w-0", b = "w-1";
  CHECK(store.Ingest(Steps(0, 4, &a), kNow).accepted == 5);
  CHECK(store.Ingest(Steps(0, 4, &b), kNow).accepted == 5);  // other pod: its own steps
  std::vector<StepSample> out_of_order = Steps(10, 10, &a);
  out_of_order.push_back(Steps(7, 7, &a)[0]);
  IngestResult r = store.Ingest(out_of_order, kNow);
  CHECK(r.accepted == 1);
  CHECK(r.duplicates == 1);
}

TEST_CASE("store never de-duplicates samples without a step, and step 0 counts") {
  MetricsStore store;
  REQUIRE(store.AddJob(kJob, 8, 32).ok());
  std::vector<StepSample> plain = {Sample(), Sample(), Sample()};
  CHECK(store.Ingest(plain, kNow).accepted == 3);
  CHECK(store.Ingest(plain, kNow).accepted == 3);
  CHECK(store.Ingest(Steps(0, 0), kNow).accepted == 1);
  IngestResult r = store.Ingest(Steps(0, 0), kNow);
  CHECK(r.duplicates == 1);
  // Samples without a step do not move the pod's highest step either.
  CHECK(store.Ingest(plain, kNow).accepted == 3);
  CHECK(store.Ingest(Steps(1, 1), kNow).accepted == 1);
}

TEST_CASE("store rejects invalid samples before de-duplicating, so their step stays free") {
  MetricsStore store;
  REQUIRE(store.AddJob(kJob, 8, 32).ok());
  std::vector<StepSample> batch = Steps(3, 3);
  batch[0].step_seconds = -1;
  IngestResult bad = store.Ingest(batch, kNow);
  CHECK(bad.rejected == 1);
  CHECK(bad.duplicates == 0);
  CHECK(store.Ingest(Steps(3, 3), kNow).accepted == 1);
  for (uint64_t too_large : {uint64_t{1} << 44, std::numeric_limits<uint64_t>::max()}) {
    std::vector<StepSample> beyond = Steps(0, 0);
    beyond[0].step = too_large;
    IngestResult r = store.Ingest(beyond, kNow);
    REQUIRE(r.rejected == 1);
    CHECK_THAT(r.rejections[0].reason, Contains("step") && Contains("limit of 17592186044414"));
  }
  std::vector<StepSample> largest = Steps((uint64_t{1} << 44) - 2, (uint64_t{1} << 44) - 2);
  CHECK(store.Ingest(largest, kNow).accepted == 1);
  CHECK(store.Ingest(largest, kNow).duplicates == 1);
}

TEST_CASE("store starts a pod's steps afresh when its world size changes") {
  // Resized training restarts and may number its steps from a lower value
  // (the ImageNet example's epoch x batches per epoch + i): those samples,
  // at the new size, are what the planner needs, so they are not duplicates.
  MetricsStore store;
  REQUIRE(store.AddJob(kJob, 8, 32).ok());
  auto at_size = [](uint32_t world_size, uint64_t first, uint64_t last) {
    std::vector<StepSample> out = Steps(first, last);
    for (StepSample& s : out) s.world_size = world_size;
    return out;
  };
  CHECK(store.Ingest(at_size(2, 100, 199), kNow).accepted == 100);
  IngestResult resized = store.Ingest(at_size(4, 50, 59), kNow);
  CHECK(resized.accepted == 10);
  CHECK(resized.duplicates == 0);
  // Within the new run, resends are still duplicates.
  CHECK(store.Ingest(at_size(4, 55, 64), kNow).duplicates == 5);
  CHECK(store.SamplesAccepted(kJob) == 115);
}

TEST_CASE("store keeps a pod's highest step when its pod table is rebuilt") {
  MetricsStore store;
  REQUIRE(store.AddJob(kJob, 2, 32).ok());
  CHECK(store.Ingest(Steps(0, 9), kNow).accepted == 10);
  // A larger max_replicas grows, and so rebuilds, the pod table.
  REQUIRE(store.AddJob(kJob, 64, 32).ok());
  CHECK(store.Ingest(Steps(0, 9), kNow).duplicates == 10);
}

TEST_CASE("IngestResult::Merge sums duplicates") {
  IngestResult a, b;
  a.duplicates = 2;
  b.duplicates = 3;
  a.Merge(b, 0);
  CHECK(a.duplicates == 5);
}

const std::string kPod0 = "w-0";
const std::string kPod1 = "w-1";

TEST_CASE("progress counts job steps by number, whichever pods report them") {
  MetricsStore store;
  REQUIRE(store.AddJob(kJob, 8, 32).ok());
  CHECK(store.SamplesProcessed(kJob) == 0);
  CHECK(store.SamplesProcessed("ns/unknown") == 0);
  // World size 4, but only two pods report, each a different part of the run:
  // steps 0..14 were taken, by every pod.
  REQUIRE(store.Ingest(Steps(0, 9, &kPod0, 4), kNow).accepted == 10);
  REQUIRE(store.Ingest(Steps(5, 14, &kPod1, 4), kNow).accepted == 10);
  CHECK(store.SamplesProcessed(kJob) == 15 * 4 * 32);
  // A resend with step numbers is de-duplicated and adds nothing.
  CHECK(store.Ingest(Steps(0, 9, &kPod0, 4), kNow).duplicates == 10);
  CHECK(store.SamplesProcessed(kJob) == 15 * 4 * 32);
  // Resized to 2: training numbers its steps afresh, counted in the new cell.
  REQUIRE(store.Ingest(Steps(0, 4, &kPod0, 2), kNow).accepted == 5);
  CHECK(store.SamplesProcessed(kJob) == 15 * 4 * 32 + 5 * 2 * 32);
  std::vector<SizeStats> stats = store.Stats(kJob, kNow);
  REQUIRE(stats.size() == 2);
  CHECK(stats[0].world_size == 2);
  CHECK(stats[0].steps_processed == 5);
  CHECK(stats[0].samples_processed == 5 * 2 * 32);
  CHECK(stats[1].steps_processed == 15);
  CHECK(stats[1].samples_processed == 15 * 4 * 32);
}

TEST_CASE("progress credits a size it returns to only with the steps taken there") {
  MetricsStore store;
  REQUIRE(store.AddJob(kJob, 8, 32).ok());
  // Global step numbers (a checkpoint-resuming trainer): 4 replicas for
  // steps 0..9, 8 for 10..19, 4 again for 20..29, every other step sampled.
  auto every_other = [](uint64_t first, uint64_t last, uint32_t world) {
    std::vector<StepSample> out;
    for (StepSample& s : Steps(first, last, &kPod0, world))
      if (*s.step % 2 == 0 || *s.step == last) out.push_back(s);
    return out;
  };
  REQUIRE(store.Ingest(every_other(0, 9, 4), kNow).accepted > 0);
  REQUIRE(store.Ingest(every_other(10, 19, 8), kNow).accepted > 0);
  REQUIRE(store.Ingest(every_other(20, 29, 4), kNow).accepted > 0);
  // A late sample from the 8-replica run, and a resend: nothing more.
  std::vector<StepSample> late = Steps(15, 15, &kPod1, 8);
  REQUIRE(store.Ingest(late, kNow).accepted == 1);
  CHECK(store.Ingest(every_other(20, 29, 4), kNow).duplicates > 0);
  std::vector<SizeStats> stats = store.Stats(kJob, kNow);
  REQUIRE(stats.size() == 2);
  CHECK(stats[0].world_size == 4);
  CHECK(stats[0].steps_processed == 20);  // not the span 0..29
  CHECK(stats[1].steps_processed == 10);
  CHECK(store.SamplesProcessed(kJob) == 20 * 4 * 32 + 10 * 8 * 32);
}

TEST_CASE("progress without step numbers divides by the distinct pods that reported") {
  MetricsStore store;
  REQUIRE(store.AddJob(kJob, 8, 32).ok());
  std::vector<StepSample> batch;
  for (const char* pod : {"w-0", "w-1"}) {
    for (int i = 0; i < 10; ++i) {
      StepSample s = Sample(2, 0.5, /*batch=*/16);
      s.pod = pod;
      batch.push_back(s);
    }
  }
  REQUIRE(store.Ingest(batch, kNow).accepted == 20);
  CHECK(store.SamplesProcessed(kJob) == 10 * 2 * 16);  // 20 samples / 2 pods = 10 steps
  // A pod seen again is not a new pod: its new steps count.
  REQUIRE(store.Ingest(std::span(batch).first(5), kNow).accepted == 5);
  CHECK(store.SamplesProcessed(kJob) == 12 * 2 * 16);  // 25 / 2, rounded down
  // The documented limit: without step numbers a resend cannot be told from
  // new steps, so resending pod w-1's 10 counts 5 more job steps.
  REQUIRE(store.Ingest(std::span(batch).last(10), kNow).accepted == 10);
  CHECK(store.SamplesProcessed(kJob) == 17 * 2 * 16);
  // Once any pod at the size numbers its steps, the span counts every job
  // step: the samples without numbers describe the same steps, not more.
  const std::string numbered = "w-2";
  std::vector<StepSample> steps = Steps(0, 29, &numbered, 2);
  for (StepSample& step : steps) step.batch_size = 16;
  REQUIRE(store.Ingest(steps, kNow).accepted == 30);
  CHECK(store.SamplesProcessed(kJob) == 30 * 2 * 16);
}

TEST_CASE("progress at a size beyond max_sizes_per_job is lost: the total is a lower bound") {
  MetricsStoreOptions options;
  options.max_sizes_per_job = 1;
  MetricsStore store(options);
  REQUIRE(store.AddJob(kJob, 8, 32).ok());
  REQUIRE(store.Ingest(Steps(0, 9, &kPod0, 2), kNow).accepted == 10);
  CHECK(store.Ingest(Steps(0, 9, &kPod0, 4), kNow).rejected == 10);
  CHECK(store.SamplesProcessed(kJob) == 10 * 2 * 32);
}

}  // namespace rescale
