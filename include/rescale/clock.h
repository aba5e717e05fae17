// Clock: the injected source of time for everything in Rescale.
//
// Core components never read the wall clock directly; they take a Clock*, so
// tests and the simulator drive time deterministically with ManualClock.
// Threads that wait for a moment on a Clock (the engine's plan timer) wait
// on it too: they sleep at most RealTimeUntil(deadline) and are woken by a
// Listener when a ManualClock jumps, so a test moves the timer by moving the
// clock, never by waiting out real time.
#ifndef RESCALE_CLOCK_H_
#define RESCALE_CLOCK_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "rescale/mutex.h"

namespace rescale {

class Clock {
 public:
  // Keeps a time-change callback registered while it lives (OnTimeChange).
  using Listener = std::shared_ptr<void>;

  virtual ~Clock() = default;
  // Current time. Thread-safe.
  virtual absl::Time Now() const = 0;

  // The longest a thread waiting for `deadline` on this clock should sleep
  // in real time before looking at Now() again. Real time flows by itself:
  // deadline - Now(). A clock that only moves when told returns
  // InfiniteDuration: its waiters sleep until a Listener wakes them.
  virtual absl::Duration RealTimeUntil(absl::Time deadline) const;

  // Calls `on_change` after every jump of this clock's time, on the thread
  // that moved it, until the returned Listener is destroyed (which waits for
  // a call in progress). The real clock never jumps and returns a Listener
  // that does nothing. `on_change` must be quick and must not call back
  // into the clock's Advance/Set or destroy a Listener. Thread-safe; the
  // Listener must not outlive the clock.
  virtual Listener OnTimeChange(std::function<void()> on_change);

  // The process-wide real clock. Never null, never destroyed.
  static Clock* Real();
};

class RealClock final : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
};

// A clock that moves only when told to. Thread-safe: time is one atomic so
// readers on other threads see a consistent instant.
class ManualClock final : public Clock {
 public:
  explicit ManualClock(absl::Time start = absl::FromUnixSeconds(1'700'000'000))
      : now_nanos_(absl::ToUnixNanos(start)) {}

  absl::Time Now() const override {
    return absl::FromUnixNanos(now_nanos_.load(std::memory_order_acquire));
  }
  void Advance(absl::Duration d) {
    now_nanos_.fetch_add(absl::ToInt64Nanoseconds(d), std::memory_order_acq_rel);
    NotifyListeners();
  }
  void Set(absl::Time t) {
    now_nanos_.store(absl::ToUnixNanos(t), std::memory_order_release);
    NotifyListeners();
  }

  absl::Duration RealTimeUntil(absl::Time deadline) const override;
  Listener OnTimeChange(std::function<void()> on_change) override;
  // Registered listeners (tests check that a waiter let go of the clock).
  size_t listener_count() const;

 private:
  void NotifyListeners() ABSL_LOCKS_EXCLUDED(listeners_mu_);

  std::atomic<int64_t> now_nanos_;
  // Held while listeners run, so destroying a Listener waits for its call.
  mutable Mutex listeners_mu_;
  uint64_t next_listener_id_ ABSL_GUARDED_BY(listeners_mu_) = 0;
  std::vector<std::pair<uint64_t, std::function<void()>>> listeners_ ABSL_GUARDED_BY(listeners_mu_);
};

}  // namespace rescale

#endif  // RESCALE_CLOCK_H_
