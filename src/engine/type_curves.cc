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

// The median (upper of the two middle ones: one odd job moves it by a rank
// at most); nullopt when empty.
std::optional<double> UpperMedian(std::vector<double> v) {
  if (v.empty()) return std::nullopt;
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

// Below this share of the one-replica step, a source's sync is noise: it
// says nothing of how the job synchronises (on A100s it often is).
constexpr double kSyncSignalShare = 0.05;

// One replica's step on a type the job was measured on, at the batch of
// `o`: measured there at that batch (within 2%, a mean's wander) when it
// was (a model that misses its
// one-replica point, as on A100s whose one-GPU step is slower than their
// two-GPU one, would make every size's overhead look larger), else the
// model's.
double OneReplica(const Fitted::TypeFit& fit, const Observation& o) {
  for (const Observation& one : fit.observations) {
    if (one.replicas == 1 && Measured(one) &&
        std::abs(one.mean_batch - o.mean_batch) <= 0.02 * o.mean_batch)
      return one.step_seconds;
  }
  return o.mean_batch > 0 ? fit.model.StepSecondsAt(1, o.mean_batch, 0) : fit.model.StepSeconds(1);
}

// The nodes n replicas of `model` take when packed on nodes of
// `gpus_per_node` GPUs (1 when unknown).
uint32_t PackedNodes(const ThroughputModel& model, uint32_t n, uint32_t gpus_per_node) {
  if (gpus_per_node == 0) return 1;
  return (n * model.gpus_per_replica() + gpus_per_node - 1) / gpus_per_node;
}

// A job's overhead of n replicas over one on a type it was measured on,
// with its one-replica step there (seconds): measured at n when it was
// (packed on the type's nodes, or nodes unknown), else its model's sync at
// n on those nodes.
struct Overhead {
  double seconds = 0, one = 0;
  // Whether it says anything of how the job synchronises.
  bool Signal() const { return seconds >= TypeSpeeds::kSizeSignalShare * one; }
};
std::optional<Overhead> OverheadOn(const Fitted::TypeFit& fit, uint32_t n, uint32_t gpus_per_node) {
  if (fit.model.empty() || n < 2) return std::nullopt;
  for (const Observation& o : fit.observations) {
    if (!Measured(o) || o.replicas != n ||
        (o.nodes != 0 && o.nodes != PackedNodes(fit.model, n, gpus_per_node)))
      continue;
    const double one = OneReplica(fit, o);
    if (one > 0) return Overhead{o.step_seconds - one, one};
  }
  const ThroughputModel::SyncSplit split = fit.model.SyncAt(n, gpus_per_node);
  const double one = fit.model.StepSeconds(1);
  if (!(one > 0)) return std::nullopt;
  return Overhead{split.within + split.across, one};
}

// One measurement on `to` of a job also modelled on `from`: its overhead
// over one replica there, what its model on `from` says the sync of that
// placement costs, and, when the placement is packed, the job's overhead
// at that size on `from`.
struct SyncSample {
  uint32_t replicas = 0;
  double overhead = 0;  // seconds
  double base = 0;      // the one-replica step on `to`, seconds
  ThroughputModel::SyncSplit split;
  std::optional<Overhead> at_size_on_from;
};

// Every job's samples per ordered pair of types.
std::map<std::pair<std::string, std::string>, std::vector<SyncSample>> SyncSamples(
    std::span<const Fitted* const> fits, std::span<const GpuType> types) {
  std::map<std::pair<std::string, std::string>, std::vector<SyncSample>> out;
  const auto node_size = [&](std::string_view name) -> uint32_t {
    auto it =
        std::find_if(types.begin(), types.end(), [&](const GpuType& t) { return t.name == name; });
    return it == types.end() ? 0 : it->gpus_per_node;
  };
  for (const Fitted* fitted : fits) {
    if (fitted == nullptr || fitted->by_type.size() < 2) continue;
    for (const Fitted::TypeFit& from : fitted->by_type) {
      for (const Fitted::TypeFit& to : fitted->by_type) {
        if (from.gpu_type == to.gpu_type || from.model.empty() || to.model.empty()) continue;
        const uint32_t to_node = node_size(to.gpu_type);
        const uint32_t from_node = node_size(from.gpu_type);
        if (to_node == 0) continue;
        for (const Observation& o : to.observations) {
          if (!Measured(o) || o.replicas < 2) continue;
          // One replica on `to` at the batch of the measurement.
          const double base = OneReplica(to, o);
          if (!(base > 0)) continue;
          const bool packed = o.nodes == 0 || o.nodes == PackedNodes(to.model, o.replicas, to_node);
          out[{from.gpu_type, to.gpu_type}].push_back(
              {o.replicas, o.step_seconds - base, base,
               from.model.SyncAt(o.replicas, to_node, o.nodes),
               packed && from_node > 0 ? OverheadOn(from, o.replicas, from_node) : std::nullopt});
        }
      }
    }
  }
  return out;
}

// The job's sync on a type it did not run at these sizes, in seconds:
// fitted to its one-replica step there (`first`'s) and, at each size in
// `ratios`, that step plus its overhead at the size on the source times
// the size's ratio. Sizes where the source's overhead is noise add
// nothing; nullopt when none is left.
std::optional<ScalingShares> SyncBySize(const Fitted::TypeFit& source, uint32_t source_node,
                                        const ThroughputModel& first,
                                        const std::map<uint32_t, double>& ratios,
                                        const ModelOptions& options) {
  if (source_node == 0) return std::nullopt;
  const double one = first.StepSeconds(1);
  Observation point;
  point.replicas = 1;
  point.step_seconds = one;
  point.sample_count = std::max<uint64_t>(options.min_samples, 1);
  point.mean_batch = first.local_batch();
  std::vector<Observation> points = {point};
  for (const auto& [n, ratio] : ratios) {
    const std::optional<Overhead> overhead = OverheadOn(source, n, source_node);
    if (!overhead || !overhead->Signal()) continue;
    point.replicas = n;
    point.step_seconds = one + ratio * overhead->seconds;
    points.push_back(point);
  }
  if (points.size() < 2) return std::nullopt;
  const ThroughputModel fit = ThroughputModel::Fit(points, {}, options);
  if (fit.empty()) return std::nullopt;
  return fit.sync_seconds();
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

TypeSpeeds TypeSpeeds::Learn(std::span<const Fitted* const> fits, std::span<const GpuType> types) {
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
    const double median = *UpperMedian(std::move(ratios));
    if (!(median > 0) || !std::isfinite(median)) continue;
    speeds.ratio_[pair] = median;
    speeds.ratio_[{pair.second, pair.first}] = 1 / median;
  }
  for (const auto& [pair, all] : SyncSamples(fits, types)) {
    // Within a node first: the part of a cross-node placement's overhead
    // that is not the nodes' is then taken out at that scale. Samples are
    // kept only where the source's model shows sync to scale, and an
    // overhead below zero (noise around a step that does not slow) counts
    // as none.
    std::vector<double> within, across;
    for (const SyncSample& s : all) {
      if (!s.split.spans_nodes && s.split.within >= kSyncSignalShare * s.base)
        within.push_back(std::max(0.0, s.overhead) / s.split.within);
    }
    SyncRatios ratios;
    ratios.within = UpperMedian(std::move(within));
    for (const SyncSample& s : all) {
      if (s.split.spans_nodes && s.split.across >= kSyncSignalShare * s.base) {
        const double net = s.overhead - ratios.within.value_or(1.0) * s.split.within;
        across.push_back(std::max(0.0, net) / s.split.across);
      }
    }
    ratios.across = UpperMedian(std::move(across));
    if (ratios.within || ratios.across) speeds.sync_[pair] = ratios;
    // Per size, from packed placements whose source overhead is signal. An
    // overhead below zero is kept as it is: the median of a type whose
    // multi-GPU steps are as fast as its one-GPU step is then about none.
    std::map<uint32_t, std::vector<double>> by_size;
    for (const SyncSample& s : all) {
      if (s.at_size_on_from && s.at_size_on_from->Signal())
        by_size[s.replicas].push_back(s.overhead / s.at_size_on_from->seconds);
    }
    for (auto& [n, ratios_at] : by_size)
      speeds.size_ratio_[pair][n] = *UpperMedian(std::move(ratios_at));
  }
  for (const GpuType& type : types) speeds.gpus_per_node_[type.name] = type.gpus_per_node;
  return speeds;
}

TypeSpeeds::SyncRatios TypeSpeeds::Sync(std::string_view from, std::string_view to) const {
  if (from == to) return {1.0, 1.0};
  auto it = sync_.find(std::pair<std::string, std::string>(from, to));
  if (it == sync_.end()) return {};
  return it->second;
}

const std::map<uint32_t, double>* TypeSpeeds::SizeRatios(std::string_view from,
                                                         std::string_view to) const {
  auto it = size_ratio_.find(std::pair<std::string, std::string>(from, to));
  return it == size_ratio_.end() ? nullptr : &it->second;
}

uint32_t TypeSpeeds::GpusPerNode(std::string_view type) const {
  auto it = gpus_per_node_.find(type);
  return it == gpus_per_node_.end() ? 0 : it->second;
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
  // The sync ratios to a percent of their value (they may be 0).
  auto percent = [](const std::optional<double>& r) { return r ? std::llround(*r * 100) : -1; };
  for (const auto& [pair, sync] : sync_)
    hash = absl::HashOf(hash, pair.first, pair.second, percent(sync.within), percent(sync.across));
  auto step = [](double r) { return r < 0.01 ? -1 : std::llround(std::log(r) * 20); };
  for (const auto& [pair, sizes] : size_ratio_) {
    for (const auto& [n, ratio] : sizes)
      hash = absl::HashOf(hash, pair.first, pair.second, n, step(ratio));
  }
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
  // How this type's interconnect compares, as other jobs found it (unknown:
  // the same seconds).
  const TypeSpeeds::SyncRatios sync = speeds.Sync(source->gpu_type, type.name);
  // What sets the compute here: the one size measured here (Sia's
  // bootstrapping proper), else the source's step at one replica as fast as
  // other jobs found this type against the source (unknown: the same).
  std::optional<Observation> base;
  if (own != nullptr && own_sizes == 1) {
    for (const Observation& o : own->observations) {
      if (o.step_seconds > 0 && o.sample_count >= std::max<uint64_t>(options.min_samples, 1)) {
        base = o;
        break;
      }
    }
    out.source = TypeCurveSource::kTransferred;
  } else {
    const double ratio = speeds.Ratio(source->gpu_type, type.name).value_or(1.0);
    base.emplace();
    base->replicas = 1;
    base->step_seconds = source->model.StepSeconds(1) / ratio;
    out.source = TypeCurveSource::kPredicted;
  }
  if (base) {
    // The source's sync, scaled as other jobs found this type's
    // interconnect against the source's; then, where other jobs show how
    // the overhead differs size by size, the sync fitted to that.
    out.model = ThroughputModel::OnOtherType(source->model, *base, options,
                                             sync.within.value_or(1.0), sync.across);
    const std::map<uint32_t, double>* sizes = speeds.SizeRatios(source->gpu_type, type.name);
    if (!out.model.empty() && sizes != nullptr) {
      const std::optional<ScalingShares> by_size =
          SyncBySize(*source, speeds.GpusPerNode(source->gpu_type), out.model, *sizes, options);
      if (by_size)
        out.model = ThroughputModel::OnOtherType(source->model, *base, options, *by_size);
    }
  }
  if (out.model.empty()) out.source = TypeCurveSource::kUnknown;
  return out;
}

}  // namespace rescale::engine
