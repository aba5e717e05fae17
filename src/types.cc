// Names of the domain enums (as the API spells them) and small helpers on
// the core types.
#include "rescale/types.h"

#include <algorithm>
#include <iterator>
#include <vector>

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
    case BindingConstraint::kQuota:
      return "QUOTA";
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
  std::vector<SampleRejection> theirs;
  theirs.reserve(std::min(other.rejections.size(), kMaxReportedRejections));
  for (const SampleRejection& r : other.rejections) {
    if (theirs.size() >= kMaxReportedRejections) break;
    theirs.push_back({r.index + index_offset, r.reason});
  }
  if (theirs.empty()) return;
  if (rejections.empty() || rejections.back().index <= theirs.front().index) {
    // The usual case (the next batch): theirs all come after ours.
    for (SampleRejection& r : theirs) {
      if (rejections.size() >= kMaxReportedRejections) break;
      rejections.push_back(std::move(r));
    }
    return;
  }
  std::vector<SampleRejection> merged;
  merged.reserve(rejections.size() + theirs.size());
  std::merge(std::make_move_iterator(rejections.begin()), std::make_move_iterator(rejections.end()),
             std::make_move_iterator(theirs.begin()), std::make_move_iterator(theirs.end()),
             std::back_inserter(merged),
             [](const SampleRejection& a, const SampleRejection& b) { return a.index < b.index; });
  if (merged.size() > kMaxReportedRejections) merged.resize(kMaxReportedRejections);
  rejections = std::move(merged);
}

void IngestResult::MergeRetried(const IngestResult& retried,
                                std::span<const uint32_t> original_index) {
  // The retried samples were counted as rejected for an unknown job: they
  // now count as `retried` says instead.
  rejected -= original_index.size();
  rejected_unknown_job -= original_index.size();
  std::vector<SampleRejection> all;
  for (SampleRejection& r : rejections) {
    if (!std::binary_search(original_index.begin(), original_index.end(), r.index))
      all.push_back(std::move(r));
  }
  for (const SampleRejection& r : retried.rejections)
    all.push_back({original_index[r.index], r.reason});
  std::sort(all.begin(), all.end(),
            [](const SampleRejection& a, const SampleRejection& b) { return a.index < b.index; });
  rejections.clear();
  IngestResult counts = retried;
  counts.rejections.clear();
  Merge(counts, 0);
  for (SampleRejection& r : all) {
    if (rejections.size() >= kMaxReportedRejections) break;
    rejections.push_back(std::move(r));
  }
}

std::string_view JobNamespace(std::string_view job_id) {
  return job_id.substr(0, job_id.find('/'));
}

uint32_t TotalGpus(const CapacityReport& report) {
  if (report.gpu_types.empty()) return report.total_gpus;
  uint64_t sum = 0;
  for (const GpuType& type : report.gpu_types) sum += type.total_gpus;
  return static_cast<uint32_t>(std::min<uint64_t>(sum, UINT32_MAX));
}

}  // namespace rescale
