// Tests of server/convert: proto defaults for unset optional fields, batch
// flattening, enum names, timestamps and the one absl -> gRPC status mapping.
#include "server/convert.h"

#include <catch2/catch.hpp>

namespace v1 = rescale::v1;
using rescale::server::FromProto;
using rescale::server::ToGrpcStatus;
using rescale::server::ToProto;

TEST_CASE("ToGrpcStatus keeps the canonical code and the message") {
  CHECK(ToGrpcStatus(absl::OkStatus()).ok());
  grpc::Status s = ToGrpcStatus(absl::InvalidArgumentError("spec.min_replicas (5) ..."));
  CHECK(s.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(s.error_message() == "spec.min_replicas (5) ...");
  CHECK(ToGrpcStatus(absl::NotFoundError("x")).error_code() == grpc::StatusCode::NOT_FOUND);
  CHECK(ToGrpcStatus(absl::ResourceExhaustedError("x")).error_code() ==
        grpc::StatusCode::RESOURCE_EXHAUSTED);
  CHECK(ToGrpcStatus(absl::AlreadyExistsError("x")).error_code() ==
        grpc::StatusCode::ALREADY_EXISTS);
  CHECK(ToGrpcStatus(absl::UnavailableError("x")).error_code() == grpc::StatusCode::UNAVAILABLE);
}

TEST_CASE("unset optional spec fields take the documented defaults") {
  v1::JobSpec proto;
  proto.set_job_id("ns/job");
  rescale::JobSpec spec = FromProto(proto);
  CHECK(spec.gpus_per_replica == 1);
  CHECK(spec.preemptible);
  CHECK(spec.restart_cost_seconds == 60);

  proto.set_gpus_per_replica(4);
  proto.set_preemptible(false);
  proto.set_restart_cost_seconds(0);  // explicit zero is not "unset"
  spec = FromProto(proto);
  CHECK(spec.gpus_per_replica == 4);
  CHECK_FALSE(spec.preemptible);
  CHECK(spec.restart_cost_seconds == 0);
}

TEST_CASE("a spec survives the round trip through proto") {
  rescale::JobSpec spec;
  spec.job_id = "ns/job";
  spec.min_replicas = 2;
  spec.max_replicas = 16;
  spec.gpus_per_replica = 8;
  spec.priority = -3;
  spec.preemptible = false;
  spec.restart_cost_seconds = 12.5;
  spec.local_batch_size = 64;
  spec.policy = "static-max";
  spec.prior = {{1, 100, 0, false, 0}, {4, 350, 0, false, 0}};
  spec.queue = "team-a";
  spec.admission = "kueue";
  v1::JobSpec proto;
  ToProto(spec, &proto);
  CHECK_FALSE(proto.has_total_samples());  // unset stays unset: "unknown"
  CHECK(FromProto(proto) == spec);

  spec.total_samples = uint64_t{5} << 32;  // above 2^32: a 64-bit field all the way
  v1::JobSpec with_total;
  ToProto(spec, &with_total);
  CHECK(with_total.total_samples() == uint64_t{5} << 32);
  CHECK(FromProto(with_total) == spec);

  CHECK_FALSE(with_total.has_batch_scaling());  // unset: a fixed batch
  spec.batch_scaling = rescale::BatchLimits{.initial_batch = 128,
                                            .max_batch = 4096,
                                            .min_local_batch = 16,
                                            .max_local_batch = 512,
                                            .accumulation = true};
  v1::JobSpec with_scaling;
  ToProto(spec, &with_scaling);
  CHECK(with_scaling.batch_scaling().initial_batch_size() == 128);
  CHECK(with_scaling.batch_scaling().max_batch_size() == 4096);
  CHECK(with_scaling.batch_scaling().min_local_batch_size() == 16);
  CHECK(with_scaling.batch_scaling().max_local_batch_size() == 512);
  CHECK(with_scaling.batch_scaling().gradient_accumulation());
  CHECK(FromProto(with_scaling) == spec);
  // The API's 0 for min_local_batch_size stands for 1.
  with_scaling.mutable_batch_scaling()->set_min_local_batch_size(0);
  CHECK(FromProto(with_scaling).batch_scaling->min_local_batch == 1);
}

TEST_CASE("a sample's gradient statistics reach the core as sent") {
  v1::SampleBatch batch;
  batch.set_job_id("ns/job");
  batch.set_pod("worker-0");
  batch.set_world_size(4);
  batch.add_samples()->set_step_seconds(1);  // none
  v1::StepSample* with = batch.add_samples();
  with->set_step_seconds(1);
  with->set_grad_sqr(0.25);
  with->set_grad_var(0);  // an explicit 0 is set, not absent
  with->set_grad_batch(512);
  const std::vector<rescale::StepSample> samples = FromProto(batch);
  REQUIRE(samples.size() == 2);
  CHECK_FALSE(samples[0].grad_sqr.has_value());
  CHECK_FALSE(samples[0].grad_var.has_value());
  CHECK(samples[0].grad_batch == 0);
  CHECK(samples[1].grad_sqr == 0.25);
  REQUIRE(samples[1].grad_var.has_value());
  CHECK(*samples[1].grad_var == 0);
  CHECK(samples[1].grad_batch == 512);
}

TEST_CASE("a status carries progress, and the remaining time only when known") {
  rescale::JobStatus status;
  status.samples_processed = uint64_t{5} << 33;
  v1::JobStatus proto;
  ToProto(status, &proto);
  CHECK(proto.samples_processed() == uint64_t{5} << 33);
  CHECK_FALSE(proto.has_estimated_remaining_seconds());

  status.estimated_remaining_seconds = 0;  // done: an explicit zero, not "unknown"
  ToProto(status, &proto);
  REQUIRE(proto.has_estimated_remaining_seconds());
  CHECK(proto.estimated_remaining_seconds() == 0);
  status.estimated_remaining_seconds = 4800.5;
  ToProto(status, &proto);
  CHECK(proto.estimated_remaining_seconds() == 4800.5);
}

TEST_CASE("batch-level job_id, pod and world_size fill the samples that leave them empty") {
  v1::SampleBatch batch;
  batch.set_job_id("ns/job");
  batch.set_pod("worker-0");
  batch.set_world_size(4);
  batch.add_samples()->set_step_seconds(1);
  v1::StepSample* own = batch.add_samples();
  own->set_job_id("ns/other");
  own->set_pod("worker-9");
  own->set_world_size(2);
  own->set_step(17);
  std::vector<rescale::StepSample> samples = FromProto(batch);
  REQUIRE(samples.size() == 2);
  CHECK(samples[0].job_id == "ns/job");
  CHECK(samples[0].pod == "worker-0");
  CHECK(samples[0].world_size == 4);
  CHECK_FALSE(samples[0].step.has_value());
  CHECK(samples[1].job_id == "ns/other");
  CHECK(samples[1].pod == "worker-9");
  CHECK(samples[1].world_size == 2);
  CHECK(samples[1].step == 17u);
}

TEST_CASE("recommendations carry enums and decision time, never is left unset") {
  rescale::Recommendation rec;
  rec.job_id = "ns/job";
  rec.action = rescale::Action::kResume;
  rec.binding_constraint = rescale::BindingConstraint::kPreempted;
  rec.decided_at = absl::FromUnixNanos(1'700'000'000'123'456'789);
  v1::Recommendation proto;
  ToProto(rec, &proto);
  CHECK(proto.action() == v1::RESUME);
  CHECK(proto.binding_constraint() == v1::PREEMPTED);
  CHECK(proto.decided_at().seconds() == 1'700'000'000);
  CHECK(proto.decided_at().nanos() == 123'456'789);

  rescale::JobStatus status;  // never applied
  v1::JobStatus status_proto;
  ToProto(status, &status_proto);
  CHECK_FALSE(status_proto.has_last_applied_at());
}

TEST_CASE("a recommendation's batch and goodput reach the wire only when the plan set them") {
  // Through the wire format too: presence must survive serialization, so a
  // client can tell "not goodput-planned" from an explicit 0.
  auto round_trip = [](const rescale::Recommendation& rec) {
    v1::Recommendation sent;
    ToProto(rec, &sent);
    v1::Recommendation received;
    REQUIRE(received.ParseFromString(sent.SerializeAsString()));
    return received;
  };
  rescale::Recommendation rec;
  rec.job_id = "ns/job";
  rec.replicas = 4;
  rec.predicted_samples_per_second = 900;

  const v1::Recommendation plain = round_trip(rec);
  CHECK(plain.replicas() == 4);
  CHECK_FALSE(plain.has_local_batch_size());
  CHECK_FALSE(plain.has_accumulation_steps());
  CHECK_FALSE(plain.has_predicted_goodput());
  CHECK_FALSE(plain.has_statistical_efficiency());

  rec.local_batch_size = 64;
  rec.accumulation_steps = 0;  // goodput-planned without accumulation: set, not absent
  rec.predicted_goodput = 512.25;
  rec.statistical_efficiency = 0.625;
  const v1::Recommendation planned = round_trip(rec);
  REQUIRE(planned.has_local_batch_size());
  CHECK(planned.local_batch_size() == 64);
  REQUIRE(planned.has_accumulation_steps());
  CHECK(planned.accumulation_steps() == 0);
  CHECK(planned.predicted_goodput() == 512.25);
  CHECK(planned.statistical_efficiency() == 0.625);
  CHECK(planned.predicted_samples_per_second() == 900);

  rec.accumulation_steps = 3;
  CHECK(round_trip(rec).accumulation_steps() == 3);
}

TEST_CASE("watch events carry their plan id; SYNCED and PLAN_END no recommendation") {
  rescale::RecommendationEvent change;
  change.type = rescale::RecommendationEvent::Type::kModified;
  change.recommendation.job_id = "ns/a";
  change.recommendation.replicas = 3;
  change.plan_id = 7;
  v1::RecommendationEvent proto;
  ToProto(change, &proto);
  CHECK(proto.type() == v1::RecommendationEvent::MODIFIED);
  CHECK(proto.plan_id() == 7);
  CHECK(proto.recommendation().job_id() == "ns/a");
  CHECK(proto.recommendation().replicas() == 3);

  rescale::RecommendationEvent end;
  end.type = rescale::RecommendationEvent::Type::kPlanEnd;
  end.plan_id = 7;
  proto.Clear();
  ToProto(end, &proto);
  CHECK(proto.type() == v1::RecommendationEvent::PLAN_END);
  CHECK(proto.plan_id() == 7);
  CHECK_FALSE(proto.has_recommendation());

  rescale::RecommendationEvent synced;
  synced.type = rescale::RecommendationEvent::Type::kSynced;
  synced.plan_id = 6;
  proto.Clear();
  ToProto(synced, &proto);
  CHECK(proto.type() == v1::RecommendationEvent::SYNCED);
  CHECK(proto.plan_id() == 6);
  CHECK_FALSE(proto.has_recommendation());
}

TEST_CASE("the cluster view reports unknown capacity and free GPUs") {
  rescale::ClusterView view;
  view.allocated_gpus = 6;
  v1::Cluster proto;
  ToProto(view, &proto);
  CHECK_FALSE(proto.capacity_known());
  CHECK(proto.free_gpus() == 0);
  view.total_gpus = 10;
  proto.Clear();
  ToProto(view, &proto);
  CHECK(proto.capacity_known());
  CHECK(proto.free_gpus() == 4);
}

TEST_CASE("the cluster view carries the allocatable GPUs beside the usable total") {
  rescale::ClusterView view;
  view.total_gpus = 16;
  view.allocated_gpus = 6;
  view.allocatable_gpus = 24;
  v1::Cluster proto;
  ToProto(view, &proto);
  CHECK(proto.allocatable_gpus() == 24);
  CHECK(proto.total_gpus() == 16);
  CHECK(proto.free_gpus() == 10);  // of the usable ones
}

TEST_CASE("the cluster view carries the state backend and the last checkpoint when there was one") {
  rescale::ClusterView view;
  v1::Cluster proto;
  ToProto(view, &proto);
  CHECK(proto.state_backend() == "memory");
  CHECK_FALSE(proto.has_last_checkpoint_at());
  view.state_backend = "sqlite:/data/state.db";
  view.last_checkpoint_at = absl::FromUnixSeconds(1'700'000'000);
  proto.Clear();
  ToProto(view, &proto);
  CHECK(proto.state_backend() == "sqlite:/data/state.db");
  CHECK(proto.last_checkpoint_at().seconds() == 1'700'000'000);
}
