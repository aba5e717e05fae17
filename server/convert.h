// Conversions between rescale.v1 protobuf messages and core types, and the
// one place where absl::Status becomes grpc::Status.
//
// Conversions are total: every proto value maps to a core value (unset
// optional fields take their documented defaults); validation happens in the
// core, so error messages are the same whichever client sent the request.
#ifndef RESCALE_SERVER_CONVERT_H_
#define RESCALE_SERVER_CONVERT_H_

#include <grpcpp/support/status.h>

#include <vector>

#include "absl/status/status.h"
#include "rescale/decision_engine.h"
#include "rescale/recommendation_board.h"
#include "rescale/types.h"
#include "rescale/v1/rescale.pb.h"

namespace rescale::server {

// absl and gRPC share the canonical codes, so the mapping keeps the code and
// the message. The only place a core status crosses into gRPC.
grpc::Status ToGrpcStatus(const absl::Status& status);

JobSpec FromProto(const v1::JobSpec& proto);
void ToProto(const JobSpec& spec, v1::JobSpec* proto);
void ToProto(const JobStatus& status, v1::JobStatus* proto);
void ToProto(const Recommendation& rec, v1::Recommendation* proto);
void ToProto(const JobView& view, v1::Job* proto);
void ToProto(const ClusterView& view, v1::Cluster* proto);
GpuType FromProto(const v1::GpuType& proto);
void ToProto(const GpuType& type, v1::GpuType* proto);
QueueSpec FromProto(const v1::Queue& proto);
void ToProto(const QueueSpec& queue, v1::Queue* proto);
void ToProto(const QueueView& queue, v1::QueueStatus* proto);
void ToProto(const IngestResult& result, v1::IngestSummary* proto);
void ToProto(const RecommendationEvent& event, v1::RecommendationEvent* proto);

// Flattens a batch: batch-level job_id, pod and world_size fill samples that
// leave them empty. The samples' strings point into `batch`, which must
// outlive them.
std::vector<StepSample> FromProto(const v1::SampleBatch& batch);

v1::Action ToProto(Action action);
v1::BindingConstraint ToProto(BindingConstraint constraint);

}  // namespace rescale::server

#endif  // RESCALE_SERVER_CONVERT_H_
