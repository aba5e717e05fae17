// Backoff: the one retry delay schedule of Rescale's clients (the adapter's
// list/watch/apply/stream retries and the agent's sample resends).
//
// Delays grow exponentially from `initial` by `multiplier` up to `max`, and
// each is drawn with "equal jitter": uniformly from [d/2, d] where d is the
// exponential delay. Equal jitter rather than full jitter ([0, d]) because
// these clients retry against one shared server (rescaled, the Kubernetes
// API server) that has usually just restarted or is overloaded: full jitter
// lets a fraction of every fleet retry almost at once, while equal jitter
// keeps every client waiting at least half the schedule and still spreads
// them over the other half so they do not retry in lockstep. The delay
// never exceeds `max`.
//
// The uniform source is injected so tests see a fixed sequence.
//
// Thread safety: not thread-safe; one Backoff per retry loop (or guard it).
#ifndef RESCALE_CLIENT_COMMON_BACKOFF_H_
#define RESCALE_CLIENT_COMMON_BACKOFF_H_

#include <functional>

#include "absl/time/time.h"

namespace rescale::client {

struct BackoffOptions {
  // The delay before the first retry, before jitter.
  absl::Duration initial = absl::Milliseconds(500);
  // The delay stops growing here; also the largest delay returned.
  absl::Duration max = absl::Seconds(30);
  // Growth per consecutive failure (2 = doubling).
  double multiplier = 2.0;
};

class Backoff {
 public:
  // `uniform01` returns values in [0, 1); null = a generator seeded from
  // std::random_device.
  explicit Backoff(BackoffOptions options, std::function<double()> uniform01 = nullptr);

  // The delay before the next retry: for the n-th call since construction
  // or Reset(), uniform in [d/2, d] with d = min(max, initial * multiplier^(n-1)).
  absl::Duration Next();
  // After a success: the next failure starts from `initial` again.
  void Reset() { attempt_ = 0; }
  // Calls to Next() since construction or Reset(): consecutive failures.
  int attempts() const { return attempt_; }

 private:
  BackoffOptions options_;
  std::function<double()> uniform01_;
  int attempt_ = 0;
};

}  // namespace rescale::client

#endif  // RESCALE_CLIENT_COMMON_BACKOFF_H_
