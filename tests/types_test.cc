// Tests of the helpers on the core types (rescale/types.h).
#include "rescale/types.h"

#include <catch2/catch.hpp>

namespace rescale {
namespace {

TEST_CASE("JobNamespace is the part of a job_id before its slash") {
  CHECK(JobNamespace("team-a/bert") == "team-a");
  CHECK(JobNamespace("no-slash") == "");
}

}  // namespace
}  // namespace rescale
