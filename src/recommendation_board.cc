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
  std::lock_guard<std::mutex> lock(mu_);
  if (!order_.empty()) {
    auto first = order_.begin();
    auto it = pending_.find(first->second);
    *event = *it->second.event;
    pending_.erase(it);
    order_.erase(first);
    return Poll::kEvent;
  }
  if (closed_) return Poll::kClosed;
  reader_waiting_ = true;
  return Poll::kEmpty;
}

size_t Subscription::queued() const {
  std::lock_guard<std::mutex> lock(mu_);
  return order_.size();
}

void Subscription::SetReadyCallback(std::function<void()> callback) {
  std::lock_guard<std::mutex> lock(mu_);
  ready_callback_ = std::move(callback);
}

std::function<void()> Subscription::Push(std::shared_ptr<const RecommendationEvent> event) {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) return nullptr;
  const std::string& key = event->type == RecommendationEvent::Type::kSynced
                               ? std::string()
                               : event->recommendation.job_id;
  auto it = pending_.find(key);
  if (it == pending_.end()) {
    const uint64_t sequence = next_sequence_++;
    order_.emplace(sequence, key);
    pending_.emplace(key, Pending{std::move(event), sequence});
  } else if (it->second.event->type == RecommendationEvent::Type::kAdded &&
             event->type == RecommendationEvent::Type::kDeleted) {
    // The reader never saw the job: it needs neither event, and its place
    // in the delivery order goes too, so a job added and deleted again and
    // again while the reader stalls costs nothing.
    order_.erase(it->second.sequence);
    pending_.erase(it);
    return nullptr;
  } else if (it->second.event->type == RecommendationEvent::Type::kAdded &&
             event->type == RecommendationEvent::Type::kModified) {
    // Coalesce: the reader has not seen the older event, so it only needs
    // the newest state, delivered at the older event's place. An ADDED it
    // never saw stays ADDED (a copy: the event is shared with other readers).
    auto added = std::make_shared<RecommendationEvent>(*event);
    added->type = RecommendationEvent::Type::kAdded;
    it->second.event = std::move(added);
  } else {
    it->second.event = std::move(event);
  }
  if (!reader_waiting_) return nullptr;
  reader_waiting_ = false;
  return ready_callback_;
}

void Subscription::Close() {
  std::function<void()> notify;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return;
    closed_ = true;
    if (reader_waiting_) {
      reader_waiting_ = false;
      notify = ready_callback_;
    }
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
  std::lock_guard<std::mutex> lock(mu_);
  for (int shard_index = 0; shard_index < kShards; ++shard_index) {
    if (by_shard[shard_index].empty()) continue;
    Shard& shard = shards_[shard_index];
    std::lock_guard<std::mutex> shard_lock(shard.mu);
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
    std::lock_guard<std::mutex> shard_lock(shard.mu);
    stored->push_back(*shard.current.at(id));
  }
}

std::vector<size_t> RecommendationBoard::AssignGenerations(
    std::vector<Recommendation>& decisions) const {
  // The same rule as StageInto.
  std::vector<size_t> changed;
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < decisions.size(); ++i) {
    Recommendation& rec = decisions[i];
    const Shard& shard = ShardOf(rec.job_id);
    std::lock_guard<std::mutex> shard_lock(shard.mu);
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
  std::lock_guard<std::mutex> lock(mu_);
  for (const Recommendation& rec : decisions) {
    Shard& shard = ShardOf(rec.job_id);
    std::lock_guard<std::mutex> shard_lock(shard.mu);
    auto [it, inserted] = shard.reserved.try_emplace(rec.job_id, rec);
    if (!inserted && rec.generation > it->second.generation) it->second = rec;
  }
}

void RecommendationBoard::Restore(
    std::vector<Recommendation> recommendations,
    std::vector<std::pair<std::string, uint64_t>> retired_generations) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [job_id, generation] : retired_generations) {
    Shard& shard = ShardOf(job_id);
    std::lock_guard<std::mutex> shard_lock(shard.mu);
    shard.retired_generations[job_id] = generation;
  }
  for (Recommendation& rec : recommendations) {
    Shard& shard = ShardOf(rec.job_id);
    std::lock_guard<std::mutex> shard_lock(shard.mu);
    shard.retired_generations.erase(rec.job_id);
    std::string id = rec.job_id;
    shard.current[std::move(id)] = std::make_shared<const Recommendation>(std::move(rec));
  }
}

void RecommendationBoard::StageReplicated(
    std::vector<Recommendation> recommendations,
    std::vector<std::pair<std::string, uint64_t>> retired_generations) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [job_id, generation] : retired_generations) {
    Shard& shard = ShardOf(job_id);
    std::lock_guard<std::mutex> shard_lock(shard.mu);
    if (!shard.current.contains(job_id)) shard.retired_generations[job_id] = generation;
  }
  for (Recommendation& rec : recommendations) {
    Shard& shard = ShardOf(rec.job_id);
    std::lock_guard<std::mutex> shard_lock(shard.mu);
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
  std::lock_guard<std::mutex> lock(mu_);
  Shard& shard = ShardOf(job_id);
  std::lock_guard<std::mutex> shard_lock(shard.mu);
  auto it = shard.current.find(job_id);
  if (it == shard.current.end()) return;
  shard.retired_generations[job_id] = it->second->generation;
  StageEventLocked({RecommendationEvent::Type::kDeleted, *it->second});
  shard.current.erase(it);
}

void RecommendationBoard::StageEventLocked(RecommendationEvent event) {
  staged_.push_back(std::make_shared<const RecommendationEvent>(std::move(event)));
}

void RecommendationBoard::Deliver() {
  std::vector<std::function<void()>> ready;
  {
    std::lock_guard<std::mutex> fanout(fanout_mu_);
    std::vector<std::shared_ptr<const RecommendationEvent>> events;
    {
      std::lock_guard<std::mutex> lock(mu_);
      events.swap(staged_);
    }
    if (events.empty()) return;
    FanOutLocked(events, ready);
  }
  for (const auto& callback : ready) callback();
}

void RecommendationBoard::FanOutLocked(
    const std::vector<std::shared_ptr<const RecommendationEvent>>& events,
    std::vector<std::function<void()>>& ready) {
  for (const auto& sub : subscriptions_) {
    for (const auto& event : events) {
      if (!InNamespace(event->recommendation.job_id, sub->namespace_filter())) continue;
      if (std::function<void()> callback = sub->Push(event)) ready.push_back(std::move(callback));
    }
  }
}

std::optional<Recommendation> RecommendationBoard::Get(const std::string& job_id) const {
  const Shard& shard = ShardOf(job_id);
  std::lock_guard<std::mutex> lock(shard.mu);
  auto it = shard.current.find(job_id);
  if (it == shard.current.end()) return std::nullopt;
  return *it->second;
}

std::vector<std::shared_ptr<const Recommendation>> RecommendationBoard::CopyLocked(
    std::string_view namespace_filter) const {
  std::vector<std::shared_ptr<const Recommendation>> out;
  for (const Shard& shard : shards_) {
    std::lock_guard<std::mutex> shard_lock(shard.mu);
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
    std::lock_guard<std::mutex> lock(mu_);
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
    std::lock_guard<std::mutex> fanout(fanout_mu_);
    std::vector<std::shared_ptr<const RecommendationEvent>> events;
    std::vector<std::shared_ptr<const Recommendation>> initial;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (closed_) return absl::UnavailableError("the server is shutting down");
      if (static_cast<int>(subscriptions_.size()) >= max_subscriptions_) {
        return absl::ResourceExhaustedError("too many concurrent watchers: the limit is " +
                                            std::to_string(max_subscriptions_) +
                                            " (--max_watchers)");
      }
      // The staged events go to the existing watchers first; the new one
      // starts from the state that already includes them.
      events.swap(staged_);
      initial = CopyLocked(sub->namespace_filter());
    }
    FanOutLocked(events, ready);
    std::sort(initial.begin(), initial.end(),
              [](const auto& a, const auto& b) { return a->job_id < b->job_id; });
    for (const auto& rec : initial) {
      sub->Push(std::make_shared<const RecommendationEvent>(
          RecommendationEvent{RecommendationEvent::Type::kAdded, *rec}));
    }
    sub->Push(std::make_shared<const RecommendationEvent>(
        RecommendationEvent{RecommendationEvent::Type::kSynced, {}}));
    subscriptions_.push_back(sub);
  }
  for (const auto& callback : ready) callback();
  return sub;
}

void RecommendationBoard::Unsubscribe(const std::shared_ptr<Subscription>& subscription) {
  {
    std::lock_guard<std::mutex> fanout(fanout_mu_);
    subscriptions_.erase(std::remove(subscriptions_.begin(), subscriptions_.end(), subscription),
                         subscriptions_.end());
  }
  subscription->Close();
}

void RecommendationBoard::CloseAll() {
  std::vector<std::shared_ptr<Subscription>> subs;
  {
    std::lock_guard<std::mutex> fanout(fanout_mu_);
    {
      std::lock_guard<std::mutex> lock(mu_);
      closed_ = true;
      staged_.clear();
    }
    subs.swap(subscriptions_);
  }
  for (auto& sub : subs) sub->Close();
}

int RecommendationBoard::subscription_count() const {
  std::lock_guard<std::mutex> lock(fanout_mu_);
  return static_cast<int>(subscriptions_.size());
}

}  // namespace rescale
