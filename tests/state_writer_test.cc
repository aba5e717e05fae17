// StateWriter (src/engine/state_writer.h): group commit. Changes queued
// while a write is under way are written together by one of their callers,
// in queue order, each completion runs before its caller's Wait returns,
// and a failed write fails every change of its group and nothing else.
// The [concurrency] cases run under ThreadSanitizer in CI. Catch's
// assertions are not thread-safe: threads count their failures in atomics,
// which the test's thread checks.
#include "src/engine/state_writer.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"

namespace rescale::engine {
namespace {

// A state store that records each Write's job ids, and can hold the next
// Write until the test lets it go (so the test knows what queued behind it)
// or fail every Write. Everything else is unused by the writer.
class RecordingStore : public StateStore {
 public:
  std::string Describe() const override { return "recording"; }
  absl::StatusOr<StoredState> Load() override { return StoredState{}; }
  absl::Status PutJob(const StoredJob&) override { return absl::OkStatus(); }
  absl::Status DeleteJob(std::string_view, uint64_t) override { return absl::OkStatus(); }
  absl::Status PutCapacity(const CapacityReport&) override { return absl::OkStatus(); }
  absl::Status PutQueues(std::span<const QueueSpec>) override { return absl::OkStatus(); }
  absl::Status PutRecommendations(std::span<const Recommendation>) override {
    return absl::OkStatus();
  }
  absl::Status PutMeasurements(std::span<const StoredMeasurements>) override {
    return absl::OkStatus();
  }
  absl::Status Write(std::span<const StateChange> changes) override {
    std::unique_lock<std::mutex> lock(mu_);
    std::vector<std::string> ids;
    for (const StateChange& c : changes) ids.push_back(std::get<StoredJob>(c).spec.job_id);
    writes_.push_back(std::move(ids));
    in_write_ = true;
    changed_.notify_all();
    changed_.wait(lock, [&] { return !hold_; });
    in_write_ = false;
    return fail_ ? absl::UnavailableError("disk full") : absl::OkStatus();
  }
  void Hold() {
    std::lock_guard<std::mutex> lock(mu_);
    hold_ = true;
  }
  void AwaitInWrite() {
    std::unique_lock<std::mutex> lock(mu_);
    changed_.wait(lock, [&] { return in_write_; });
  }
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    hold_ = false;
    changed_.notify_all();
  }
  void Fail() {
    std::lock_guard<std::mutex> lock(mu_);
    fail_ = true;
  }
  std::vector<std::vector<std::string>> Writes() {
    std::lock_guard<std::mutex> lock(mu_);
    return writes_;
  }

 private:
  std::mutex mu_;
  std::condition_variable changed_;
  bool hold_ = false;                             // guarded by mu_
  bool in_write_ = false;                         // guarded by mu_
  bool fail_ = false;                             // guarded by mu_
  std::vector<std::vector<std::string>> writes_;  // guarded by mu_
};

StateChange Job(const std::string& id) {
  StoredJob job;
  job.spec.job_id = id;
  return job;
}

TEST_CASE("state writer: one caller writes its own change, and the completion runs first") {
  RecordingStore store;
  StateWriter writer(store);
  bool done = false;
  auto ticket = writer.Submit(Job("ns/a"), [&](const absl::Status& s) { done = s.ok(); });
  CHECK_FALSE(ticket->finished());
  CHECK(writer.Wait(ticket).ok());
  CHECK(done);
  CHECK(store.Writes() == std::vector<std::vector<std::string>>{{"ns/a"}});
  CHECK(writer.groups_written() == 1);
}

TEST_CASE("state writer: changes queued behind a write are written together, in order",
          "[concurrency]") {
  RecordingStore store;
  StateWriter writer(store);
  store.Hold();
  std::atomic<int> failed{0};
  std::thread first([&] { failed += !writer.Wait(writer.Submit(Job("ns/first"))).ok(); });
  store.AwaitInWrite();  // "first" is being written, and held there
  std::vector<std::string> completed;
  std::mutex completed_mu;
  std::vector<std::shared_ptr<WriteTicket>> tickets;
  for (int i = 0; i < 5; ++i) {
    const std::string id = absl::StrCat("ns/j", i);
    tickets.push_back(writer.Submit(Job(id), [&, id](const absl::Status&) {
      std::lock_guard<std::mutex> lock(completed_mu);
      completed.push_back(id);
    }));
  }
  std::vector<std::thread> waiters;
  for (auto& ticket : tickets) {
    waiters.emplace_back([&writer, &failed, ticket] { failed += !writer.Wait(ticket).ok(); });
  }
  store.Release();
  first.join();
  for (std::thread& t : waiters) t.join();
  CHECK(failed == 0);
  // One write for the first change, one for the five queued behind it.
  const std::vector<std::vector<std::string>> expected = {
      {"ns/first"}, {"ns/j0", "ns/j1", "ns/j2", "ns/j3", "ns/j4"}};
  CHECK(store.Writes() == expected);
  CHECK(completed == expected[1]);
  CHECK(writer.groups_written() == 2);
  CHECK(writer.changes_written() == 6);
}

TEST_CASE("state writer: a failed write fails every change of its group, and only those",
          "[concurrency]") {
  RecordingStore store;
  StateWriter writer(store);
  store.Hold();
  store.Fail();
  std::atomic<int> failed_completions{0};
  auto count = [&](const absl::Status& s) { failed_completions += !s.ok(); };
  std::atomic<bool> first_refused{false};
  std::thread first([&] {
    first_refused =
        writer.Wait(writer.Submit(Job("ns/first"), count)).code() == absl::StatusCode::kUnavailable;
  });
  store.AwaitInWrite();
  auto a = writer.Submit(Job("ns/a"), count);
  auto b = writer.Submit(Job("ns/b"), count);
  store.Release();
  first.join();
  CHECK(first_refused);
  CHECK(writer.Wait(a).code() == absl::StatusCode::kUnavailable);
  CHECK(writer.Wait(b).code() == absl::StatusCode::kUnavailable);
  CHECK(failed_completions == 3);
  CHECK(store.Writes().size() == 2);
}

TEST_CASE(
    "state writer: many concurrent callers, every change written once, each caller's in "
    "order",
    "[concurrency]") {
  RecordingStore store;
  StateWriter writer(store);
  constexpr int kThreads = 8;
  constexpr int kChanges = 200;
  std::vector<std::thread> threads;
  std::atomic<int> failed{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kChanges; ++i) {
        failed += !writer.Wait(writer.Submit(Job(absl::StrCat("ns/t", t, "-", i)))).ok();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  CHECK(failed == 0);
  std::vector<int> next(kThreads, 0);
  size_t written = 0;
  for (const auto& group : store.Writes()) {
    CHECK(group.size() <= StateWriter::kMaxGroup);
    for (const std::string& id : group) {
      const int t = std::stoi(id.substr(4, id.find('-') - 4));
      CHECK(id == absl::StrCat("ns/t", t, "-", next[t]));
      ++next[t];
      ++written;
    }
  }
  CHECK(written == kThreads * kChanges);
  CHECK(writer.changes_written() == kThreads * kChanges);
}

}  // namespace
}  // namespace rescale::engine
