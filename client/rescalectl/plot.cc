// The ASCII plot of a throughput curve (see output.h): predicted rate with
// its uncertainty band, observed points and linear scaling from n=1.
#include <google/protobuf/timestamp.pb.h>
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <regex>
#include <set>
#include <stdexcept>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/rescalectl/output.h"
#include "client/rescalectl/output_internal.h"

namespace rescale::cli {

std::string RenderCurvePlot(const v1::ThroughputCurve& curve, int width, int height) {
  if (curve.points().empty()) return "";
  width = std::max(width, 2);
  height = std::max(height, 2);
  const std::vector<const v1::CurvePoint*> points = PointsByReplicas(curve);

  const uint32_t last = std::max<uint32_t>(points.back()->replicas(), 1);
  // A one-point curve still gets an axis of some length to divide by.
  const double span = std::max(static_cast<double>(last) - 1, 1.0);
  auto column_of = [&](double n) {
    return static_cast<int>(std::lround((n - 1) * (width - 1) / span));
  };
  // A column that holds a whole n shows that size's own prediction, so a
  // '*' and an 'o' in one column compare the same size, as the table does.
  auto n_at_column = [&](int column) {
    const double n = 1 + column * span / (width - 1);
    const double whole = std::round(n);
    return column_of(whole) == column ? whole : n;
  };

  double y_max = 0;
  for (const v1::CurvePoint* point : points) {
    const double top = point->samples_per_second() + point->uncertainty();
    if (std::isfinite(top)) y_max = std::max(y_max, top);
    if (HasObservedRate(*point)) y_max = std::max(y_max, point->observed_samples_per_second());
  }
  if (!(y_max > 0)) y_max = 1;  // an all-zero curve: a flat line at the bottom
  // Row from the bottom; nullopt for what cannot be drawn (NaN, infinities).
  auto row_of = [&](double value) -> std::optional<int> {
    if (!std::isfinite(value)) return std::nullopt;
    const double clamped = std::clamp(value, 0.0, y_max);
    return std::min(height - 1, static_cast<int>(std::floor(clamped / y_max * height)));
  };

  Canvas canvas(width, height);
  // Linear scaling from the 1-replica rate: the gap between it and the
  // prediction is what adding workers loses. Clipped rather than rescaled,
  // so it never squashes the curve itself.
  if (const double one_replica_rate = OneReplicaRate(points); one_replica_rate > 0) {
    for (int column = 0; column < width; ++column) {
      const double linear = one_replica_rate * n_at_column(column);
      if (linear > y_max) break;
      if (auto row = row_of(linear)) canvas.Put(column, *row, '/');
    }
  }
  for (int column = 0; column < width; ++column) {
    const std::optional<Prediction> prediction = PredictionAt(points, n_at_column(column));
    if (!prediction) continue;
    const auto low = row_of(prediction->rate - prediction->uncertainty);
    const auto high = row_of(prediction->rate + prediction->uncertainty);
    if (low && high) {
      for (int row = *low; row <= *high; ++row) canvas.Put(column, row, ':');
    }
    if (auto row = row_of(prediction->rate)) canvas.Put(column, *row, '*');
  }
  for (const v1::CurvePoint* point : points) {
    if (!HasObservedRate(*point)) continue;
    if (auto row = row_of(point->observed_samples_per_second())) {
      canvas.Put(column_of(point->replicas()), *row, 'o');
    }
  }

  const std::string top_label = Rate(y_max);
  const size_t label_width = top_label.size();
  auto pad_left = [&](const std::string& label) {
    return std::string(label_width - label.size(), ' ') + label;
  };

  // Tick labels centred under their column and kept inside the axis; one
  // that would touch a label already placed is dropped, and the ends are
  // placed first so they always show.
  std::string tick_labels(static_cast<size_t>(width) + 16, ' ');
  std::string axis(static_cast<size_t>(width), '-');
  for (const uint32_t tick : XTicks(last)) {
    const std::string label = absl::StrCat(tick);
    const int column = column_of(tick);
    const int length = static_cast<int>(label.size());
    const int start = std::max(0, std::min(column - (length - 1) / 2, width - length));
    const int from = std::max(0, start - 1);
    const int to = start + length;  // one past the label: keeps a gap
    if (tick_labels.find_first_not_of(' ', from) < static_cast<size_t>(to + 1)) continue;
    tick_labels.replace(static_cast<size_t>(start), label.size(), label);
    // The corner already marks column 0; "++" would read as a glitch.
    if (column > 0) axis[static_cast<size_t>(column)] = '+';
  }
  StripTrailingBlanks(tick_labels);

  std::string text = "samples/s\n";
  for (int i = 0; i < canvas.height(); ++i) {
    std::string line = pad_left(i == 0 ? top_label : "") + " |" + canvas.rows()[i];
    StripTrailingBlanks(line);
    text += line + "\n";
  }
  text += pad_left("0") + " +" + axis + "\n";
  text += std::string(label_width + 2, ' ') + tick_labels + "  n\n";
  text += "* predicted  : uncertainty  o observed  / linear scaling from n=1\n";
  return text;
}

}  // namespace rescale::cli
