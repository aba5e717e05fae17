// Names of the domain enums (as the API spells them) and small helpers on
// the core types.
#include "rescale/types.h"

#include "rescale/clock.h"

namespace rescale {

Clock* Clock::Real() {
  static RealClock* const clock = new RealClock();
  return clock;
}

std::string_view ActionName(Action action) {
  switch (action) {
    case Action::kUnspecified: return "ACTION_UNSPECIFIED";
    case Action::kHold: return "HOLD";
    case Action::kScaleUp: return "SCALE_UP";
    case Action::kScaleDown: return "SCALE_DOWN";
    case Action::kSuspend: return "SUSPEND";
    case Action::kResume: return "RESUME";
  }
  return "ACTION_UNSPECIFIED";
}

std::string_view BindingConstraintName(BindingConstraint constraint) {
  switch (constraint) {
    case BindingConstraint::kUnspecified: return "BINDING_CONSTRAINT_UNSPECIFIED";
    case BindingConstraint::kNone: return "NONE";
    case BindingConstraint::kCapacity: return "CAPACITY";
    case BindingConstraint::kMinReplicas: return "MIN_REPLICAS";
    case BindingConstraint::kMaxReplicas: return "MAX_REPLICAS";
    case BindingConstraint::kEfficiency: return "EFFICIENCY";
    case BindingConstraint::kCooldown: return "COOLDOWN";
    case BindingConstraint::kRestartCost: return "RESTART_COST";
    case BindingConstraint::kPreempted: return "PREEMPTED";
    case BindingConstraint::kInsufficientData: return "INSUFFICIENT_DATA";
  }
  return "BINDING_CONSTRAINT_UNSPECIFIED";
}

void IngestResult::Merge(const IngestResult& other, uint32_t index_offset) {
  accepted += other.accepted;
  rejected += other.rejected;
  rejected_for_limits += other.rejected_for_limits;
  rejected_unknown_job += other.rejected_unknown_job;
  if (limit_reason.empty()) limit_reason = other.limit_reason;
  for (const SampleRejection& r : other.rejections) {
    if (rejections.size() >= kMaxReportedRejections) break;
    rejections.push_back({r.index + index_offset, r.reason});
  }
}

double InterpolateThroughput(const std::vector<CurvePoint>& curve, uint32_t replicas) {
  if (curve.empty() || replicas == 0) return 0;
  if (replicas <= curve.front().replicas) {
    return curve.front().samples_per_second * replicas / curve.front().replicas;
  }
  for (size_t i = 1; i < curve.size(); ++i) {
    if (replicas <= curve[i].replicas) {
      const CurvePoint& a = curve[i - 1];
      const CurvePoint& b = curve[i];
      double t = double(replicas - a.replicas) / double(b.replicas - a.replicas);
      return a.samples_per_second + t * (b.samples_per_second - a.samples_per_second);
    }
  }
  return curve.back().samples_per_second * replicas / curve.back().replicas;
}

std::string_view JobNamespace(std::string_view job_id) {
  size_t slash = job_id.find('/');
  return slash == std::string_view::npos ? std::string_view() : job_id.substr(0, slash);
}

}  // namespace rescale
