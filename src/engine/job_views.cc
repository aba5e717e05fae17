// JobViews (see job_views.h).
#include "src/engine/job_views.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <tuple>

#include "rescale/goodput.h"
#include "rescale/job_rules.h"

namespace rescale::engine {

StoredJob StoredJobOf(const JobEntry& entry) {
  StoredJob kept;
  kept.spec = entry.spec;
  kept.current_replicas = entry.status.current_replicas;
  kept.suspended = entry.status.suspended;
  kept.gpu_type = entry.status.gpu_type;
  kept.last_applied_generation = entry.status.last_applied_generation;
  kept.last_applied_at = entry.status.last_applied_at;
  kept.has_applied = entry.has_applied;
  kept.registered_at = entry.status.registered_at;
  kept.last_change_at = entry.last_change_at;
  kept.started_at = entry.started_at;
  kept.stopped_at = entry.stopped_at;
  kept.previous_replicas = entry.memory.previous_replicas;
  kept.scale_events = entry.memory.scale_events;
  return kept;
}

void FillFromStored(JobEntry& entry, JobSpec spec, StoredJob& kept) {
  entry.spec = std::move(spec);
  entry.status.current_replicas = kept.current_replicas;
  entry.status.suspended = kept.suspended;
  entry.status.gpu_type = kept.gpu_type;
  entry.status.last_applied_generation = kept.last_applied_generation;
  entry.status.last_applied_at = kept.last_applied_at;
  entry.status.registered_at = kept.registered_at;
  entry.has_applied = kept.has_applied;
  entry.last_change_at = kept.last_change_at;
  entry.started_at = kept.started_at;
  entry.stopped_at = kept.stopped_at;
  entry.memory.previous_replicas = kept.previous_replicas;
  entry.memory.scale_events = std::move(kept.scale_events);
}

std::optional<double> NoiseScaleOf(std::span<const SizeStats> sizes) {
  // Each size's statistics are means over its gradient_count samples; the
  // store's scale is the ratio of the sums.
  double sqr = 0, noise = 0;
  for (const SizeStats& s : sizes) {
    if (s.gradient_count == 0) continue;
    sqr += static_cast<double>(s.gradient_count) * s.gradient_sqr;
    noise += static_cast<double>(s.gradient_count) * s.gradient_noise;
  }
  if (!(sqr > 0) || !std::isfinite(noise)) return std::nullopt;
  return std::max(0.0, noise) / sqr;
}

std::optional<double> ProgressAtInitialBatch(const JobSpec& spec, std::span<const SizeStats> stats,
                                             std::optional<double> noise_scale) {
  if (!spec.batch_scaling.has_value() || spec.batch_scaling->initial_batch == 0 ||
      !noise_scale.has_value() || !std::isfinite(*noise_scale) || *noise_scale < 0)
    return std::nullopt;
  // {1, phi / M0}: statistics with the measured noise scale (EFF depends
  // on phi and M0 only).
  const double m0 = spec.batch_scaling->initial_batch;
  const GradientStats at_phi{.sqr = 1, .var = *noise_scale / m0};
  double progress = 0;
  for (const SizeStats& s : stats) {
    const double per_worker = s.mean_batch > 0 ? s.mean_batch : spec.local_batch_size;
    const double batch = s.world_size * per_worker;
    progress += static_cast<double>(s.samples_processed) *
                (batch > 0 ? StatisticalEfficiency(at_phi, m0, batch) : 1.0);
  }
  return progress;
}

namespace {

std::vector<Observation> ObservationsOf(std::span<const SizeStats> stats, absl::Time now) {
  std::vector<Observation> observations;
  observations.reserve(stats.size());
  for (const SizeStats& s : stats) {
    Observation o;
    o.replicas = s.world_size;
    o.step_seconds = s.step_seconds;
    o.spread_seconds = s.spread_seconds;
    o.sample_count = s.from_window ? s.sample_count : s.lifetime_count;
    o.lifetime_count = s.lifetime_count;
    o.mean_batch = s.mean_batch;
    o.age_seconds = std::max(0.0, absl::ToDoubleSeconds(now - s.last_sample_at));
    observations.push_back(o);
  }
  return observations;
}

// A model's curve for n in [1, min(max_replicas, 256)], observed sizes marked.
std::vector<CurvePoint> ModelCurve(const JobSpec& spec, const ThroughputModel& model,
                                   std::span<const Observation> observations) {
  std::vector<CurvePoint> curve;
  if (model.empty()) return curve;
  const uint32_t last = std::min(spec.max_replicas, Fitted::kCachedSizes);
  for (uint32_t n = 1; n <= last; ++n) {
    CurvePoint p;
    p.replicas = n;
    p.samples_per_second = model.SamplesPerSecond(n);
    p.uncertainty = model.Uncertainty(n);
    p.efficiency = model.Efficiency(n);
    for (const Observation& o : observations) {
      if (o.replicas != n || o.step_seconds <= 0) continue;
      p.observed = true;
      p.sample_count = o.sample_count;
      p.observed_samples_per_second = ObservedSamplesPerSecond(n, o.mean_batch, o.step_seconds);
    }
    curve.push_back(p);
  }
  return curve;
}

}  // namespace

ModelOptions JobViews::ModelOptionsOf(const JobSpec& spec) const {
  ModelOptions model_options = options_.model;
  model_options.min_samples = options_.min_samples;
  model_options.gpus_per_replica = std::max<uint32_t>(spec.gpus_per_replica, 1);
  if (spec.local_batch_size > 0) model_options.default_local_batch = spec.local_batch_size;
  return model_options;
}

Fitted JobViews::Fit(const JobSpec& spec, std::span<const SizeStats> stats, absl::Time now,
                     std::string_view current_type) const {
  Fitted fitted;
  const ModelOptions model_options = ModelOptionsOf(spec);
  // Typed when a sample said where it ran, or the cluster where the job runs.
  const bool typed = (!current_type.empty() && !stats.empty()) ||
                     std::any_of(stats.begin(), stats.end(),
                                 [](const SizeStats& s) { return !s.gpu_type.empty(); });
  if (!typed) {
    fitted.observations = ObservationsOf(stats, now);
    fitted.model = ThroughputModel::Fit(fitted.observations, spec.prior, model_options);
  } else {
    // One fit per type; untyped samples count as the running type's when
    // it has none of its own (a reporter that does not say where it runs).
    std::map<std::string, std::vector<SizeStats>> by_type;
    for (const SizeStats& s : stats) by_type[s.gpu_type].push_back(s);
    if (auto untyped = by_type.find(""); untyped != by_type.end()) {
      if (!current_type.empty() && !by_type.contains(std::string(current_type))) {
        for (SizeStats& s : untyped->second) s.gpu_type = std::string(current_type);
        by_type[std::string(current_type)] = std::move(untyped->second);
      }
      by_type.erase("");
    }
    // The job's own curve is of the type it runs on, else of the type with
    // the most samples (ties: the first by name).
    uint64_t most = 0;
    bool on_current = false;
    for (auto& [type, sizes] : by_type) {
      Fitted::TypeFit& fit = fitted.by_type.emplace_back();
      fit.gpu_type = type;
      fit.observations = ObservationsOf(sizes, now);
      // The prior is the job's, on no type in particular: it informs every
      // type's fit until that type's own measurements take over.
      fit.model = ThroughputModel::Fit(fit.observations, spec.prior, model_options);
      uint64_t samples = 0;
      for (const SizeStats& s : sizes) samples += s.lifetime_count;
      const bool is_current = type == current_type;  // never empty: "" was merged
      if (is_current || (!on_current && (fitted.gpu_type.empty() || samples > most))) {
        fitted.gpu_type = type;
        most = samples;
        on_current = is_current;
      }
    }
    const Fitted::TypeFit& own = *fitted.OnType(fitted.gpu_type);
    fitted.observations = own.observations;
    fitted.model = own.model;  // the same fit: no second one
  }
  if (options_.keep_stats) fitted.stats.assign(stats.begin(), stats.end());
  fitted.noise_scale = store_.GradientNoiseScale(spec.job_id, now);
  // After a restart, until the job reports again: the checkpointed sizes'.
  if (!fitted.noise_scale.has_value()) fitted.noise_scale = NoiseScaleOf(stats);
  fitted.progress_at_m0 = ProgressAtInitialBatch(spec, stats, fitted.noise_scale);
  if (!fitted.model.empty()) {
    // Evidence the model cannot fit is planned on as it is.
    fitted.points = PointCurve::IfModelMisses(fitted.observations, spec.prior, fitted.model,
                                              options_.min_samples, options_.measured_points);
    const uint32_t sizes = std::min(spec.max_replicas, Fitted::kCachedSizes);
    fitted.samples_per_second.reserve(sizes);
    for (uint32_t n = 1; n <= sizes; ++n)
      fitted.samples_per_second.push_back(fitted.points.has_value()
                                              ? fitted.points->SamplesPerSecond(n)
                                              : fitted.model.SamplesPerSecond(n));
  }
  return fitted;
}

Fitted JobViews::FitNow(const JobEntry& entry) const {
  const absl::Time now = clock_.Now();
  return Fit(entry.spec, WithRestored(store_.Stats(entry.spec.job_id, now), entry), now,
             entry.status.gpu_type);
}

std::vector<SizeStats> JobViews::WithRestored(std::vector<SizeStats> live,
                                              const JobEntry& entry) const {
  if (entry.restored == nullptr) return live;
  for (const SizeStats& kept : *entry.restored) {
    auto same = std::find_if(live.begin(), live.end(), [&](const SizeStats& s) {
      return s.world_size == kept.world_size && s.gpu_type == kept.gpu_type;
    });
    if (same == live.end()) {
      live.push_back(kept);
      continue;
    }
    // Measured again since the restart: the new measurements win once they
    // are enough to fit on; the progress made before counts either way.
    const uint64_t steps_before = kept.steps_processed;
    const uint64_t samples_before = kept.samples_processed;
    if (same->lifetime_count < options_.min_samples) {
      const uint64_t steps_since = same->steps_processed;
      const uint64_t samples_since = same->samples_processed;
      *same = kept;
      same->steps_processed = steps_since;
      same->samples_processed = samples_since;
    }
    same->steps_processed += steps_before;
    same->samples_processed += samples_before;
  }
  std::sort(live.begin(), live.end(), [](const SizeStats& a, const SizeStats& b) {
    return std::tie(a.gpu_type, a.world_size) < std::tie(b.gpu_type, b.world_size);
  });
  return live;
}

std::vector<CurvePoint> JobViews::CurveOf(const JobSpec& spec, const Fitted& fitted) {
  std::vector<CurvePoint> curve = ModelCurve(spec, fitted.model, fitted.observations);
  if (!fitted.points.has_value()) return curve;
  // Planned on the points: their samples/s, the model's band (relative) and
  // the points' own efficiency.
  const double at_one = fitted.SamplesPerSecond(1);
  for (CurvePoint& p : curve) {
    const double on_points = fitted.SamplesPerSecond(p.replicas);
    p.uncertainty *= on_points / p.samples_per_second;
    p.efficiency = at_one > 0 ? on_points / (p.replicas * at_one) : 0;
    p.samples_per_second = on_points;
  }
  return curve;
}

uint64_t JobViews::SamplesProcessed(const JobEntry& entry) const {
  uint64_t processed = store_.SamplesProcessed(entry.spec.job_id);
  if (entry.restored != nullptr) {
    for (const SizeStats& kept : *entry.restored) processed += kept.samples_processed;
  }
  return processed;
}

JobStatus JobViews::StatusOf(const JobEntry& entry, const Fitted* fitted) const {
  JobStatus status = entry.status;
  status.samples_accepted = store_.SamplesAccepted(entry.spec.job_id);
  status.samples_processed = SamplesProcessed(entry);
  status.gradient_noise_scale = store_.GradientNoiseScale(entry.spec.job_id, clock_.Now());
  if (!status.gradient_noise_scale.has_value() && entry.restored != nullptr)
    status.gradient_noise_scale = NoiseScaleOf(*entry.restored);
  const bool running = IsRunning(status);
  // A job whose efficiency is known counts its progress in samples at M0,
  // from the per-size statistics a fit holds: only then is one needed.
  const bool by_efficiency =
      status.gradient_noise_scale.has_value() && entry.spec.batch_scaling.has_value();
  const bool estimate = entry.spec.total_samples.has_value() && running;
  std::optional<Fitted> fitted_here;
  if (fitted == nullptr && (by_efficiency || estimate))
    fitted = &fitted_here.emplace(FitNow(entry));
  double rate_factor = 1;
  if (by_efficiency && fitted->progress_at_m0.has_value()) {
    status.progress_samples = static_cast<uint64_t>(*fitted->progress_at_m0);
    if (running) {
      // The total batch it runs: the per-worker batch its steps report at
      // this size (accumulation included), else the spec's.
      const uint32_t n = RunningReplicas(status);
      double per_worker = entry.spec.local_batch_size;
      for (const Observation& o : fitted->observations)
        if (o.replicas == n && o.mean_batch > 0) per_worker = o.mean_batch;
      const double m0 = entry.spec.batch_scaling->initial_batch;
      if (per_worker > 0 && m0 > 0) {
        status.statistical_efficiency = StatisticalEfficiency(
            {.sqr = 1, .var = *status.gradient_noise_scale / m0}, m0, n * per_worker);
        rate_factor = *status.statistical_efficiency;
      }
    }
  }
  // At the size it runs now: the estimate answers "when does it finish if
  // nothing changes", and a job that does not run does not finish.
  if (!estimate) return status;
  const double rate = fitted->SamplesPerSecond(RunningReplicas(status)) * rate_factor;
  if (!(rate > 0)) return status;
  const double total = static_cast<double>(*entry.spec.total_samples);
  const double done = status.progress_samples.has_value()
                          ? static_cast<double>(*status.progress_samples)
                          : static_cast<double>(status.samples_processed);
  status.estimated_remaining_seconds = std::max(0.0, total - done) / rate;
  return status;
}

std::vector<JobView::TypeCurve> JobViews::CurvesByType(const JobSpec& spec, const Fitted& fitted,
                                                       std::span<const GpuType> types,
                                                       const TypeSpeeds& speeds) const {
  std::vector<JobView::TypeCurve> out;
  const ModelOptions options = ModelOptionsOf(spec);
  auto add = [&](const GpuType& type) {
    JobView::TypeCurve& typed = out.emplace_back();
    typed.gpu_type = type.name;
    const TypeModel on_type = ModelOnType(fitted, type, speeds, options);
    typed.source = std::string(TypeCurveSourceName(on_type.source));
    if (on_type.source == TypeCurveSource::kTransferred ||
        on_type.source == TypeCurveSource::kPredicted) {
      if (!on_type.from_type.empty()) typed.source += " from " + on_type.from_type;
    }
    const Fitted::TypeFit* own = fitted.OnType(type.name);
    typed.curve = ModelCurve(spec, on_type.model,
                             own != nullptr ? std::span<const Observation>(own->observations)
                                            : std::span<const Observation>());
    typed.model = on_type.model.Describe();
    typed.fit_rms_log_error = on_type.model.rms_log_error();
  };
  for (const GpuType& type : types) {
    if (AllowedOn(spec, type.name)) add(type);
  }
  for (const Fitted::TypeFit& t : fitted.by_type) {
    const bool listed = std::any_of(types.begin(), types.end(),
                                    [&](const GpuType& type) { return type.name == t.gpu_type; });
    if (listed) continue;
    GpuType elsewhere;
    elsewhere.name = t.gpu_type;
    add(elsewhere);
  }
  return out;
}

JobView JobViews::ViewOf(const JobEntry& entry, std::span<const GpuType> types,
                         const TypeSpeeds* speeds) const {
  JobView view;
  view.spec = entry.spec;
  const Fitted fitted = FitNow(entry);
  view.status = StatusOf(entry, &fitted);
  view.curve = CurveOf(entry.spec, fitted);
  view.curve_model = fitted.model.Describe();
  view.curve_fit_rms_log_error = fitted.model.rms_log_error();
  if (fitted.points.has_value()) view.curve_planned_on = fitted.points->Describe();
  view.recommendation = board_.Get(entry.spec.job_id);
  view.pods = store_.Pods(entry.spec.job_id);
  if (!types.empty() || !fitted.by_type.empty()) {
    const TypeSpeeds none;
    view.curves_by_type =
        CurvesByType(entry.spec, fitted, types, speeds != nullptr ? *speeds : none);
  }
  return view;
}

}  // namespace rescale::engine
