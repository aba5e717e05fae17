// RecommendationBoard and Subscription (see rescale/recommendation_board.h).
#include "rescale/recommendation_board.h"

#include <algorithm>
#include <string_view>
#include <utility>

#include "absl/hash/hash.h"
#include "rescale/job_rules.h"

namespace rescale {

// ---- Subscription -----------------------------------------------------------

Subscription::Poll Subscription::Next(RecommendationEvent* event) {
  MutexLock lock(mu_);
  if (!initial_.empty()) {
    *event = *initial_.front();
    initial_.pop_front();
    return Poll::kEvent;
  }
  if (!order_.empty()) {
    auto first = order_.begin();
    *event = *first->second;
    if (event->type == RecommendationEvent::Type::kPlanEnd) {
      plan_ends_.erase(first->first);
      read_since_plan_end_ = false;
    } else {
      pending_.erase(event->recommendation.job_id);
      read_since_plan_end_ = true;
    }
    order_.erase(first);
    return Poll::kEvent;
  }
  if (closed_) return Poll::kClosed;
  reader_waiting_ = true;
  return Poll::kEmpty;
}

size_t Subscription::queued() const {
  MutexLock lock(mu_);
  return initial_.size() + order_.size();
}

void Subscription::SetReadyCallback(std::function<void()> callback) {
  MutexLock lock(mu_);
  ready_callback_ = std::move(callback);
}

void Subscription::PushInitial(std::vector<std::shared_ptr<const RecommendationEvent>> events) {
  MutexLock lock(mu_);
  for (auto& event : events) initial_.push_back(std::move(event));
}

std::function<void()> Subscription::ReadyCallbackLocked() {
  if (!reader_waiting_) return nullptr;
  reader_waiting_ = false;
  return ready_callback_;
}

void Subscription::MergePlansAfterLocked(uint64_t sequence) {
  for (auto it = plan_ends_.upper_bound(sequence); it != plan_ends_.end();) {
    order_.erase(*it);
    it = plan_ends_.erase(it);
  }
}

std::function<void()> Subscription::Push(std::shared_ptr<const RecommendationEvent> event) {
  MutexLock lock(mu_);
  if (closed_) return nullptr;
  if (event->type == RecommendationEvent::Type::kPlanEnd) {
    if (!order_.empty() && order_.rbegin()->second->type == RecommendationEvent::Type::kPlanEnd) {
      // Nothing of this plan is queued after the previous PLAN_END (its
      // changes cancelled queued ones): the newest id closes both.
      plan_ends_.erase(order_.rbegin()->first);
      order_.erase(std::prev(order_.end()));
    } else if (order_.empty() && !read_since_plan_end_) {
      return nullptr;  // the reader has nothing of this plan to close
    }
    const uint64_t sequence = next_sequence_++;
    order_.emplace(sequence, std::move(event));
    plan_ends_.insert(sequence);
    return ReadyCallbackLocked();
  }
  const std::string& job_id = event->recommendation.job_id;
  auto it = pending_.find(job_id);
  if (it == pending_.end()) {
    const uint64_t sequence = next_sequence_++;
    pending_.emplace(job_id, sequence);
    order_.emplace(sequence, std::move(event));
    return ReadyCallbackLocked();
  }
  // A change of this job is still queued: the reader gets only the newest
  // state, at the older change's place, so the plans after that place merge
  // into this one.
  const uint64_t sequence = it->second;
  MergePlansAfterLocked(sequence);
  std::shared_ptr<const RecommendationEvent>& queued = order_.at(sequence);
  if (queued->type == RecommendationEvent::Type::kAdded &&
      event->type == RecommendationEvent::Type::kDeleted) {
    // The reader never saw the job: it needs neither event, and its place
    // in the delivery order goes too, so a job added and deleted again and
    // again while the reader stalls costs nothing.
    order_.erase(sequence);
    pending_.erase(it);
    return nullptr;
  }
  if (queued->type == RecommendationEvent::Type::kAdded &&
      event->type == RecommendationEvent::Type::kModified) {
    // An ADDED it never saw stays ADDED (a copy: the event is shared with
    // other readers).
    auto added = std::make_shared<RecommendationEvent>(*event);
    added->type = RecommendationEvent::Type::kAdded;
    queued = std::move(added);
  } else if (queued->type == RecommendationEvent::Type::kDeleted &&
             event->type == RecommendationEvent::Type::kAdded) {
    // Deleted and added again unread: the reader still holds the job, so to
    // it this is a change (MODIFIED), and a later DELETED must reach it
    // rather than cancel an ADDED it "never saw".
    auto modified = std::make_shared<RecommendationEvent>(*event);
    modified->type = RecommendationEvent::Type::kModified;
    queued = std::move(modified);
  } else {
    queued = std::move(event);
  }
  return ReadyCallbackLocked();
}

void Subscription::Close() {
  std::function<void()> notify;
  {
    MutexLock lock(mu_);
    if (closed_) return;
    closed_ = true;
    notify = ReadyCallbackLocked();
  }
  if (notify) notify();
}

// ---- RecommendationBoard ----------------------------------------------------

std::vector<Recommendation> RecommendationBoard::Publish(std::vector<Recommendation> decisions) {
  std::vector<Recommendation> stored;
  StageInto(std::move(decisions), &stored);
  Deliver();
  return stored;
}

void RecommendationBoard::Remove(const std::string& job_id) {
  StageRemove(job_id);
  Deliver();
}

void RecommendationBoard::Stage(std::vector<Recommendation> decisions,
                                std::array<uint64_t, kActionCount>* target_changes) {
  StageInto(std::move(decisions), nullptr, target_changes);
}

RecommendationBoard::Shard& RecommendationBoard::ShardOf(std::string_view job_id) {
  return shards_[absl::HashOf(job_id) % kShards];
}
const RecommendationBoard::Shard& RecommendationBoard::ShardOf(std::string_view job_id) const {
  return shards_[absl::HashOf(job_id) % kShards];
}

void RecommendationBoard::StageInto(std::vector<Recommendation> decisions,
                                    std::vector<Recommendation>* stored,
                                    std::array<uint64_t, kActionCount>* target_changes) {
  const auto count_change = [target_changes](const Recommendation& rec) {
    const auto action = static_cast<size_t>(rec.action);
    if (target_changes != nullptr && action < kActionCount) ++(*target_changes)[action];
  };
  // Shard by shard, so a reader of one job (Get) waits for at most one
  // shard's share of a plan; the events keep the decisions' order.
  std::vector<std::vector<size_t>> by_shard(kShards);
  for (size_t i = 0; i < decisions.size(); ++i) {
    by_shard[absl::HashOf(std::string_view(decisions[i].job_id)) % kShards].push_back(i);
  }
  std::vector<std::string> ids;  // the decisions are moved into the shards
  if (stored != nullptr) {
    for (const Recommendation& rec : decisions) ids.push_back(rec.job_id);
  }
  std::vector<std::pair<size_t, RecommendationEvent>> events;
  MutexLock lock(mu_);
  for (int shard_index = 0; shard_index < kShards; ++shard_index) {
    if (by_shard[shard_index].empty()) continue;
    Shard& shard = shards_[shard_index];
    MutexLock shard_lock(shard.mu);
    for (size_t i : by_shard[shard_index]) {
      Recommendation& rec = decisions[i];
      auto it = shard.current.find(rec.job_id);
      if (it == shard.current.end()) {
        count_change(rec);
        rec.generation = NextGeneration(shard, rec, 0);
        shard.retired_generations.erase(rec.job_id);
        shard.reserved.erase(rec.job_id);
        events.emplace_back(i, RecommendationEvent{RecommendationEvent::Type::kAdded, rec});
        std::string id = rec.job_id;
        shard.current.emplace(std::move(id),
                              std::make_shared<const Recommendation>(std::move(rec)));
      } else {
        const Recommendation& old = *it->second;
        if (old.SameTarget(rec)) {
          rec.generation = old.generation;
        } else {
          count_change(rec);
          rec.generation = NextGeneration(shard, rec, old.generation);
          shard.reserved.erase(rec.job_id);
        }
        if (!old.SameVisibleDecision(rec)) {
          events.emplace_back(i, RecommendationEvent{RecommendationEvent::Type::kModified, rec});
        }
        it->second = std::make_shared<const Recommendation>(std::move(rec));
      }
    }
  }
  std::sort(events.begin(), events.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [index, event] : events) StageEventLocked(std::move(event));
  if (stored == nullptr) return;
  // Publish's answer: as stored, in the decisions' order.
  stored->reserve(ids.size());
  for (const std::string& id : ids) {
    const Shard& shard = ShardOf(id);
    MutexLock shard_lock(shard.mu);
    stored->push_back(*shard.current.at(id));
  }
}

std::vector<size_t> RecommendationBoard::AssignGenerations(
    std::vector<Recommendation>& decisions) const {
  // The same rule as StageInto.
  std::vector<size_t> changed;
  MutexLock lock(mu_);
  for (size_t i = 0; i < decisions.size(); ++i) {
    Recommendation& rec = decisions[i];
    const Shard& shard = ShardOf(rec.job_id);
    MutexLock shard_lock(shard.mu);
    if (auto it = shard.current.find(rec.job_id); it != shard.current.end()) {
      const Recommendation& old = *it->second;
      rec.generation =
          old.SameTarget(rec) ? old.generation : NextGeneration(shard, rec, old.generation);
      if (!old.SameVisibleDecision(rec)) changed.push_back(i);
      continue;
    }
    rec.generation = NextGeneration(shard, rec, 0);
    changed.push_back(i);
  }
  return changed;
}

uint64_t RecommendationBoard::NextGeneration(const Shard& shard, const Recommendation& rec,
                                             uint64_t current) {
  uint64_t base = current;
  if (auto retired = shard.retired_generations.find(rec.job_id);
      retired != shard.retired_generations.end()) {
    base = std::max(base, retired->second);
  }
  if (auto reserved = shard.reserved.find(rec.job_id); reserved != shard.reserved.end()) {
    // The same target as the unpublished decision: the same generation
    // (seen or not, it means the same thing).
    if (reserved->second.SameTarget(rec) && reserved->second.generation > base) {
      return reserved->second.generation;
    }
    base = std::max(base, reserved->second.generation);
  }
  return base + 1;
}

void RecommendationBoard::ReserveGenerations(const std::vector<Recommendation>& decisions) {
  MutexLock lock(mu_);
  for (const Recommendation& rec : decisions) {
    Shard& shard = ShardOf(rec.job_id);
    MutexLock shard_lock(shard.mu);
    auto [it, inserted] = shard.reserved.try_emplace(rec.job_id, rec);
    if (!inserted && rec.generation > it->second.generation) it->second = rec;
  }
}

void RecommendationBoard::Restore(
    std::vector<Recommendation> recommendations,
    std::vector<std::pair<std::string, uint64_t>> retired_generations) {
  MutexLock lock(mu_);
  for (auto& [job_id, generation] : retired_generations) {
    Shard& shard = ShardOf(job_id);
    MutexLock shard_lock(shard.mu);
    shard.retired_generations[job_id] = generation;
  }
  for (Recommendation& rec : recommendations) {
    Shard& shard = ShardOf(rec.job_id);
    MutexLock shard_lock(shard.mu);
    shard.retired_generations.erase(rec.job_id);
    std::string id = rec.job_id;
    shard.current[std::move(id)] = std::make_shared<const Recommendation>(std::move(rec));
  }
}

void RecommendationBoard::StageReplicated(
    std::vector<Recommendation> recommendations,
    std::vector<std::pair<std::string, uint64_t>> retired_generations) {
  MutexLock lock(mu_);
  for (auto& [job_id, generation] : retired_generations) {
    Shard& shard = ShardOf(job_id);
    MutexLock shard_lock(shard.mu);
    if (!shard.current.contains(job_id)) shard.retired_generations[job_id] = generation;
  }
  for (Recommendation& rec : recommendations) {
    Shard& shard = ShardOf(rec.job_id);
    MutexLock shard_lock(shard.mu);
    shard.retired_generations.erase(rec.job_id);
    auto it = shard.current.find(rec.job_id);
    if (it == shard.current.end()) {
      StageEventLocked({RecommendationEvent::Type::kAdded, rec});
      std::string id = rec.job_id;
      shard.current.emplace(std::move(id), std::make_shared<const Recommendation>(std::move(rec)));
      continue;
    }
    if (!it->second->SameVisibleDecision(rec)) {
      StageEventLocked({RecommendationEvent::Type::kModified, rec});
    }
    it->second = std::make_shared<const Recommendation>(std::move(rec));
  }
}

void RecommendationBoard::StageRemove(const std::string& job_id) {
  MutexLock lock(mu_);
  Shard& shard = ShardOf(job_id);
  MutexLock shard_lock(shard.mu);
  auto it = shard.current.find(job_id);
  if (it == shard.current.end()) return;
  shard.retired_generations[job_id] = it->second->generation;
  StageEventLocked({RecommendationEvent::Type::kDeleted, *it->second});
  shard.current.erase(it);
}

void RecommendationBoard::StageEventLocked(RecommendationEvent event) {
  event.plan_id = last_plan_id_ + 1;
  staged_.push_back(std::make_shared<const RecommendationEvent>(std::move(event)));
}

std::vector<std::shared_ptr<const RecommendationEvent>> RecommendationBoard::TakePlanLocked() {
  std::vector<std::shared_ptr<const RecommendationEvent>> events;
  events.swap(staged_);
  if (events.empty()) return events;
  ++last_plan_id_;
  RecommendationEvent end;
  end.type = RecommendationEvent::Type::kPlanEnd;
  end.plan_id = last_plan_id_;
  events.push_back(std::make_shared<const RecommendationEvent>(std::move(end)));
  return events;
}

void RecommendationBoard::Deliver() {
  std::vector<std::function<void()>> ready;
  {
    MutexLock fanout(fanout_mu_);
    std::vector<std::shared_ptr<const RecommendationEvent>> events;
    {
      MutexLock lock(mu_);
      events = TakePlanLocked();
    }
    if (events.empty()) return;
    FanOutLocked(events, ready);
  }
  for (const auto& callback : ready) callback();
}

uint64_t RecommendationBoard::last_plan_id() const {
  MutexLock lock(mu_);
  return last_plan_id_;
}

void RecommendationBoard::FanOutLocked(
    const std::vector<std::shared_ptr<const RecommendationEvent>>& events,
    std::vector<std::function<void()>>& ready) {
  for (const auto& sub : subscriptions_) {
    bool changed = false;  // the plan has a change in this reader's namespace
    for (const auto& event : events) {
      if (event->type == RecommendationEvent::Type::kPlanEnd) {
        // Only a plan this reader got a change of ends for it.
        if (!changed) continue;
      } else if (!InNamespace(event->recommendation.job_id, sub->namespace_filter())) {
        continue;
      } else {
        changed = true;
      }
      if (std::function<void()> callback = sub->Push(event)) ready.push_back(std::move(callback));
    }
  }
}

std::optional<Recommendation> RecommendationBoard::Get(const std::string& job_id) const {
  const Shard& shard = ShardOf(job_id);
  MutexLock lock(shard.mu);
  auto it = shard.current.find(job_id);
  if (it == shard.current.end()) return std::nullopt;
  return *it->second;
}

std::vector<std::shared_ptr<const Recommendation>> RecommendationBoard::CopyLocked(
    std::string_view namespace_filter) const {
  std::vector<std::shared_ptr<const Recommendation>> out;
  for (const Shard& shard : shards_) {
    MutexLock shard_lock(shard.mu);
    for (const auto& [id, rec] : shard.current) {
      if (InNamespace(id, namespace_filter)) out.push_back(rec);
    }
  }
  return out;
}

std::vector<std::shared_ptr<const Recommendation>> RecommendationBoard::Snapshot(
    std::string_view namespace_filter) const {
  std::vector<std::shared_ptr<const Recommendation>> out;
  {
    // mu_ keeps stagings out: the list is one plan's, never half of two.
    MutexLock lock(mu_);
    out = CopyLocked(namespace_filter);
  }
  std::sort(out.begin(), out.end(),
            [](const auto& a, const auto& b) { return a->job_id < b->job_id; });
  return out;
}

std::vector<Recommendation> RecommendationBoard::List(const std::string& namespace_filter) const {
  std::vector<Recommendation> out;
  for (const auto& rec : Snapshot(namespace_filter)) out.push_back(*rec);
  return out;
}

absl::StatusOr<std::shared_ptr<Subscription>> RecommendationBoard::Subscribe(
    std::string namespace_filter) {
  std::shared_ptr<Subscription> sub(new Subscription(std::move(namespace_filter)));
  std::vector<std::function<void()>> ready;
  {
    MutexLock fanout(fanout_mu_);
    std::vector<std::shared_ptr<const RecommendationEvent>> events;
    std::vector<std::shared_ptr<const Recommendation>> initial;
    uint64_t plan_id = 0;
    {
      MutexLock lock(mu_);
      if (closed_) return absl::UnavailableError("the server is shutting down");
      if (static_cast<int>(subscriptions_.size()) >= max_subscriptions_) {
        return absl::ResourceExhaustedError("too many concurrent watchers: the limit is " +
                                            std::to_string(max_subscriptions_) +
                                            " (--max_watchers)");
      }
      // The staged events go to the existing watchers first, as a plan; the
      // new one starts from the state that already includes them.
      events = TakePlanLocked();
      plan_id = last_plan_id_;
      initial = CopyLocked(sub->namespace_filter());
    }
    FanOutLocked(events, ready);
    std::sort(initial.begin(), initial.end(),
              [](const auto& a, const auto& b) { return a->job_id < b->job_id; });
    std::vector<std::shared_ptr<const RecommendationEvent>> list;
    list.reserve(initial.size() + 1);
    for (const auto& rec : initial) {
      list.push_back(std::make_shared<const RecommendationEvent>(
          RecommendationEvent{RecommendationEvent::Type::kAdded, *rec, plan_id}));
    }
    list.push_back(std::make_shared<const RecommendationEvent>(
        RecommendationEvent{RecommendationEvent::Type::kSynced, {}, plan_id}));
    sub->PushInitial(std::move(list));
    subscriptions_.push_back(sub);
  }
  for (const auto& callback : ready) callback();
  return sub;
}

void RecommendationBoard::Unsubscribe(const std::shared_ptr<Subscription>& subscription) {
  {
    MutexLock fanout(fanout_mu_);
    subscriptions_.erase(std::remove(subscriptions_.begin(), subscriptions_.end(), subscription),
                         subscriptions_.end());
  }
  subscription->Close();
}

void RecommendationBoard::CloseAll() {
  std::vector<std::shared_ptr<Subscription>> subs;
  {
    MutexLock fanout(fanout_mu_);
    {
      MutexLock lock(mu_);
      closed_ = true;
      staged_.clear();
    }
    subs.swap(subscriptions_);
  }
  for (auto& sub : subs) sub->Close();
}

int RecommendationBoard::subscription_count() const {
  MutexLock lock(fanout_mu_);
  return static_cast<int>(subscriptions_.size());
}

}  // namespace rescale
