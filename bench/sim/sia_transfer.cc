// Cross-type prediction on Sia's traces (sia_transfer.h).
#include "bench/sim/sia_transfer.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <string_view>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/sim/csv.h"
#include "bench/sim/pollux_fit.h"
#include "bench/sim/sia_profiles.h"
#include "rescale/throughput_model.h"
#include "src/engine/job_entry.h"
#include "src/engine/type_curves.h"

namespace rescale::sim {
namespace {

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

// One type's measurements of one app: median step per (batch, replicas,
// nodes, GPUs on the fullest node), and which placements are packed on its
// nodes: full nodes first, so "14" is the packed 5 GPUs on nodes of 4 and
// "23", on as many nodes, is not (it costs less: one fewer replica shares
// the fullest node's link).
using Key = std::tuple<double, uint32_t, uint32_t, uint32_t>;
struct Measured {
  std::map<Key, double> step;
  uint32_t gpus_per_node = 0;

  // The packed placement of `replicas` at `batch`.
  std::optional<double> At(double batch, uint32_t replicas) const {
    auto it = step.find({batch, replicas, (replicas + gpus_per_node - 1) / gpus_per_node,
                         std::min(replicas, gpus_per_node)});
    if (it == step.end()) return std::nullopt;
    return it->second;
  }
  bool Packed(const Key& key) const {
    const auto [batch, replicas, nodes, fullest] = key;
    return nodes == (replicas + gpus_per_node - 1) / gpus_per_node &&
           fullest == std::min(replicas, gpus_per_node);
  }
};

absl::StatusOr<Measured> Load(const std::string& dir, std::string_view app,
                              const SiaGpuType& type) {
  absl::StatusOr<std::vector<TraceRow>> rows = ReadPlacements(
      absl::StrCat(dir, "/traces/", Absl(app), "/placements-", Absl(type.trace_suffix), ".csv"));
  if (!rows.ok()) return rows.status();
  std::map<Key, std::vector<double>> all;
  for (const TraceRow& r : *rows)
    all[{r.local_batch, r.replicas, r.nodes, r.per_node}].push_back(r.step_seconds);
  Measured out;
  out.gpus_per_node = type.gpus_per_node;
  for (auto& [key, steps] : all) out.step[key] = Median(steps);
  return out;
}

// Every placement `source` measured at `batch`, as the store would give them.
std::vector<Observation> ObservationsAt(const Measured& source, double batch) {
  std::vector<Observation> obs;
  for (const auto& [key, step] : source.step) {
    if (std::get<0>(key) != batch) continue;
    Observation o;
    o.replicas = std::get<1>(key);
    o.nodes = std::get<2>(key);
    o.per_node = std::get<3>(key);
    o.step_seconds = step;
    o.sample_count = 10;
    o.mean_batch = batch;
    obs.push_back(o);
  }
  return obs;
}

// The source's model at `batch`: every placement it measured there.
ThroughputModel FitAt(const Measured& source, double batch) {
  ModelOptions options;
  options.gpus_per_node = source.gpus_per_node;
  options.min_samples = 1;
  return ThroughputModel::Fit(ObservationsAt(source, batch), {}, options);
}

// What the planner learns of two types from other jobs (TypeSpeeds): each
// other app at each batch both types measured is one job, fitted on each.
engine::TypeSpeeds LearnFrom(const std::vector<const Measured*>& from,
                             const std::vector<const Measured*>& to, const SiaGpuType& s,
                             const SiaGpuType& t) {
  std::vector<engine::Fitted> jobs;
  for (size_t i = 0; i < from.size(); ++i) {
    std::map<double, bool> batches;
    for (const auto& [key, step] : to[i]->step) batches[std::get<0>(key)] = true;
    for (const auto& [batch, unused] : batches) {
      engine::Fitted job;
      job.by_type = {
          {std::string(s.trace_suffix), FitAt(*from[i], batch), ObservationsAt(*from[i], batch)},
          {std::string(t.trace_suffix), FitAt(*to[i], batch), ObservationsAt(*to[i], batch)}};
      if (job.by_type[0].model.empty() || job.by_type[1].model.empty()) continue;
      jobs.push_back(std::move(job));
    }
  }
  std::vector<const engine::Fitted*> fits;
  for (const engine::Fitted& job : jobs) fits.push_back(&job);
  const std::vector<GpuType> types = {
      {.name = std::string(s.trace_suffix), .gpus_per_node = s.gpus_per_node, .slots = {}},
      {.name = std::string(t.trace_suffix), .gpus_per_node = t.gpus_per_node, .slots = {}}};
  return engine::TypeSpeeds::Learn(fits, types);
}

// Median over the target's packed multi-GPU placements of its overhead
// over one GPU divided by the source model's at the same size.
std::optional<double> OverheadRatio(const Measured& from, const Measured& to) {
  std::vector<double> ratios;
  std::map<double, ThroughputModel> fits;  // one fit per batch
  for (const auto& [key, step] : to.step) {
    const auto [batch, n, nodes, fullest] = key;
    if (n < 2 || !to.Packed(key)) continue;
    const std::optional<double> one = to.At(batch, 1);
    if (!one) continue;
    auto it = fits.find(batch);
    if (it == fits.end()) it = fits.emplace(batch, FitAt(from, batch)).first;
    const ThroughputModel& model = it->second;
    if (model.empty()) continue;
    const double source = model.StepSecondsAt(n, batch, 0) - model.StepSecondsAt(1, batch, 0);
    if (source > 0 && step > *one) ratios.push_back((step - *one) / source);
  }
  if (ratios.empty()) return std::nullopt;
  return Median(ratios);
}

// The measured overhead of `n` GPUs packed on m's nodes over one GPU at
// `batch`, and the one-GPU step.
struct Overhead {
  double seconds = 0, one = 0;
};
std::optional<Overhead> OverheadAt(const Measured& m, double batch, uint32_t n) {
  const std::optional<double> step = m.At(batch, n);
  const std::optional<double> one = m.At(batch, 1);
  if (!step || !one) return std::nullopt;
  return Overhead{*step - *one, *one};
}

// Below this share of its one-GPU step, a source's overhead is noise: it
// says nothing of the job's synchronisation.
constexpr double kSignalShare = 0.05;

// What the other apps say about a pair of types at each size: target over
// source overheads (where the source's is signal), and the target's
// overhead as a share of its one-GPU step.
struct SizeRatios {
  std::map<uint32_t, std::vector<double>> ratio, share;
};
SizeRatios OtherApps(const std::vector<const Measured*>& from,
                     const std::vector<const Measured*>& to) {
  SizeRatios out;
  for (size_t i = 0; i < from.size(); ++i) {
    for (const auto& [key, step] : to[i]->step) {
      const auto [batch, n, nodes, fullest] = key;
      if (n < 2 || !to[i]->Packed(key)) continue;
      const std::optional<Overhead> target = OverheadAt(*to[i], batch, n);
      const std::optional<Overhead> source = OverheadAt(*from[i], batch, n);
      if (!target || !source) continue;
      out.share[n].push_back(target->seconds / target->one);
      if (source->seconds >= kSignalShare * source->one) {
        out.ratio[n].push_back(target->seconds / source->seconds);
      }
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<std::vector<CrossTypeError>> MeasureCrossType(const std::string& sia_dir) {
  const std::vector<std::string_view> apps = {"bert",     "cifar10", "deepspeech2",
                                              "imagenet", "ncf",     "yolov3"};
  std::map<std::pair<std::string_view, std::string_view>, Measured> data;
  for (std::string_view app : apps) {
    for (const SiaGpuType& type : SiaGpuTypes()) {
      absl::StatusOr<Measured> m = Load(sia_dir, app, type);
      if (!m.ok()) return m.status();
      data[{app, type.trace_suffix}] = std::move(*m);
    }
  }
  std::vector<CrossTypeError> out;
  for (const SiaGpuType& s : SiaGpuTypes()) {
    for (const SiaGpuType& t : SiaGpuTypes()) {
      if (s.trace_suffix == t.trace_suffix) continue;
      std::map<std::string_view, std::optional<double>> ratio;
      for (std::string_view app : apps) {
        ratio[app] = OverheadRatio(data[{app, s.trace_suffix}], data[{app, t.trace_suffix}]);
      }
      for (std::string_view app : apps) {
        const Measured& from = data[{app, s.trace_suffix}];
        const Measured& to = data[{app, t.trace_suffix}];
        std::vector<double> others;
        for (std::string_view other : apps) {
          if (other != app && ratio[other]) others.push_back(*ratio[other]);
        }
        const double pair_ratio = others.empty() ? 1 : Median(others);
        std::vector<const Measured*> other_from, other_to;
        for (std::string_view other : apps) {
          if (other == app) continue;
          other_from.push_back(&data[{other, s.trace_suffix}]);
          other_to.push_back(&data[{other, t.trace_suffix}]);
        }
        const SizeRatios sizes = OtherApps(other_from, other_to);
        const engine::TypeSpeeds speeds = LearnFrom(other_from, other_to, s, t);
        const GpuType target{
            .name = std::string(t.trace_suffix), .gpus_per_node = t.gpus_per_node, .slots = {}};
        ModelOptions options;
        options.gpus_per_node = t.gpus_per_node;
        std::vector<double> same, sia, pair, by_size, learned;
        std::map<double, ThroughputModel> fits;
        for (const auto& [key, step] : to.step) {
          const auto [batch, n, nodes, fullest] = key;
          if (n < 2 || !to.Packed(key)) continue;
          const std::optional<double> one = to.At(batch, 1);
          if (!one) continue;
          auto it = fits.find(batch);
          if (it == fits.end()) it = fits.emplace(batch, FitAt(from, batch)).first;
          const ThroughputModel& source = it->second;
          if (source.empty()) continue;
          Observation measured;
          measured.replicas = 1;
          measured.nodes = 1;
          measured.step_seconds = *one;
          measured.mean_batch = batch;
          measured.sample_count = 10;
          // Copies: clang 14 cannot capture structured bindings.
          const uint32_t size = n;
          const double at_batch = batch, actual = step;
          auto error = [&](double scale) {
            const ThroughputModel m =
                ThroughputModel::OnOtherType(source, measured, options, scale);
            return std::abs(m.StepSecondsAt(size, at_batch, 0) / actual - 1);
          };
          same.push_back(error(1));
          sia.push_back(error(*one / source.StepSecondsAt(1, batch, 0)));
          pair.push_back(error(pair_ratio));
          // Size ratio: from measurements alone, the source's model where
          // it did not measure the size.
          const std::optional<Overhead> own = OverheadAt(from, batch, n);
          const double source_overhead =
              own ? own->seconds
                  : source.StepSecondsAt(n, batch, 0) - source.StepSecondsAt(1, batch, 0);
          const double source_one = own ? own->one : source.StepSecondsAt(1, batch, 0);
          double predicted = *one;
          auto ratio = sizes.ratio.find(n);
          auto share = sizes.share.find(n);
          if (source_overhead >= kSignalShare * source_one && ratio != sizes.ratio.end()) {
            predicted += Median(ratio->second) * source_overhead;
          } else if (share != sizes.share.end()) {
            predicted *= 1 + Median(share->second);
          }
          by_size.push_back(std::abs(predicted / step - 1));
          // The planner's own: its fit on the source at this batch, the one
          // GPU on the target, through ModelOnType with what it learned.
          engine::Fitted job;
          job.by_type = {{std::string(s.trace_suffix), source, ObservationsAt(from, batch)},
                         {std::string(t.trace_suffix),
                          ThroughputModel::Fit({&measured, 1}, {}, options),
                          {measured}}};
          ModelOptions job_options = options;
          job_options.min_samples = 1;
          const engine::TypeModel on_target = engine::ModelOnType(job, target, speeds, job_options);
          learned.push_back(std::abs(on_target.model.StepSecondsAt(n, batch, 0) / step - 1));
        }
        out.push_back({std::string(app), std::string(s.trace_suffix), std::string(t.trace_suffix),
                       same.size(), Median(same), Median(sia), Median(pair), Median(by_size), same,
                       by_size, Median(learned), learned});
      }
    }
  }
  return out;
}

std::string CrossTypeTable(const std::vector<CrossTypeError>& errors) {
  std::string out =
      "| from | to | app | points | same seconds | sia | pair ratio | size ratio | planner |\n"
      "|---|---|---|---:|---:|---:|---:|---:|---:|\n";
  for (const CrossTypeError& e : errors) {
    absl::StrAppendFormat(&out,
                          "| %s | %s | %s | %d | %.1f%% | %.1f%% | %.1f%% | %.1f%% | %.1f%% |\n",
                          e.from, e.to, e.app, e.points, 100 * e.same_seconds, 100 * e.sia,
                          100 * e.pair_ratio, 100 * e.size_ratio, 100 * e.planner);
  }
  out +=
      "\n| app | same seconds | size ratio | planner |\n"
      "|---|---:|---:|---:|\n";
  for (const PerApp& app : PooledPerApp(errors)) {
    absl::StrAppendFormat(&out, "| %s | %.1f%% | %.1f%% | %.1f%% |\n", app.app,
                          100 * app.same_seconds, 100 * app.size_ratio, 100 * app.planner);
  }
  return out;
}

std::vector<PerApp> PooledPerApp(const std::vector<CrossTypeError>& errors) {
  struct Pooled {
    std::vector<double> same, size, planner;
  };
  std::map<std::string, Pooled> pooled;
  auto add = [](std::vector<double>& to, const std::vector<double>& from) {
    to.insert(to.end(), from.begin(), from.end());
  };
  for (const CrossTypeError& e : errors) {
    Pooled& p = pooled[e.app];
    add(p.same, e.same_seconds_errors);
    add(p.size, e.size_ratio_errors);
    add(p.planner, e.planner_errors);
  }
  std::vector<PerApp> out;
  for (auto& [app, p] : pooled) {
    out.push_back(
        {app, Median(std::move(p.same)), Median(std::move(p.size)), Median(std::move(p.planner))});
  }
  return out;
}

}  // namespace rescale::sim
