// Tests of rescale::RecommendationBoard and Subscription: per-job
// generations (bumped only when the target changes, continued across a
// deregistration), the watcher protocol (ADDED for every job then SYNCED,
// MODIFIED on visible changes, DELETED on removal), coalescing of pending
// events per job, namespace filtering, the ready callback, the watcher limit
// and shutdown. A [concurrency] case has publisher threads racing a reader
// driven by the ready callback; it must converge on the board's final state.
#include "rescale/recommendation_board.h"

#include <catch2/catch.hpp>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/time.h"

namespace rescale {
namespace {

using Type = RecommendationEvent::Type;
using Poll = Subscription::Poll;

Recommendation Rec(const std::string& job_id, uint32_t replicas, std::string reason = "r") {
  Recommendation rec;
  rec.job_id = job_id;
  rec.replicas = replicas;
  rec.suspend = replicas == 0;
  rec.action = Action::kHold;
  rec.reason = std::move(reason);
  rec.binding_constraint = BindingConstraint::kMinReplicas;
  rec.policy = "static-min";
  rec.gpus = replicas;
  return rec;
}

uint64_t PublishOne(RecommendationBoard& board, Recommendation rec) {
  std::vector<Recommendation> stored = board.Publish({std::move(rec)});
  REQUIRE(stored.size() == 1);
  return stored[0].generation;
}

std::shared_ptr<Subscription> MustSubscribe(RecommendationBoard& board, std::string ns = "") {
  absl::StatusOr<std::shared_ptr<Subscription>> sub = board.Subscribe(std::move(ns));
  REQUIRE(sub.ok());
  return *sub;
}

// Reads every queued event until kEmpty (or kClosed), PLAN_ENDs included.
std::vector<RecommendationEvent> DrainAll(Subscription& sub, Poll* last = nullptr) {
  std::vector<RecommendationEvent> events;
  RecommendationEvent event;
  Poll poll;
  while ((poll = sub.Next(&event)) == Poll::kEvent) events.push_back(event);
  if (last != nullptr) *last = poll;
  return events;
}

// As DrainAll, without the PLAN_ENDs (cases about the changes themselves).
std::vector<RecommendationEvent> Drain(Subscription& sub, Poll* last = nullptr) {
  std::vector<RecommendationEvent> events;
  for (RecommendationEvent& event : DrainAll(sub, last)) {
    if (event.type != Type::kPlanEnd) events.push_back(std::move(event));
  }
  return events;
}

TEST_CASE("board bumps the generation only when the target changes") {
  RecommendationBoard board;
  CHECK(PublishOne(board, Rec("ns/a", 2)) == 1);
  CHECK(PublishOne(board, Rec("ns/a", 2)) == 1);
  // The reason alone is not a new target.
  CHECK(PublishOne(board, Rec("ns/a", 2, "another reason")) == 1);
  CHECK(PublishOne(board, Rec("ns/a", 4)) == 2);
  CHECK(PublishOne(board, Rec("ns/a", 0)) == 3);  // suspend
  CHECK(PublishOne(board, Rec("ns/a", 0)) == 3);
  Recommendation suspend_flip = Rec("ns/a", 0);
  suspend_flip.suspend = false;  // same replicas, different suspend
  CHECK(PublishOne(board, suspend_flip) == 4);

  std::optional<Recommendation> got = board.Get("ns/a");
  REQUIRE(got.has_value());
  CHECK(got->generation == 4);
  CHECK_FALSE(board.Get("ns/unknown").has_value());
}

TEST_CASE("board keeps generations per job") {
  RecommendationBoard board;
  std::vector<Recommendation> stored = board.Publish({Rec("ns/a", 1), Rec("ns/b", 1)});
  REQUIRE(stored.size() == 2);
  CHECK(stored[0].generation == 1);
  CHECK(stored[1].generation == 1);
  stored = board.Publish({Rec("ns/a", 3), Rec("ns/b", 1)});
  CHECK(stored[0].generation == 2);
  CHECK(stored[1].generation == 1);
}

TEST_CASE("board continues a re-registered job from its retired generation") {
  RecommendationBoard board;
  PublishOne(board, Rec("ns/a", 1));
  PublishOne(board, Rec("ns/a", 2));
  REQUIRE(PublishOne(board, Rec("ns/a", 3)) == 3);
  board.Remove("ns/a");
  CHECK_FALSE(board.Get("ns/a").has_value());
  CHECK(PublishOne(board, Rec("ns/a", 1)) == 4);
  CHECK(PublishOne(board, Rec("ns/a", 1)) == 4);
  CHECK(PublishOne(board, Rec("ns/a", 2)) == 5);
}

TEST_CASE("board lists recommendations sorted by job id with a namespace filter") {
  RecommendationBoard board;
  board.Publish({Rec("z/c", 1), Rec("a/b", 1), Rec("a/a", 1), Rec("ab/x", 1)});
  std::vector<Recommendation> all = board.List();
  REQUIRE(all.size() == 4);
  CHECK(all[0].job_id == "a/a");
  CHECK(all[1].job_id == "a/b");
  CHECK(all[2].job_id == "ab/x");
  CHECK(all[3].job_id == "z/c");
  std::vector<Recommendation> in_a = board.List("a");
  REQUIRE(in_a.size() == 2);
  CHECK(in_a[0].job_id == "a/a");
  CHECK(in_a[1].job_id == "a/b");
  CHECK(board.List("none").empty());
}

TEST_CASE("subscribe primes ADDED for each job sorted by job id then SYNCED") {
  RecommendationBoard board;
  board.Publish({Rec("ns/c", 3), Rec("ns/a", 1), Rec("ns/b", 2)});
  auto sub = MustSubscribe(board);
  Poll last;
  std::vector<RecommendationEvent> events = Drain(*sub, &last);
  CHECK(last == Poll::kEmpty);
  REQUIRE(events.size() == 4);
  CHECK(events[0].type == Type::kAdded);
  CHECK(events[0].recommendation.job_id == "ns/a");
  CHECK(events[0].recommendation.replicas == 1);
  CHECK(events[0].recommendation.generation == 1);
  CHECK(events[1].type == Type::kAdded);
  CHECK(events[1].recommendation.job_id == "ns/b");
  CHECK(events[2].type == Type::kAdded);
  CHECK(events[2].recommendation.job_id == "ns/c");
  CHECK(events[2].recommendation.replicas == 3);
  CHECK(events[3].type == Type::kSynced);
  CHECK(events[3].recommendation.job_id.empty());
}

TEST_CASE("subscribe on an empty board yields only SYNCED") {
  RecommendationBoard board;
  auto sub = MustSubscribe(board);
  std::vector<RecommendationEvent> events = Drain(*sub);
  REQUIRE(events.size() == 1);
  CHECK(events[0].type == Type::kSynced);
}

TEST_CASE("watcher sees ADDED for a new job and MODIFIED on a visible change") {
  RecommendationBoard board;
  PublishOne(board, Rec("ns/a", 1));
  auto sub = MustSubscribe(board);
  Drain(*sub);

  PublishOne(board, Rec("ns/b", 2));
  std::vector<RecommendationEvent> events = Drain(*sub);
  REQUIRE(events.size() == 1);
  CHECK(events[0].type == Type::kAdded);
  CHECK(events[0].recommendation.job_id == "ns/b");

  PublishOne(board, Rec("ns/a", 4));
  events = Drain(*sub);
  REQUIRE(events.size() == 1);
  CHECK(events[0].type == Type::kModified);
  CHECK(events[0].recommendation.job_id == "ns/a");
  CHECK(events[0].recommendation.replicas == 4);
  CHECK(events[0].recommendation.generation == 2);

  // A new reason is a visible change without a new generation.
  PublishOne(board, Rec("ns/a", 4, "new reason"));
  events = Drain(*sub);
  REQUIRE(events.size() == 1);
  CHECK(events[0].type == Type::kModified);
  CHECK(events[0].recommendation.reason == "new reason");
  CHECK(events[0].recommendation.generation == 2);
}

TEST_CASE("watcher gets no event when only decided_at or throughput changes") {
  RecommendationBoard board;
  Recommendation rec = Rec("ns/a", 2);
  PublishOne(board, rec);
  auto sub = MustSubscribe(board);
  Drain(*sub);

  rec.decided_at = absl::FromUnixSeconds(1'700'000'100);
  rec.current_samples_per_second = 123;
  rec.predicted_samples_per_second = 456;
  PublishOne(board, rec);
  Poll last;
  CHECK(Drain(*sub, &last).empty());
  CHECK(last == Poll::kEmpty);
  // The board itself stores the newest figures.
  std::optional<Recommendation> got = board.Get("ns/a");
  REQUIRE(got.has_value());
  CHECK(got->decided_at == rec.decided_at);
  CHECK(got->predicted_samples_per_second == 456);
}

TEST_CASE("watcher gets DELETED with the last recommendation on Remove") {
  RecommendationBoard board;
  PublishOne(board, Rec("ns/a", 3));
  auto sub = MustSubscribe(board);
  Drain(*sub);
  board.Remove("ns/a");
  std::vector<RecommendationEvent> events = Drain(*sub);
  REQUIRE(events.size() == 1);
  CHECK(events[0].type == Type::kDeleted);
  CHECK(events[0].recommendation.job_id == "ns/a");
  CHECK(events[0].recommendation.replicas == 3);

  // Removing an unknown job is a no-op.
  board.Remove("ns/a");
  CHECK(Drain(*sub).empty());
}

TEST_CASE("watcher coalesces changes to one job into one event with the newest state") {
  RecommendationBoard board;
  PublishOne(board, Rec("ns/a", 1));
  PublishOne(board, Rec("ns/b", 1));
  auto sub = MustSubscribe(board);
  Drain(*sub);

  PublishOne(board, Rec("ns/a", 2));
  PublishOne(board, Rec("ns/b", 5));
  PublishOne(board, Rec("ns/a", 3));
  PublishOne(board, Rec("ns/a", 4, "latest"));
  std::vector<RecommendationEvent> events = Drain(*sub);
  REQUIRE(events.size() == 2);
  // Delivery order is the order in which each job first became pending.
  CHECK(events[0].type == Type::kModified);
  CHECK(events[0].recommendation.job_id == "ns/a");
  CHECK(events[0].recommendation.replicas == 4);
  CHECK(events[0].recommendation.reason == "latest");
  CHECK(events[0].recommendation.generation == 4);
  CHECK(events[1].recommendation.job_id == "ns/b");
  CHECK(events[1].recommendation.replicas == 5);
}

TEST_CASE("watcher keeps ADDED for a job it never saw when later changes coalesce") {
  RecommendationBoard board;
  auto sub = MustSubscribe(board);
  Drain(*sub);
  PublishOne(board, Rec("ns/a", 1));
  PublishOne(board, Rec("ns/a", 2));
  PublishOne(board, Rec("ns/a", 3));
  std::vector<RecommendationEvent> events = Drain(*sub);
  REQUIRE(events.size() == 1);
  CHECK(events[0].type == Type::kAdded);
  CHECK(events[0].recommendation.replicas == 3);
  CHECK(events[0].recommendation.generation == 3);
}

TEST_CASE("watcher coalesces a pending change followed by a removal into DELETED") {
  RecommendationBoard board;
  PublishOne(board, Rec("ns/a", 1));
  auto sub = MustSubscribe(board);
  Drain(*sub);
  PublishOne(board, Rec("ns/a", 2));
  board.Remove("ns/a");
  std::vector<RecommendationEvent> events = Drain(*sub);
  REQUIRE(events.size() == 1);
  CHECK(events[0].type == Type::kDeleted);
  CHECK(events[0].recommendation.replicas == 2);
}

TEST_CASE(
    "a stalled watcher holds one pending event per job while a job is added and deleted "
    "over and over") {
  RecommendationBoard board;
  PublishOne(board, Rec("ns/stays", 1));
  auto sub = MustSubscribe(board);  // ADDED ns/stays, SYNCED: never read
  for (int i = 0; i < 1000; ++i) {
    PublishOne(board, Rec("ns/flaps", 1 + i % 3));
    board.Remove("ns/flaps");
  }
  // The reader never saw ns/flaps: nothing of it is queued, not even its
  // place in the order.
  CHECK(sub->queued() == 2);
  PublishOne(board, Rec("ns/flaps", 5));
  CHECK(sub->queued() == 4);  // and its PLAN_END
  std::vector<RecommendationEvent> events = Drain(*sub);
  REQUIRE(events.size() == 3);
  CHECK(events[0].recommendation.job_id == "ns/stays");
  CHECK(events[1].type == Type::kSynced);
  CHECK(events[2].type == Type::kAdded);
  CHECK(events[2].recommendation.replicas == 5);
  CHECK(sub->queued() == 0);
}

TEST_CASE("watcher with a namespace filter sees only jobs of that namespace") {
  RecommendationBoard board;
  board.Publish({Rec("team-a/x", 1), Rec("team-b/y", 1), Rec("team-a/z", 1)});
  auto sub = MustSubscribe(board, "team-a");
  CHECK(sub->namespace_filter() == "team-a");
  std::vector<RecommendationEvent> events = Drain(*sub);
  REQUIRE(events.size() == 3);
  CHECK(events[0].recommendation.job_id == "team-a/x");
  CHECK(events[1].recommendation.job_id == "team-a/z");
  CHECK(events[2].type == Type::kSynced);

  board.Publish({Rec("team-b/y", 7), Rec("team-a/x", 7), Rec("team-ab/w", 1)});
  board.Remove("team-b/y");
  events = Drain(*sub);
  REQUIRE(events.size() == 1);
  CHECK(events[0].type == Type::kModified);
  CHECK(events[0].recommendation.job_id == "team-a/x");
}

TEST_CASE("ready callback fires exactly once after Next returned kEmpty and an event arrives") {
  RecommendationBoard board;
  auto sub = MustSubscribe(board);
  int calls = 0;
  sub->SetReadyCallback([&calls] { ++calls; });

  // Events queued before the reader waits do not call back.
  PublishOne(board, Rec("ns/a", 1));
  CHECK(calls == 0);
  Poll last;
  Drain(*sub, &last);  // ends with kEmpty: the callback is armed
  REQUIRE(last == Poll::kEmpty);
  CHECK(calls == 0);

  PublishOne(board, Rec("ns/a", 2));
  CHECK(calls == 1);
  PublishOne(board, Rec("ns/b", 2));  // not re-armed: the reader has not polled
  PublishOne(board, Rec("ns/a", 3));
  CHECK(calls == 1);

  std::vector<RecommendationEvent> events = Drain(*sub, &last);
  CHECK(events.size() == 2);
  REQUIRE(last == Poll::kEmpty);
  board.Remove("ns/b");
  CHECK(calls == 2);
}

TEST_CASE("staged events wait for Deliver, ready callbacks run without the board's locks") {
  RecommendationBoard board;
  auto sub = MustSubscribe(board);
  Poll last;
  Drain(*sub, &last);  // SYNCED; the callback is armed
  REQUIRE(last == Poll::kEmpty);
  std::vector<uint64_t> seen_in_callback;
  sub->SetReadyCallback([&] {
    // Reads the board: with a lock of the board's held here, this would
    // deadlock. Readers see the staged state already.
    seen_in_callback.push_back(board.Get("ns/a").value().generation);
    seen_in_callback.push_back(static_cast<uint64_t>(board.subscription_count()));
  });

  board.Stage({Rec("ns/a", 1)});
  CHECK(board.Get("ns/a").has_value());  // readers see it at once
  CHECK(sub->queued() == 0);             // watchers once delivered
  CHECK(seen_in_callback.empty());
  board.Stage({Rec("ns/a", 2)});
  board.StageRemove("ns/b");  // unknown: nothing staged
  board.Deliver();
  CHECK(seen_in_callback == std::vector<uint64_t>{2, 1});
  // Both stagings arrive, coalesced to the newest state of the job.
  std::vector<RecommendationEvent> events = Drain(*sub, &last);
  REQUIRE(events.size() == 1);
  CHECK(events[0].type == Type::kAdded);
  CHECK(events[0].recommendation.replicas == 2);
  CHECK(events[0].recommendation.generation == 2);

  // A watcher subscribing while events are staged starts from the state that
  // includes them, and does not get them again; the existing one does.
  board.Stage({Rec("ns/a", 3)});
  auto late = MustSubscribe(board);
  events = Drain(*late);
  REQUIRE(events.size() == 2);
  CHECK(events[0].recommendation.replicas == 3);
  CHECK(events[1].type == Type::kSynced);
  board.Deliver();
  CHECK(Drain(*late).empty());
  events = Drain(*sub);
  REQUIRE(events.size() == 1);
  CHECK(events[0].recommendation.replicas == 3);
}

TEST_CASE("ready callback fires on close when the reader is waiting") {
  RecommendationBoard board;
  auto sub = MustSubscribe(board);
  int calls = 0;
  sub->SetReadyCallback([&calls] { ++calls; });
  Drain(*sub);
  board.Unsubscribe(sub);
  CHECK(calls == 1);
  CHECK(board.subscription_count() == 0);
  RecommendationEvent event;
  CHECK(sub->Next(&event) == Poll::kClosed);
  // A closed subscription gets nothing further.
  PublishOne(board, Rec("ns/a", 1));
  CHECK(sub->Next(&event) == Poll::kClosed);
  CHECK(calls == 1);
}

TEST_CASE("board refuses watchers beyond the limit with RESOURCE_EXHAUSTED") {
  RecommendationBoard board(/*max_subscriptions=*/2);
  auto first = MustSubscribe(board);
  auto second = MustSubscribe(board);
  CHECK(board.subscription_count() == 2);
  absl::StatusOr<std::shared_ptr<Subscription>> third = board.Subscribe();
  REQUIRE_FALSE(third.ok());
  CHECK(third.status().code() == absl::StatusCode::kResourceExhausted);
  CHECK_THAT(std::string(third.status().message()), Catch::Matchers::Contains("2"));

  board.Unsubscribe(first);
  CHECK(board.subscription_count() == 1);
  CHECK(board.Subscribe().ok());
}

TEST_CASE("CloseAll drains pending events, then kClosed, and refuses new watchers") {
  RecommendationBoard board;
  PublishOne(board, Rec("ns/a", 1));
  auto sub = MustSubscribe(board);
  board.CloseAll();
  CHECK(board.subscription_count() == 0);

  RecommendationEvent event;
  REQUIRE(sub->Next(&event) == Poll::kEvent);
  CHECK(event.type == Type::kAdded);
  REQUIRE(sub->Next(&event) == Poll::kEvent);
  CHECK(event.type == Type::kSynced);
  CHECK(sub->Next(&event) == Poll::kClosed);
  CHECK(sub->Next(&event) == Poll::kClosed);

  absl::StatusOr<std::shared_ptr<Subscription>> late = board.Subscribe();
  REQUIRE_FALSE(late.ok());
  CHECK(late.status().code() == absl::StatusCode::kUnavailable);
}

TEST_CASE(
    "a callback-driven reader converges on the newest state of every job while publishers race",
    "[concurrency]") {
  constexpr int kPublishers = 4;
  constexpr int kJobs = 8;
  constexpr int kRounds = 500;
  RecommendationBoard board;
  auto sub = MustSubscribe(board);

  // std::mutex rather than absl::Mutex: the system Abseil is not built with
  // ThreadSanitizer, so TSan would not see absl::Mutex's happens-before.
  std::mutex ready_mu;
  std::condition_variable ready_cv;
  bool ready = false;
  sub->SetReadyCallback([&] {
    {
      std::lock_guard<std::mutex> lock(ready_mu);
      ready = true;
    }
    ready_cv.notify_one();
  });

  // The reader's view: job -> newest recommendation seen.
  std::map<std::string, Recommendation> seen;
  bool synced = false;
  bool ok_order = true;  // generations never go backwards while a job exists
  std::thread reader([&] {
    RecommendationEvent event;
    while (true) {
      Poll poll = sub->Next(&event);
      if (poll == Poll::kClosed) return;
      if (poll == Poll::kEmpty) {
        // The callback is armed by this kEmpty and fires once on the next
        // event or on close, so the flag cannot be missed.
        std::unique_lock<std::mutex> lock(ready_mu);
        ready_cv.wait(lock, [&] { return ready; });
        ready = false;
        continue;
      }
      switch (event.type) {
        case Type::kSynced:
          synced = true;
          break;
        case Type::kPlanEnd:
          break;
        case Type::kDeleted:
          seen.erase(event.recommendation.job_id);
          break;
        case Type::kAdded:
        case Type::kModified: {
          auto it = seen.find(event.recommendation.job_id);
          if (it != seen.end() && event.recommendation.generation < it->second.generation) {
            ok_order = false;
          }
          seen[event.recommendation.job_id] = event.recommendation;
          break;
        }
      }
    }
  });

  std::vector<std::thread> publishers;
  for (int p = 0; p < kPublishers; ++p) {
    publishers.emplace_back([&board, p] {
      for (int round = 0; round < kRounds; ++round) {
        const std::string job = "ns/job-" + std::to_string((round + p) % kJobs);
        if (round % 97 == 96) {
          board.Remove(job);
          continue;
        }
        const uint32_t replicas = static_cast<uint32_t>((round * 7 + p) % 5);
        board.Publish({Rec(job, replicas, "p" + std::to_string(p))});
      }
    });
  }
  for (std::thread& t : publishers) t.join();
  // Every publish happened before the close, so the reader drains them all.
  board.CloseAll();
  reader.join();

  CHECK(synced);
  CHECK(ok_order);
  std::vector<Recommendation> final_state = board.List();
  REQUIRE(seen.size() == final_state.size());
  for (const Recommendation& rec : final_state) {
    CAPTURE(rec.job_id);
    auto it = seen.find(rec.job_id);
    REQUIRE(it != seen.end());
    CHECK(it->second.generation == rec.generation);
    CHECK(it->second.replicas == rec.replicas);
    CHECK(it->second.suspend == rec.suspend);
    CHECK(it->second.reason == rec.reason);
  }
}

// ---- plans: plan_id and PLAN_END ---------------------------------------------

// "EVENT job plan_id" for each event, PLAN_END as "END plan_id", for
// comparing whole streams at once.
std::vector<std::string> Describe(const std::vector<RecommendationEvent>& events) {
  std::vector<std::string> out;
  for (const RecommendationEvent& event : events) {
    const std::string id = std::to_string(event.plan_id);
    switch (event.type) {
      case Type::kAdded:
        out.push_back("ADDED " + event.recommendation.job_id + " " + id);
        break;
      case Type::kModified:
        out.push_back("MODIFIED " + event.recommendation.job_id + " " + id);
        break;
      case Type::kDeleted:
        out.push_back("DELETED " + event.recommendation.job_id + " " + id);
        break;
      case Type::kSynced:
        out.push_back("SYNCED " + id);
        break;
      case Type::kPlanEnd:
        out.push_back("END " + id);
        break;
    }
  }
  return out;
}

using Lines = std::vector<std::string>;

TEST_CASE(
    "each Deliver of a staged batch is one plan: its events carry its id, a PLAN_END ends it") {
  RecommendationBoard board;
  auto sub = MustSubscribe(board);
  CHECK(Describe(DrainAll(*sub)) == Lines{"SYNCED 0"});
  CHECK(board.last_plan_id() == 0);

  // What the engine does: stage under its lock (several stagings may make
  // one plan), deliver after.
  board.Stage({Rec("ns/a", 1), Rec("ns/b", 2)});
  board.Stage({Rec("ns/c", 1)});
  CHECK(sub->queued() == 0);
  board.Deliver();
  CHECK(board.last_plan_id() == 1);
  CHECK(Describe(DrainAll(*sub)) == Lines{"ADDED ns/a 1", "ADDED ns/b 1", "ADDED ns/c 1", "END 1"});

  // Nothing staged (or nothing visible changed): no plan, no event.
  board.Deliver();
  board.Publish({Rec("ns/a", 1)});
  CHECK(board.last_plan_id() == 1);
  CHECK(DrainAll(*sub).empty());

  board.Stage({Rec("ns/a", 3)});
  board.StageRemove("ns/b");
  board.Deliver();
  CHECK(Describe(DrainAll(*sub)) == Lines{"MODIFIED ns/a 2", "DELETED ns/b 2", "END 2"});

  // A new watcher's initial list carries the newest plan it includes, and
  // SYNCED closes it: no PLAN_END.
  auto late = MustSubscribe(board);
  CHECK(Describe(DrainAll(*late)) == Lines{"ADDED ns/a 2", "ADDED ns/c 2", "SYNCED 2"});
}

TEST_CASE("a plan staged when a watcher subscribes is ended for the others, included for it") {
  RecommendationBoard board;
  auto sub = MustSubscribe(board);
  DrainAll(*sub);
  board.Stage({Rec("ns/a", 1)});
  auto late = MustSubscribe(board);  // delivers the staged plan first
  board.Deliver();                   // nothing left: no second plan
  CHECK(Describe(DrainAll(*sub)) == Lines{"ADDED ns/a 1", "END 1"});
  CHECK(Describe(DrainAll(*late)) == Lines{"ADDED ns/a 1", "SYNCED 1"});
}

TEST_CASE("plans a slow reader has not read keep their own PLAN_ENDs when they do not overlap") {
  RecommendationBoard board;
  auto sub = MustSubscribe(board);
  DrainAll(*sub);
  board.Publish({Rec("ns/a", 1)});
  board.Publish({Rec("ns/b", 1), Rec("ns/c", 1)});
  CHECK(Describe(DrainAll(*sub)) ==
        Lines{"ADDED ns/a 1", "END 1", "ADDED ns/b 2", "ADDED ns/c 2", "END 2"});
}

TEST_CASE("coalescing merges plans: every change comes before the newest plan's PLAN_END") {
  RecommendationBoard board;
  board.Publish({Rec("ns/a", 1), Rec("ns/b", 1), Rec("ns/c", 1), Rec("ns/d", 1)});  // plan 1
  auto sub = MustSubscribe(board);
  DrainAll(*sub);
  board.Publish({Rec("ns/a", 2), Rec("ns/b", 2)});  // plan 2
  board.Publish({Rec("ns/c", 2)});                  // plan 3: no overlap with 2
  // Plan 4 changes ns/b again: its newest state is delivered at the place
  // of plan 2's change, so plans 2 to 4 become one, ended by plan 4's END.
  // Were plan 2's END kept, a reader would apply ns/b's plan-4 state
  // without ns/d's, half of plan 4.
  board.Publish({Rec("ns/b", 4), Rec("ns/d", 4)});
  CHECK(Describe(DrainAll(*sub)) ==
        Lines{"MODIFIED ns/a 2", "MODIFIED ns/b 4", "MODIFIED ns/c 3", "MODIFIED ns/d 4", "END 4"});
}

TEST_CASE("a reader that took part of a plan gets the rest, merged, before the PLAN_END") {
  RecommendationBoard board;
  board.Publish({Rec("ns/a", 1), Rec("ns/b", 1), Rec("ns/c", 1)});  // plan 1
  auto sub = MustSubscribe(board);
  DrainAll(*sub);
  board.Publish({Rec("ns/a", 2), Rec("ns/b", 2)});  // plan 2
  RecommendationEvent event;
  REQUIRE(sub->Next(&event) == Poll::kEvent);
  CHECK(Describe({event}) == Lines{"MODIFIED ns/a 2"});
  board.Publish({Rec("ns/b", 3), Rec("ns/c", 3)});  // plan 3 changes ns/b again
  CHECK(Describe(DrainAll(*sub)) == Lines{"MODIFIED ns/b 3", "MODIFIED ns/c 3", "END 3"});
  // The next plan is its own again.
  board.Publish({Rec("ns/a", 4)});
  CHECK(Describe(DrainAll(*sub)) == Lines{"MODIFIED ns/a 4", "END 4"});
}

TEST_CASE("a job added and deleted unseen merges the plans after it and leaves no empty plan") {
  RecommendationBoard board;
  auto sub = MustSubscribe(board);
  DrainAll(*sub);
  board.Publish({Rec("ns/x", 1)});  // plan 1
  board.Publish({Rec("ns/a", 1)});  // plan 2
  board.Remove("ns/x");             // plan 3 cancels plan 1's ADDED
  CHECK(Describe(DrainAll(*sub)) == Lines{"ADDED ns/a 2", "END 3"});
  board.Publish({Rec("ns/y", 1)});  // plan 4
  board.Remove("ns/y");             // plan 5: nothing left for the reader
  CHECK(DrainAll(*sub).empty());
  CHECK(sub->queued() == 0);
}

TEST_CASE("the initial list is a snapshot: a later change of a listed job comes after SYNCED") {
  RecommendationBoard board;
  board.Publish({Rec("ns/a", 1), Rec("ns/b", 1)});  // plan 1
  auto sub = MustSubscribe(board);                  // not read yet
  board.Publish({Rec("ns/a", 2)});                  // plan 2
  board.Remove("ns/b");                             // plan 3
  // The initial list stays plan 1's whole state; plans 2 and 3 follow it.
  CHECK(Describe(DrainAll(*sub)) == Lines{"ADDED ns/a 1", "ADDED ns/b 1", "SYNCED 1",
                                          "MODIFIED ns/a 2", "END 2", "DELETED ns/b 3", "END 3"});
}

TEST_CASE("a job deleted, added and deleted again while the reader stalls reaches it DELETED") {
  RecommendationBoard board;
  board.Publish({Rec("ns/a", 1)});
  auto sub = MustSubscribe(board);
  DrainAll(*sub);  // the reader holds ns/a
  board.Remove("ns/a");
  board.Publish({Rec("ns/a", 2)});  // to the reader a change, not a job it never saw
  board.Remove("ns/a");
  CHECK(Describe(DrainAll(*sub)) == Lines{"DELETED ns/a 4", "END 4"});
  board.Publish({Rec("ns/a", 3)});
  board.Remove("ns/a");
  board.Publish({Rec("ns/a", 4)});
  std::vector<RecommendationEvent> events = DrainAll(*sub);
  CHECK(Describe(events) == Lines{"ADDED ns/a 7", "END 7"});
  CHECK(events[0].recommendation.replicas == 4);
}

TEST_CASE("a watcher gets a PLAN_END only for plans with a change in its namespace") {
  RecommendationBoard board;
  auto sub = MustSubscribe(board, "team-a");
  DrainAll(*sub);
  board.Publish({Rec("team-b/x", 1)});                      // plan 1: none of team-a's
  board.Publish({Rec("team-a/x", 1), Rec("team-b/y", 1)});  // plan 2
  board.Publish({Rec("team-b/x", 2)});                      // plan 3: none again
  CHECK(Describe(DrainAll(*sub)) == Lines{"ADDED team-a/x 2", "END 2"});
}

TEST_CASE("a reader stopping at each PLAN_END sees exactly the board after that plan",
          "[concurrency]") {
  constexpr int kJobs = 12;
  constexpr int kPlans = 1500;
  RecommendationBoard board;
  auto sub = MustSubscribe(board);
  std::mutex ready_mu;
  std::condition_variable ready_cv;
  bool ready = false;
  sub->SetReadyCallback([&] {
    {
      std::lock_guard<std::mutex> lock(ready_mu);
      ready = true;
    }
    ready_cv.notify_one();
  });

  // The reader applies changes only at a boundary (SYNCED, PLAN_END), as a
  // controller does, and records what it holds then.
  std::map<uint64_t, std::map<std::string, uint32_t>> seen_at_end;
  bool plan_ids_ok = true;  // a change's plan id is never above its PLAN_END's
  std::thread reader([&] {
    std::map<std::string, uint32_t> applied;
    std::map<std::string, RecommendationEvent> buffered;
    RecommendationEvent event;
    while (true) {
      const Poll poll = sub->Next(&event);
      if (poll == Poll::kClosed) return;
      if (poll == Poll::kEmpty) {
        std::unique_lock<std::mutex> lock(ready_mu);
        ready_cv.wait(lock, [&] { return ready; });
        ready = false;
        continue;
      }
      if (event.type != Type::kSynced && event.type != Type::kPlanEnd) {
        buffered[event.recommendation.job_id] = event;
        continue;
      }
      for (const auto& [id, change] : buffered) {
        if (event.type == Type::kPlanEnd && change.plan_id > event.plan_id) plan_ids_ok = false;
        if (change.type == Type::kDeleted) {
          applied.erase(id);
        } else {
          applied[id] = change.recommendation.replicas;
        }
      }
      buffered.clear();
      seen_at_end[event.plan_id] = applied;
    }
  });

  // One publisher, so the board after each Publish is exactly that plan's.
  std::map<uint64_t, std::map<std::string, uint32_t>> board_after = {{0, {}}};
  std::mt19937 random(7);
  for (int plan = 0; plan < kPlans; ++plan) {
    std::vector<Recommendation> decisions;
    for (int job = 0; job < kJobs; ++job) {
      if (random() % 3 == 0) {
        decisions.push_back(Rec("ns/job-" + std::to_string(job), 1 + random() % 4));
      }
    }
    if (random() % 10 == 0) {
      board.Remove("ns/job-" + std::to_string(random() % kJobs));
    } else {
      board.Publish(std::move(decisions));
    }
    std::map<std::string, uint32_t>& state = board_after[board.last_plan_id()];
    state.clear();
    for (const Recommendation& rec : board.List()) state[rec.job_id] = rec.replicas;
  }
  board.CloseAll();
  reader.join();

  CHECK(plan_ids_ok);
  REQUIRE(!seen_at_end.empty());
  // The reader ends on the newest plan, and at every boundary it saw, it
  // held the whole board of that plan: never half of one.
  CHECK(seen_at_end.rbegin()->first == board.last_plan_id());
  for (const auto& [plan_id, seen] : seen_at_end) {
    CAPTURE(plan_id);
    REQUIRE(board_after.count(plan_id) == 1);
    CHECK(seen == board_after.at(plan_id));
  }
}

}  // namespace
}  // namespace rescale
