// PlanScheduler: when plans run. A timer thread replans every plan_interval
// on the injected clock, and runs the plans that changes ask for
// (Request): a burst of requests is planned once, when the earliest window
// among them ends, and no sooner after the last plan than kPlanPacing times
// what that plan took. While the timer runs, no caller's thread ever runs a
// plan: a request with a window of 0 is due at once on the timer thread, and
// its caller may wait for it (WaitFor). Without the timer (tests, the
// simulator, before StartTimer), Request says so and the caller plans
// itself.
#ifndef RESCALE_SRC_ENGINE_PLAN_SCHEDULER_H_
#define RESCALE_SRC_ENGINE_PLAN_SCHEDULER_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "rescale/clock.h"
#include "rescale/mutex.h"

namespace rescale::engine {

class PlanScheduler {
 public:
  // A coalesced plan starts no sooner after the last one than this many
  // times what the last one took. At 3, a stream of durable registrations
  // on two cores planned every 20 ms: one call in 70 met a plan's record
  // write or its CPU, and a single client's p99 rose from 0.5 to 2.8 ms
  // (rescale-durable-bench); at 10 it is 0.5 ms again.
  static constexpr int kPlanPacing = 10;

  // `replan` runs one plan; `nice` is the timer thread's nice value (0 = as
  // the process).
  PlanScheduler(Clock& clock, absl::Duration interval, int nice, std::function<void()> replan);
  ~PlanScheduler();
  PlanScheduler(const PlanScheduler&) = delete;
  PlanScheduler& operator=(const PlanScheduler&) = delete;

  void Start();
  // Stops the timer thread, then runs a pending plan before it returns, so
  // no accepted change goes unplanned.
  void Stop();
  // Asks for a plan within `window`: nullopt when the timer does not run
  // (the caller plans itself), else the request's number for WaitFor.
  std::optional<uint64_t> Request(absl::Duration window);
  // Waits until a plan that covers request `request` has ended.
  void WaitFor(uint64_t request);
  // Runs `then` once a plan that covers `request` has ended: at once when
  // one has, else on the timer's thread after that plan (never under a
  // lock). For callers that must not block.
  void WhenCovered(uint64_t request, std::function<void()> then);

 private:
  void Run(absl::Time next_tick);
  // One plan, covering the requests made before it started.
  void PlanNow() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Clock& clock_;
  const absl::Duration interval_;
  const int nice_;
  const std::function<void()> replan_;

  Mutex mu_;
  CondVar cv_;    // the timer thread's wake-ups
  CondVar done_;  // a plan ended (WaitFor)
  bool running_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool requested_ ABSL_GUARDED_BY(mu_) = false;
  // When the pending plan is due: the earliest window end among the
  // requests it covers.
  absl::Time due_ ABSL_GUARDED_BY(mu_);
  uint64_t last_request_ ABSL_GUARDED_BY(mu_) = 0;
  // The newest request a finished plan covered.
  uint64_t covered_ ABSL_GUARDED_BY(mu_) = 0;
  // WhenCovered's continuations not run yet, with their request.
  std::vector<std::pair<uint64_t, std::function<void()>>> waiting_ ABSL_GUARDED_BY(mu_);
  absl::Time last_plan_end_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::Duration last_plan_took_ ABSL_GUARDED_BY(mu_);
  // Wakes the timer thread when a ManualClock jumps; held while it runs.
  Clock::Listener clock_listener_;
  std::thread thread_;
};

}  // namespace rescale::engine

#endif  // RESCALE_SRC_ENGINE_PLAN_SCHEDULER_H_
