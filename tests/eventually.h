// Eventually: the one bounded wait tests use for what happens on its own
// time (a file watcher's next look, a process's signal handling, a
// failover), where no event can be waited on instead.
#ifndef RESCALE_TESTS_EVENTUALLY_H_
#define RESCALE_TESTS_EVENTUALLY_H_

#include <functional>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace rescale::testing {

// Asks `done` every 50 ms until it holds or `within` has passed.
inline bool Eventually(absl::Duration within, const std::function<bool()>& done) {
  const absl::Time deadline = absl::Now() + within;
  while (absl::Now() < deadline) {
    if (done()) return true;
    absl::SleepFor(absl::Milliseconds(50));
  }
  return done();
}

}  // namespace rescale::testing

#endif  // RESCALE_TESTS_EVENTUALLY_H_
