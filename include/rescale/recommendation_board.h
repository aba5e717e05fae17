// RecommendationBoard: the current recommendation of every job, with
// per-job generations, and the fan-out of changes to watchers.
//
// Generations: a job's generation increases only when its target (replicas,
// suspend) changes, so a controller applies each generation exactly once.
//
// Watchers: each Subscription holds at most one pending change per job
// (newer state replaces older), so a slow reader costs memory bounded by the
// number of jobs and always converges on the newest state, never on a stale
// one.
//
// Plans: each Deliver of a non-empty staging is one plan, numbered by a
// monotonic plan_id (per board, so per rescaled process): its events carry
// the id, and a PLAN_END carrying it follows them, so a controller applies a
// plan whole (shrinks before grows) instead of what happened to have
// arrived. The engine stages a plan under its lock and delivers after
// releasing it; stagings of two plans that meet before one Deliver become
// one plan. Coalescing keeps the boundary honest: when a change replaces (or
// cancels) one still pending before a PLAN_END, the plans in between merge
// (those PLAN_ENDs are dropped, the newest plan's closes them all), so a
// reader always sees every change of a plan before its PLAN_END, and never a
// PLAN_END of a plan whose change it has yet to read. The initial list
// (ADDED..., SYNCED) is a snapshot of whole plans: its events carry the id of
// the newest plan it includes, SYNCED closes it, and no PLAN_END follows.
//
// Fan-out: Stage and StageRemove record decisions and queue their events
// under the board's state lock only (the engine calls them under its own
// lock, so they must stay O(changes), whatever the number of watchers);
// Deliver hands the queued events to every subscription and then runs the
// ready callbacks, holding no lock of the board's while a callback runs, so
// a callback may start a gRPC write. Publish and Remove do both.
//
// Thread safety: all methods are thread-safe. Lock order: fanout_mu_ ->
// mu_ -> a shard's lock, and fanout_mu_ -> subscription. A ready callback
// runs without any
// lock of the board's or the subscription's (so it may call Next); it must
// not call Deliver, Subscribe or Unsubscribe while holding a lock that a
// caller of those holds.
#ifndef RESCALE_RECOMMENDATION_BOARD_H_
#define RESCALE_RECOMMENDATION_BOARD_H_

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "rescale/mutex.h"
#include "rescale/types.h"

namespace rescale {

struct RecommendationEvent {
  // kPlanEnd closes plan `plan_id`: every change of it (and of the plans
  // merged into it) came before. No recommendation.
  enum class Type { kAdded, kModified, kDeleted, kSynced, kPlanEnd };
  Type type = Type::kAdded;
  Recommendation recommendation;  // empty for kSynced and kPlanEnd
  // The plan of the change (after coalescing, the newest plan that changed
  // the job); in the initial list and on SYNCED, the newest plan the list
  // includes (0 = none yet). Never 0 after SYNCED.
  uint64_t plan_id = 0;
};

class Subscription {
 public:
  enum class Poll { kEvent, kEmpty, kClosed };

  // Takes the next event into *event. kEmpty arms the ready callback: it will
  // be called once when the next event (or Close) arrives. kClosed is final.
  Poll Next(RecommendationEvent* event);

  // Sets the callback run when an event arrives while the reader is waiting
  // (after a Next() returned kEmpty). Runs on the publishing thread without
  // this subscription's lock; it must not block or call into the board.
  void SetReadyCallback(std::function<void()> callback);

  const std::string& namespace_filter() const { return namespace_filter_; }

  // Events waiting for the reader: the unread part of the initial list and
  // SYNCED, then at most one change per job and one PLAN_END per change plus
  // one.
  size_t queued() const;

 private:
  friend class RecommendationBoard;
  explicit Subscription(std::string namespace_filter)
      : namespace_filter_(std::move(namespace_filter)) {}

  // Queues the initial list and SYNCED, read before any change; before any
  // Push.
  void PushInitial(std::vector<std::shared_ptr<const RecommendationEvent>> events);
  // Queues `event` (shared by every subscription it goes to); returns the
  // ready callback to run, without any lock, when the reader was waiting.
  std::function<void()> Push(std::shared_ptr<const RecommendationEvent> event);
  void Close();

  // Drops the PLAN_ENDs queued after `sequence`: a change of a later plan
  // replaced or cancelled the one there, so those plans merge.
  void MergePlansAfterLocked(uint64_t sequence) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::function<void()> ReadyCallbackLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string namespace_filter_;
  mutable Mutex mu_;
  // The initial list and SYNCED, as of subscribing: a snapshot, read first
  // and never coalesced with the changes that follow (those belong to
  // plans after it).
  std::deque<std::shared_ptr<const RecommendationEvent>> initial_ ABSL_GUARDED_BY(mu_);
  // Changes and PLAN_ENDs in delivery order, keyed by arrival sequence.
  std::map<uint64_t, std::shared_ptr<const RecommendationEvent>> order_ ABSL_GUARDED_BY(mu_);
  // Each job with a change in order_: its sequence there.
  absl::flat_hash_map<std::string, uint64_t> pending_ ABSL_GUARDED_BY(mu_);
  // The sequences of the PLAN_ENDs in order_. Never two in a row, so at
  // most one more than the changes.
  std::set<uint64_t> plan_ends_ ABSL_GUARDED_BY(mu_);
  // The reader took a change whose PLAN_END it has not taken yet.
  bool read_since_plan_end_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t next_sequence_ ABSL_GUARDED_BY(mu_) = 0;
  bool reader_waiting_ ABSL_GUARDED_BY(mu_) = false;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  std::function<void()> ready_callback_ ABSL_GUARDED_BY(mu_);
};

class RecommendationBoard {
 public:
  explicit RecommendationBoard(int max_subscriptions = 1024)
      : max_subscriptions_(max_subscriptions) {}

  // Records the newest decision for each job in `decisions`. Fills in the
  // generation (bumped only when the target changed). Watchers get ADDED for
  // new jobs and MODIFIED when the visible decision changed. Returns the
  // recommendations as stored. Stage + Deliver.
  std::vector<Recommendation> Publish(std::vector<Recommendation> decisions);
  // Drops a job; watchers get DELETED with its last recommendation.
  // StageRemove + Deliver.
  void Remove(const std::string& job_id);

  // Publish and Remove without the fan-out: the events wait for Deliver.
  // Readers (Get, List) see the change at once; watchers once delivered.
  // With `target_changes`, adds to it, by the new recommendation's action,
  // the decisions whose target (replicas, suspend) changed, new jobs'
  // first ones included (monitoring: recommendation changes per plan).
  void Stage(std::vector<Recommendation> decisions,
             std::array<uint64_t, kActionCount>* target_changes = nullptr);
  // The generation each of `decisions` gets if staged now (set in place),
  // and the indices of those that are new or change what a watcher sees
  // (the target, and with it the generation, among it): what must be
  // recorded (StateStore) before they are staged. The caller keeps other
  // stagings out until it stages them.
  std::vector<size_t> AssignGenerations(std::vector<Recommendation>& decisions) const;
  // The generations in `decisions` were handed out but not published (the
  // state store refused the write, which may yet have landed): no other
  // target of those jobs gets them.
  void ReserveGenerations(const std::vector<Recommendation>& decisions);
  // Puts back what a StateStore kept: each job's newest recommendation and
  // the last generation of jobs deregistered since. Before any watcher
  // subscribes (no events).
  void Restore(std::vector<Recommendation> recommendations,
               std::vector<std::pair<std::string, uint64_t>> retired_generations);
  void StageRemove(const std::string& job_id);
  // A follower's copy of the leader's board (high availability): stages
  // each recommendation as it is, generation included (the leader assigned
  // it), with the events Stage would make, and sets the kept generations of
  // deregistered jobs. The caller delivers.
  void StageReplicated(std::vector<Recommendation> recommendations,
                       std::vector<std::pair<std::string, uint64_t>> retired_generations);
  // Hands every staged event to the subscriptions, in staging order, as
  // one plan (a new plan_id) closed by its PLAN_END, then runs the ready
  // callbacks of the readers that were waiting, without any lock of the
  // board's held. Nothing staged: no plan, no event.
  void Deliver();
  // The id of the newest plan delivered (0 = none yet).
  uint64_t last_plan_id() const;

  std::optional<Recommendation> Get(const std::string& job_id) const;
  // Ordered by job_id; `namespace_filter` empty = all. One plan's whole,
  // never half of two.
  std::vector<Recommendation> List(const std::string& namespace_filter = "") const;
  // As List, without copying: the recommendations are immutable once
  // recorded (a change records a new one), so a caller may keep them.
  std::vector<std::shared_ptr<const Recommendation>> Snapshot(
      std::string_view namespace_filter = "") const;

  // A new watcher, primed with ADDED for every current job and then SYNCED.
  // RESOURCE_EXHAUSTED when max_subscriptions are open.
  absl::StatusOr<std::shared_ptr<Subscription>> Subscribe(std::string namespace_filter = "");
  void Unsubscribe(const std::shared_ptr<Subscription>& subscription);
  // Closes every subscription (shutdown); later Subscribe calls fail UNAVAILABLE.
  void CloseAll();
  int subscription_count() const;

 private:
  // The decisions are sharded by job id, each shard with its own lock: Get
  // takes one shard's lock only, so it waits for at most a shard's share of
  // a staging, never for a whole plan.
  static constexpr int kShards = 16;
  struct Shard {
    mutable Mutex mu;
    absl::flat_hash_map<std::string, std::shared_ptr<const Recommendation>> current
        ABSL_GUARDED_BY(mu);
    // Generation of deregistered jobs is kept so a re-registered job never
    // reuses a generation a controller has already applied.
    absl::flat_hash_map<std::string, uint64_t> retired_generations ABSL_GUARDED_BY(mu);
    // Decisions handed to a state store whose write failed: the write may
    // still have landed (a timed-out or partly applied transaction) and
    // been seen elsewhere, so their generations are not given to another
    // target.
    // The newest such decision per job (its generation and target).
    absl::flat_hash_map<std::string, Recommendation> reserved ABSL_GUARDED_BY(mu);
  };
  // The generation `rec`, a new target of its job after generation
  // `current` (0 = none), gets: the reserved one when that was for the same
  // target, else one above `current`, the retired and the reserved.
  static uint64_t NextGeneration(const Shard& shard, const Recommendation& rec, uint64_t current)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu);
  Shard& ShardOf(std::string_view job_id);
  const Shard& ShardOf(std::string_view job_id) const;
  // Stage; with `stored`, also the recommendations as stored.
  void StageInto(std::vector<Recommendation> decisions, std::vector<Recommendation>* stored,
                 std::array<uint64_t, kActionCount>* target_changes = nullptr);
  void StageEventLocked(RecommendationEvent event) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes the staged events as one plan: stamps the next plan_id and
  // appends its PLAN_END. Empty when nothing was staged.
  std::vector<std::shared_ptr<const RecommendationEvent>> TakePlanLocked()
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Every shard's decisions in `namespace_filter`, unordered.
  std::vector<std::shared_ptr<const Recommendation>> CopyLocked(
      std::string_view namespace_filter) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Pushes `events` to the subscriptions, collecting ready callbacks.
  void FanOutLocked(const std::vector<std::shared_ptr<const RecommendationEvent>>& events,
                    std::vector<std::function<void()>>& ready)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(fanout_mu_);

  const int max_subscriptions_;
  // Serialises fan-outs, so subscriptions get events in staging order, and
  // guards the list of subscriptions. Taken before mu_.
  mutable Mutex fanout_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  std::vector<std::shared_ptr<Subscription>> subscriptions_ ABSL_GUARDED_BY(fanout_mu_);
  // Serialises stagings (which take the shards' locks one at a time) and
  // whole-board reads (List, Subscribe); guards the events staged but not
  // yet delivered. Taken before any shard's lock.
  mutable Mutex mu_;
  std::vector<std::shared_ptr<const RecommendationEvent>> staged_ ABSL_GUARDED_BY(mu_);
  // The id of the newest plan taken for delivery; staged events belong to
  // the next one.
  uint64_t last_plan_id_ ABSL_GUARDED_BY(mu_) = 0;
  std::array<Shard, kShards> shards_;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace rescale

#endif  // RESCALE_RECOMMENDATION_BOARD_H_
