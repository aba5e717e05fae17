// The real clock and ManualClock's listeners (see rescale/clock.h).
#include "rescale/clock.h"

#include <algorithm>

namespace rescale {

Clock* Clock::Real() {
  static RealClock* const clock = new RealClock();
  return clock;
}

absl::Duration Clock::RealTimeUntil(absl::Time deadline) const {
  return std::max(absl::ZeroDuration(), deadline - Now());
}

Clock::Listener Clock::OnTimeChange(std::function<void()>) {
  // Real time never jumps; waiters are bounded by RealTimeUntil instead.
  return std::make_shared<int>(0);
}

absl::Duration ManualClock::RealTimeUntil(absl::Time) const { return absl::InfiniteDuration(); }

Clock::Listener ManualClock::OnTimeChange(std::function<void()> on_change) {
  uint64_t id;
  {
    MutexLock lock(listeners_mu_);
    id = next_listener_id_++;
    listeners_.emplace_back(id, std::move(on_change));
  }
  // The deleter unregisters under listeners_mu_, so it waits for a
  // NotifyListeners in progress: once it returns, the callback never runs.
  return Listener(static_cast<void*>(this), [this, id](void*) {
    MutexLock lock(listeners_mu_);
    listeners_.erase(std::remove_if(listeners_.begin(), listeners_.end(),
                                    [id](const auto& entry) { return entry.first == id; }),
                     listeners_.end());
  });
}

size_t ManualClock::listener_count() const {
  MutexLock lock(listeners_mu_);
  return listeners_.size();
}

void ManualClock::NotifyListeners() {
  MutexLock lock(listeners_mu_);
  for (const auto& [id, on_change] : listeners_) on_change();
}

}  // namespace rescale
