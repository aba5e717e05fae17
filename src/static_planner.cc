// StaticPlanner: the static-min and static-max baselines, and the gang
// admission they share (see rescale/planner.h).
#include <algorithm>
#include <cstdint>
#include <numeric>

#include "absl/strings/str_format.h"
#include "rescale/planner.h"

namespace rescale {

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

std::vector<PlanDecision> StaticPlanner::Plan(const PlanInput& input) const {
  const size_t n = input.jobs.size();
  std::vector<PlanDecision> out(n);
  for (size_t i = 0; i < n; ++i) out[i].job_id = input.jobs[i].spec.job_id;

  // Admission order: non-preemptible running jobs keep their GPUs first (they
  // stop only when capacity itself cannot hold them), then priority, then
  // running before waiting (equal priority never preempts), then age, id.
  auto running = [&](size_t i) {
    return input.jobs[i].status.current_replicas > 0 && !input.jobs[i].status.suspended;
  };
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const PlanJob& ja = input.jobs[a];
    const PlanJob& jb = input.jobs[b];
    bool pin_a = running(a) && !ja.spec.preemptible;
    bool pin_b = running(b) && !jb.spec.preemptible;
    if (pin_a != pin_b) return pin_a;
    if (ja.spec.priority != jb.spec.priority) return ja.spec.priority > jb.spec.priority;
    if (running(a) != running(b)) return running(a);
    if (ja.status.registered_at != jb.status.registered_at) {
      return ja.status.registered_at < jb.status.registered_at;
    }
    return ja.spec.job_id < jb.spec.job_id;
  });

  const bool bounded = input.capacity_gpus.has_value();
  const uint64_t capacity = bounded ? *input.capacity_gpus : 0;
  uint64_t allocated = 0;
  // GPUs kept by running non-preemptible jobs of lower priority than the job
  // being admitted: the reason must not blame higher-priority work for them.
  auto pinned_below = [&](int32_t priority) {
    uint64_t gpus = 0;
    for (size_t j = 0; j < n; ++j) {
      const JobSpec& other = input.jobs[j].spec;
      if (out[j].replicas > 0 && !other.preemptible && running(j) && other.priority < priority) {
        gpus += uint64_t{out[j].replicas} * other.gpus_per_replica;
      }
    }
    return gpus;
  };
  uint32_t queue = 0;
  auto desired_of = [&](size_t i) {
    const PlanJob& job = input.jobs[i];
    if (job.desired_replicas != 0) {
      return std::clamp(job.desired_replicas, job.spec.min_replicas, job.spec.max_replicas);
    }
    return job.spec.policy == kMaxPolicy ? job.spec.max_replicas : job.spec.min_replicas;
  };
  for (size_t i : order) {
    const JobSpec& spec = input.jobs[i].spec;
    PlanDecision& d = out[i];
    const uint64_t need = uint64_t{spec.min_replicas} * spec.gpus_per_replica;
    if (!bounded || allocated + need <= capacity) {
      allocated += need;
      d.replicas = spec.min_replicas;
      if (!input.jobs[i].desired_reason.empty()) {
        d.binding = input.jobs[i].desired_binding;
        d.reason = input.jobs[i].desired_reason;
      } else if (spec.policy == kMaxPolicy && spec.max_replicas == spec.min_replicas) {
        d.binding = BindingConstraint::kMaxReplicas;
        d.reason = absl::StrFormat("%s runs the job at max_replicas=%d", spec.policy, d.replicas);
      } else {
        d.binding = BindingConstraint::kMinReplicas;
        d.reason = absl::StrFormat("%s runs the job at min_replicas=%d (%d GPUs)", spec.policy,
                                   spec.min_replicas, need);
      }
      continue;
    }
    d.replicas = 0;
    d.queue_position = ++queue;
    const uint64_t free_gpus = capacity - allocated;
    if (need > capacity) {
      d.binding = BindingConstraint::kCapacity;
      d.reason = absl::StrFormat("needs %d GPUs for min_replicas=%d; the cluster has only %d",
                                 need, spec.min_replicas, capacity);
    } else {
      d.binding = running(i) ? BindingConstraint::kPreempted : BindingConstraint::kCapacity;
      const uint64_t pinned = pinned_below(spec.priority);
      if (pinned == 0) {
        d.reason = absl::StrFormat(
            "needs %d GPUs; %d free; %d held by jobs of higher or equal priority", need, free_gpus,
            allocated);
      } else {
        d.reason = absl::StrFormat(
            "needs %d GPUs; %d free; %d held by jobs of higher or equal priority and %d by "
            "non-preemptible jobs of lower priority",
            need, free_gpus, allocated - pinned, pinned);
      }
    }
  }

  // Admitted jobs grow toward what their policy wants, in the same order.
  for (size_t i : order) {
    const JobSpec& spec = input.jobs[i].spec;
    PlanDecision& d = out[i];
    const uint32_t desired = desired_of(i);
    if (d.replicas == 0 || desired <= d.replicas) continue;
    uint32_t extra = desired - d.replicas;
    if (bounded) {
      const uint64_t affordable = (capacity - allocated) / spec.gpus_per_replica;
      extra = static_cast<uint32_t>(std::min<uint64_t>(extra, affordable));
    }
    allocated += uint64_t{extra} * spec.gpus_per_replica;
    d.replicas += extra;
    if (d.replicas == desired) {
      if (!input.jobs[i].desired_reason.empty()) {
        d.binding = input.jobs[i].desired_binding;
        d.reason = input.jobs[i].desired_reason;
      } else {
        d.binding = BindingConstraint::kMaxReplicas;
        d.reason = absl::StrFormat("%s runs the job at max_replicas=%d", spec.policy, d.replicas);
      }
    } else {
      d.binding = BindingConstraint::kCapacity;
      d.reason = absl::StrFormat(
          "capacity limits the job to %d of the %d replicas its policy wants; %d GPUs free, %d "
          "per replica",
          d.replicas, desired, capacity - allocated, spec.gpus_per_replica);
    }
  }

  for (size_t i = 0; i < n; ++i) {
    out[i].predicted_samples_per_second = InterpolateThroughput(input.jobs[i].curve, out[i].replicas);
  }
  return out;
}

}  // namespace rescale
