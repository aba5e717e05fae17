// The per-job policies (planner, static-min, static-max, kubedl, hpa,
// efficiency), the guards kubedl, hpa and efficiency share, and policy
// parameters (see rescale/policy.h). What "running", observed throughput,
// exploration and a paying restart mean comes from rescale/job_rules.h, so
// the policies, the planner and the engine cannot disagree on them.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "rescale/job_rules.h"
#include "rescale/policy.h"

namespace rescale {
namespace {

// ---- parameters -----------------------------------------------------------------

constexpr std::string_view kCooldown = "cooldown_seconds";
constexpr std::string_view kHorizon = "horizon_seconds";
constexpr std::string_view kEfficiencyThreshold = "efficiency_threshold";
constexpr std::string_view kTargetEfficiency = "target_efficiency";
constexpr std::string_view kTolerance = "tolerance";
constexpr std::string_view kUpWindow = "scale_up_stabilization_seconds";
constexpr std::string_view kDownWindow = "scale_down_stabilization_seconds";
constexpr std::string_view kUpPods = "scale_up_pods";
constexpr std::string_view kUpPercent = "scale_up_percent";
constexpr std::string_view kDownPercent = "scale_down_percent";
constexpr std::string_view kPeriod = "period_seconds";
constexpr std::string_view kSelectPolicy = "select_policy";

double ParamOr(const std::map<std::string, std::string>& params, std::string_view key,
               double fallback) {
  auto it = params.find(std::string(key));
  double value = 0;
  if (it == params.end() || !absl::SimpleAtod(it->second, &value)) return fallback;
  return value;
}

std::string ParamOr(const std::map<std::string, std::string>& params, std::string_view key,
                    std::string fallback) {
  auto it = params.find(std::string(key));
  return it == params.end() ? fallback : it->second;
}

// ---- shared helpers ------------------------------------------------------------------

uint32_t Clamp(const JobSpec& spec, int64_t replicas) {
  return static_cast<uint32_t>(std::clamp<int64_t>(replicas, spec.min_replicas, spec.max_replicas));
}

const Observation* ObservedAt(const PolicyInput& in, uint32_t replicas) {
  for (const Observation& o : in.observed) {
    if (o.replicas == replicas) return &o;
  }
  return nullptr;
}

// Measured whole-job samples/s at a size (averaged over its samples).
double ObservedRate(const Observation& o) {
  return ObservedSamplesPerSecond(o.replicas, o.mean_batch, o.step_seconds);
}

// The largest size measured with enough samples, counting those that aged
// out of the window: a size measured once is known (a bound on the curve),
// so exploration never treats it as unexplored again.
uint32_t LargestTrusted(const PolicyInput& in) {
  uint32_t largest = 0;
  for (const Observation& o : in.observed) {
    if (std::max(o.sample_count, o.lifetime_count) >= in.options.min_samples)
      largest = std::max(largest, o.replicas);
  }
  return largest;
}

// Why the exploration cap is where it is, for reasons people read: the
// measured size (2x it) or the prior (its largest point), whichever reaches
// further.
std::string Reach(const JobSpec& spec, uint32_t largest_trusted) {
  const uint32_t prior = LargestPriorSize(spec);
  if (prior > 0 && prior >= 2 * uint64_t{largest_trusted}) {
    return largest_trusted == 0
               ? absl::StrFormat("its prior covers up to %d", prior)
               : absl::StrFormat("its prior covers up to %d; the largest measured size is %d",
                                 prior, largest_trusted);
  }
  return absl::StrFormat("2x the largest measured size (%d)", largest_trusted);
}

PolicyDecision Hold(const PolicyInput& in, uint32_t replicas, BindingConstraint binding,
                    std::string reason) {
  return {replicas, binding, std::move(reason), *in.memory};
}

// Preconditions shared by the adaptive policies. Returns a decision when the
// policy must not run yet (not running, or not enough samples at the
// current size); nullopt when it may decide.
std::optional<PolicyDecision> NeedsData(const PolicyInput& in) {
  const JobSpec& spec = *in.spec;
  if (!IsRunning(*in.status)) {
    return Hold(in, spec.min_replicas, BindingConstraint::kMinReplicas,
                absl::StrFormat("not running: starts at min_replicas=%d", spec.min_replicas));
  }
  const uint32_t current = Clamp(spec, in.status->current_replicas);
  const Observation* here = ObservedAt(in, in.status->current_replicas);
  const uint64_t have = here == nullptr ? 0 : here->sample_count;
  if (have < in.options.min_samples) {
    return Hold(in, current, BindingConstraint::kInsufficientData,
                absl::StrFormat("waiting for samples at %d replicas: %d of the %d needed",
                                in.status->current_replicas, have, in.options.min_samples));
  }
  return std::nullopt;
}

// Exploration, cooldown and restart cost on top of a policy's wish; used by
// kubedl, hpa and efficiency. The planner policy does not call it: it only
// states the range (ExplorationCap), and the cluster planner weighs cooldown
// and restart cost in its objective.
PolicyDecision Guard(const PolicyInput& in, PolicyDecision wish) {
  const JobSpec& spec = *in.spec;
  wish.replicas = Clamp(spec, wish.replicas);
  if (!IsRunning(*in.status)) return wish;
  const uint32_t current = Clamp(spec, in.status->current_replicas);

  const uint32_t largest = LargestTrusted(in);
  const uint32_t explore_limit = ExplorationCap(spec, largest, RunningReplicas(*in.status));
  if (wish.replicas > explore_limit) {
    wish.replicas = explore_limit;
    wish.binding = BindingConstraint::kInsufficientData;
    wish.reason = absl::StrFormat("explores gradually: at most %d replicas in one step, %s; %s",
                                  explore_limit, Reach(spec, largest), wish.reason);
  }
  if (wish.replicas == current) return wish;

  if (in.last_change_at != absl::InfinitePast() &&
      in.now - in.last_change_at < in.options.cooldown) {
    const absl::Duration left = in.options.cooldown - (in.now - in.last_change_at);
    return {current, BindingConstraint::kCooldown,
            absl::StrFormat("in cooldown for %s more after the last change (would go to %d: %s)",
                            absl::FormatDuration(absl::Trunc(left, absl::Seconds(1))),
                            wish.replicas, wish.reason),
            std::move(wish.memory)};
  }

  // Only growths are tested: a per-job policy shrinks to free GPUs, whose
  // value to other jobs it cannot see, so its own throughput cannot judge a
  // shrink. The cluster planner sees all jobs and counts the restart on any
  // resize through its utility (RestartFactor).
  if (wish.replicas > current && !in.model->empty()) {
    const double now_rate = in.model->SamplesPerSecond(current);
    const double new_rate = in.model->SamplesPerSecond(wish.replicas);
    const double horizon = absl::ToDoubleSeconds(in.options.horizon);
    const double restart = spec.restart_cost_seconds;
    if (!RestartPaysOff(now_rate, new_rate, restart, horizon)) {
      return {current, BindingConstraint::kRestartCost,
              absl::StrFormat("going to %d replicas (%.1f -> %.1f samples/s) would not repay a "
                              "%.0f s restart within the %.0f s horizon",
                              wish.replicas, now_rate, new_rate, restart, horizon),
              std::move(wish.memory)};
    }
  }
  return wish;
}

// ---- policies --------------------------------------------------------------------------

class StaticPolicy final : public Policy {
 public:
  StaticPolicy(std::string_view name, bool max) : name_(name), max_(max) {}
  std::string_view name() const override { return name_; }
  PolicyDecision Decide(const PolicyInput& in) const override {
    const JobSpec& spec = *in.spec;
    if (max_) {
      return {spec.max_replicas, BindingConstraint::kMaxReplicas,
              absl::StrFormat("%s runs the job at max_replicas=%d", name_, spec.max_replicas),
              *in.memory};
    }
    return {spec.min_replicas, BindingConstraint::kMinReplicas,
            absl::StrFormat("%s runs the job at min_replicas=%d", name_, spec.min_replicas),
            *in.memory};
  }

 private:
  std::string_view name_;
  bool max_;
};

// KubeDL's torch-elastic controller ("KubeDL torch-elastic controller" in
// ../shared/reference/algorithms.md): double while
// aggregate throughput improves, roll back once it does not, then stop.
// Fixed defects: doubling is clamped to max_replicas, and the comparison uses
// the average of all samples at a size, not the 5th sample alone.
class KubeDlPolicy final : public Policy {
 public:
  std::string_view name() const override { return "kubedl"; }
  PolicyDecision Decide(const PolicyInput& in) const override {
    if (auto wait = NeedsData(in)) return *wait;
    const JobSpec& spec = *in.spec;
    const uint32_t current = in.status->current_replicas;
    PolicyDecision d{current, BindingConstraint::kNone, "", *in.memory};
    if (in.memory->exploration_stopped) {
      d.binding = current >= spec.max_replicas ? BindingConstraint::kMaxReplicas
                                               : BindingConstraint::kEfficiency;
      d.reason = absl::StrFormat("kubedl finished exploring; stays at %d replicas", current);
      return Guard(in, std::move(d));
    }
    const double here = ObservedRate(*ObservedAt(in, current));
    const uint32_t previous = in.memory->previous_replicas;
    const Observation* before = previous == 0 ? nullptr : ObservedAt(in, previous);
    if (current <= spec.min_replicas || before == nullptr || previous > current) {
      // At min (or nothing to compare with): double.
      if (current >= spec.max_replicas) {
        d.memory.exploration_stopped = true;
        d.binding = BindingConstraint::kMaxReplicas;
        d.reason = absl::StrFormat("kubedl reached max_replicas=%d", spec.max_replicas);
        return Guard(in, std::move(d));
      }
      d.replicas = std::min(2 * current, spec.max_replicas);
      d.reason = absl::StrFormat("kubedl doubles from %d to %d replicas (%.1f samples/s now)",
                                 current, d.replicas, here);
      return Guard(in, std::move(d));
    }
    const double then = ObservedRate(*before);
    if (here > then) {
      if (current >= spec.max_replicas) {
        d.memory.exploration_stopped = true;
        d.binding = BindingConstraint::kMaxReplicas;
        d.reason = absl::StrFormat(
            "kubedl reached max_replicas=%d with throughput still rising (%.1f > %.1f samples/s)",
            spec.max_replicas, here, then);
        return Guard(in, std::move(d));
      }
      d.replicas = std::min(2 * current, spec.max_replicas);
      d.reason = absl::StrFormat(
          "kubedl doubles from %d to %d: throughput rose from %.1f to %.1f samples/s", current,
          d.replicas, then, here);
      return Guard(in, std::move(d));
    }
    d.memory.exploration_stopped = true;
    d.replicas = previous;
    d.binding = BindingConstraint::kEfficiency;
    d.reason = absl::StrFormat(
        "kubedl rolls back to %d replicas and stops: %d gave %.1f samples/s, no better than %.1f",
        previous, current, here, then);
    // A rollback is how KubeDL undoes a bad step: no cost test stops it.
    PolicyInput unguarded = in;
    unguarded.last_change_at = absl::InfinitePast();
    return Guard(unguarded, std::move(d));
  }
};

// Kubernetes HPA semantics on scaling efficiency ("Kubernetes HPA
// conventions" in ../shared/reference/algorithms.md): desired =
// ceil(current x efficiency / target) outside a tolerance, then
// stabilisation windows and rate policies with Kubernetes' defaults.
class HpaPolicy final : public Policy {
 public:
  std::string_view name() const override { return "hpa"; }
  std::vector<std::string_view> parameters() const override {
    return {kTargetEfficiency, kTolerance,   kUpWindow, kDownWindow,  kUpPods,
            kUpPercent,        kDownPercent, kPeriod,   kSelectPolicy};
  }
  PolicyDecision Decide(const PolicyInput& in) const override {
    if (auto wait = NeedsData(in)) return *wait;
    const JobSpec& spec = *in.spec;
    const auto& p = spec.parameters;
    const double target = ParamOr(p, kTargetEfficiency, in.options.hpa_target_efficiency);
    const double tolerance = ParamOr(p, kTolerance, 0.1);
    const absl::Duration up_window = absl::Seconds(ParamOr(p, kUpWindow, 0.0));
    const absl::Duration down_window = absl::Seconds(ParamOr(p, kDownWindow, 300.0));
    const double up_pods = ParamOr(p, kUpPods, 4.0);
    const double up_percent = ParamOr(p, kUpPercent, 100.0);
    const double down_percent = ParamOr(p, kDownPercent, 100.0);
    const absl::Duration period = absl::Seconds(ParamOr(p, kPeriod, 15.0));
    const std::string select = ParamOr(p, kSelectPolicy, std::string("Max"));

    const uint32_t current = in.status->current_replicas;
    const double metric = in.model->Efficiency(current);
    const double ratio = metric / target;
    uint32_t raw = current;
    if (std::abs(ratio - 1) > tolerance)
      raw = Clamp(spec, static_cast<int64_t>(std::ceil(current * ratio)));

    PolicyDecision d{current, BindingConstraint::kEfficiency, "", *in.memory};
    auto& recs = d.memory.recommendations;
    recs.emplace_back(in.now, raw);
    const absl::Duration keep = std::max(up_window, down_window);
    const auto first_kept = std::find_if(recs.begin(), recs.end(), [&](const auto& r) {
      return in.now - r.first <= keep;
    });
    recs.erase(recs.begin(), first_kept);
    // Stabilisation: scale up to the lowest wish of the up window, down to
    // the highest wish of the down window.
    uint32_t up_floor = std::numeric_limits<uint32_t>::max();
    uint32_t down_ceiling = 0;
    for (const auto& [at, wish] : recs) {
      if (in.now - at <= up_window) up_floor = std::min(up_floor, wish);
      if (in.now - at <= down_window) down_ceiling = std::max(down_ceiling, wish);
    }
    uint32_t desired = current;
    if (desired < up_floor) desired = up_floor;
    if (desired > down_ceiling) desired = down_ceiling;

    // Rate policies, from the replicas at the start of the period: current
    // minus every change inside it, additions and removals alike. This is
    // what Kubernetes does since kubernetes/kubernetes#109058 (period start =
    // current - added + deleted); counting only one direction (its earlier
    // behaviour, reported as a bug in #108354) let an up-and-down within a
    // period block the next scale-up although the count had returned.
    int32_t changed_in_period = 0;
    for (const auto& [at, delta] : in.memory->scale_events) {
      if (in.now - at <= period) changed_in_period += delta;
    }
    const double start = std::max<int64_t>(1, int64_t{current} - changed_in_period);
    if (desired > current && select != "Disabled") {
      const double by_pods = start + up_pods;
      const double by_percent = std::ceil(start * (1 + up_percent / 100));
      const double limit =
          select == "Min" ? std::min(by_pods, by_percent) : std::max(by_pods, by_percent);
      desired = static_cast<uint32_t>(std::min<double>(desired, limit));
    } else if (desired < current && select != "Disabled") {
      const double limit = std::floor(start * (1 - down_percent / 100));
      desired = static_cast<uint32_t>(std::max<double>(desired, limit));
    } else if (select == "Disabled") {
      desired = current;
    }
    d.replicas = Clamp(spec, desired);
    if (d.replicas == spec.max_replicas && raw >= spec.max_replicas && d.replicas != current) {
      d.binding = BindingConstraint::kMaxReplicas;
    } else if (d.replicas == spec.min_replicas && raw <= spec.min_replicas) {
      d.binding = BindingConstraint::kMinReplicas;
    }
    if (raw == current) {
      d.reason =
          absl::StrFormat("hpa: efficiency %.2f at %d replicas is within %.0f%% of the target %.2f",
                          metric, current, tolerance * 100, target);
    } else if (d.replicas == current) {
      d.reason = absl::StrFormat(
          "hpa: efficiency %.2f vs target %.2f asks for %d replicas; stabilisation keeps %d",
          metric, target, raw, current);
    } else {
      d.reason = absl::StrFormat("hpa: efficiency %.2f at %d replicas vs target %.2f: %d replicas",
                                 metric, current, target, d.replicas);
    }
    return Guard(in, std::move(d));
  }
};

// The largest n whose marginal efficiency — extra samples/s of the n-th
// worker relative to one worker's samples/s — stays at or above a threshold.
class EfficiencyPolicy final : public Policy {
 public:
  std::string_view name() const override { return "efficiency"; }
  std::vector<std::string_view> parameters() const override { return {kEfficiencyThreshold}; }
  PolicyDecision Decide(const PolicyInput& in) const override {
    if (auto wait = NeedsData(in)) return *wait;
    const JobSpec& spec = *in.spec;
    const double threshold =
        ParamOr(spec.parameters, kEfficiencyThreshold, in.options.efficiency_threshold);
    const ThroughputModel& model = *in.model;
    const double one = model.SamplesPerSecond(1);
    PolicyDecision d{spec.min_replicas, BindingConstraint::kMaxReplicas, "", *in.memory};
    uint32_t best = spec.min_replicas;
    double stop_marginal = 0;
    for (uint32_t n = spec.min_replicas + 1; n <= spec.max_replicas; ++n) {
      const double marginal = (model.SamplesPerSecond(n) - model.SamplesPerSecond(n - 1)) / one;
      if (marginal < threshold) {
        stop_marginal = marginal;
        d.binding = BindingConstraint::kEfficiency;
        break;
      }
      best = n;
    }
    d.replicas = best;
    if (d.binding == BindingConstraint::kEfficiency) {
      d.reason = absl::StrFormat(
          "efficiency: worker %d would add %.2f of one worker's throughput (< %.2f); %d is the "
          "largest size worth its GPUs (%.1f samples/s)",
          best + 1, stop_marginal, threshold, best, model.SamplesPerSecond(best));
    } else {
      d.reason = absl::StrFormat(
          "efficiency: every worker up to max_replicas=%d adds at least %.2f of one worker's "
          "throughput (%.1f samples/s at %d)",
          spec.max_replicas, threshold, model.SamplesPerSecond(best), best);
    }
    return Guard(in, std::move(d));
  }
};

// Rescale's default: the cluster planner (cluster_planner.h) decides every
// planner job's size jointly, anywhere from min_replicas to max_replicas, by
// expected value. The engine shows the planner each size's predicted
// throughput: the fitted curve (measured sizes and prior points,
// extrapolated beyond them), or for a job with neither the default prior's
// shape (kDefaultPriorShares, the median scaling of the six Pollux models).
// The planner's objective weighs that gain against the restart it costs
// (none for a first start), so a job with no data starts where the default
// prior says it pays, and a step beyond the measured sizes is taken when its
// predicted gain repays the restart. A wrong prediction costs that one
// restart: the new size is measured, the fit follows the measurement, and
// the next plan moves the job if it should. No fixed exploration rule (2x
// per step) stands in the way: in the simulator, a short job that doubled
// its way up (1, 2, 4, 8, 16) paid four restarts and finished far later
// than one started at the size its curve predicts (bench/sim/README.md).
//
// Unless the capacity is unknown: then no GPU is known to be free, the
// planner cannot weigh jobs against each other, and a size the curve
// predicts well may not exist; so the job starts at min_replicas and grows
// only as far as its evidence reaches (ExplorationCap: 2x the largest
// measured size, or its prior's range), as the per-job policies do.
//
// Either way the policy holds a running job at its current size until that
// size has enough samples (NeedsData). Guard is not applied: cooldown and
// restart cost are levels 3 and 4 of the planner's objective.
class PlannerPolicy final : public Policy {
 public:
  std::string_view name() const override { return "planner"; }
  PolicyDecision Decide(const PolicyInput& in) const override {
    const JobSpec& spec = *in.spec;
    const bool running = IsRunning(*in.status);
    if (running) {
      if (auto wait = NeedsData(in)) return *wait;
    }
    const uint32_t largest = LargestTrusted(in);
    const bool evidence = largest > 0 || LargestPriorSize(spec) > 0;
    if (!in.capacity_known && !running && !evidence) {
      return Hold(in, spec.min_replicas, BindingConstraint::kMinReplicas,
                  absl::StrFormat("no measurements yet and the cluster's capacity is unknown: "
                                  "starts at min_replicas=%d and explores from there",
                                  spec.min_replicas));
    }
    const uint32_t cap = in.capacity_known
                             ? spec.max_replicas
                             : ExplorationCap(spec, largest, RunningReplicas(*in.status));
    if (cap < spec.max_replicas) {
      return Hold(in, cap, BindingConstraint::kInsufficientData,
                  absl::StrFormat("the cluster's capacity is unknown: explores gradually, at most "
                                  "%d replicas, %s",
                                  cap, Reach(spec, largest)));
    }
    return Hold(in, cap, BindingConstraint::kMaxReplicas,
                absl::StrFormat("the planner may use up to max_replicas=%d", cap));
  }
};

const StaticPolicy kStaticMin("static-min", false);
const StaticPolicy kStaticMax("static-max", true);
const KubeDlPolicy kKubeDl;
const HpaPolicy kHpa;
const EfficiencyPolicy kEfficiency;
const PlannerPolicy kPlanner;
const Policy* const kPolicies[] = {&kPlanner, &kStaticMin, &kStaticMax,
                                   &kKubeDl,  &kHpa,       &kEfficiency};

}  // namespace

const Policy* FindPolicy(std::string_view name) {
  for (const Policy* policy : kPolicies) {
    if (policy->name() == name) return policy;
  }
  return nullptr;
}

std::vector<std::string> PolicyNames() {
  std::vector<std::string> names;
  for (const Policy* policy : kPolicies) names.emplace_back(policy->name());
  return names;
}

absl::Status ValidatePolicyParameters(std::string_view policy_name,
                                      const std::map<std::string, std::string>& parameters) {
  const Policy* policy = FindPolicy(policy_name);
  if (policy == nullptr) return absl::OkStatus();  // the policy name is checked elsewhere
  std::vector<std::string_view> known = policy->parameters();
  const bool adaptive = policy != &kStaticMin && policy != &kStaticMax;
  if (adaptive) {
    known.push_back(kCooldown);
    known.push_back(kHorizon);
  }
  for (const auto& [key, value] : parameters) {
    if (std::find(known.begin(), known.end(), key) == known.end()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "spec.parameters[\"%s\"] is not a parameter of policy %s; it takes: %s", key, policy_name,
          known.empty()
              ? "none"
              : absl::StrJoin(std::vector<std::string>(known.begin(), known.end()), ", ")));
    }
    if (key == kSelectPolicy) {
      if (value != "Max" && value != "Min" && value != "Disabled") {
        return absl::InvalidArgumentError(absl::StrFormat(
            "spec.parameters[\"%s\"] must be Max, Min or Disabled, got \"%s\"", key, value));
      }
      continue;
    }
    double number = 0;
    if (!absl::SimpleAtod(value, &number) || !std::isfinite(number) || number < 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "spec.parameters[\"%s\"] must be a non-negative number, got \"%s\"", key, value));
    }
    if ((key == kTargetEfficiency || key == kEfficiencyThreshold) && (number <= 0 || number > 1)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("spec.parameters[\"%s\"] must be in (0, 1], got %s", key, value));
    }
    if (key == kPeriod && number <= 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("spec.parameters[\"%s\"] must be positive, got %s", key, value));
    }
  }
  return absl::OkStatus();
}

PolicyOptions ResolvePolicyOptions(const PolicyOptions& defaults,
                                   const std::map<std::string, std::string>& parameters) {
  PolicyOptions options = defaults;
  options.cooldown =
      absl::Seconds(ParamOr(parameters, kCooldown, absl::ToDoubleSeconds(defaults.cooldown)));
  options.horizon =
      absl::Seconds(ParamOr(parameters, kHorizon, absl::ToDoubleSeconds(defaults.horizon)));
  options.efficiency_threshold =
      ParamOr(parameters, kEfficiencyThreshold, defaults.efficiency_threshold);
  options.hpa_target_efficiency =
      ParamOr(parameters, kTargetEfficiency, defaults.hpa_target_efficiency);
  return options;
}

}  // namespace rescale
