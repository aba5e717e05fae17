// Clock: the injected source of time for everything in Rescale.
//
// Core components never read the wall clock directly; they take a Clock*, so
// tests and the simulator drive time deterministically with ManualClock.
#ifndef RESCALE_CLOCK_H_
#define RESCALE_CLOCK_H_

#include <atomic>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace rescale {

class Clock {
 public:
  virtual ~Clock() = default;
  // Current time. Thread-safe.
  virtual absl::Time Now() const = 0;

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
  }
  void Set(absl::Time t) {
    now_nanos_.store(absl::ToUnixNanos(t), std::memory_order_release);
  }

 private:
  std::atomic<int64_t> now_nanos_;
};

}  // namespace rescale

#endif  // RESCALE_CLOCK_H_
