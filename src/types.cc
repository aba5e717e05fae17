// Names of the domain enums (as the API spells them) and small helpers on
// the core types.
#include "rescale/types.h"

namespace rescale {

std::string_view ActionName(Action action) {
  switch (action) {
    case Action::kUnspecified:
      return "ACTION_UNSPECIFIED";
    case Action::kHold:
      return "HOLD";
    case Action::kScaleUp:
      return "SCALE_UP";
    case Action::kScaleDown:
      return "SCALE_DOWN";
    case Action::kSuspend:
      return "SUSPEND";
    case Action::kResume:
      return "RESUME";
  }
  return "ACTION_UNSPECIFIED";
}

std::string_view BindingConstraintName(BindingConstraint constraint) {
  switch (constraint) {
    case BindingConstraint::kUnspecified:
      return "BINDING_CONSTRAINT_UNSPECIFIED";
    case BindingConstraint::kNone:
      return "NONE";
    case BindingConstraint::kCapacity:
      return "CAPACITY";
    case BindingConstraint::kMinReplicas:
      return "MIN_REPLICAS";
    case BindingConstraint::kMaxReplicas:
      return "MAX_REPLICAS";
    case BindingConstraint::kEfficiency:
      return "EFFICIENCY";
    case BindingConstraint::kCooldown:
      return "COOLDOWN";
    case BindingConstraint::kRestartCost:
      return "RESTART_COST";
    case BindingConstraint::kPreempted:
      return "PREEMPTED";
    case BindingConstraint::kInsufficientData:
      return "INSUFFICIENT_DATA";
    case BindingConstraint::kNodeSlots:
      return "NODE_SLOTS";
  }
  return "BINDING_CONSTRAINT_UNSPECIFIED";
}

void IngestResult::Merge(const IngestResult& other, uint32_t index_offset) {
  accepted += other.accepted;
  rejected += other.rejected;
  duplicates += other.duplicates;
  rejected_for_limits += other.rejected_for_limits;
  rejected_unknown_job += other.rejected_unknown_job;
  rejected_for_permission += other.rejected_for_permission;
  if (limit_reason.empty()) limit_reason = other.limit_reason;
  for (const SampleRejection& r : other.rejections) {
    if (rejections.size() >= kMaxReportedRejections) break;
    rejections.push_back({r.index + index_offset, r.reason});
  }
}

std::string_view JobNamespace(std::string_view job_id) {
  size_t slash = job_id.find('/');
  return slash == std::string_view::npos ? std::string_view() : job_id.substr(0, slash);
}

}  // namespace rescale
