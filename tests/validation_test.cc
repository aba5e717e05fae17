// Tests of rescale/validation.h: DNS-1123 labels, "namespace/name" job ids
// and the field-by-field checks of a job spec. Every rejection must be
// INVALID_ARGUMENT and its message must name the offending field and the
// value given, so a user can fix the request without reading the source.
#include "rescale/validation.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <string>

#include "absl/status/status.h"

namespace rescale {
namespace {

using Catch::Matchers::Contains;

// A spec that passes validation; tests break one field at a time.
JobSpec ValidSpec() {
  JobSpec spec;
  spec.job_id = "team-a/resnet";
  spec.min_replicas = 1;
  spec.max_replicas = 8;
  spec.gpus_per_replica = 1;
  spec.restart_cost_seconds = 60;
  return spec;
}

CurvePoint Point(uint32_t replicas, double sps) {
  CurvePoint p;
  p.replicas = replicas;
  p.samples_per_second = sps;
  return p;
}

TEST_CASE("IsDns1123Label accepts lower-case alphanumerics and inner dashes only") {
  CHECK(IsDns1123Label("a"));
  CHECK(IsDns1123Label("team-a"));
  CHECK(IsDns1123Label("0abc9"));
  CHECK(IsDns1123Label(std::string(63, 'a')));

  CHECK_FALSE(IsDns1123Label(""));
  CHECK_FALSE(IsDns1123Label(std::string(64, 'a')));
  CHECK_FALSE(IsDns1123Label("-abc"));
  CHECK_FALSE(IsDns1123Label("abc-"));
  CHECK_FALSE(IsDns1123Label("Abc"));
  CHECK_FALSE(IsDns1123Label("a.b"));
  CHECK_FALSE(IsDns1123Label("a_b"));
  CHECK_FALSE(IsDns1123Label("a b"));
}

TEST_CASE("ValidateJobId accepts namespace/name") {
  CHECK(ValidateJobId("ns/name").ok());
  CHECK(ValidateJobId("team-a/resnet-50").ok());
  // The name is a DNS-1123 subdomain: dots between labels are allowed.
  CHECK(ValidateJobId("ns/bert.large.v2").ok());
  CHECK(ValidateJobId(std::string(63, 'n') + "/x").ok());
}

TEST_CASE("ValidateJobId rejects a malformed id naming the field and the value") {
  struct Case {
    std::string id;
    std::string expected_fragment;  // besides the field and the id itself
  };
  const std::string long_ns(64, 'n');
  const Case cases[] = {
      {"nameonly", "exactly one '/'"},
      {"ns/name/extra", "exactly one '/'"},
      {"NS/name", "namespace \"NS\" is not a DNS-1123 label"},
      {"ns/Name", "name \"Name\" is not a DNS-1123 subdomain"},
      {"-ns/name", "namespace \"-ns\" is not a DNS-1123 label"},
      {"ns/-name", "name \"-name\" is not a DNS-1123 subdomain"},
      {long_ns + "/name", "namespace \"" + long_ns + "\" is not a DNS-1123 label"},
      {"/name", "namespace \"\" is not a DNS-1123 label"},
      {"ns/", "name \"\" is not a DNS-1123 subdomain"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.id);
    absl::Status s = ValidateJobId(c.id, "spec.job_id");
    REQUIRE(s.code() == absl::StatusCode::kInvalidArgument);
    const std::string message(s.message());
    CHECK_THAT(message, Contains("spec.job_id"));
    CHECK_THAT(message, Contains("\"" + c.id + "\""));
    CHECK_THAT(message, Contains(c.expected_fragment));
  }
}

TEST_CASE("ValidateJobId rejects an empty id naming the field and the expected form") {
  absl::Status s = ValidateJobId("", "spec.job_id");
  REQUIRE(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(s.message()) == "spec.job_id is required (\"namespace/name\")");
}

TEST_CASE("ValidateJobId uses job_id as the default field name") {
  absl::Status s = ValidateJobId("nope");
  REQUIRE(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(s.message()), Contains("job_id \"nope\""));
}

TEST_CASE("ValidateJobSpec accepts a well-formed spec") {
  CHECK(ValidateJobSpec(ValidSpec()).ok());
  JobSpec spec = ValidSpec();
  spec.min_replicas = spec.max_replicas = 4;
  spec.gpus_per_replica = 64;
  spec.restart_cost_seconds = 0;
  spec.prior = {Point(1, 100), Point(4, 350), Point(2, 190)};
  CHECK(ValidateJobSpec(spec).ok());
}

// Validates `spec` expecting INVALID_ARGUMENT; returns the message.
std::string RejectionMessage(const JobSpec& spec) {
  absl::Status s = ValidateJobSpec(spec);
  REQUIRE(s.code() == absl::StatusCode::kInvalidArgument);
  return std::string(s.message());
}

TEST_CASE("ValidateJobSpec checks the job id under the name spec.job_id") {
  JobSpec spec = ValidSpec();
  spec.job_id = "Bad/Id";
  CHECK_THAT(RejectionMessage(spec), Contains("spec.job_id \"Bad/Id\""));
}

TEST_CASE("ValidateJobSpec rejects min_replicas above max_replicas naming both fields and values") {
  JobSpec spec = ValidSpec();
  spec.min_replicas = 5;
  spec.max_replicas = 2;
  const std::string message = RejectionMessage(spec);
  CHECK_THAT(message, Contains("spec.min_replicas (5)"));
  CHECK_THAT(message, Contains("spec.max_replicas (2)"));
}

TEST_CASE("ValidateJobSpec rejects min_replicas 0") {
  JobSpec spec = ValidSpec();
  spec.min_replicas = 0;
  const std::string message = RejectionMessage(spec);
  CHECK_THAT(message, Contains("spec.min_replicas"));
  CHECK_THAT(message, Contains("got 0"));
}

TEST_CASE("ValidateJobSpec rejects max_replicas beyond the limit") {
  JobSpec spec = ValidSpec();
  spec.max_replicas = 100'001;
  const std::string message = RejectionMessage(spec);
  CHECK_THAT(message, Contains("spec.max_replicas 100001"));
  CHECK_THAT(message, Contains("100000"));
}

TEST_CASE("ValidateJobSpec rejects gpus_per_replica 0 and above 64") {
  JobSpec spec = ValidSpec();
  spec.gpus_per_replica = 0;
  CHECK(RejectionMessage(spec) == "spec.gpus_per_replica must be in [1, 64], got 0");
  spec.gpus_per_replica = 65;
  CHECK(RejectionMessage(spec) == "spec.gpus_per_replica must be in [1, 64], got 65");
  spec.gpus_per_replica = 64;
  CHECK(ValidateJobSpec(spec).ok());
}

TEST_CASE("ValidateJobSpec rejects a negative, NaN, infinite or too-large restart cost") {
  JobSpec spec = ValidSpec();
  spec.restart_cost_seconds = -1;
  std::string message = RejectionMessage(spec);
  CHECK_THAT(message, Contains("spec.restart_cost_seconds"));
  CHECK_THAT(message, Contains("got -1"));

  spec.restart_cost_seconds = std::nan("");
  message = RejectionMessage(spec);
  CHECK_THAT(message, Contains("spec.restart_cost_seconds"));
  CHECK_THAT(message, Contains("nan"));

  spec.restart_cost_seconds = std::numeric_limits<double>::infinity();
  CHECK_THAT(RejectionMessage(spec), Contains("spec.restart_cost_seconds"));

  spec.restart_cost_seconds = 86'401;
  CHECK_THAT(RejectionMessage(spec), Contains("spec.restart_cost_seconds"));
}

TEST_CASE("ValidateJobSpec accepts an unset or positive total_samples and rejects 0") {
  JobSpec spec = ValidSpec();
  CHECK(ValidateJobSpec(spec).ok());  // unset = unknown
  spec.total_samples = 0;
  CHECK(RejectionMessage(spec) ==
        "spec.total_samples must be greater than 0 when set (unset = unknown), got 0");
  spec.total_samples = 1;
  CHECK(ValidateJobSpec(spec).ok());
  spec.total_samples = std::numeric_limits<uint64_t>::max();
  CHECK(ValidateJobSpec(spec).ok());
}

TEST_CASE("ValidateJobSpec checks batch_scaling, naming the field and the bound") {
  JobSpec spec = ValidSpec();
  spec.batch_scaling = BatchLimits{.initial_batch = 128, .max_batch = 4096};
  CHECK(ValidateJobSpec(spec).ok());
  spec.batch_scaling->max_batch = 0;  // no growth
  CHECK(ValidateJobSpec(spec).ok());
  spec.batch_scaling->initial_batch = 0;
  CHECK(RejectionMessage(spec) == "spec.batch_scaling.initial_batch_size must be > 0");
  spec.batch_scaling = BatchLimits{.initial_batch = 128, .max_batch = 64};
  CHECK(RejectionMessage(spec) ==
        "spec.batch_scaling.max_batch_size (64) must be >= spec.batch_scaling.initial_batch_size "
        "(128) (0 = no growth)");
  spec.batch_scaling =
      BatchLimits{.initial_batch = 128, .min_local_batch = 32, .max_local_batch = 16};
  CHECK_THAT(RejectionMessage(spec),
             Contains("spec.batch_scaling.max_local_batch_size (16) must be >= "
                      "spec.batch_scaling.min_local_batch_size (32)"));
  // With max_local_batch_size 0 (= the largest total), min_local above it
  // leaves no batch a worker could run.
  spec.batch_scaling = BatchLimits{.initial_batch = 8, .min_local_batch = 64};
  CHECK_THAT(RejectionMessage(spec),
             Contains("spec.batch_scaling.min_local_batch_size (64) must be <= the largest total "
                      "batch (8)"));
  spec.batch_scaling = BatchLimits{.initial_batch = 8, .max_batch = 1024, .min_local_batch = 64};
  CHECK(ValidateJobSpec(spec).ok());
  spec.batch_scaling = BatchLimits{.initial_batch = 128, .max_batch = (1u << 30) + 1};
  CHECK(RejectionMessage(spec) ==
        "spec.batch_scaling.max_batch_size 1073741825 exceeds the limit of 1073741824");
  spec.batch_scaling = BatchLimits{.initial_batch = 128, .max_local_batch = (1u << 24) + 1};
  CHECK_THAT(RejectionMessage(spec),
             Contains("spec.batch_scaling.max_local_batch_size 16777217 exceeds the limit"));
}

TEST_CASE("ValidateJobSpec rejects a local_batch_size beyond the limit") {
  JobSpec spec = ValidSpec();
  spec.local_batch_size = (1u << 24) + 1;
  CHECK_THAT(RejectionMessage(spec), Contains("spec.local_batch_size 16777217"));
}

TEST_CASE("ValidateJobSpec rejects prior points with replicas outside [1, max_replicas]") {
  JobSpec spec = ValidSpec();  // max_replicas = 8
  spec.prior = {Point(2, 100), Point(9, 400)};
  CHECK(RejectionMessage(spec) == "spec.prior[1].replicas must be in [1, 8] (max_replicas), got 9");
  spec.prior = {Point(0, 100)};
  CHECK(RejectionMessage(spec) == "spec.prior[0].replicas must be in [1, 8] (max_replicas), got 0");
}

TEST_CASE("ValidateJobSpec rejects prior points with non-positive or non-finite throughput") {
  JobSpec spec = ValidSpec();
  spec.prior = {Point(1, 0)};
  std::string message = RejectionMessage(spec);
  CHECK_THAT(message, Contains("spec.prior[0].samples_per_second"));
  CHECK_THAT(message, Contains("got 0"));

  spec.prior = {Point(1, 10), Point(2, -5)};
  message = RejectionMessage(spec);
  CHECK_THAT(message, Contains("spec.prior[1].samples_per_second"));
  CHECK_THAT(message, Contains("got -5"));

  spec.prior = {Point(1, std::nan(""))};
  CHECK_THAT(RejectionMessage(spec), Contains("spec.prior[0].samples_per_second"));
}

TEST_CASE("ValidateJobSpec rejects duplicated prior replicas naming both indices") {
  JobSpec spec = ValidSpec();
  spec.prior = {Point(2, 100), Point(4, 180), Point(2, 110)};
  CHECK(RejectionMessage(spec) == "spec.prior[2].replicas 2 repeats spec.prior[0]");
}

TEST_CASE("ValidateJobSpec rejects more prior points than the limit") {
  JobSpec spec = ValidSpec();
  SpecLimits limits;
  limits.max_prior_points = 2;
  spec.prior = {Point(1, 10), Point(2, 20), Point(3, 30)};
  absl::Status s = ValidateJobSpec(spec, limits);
  REQUIRE(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(s.message()) == "spec.prior has 3 points; the limit is 2");
}

}  // namespace
}  // namespace rescale
