// PlanPipeline (see plan_pipeline.h): a plan's computation. Each job's
// policy states what it wants, from a fit of its statistics kept while they
// and its spec stand; the cluster planner then fits every job into the GPUs
// at once. Runs on the plan's own copies of the jobs, under the plan gate
// only.
#include <algorithm>
#include <span>

#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "rescale/job_rules.h"
#include "rescale/queues.h"
#include "spdlog/spdlog.h"
#include "src/engine/plan_pipeline.h"

namespace rescale::engine {
namespace {

// What the cluster must do to go from `status` to `replicas`.
Action ActionFor(const JobStatus& status, uint32_t replicas) {
  const bool running = IsRunning(status);
  if (replicas == 0) return running ? Action::kSuspend : Action::kHold;
  if (!running) return status.suspended ? Action::kResume : Action::kScaleUp;
  if (replicas > status.current_replicas) return Action::kScaleUp;
  if (replicas < status.current_replicas) return Action::kScaleDown;
  return Action::kHold;
}

}  // namespace

void PlanPipeline::FitInto(PlanSlot& slot, absl::Time now, bool& refitted) const {
  // A new spec refits whatever the statistics say (a default revision).
  // So does a move to another GPU type (its curve is that type's fit).
  if (slot.fitted_spec_version != slot.entry.spec_version ||
      slot.fitted_type != slot.entry.status.gpu_type)
    slot.stats_revision = {};
  std::optional<std::vector<SizeStats>> stats =
      store_.StatsIfChanged(slot.entry.spec.job_id, now, slot.stats_revision);
  refitted = stats.has_value() || slot.fitted == nullptr;
  if (!refitted) return;
  if (!stats.has_value()) stats = store_.Stats(slot.entry.spec.job_id, now);
  slot.fitted = std::make_shared<const Fitted>(
      views_.Fit(slot.entry.spec, views_.WithRestored(*std::move(stats), slot.entry), now,
                 slot.entry.status.gpu_type));
  slot.fitted_spec_version = slot.entry.spec_version;
  slot.fitted_type = slot.entry.status.gpu_type;
  ++slot.fit_serial;
}

void PlanPipeline::TypedCurves(const JobSpec& spec, const JobStatus& status, const Fitted& fit,
                               const TypeContext& types, PlanInput& input) const {
  PlannerJob& job = input.job;
  const ModelOptions options = views_.ModelOptionsOf(spec);
  job.throughput_by_type.assign(types.types.size(), {});
  input.type_sources.assign(types.types.size(), TypeCurveSource::kUnknown);
  std::optional<uint32_t> first_allowed;
  for (size_t t = 0; t < types.types.size(); ++t) {
    const GpuType& type = types.types[t];
    if (!AllowedOn(spec, type.name)) continue;  // an empty curve: not allowed
    if (!first_allowed) first_allowed = static_cast<uint32_t>(t);
    std::vector<double>& curve = job.throughput_by_type[t];
    curve = job.throughput;
    // Only a planner job's curve is its throughput; the others' is a rising
    // ramp toward their wish, the same on every type. So is the curve of a
    // job measured on no type (no data, or samples that never said where).
    if (!input.planned_by_cluster || fit.by_type.empty()) continue;
    const TypeModel on_type = ModelOnType(fit, type, *types.speeds, options);
    input.type_sources[t] = on_type.source;
    if (on_type.model.empty()) continue;
    for (size_t i = 0; i < curve.size(); ++i) {
      const uint32_t n = job.min_replicas + static_cast<uint32_t>(i);
      const double here = on_type.model.SamplesPerSecond(n);
      if (!(here > 0)) continue;
      if (input.goodput.has_value()) {
        // Goodput: the job's own type's progress curve, scaled by how much
        // faster this type steps (the batch chosen stays the same).
        const double own = fit.SamplesPerSecond(n);
        if (own > 0) curve[i] *= here / own;
      } else {
        curve[i] = here;
      }
    }
  }
  // The type it runs on: as reported, else the one its curve is of, else
  // the first it may use (a job that does not run has none).
  job.current_type = first_allowed.value_or(0);
  for (const std::string_view name :
       {std::string_view(status.gpu_type), std::string_view(fit.gpu_type)}) {
    auto it = std::find_if(types.types.begin(), types.types.end(),
                           [&](const GpuType& type) { return type.name == name; });
    if (!name.empty() && it != types.types.end()) {
      job.current_type = static_cast<uint32_t>(it - types.types.begin());
      break;
    }
  }
}

std::shared_ptr<const PlanPipeline::PlanInput> PlanPipeline::PlanInputOf(
    PlanSlot& slot, bool refitted, bool capacity_known, const TypeContext& types, absl::Time now,
    PlannerJob& job_out, std::shared_ptr<const PlanInput>& source) const {
  JobEntry& entry = slot.entry;
  std::optional<GoodputPlan> goodput =
      GoodputPlan::Of(options_.plan_on_goodput, entry.spec, *slot.fitted,
                      RunningReplicas(entry.status), slot.batch);
  if (const std::shared_ptr<const PlanInput>& cached = slot.plan_input;
      cached != nullptr && cached->version == entry.version && cached->fitted == slot.fitted &&
      cached->capacity_known == capacity_known && cached->types_key == types.key &&
      cached->goodput.has_value() == goodput.has_value() &&
      (!goodput.has_value() || cached->goodput->running() == goodput->running())) {
    if (source != cached) {
      job_out = cached->job;
      source = cached;
    }
    return cached;
  }
  auto input = std::make_shared<PlanInput>();
  input->version = entry.version;
  input->fitted = slot.fitted;
  input->capacity_known = capacity_known;
  input->types_key = types.key;
  const JobSpec& spec = entry.spec;
  const Fitted& fit = *input->fitted;
  const Policy* policy =
      FindPolicy(spec.policy.empty() ? options_.default_policy : spec.policy);  // validated
  input->policy = policy->name();
  input->planned_by_cluster = input->policy == kPlannerPolicy;
  const PolicyOptions policy_options = ResolvePolicyOptions(options_.policy, spec.parameters);
  input->cooldown = policy_options.cooldown;
  PolicyInput policy_input;
  policy_input.spec = &spec;
  policy_input.status = &entry.status;
  policy_input.model = &fit.model;
  policy_input.observed = fit.observations;
  policy_input.memory = &entry.memory;
  policy_input.last_change_at = entry.last_change_at;
  policy_input.now = now;
  policy_input.options = policy_options;
  policy_input.capacity_known = capacity_known;
  input->wish = policy->Decide(policy_input);
  entry.memory = input->wish.memory;

  PlannerJob& job = input->job;
  job.job_id = spec.job_id;
  job.min_replicas = spec.min_replicas;
  job.max_replicas = std::clamp(input->wish.replicas, spec.min_replicas, spec.max_replicas);
  job.gpus_per_replica = spec.gpus_per_replica;
  job.priority = spec.priority;
  job.preemptible = spec.preemptible;
  const bool running = IsRunning(entry.status);
  job.current_replicas = RunningReplicas(entry.status);
  job.suspended = entry.status.suspended;
  job.restart_cost_seconds = spec.restart_cost_seconds;
  job.curve_is_shape = !input->planned_by_cluster;
  job.started_at = running ? entry.started_at : entry.status.registered_at;
  // What the jct objective ranks jobs by: remaining work when the job
  // declared its size, else the service it has had; both in samples, which
  // the planner turns into seconds with the fitted rate at min_replicas. A
  // job without a fitted curve has no rate to do that with: it counts as
  // having had no service (least attained service puts new jobs first).
  // A goodput-planned job counts in samples at M0 (its rate below is
  // goodput too).
  if (!fit.model.empty()) {
    const bool at_m0 =
        input->planned_by_cluster && goodput.has_value() && fit.progress_at_m0.has_value();
    const double processed =
        at_m0 ? *fit.progress_at_m0 : static_cast<double>(views_.SamplesProcessed(entry));
    job.samples_per_second_at_min = fit.SamplesPerSecond(job.min_replicas);
    job.attained_samples = processed;
    if (spec.total_samples.has_value()) {
      job.remaining_samples = std::max(0.0, static_cast<double>(*spec.total_samples) - processed);
    }
  }
  // A planner job with neither data nor prior: the default prior's curve
  // (relative; the objective uses only ratios T(n)/T(min)), so the planner
  // sizes its start by the median scaling of the measured models.
  std::optional<ThroughputModel> default_prior;
  if (input->planned_by_cluster && fit.model.empty()) {
    ModelOptions shape = options_.model;
    shape.gpus_per_replica = std::max<uint32_t>(spec.gpus_per_replica, 1);
    default_prior = ThroughputModel::FromShares(kDefaultPriorShares, shape);
  }
  job.throughput.reserve(job.max_replicas - job.min_replicas + 1);
  if (input->planned_by_cluster && goodput.has_value()) {
    // Goodput-planned: progress (samples at M0) per second at each size,
    // with the batch the job would run there; a size where no batch fits
    // the job's bounds gains nothing.
    input->choices.reserve(job.max_replicas - job.min_replicas + 1);
    for (uint32_t n = job.min_replicas; n <= job.max_replicas; ++n) {
      const std::optional<BatchChoice>& choice = input->choices.emplace_back(goodput->At(n));
      job.throughput.push_back(choice.has_value() ? choice->goodput : 0);
    }
    if (!job.throughput.empty() && job.throughput.front() > 0)
      job.samples_per_second_at_min = job.throughput.front();
    input->goodput = std::move(goodput);
  }
  for (uint32_t n = job.min_replicas + job.throughput.size(); n <= job.max_replicas; ++n) {
    // Planner jobs: predicted samples/s. Others: any rising curve, so the
    // planner grows them toward their wish when GPUs allow.
    double predicted = 0;
    if (input->planned_by_cluster) {
      predicted = default_prior ? default_prior->SamplesPerSecond(n) : fit.SamplesPerSecond(n);
    }
    job.throughput.push_back(predicted > 0 ? predicted : double(n));
  }
  if (!types.types.empty()) TypedCurves(spec, entry.status, fit, types, *input);
  if (!spec.admission.empty()) {
    // Kueue (or another admitter) owns admission and preemption: a job it
    // has not admitted cannot be started by any plan, and one it runs is
    // never suspended by one (cluster_planner.h, "External admission").
    job.preemptible = false;
    if (!running) {
      job.max_replicas = 0;  // < min: cannot run
      job.throughput.clear();
      for (std::vector<double>& curve : job.throughput_by_type) curve.clear();
    }
  }
  // Only a planner job's input outlives this plan: the other policies read
  // the clock (windows, cooldowns), so theirs is made afresh each time.
  if (input->planned_by_cluster && !refitted) {
    job_out = input->job;
    slot.plan_input = source = input;
  } else {
    job_out = std::move(input->job);
    slot.plan_input = source = nullptr;
  }
  return input;
}

PlanPipeline::PlanResult PlanPipeline::ComputeLocked(std::optional<uint32_t> capacity_gpus,
                                                     absl::Time now) {
  SlotMap& slots = slots_;
  PlanResult result;

  // Each job's policy states what it wants; the cluster planner then fits
  // every job into the GPUs at once. A `planner` job offers the planner its
  // whole explorable range with its predicted curve, so the planner chooses
  // its size; any other policy's wish is a ceiling the planner fills in
  // priority order (a rising curve up to the wish) and may only cut for
  // capacity.
  struct Prepared {
    const JobSpec* spec = nullptr;
    std::shared_ptr<const PlanInput> input;
  };
  std::vector<Prepared> prepared;
  std::optional<uint64_t> capacity;
  if (capacity_gpus) capacity = *capacity_gpus;
  // The defined queues and the default one; a job naming a queue that is
  // not defined gets an index past the end, and waits.
  result.queues = ResolveQueues(capacity_queues_, capacity);
  std::vector<PlannerJob>& planner_jobs = planner_jobs_;
  planner_jobs.resize(slots.size());
  planner_job_sources_.resize(slots.size());
  prepared.reserve(slots.size());
  // GPU types bind only with a known total, as slots do.
  TypeContext types;
  if (capacity && !capacity_gpu_types_.empty()) {
    types.types = capacity_gpu_types_;
    types.speeds = &type_speeds_;
    types.key = absl::HashOf(type_speeds_.Fingerprint(), capacity_gpu_types_.size());
    for (const GpuType& type : capacity_gpu_types_)
      types.key = absl::HashOf(types.key, type.name, type.gpus_per_node);
  }
  size_t index = 0;
  for (auto& [id, slot] : slots) {
    const JobEntry& entry = slot.entry;
    Prepared p;
    p.spec = &entry.spec;
    bool refitted = false;
    FitInto(slot, now, refitted);
    PlannerJob& job = planner_jobs[index];
    p.input = PlanInputOf(slot, refitted, capacity_gpus.has_value(), types, now, job,
                          planner_job_sources_[index]);
    job.queue = FindQueue(result.queues, entry.spec.queue)
                    .value_or(static_cast<uint32_t>(result.queues.size()));
    ++index;
    const PlanInput& input = *p.input;
    // What moves with time alone.
    const bool running = IsRunning(entry.status);
    absl::Duration cooldown = input.cooldown;
    if (input.planned_by_cluster) {
      // The per-job policies steady themselves (restart cost, HPA windows);
      // a planner job is steadied here: the more it changed lately, the
      // longer it stays put (BackedOffCooldown).
      int recent_changes = 0;
      for (const auto& event : entry.memory.scale_events)
        recent_changes += now - event.first < kCooldownMemory * cooldown;
      cooldown = BackedOffCooldown(cooldown, recent_changes);
    }
    job.in_cooldown = running && entry.last_change_at != absl::InfinitePast() &&
                      now - entry.last_change_at < cooldown;
    job.waiting_seconds = 0;
    if (!running) {
      const absl::Time waiting_since = std::max(entry.status.registered_at, entry.stopped_at);
      job.waiting_seconds = std::max(0.0, absl::ToDoubleSeconds(now - waiting_since));
    }
    prepared.push_back(std::move(p));
  }

  ClusterPlannerOptions planner_options = options_.planner;
  planner_options.horizon_seconds = absl::ToDoubleSeconds(options_.policy.horizon);
  // Slots bind only with a known total (SetCapacity sets both).
  const std::span<const ReplicaSlots> node_slots =
      capacity ? std::span<const ReplicaSlots>(capacity_slots_) : std::span<const ReplicaSlots>();
  ClusterPlan plan;
  if (!types.types.empty()) {
    // Type and size together; a queue's quotas count all its types' GPUs.
    std::vector<GpuTypeCapacity> capacities;
    for (const GpuType& type : capacity_gpu_types_)
      capacities.push_back({type.name, type.total_gpus, type.slots});
    plan = PlanClusterTypes(planner_jobs, capacities, planner_options, result.queues);
  } else {
    plan = PlanCluster(planner_jobs, capacity, planner_options, node_slots, result.queues);
  }
  result.queue_use = std::move(plan.queues);
  if (result.queue_use.empty()) {
    // One pool (no queue constrains anything): the default queue holds all.
    PlannedQueue all;
    all.in_use_gpus = plan.allocated_gpus;
    for (const PlannedJob& j : plan.jobs) ++(j.replicas > 0 ? all.running_jobs : all.waiting_jobs);
    // The only queue planned alone in all the capacity is the plan itself:
    // its guarantee D_q and its wish are what it was given.
    all.guaranteed_gpus = all.wanted_gpus = plan.allocated_gpus;
    result.queue_use.assign(result.queues.size(), PlannedQueue{});
    if (!result.queue_use.empty()) result.queue_use.back() = all;
  }
  result.utility = plan.utility;
  result.upper_bound = plan.upper_bound;
  result.gap = plan.gap;
  result.exact = plan.exact;
  // Every plan's gap is in the metrics (rescale_plan_optimality_gap) and
  // the cluster view; the log says when it grows past 1% and when it is
  // back, not on every plan: the typed planner's bound is loose, so its gap
  // stays above 1% on most plans (docs/policies.md), and a warning a plan
  // would bury the log.
  const bool wide = plan.gap > kGapWarnShare;
  if (wide && !gap_warned_) {
    spdlog::warn(
        "plan of {} jobs has an optimality gap of {:.2f}% (utility {:.4f}, bound {:.4f}); "
        "later plans log it at debug level until it is back under {:.0f}%",
        planner_jobs.size(), plan.gap * 100, plan.utility, plan.upper_bound, kGapWarnShare * 100);
  } else if (!wide && gap_warned_) {
    spdlog::info("plan of {} jobs: optimality gap back under {:.0f}% ({:.3f}%)",
                 planner_jobs.size(), kGapWarnShare * 100, plan.gap * 100);
  } else {
    spdlog::debug("planned {} jobs: {} GPUs allocated, utility {:.4f}, bound {:.4f}, gap {:.3f}%{}",
                  planner_jobs.size(), plan.allocated_gpus, plan.utility, plan.upper_bound,
                  plan.gap * 100, plan.exact ? " (exact)" : "");
  }
  gap_warned_ = wide;

  std::vector<Recommendation> recs;
  recs.reserve(prepared.size());
  result.registrations.reserve(prepared.size());
  size_t i = 0;
  for (auto& [id, slot] : slots) {
    const JobEntry& entry = slot.entry;
    const Prepared& p = prepared[i];
    PlannedJob& planned = plan.jobs[i];  // its reason is moved out
    ++i;
    Recommendation rec;
    rec.job_id = id;
    rec.replicas = planned.replicas;
    rec.suspend = planned.replicas == 0;
    rec.action = ActionFor(entry.status, planned.replicas);
    // The policy's own explanation stands when the planner gave it what it
    // asked for; otherwise the planner's (capacity, priority, cooldown...).
    const bool got_wish =
        planned.replicas != 0 && planned.replicas == planner_jobs[i - 1].max_replicas;
    const bool policy_explains =
        got_wish && (!p.input->planned_by_cluster ||
                     p.input->wish.binding == BindingConstraint::kInsufficientData ||
                     p.input->wish.binding == BindingConstraint::kMinReplicas);
    rec.reason = policy_explains ? p.input->wish.reason : std::move(planned.reason);
    // The planner sized a job without data or prior by the default prior's
    // curve; say so, since nothing of the job's own went into it.
    const Fitted& fitted = *p.input->fitted;
    if (!policy_explains && p.input->planned_by_cluster && fitted.model.empty() &&
        planned.replicas > 0) {
      rec.reason +=
          "; no measurements or prior yet: sized by the default prior (the median "
          "scaling of six measured models)";
    }
    rec.binding_constraint = policy_explains ? p.input->wish.binding : planned.binding;
    if (!p.spec->admission.empty() && !IsRunning(entry.status)) {
      const std::string admitter =
          p.spec->admission == kAdmissionKueue ? "Kueue" : p.spec->admission;
      rec.reason = absl::StrCat(
          "waits for ", admitter, " to admit it (queue ",
          p.spec->queue.empty() ? std::string(kDefaultQueueName) : p.spec->queue, "); ", admitter,
          " owns admission and preemption, so rescaled sizes the job once it runs");
      rec.binding_constraint = BindingConstraint::kQuota;
    }
    rec.current_samples_per_second = fitted.SamplesPerSecond(RunningReplicas(entry.status));
    rec.predicted_samples_per_second = fitted.SamplesPerSecond(planned.replicas);
    if (!types.types.empty() && planned.replicas > 0) {
      const PlannerJob& job = planner_jobs[i - 1];
      rec.gpu_type = capacity_gpu_types_[planned.gpu_type].name;
      // On the type planned (a planner job's curve; the others' is a ramp).
      const std::vector<double>& curve = job.throughput_by_type[planned.gpu_type];
      const size_t at = planned.replicas - std::min(planned.replicas, job.min_replicas);
      if (p.input->planned_by_cluster && !fitted.by_type.empty() &&
          planned.replicas >= job.min_replicas && at < curve.size() && !p.input->goodput) {
        rec.predicted_samples_per_second = curve[at];
      }
    }
    rec.queue_position = planned.queue_position;
    rec.decided_at = now;
    rec.policy = std::string(p.input->policy);
    rec.gpus = planned.replicas * p.spec->gpus_per_replica;
    // The batch the planner's curve had at the size planned (a size past
    // the curve's end, where a running job may stay, is asked afresh).
    const uint32_t min_replicas = planner_jobs[i - 1].min_replicas;
    if (p.input->planned_by_cluster && p.input->goodput.has_value() && planned.replicas > 0) {
      const std::vector<std::optional<BatchChoice>>& choices = p.input->choices;
      const size_t at = planned.replicas - std::min(planned.replicas, min_replicas);
      if (const std::optional<BatchChoice> choice =
              planned.replicas >= min_replicas && at < choices.size()
                  ? choices[at]
                  : p.input->goodput->At(planned.replicas);
          choice.has_value()) {
        rec.local_batch_size = choice->local_batch;
        rec.accumulation_steps = choice->accumulation_steps;
        rec.predicted_goodput = choice->goodput;
        rec.statistical_efficiency = choice->efficiency;
        slot.batch =
            RecommendedBatch{{choice->local_batch, choice->accumulation_steps}, planned.replicas};
      }
    }
    if (p.input->planned_by_cluster && planned.replicas > 0) {
      if (planned.replicas < planner_jobs[i - 1].max_replicas)
        rec.value_one_more = planned.value_one_more;
      if (planned.replicas > p.spec->min_replicas) rec.value_one_fewer = planned.value_one_fewer;
    }
    recs.push_back(std::move(rec));
    result.registrations.push_back(entry.registration);
  }
  result.recs = std::move(recs);
  if (!types.types.empty()) {
    // What the next plan predicts unmeasured types with.
    std::vector<const Fitted*> fits;
    fits.reserve(slots.size());
    for (const auto& [id, slot] : slots) fits.push_back(slot.fitted.get());
    type_speeds_ = TypeSpeeds::Learn(fits, types.types);
  }
  return result;
}

}  // namespace rescale::engine
