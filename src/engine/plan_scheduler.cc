// PlanScheduler (see plan_scheduler.h).
#include "src/engine/plan_scheduler.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "spdlog/spdlog.h"

namespace rescale::engine {

PlanScheduler::PlanScheduler(Clock& clock, absl::Duration interval, int nice,
                             std::function<void()> replan)
    : clock_(clock), interval_(interval), nice_(nice), replan_(std::move(replan)) {}

PlanScheduler::~PlanScheduler() { Stop(); }

void PlanScheduler::Start() {
  Stop();
  {
    MutexLock lock(mu_);
    stop_ = false;
    requested_ = false;
    running_ = true;
  }
  // Registered without mu_ held: the listener takes mu_ under the clock's
  // own lock, so that is the only order the two are taken in.
  clock_listener_ = clock_.OnTimeChange([this] {
    // Taking the lock orders the notify after the timer thread's check of
    // the clock, so a jump between that check and its wait is not lost.
    MutexLock lock(mu_);
    cv_.SignalAll();
  });
  // The first tick counts from now, not from when the thread gets to run.
  const absl::Time first_tick = clock_.Now() + interval_;
  thread_ = std::thread([this, first_tick] { Run(first_tick); });
}

std::optional<uint64_t> PlanScheduler::Request(absl::Duration window) {
  MutexLock lock(mu_);
  if (!running_) return std::nullopt;
  // One plan covers the whole burst, due when the earliest window ends,
  // and no sooner after the last plan than kPlanPacing times what that
  // plan took: a steady stream of changes (an adapter registering 10,000
  // jobs) then gets a plan every 10x its duration at most (about 1 s when
  // a plan takes 100 ms), with at most a tenth of one core spent planning.
  // A window of 0 is due now.
  const absl::Time now = clock_.Now();
  const absl::Time due =
      window <= absl::ZeroDuration()
          ? now
          : std::max(now + window, last_plan_end_ + kPlanPacing * last_plan_took_);
  const uint64_t request = ++last_request_;
  if (!requested_ || due < due_) {
    requested_ = true;
    due_ = due;
    cv_.SignalAll();
  }
  return request;
}

void PlanScheduler::WaitFor(uint64_t request) {
  MutexLock lock(mu_);
  done_.Wait(mu_, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return covered_ >= request; });
}

void PlanScheduler::WhenCovered(uint64_t request, std::function<void()> then) {
  {
    MutexLock lock(mu_);
    if (covered_ < request) {
      waiting_.emplace_back(request, std::move(then));
      return;
    }
  }
  then();
}

void PlanScheduler::PlanNow() {
  // This plan covers every request made so far; later ones start anew.
  const uint64_t covering = last_request_;
  requested_ = false;
  mu_.Unlock();
  const absl::Time started = clock_.Now();
  replan_();
  const absl::Time ended = clock_.Now();
  mu_.Lock();
  last_plan_end_ = ended;
  last_plan_took_ = ended - started;
  covered_ = std::max(covered_, covering);
  done_.SignalAll();
  std::vector<std::function<void()>> ready;
  const uint64_t covered = covered_;
  std::erase_if(waiting_, [&](auto& w) {
    if (w.first > covered) return false;
    ready.push_back(std::move(w.second));
    return true;
  });
  if (ready.empty()) return;
  mu_.Unlock();
  for (auto& then : ready) then();
  mu_.Lock();
}

void PlanScheduler::Run(absl::Time next_tick) {
#ifdef __linux__
  // Plans are background work; the calls are what users wait for. On a
  // busy machine the scheduler gives this thread a small share beside the
  // RPC threads (nice is per thread on Linux), so a plan of 10,000 jobs
  // does not stretch GetJob or RegisterJob latency; on an idle one it runs
  // at full speed.
  if (nice_ != 0 && setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), nice_) != 0) {
    spdlog::warn("could not lower the plan thread's priority (nice {}): {}", nice_,
                 std::strerror(errno));
  }
#endif
  MutexLock lock(mu_);
  while (!stop_) {
    const absl::Time now = clock_.Now();
    // The rest of a burst arrives during the first request's window and is
    // planned with it.
    const absl::Time requested_due = requested_ ? due_ : absl::InfiniteFuture();
    const absl::Time deadline = std::min(next_tick, requested_due);
    if (now < deadline) {
      // Wakes for Stop, a request, a jump of a ManualClock, or real time
      // reaching the deadline (the real clock).
      const absl::Duration wait = clock_.RealTimeUntil(deadline);
      if (wait == absl::InfiniteDuration()) {
        cv_.Wait(mu_);
      } else {
        cv_.WaitFor(mu_, absl::ToChronoNanoseconds(wait));
      }
      continue;
    }
    if (now >= next_tick) next_tick = now + interval_;
    PlanNow();
  }
}

void PlanScheduler::Stop() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  cv_.SignalAll();
  if (thread_.joinable()) thread_.join();
  clock_listener_.reset();
  // Without the thread nothing would run a deferred plan: requests are
  // refused from now on (their callers plan themselves), and the one still
  // waiting for its window is run here, in the same critical section that
  // stops the requests, so none slips in between.
  MutexLock lock(mu_);
  running_ = false;
  if (requested_) PlanNow();
}

}  // namespace rescale::engine
