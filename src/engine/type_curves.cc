// A job's model per GPU type, and the speed ratios that predict the types it
// never ran on (see type_curves.h).
#include "src/engine/type_curves.h"

#include <algorithm>
#include <cmath>

#include "absl/hash/hash.h"
#include "rescale/job_rules.h"

namespace rescale::engine {
namespace {

// Sizes measured well enough to fit on.
int MeasuredSizes(std::span<const Observation> observations, uint64_t min_samples) {
  int sizes = 0;
  for (const Observation& o : observations)
    sizes += o.step_seconds > 0 && o.sample_count >= std::max<uint64_t>(min_samples, 1);
  return sizes;
}

bool Measured(const Observation& o) { return o.step_seconds > 0 && o.sample_count > 0; }

double SamplesPerSecondOf(const Observation& o) {
  return ObservedSamplesPerSecond(o.replicas, o.mean_batch, o.step_seconds);
}

}  // namespace

std::string_view TypeCurveSourceName(TypeCurveSource source) {
  switch (source) {
    case TypeCurveSource::kMeasured:
      return "measured";
    case TypeCurveSource::kTransferred:
      return "transferred";
    case TypeCurveSource::kPredicted:
      return "predicted";
    case TypeCurveSource::kUnknown:
      break;
  }
  return "unknown";
}

TypeSpeeds TypeSpeeds::Learn(std::span<const Fitted* const> fits) {
  // Per pair, every job's ratio at the smallest size it measured on both:
  // the same size, so the ratio is the types' and not the job's scaling.
  std::map<std::pair<std::string, std::string>, std::vector<double>> samples;
  for (const Fitted* fitted : fits) {
    if (fitted == nullptr || fitted->by_type.size() < 2) continue;
    for (const Fitted::TypeFit& a : fitted->by_type) {
      for (const Fitted::TypeFit& b : fitted->by_type) {
        if (a.gpu_type >= b.gpu_type) continue;
        // A job measures a handful of sizes: pairs of its observations, not
        // every size, are what to search.
        const Observation* at_a = nullptr;
        const Observation* at_b = nullptr;
        for (const Observation& oa : a.observations) {
          if (!Measured(oa) || (at_a != nullptr && oa.replicas >= at_a->replicas)) continue;
          for (const Observation& ob : b.observations) {
            if (ob.replicas == oa.replicas && Measured(ob)) {
              at_a = &oa;
              at_b = &ob;
              break;
            }
          }
        }
        if (at_a == nullptr) continue;
        const double on_a = SamplesPerSecondOf(*at_a);
        const double on_b = SamplesPerSecondOf(*at_b);
        if (on_a > 0 && on_b > 0) samples[{a.gpu_type, b.gpu_type}].push_back(on_b / on_a);
      }
    }
  }
  TypeSpeeds speeds;
  for (auto& [pair, ratios] : samples) {
    // The median (upper of the two middle ones): one odd job moves it by a
    // rank at most.
    std::nth_element(ratios.begin(), ratios.begin() + ratios.size() / 2, ratios.end());
    const double median = ratios[ratios.size() / 2];
    if (!(median > 0) || !std::isfinite(median)) continue;
    speeds.ratio_[pair] = median;
    speeds.ratio_[{pair.second, pair.first}] = 1 / median;
  }
  return speeds;
}

std::optional<double> TypeSpeeds::Ratio(std::string_view from, std::string_view to) const {
  if (from == to) return 1.0;
  auto it = ratio_.find(std::pair<std::string, std::string>(from, to));
  if (it == ratio_.end()) return std::nullopt;
  return it->second;
}

uint64_t TypeSpeeds::Fingerprint() const {
  uint64_t hash = ratio_.size();
  for (const auto& [pair, ratio] : ratio_)
    hash = absl::HashOf(hash, pair.first, pair.second, std::llround(std::log(ratio) * 100));
  return hash;
}

bool AllowedOn(const JobSpec& spec, std::string_view name) {
  return spec.gpu_types.empty() ||
         std::find(spec.gpu_types.begin(), spec.gpu_types.end(), name) != spec.gpu_types.end();
}

TypeModel ModelOnType(const Fitted& fitted, const GpuType& type, const TypeSpeeds& speeds,
                      ModelOptions options) {
  TypeModel out;
  // The job's fits assume the engine's node size; a type's own differs.
  const bool other_nodes = type.gpus_per_node > 0 && type.gpus_per_node != options.gpus_per_node;
  if (other_nodes) options.gpus_per_node = type.gpus_per_node;
  if (fitted.by_type.empty()) {
    // Samples that never said where they ran: the one curve, on every type
    // (nothing tells the types apart for this job).
    if (!fitted.model.empty()) {
      out.model = fitted.model;
      out.source = TypeCurveSource::kPredicted;
    }
    return out;
  }
  // The source of anything not measured here: the type measured at the
  // most sizes (then with the most samples), other than this one.
  const Fitted::TypeFit* source = nullptr;
  int source_sizes = 0;
  for (const Fitted::TypeFit& t : fitted.by_type) {
    if (t.gpu_type == type.name || t.model.empty()) continue;
    const int sizes = MeasuredSizes(t.observations, options.min_samples);
    if (source == nullptr || sizes > source_sizes) {
      source = &t;
      source_sizes = sizes;
    }
  }
  const Fitted::TypeFit* own = fitted.OnType(type.name);
  const int own_sizes = own != nullptr ? MeasuredSizes(own->observations, options.min_samples) : 0;
  if (own != nullptr && (own_sizes >= 2 || source == nullptr || source_sizes < 2)) {
    // Its own fit; again with this type's node size when that differs.
    out.model = other_nodes ? ThroughputModel::Fit(own->observations, {}, options) : own->model;
    if (out.model.empty()) out.model = own->model;
    out.source = out.model.empty() ? TypeCurveSource::kUnknown : TypeCurveSource::kMeasured;
    return out;
  }
  if (source == nullptr) return out;
  out.from_type = source->gpu_type;
  if (own != nullptr && own_sizes == 1) {
    // Sia's bootstrapping proper: one size measured here sets the compute,
    // the source's sync model the rest.
    for (const Observation& o : own->observations) {
      if (o.step_seconds > 0 && o.sample_count >= std::max<uint64_t>(options.min_samples, 1)) {
        out.model = ThroughputModel::OnOtherType(source->model, o, options);
        break;
      }
    }
    out.source = TypeCurveSource::kTransferred;
  } else {
    // Never measured here: the source's step at one replica, as fast as
    // other jobs found this type against the source (unknown: the same).
    const double ratio = speeds.Ratio(source->gpu_type, type.name).value_or(1.0);
    Observation guess;
    guess.replicas = 1;
    guess.step_seconds = source->model.StepSeconds(1) / ratio;
    out.model = ThroughputModel::OnOtherType(source->model, guess, options);
    out.source = TypeCurveSource::kPredicted;
  }
  if (out.model.empty()) out.source = TypeCurveSource::kUnknown;
  return out;
}

}  // namespace rescale::engine
