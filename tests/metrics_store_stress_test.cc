// Concurrency stress test of the lock-free MetricsStore, run under
// ThreadSanitizer in CI (tag [concurrency]).
//
// Design. Three writer threads ingest batches into a mix of stable jobs
// (never removed) and churn jobs (registered and removed over and over by a
// fourth thread), using a rotating set of pod names so that pod tables fill,
// hit their limit and are rebuilt while writers use them. A reader thread
// advances a shared ManualClock past the pod TTL and the window, calls Tick
// (snapshots, pod forgetting, reclamation) and reads every statistic while
// the writers run. Nothing sleeps; threads are only joined.
//
// What it proves:
//  * exactly-once accounting: after the threads join, the store's
//    TotalAccepted equals the sum of IngestResult.accepted over all calls,
//    including samples that went into churn jobs later removed, and each
//    stable job's SamplesAccepted and its per-size lifetime counts equal what
//    writers were told was accepted for it;
//  * every sample is either accepted or rejected, never both or neither;
//  * readers observe each stable job's count only growing;
//  * de-duplication by step (second test): two writers racing over
//    overlapping step ranges of one pod store each step exactly once;
//  * progress marks (third test): writers racing over partial, overlapping
//    and resent step ranges of several pods, and over one pod's samples
//    without step numbers, leave the exact step span and pod count, and a
//    reader never sees a step span longer than the final one;
//  * under TSan: no data race, and (with ASan) no use-after-free of tables,
//    jobs or pod cells retired while writers may hold them.
#include <atomic>
#include <catch2/catch.hpp>
#include <string>
#include <thread>
#include <vector>

#include "rescale/clock.h"
#include "rescale/metrics_store.h"

namespace {

constexpr int kStableJobs = 4;
constexpr int kChurnJobs = 3;
constexpr int kWriters = 3;
constexpr int kBatchesPerWriter = 1500;
constexpr int kBatchSize = 64;

std::string StableId(int i) { return "stable/job-" + std::to_string(i); }
std::string ChurnId(int i) { return "churn/job-" + std::to_string(i); }

}  // namespace

TEST_CASE("concurrent ingest, reads, Tick and job churn count every sample exactly once",
          "[concurrency]") {
  rescale::ManualClock clock;
  rescale::MetricsStoreOptions options;
  options.pod_ttl = absl::Seconds(5);
  options.window = absl::Seconds(60);
  options.max_sample_age = absl::Hours(1);
  options.max_pods_per_job = 24;
  rescale::MetricsStore store(options);
  for (int i = 0; i < kStableJobs; ++i) REQUIRE(store.AddJob(StableId(i), 8, 32).ok());

  std::atomic<bool> writers_done{false};
  std::vector<uint64_t> accepted_total(kWriters, 0);
  std::vector<std::vector<uint64_t>> accepted_stable(kWriters,
                                                     std::vector<uint64_t>(kStableJobs, 0));
  std::vector<uint64_t> handled(kWriters, 0);

  std::vector<std::thread> threads;
  for (int w = 0; w < kWriters; ++w) {
    threads.emplace_back([&, w] {
      std::vector<std::string> pods;
      for (int p = 0; p < 40; ++p)
        pods.push_back("pod-" + std::to_string(w) + "-" + std::to_string(p));
      std::vector<rescale::StepSample> batch(kBatchSize);
      for (int b = 0; b < kBatchesPerWriter; ++b) {
        const bool churn = b % 3 == 0;
        const int job_index = churn ? (b / 3 + w) % kChurnJobs : (b + w) % kStableJobs;
        const std::string id = churn ? ChurnId(job_index) : StableId(job_index);
        const std::string& pod = pods[(b * 7 + w) % pods.size()];
        for (int i = 0; i < kBatchSize; ++i) {
          batch[i] = {};
          batch[i].job_id = id;
          batch[i].pod = pod;
          batch[i].world_size = 1 + (b + i) % 8;
          batch[i].step_seconds = i == 5 ? -1.0 : 0.1 + 0.01 * (i % 5);  // one invalid per batch
        }
        rescale::IngestResult result = store.Ingest(batch, clock.Now());
        handled[w] += result.accepted + result.rejected;
        accepted_total[w] += result.accepted;
        if (!churn) accepted_stable[w][job_index] += result.accepted;
      }
    });
  }
  bool churn_adds_ok = true;  // Catch2 assertions are not thread-safe: check after join
  threads.emplace_back([&] {  // churn: register and remove jobs under the writers
    int round = 0;
    while (!writers_done.load(std::memory_order_acquire)) {
      const std::string id = ChurnId(round % kChurnJobs);
      if (round % 2 == 0) {
        churn_adds_ok = store.AddJob(id, 8, 32).ok() && churn_adds_ok;
      } else {
        store.RemoveJob(id);
      }
      ++round;
    }
  });
  uint64_t reads = 0;
  bool monotone = true;
  threads.emplace_back([&] {  // reader and maintenance
    std::vector<uint64_t> last(kStableJobs, 0);
    while (!writers_done.load(std::memory_order_acquire)) {
      clock.Advance(absl::Seconds(1));
      store.Tick(clock.Now());
      for (int i = 0; i < kStableJobs; ++i) {
        const uint64_t now_count = store.SamplesAccepted(StableId(i));
        monotone = monotone && now_count >= last[i];
        last[i] = now_count;
        for (const rescale::SizeStats& s : store.Stats(StableId(i), clock.Now())) {
          monotone = monotone && s.step_seconds > 0 && s.samples_per_second > 0;
        }
        store.Pods(StableId(i));
      }
      store.TotalAccepted();
      ++reads;
    }
  });

  for (int w = 0; w < kWriters; ++w) threads[w].join();
  writers_done.store(true, std::memory_order_release);
  for (size_t t = kWriters; t < threads.size(); ++t) threads[t].join();

  uint64_t expected_total = 0;
  for (int w = 0; w < kWriters; ++w) {
    CHECK(handled[w] == uint64_t{kBatchesPerWriter} * kBatchSize);
    expected_total += accepted_total[w];
  }
  CHECK(expected_total > 0);
  CHECK(store.TotalAccepted() == expected_total);
  for (int i = 0; i < kStableJobs; ++i) {
    uint64_t expected = 0;
    for (int w = 0; w < kWriters; ++w) expected += accepted_stable[w][i];
    INFO(StableId(i));
    CHECK(store.SamplesAccepted(StableId(i)) == expected);
    uint64_t lifetime = 0;
    for (const rescale::SizeStats& s : store.Stats(StableId(i), clock.Now()))
      lifetime += s.lifetime_count;
    CHECK(lifetime == expected);
  }
  CHECK(monotone);
  CHECK(churn_adds_ok);
  CHECK(reads > 0);
  // Removing everything and ticking frees retired memory without losing the count.
  for (int i = 0; i < kChurnJobs; ++i) store.RemoveJob(ChurnId(i));
  store.Tick(clock.Now());
  CHECK(store.TotalAccepted() == expected_total);
}

// Two writers race to ingest overlapping step ranges of one pod: both start
// at step 0 and send increasing steps in batches of different sizes (so the
// race moves across batch boundaries), one up to 3N/2 and the other up to N.
// Each writer's steps are contiguous and increasing, the contract the store
// de-duplicates under, so every distinct step must be stored exactly once:
// accepted + duplicates == sent, and the accepted total == distinct steps.
TEST_CASE("two writers racing over overlapping steps of one pod store each step exactly once",
          "[concurrency]") {
  constexpr uint64_t kSteps = 60'000;
  rescale::ManualClock clock;
  rescale::MetricsStore store;
  REQUIRE(store.AddJob("dedupe/job", 8, 32).ok());
  struct Tally {
    uint64_t sent = 0, accepted = 0, duplicates = 0, rejected = 0;
  };
  Tally tally[2];
  const uint64_t last_step[2] = {kSteps * 3 / 2, kSteps};
  const size_t batch_size[2] = {37, 64};
  std::vector<std::thread> writers;
  for (int w = 0; w < 2; ++w) {
    writers.emplace_back([&, w] {
      std::vector<rescale::StepSample> batch;
      uint64_t step = 0;
      while (step < last_step[w]) {
        batch.clear();
        for (size_t i = 0; i < batch_size[w] && step < last_step[w]; ++i, ++step) {
          rescale::StepSample s;
          s.job_id = "dedupe/job";
          s.pod = "dedupe-worker-0";
          s.world_size = 2;
          s.step_seconds = 0.25;
          s.step = step;
          batch.push_back(s);
        }
        rescale::IngestResult r = store.Ingest(batch, clock.Now());
        tally[w].sent += batch.size();
        tally[w].accepted += r.accepted;
        tally[w].duplicates += r.duplicates;
        tally[w].rejected += r.rejected;
      }
    });
  }
  for (std::thread& t : writers) t.join();
  for (int w = 0; w < 2; ++w) {
    INFO("writer " << w);
    CHECK(tally[w].rejected == 0);
    CHECK(tally[w].accepted + tally[w].duplicates == tally[w].sent);
  }
  const uint64_t distinct = kSteps * 3 / 2;
  CHECK(tally[0].accepted + tally[1].accepted == distinct);
  CHECK(store.SamplesAccepted("dedupe/job") == distinct);
  CHECK(tally[0].duplicates + tally[1].duplicates == kSteps);
}

// Four writers, one pod each, send partial and overlapping step ranges of one
// size (writer w: steps 100w .. kLast - 100w), every batch twice; and, two to
// a pod, samples without step numbers of another job. A reader ticks and
// reads progress meanwhile. The job's first step was reported before the
// race (steps below a job's first report are not known to have run, see
// metrics_store.h); from there each batch's credit is the CAS that raised
// the job's mark, so credits are disjoint, the final count is exact and a
// reading never exceeds it; each pod is counted once among the unstepped
// pods however writers race on its bit.
TEST_CASE("writers racing over progress marks leave the exact step span and pod count",
          "[concurrency]") {
  constexpr int kProgressWriters = 4;
  constexpr uint64_t kLast = 19'999;
  constexpr int kUnsteppedPerWriter = 3000;
  rescale::ManualClock clock;
  rescale::MetricsStore store;
  REQUIRE(store.AddJob("progress/stepped", 8, 32).ok());
  REQUIRE(store.AddJob("progress/unstepped", 8, 32).ok());
  rescale::StepSample start;
  start.job_id = "progress/stepped";
  start.pod = "starter";
  start.world_size = 4;
  start.step_seconds = 0.25;
  start.step = 0;
  REQUIRE(store.Ingest(std::span(&start, 1), clock.Now()).accepted == 1);
  std::atomic<bool> writers_done{false};
  // Writers start once the reader has read once, so reads overlap writes
  // however the threads are scheduled (the test is short).
  std::atomic<bool> reader_started{false};
  std::vector<uint64_t> unstepped_accepted(kProgressWriters, 0);
  std::vector<std::thread> threads;
  for (int w = 0; w < kProgressWriters; ++w) {
    threads.emplace_back([&, w] {
      while (!reader_started.load(std::memory_order_acquire)) std::this_thread::yield();
      const std::string pod = "s-" + std::to_string(w);
      const std::string unstepped_pod = "u-" + std::to_string(w % 2);
      std::vector<rescale::StepSample> batch;
      uint64_t step = 100 * w;
      int unstepped_sent = 0;
      while (step <= kLast - 100 * w || unstepped_sent < kUnsteppedPerWriter) {
        batch.clear();
        for (int i = 0; i < 64 && step <= kLast - 100 * w; ++i, ++step) {
          rescale::StepSample s;
          s.job_id = "progress/stepped";
          s.pod = pod;
          s.world_size = 4;
          s.step_seconds = 0.25;
          s.step = step;
          batch.push_back(s);
        }
        store.Ingest(batch, clock.Now());
        store.Ingest(batch, clock.Now());  // a resend: duplicates
        batch.clear();
        for (int i = 0; i < 50 && unstepped_sent < kUnsteppedPerWriter; ++i, ++unstepped_sent) {
          rescale::StepSample s;
          s.job_id = "progress/unstepped";
          s.pod = unstepped_pod;
          s.world_size = 2;
          s.step_seconds = 0.25;
          batch.push_back(s);
        }
        unstepped_accepted[w] += store.Ingest(batch, clock.Now()).accepted;
      }
    });
  }
  bool never_longer = true;
  uint64_t reads = 0;
  threads.emplace_back([&] {
    do {
      store.Tick(clock.Now());
      for (const rescale::SizeStats& s : store.Stats("progress/stepped", clock.Now())) {
        never_longer = never_longer && s.steps_processed <= kLast + 1;
      }
      store.SamplesProcessed("progress/stepped");
      store.SamplesProcessed("progress/unstepped");
      ++reads;
      reader_started.store(true, std::memory_order_release);
    } while (!writers_done.load(std::memory_order_acquire));
  });
  for (int w = 0; w < kProgressWriters; ++w) threads[w].join();
  writers_done.store(true, std::memory_order_release);
  threads.back().join();

  CHECK(never_longer);
  CHECK(reads > 0);
  CHECK(store.SamplesProcessed("progress/stepped") == (kLast + 1) * 4 * 32);
  uint64_t unstepped = 0;
  for (uint64_t a : unstepped_accepted) unstepped += a;
  REQUIRE(unstepped == uint64_t{kProgressWriters} * kUnsteppedPerWriter);
  // Two distinct pods sent them: samples / 2 job steps of 2 x 32 samples.
  CHECK(store.SamplesProcessed("progress/unstepped") == unstepped / 2 * 2 * 32);
}

// StatsIfChanged answers "unchanged" without a lock from a revision's shared
// accepted counter. Two writers ingest into one job while a reader polls it
// with one revision, a second thread registers and removes another job the
// reader also polls, and Tick takes snapshots while the clock moves window
// bases. The reader records the lifetime count of every answer that says
// "changed"; after the writers join, one more call must either say
// "changed" with the full count or "unchanged" after an answer that already
// had it: a completed batch is never hidden. Counts only grow. Under TSan:
// the fast path's loads race with no write; under ASan: a revision keeps a
// removed job's counters alive.
TEST_CASE("StatsIfChanged's lock-free answer never hides a completed batch", "[concurrency]") {
  rescale::ManualClock clock;
  rescale::MetricsStoreOptions options;
  options.window = absl::Seconds(60);  // snapshots every 10 s of the clock
  options.max_sample_age = absl::Hours(2);
  rescale::MetricsStore store(options);
  const std::string job = "stable/watched";
  const std::string churn = "churn/watched";
  REQUIRE(store.AddJob(job, 8, 32).ok());

  constexpr int kPollWriters = 2;
  constexpr int kPollBatches = 800;
  std::vector<uint64_t> accepted(kPollWriters, 0);
  std::atomic<int> writers_left{kPollWriters};
  std::vector<std::thread> threads;
  for (int w = 0; w < kPollWriters; ++w) {
    threads.emplace_back([&, w] {
      const std::string pod = "pod-" + std::to_string(w);
      std::vector<rescale::StepSample> batch(16);
      for (int b = 0; b < kPollBatches; ++b) {
        for (size_t i = 0; i < batch.size(); ++i) {
          batch[i] = {};
          batch[i].job_id = (b % 4 == 0) ? churn : job;
          batch[i].pod = pod;
          batch[i].world_size = 1 + (b + w) % 3;
          batch[i].step_seconds = 0.1;
        }
        const rescale::IngestResult result = store.Ingest(batch, clock.Now());
        if (b % 4 != 0) accepted[w] += result.accepted;
      }
      writers_left.fetch_sub(1, std::memory_order_release);
    });
  }
  bool churn_ok = true;
  threads.emplace_back([&] {
    for (int round = 0; writers_left.load(std::memory_order_acquire) > 0; ++round) {
      if (round % 2 == 0) {
        churn_ok = store.AddJob(churn, 8, 32).ok() && churn_ok;
      } else {
        store.RemoveJob(churn);
      }
    }
  });
  rescale::MetricsStore::StatsRevision revision, churn_revision;
  uint64_t seen = 0;
  bool monotone = true;
  int changed_answers = 0;
  auto count_of = [](const std::vector<rescale::SizeStats>& stats) {
    uint64_t total = 0;
    for (const rescale::SizeStats& s : stats) total += s.lifetime_count;
    return total;
  };
  do {  // at least once, however fast the writers are
    clock.Advance(absl::Seconds(1));
    store.Tick(clock.Now());
    if (auto stats = store.StatsIfChanged(job, clock.Now(), revision)) {
      const uint64_t count = count_of(*stats);
      monotone = monotone && count >= seen;
      seen = count;
      ++changed_answers;
    }
    store.StatsIfChanged(churn, clock.Now(), churn_revision);
  } while (writers_left.load(std::memory_order_acquire) > 0);
  for (std::thread& t : threads) t.join();

  const uint64_t expected = accepted[0] + accepted[1];
  if (auto stats = store.StatsIfChanged(job, clock.Now(), revision)) seen = count_of(*stats);
  CHECK(seen == expected);
  CHECK(expected == uint64_t{kPollWriters} * kPollBatches * 3 / 4 * 16);
  CHECK(monotone);
  CHECK(churn_ok);
  CHECK(changed_answers > 0);
  // Nothing moved since: the fast path says so.
  CHECK_FALSE(store.StatsIfChanged(job, clock.Now(), revision).has_value());
}
