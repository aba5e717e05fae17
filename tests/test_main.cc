// Catch2 main for the test binaries.
//
// Under ThreadSanitizer, absl::Mutex's deadlock detector is turned off: the
// Debian Abseil and gRPC libraries are not instrumented, so TSan cannot see
// the spin lock that guards the detector's graph and reports its updates
// from gRPC's threads as races. Our own code uses std::mutex, which TSan
// sees; the detector is a debugging aid, not part of any test.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "absl/synchronization/mutex.h"

int main(int argc, char* argv[]) {
#if defined(__SANITIZE_THREAD__)
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
#endif
  return Catch::Session().run(argc, argv);
}
