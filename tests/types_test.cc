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

TEST_CASE("IngestResult::Merge adds the counts and keeps the first rejections by index") {
  SECTION("the next batch: indices shifted, after ours") {
    IngestResult first;
    first.accepted = 2;
    first.RejectForLimit(1, "limit: jobs");
    IngestResult second;
    second.accepted = 1;
    second.duplicates = 1;
    second.rejected_unknown_job = 1;
    second.Reject(0, "unknown job");
    second.RejectForLimit(2, "limit: pods");
    first.Merge(second, 3);
    CHECK(first.accepted == 3);
    CHECK(first.duplicates == 1);
    CHECK(first.rejected == 3);
    CHECK(first.rejected_for_limits == 2);
    CHECK(first.rejected_unknown_job == 1);
    CHECK(first.limit_reason == "limit: jobs");
    REQUIRE(first.rejections.size() == 3);
    CHECK(first.rejections[0].index == 1);
    CHECK(first.rejections[1].index == 3);
    CHECK(first.rejections[1].reason == "unknown job");
    CHECK(first.rejections[2].index == 5);
  }
  SECTION("one batch split in two: the rejections interleave, capped") {
    IngestResult store;
    IngestResult refused;
    for (uint32_t i = 0; i < 40; ++i) {
      if (i % 2 == 0) {
        store.Reject(i, "store");
      } else {
        refused.RejectForPermission(i, "permission denied");
      }
    }
    store.Merge(refused, 0);
    CHECK(store.rejected == 40);
    CHECK(store.rejected_for_permission == 20);
    REQUIRE(store.rejections.size() == IngestResult::kMaxReportedRejections);
    for (uint32_t i = 0; i < store.rejections.size(); ++i) {
      CHECK(store.rejections[i].index == i);
      CHECK(store.rejections[i].reason == (i % 2 == 0 ? "store" : "permission denied"));
    }
  }
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
