// The hand-written SVG chart (see svg.h).
#include "bench/sim/svg.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"

namespace rescale::sim {

std::string_view PaletteColor(size_t index) {
  static constexpr std::string_view kTableau10[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2",
                                                    "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
                                                    "#9c755f", "#bab0ac"};
  return kTableau10[index % std::size(kTableau10)];
}

std::string XmlEscape(std::string_view text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::vector<double> NiceTicks(double min, double max, int target) {
  std::vector<double> ticks;
  if (!(max > min)) return {min};
  const double raw = (max - min) / std::max(target, 1);
  const double magnitude = std::pow(10, std::floor(std::log10(raw)));
  double step = magnitude;
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0}) {
    step = m * magnitude;
    if (step >= raw) break;
  }
  for (double v = std::ceil(min / step) * step; v <= max + step * 1e-9; v += step) {
    ticks.push_back(std::abs(v) < step * 1e-9 ? 0 : v);
  }
  return ticks;
}

SvgChart::SvgChart(Options options, double x_min, double x_max, double y_min, double y_max)
    : options_(std::move(options)), x_min_(x_min), x_max_(x_max), y_min_(y_min), y_max_(y_max) {
  if (options_.log_x) {
    x_min_ = std::max(x_min_, 1e-9);
    x_max_ = std::max(x_max_, x_min_ * 10);
  }
  if (!(x_max_ > x_min_)) x_max_ = x_min_ + 1;
  if (!(y_max_ > y_min_)) y_max_ = y_min_ + 1;
}

double SvgChart::X(double x) const {
  const double plot = options_.width - left_ - right_;
  double f = 0;
  if (options_.log_x) {
    f = (std::log10(std::max(x, x_min_)) - std::log10(x_min_)) /
        (std::log10(x_max_) - std::log10(x_min_));
  } else {
    f = (x - x_min_) / (x_max_ - x_min_);
  }
  return left_ + std::clamp(f, 0.0, 1.0) * plot;
}

double SvgChart::Y(double y) const {
  const double plot = options_.height - top_ - bottom_;
  const double f = (y - y_min_) / (y_max_ - y_min_);
  return top_ + (1 - std::clamp(f, 0.0, 1.0)) * plot;
}

std::string SvgChart::Points(const std::vector<std::pair<double, double>>& points) const {
  std::string out;
  for (const auto& [x, y] : points) absl::StrAppendFormat(&out, "%.1f,%.1f ", X(x), Y(y));
  return out;
}

void SvgChart::Line(const std::vector<std::pair<double, double>>& points, std::string_view color,
                    double stroke_width, std::string_view dash) {
  if (points.empty()) return;
  absl::StrAppendFormat(
      &body_, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"%.1f\"%s points=\"%s\"/>\n",
      color, stroke_width, dash.empty() ? "" : absl::StrFormat(" stroke-dasharray=\"%s\"", dash),
      Points(points));
}

void SvgChart::Area(const std::vector<std::pair<double, double>>& points, std::string_view color,
                    double opacity) {
  if (points.size() < 3) return;
  absl::StrAppendFormat(
      &body_, "<polygon fill=\"%s\" fill-opacity=\"%.2f\" stroke=\"none\" points=\"%s\"/>\n", color,
      opacity, Points(points));
}

void SvgChart::LegendEntry(std::string label, std::string color, std::string dash) {
  legend_.push_back({std::move(label), {std::move(color), std::move(dash)}});
}

std::string SvgChart::Render() const {
  std::string out = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
      options_.width, options_.height, options_.width, options_.height);
  out += RenderGroup(0);
  out += "</svg>\n";
  return out;
}

std::string StackVertically(const std::vector<SvgChart>& charts) {
  int width = 0, height = 0;
  for (const SvgChart& c : charts) {
    width = std::max(width, c.width());
    height += c.height();
  }
  std::string out = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
      width, height, width, height);
  int y = 0;
  for (const SvgChart& c : charts) {
    out += c.RenderGroup(y);
    y += c.height();
  }
  out += "</svg>\n";
  return out;
}

std::string SvgChart::RenderGroup(int y_offset) const {
  const int w = options_.width, h = options_.height;
  std::string out = absl::StrFormat("<g transform=\"translate(0,%d)\">\n", y_offset);
  absl::StrAppendFormat(
      &out, "<text x=\"%d\" y=\"20\" text-anchor=\"middle\" font-size=\"15\">%s</text>\n", w / 2,
      XmlEscape(options_.title));
  // Grid and ticks.
  std::vector<double> xticks;
  if (options_.log_x) {
    for (double d = std::pow(10, std::floor(std::log10(x_min_))); d <= x_max_ * 1.0001; d *= 10) {
      if (d >= x_min_ * 0.9999) xticks.push_back(d);
    }
  } else {
    xticks = NiceTicks(x_min_, x_max_);
  }
  for (double x : xticks) {
    absl::StrAppendFormat(
        &out,
        "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e4e4e4\"/>\n"
        "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%g</text>\n",
        X(x), top_, X(x), h - bottom_, X(x), h - bottom_ + 16, x);
  }
  for (double y : NiceTicks(y_min_, y_max_)) {
    absl::StrAppendFormat(
        &out,
        "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e4e4e4\"/>\n"
        "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n",
        left_, Y(y), w - right_, Y(y), left_ - 6, Y(y) + 4, y);
  }
  out += body_;
  // Axes on top of the data.
  absl::StrAppendFormat(&out,
                        "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" "
                        "stroke=\"#444\"/>\n",
                        left_, top_, w - left_ - right_, h - top_ - bottom_);
  absl::StrAppendFormat(&out, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%s</text>\n",
                        left_ + (w - left_ - right_) / 2, h - 10, XmlEscape(options_.x_label));
  absl::StrAppendFormat(&out,
                        "<text x=\"16\" y=\"%.1f\" text-anchor=\"middle\" transform=\"rotate(-90 "
                        "16 %.1f)\">%s</text>\n",
                        top_ + (h - top_ - bottom_) / 2, top_ + (h - top_ - bottom_) / 2,
                        XmlEscape(options_.y_label));
  // Legend, top-left inside the plot, on a translucent box.
  if (!legend_.empty()) {
    size_t longest = 0;
    for (const auto& entry : legend_) longest = std::max(longest, entry.first.size());
    const double box_width = 40 + 7.0 * longest;
    const double x0 = options_.legend_right ? w - right_ - 10 - box_width : left_ + 10,
                 y0 = top_ + 8;
    absl::StrAppendFormat(
        &out,
        "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"white\" "
        "fill-opacity=\"0.85\" stroke=\"#ccc\"/>\n",
        x0, y0, box_width, 8 + 16.0 * legend_.size());
    for (size_t i = 0; i < legend_.size(); ++i) {
      const auto& [label, style] = legend_[i];
      const double y = y0 + 14 + 16.0 * i;
      absl::StrAppendFormat(
          &out,
          "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
          "stroke-width=\"3\"%s/>\n<text x=\"%.1f\" y=\"%.1f\">%s</text>\n",
          x0 + 6, y - 4, x0 + 28, y - 4, style.first,
          style.second.empty() ? "" : absl::StrFormat(" stroke-dasharray=\"%s\"", style.second),
          x0 + 34, y, XmlEscape(label));
    }
  }
  out += "</g>\n";
  return out;
}

}  // namespace rescale::sim
