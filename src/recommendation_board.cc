// RecommendationBoard and Subscription (see rescale/recommendation_board.h).
#include "rescale/recommendation_board.h"

#include <algorithm>

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
  std::vector<Recommendation> stored = Stage(std::move(decisions));
  Deliver();
  return stored;
}

void RecommendationBoard::Remove(const std::string& job_id) {
  StageRemove(job_id);
  Deliver();
}

std::vector<Recommendation> RecommendationBoard::Stage(std::vector<Recommendation> decisions) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Recommendation> stored;
  stored.reserve(decisions.size());
  for (Recommendation& rec : decisions) {
    auto it = current_.find(rec.job_id);
    if (it == current_.end()) {
      uint64_t base = 0;
      if (auto retired = retired_generations_.find(rec.job_id);
          retired != retired_generations_.end()) {
        base = retired->second;
        retired_generations_.erase(retired);
      }
      rec.generation = base + 1;
      it = current_.emplace(rec.job_id, rec).first;
      StageEvent({RecommendationEvent::Type::kAdded, rec});
    } else {
      const Recommendation& old = it->second;
      rec.generation = old.SameTarget(rec) ? old.generation : old.generation + 1;
      const bool visible_change = !old.SameVisibleDecision(rec);
      it->second = rec;
      if (visible_change) StageEvent({RecommendationEvent::Type::kModified, rec});
    }
    stored.push_back(it->second);
  }
  return stored;
}

void RecommendationBoard::StageRemove(const std::string& job_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = current_.find(job_id);
  if (it == current_.end()) return;
  retired_generations_[job_id] = it->second.generation;
  StageEvent({RecommendationEvent::Type::kDeleted, it->second});
  current_.erase(it);
}

void RecommendationBoard::StageEvent(RecommendationEvent event) {
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
  std::lock_guard<std::mutex> lock(mu_);
  auto it = current_.find(job_id);
  if (it == current_.end()) return std::nullopt;
  return it->second;
}

std::vector<Recommendation> RecommendationBoard::List(const std::string& namespace_filter) const {
  std::vector<Recommendation> out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [id, rec] : current_) {
      if (InNamespace(id, namespace_filter)) out.push_back(rec);
    }
  }
  std::sort(out.begin(), out.end(),
            [](const Recommendation& a, const Recommendation& b) { return a.job_id < b.job_id; });
  return out;
}

absl::StatusOr<std::shared_ptr<Subscription>> RecommendationBoard::Subscribe(
    std::string namespace_filter) {
  std::shared_ptr<Subscription> sub(new Subscription(std::move(namespace_filter)));
  std::vector<std::function<void()>> ready;
  {
    std::lock_guard<std::mutex> fanout(fanout_mu_);
    std::vector<std::shared_ptr<const RecommendationEvent>> events;
    std::vector<Recommendation> initial;
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
      for (const auto& [id, rec] : current_) {
        if (InNamespace(id, sub->namespace_filter())) initial.push_back(rec);
      }
    }
    FanOutLocked(events, ready);
    std::sort(initial.begin(), initial.end(),
              [](const Recommendation& a, const Recommendation& b) { return a.job_id < b.job_id; });
    for (Recommendation& rec : initial) {
      sub->Push(std::make_shared<const RecommendationEvent>(
          RecommendationEvent{RecommendationEvent::Type::kAdded, std::move(rec)}));
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
