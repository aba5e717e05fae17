// Fitting Pollux's step-time model to measured placements (pollux_fit.h).
//
// The loss is Pollux's: squared error of log step time over the rows. The
// parameters are searched as logs (so they stay positive and span the
// orders of magnitude between a microsecond of latency and a second of
// compute) by Nelder-Mead, a derivative-free simplex: the model's max-like
// combination (T_grad^g + T_sync^g)^(1/g) has kinks for large g, and six
// or seven parameters are few. The start comes from the data: compute from
// the one-GPU rows' line in the local batch, sync from what two or more
// GPUs add on one node and across nodes. Each g in a small grid is fitted
// with g fixed, then the best is refined with g free.
#include "bench/sim/pollux_fit.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <numeric>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "bench/sim/csv.h"
#include "rescale/read_file.h"

namespace rescale::sim {
namespace {

constexpr int kParams = 7;  // log a_c, b_c, a_r, b_r, a_n, b_n; g
using Point = std::array<double, kParams>;

constexpr double kMinG = 1, kMaxG = 10;
constexpr double kFloorSeconds = 1e-7;  // exp(log) of a parameter at "zero"

PolluxModel ModelOf(const Point& x, uint32_t gpus_per_node) {
  PolluxModel m;
  m.a_c = std::exp(x[0]);
  m.b_c = std::exp(x[1]);
  m.a_r = std::exp(x[2]);
  m.b_r = std::exp(x[3]);
  m.a_n = std::exp(x[4]);
  m.b_n = std::exp(x[5]);
  m.g = std::clamp(x[6], kMinG, kMaxG);
  m.gpus_per_node = gpus_per_node;
  return m;
}

double Loss(std::span<const TraceRow> rows, const Point& x, uint32_t gpus_per_node) {
  if (x[6] < kMinG || x[6] > kMaxG) return std::numeric_limits<double>::infinity();
  const PolluxModel m = ModelOf(x, gpus_per_node);
  double total = 0;
  for (const TraceRow& row : rows) {
    const double r = std::log(ModelStepSeconds(m, row) / row.step_seconds);
    total += r * r;
  }
  return total;
}

// Nelder-Mead over the coordinates in `free` (others held), standard
// coefficients, from `start` with the given initial steps.
Point Minimise(std::span<const TraceRow> rows, uint32_t gpus_per_node, Point start,
               const Point& step, const std::array<bool, kParams>& free, int iterations) {
  std::vector<int> dims;
  for (int d = 0; d < kParams; ++d) {
    if (free[d]) dims.push_back(d);
  }
  const size_t n = dims.size();
  std::vector<Point> simplex(n + 1, start);
  for (size_t k = 0; k < n; ++k) simplex[k + 1][dims[k]] += step[dims[k]];
  std::vector<double> value(n + 1);
  for (size_t k = 0; k <= n; ++k) value[k] = Loss(rows, simplex[k], gpus_per_node);
  std::vector<size_t> order(n + 1);
  for (int it = 0; it < iterations; ++it) {
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return value[a] < value[b]; });
    const size_t best = order.front(), worst = order.back(), second = order[n - 1];
    if (value[worst] - value[best] <= 1e-12 * (1 + value[best])) break;
    Point centroid{};
    for (size_t k = 0; k < n; ++k) {
      for (int d = 0; d < kParams; ++d) centroid[d] += simplex[order[k]][d] / double(n);
    }
    auto along = [&](double t) {
      Point p = simplex[worst];
      for (int d : dims) p[d] = centroid[d] + t * (simplex[worst][d] - centroid[d]);
      return p;
    };
    const Point reflected = along(-1);
    const double fr = Loss(rows, reflected, gpus_per_node);
    if (fr < value[best]) {
      const Point expanded = along(-2);
      const double fe = Loss(rows, expanded, gpus_per_node);
      simplex[worst] = fe < fr ? expanded : reflected;
      value[worst] = std::min(fe, fr);
    } else if (fr < value[second]) {
      simplex[worst] = reflected;
      value[worst] = fr;
    } else {
      const Point contracted = fr < value[worst] ? along(-0.5) : along(0.5);
      const double fc = Loss(rows, contracted, gpus_per_node);
      if (fc < std::min(fr, value[worst])) {
        simplex[worst] = contracted;
        value[worst] = fc;
      } else {
        for (size_t k = 0; k <= n; ++k) {  // shrink towards the best
          if (k == best) continue;
          for (int d : dims)
            simplex[k][d] = simplex[best][d] + 0.5 * (simplex[k][d] - simplex[best][d]);
          value[k] = Loss(rows, simplex[k], gpus_per_node);
        }
      }
    }
  }
  return simplex[std::min_element(value.begin(), value.end()) - value.begin()];
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The data-driven start (logs), g as given.
Point Start(std::span<const TraceRow> rows, double g) {
  // Compute: least squares of step on local batch over the one-GPU rows.
  double sx = 0, sy = 0, sxx = 0, sxy = 0, count = 0;
  for (const TraceRow& r : rows) {
    if (r.replicas != 1) continue;
    sx += r.local_batch, sy += r.step_seconds, count += 1;
    sxx += r.local_batch * r.local_batch, sxy += r.local_batch * r.step_seconds;
  }
  double b_c = 1e-3, a_c = 1e-2;
  if (count >= 2 && sxx * count - sx * sx > 0) {
    b_c = std::max((count * sxy - sx * sy) / (count * sxx - sx * sx), 1e-6);
    a_c = std::max((sy - b_c * sx) / count, 1e-4);
  } else if (count >= 1) {
    a_c = 0.5 * sy / count, b_c = 0.5 * sy / std::max(sx, 1.0);
  }
  std::vector<double> in_node, across;
  for (const TraceRow& r : rows) {
    if (r.replicas < 2) continue;
    const double extra = std::max(r.step_seconds - (a_c + b_c * r.local_batch), 1e-4);
    (r.nodes > 1 ? across : in_node).push_back(extra);
  }
  const double a_r = in_node.empty() ? 1e-2 : Median(in_node);
  const double a_n = across.empty() ? 2 * a_r : Median(across);
  return {std::log(a_c),
          std::log(b_c),
          std::log(a_r),
          std::log(a_r * 0.01),
          std::log(a_n),
          std::log(a_n * 0.01),
          g};
}

}  // namespace

double ModelStepSeconds(const PolluxModel& model, const TraceRow& row) {
  return model.StepSecondsOn(row.replicas, row.nodes, row.local_batch);
}

PolluxFit FitPolluxModel(std::span<const TraceRow> rows, uint32_t gpus_per_node) {
  PolluxFit out;
  out.rows = rows.size();
  if (rows.empty()) return out;
  const Point step = {0.7, 0.7, 0.7, 1.5, 0.7, 1.5, 0.5};
  const std::array<bool, kParams> fixed_g = {true, true, true, true, true, true, false};
  const std::array<bool, kParams> all = {true, true, true, true, true, true, true};
  Point best{};
  double best_loss = std::numeric_limits<double>::infinity();
  for (double g : {1.0, 1.5, 2.0, 3.0, 5.0}) {
    Point x = Start(rows, g);
    for (int restart = 0; restart < 3; ++restart) {
      x = Minimise(rows, gpus_per_node, x, step, fixed_g, 1500);
    }
    const double loss = Loss(rows, x, gpus_per_node);
    if (loss < best_loss) best = x, best_loss = loss;
  }
  for (int restart = 0; restart < 3; ++restart) {
    best = Minimise(rows, gpus_per_node, best, step, all, 2000);
  }
  best_loss = Loss(rows, best, gpus_per_node);
  out.model = ModelOf(best, gpus_per_node);
  // Parameters at the floor of their range are zero to the model.
  for (double* p : {&out.model.a_c, &out.model.b_c, &out.model.a_r, &out.model.b_r, &out.model.a_n,
                    &out.model.b_n}) {
    if (*p < kFloorSeconds) *p = 0;
  }
  out.rms_log_error = std::sqrt(best_loss / double(rows.size()));
  return out;
}

absl::StatusOr<std::vector<TraceRow>> ReadPlacements(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFileToString(path, "placements file");
  if (!text.ok()) return text.status();
  absl::StatusOr<CsvTable> table = ParseCsv(*text);
  if (!table.ok()) return table.status();
  const std::optional<size_t> placement = table->Find("placement");
  const std::optional<size_t> batch = table->Find("local_bsz");
  const std::optional<size_t> step = table->Find("step_time");
  if (!placement || !batch || !step) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": needs the columns placement, local_bsz and step_time"));
  }
  std::vector<TraceRow> rows;
  for (size_t k = 0; k < table->rows.size(); ++k) {
    const std::vector<std::string>& r = table->rows[k];
    TraceRow row;
    const std::string& where = r[*placement];
    bool ok = !where.empty() && absl::SimpleAtod(r[*batch], &row.local_batch) &&
              absl::SimpleAtod(r[*step], &row.step_seconds) && row.local_batch > 0 &&
              row.step_seconds > 0;
    for (char c : where) {
      ok = ok && c >= '1' && c <= '9';
      row.replicas += uint32_t(c - '0');
      row.per_node = std::max(row.per_node, uint32_t(c - '0'));
    }
    if (!ok) {
      return absl::InvalidArgumentError(absl::StrCat(path, ":", table->line_numbers[k],
                                                     ": expected placement digits 1-9, a "
                                                     "positive local_bsz and step_time"));
    }
    row.nodes = uint32_t(where.size());
    rows.push_back(row);
  }
  return rows;
}

std::optional<std::string> SiaDataDirectory() {
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("RESCALE_SIA_DATA"); env && *env) candidates.push_back(env);
#ifdef RESCALE_SOURCE_DIR
  candidates.push_back(std::string(RESCALE_SOURCE_DIR) + "/../shared/data/sia");
#endif
  candidates.push_back("/work/shared/data/sia");
  for (const std::string& dir : candidates) {
    std::error_code error;
    if (std::filesystem::is_directory(dir + "/traces", error)) return dir;
  }
  return std::nullopt;
}

}  // namespace rescale::sim
