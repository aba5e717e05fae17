// rescalectl's output helpers (declared in output_internal.h) and the small
// pieces of output.h: enum names, durations, status codes, job ids. The
// rest of output.h lives in yaml_json.cc, tables.cc, describe.cc, plot.cc.
#include "client/rescalectl/output.h"

#include <google/protobuf/timestamp.pb.h>
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <iterator>
#include <regex>
#include <set>
#include <stdexcept>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/rescalectl/output_internal.h"

namespace rescale::cli {

bool IsSet(const google::protobuf::Timestamp& ts) { return ts.seconds() != 0 || ts.nanos() != 0; }

absl::Time ToAbslTime(const google::protobuf::Timestamp& ts) {
  return absl::FromUnixSeconds(ts.seconds()) + absl::Nanoseconds(ts.nanos());
}

std::string FormatTimestamp(const google::protobuf::Timestamp& ts, absl::Time now,
                            std::string_view unset_text) {
  if (!IsSet(ts)) return std::string(unset_text);
  const absl::Time t = ToAbslTime(ts);
  return absl::StrCat(absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", t, absl::UTCTimeZone()), " (",
                      HumanDuration(now - t), " ago)");
}

std::string FormatDouble(const char* format, double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, format, value);
  return buffer;
}

std::string Rate(double samples_per_second) { return FormatDouble("%.1f", samples_per_second); }

std::string CompactCount(uint64_t count) {
  if (count < 1000) return absl::StrCat(count);
  static constexpr const char* kSuffixes[] = {"K", "M", "G", "T", "P", "E"};
  double value = static_cast<double>(count) / 1000;
  int i = 0;
  // 999.95K would print as "1000.0K": move up a unit before rounding does.
  while (value >= 999.95 && i + 1 < static_cast<int>(std::size(kSuffixes))) {
    value /= 1000;
    ++i;
  }
  return FormatDouble("%.1f", value) + kSuffixes[i];
}

std::string ProgressPercent(const v1::Job& job) {
  if (!job.spec().has_total_samples() || job.spec().total_samples() == 0) return "-";
  // A job planned on goodput counts its progress in samples at M0.
  const uint64_t done = job.status().has_progress_samples() ? job.status().progress_samples()
                                                            : job.status().samples_processed();
  const double fraction =
      static_cast<double>(done) / static_cast<double>(job.spec().total_samples());
  return absl::StrCat(static_cast<int>(std::floor(100 * std::min(fraction, 1.0))), "%");
}

std::string RemainingTime(const v1::JobStatus& status) {
  if (!status.has_estimated_remaining_seconds()) return "-";
  return HumanDuration(absl::Seconds(status.estimated_remaining_seconds()));
}

std::string RecommendedBatch(const v1::Recommendation& rec) {
  if (!rec.has_local_batch_size()) return "-";
  if (rec.accumulation_steps() == 0) return absl::StrCat(rec.local_batch_size());
  // Micro-steps, not the extra ones: "64x3" then multiplies out to the
  // samples per worker per optimizer step, as an "x" reads.
  return absl::StrCat(rec.local_batch_size(), "x", uint64_t{rec.accumulation_steps()} + 1);
}

std::string EfficiencyPercent(const v1::Job& job) {
  double efficiency = 0;
  if (job.recommendation().has_statistical_efficiency()) {
    efficiency = job.recommendation().statistical_efficiency();
  } else if (job.status().has_statistical_efficiency()) {
    efficiency = job.status().statistical_efficiency();
  } else {
    return "-";
  }
  return FormatDouble("%.0f%%", 100 * efficiency);
}

std::string UtilizationPercent(const v1::Cluster& cluster) {
  double utilization = cluster.utilization();
  if (utilization <= 0 && cluster.total_gpus() > 0) {
    utilization = static_cast<double>(cluster.allocated_gpus()) / cluster.total_gpus();
  }
  return FormatDouble("%.0f%%", 100 * utilization);
}

std::string GapPercent(const v1::Cluster& cluster) {
  return FormatDouble("%.2f%%", 100 * cluster.optimality_gap());
}

std::string OrNone(const std::string& s) { return s.empty() ? std::string(kNone) : s; }

std::string YesNo(bool b) { return b ? "true" : "false"; }

std::string EnumDisplay(const std::string& name, std::string_view prefix) {
  if (name.empty() || absl::EndsWith(name, "_UNSPECIFIED")) return std::string(kNone);
  if (name.compare(0, prefix.size(), prefix) == 0) return name.substr(prefix.size());
  return name;
}

std::string PriorPointsTable(const google::protobuf::RepeatedPtrField<v1::CurvePoint>& points,
                             std::string_view indent) {
  Table table({"REPLICAS", "SAMPLES/S", "UNCERTAINTY"});
  for (const auto& point : points) {
    table.AddRow({absl::StrCat(point.replicas()), Rate(point.samples_per_second()),
                  absl::StrCat("±", Rate(point.uncertainty()))});
  }
  return table.Render(indent);
}

size_t DisplayWidth(std::string_view text) {
  return static_cast<size_t>(std::count_if(text.begin(), text.end(), [](char c) {
    return (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  }));
}

void StripTrailingBlanks(std::string& line) {
  while (!line.empty() && line.back() == ' ') line.pop_back();
}

std::vector<const v1::CurvePoint*> PointsByReplicas(const v1::ThroughputCurve& curve) {
  std::vector<const v1::CurvePoint*> points;
  for (const auto& point : curve.points()) points.push_back(&point);
  std::stable_sort(points.begin(), points.end(),
                   [](const auto* a, const auto* b) { return a->replicas() < b->replicas(); });
  return points;
}

bool HasObservedRate(const v1::CurvePoint& point) {
  return point.observed() && std::isfinite(point.observed_samples_per_second()) &&
         point.observed_samples_per_second() > 0;
}

double OneReplicaRate(const std::vector<const v1::CurvePoint*>& points) {
  if (points.empty() || points.front()->replicas() == 0) return 0;
  const double rate = points.front()->samples_per_second() / points.front()->replicas();
  return std::isfinite(rate) && rate > 0 ? rate : 0;
}

double EfficiencyOf(const v1::CurvePoint& point, double one_replica_rate) {
  if (point.efficiency() > 0) return point.efficiency();
  if (one_replica_rate <= 0 || point.replicas() == 0) return 0;
  return point.samples_per_second() / (point.replicas() * one_replica_rate);
}

uint32_t RecommendedReplicas(const v1::Job& job) {
  if (!job.has_recommendation() || job.recommendation().suspend()) return 0;
  return job.recommendation().replicas();
}

uint32_t CurrentReplicas(const v1::Job& job) {
  return job.status().suspended() ? 0 : job.status().current_replicas();
}

std::vector<const v1::CurvePoint*> CurveTableRows(
    const v1::Job& job, const std::vector<const v1::CurvePoint*>& points) {
  if (points.size() <= static_cast<size_t>(kMaxCurveTableRows)) return points;
  std::set<uint32_t> wanted = {job.spec().min_replicas(),  job.spec().max_replicas(),
                               points.front()->replicas(), points.back()->replicas(),
                               RecommendedReplicas(job),   CurrentReplicas(job)};
  for (uint64_t n = 1; n <= points.back()->replicas(); n *= 2) {
    wanted.insert(static_cast<uint32_t>(n));
  }
  wanted.erase(0);  // "none" above, not a size
  std::vector<const v1::CurvePoint*> rows;
  for (const auto* point : points) {
    if (point->observed() || wanted.count(point->replicas()) > 0) rows.push_back(point);
  }
  return rows;
}

std::string SizeMarker(uint32_t replicas, uint32_t recommended, uint32_t current) {
  std::vector<std::string> names;
  if (replicas == recommended) names.emplace_back("recommended");
  if (replicas == current) names.emplace_back("current");
  if (names.empty()) return "";
  std::string marker = "<- " + names[0];
  for (size_t i = 1; i < names.size(); ++i) marker += ", " + names[i];
  return marker;
}

std::optional<Prediction> PredictionAt(const std::vector<const v1::CurvePoint*>& points, double n) {
  constexpr double kSlack = 1e-9;  // column-to-n arithmetic is not exact
  auto above = std::lower_bound(points.begin(), points.end(), n - kSlack,
                                [](const auto* point, double x) { return point->replicas() < x; });
  if (above == points.end()) return std::nullopt;
  const v1::CurvePoint& hi = **above;
  if (std::abs(hi.replicas() - n) <= kSlack) {
    return Prediction{hi.samples_per_second(), hi.uncertainty()};
  }
  if (above == points.begin()) return std::nullopt;
  const v1::CurvePoint& lo = **std::prev(above);
  const double t = (n - lo.replicas()) / (static_cast<double>(hi.replicas()) - lo.replicas());
  return Prediction{
      lo.samples_per_second() + t * (hi.samples_per_second() - lo.samples_per_second()),
      lo.uncertainty() + t * (hi.uncertainty() - lo.uncertainty())};
}

std::vector<uint32_t> XTicks(uint32_t last) {
  uint64_t step = 1;
  for (uint64_t decade = 1; (last - 1) / step > 6; decade *= 10) {
    for (uint64_t mantissa : {1, 2, 5}) {
      step = mantissa * decade;
      if ((last - 1) / step <= 6) break;
    }
  }
  std::vector<uint32_t> ticks = {1};
  if (last > 1) ticks.push_back(last);
  // A tick within half a step of the last point would crowd its label.
  for (uint64_t n = step; n < last && 2 * (last - n) >= step; n += step) {
    if (n > 1) ticks.push_back(static_cast<uint32_t>(n));
  }
  return ticks;
}

// ------------------------------------------------------------- pieces --

std::string ActionName(v1::Action action) {
  return EnumDisplay(v1::Action_Name(action), "ACTION_");
}

std::string ConstraintName(v1::BindingConstraint constraint) {
  return EnumDisplay(v1::BindingConstraint_Name(constraint), "BINDING_CONSTRAINT_");
}

std::string EventTypeName(v1::RecommendationEvent::Type type) {
  return EnumDisplay(v1::RecommendationEvent::Type_Name(type), "TYPE_");
}

std::string HumanDuration(absl::Duration duration) {
  // Same thresholds as kubectl (k8s.io/apimachinery/pkg/util/duration), so
  // ages read the way operators are used to.
  const int64_t seconds = absl::ToInt64Seconds(duration);
  if (seconds < -1) return "<invalid>";
  if (seconds < 0) return "0s";
  if (seconds < 60 * 2) return absl::StrCat(seconds, "s");
  const int64_t minutes = seconds / 60;
  if (minutes < 10) {
    const int64_t s = seconds % 60;
    return s == 0 ? absl::StrCat(minutes, "m") : absl::StrCat(minutes, "m", s, "s");
  }
  if (minutes < 60 * 3) return absl::StrCat(minutes, "m");
  const int64_t hours = minutes / 60;
  if (hours < 8) {
    const int64_t m = minutes % 60;
    return m == 0 ? absl::StrCat(hours, "h") : absl::StrCat(hours, "h", m, "m");
  }
  if (hours < 48) return absl::StrCat(hours, "h");
  if (hours < 24 * 8) {
    const int64_t h = hours % 24;
    return h == 0 ? absl::StrCat(hours / 24, "d") : absl::StrCat(hours / 24, "d", h, "h");
  }
  if (hours < 24 * 365 * 2) return absl::StrCat(hours / 24, "d");
  if (hours < 24 * 365 * 8) {
    const int64_t d = (hours / 24) % 365;
    return d == 0 ? absl::StrCat(hours / 24 / 365, "y")
                  : absl::StrCat(hours / 24 / 365, "y", d, "d");
  }
  return absl::StrCat(hours / 24 / 365, "y");
}

std::string StatusCodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
      return "OK";
    case grpc::StatusCode::CANCELLED:
      return "Cancelled";
    case grpc::StatusCode::UNKNOWN:
      return "Unknown";
    case grpc::StatusCode::INVALID_ARGUMENT:
      return "InvalidArgument";
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "DeadlineExceeded";
    case grpc::StatusCode::NOT_FOUND:
      return "NotFound";
    case grpc::StatusCode::ALREADY_EXISTS:
      return "AlreadyExists";
    case grpc::StatusCode::PERMISSION_DENIED:
      return "PermissionDenied";
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return "ResourceExhausted";
    case grpc::StatusCode::FAILED_PRECONDITION:
      return "FailedPrecondition";
    case grpc::StatusCode::ABORTED:
      return "Aborted";
    case grpc::StatusCode::OUT_OF_RANGE:
      return "OutOfRange";
    case grpc::StatusCode::UNIMPLEMENTED:
      return "Unimplemented";
    case grpc::StatusCode::INTERNAL:
      return "Internal";
    case grpc::StatusCode::UNAVAILABLE:
      return "Unavailable";
    case grpc::StatusCode::DATA_LOSS:
      return "DataLoss";
    case grpc::StatusCode::UNAUTHENTICATED:
      return "Unauthenticated";
    default:
      return absl::StrCat("Code", static_cast<int>(code));
  }
}

std::pair<std::string, std::string> SplitJobId(std::string_view job_id) {
  const size_t slash = job_id.find('/');
  if (slash == std::string_view::npos) return {"", std::string(job_id)};
  return {std::string(job_id.substr(0, slash)), std::string(job_id.substr(slash + 1))};
}

}  // namespace rescale::cli
