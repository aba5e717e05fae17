// Tests of the helpers on the core types (rescale/types.h).
#include "rescale/types.h"

#include <catch2/catch.hpp>

#include "rescale/address.h"

namespace rescale {
namespace {

TEST_CASE("JobNamespace is the part of a job_id before its slash") {
  CHECK(JobNamespace("team-a/bert") == "team-a");
  // Never "" (every namespace, to a list or Authorize) for a malformed id.
  CHECK(JobNamespace("no-slash") == "no-slash");
  CHECK(JobNamespace("") == "");
}

}  // namespace
}  // namespace rescale

TEST_CASE("IsLocalAddress trusts loopback literals, localhost and Unix sockets only") {
  using rescale::IsLocalAddress;
  CHECK(IsLocalAddress("127.0.0.1:50051"));
  CHECK(IsLocalAddress("127.3.2.1:0"));
  CHECK(IsLocalAddress("localhost:50051"));
  CHECK(IsLocalAddress("[::1]:50051"));
  CHECK(IsLocalAddress("unix:/run/rescale.sock"));
  CHECK_FALSE(IsLocalAddress("0.0.0.0:50051"));
  CHECK_FALSE(IsLocalAddress(":50051"));
  CHECK_FALSE(IsLocalAddress("[::]:50051"));
  CHECK_FALSE(IsLocalAddress("10.0.0.5:50051"));
  CHECK_FALSE(IsLocalAddress("127.example.com:50051"));
  CHECK_FALSE(IsLocalAddress("rescaled.rescale.svc:50051"));
}
