// Proto <-> core conversions and ToGrpcStatus (see server/convert.h).
#include "server/convert.h"

#include <algorithm>

namespace rescale::server {
namespace {

// InfinitePast means "never": the proto field stays unset.
bool IsSet(absl::Time t) { return t != absl::InfinitePast() && t != absl::InfiniteFuture(); }

void SetTimestamp(absl::Time t, google::protobuf::Timestamp* proto) {
  const int64_t nanos = absl::ToUnixNanos(t);
  proto->set_seconds(nanos >= 0 ? nanos / 1'000'000'000 : (nanos - 999'999'999) / 1'000'000'000);
  proto->set_nanos(static_cast<int32_t>(nanos - proto->seconds() * 1'000'000'000));
}

CurvePoint FromProto(const v1::CurvePoint& p) {
  return {p.replicas(),
          p.samples_per_second(),
          p.uncertainty(),
          p.observed(),
          p.sample_count(),
          p.efficiency(),
          p.observed_samples_per_second()};
}

void ToProto(const CurvePoint& p, v1::CurvePoint* proto) {
  proto->set_replicas(p.replicas);
  proto->set_samples_per_second(p.samples_per_second);
  proto->set_uncertainty(p.uncertainty);
  proto->set_observed(p.observed);
  proto->set_sample_count(p.sample_count);
  proto->set_efficiency(p.efficiency);
  proto->set_observed_samples_per_second(p.observed_samples_per_second);
}

}  // namespace

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

JobSpec FromProto(const v1::JobSpec& proto) {
  JobSpec spec;
  spec.job_id = proto.job_id();
  spec.min_replicas = proto.min_replicas();
  spec.max_replicas = proto.max_replicas();
  spec.gpus_per_replica =
      proto.has_gpus_per_replica() ? proto.gpus_per_replica() : kDefaultGpusPerReplica;
  spec.priority = proto.priority();
  spec.preemptible = proto.has_preemptible() ? proto.preemptible() : kDefaultPreemptible;
  spec.restart_cost_seconds =
      proto.has_restart_cost_seconds() ? proto.restart_cost_seconds() : kDefaultRestartCostSeconds;
  spec.local_batch_size = proto.local_batch_size();
  spec.policy = proto.policy();
  for (const v1::CurvePoint& p : proto.prior()) spec.prior.push_back(FromProto(p));
  for (const auto& [key, value] : proto.parameters()) spec.parameters[key] = value;
  if (proto.has_total_samples()) spec.total_samples = proto.total_samples();
  spec.queue = proto.queue();
  spec.admission = proto.admission();
  spec.gpu_types.assign(proto.gpu_types().begin(), proto.gpu_types().end());
  if (proto.has_batch_scaling()) {
    const v1::BatchScaling& b = proto.batch_scaling();
    spec.batch_scaling = BatchLimits{.initial_batch = b.initial_batch_size(),
                                     .max_batch = b.max_batch_size(),
                                     .min_local_batch = std::max(b.min_local_batch_size(), 1u),
                                     .max_local_batch = b.max_local_batch_size(),
                                     .accumulation = b.gradient_accumulation()};
  }
  return spec;
}

void ToProto(const JobSpec& spec, v1::JobSpec* proto) {
  proto->set_job_id(spec.job_id);
  proto->set_min_replicas(spec.min_replicas);
  proto->set_max_replicas(spec.max_replicas);
  proto->set_gpus_per_replica(spec.gpus_per_replica);
  proto->set_priority(spec.priority);
  proto->set_preemptible(spec.preemptible);
  proto->set_restart_cost_seconds(spec.restart_cost_seconds);
  proto->set_local_batch_size(spec.local_batch_size);
  proto->set_policy(spec.policy);
  for (const CurvePoint& p : spec.prior) ToProto(p, proto->add_prior());
  for (const auto& [key, value] : spec.parameters) (*proto->mutable_parameters())[key] = value;
  if (spec.total_samples) proto->set_total_samples(*spec.total_samples);
  proto->set_queue(spec.queue);
  proto->set_admission(spec.admission);
  for (const std::string& type : spec.gpu_types) proto->add_gpu_types(type);
  if (spec.batch_scaling) {
    v1::BatchScaling* b = proto->mutable_batch_scaling();
    b->set_initial_batch_size(spec.batch_scaling->initial_batch);
    b->set_max_batch_size(spec.batch_scaling->max_batch);
    b->set_min_local_batch_size(spec.batch_scaling->min_local_batch);
    b->set_max_local_batch_size(spec.batch_scaling->max_local_batch);
    b->set_gradient_accumulation(spec.batch_scaling->accumulation);
  }
}

void ToProto(const JobStatus& status, v1::JobStatus* proto) {
  proto->set_current_replicas(status.current_replicas);
  proto->set_suspended(status.suspended);
  proto->set_gpu_type(status.gpu_type);
  proto->set_last_applied_generation(status.last_applied_generation);
  if (IsSet(status.last_applied_at))
    SetTimestamp(status.last_applied_at, proto->mutable_last_applied_at());
  if (IsSet(status.registered_at))
    SetTimestamp(status.registered_at, proto->mutable_registered_at());
  proto->set_samples_accepted(status.samples_accepted);
  proto->set_samples_processed(status.samples_processed);
  if (status.gradient_noise_scale) proto->set_gradient_noise_scale(*status.gradient_noise_scale);
  if (status.progress_samples) proto->set_progress_samples(*status.progress_samples);
  if (status.statistical_efficiency) {
    proto->set_statistical_efficiency(*status.statistical_efficiency);
  }
  if (status.estimated_remaining_seconds) {
    proto->set_estimated_remaining_seconds(*status.estimated_remaining_seconds);
  }
}

v1::Action ToProto(Action action) {
  switch (action) {
    case Action::kUnspecified:
      return v1::ACTION_UNSPECIFIED;
    case Action::kHold:
      return v1::HOLD;
    case Action::kScaleUp:
      return v1::SCALE_UP;
    case Action::kScaleDown:
      return v1::SCALE_DOWN;
    case Action::kSuspend:
      return v1::SUSPEND;
    case Action::kResume:
      return v1::RESUME;
  }
  return v1::ACTION_UNSPECIFIED;
}

v1::BindingConstraint ToProto(BindingConstraint c) {
  switch (c) {
    case BindingConstraint::kUnspecified:
      return v1::BINDING_CONSTRAINT_UNSPECIFIED;
    case BindingConstraint::kNone:
      return v1::NONE;
    case BindingConstraint::kCapacity:
      return v1::CAPACITY;
    case BindingConstraint::kMinReplicas:
      return v1::MIN_REPLICAS;
    case BindingConstraint::kMaxReplicas:
      return v1::MAX_REPLICAS;
    case BindingConstraint::kEfficiency:
      return v1::EFFICIENCY;
    case BindingConstraint::kCooldown:
      return v1::COOLDOWN;
    case BindingConstraint::kRestartCost:
      return v1::RESTART_COST;
    case BindingConstraint::kPreempted:
      return v1::PREEMPTED;
    case BindingConstraint::kInsufficientData:
      return v1::INSUFFICIENT_DATA;
    case BindingConstraint::kNodeSlots:
      return v1::NODE_SLOTS;
    case BindingConstraint::kQuota:
      return v1::QUOTA;
  }
  return v1::BINDING_CONSTRAINT_UNSPECIFIED;
}

void ToProto(const Recommendation& rec, v1::Recommendation* proto) {
  proto->set_job_id(rec.job_id);
  proto->set_replicas(rec.replicas);
  proto->set_suspend(rec.suspend);
  proto->set_action(ToProto(rec.action));
  proto->set_generation(rec.generation);
  proto->set_reason(rec.reason);
  proto->set_binding_constraint(ToProto(rec.binding_constraint));
  proto->set_current_samples_per_second(rec.current_samples_per_second);
  proto->set_predicted_samples_per_second(rec.predicted_samples_per_second);
  proto->set_queue_position(rec.queue_position);
  if (IsSet(rec.decided_at)) SetTimestamp(rec.decided_at, proto->mutable_decided_at());
  proto->set_policy(rec.policy);
  proto->set_gpus(rec.gpus);
  proto->set_gpu_type(rec.gpu_type);
  if (rec.value_one_more) proto->set_value_one_more(*rec.value_one_more);
  if (rec.value_one_fewer) proto->set_value_one_fewer(*rec.value_one_fewer);
  // Unset stays unset: clients tell a goodput-planned job by their presence.
  if (rec.local_batch_size) proto->set_local_batch_size(*rec.local_batch_size);
  if (rec.accumulation_steps) proto->set_accumulation_steps(*rec.accumulation_steps);
  if (rec.predicted_goodput) proto->set_predicted_goodput(*rec.predicted_goodput);
  if (rec.statistical_efficiency) proto->set_statistical_efficiency(*rec.statistical_efficiency);
}

void ToProto(const JobView& view, v1::Job* proto) {
  ToProto(view.spec, proto->mutable_spec());
  ToProto(view.status, proto->mutable_status());
  for (const CurvePoint& p : view.curve) ToProto(p, proto->mutable_curve()->add_points());
  if (!view.curve.empty()) {
    proto->mutable_curve()->set_model(view.curve_model);
    proto->mutable_curve()->set_fit_rms_log_error(view.curve_fit_rms_log_error);
    proto->mutable_curve()->set_planned_on(view.curve_planned_on);
  }
  for (const JobView::TypeCurve& typed : view.curves_by_type) {
    v1::ThroughputCurve* out = proto->add_curves_by_type();
    for (const CurvePoint& p : typed.curve) ToProto(p, out->add_points());
    out->set_model(typed.model);
    out->set_fit_rms_log_error(typed.fit_rms_log_error);
    out->set_gpu_type(typed.gpu_type);
    out->set_source(typed.source);
  }
  if (view.recommendation) ToProto(*view.recommendation, proto->mutable_recommendation());
  for (const PodStatus& pod : view.pods) {
    v1::PodStatus* out = proto->add_pods();
    out->set_pod(pod.pod);
    out->set_world_size(pod.world_size);
    out->set_recent_step_seconds(pod.recent_step_seconds);
    if (IsSet(pod.last_seen)) SetTimestamp(pod.last_seen, out->mutable_last_seen());
    out->set_sample_count(pod.sample_count);
    out->set_straggler(pod.straggler);
  }
  proto->set_plan_pending(view.plan_pending);
}

GpuType FromProto(const v1::GpuType& proto) {
  GpuType type;
  type.name = proto.name();
  type.total_gpus = proto.total_gpus();
  type.gpus_per_node = proto.gpus_per_node();
  for (const v1::ReplicaSlots& s : proto.slots())
    type.slots.push_back({s.gpus_per_replica(), s.replicas()});
  return type;
}

void ToProto(const GpuType& type, v1::GpuType* proto) {
  proto->set_name(type.name);
  proto->set_total_gpus(type.total_gpus);
  proto->set_gpus_per_node(type.gpus_per_node);
  for (const ReplicaSlots& s : type.slots) {
    v1::ReplicaSlots* out = proto->add_slots();
    out->set_gpus_per_replica(s.gpus_per_replica);
    out->set_replicas(s.replicas);
  }
}

void ToProto(const ClusterView& view, v1::Cluster* proto) {
  proto->set_capacity_known(view.total_gpus.has_value());
  proto->set_total_gpus(view.total_gpus.value_or(0));
  proto->set_allocatable_gpus(view.allocatable_gpus);
  proto->set_allocated_gpus(view.allocated_gpus);
  proto->set_free_gpus(view.total_gpus && *view.total_gpus > view.allocated_gpus
                           ? *view.total_gpus - view.allocated_gpus
                           : 0);
  proto->set_waiting_jobs(view.waiting_jobs);
  for (const JobAllocation& a : view.allocations) {
    v1::JobAllocation* out = proto->add_allocations();
    out->set_job_id(a.job_id);
    out->set_replicas(a.replicas);
    out->set_gpus(a.gpus);
    out->set_priority(a.priority);
    out->set_gpu_type(a.gpu_type);
  }
  for (size_t t = 0; t < view.gpu_types.size(); ++t) {
    ToProto(view.gpu_types[t], proto->add_gpu_types());
    proto->add_allocated_gpus_by_type(
        t < view.allocated_gpus_by_type.size() ? view.allocated_gpus_by_type[t] : 0);
  }
  if (IsSet(view.planned_at)) SetTimestamp(view.planned_at, proto->mutable_planned_at());
  proto->set_plan_utility(view.plan_utility);
  proto->set_plan_upper_bound(view.plan_upper_bound);
  proto->set_optimality_gap(view.optimality_gap);
  proto->set_plan_exact(view.plan_exact);
  proto->set_utilization(view.total_gpus && *view.total_gpus > 0
                             ? double(view.allocated_gpus) / *view.total_gpus
                             : 0.0);
  proto->set_plan_pending(view.plan_pending);
  for (const ReplicaSlots& s : view.slots) {
    v1::ReplicaSlots* out = proto->add_slots();
    out->set_gpus_per_replica(s.gpus_per_replica);
    out->set_replicas(s.replicas);
  }
  for (const ReplicaSlotUse& use : view.slot_use) {
    v1::ReplicaSlotUse* out = proto->add_slot_use();
    out->set_gpus_per_replica(use.gpus_per_replica);
    out->set_replicas_fit(use.replicas_fit);
    out->set_replicas_planned(use.replicas_planned);
  }
  proto->set_state_backend(view.state_backend);
  if (IsSet(view.last_checkpoint_at)) {
    SetTimestamp(view.last_checkpoint_at, proto->mutable_last_checkpoint_at());
  }
  for (const QueueView& q : view.queues) ToProto(q, proto->add_queues());
}

QueueSpec FromProto(const v1::Queue& proto) {
  QueueSpec q;
  q.name = proto.name();
  q.nominal_gpus = proto.nominal_gpus();
  q.cohort = proto.cohort();
  if (proto.has_borrowing_limit_gpus()) q.borrowing_limit_gpus = proto.borrowing_limit_gpus();
  if (proto.has_lending_limit_gpus()) q.lending_limit_gpus = proto.lending_limit_gpus();
  q.weight = proto.has_weight() ? proto.weight() : 1.0;
  return q;
}

void ToProto(const QueueSpec& q, v1::Queue* proto) {
  proto->set_name(q.name);
  proto->set_nominal_gpus(q.nominal_gpus);
  proto->set_cohort(q.cohort);
  if (q.borrowing_limit_gpus) proto->set_borrowing_limit_gpus(*q.borrowing_limit_gpus);
  if (q.lending_limit_gpus) proto->set_lending_limit_gpus(*q.lending_limit_gpus);
  proto->set_weight(q.weight);
}

void ToProto(const QueueView& q, v1::QueueStatus* proto) {
  ToProto(q.spec, proto->mutable_queue());
  proto->set_defined(q.defined);
  proto->set_in_use_gpus(q.in_use_gpus);
  proto->set_borrowed_gpus(q.borrowed_gpus);
  proto->set_lent_gpus(q.lent_gpus);
  proto->set_guaranteed_gpus(q.guaranteed_gpus);
  proto->set_wanted_gpus(q.wanted_gpus);
  proto->set_running_jobs(q.running_jobs);
  proto->set_waiting_jobs(q.waiting_jobs);
}

void ToProto(const IngestResult& result, v1::IngestSummary* proto) {
  proto->set_accepted(result.accepted);
  proto->set_rejected(result.rejected);
  proto->set_duplicates(result.duplicates);
  for (const SampleRejection& r : result.rejections) {
    v1::SampleRejection* out = proto->add_rejections();
    out->set_index(r.index);
    out->set_reason(r.reason);
  }
}

void ToProto(const RecommendationEvent& event, v1::RecommendationEvent* proto) {
  switch (event.type) {
    case RecommendationEvent::Type::kAdded:
      proto->set_type(v1::RecommendationEvent::ADDED);
      break;
    case RecommendationEvent::Type::kModified:
      proto->set_type(v1::RecommendationEvent::MODIFIED);
      break;
    case RecommendationEvent::Type::kDeleted:
      proto->set_type(v1::RecommendationEvent::DELETED);
      break;
    case RecommendationEvent::Type::kSynced:
      proto->set_type(v1::RecommendationEvent::SYNCED);
      proto->set_plan_id(event.plan_id);
      return;
    case RecommendationEvent::Type::kPlanEnd:
      proto->set_type(v1::RecommendationEvent::PLAN_END);
      proto->set_plan_id(event.plan_id);
      return;
  }
  proto->set_plan_id(event.plan_id);
  ToProto(event.recommendation, proto->mutable_recommendation());
}

std::vector<StepSample> FromProto(const v1::SampleBatch& batch) {
  std::vector<StepSample> out(batch.samples_size());
  const std::string_view batch_job = batch.job_id();
  const std::string_view batch_pod = batch.pod();
  const std::string_view batch_type = batch.gpu_type();
  for (int i = 0; i < batch.samples_size(); ++i) {
    const v1::StepSample& p = batch.samples(i);
    StepSample& s = out[i];
    s.job_id = p.job_id().empty() ? batch_job : std::string_view(p.job_id());
    s.pod = p.pod().empty() ? batch_pod : std::string_view(p.pod());
    s.world_size = p.world_size() == 0 ? batch.world_size() : p.world_size();
    s.step_seconds = p.step_seconds();
    s.batch_size = p.batch_size();
    s.timestamp_unix_nanos = p.timestamp_unix_nanos();
    if (p.has_step()) s.step = p.step();
    if (p.has_grad_sqr()) s.grad_sqr = p.grad_sqr();
    if (p.has_grad_var()) s.grad_var = p.grad_var();
    s.grad_batch = p.grad_batch();
    s.gpu_type = p.gpu_type().empty() ? batch_type : std::string_view(p.gpu_type());
  }
  return out;
}

}  // namespace rescale::server
