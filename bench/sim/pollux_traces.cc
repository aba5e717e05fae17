// The embedded Pollux traces and their packed-placement tables (see
// pollux_traces.h).
// The CSVs are embedded at compile time (embed.h).
#include "bench/sim/pollux_traces.h"

#include <algorithm>
#include <cmath>
#include <mutex>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "bench/sim/csv.h"
#include "bench/sim/embed.h"

RESCALE_SIM_EMBED(rescale_sim_bert_placements, "bert/placements.csv")
RESCALE_SIM_EMBED(rescale_sim_bert_scalability, "bert/scalability.csv")
RESCALE_SIM_EMBED(rescale_sim_cifar10_placements, "cifar10/placements.csv")
RESCALE_SIM_EMBED(rescale_sim_cifar10_scalability, "cifar10/scalability.csv")
RESCALE_SIM_EMBED(rescale_sim_deepspeech2_placements, "deepspeech2/placements.csv")
RESCALE_SIM_EMBED(rescale_sim_deepspeech2_scalability, "deepspeech2/scalability.csv")
RESCALE_SIM_EMBED(rescale_sim_imagenet_placements, "imagenet/placements.csv")
RESCALE_SIM_EMBED(rescale_sim_imagenet_scalability, "imagenet/scalability.csv")
RESCALE_SIM_EMBED(rescale_sim_ncf_placements, "ncf/placements.csv")
RESCALE_SIM_EMBED(rescale_sim_ncf_scalability, "ncf/scalability.csv")
RESCALE_SIM_EMBED(rescale_sim_yolov3_placements, "yolov3/placements.csv")
RESCALE_SIM_EMBED(rescale_sim_yolov3_scalability, "yolov3/scalability.csv")

namespace rescale::sim {
namespace {

struct EmbeddedFile {
  std::string_view app;
  std::string_view file;
  const char* begin;
  const char* end;
};

const EmbeddedFile kEmbedded[] = {
    {"bert", "placements", rescale_sim_bert_placements_begin, rescale_sim_bert_placements_end},
    {"bert", "scalability", rescale_sim_bert_scalability_begin, rescale_sim_bert_scalability_end},
    {"cifar10", "placements", rescale_sim_cifar10_placements_begin,
     rescale_sim_cifar10_placements_end},
    {"cifar10", "scalability", rescale_sim_cifar10_scalability_begin,
     rescale_sim_cifar10_scalability_end},
    {"deepspeech2", "placements", rescale_sim_deepspeech2_placements_begin,
     rescale_sim_deepspeech2_placements_end},
    {"deepspeech2", "scalability", rescale_sim_deepspeech2_scalability_begin,
     rescale_sim_deepspeech2_scalability_end},
    {"imagenet", "placements", rescale_sim_imagenet_placements_begin,
     rescale_sim_imagenet_placements_end},
    {"imagenet", "scalability", rescale_sim_imagenet_scalability_begin,
     rescale_sim_imagenet_scalability_end},
    {"ncf", "placements", rescale_sim_ncf_placements_begin, rescale_sim_ncf_placements_end},
    {"ncf", "scalability", rescale_sim_ncf_scalability_begin, rescale_sim_ncf_scalability_end},
    {"yolov3", "placements", rescale_sim_yolov3_placements_begin,
     rescale_sim_yolov3_placements_end},
    {"yolov3", "scalability", rescale_sim_yolov3_scalability_begin,
     rescale_sim_yolov3_scalability_end},
};

// How packed a placement is: fewer nodes first, then the larger per-node
// counts (sorted descending). Smaller keys are more packed.
struct Packing {
  uint32_t nodes = 0;
  std::string descending_digits;  // "41" for "14"; empty for scalability rows
  bool operator<(const Packing& other) const {
    if (nodes != other.nodes) return nodes < other.nodes;
    return descending_digits > other.descending_digits;
  }
  bool operator==(const Packing& other) const = default;
};

struct Row {
  uint32_t replicas = 0;
  Packing packing;
  std::string label;
  uint32_t local_batch = 0;
  double step_seconds = 0;
};

absl::Status Malformed(std::string_view name, std::string_view file, int line,
                       std::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrFormat("%s/%s.csv line %d: %s", name, file, line, what));
}

absl::StatusOr<std::vector<Row>> ReadRows(std::string_view name, std::string_view file,
                                          std::string_view text, bool scalability) {
  absl::StatusOr<CsvTable> table = ParseCsv(text);
  if (!table.ok()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s/%s.csv: %s", name, file, table.status().message()));
  }
  const auto placement = table->Find("placement");
  const auto nodes = table->Find("num_nodes");
  const auto replicas = table->Find("num_replicas");
  const auto local_bsz = table->Find("local_bsz");
  const auto step_time = table->Find("step_time");
  if (!local_bsz || !step_time || (scalability ? (!nodes || !replicas) : !placement)) {
    return Malformed(name, file, 1,
                     "missing columns (placement or num_nodes,num_replicas; "
                     "local_bsz; step_time)");
  }
  std::vector<Row> rows;
  for (size_t i = 0; i < table->rows.size(); ++i) {
    const auto& f = table->rows[i];
    const int line = table->line_numbers[i];
    Row row;
    if (!absl::SimpleAtoi(f[*local_bsz], &row.local_batch) || row.local_batch == 0 ||
        !absl::SimpleAtod(f[*step_time], &row.step_seconds) || !(row.step_seconds > 0)) {
      return Malformed(name, file, line, "local_bsz and step_time must be positive numbers");
    }
    if (scalability) {
      if (!absl::SimpleAtoi(f[*nodes], &row.packing.nodes) ||
          !absl::SimpleAtoi(f[*replicas], &row.replicas) || row.replicas == 0 ||
          row.packing.nodes == 0) {
        return Malformed(name, file, line, "num_nodes and num_replicas must be positive integers");
      }
      row.label = absl::StrFormat("%d nodes", row.packing.nodes);
    } else {
      const std::string& digits = f[*placement];
      if (digits.empty() ||
          !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '1' && c <= '9'; })) {
        return Malformed(name, file, line, "placement must be digits 1-9, one per node");
      }
      for (char c : digits) row.replicas += static_cast<uint32_t>(c - '0');
      row.packing.nodes = static_cast<uint32_t>(digits.size());
      row.packing.descending_digits = digits;
      std::sort(row.packing.descending_digits.begin(), row.packing.descending_digits.end(),
                std::greater<char>());
      row.label = digits;
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

// Linear interpolation of y at x between (x0, y0) and (x1, y1); x0 != x1.
double Lerp(double x, double x0, double y0, double x1, double y1) {
  return y0 + (y1 - y0) * (x - x0) / (x1 - x0);
}

// Step time at local batch `m` from one count's (batch -> seconds) points:
// linear between the neighbours; nullopt outside the measured range.
std::optional<double> WithinMeasured(const std::map<uint32_t, double>& by_batch, double m) {
  if (by_batch.empty()) return std::nullopt;
  if (m < by_batch.begin()->first || m > by_batch.rbegin()->first) return std::nullopt;
  auto hi = by_batch.lower_bound(static_cast<uint32_t>(std::ceil(m)));
  if (hi->first == m || hi == by_batch.begin()) return hi->second;
  auto lo = std::prev(hi);
  return Lerp(m, lo->first, lo->second, hi->first, hi->second);
}

}  // namespace

std::string_view EmbeddedTrace(std::string_view app, std::string_view file) {
  for (const EmbeddedFile& e : kEmbedded) {
    if (e.app == app && e.file == file) return std::string_view(e.begin, e.end - e.begin);
  }
  return {};
}

absl::StatusOr<MeasuredApp> ParseMeasuredApp(std::string_view name, std::string_view placements_csv,
                                             std::string_view scalability_csv) {
  absl::StatusOr<std::vector<Row>> placements = ReadRows(name, "placements", placements_csv, false);
  if (!placements.ok()) return placements.status();
  absl::StatusOr<std::vector<Row>> scalability =
      ReadRows(name, "scalability", scalability_csv, true);
  if (!scalability.ok()) return scalability.status();

  // The most packed placement of each replica count...
  std::map<uint32_t, Packing> best;
  auto consider = [&](const Row& row) {
    auto it = best.find(row.replicas);
    if (it == best.end() || row.packing < it->second) best[row.replicas] = row.packing;
  };
  for (const Row& row : *placements) consider(row);
  for (const Row& row : *scalability) consider(row);

  // ...and the mean step time of its rows at each local batch.
  MeasuredApp app;
  app.name = std::string(name);
  std::map<uint32_t, std::map<uint32_t, std::pair<double, int>>> sums;
  auto take = [&](const Row& row) {
    if (!(row.packing == best[row.replicas])) return;
    auto& [sum, count] = sums[row.replicas][row.local_batch];
    sum += row.step_seconds;
    ++count;
    app.placement[row.replicas] = row.label;
  };
  for (const Row& row : *placements) take(row);
  for (const Row& row : *scalability) take(row);
  for (const auto& [replicas, by_batch] : sums) {
    for (const auto& [batch, sum_count] : by_batch) {
      app.step_seconds[replicas][batch] = sum_count.first / sum_count.second;
    }
  }
  if (!app.step_seconds.contains(1)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: no single-GPU measurement (placement \"1\")", name));
  }
  for (const auto& [batch, seconds] : app.step_seconds.at(1)) app.local_batches.push_back(batch);
  return app;
}

double MeasuredApp::StepSecondsAtMeasured(uint32_t replicas, double local_batch) const {
  const std::map<uint32_t, double>& here = step_seconds.at(replicas);
  if (std::optional<double> t = WithinMeasured(here, local_batch)) return *t;
  // Single-GPU step time at any batch: affine beyond the measured range,
  // from the two nearest measured batches (compute time is affine in the
  // batch: Pollux's T_grad = a + b*m).
  const std::map<uint32_t, double>& single = step_seconds.at(1);
  auto single_at = [&](double m) {
    if (std::optional<double> t = WithinMeasured(single, m)) return *t;
    if (single.size() == 1) return single.begin()->second;
    if (m < single.begin()->first) {
      auto a = single.begin();
      auto b = std::next(a);
      return Lerp(m, a->first, a->second, b->first, b->second);
    }
    auto b = std::prev(single.end());
    auto a = std::prev(b);
    return Lerp(m, a->first, a->second, b->first, b->second);
  };
  const auto nearest = local_batch < here.begin()->first ? here.begin() : std::prev(here.end());
  const double seconds = nearest->second + single_at(local_batch) - single_at(nearest->first);
  // Never faster than a tenth of the nearest measurement: an extrapolated
  // slope must not produce absurd (or negative) times.
  return std::max(seconds, 0.1 * nearest->second);
}

double MeasuredApp::StepSeconds(uint32_t replicas, double local_batch) const {
  replicas = std::max(replicas, 1u);
  const uint32_t largest = step_seconds.rbegin()->first;
  if (replicas > largest) {
    return StepSecondsAtMeasured(largest, local_batch) * replicas / largest;
  }
  auto hi = step_seconds.lower_bound(replicas);
  if (hi->first == replicas) return StepSecondsAtMeasured(replicas, local_batch);
  auto lo = std::prev(hi);  // exists: 1 is always measured
  return Lerp(replicas, lo->first, StepSecondsAtMeasured(lo->first, local_batch), hi->first,
              StepSecondsAtMeasured(hi->first, local_batch));
}

absl::StatusOr<const MeasuredApp*> LoadMeasuredApp(std::string_view app) {
  static std::mutex mu;
  static std::map<std::string, MeasuredApp, std::less<>>* cache =
      new std::map<std::string, MeasuredApp, std::less<>>();
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = cache->find(app); it != cache->end()) return &it->second;
  const std::string_view placements = EmbeddedTrace(app, "placements");
  const std::string_view scalability = EmbeddedTrace(app, "scalability");
  if (placements.empty() || scalability.empty()) {
    return absl::NotFoundError(absl::StrFormat("no measured traces for \"%s\"", app));
  }
  absl::StatusOr<MeasuredApp> parsed = ParseMeasuredApp(app, placements, scalability);
  if (!parsed.ok()) return parsed.status();
  return &cache->emplace(std::string(app), *std::move(parsed)).first->second;
}

}  // namespace rescale::sim
