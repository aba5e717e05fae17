// Fuzz target: a rescale.v1.JobSpec as it arrives in RegisterJob/UpdateJob,
// from wire bytes to the core: parse the proto, convert it
// (server/convert.h FromProto, which applies the defaults), validate it
// (rescale/validation.h).
//
// Invariants checked: conversion and validation never crash, validation
// either accepts or returns INVALID_ARGUMENT; a spec that converts goes back
// to a proto (ToProto) and converts again to the same core spec.
#include <google/protobuf/stubs/logging.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "absl/status/status.h"
#include "rescale/types.h"
#include "rescale/v1/rescale.pb.h"
#include "rescale/validation.h"
#include "server/convert.h"

// protobuf logs every string field that is not UTF-8 (a parse failure the
// target expects); millions of such lines would drown the fuzzer's output.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  rescale::v1::JobSpec proto;
  if (!proto.ParseFromArray(data, static_cast<int>(size))) return 0;

  const rescale::JobSpec spec = rescale::server::FromProto(proto);
  const absl::Status valid = rescale::ValidateJobSpec(spec);
  if (!valid.ok() && valid.code() != absl::StatusCode::kInvalidArgument) std::abort();
  (void)rescale::ValidateJobId(spec.job_id, "spec.job_id");

  rescale::v1::JobSpec round_trip;
  rescale::server::ToProto(spec, &round_trip);
  const rescale::JobSpec again = rescale::server::FromProto(round_trip);
  // NaN never equals itself; compare what is comparable.
  if (spec.prior.size() != again.prior.size() || spec.job_id != again.job_id ||
      spec.parameters != again.parameters || spec.min_replicas != again.min_replicas ||
      spec.max_replicas != again.max_replicas || spec.policy != again.policy) {
    std::abort();
  }
  if (valid.ok() && !(spec == again)) std::abort();
  return 0;
}
