// SimJob's batch and statistical efficiency (see sim_job.h and
// pollux_efficiency.h).
#include "bench/sim/sim_job.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/str_format.h"
#include "bench/sim/pollux_traces.h"

namespace rescale::sim {

std::string EngineLabel(std::string_view id) {
  std::string label;
  for (char c : id) {
    const char lower = absl::ascii_tolower(static_cast<unsigned char>(c));
    label += (absl::ascii_isalnum(static_cast<unsigned char>(lower)) || lower == '-') ? lower : '-';
  }
  while (!label.empty() && !absl::ascii_isalnum(static_cast<unsigned char>(label.front())))
    label.erase(0, 1);
  if (label.size() > 200) label.resize(200);
  while (!label.empty() && !absl::ascii_isalnum(static_cast<unsigned char>(label.back())))
    label.pop_back();
  return label.empty() ? "job" : label;
}

double SimJob::Efficiency() const {
  if (efficiency == nullptr || replicas == 0) return 1;
  const double fraction = desc->work_samples > 0 ? done / desc->work_samples : 0;
  return efficiency->Efficiency(efficiency->EpochAt(fraction), TotalBatch());
}

double SimJob::ProgressPerSecond() const {
  if (replicas == 0) return 0;
  // Outside the efficiency world, exactly the curve's samples/s (the same
  // arithmetic as before that world existed, so those tables do not move).
  if (efficiency == nullptr && accumulation == 0) return curve.SamplesPerSecond(replicas);
  return TotalBatch() / StepSeconds() * Efficiency();
}

absl::Status SimJob::PrepareBatch(bool efficiency_world, bool adaptive_batch) {
  if (!efficiency_world || desc->profile.kind != ProfileSpec::Kind::kBuiltin)
    return absl::OkStatus();
  const BuiltinProfile* builtin = FindBuiltinProfile(desc->profile.name);
  if (builtin == nullptr || !builtin->measured) return absl::OkStatus();
  absl::StatusOr<const EfficiencyTrace*> trace = LoadEfficiencyTrace(desc->profile.name);
  if (!trace.ok()) return trace.status();
  absl::StatusOr<const MeasuredApp*> measured = LoadMeasuredApp(desc->profile.name);
  if (!measured.ok()) return measured.status();
  efficiency = *trace;
  adaptive = adaptive_batch;
  // The bounds Pollux's Application takes: the local batches measured
  // (placements.csv), the largest capped as the artifact caps yolov3's.
  const std::vector<uint32_t>& locals = (*measured)->local_batches;
  if (!locals.empty()) {
    min_local_batch = *std::min_element(locals.begin(), locals.end());
    max_local_batch = *std::max_element(locals.begin(), locals.end());
  }
  if (builtin->max_local_batch > 0)
    max_local_batch = std::min(max_local_batch == 0 ? builtin->max_local_batch : max_local_batch,
                               builtin->max_local_batch);
  return absl::OkStatus();
}

absl::Status SimJob::SetBatch(uint32_t local, uint32_t accumulation_steps) {
  accumulation = accumulation_steps;
  if (local == 0 || static_cast<double>(local) == curve.local_batch()) return absl::OkStatus();
  absl::StatusOr<JobCurve> at = MakeJobCurve(desc->profile, local, desc->max_replicas);
  if (!at.ok()) {
    return absl::InternalError(absl::StrFormat("job \"%s\" at local batch %d: %s", desc->id, local,
                                               at.status().message()));
  }
  curve = *std::move(at);
  return absl::OkStatus();
}

BatchLimits SimJob::Limits() const {
  BatchLimits limits;
  if (efficiency == nullptr) return limits;
  limits.initial_batch = efficiency->initial_batch();
  limits.max_batch = efficiency->max_batch();
  limits.min_local_batch = min_local_batch;
  limits.max_local_batch = max_local_batch;
  limits.accumulation = true;
  return limits;
}

}  // namespace rescale::sim
