// Backoff (see client/common/backoff.h for the schedule and why equal jitter).
#include "client/common/backoff.h"

#include <algorithm>
#include <memory>
#include <random>
#include <utility>

namespace rescale::client {

Backoff::Backoff(BackoffOptions options, std::function<double()> uniform01)
    : options_(options), uniform01_(std::move(uniform01)) {
  if (!uniform01_) {
    // Shared by copies of the function; a Backoff is used from one thread.
    auto generator = std::make_shared<std::mt19937_64>(std::random_device{}());
    uniform01_ = [generator] {
      return std::uniform_real_distribution<double>(0.0, 1.0)(*generator);
    };
  }
}

absl::Duration Backoff::Next() {
  // Multiply step by step and stop at the cap, so a long outage cannot
  // overflow the exponent.
  absl::Duration delay = options_.initial;
  for (int i = 0; i < attempt_ && delay < options_.max; ++i) delay = delay * options_.multiplier;
  delay = std::min(delay, options_.max);
  ++attempt_;
  return delay * (0.5 + 0.5 * uniform01_());
}

}  // namespace rescale::client
