// A small hand-written SVG line/area chart: axes with round-numbered ticks
// (linear, or logarithmic on x), polylines, filled polygons and a legend.
// rescale-sim draws its plots with it because no plotting library is
// available on the build machines; the output is plain SVG 1.1 that any
// browser and most Markdown viewers render.
#ifndef RESCALE_BENCH_SIM_SVG_H_
#define RESCALE_BENCH_SIM_SVG_H_

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace rescale::sim {

// A colour of a categorical palette (Tableau 10), cycling.
std::string_view PaletteColor(size_t index);

class SvgChart {
 public:
  struct Options {
    int width = 800;
    int height = 420;
    std::string title;
    std::string x_label;
    std::string y_label;
    bool log_x = false;         // x must be > 0 then
    bool legend_right = false;  // legend box in the top-right corner
  };
  SvgChart(Options options, double x_min, double x_max, double y_min, double y_max);

  // A line through `points` (data coordinates). `dash` is an SVG
  // stroke-dasharray ("" = solid).
  void Line(const std::vector<std::pair<double, double>>& points, std::string_view color,
            double stroke_width = 1.8, std::string_view dash = "");
  // A filled polygon (closed automatically).
  void Area(const std::vector<std::pair<double, double>>& points, std::string_view color,
            double opacity = 0.85);
  void LegendEntry(std::string label, std::string color, std::string dash = "");

  // The complete SVG document.
  std::string Render() const;
  // The chart as an SVG group shifted down by `y_offset` (for stacking).
  std::string RenderGroup(int y_offset) const;
  int width() const { return options_.width; }
  int height() const { return options_.height; }

 private:
  double X(double x) const;
  double Y(double y) const;
  std::string Points(const std::vector<std::pair<double, double>>& points) const;

  Options options_;
  double x_min_, x_max_, y_min_, y_max_;
  double left_ = 70, right_ = 20, top_ = 36, bottom_ = 48;
  std::string body_;
  std::vector<std::pair<std::string, std::pair<std::string, std::string>>> legend_;
};

// One SVG document with `charts` one below the other.
std::string StackVertically(const std::vector<SvgChart>& charts);

// Escapes &, <, > and quotes for SVG/XML text.
std::string XmlEscape(std::string_view text);

// Round tick values covering [min, max] (about `target` of them).
std::vector<double> NiceTicks(double min, double max, int target = 6);

}  // namespace rescale::sim

#endif  // RESCALE_BENCH_SIM_SVG_H_
