// Helpers shared by rescalectl's output files (tables.cc, describe.cc,
// plot.cc, yaml_json.cc, output.cc): timestamps, number and enum
// formatting, column widths, and the throughput curve walked by both the
// describe table and the plot. Internal to client/rescalectl: output.h is
// the interface the CLI and the tests use.
#ifndef RESCALE_CLIENT_RESCALECTL_OUTPUT_INTERNAL_H_
#define RESCALE_CLIENT_RESCALECTL_OUTPUT_INTERNAL_H_

#include <google/protobuf/timestamp.pb.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "rescale/v1/rescale.pb.h"

namespace rescale::cli {

// How every view shows an unset value.
inline constexpr std::string_view kNone = "<none>";

bool IsSet(const google::protobuf::Timestamp& ts);

absl::Time ToAbslTime(const google::protobuf::Timestamp& ts);

// "2024-05-01T12:00:00Z (5m ago)", or `unset_text`.
std::string FormatTimestamp(const google::protobuf::Timestamp& ts, absl::Time now,
                            std::string_view unset_text);

// printf-style formatting of one double (absl::StrFormat would add a link
// dependency for two call sites).
std::string FormatDouble(const char* format, double value);

std::string Rate(double samples_per_second);

// A sample count in SI form: "950", "1.2K", "3.0M", "1.5G".
std::string CompactCount(uint64_t count);

// The job's progress against spec.total_samples, "42%" (rounded down, so
// 100% means done), or "-" when the total is unknown: a count alone cannot
// say how far along the job is, and describe shows it.
std::string ProgressPercent(const v1::Job& job);

// The estimated remaining time as an age ("5m", "2h13m"), or "-" when unset.
std::string RemainingTime(const v1::JobStatus& status);

// The batch a goodput-planned recommendation asks for, as LOCAL or
// LOCALxSTEPS: LOCAL samples per worker per micro-step, STEPS micro-steps
// per optimizer step (accumulation_steps + 1), so the product is what each
// worker processes per optimizer step: "64", or "64x3" for accumulation_steps
// 2. "-" when the recommendation sets no batch (planned on throughput).
std::string RecommendedBatch(const v1::Recommendation& rec);

// Statistical efficiency as a percentage, "81%": of the recommended batch
// when the recommendation has one, else of the batch the job runs now
// (JobStatus), else "-".
std::string EfficiencyPercent(const v1::Job& job);

// allocated / total as a percentage, "75%". Servers from before
// Cluster.utilization existed send 0; the field's definition gives the same
// number from the counts.
std::string UtilizationPercent(const v1::Cluster& cluster);

// The relative optimality gap of the last plan, "0.25%".
std::string GapPercent(const v1::Cluster& cluster);

std::string OrNone(const std::string& s);

std::string YesNo(bool b);

// Strips `prefix` from an enum value name; the zero value reads "<none>".
std::string EnumDisplay(const std::string& name, std::string_view prefix);

// "Key:" rows with values aligned, as in kubectl describe.
class KeyValueSection {
 public:
  void Add(std::string key, std::string value) {
    rows_.emplace_back(std::move(key), std::move(value));
  }
  std::string Render(std::string_view indent) const {
    size_t key_width = 0;
    for (const auto& [key, value] : rows_) key_width = std::max(key_width, key.size() + 1);
    std::string text;
    for (const auto& [key, value] : rows_) {
      absl::StrAppend(&text, std::string(indent), key, ":",
                      std::string(key_width - key.size() - 1, ' '), "  ", value, "\n");
    }
    return text;
  }

 private:
  std::vector<std::pair<std::string, std::string>> rows_;
};

// The spec's prior points: what the user profiled, before any measurement.
std::string PriorPointsTable(const google::protobuf::RepeatedPtrField<v1::CurvePoint>& points,
                             std::string_view indent);

// Terminal columns a cell takes: UTF-8 continuation bytes take none, so a
// "±" header or cell does not push its column out of line.
size_t DisplayWidth(std::string_view text);

void StripTrailingBlanks(std::string& line);

// The server sends points in order of n, but nothing in the API promises
// it, and both the table and the plot walk the curve by n.
std::vector<const v1::CurvePoint*> PointsByReplicas(const v1::ThroughputCurve& curve);

bool HasObservedRate(const v1::CurvePoint& point);

// The predicted rate at one replica: the n = 1 point, or, when the curve
// starts higher, its first point scaled down linearly. 0 when unknown.
double OneReplicaRate(const std::vector<const v1::CurvePoint*>& points);

// Servers from before CurvePoint.efficiency existed send 0; the proto's
// definition of the field gives the same number from the rates.
double EfficiencyOf(const v1::CurvePoint& point, double one_replica_rate);

// Sizes the table marks; 0 when there is none (a suspended job runs no size).
uint32_t RecommendedReplicas(const v1::Job& job);

uint32_t CurrentReplicas(const v1::Job& job);

// A curve holds up to 256 sizes, too many to read. A long one keeps the
// rows a reader compares or acts on: every observed size (the only rows
// with an ERROR), the recommended and current sizes, the bounds, and powers
// of two for the shape in between.
std::vector<const v1::CurvePoint*> CurveTableRows(const v1::Job& job,
                                                  const std::vector<const v1::CurvePoint*>& points);

// "<- recommended", "<- current", both, or "".
std::string SizeMarker(uint32_t replicas, uint32_t recommended, uint32_t current);

// The prediction and its band half-width at a fractional n, linear between
// the neighbouring points; nullopt outside [first point, last point].
struct Prediction {
  double rate = 0;
  double uncertainty = 0;
};

std::optional<Prediction> PredictionAt(const std::vector<const v1::CurvePoint*>& points, double n);

// The plot area: `height` rows of `width` cells, row 0 at the bottom.
class Canvas {
 public:
  Canvas(int width, int height) : width_(width), rows_(height, std::string(width, ' ')) {}
  void Put(int column, int row, char mark) {
    if (column < 0 || column >= width_ || row < 0 || row >= height()) return;
    rows_[height() - 1 - row][column] = mark;
  }
  int height() const { return static_cast<int>(rows_.size()); }
  // Top row first.
  const std::vector<std::string>& rows() const { return rows_; }

 private:
  int width_;
  std::vector<std::string> rows_;
};

// About six ticks at round steps (1, 2, 5, 10, 20, 50, ...) between the
// first and the last size, which are ticks themselves.
std::vector<uint32_t> XTicks(uint32_t last);

}  // namespace rescale::cli

#endif  // RESCALE_CLIENT_RESCALECTL_OUTPUT_INTERNAL_H_
