// Text formats of rescalectl: tables, the describe view, the watch table,
// json/yaml rendering of messages, and YAML→JSON for manifests. See
// output.h for what each function promises.
#include "client/rescalectl/output.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <regex>
#include <set>
#include <stdexcept>
#include <utility>

#include <google/protobuf/timestamp.pb.h>
#include <google/protobuf/util/json_util.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace rescale::cli {
namespace {

constexpr std::string_view kNone = "<none>";

// ------------------------------------------------------ scalar inference --

// YAML 1.2 core schema for plain scalars. Deliberately not YAML 1.1: `yes`,
// `on` and `NO` stay strings, so a namespace called "no" is not a bool.
bool IsYamlNull(std::string_view s) {
  return s.empty() || s == "~" || s == "null" || s == "Null" || s == "NULL";
}

std::optional<bool> AsYamlBool(std::string_view s) {
  if (s == "true" || s == "True" || s == "TRUE") return true;
  if (s == "false" || s == "False" || s == "FALSE") return false;
  return std::nullopt;
}

// An integer literal as JSON: signed when it fits int64, unsigned when only
// uint64 holds it. Larger literals stay strings; protobuf's JSON parser then
// reports the range error against the field, which is the useful message.
std::optional<nlohmann::json> AsYamlInteger(std::string_view s) {
  static const std::regex kDecimal("[-+]?[0-9]+");
  static const std::regex kOctal("0o[0-7]+");
  static const std::regex kHex("0x[0-9a-fA-F]+");
  const std::string text(s);
  int base = 10;
  std::string_view digits = s;
  if (std::regex_match(text, kOctal)) {
    base = 8;
    digits.remove_prefix(2);
  } else if (std::regex_match(text, kHex)) {
    base = 16;
    digits.remove_prefix(2);
  } else if (!std::regex_match(text, kDecimal)) {
    return std::nullopt;
  }
  // from_chars accepts '-' but not '+'.
  if (!digits.empty() && digits.front() == '+') digits.remove_prefix(1);
  const char* end = digits.data() + digits.size();
  int64_t signed_value = 0;
  if (auto [ptr, ec] = std::from_chars(digits.data(), end, signed_value, base);
      ec == std::errc() && ptr == end) {
    return nlohmann::json(signed_value);
  }
  uint64_t unsigned_value = 0;
  if (auto [ptr, ec] = std::from_chars(digits.data(), end, unsigned_value, base);
      ec == std::errc() && ptr == end) {
    return nlohmann::json(unsigned_value);
  }
  return nlohmann::json(std::string(s));
}

std::optional<nlohmann::json> AsYamlFloat(std::string_view s) {
  static const std::regex kFloat(R"([-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?)");
  static const std::regex kInfinity(R"([-+]?\.(inf|Inf|INF))");
  static const std::regex kNotANumber(R"(\.(nan|NaN|NAN))");
  const std::string text(s);
  // JSON has no infinity or NaN; proto JSON spells them as these strings.
  if (std::regex_match(text, kInfinity)) {
    return nlohmann::json(text.front() == '-' ? "-Infinity" : "Infinity");
  }
  if (std::regex_match(text, kNotANumber)) return nlohmann::json("NaN");
  if (!std::regex_match(text, kFloat)) return std::nullopt;
  return nlohmann::json(std::strtod(text.c_str(), nullptr));
}

nlohmann::json InferPlainScalar(const std::string& s) {
  if (IsYamlNull(s)) return nullptr;
  if (auto b = AsYamlBool(s)) return *b;
  if (auto i = AsYamlInteger(s)) return *i;
  if (auto f = AsYamlFloat(s)) return *f;
  return s;
}

// Whether a plain scalar with this text would read back as something other
// than this string, so that the emitter has to quote it.
bool NeedsQuotesToStayString(const std::string& s) {
  // ".inf" infers to the string "Infinity": a string, but not this one.
  const nlohmann::json read_back = InferPlainScalar(s);
  return !read_back.is_string() || read_back != s;
}

// ------------------------------------------------------------- emitting --

void EmitJson(YAML::Emitter& emitter, const nlohmann::ordered_json& value) {
  switch (value.type()) {
    case nlohmann::ordered_json::value_t::null:
      emitter << YAML::Null;
      break;
    case nlohmann::ordered_json::value_t::boolean:
      emitter << value.get<bool>();
      break;
    case nlohmann::ordered_json::value_t::number_integer:
      emitter << value.get<int64_t>();
      break;
    case nlohmann::ordered_json::value_t::number_unsigned:
      emitter << value.get<uint64_t>();
      break;
    case nlohmann::ordered_json::value_t::number_float:
      // nlohmann prints the shortest text that reads back to the same
      // double; yaml-cpp's own double output pads to a fixed precision.
      emitter << value.dump();
      break;
    case nlohmann::ordered_json::value_t::string: {
      const auto& s = value.get_ref<const std::string&>();
      if (NeedsQuotesToStayString(s)) emitter << YAML::DoubleQuoted;
      emitter << s;
      break;
    }
    case nlohmann::ordered_json::value_t::array:
      if (value.empty()) emitter << YAML::Flow;
      emitter << YAML::BeginSeq;
      for (const auto& element : value) EmitJson(emitter, element);
      emitter << YAML::EndSeq;
      break;
    case nlohmann::ordered_json::value_t::object:
      if (value.empty()) emitter << YAML::Flow;
      emitter << YAML::BeginMap;
      for (const auto& [key, element] : value.items()) {
        emitter << YAML::Key;
        if (NeedsQuotesToStayString(key)) emitter << YAML::DoubleQuoted;
        emitter << key << YAML::Value;
        EmitJson(emitter, element);
      }
      emitter << YAML::EndMap;
      break;
    default:  // binary and discarded never come out of a JSON parse.
      emitter << YAML::Null;
      break;
  }
}

// ------------------------------------------------------------ timestamps --

bool IsSet(const google::protobuf::Timestamp& ts) {
  return ts.seconds() != 0 || ts.nanos() != 0;
}

absl::Time ToAbslTime(const google::protobuf::Timestamp& ts) {
  return absl::FromUnixSeconds(ts.seconds()) + absl::Nanoseconds(ts.nanos());
}

// "2024-05-01T12:00:00Z (5m ago)", or `unset_text`.
std::string FormatTimestamp(const google::protobuf::Timestamp& ts, absl::Time now,
                            std::string_view unset_text) {
  if (!IsSet(ts)) return std::string(unset_text);
  const absl::Time t = ToAbslTime(ts);
  return absl::StrCat(absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", t, absl::UTCTimeZone()),
                      " (", HumanDuration(now - t), " ago)");
}

// printf-style formatting of one double (absl::StrFormat would add a link
// dependency for two call sites).
std::string FormatDouble(const char* format, double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, format, value);
  return buffer;
}

std::string Rate(double samples_per_second) { return FormatDouble("%.1f", samples_per_second); }

// allocated / total as a percentage, "75%". Servers from before
// Cluster.utilization existed send 0; the field's definition gives the same
// number from the counts.
std::string UtilizationPercent(const v1::Cluster& cluster) {
  double utilization = cluster.utilization();
  if (utilization <= 0 && cluster.total_gpus() > 0) {
    utilization = static_cast<double>(cluster.allocated_gpus()) / cluster.total_gpus();
  }
  return FormatDouble("%.0f%%", 100 * utilization);
}

// The relative optimality gap of the last plan, "0.25%".
std::string GapPercent(const v1::Cluster& cluster) {
  return FormatDouble("%.2f%%", 100 * cluster.optimality_gap());
}

std::string OrNone(const std::string& s) { return s.empty() ? std::string(kNone) : s; }

std::string YesNo(bool b) { return b ? "true" : "false"; }

// Strips `prefix` from an enum value name; the zero value reads "<none>".
std::string EnumDisplay(const std::string& name, std::string_view prefix) {
  if (name.empty() || absl::EndsWith(name, "_UNSPECIFIED")) return std::string(kNone);
  if (name.compare(0, prefix.size(), prefix) == 0) return name.substr(prefix.size());
  return name;
}

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
      absl::StrAppend(&text, std::string(indent), key, ":", std::string(key_width - key.size() - 1, ' '),
                      "  ", value, "\n");
    }
    return text;
  }

 private:
  std::vector<std::pair<std::string, std::string>> rows_;
};

// The spec's prior points: what the user profiled, before any measurement.
std::string PriorPointsTable(const google::protobuf::RepeatedPtrField<v1::CurvePoint>& points,
                             std::string_view indent) {
  Table table({"REPLICAS", "SAMPLES/S", "UNCERTAINTY"});
  for (const auto& point : points) {
    table.AddRow({absl::StrCat(point.replicas()), Rate(point.samples_per_second()),
                  absl::StrCat("±", Rate(point.uncertainty()))});
  }
  return table.Render(indent);
}

// Terminal columns a cell takes: UTF-8 continuation bytes take none, so a
// "±" header or cell does not push its column out of line.
size_t DisplayWidth(std::string_view text) {
  return static_cast<size_t>(std::count_if(text.begin(), text.end(), [](char c) {
    return (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  }));
}

void StripTrailingBlanks(std::string& line) {
  while (!line.empty() && line.back() == ' ') line.pop_back();
}

// ------------------------------------------------------ throughput curve --

// The server sends points in order of n, but nothing in the API promises
// it, and both the table and the plot walk the curve by n.
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

// The predicted rate at one replica: the n = 1 point, or, when the curve
// starts higher, its first point scaled down linearly. 0 when unknown.
double OneReplicaRate(const std::vector<const v1::CurvePoint*>& points) {
  if (points.empty() || points.front()->replicas() == 0) return 0;
  const double rate = points.front()->samples_per_second() / points.front()->replicas();
  return std::isfinite(rate) && rate > 0 ? rate : 0;
}

// Servers from before CurvePoint.efficiency existed send 0; the proto's
// definition of the field gives the same number from the rates.
double EfficiencyOf(const v1::CurvePoint& point, double one_replica_rate) {
  if (point.efficiency() > 0) return point.efficiency();
  if (one_replica_rate <= 0 || point.replicas() == 0) return 0;
  return point.samples_per_second() / (point.replicas() * one_replica_rate);
}

// Sizes the table marks; 0 when there is none (a suspended job runs no size).
uint32_t RecommendedReplicas(const v1::Job& job) {
  if (!job.has_recommendation() || job.recommendation().suspend()) return 0;
  return job.recommendation().replicas();
}

uint32_t CurrentReplicas(const v1::Job& job) {
  return job.status().suspended() ? 0 : job.status().current_replicas();
}

// A curve holds up to 256 sizes, too many to read. A long one keeps the
// rows a reader compares or acts on: every observed size (the only rows
// with an ERROR), the recommended and current sizes, the bounds, and powers
// of two for the shape in between.
std::vector<const v1::CurvePoint*> CurveTableRows(
    const v1::Job& job, const std::vector<const v1::CurvePoint*>& points) {
  if (points.size() <= static_cast<size_t>(kMaxCurveTableRows)) return points;
  std::set<uint32_t> wanted = {job.spec().min_replicas(), job.spec().max_replicas(),
                               points.front()->replicas(), points.back()->replicas(),
                               RecommendedReplicas(job), CurrentReplicas(job)};
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

// "<- recommended", "<- current", both, or "".
std::string SizeMarker(uint32_t replicas, uint32_t recommended, uint32_t current) {
  std::vector<std::string> names;
  if (replicas == recommended) names.emplace_back("recommended");
  if (replicas == current) names.emplace_back("current");
  if (names.empty()) return "";
  std::string marker = "<- " + names[0];
  for (size_t i = 1; i < names.size(); ++i) marker += ", " + names[i];
  return marker;
}

// The prediction and its band half-width at a fractional n, linear between
// the neighbouring points; nullopt outside [first point, last point].
struct Prediction {
  double rate = 0;
  double uncertainty = 0;
};
std::optional<Prediction> PredictionAt(const std::vector<const v1::CurvePoint*>& points,
                                       double n) {
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

}  // namespace

std::optional<OutputFormat> ParseOutputFormat(std::string_view name) {
  if (name == "table") return OutputFormat::kTable;
  if (name == "json") return OutputFormat::kJson;
  if (name == "yaml") return OutputFormat::kYaml;
  return std::nullopt;
}

// ---------------------------------------------------------- json / yaml --

std::string MessageToJson(const google::protobuf::Message& message, bool pretty) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = false;
  options.always_print_primitive_fields = true;
  options.always_print_enums_as_ints = false;
  options.preserve_proto_field_names = false;
  std::string json;
  // Printing a well-formed message cannot fail (no Any with unknown types in
  // this API); an empty object is the safe fallback if it ever does.
  if (!google::protobuf::util::MessageToJsonString(message, &json, options).ok()) return "{}";
  if (!pretty) return json;
  // protobuf indents by one space; re-indent by two (as kubectl and jq do),
  // keeping field order. Numbers keep their text: nlohmann prints doubles in
  // the shortest form that reads back exactly.
  return nlohmann::ordered_json::parse(json).dump(
      2, ' ', /*ensure_ascii=*/false, nlohmann::ordered_json::error_handler_t::replace);
}

std::string JsonToYaml(const nlohmann::ordered_json& value) {
  YAML::Emitter emitter;
  emitter.SetIndent(2);
  emitter << YAML::Block;
  EmitJson(emitter, value);
  return emitter.c_str();
}

std::string MessageToYaml(const google::protobuf::Message& message) {
  return JsonToYaml(nlohmann::ordered_json::parse(MessageToJson(message, /*pretty=*/false)));
}

void PrintMessage(const google::protobuf::Message& message, OutputFormat format,
                  std::ostream& out, bool document_marker) {
  if (format == OutputFormat::kYaml) {
    if (document_marker) out << "---\n";
    out << MessageToYaml(message) << "\n";
  } else {
    out << MessageToJson(message, /*pretty=*/true) << "\n";
  }
}

nlohmann::json YamlToJson(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Undefined:
    case YAML::NodeType::Null:
      return nullptr;
    case YAML::NodeType::Scalar: {
      // "!" marks a quoted scalar (and the non-specific tag); quoting is how
      // a manifest says "this is a string", so no inference.
      const std::string& tag = node.Tag();
      if (tag == "!" || tag == "tag:yaml.org,2002:str") return node.Scalar();
      return InferPlainScalar(node.Scalar());
    }
    case YAML::NodeType::Sequence: {
      nlohmann::json array = nlohmann::json::array();
      for (const auto& element : node) array.push_back(YamlToJson(element));
      return array;
    }
    case YAML::NodeType::Map: {
      nlohmann::json object = nlohmann::json::object();
      for (const auto& entry : node) {
        const YAML::Node& key = entry.first;
        if (!key.IsScalar()) {
          throw std::invalid_argument(
              absl::StrCat("line ", key.Mark().line + 1, ": map keys must be plain strings"));
        }
        // yaml-cpp keeps duplicate keys; JSON would silently keep the last,
        // hiding a copy-paste mistake.
        if (object.contains(key.Scalar())) {
          throw std::invalid_argument(
              absl::StrCat("line ", key.Mark().line + 1, ": duplicate key \"", key.Scalar(), "\""));
        }
        object[key.Scalar()] = YamlToJson(entry.second);
      }
      return object;
    }
  }
  return nullptr;
}

// ---------------------------------------------------------------- tables --

Table::Table(std::vector<std::string> headers) : headers_(std::move(headers)) {}

void Table::AddRow(std::vector<std::string> cells) {
  cells.resize(headers_.size());
  rows_.push_back(std::move(cells));
}

std::string Table::Render(std::string_view indent) const {
  std::vector<size_t> widths(headers_.size());
  for (size_t c = 0; c < headers_.size(); ++c) {
    widths[c] = DisplayWidth(headers_[c]);
    for (const auto& row : rows_) widths[c] = std::max(widths[c], DisplayWidth(row[c]));
  }
  auto render_line = [&](const std::vector<std::string>& cells) {
    std::string line(indent);
    for (size_t c = 0; c < cells.size(); ++c) {
      line += cells[c];
      if (c + 1 < cells.size()) line += std::string(widths[c] - DisplayWidth(cells[c]) + 2, ' ');
    }
    // A trailing empty cell would leave blanks at the end of the line.
    StripTrailingBlanks(line);
    return line + "\n";
  };
  std::string text = render_line(headers_);
  for (const auto& row : rows_) text += render_line(row);
  return text;
}

std::string FormatJobsTable(const google::protobuf::RepeatedPtrField<v1::Job>& jobs,
                            absl::Time now) {
  // The first eleven columns are a contract with scripts; new ones go last.
  Table table({"NAMESPACE", "NAME", "MIN", "MAX", "GPUS/REPLICA", "PRIORITY", "POLICY",
               "CURRENT", "RECOMMENDED", "ACTION", "AGE", "GPUS", "STATE", "QUEUE"});
  for (const auto& job : jobs) {
    const auto& spec = job.spec();
    const auto& status = job.status();
    auto [ns, name] = SplitJobId(spec.job_id());
    // An empty spec policy means "the server's default"; the recommendation
    // names the policy that actually decided.
    std::string policy = spec.policy();
    if (policy.empty()) policy = job.recommendation().policy();
    if (policy.empty()) policy = "<default>";
    const bool has_recommendation = job.has_recommendation();
    table.AddRow({
        ns,
        name,
        absl::StrCat(spec.min_replicas()),
        absl::StrCat(spec.max_replicas()),
        absl::StrCat(spec.has_gpus_per_replica() ? spec.gpus_per_replica() : 1),
        absl::StrCat(spec.priority()),
        policy,
        status.suspended() ? "suspended" : absl::StrCat(status.current_replicas()),
        has_recommendation ? absl::StrCat(job.recommendation().replicas()) : std::string(kNone),
        has_recommendation ? ActionName(job.recommendation().action()) : std::string(kNone),
        IsSet(status.registered_at())
            ? HumanDuration(now - ToAbslTime(status.registered_at()))
            : std::string("<unknown>"),
        has_recommendation ? absl::StrCat(job.recommendation().gpus()) : std::string(kNone),
        JobState(job),
        // 0 means "not queued", which a dash says more plainly than a zero.
        job.recommendation().queue_position() == 0
            ? "-"
            : absl::StrCat(job.recommendation().queue_position()),
    });
  }
  return table.Render();
}

std::string JobState(const v1::Job& job) {
  if (!job.has_recommendation()) return "Pending";
  const uint32_t recommended = RecommendedReplicas(job);
  const uint32_t current = CurrentReplicas(job);
  if (recommended > 0) return current > 0 ? "Running" : "Starting";
  return job.status().suspended() ? "Suspended" : "Waiting";
}

std::string FormatClusterSummary(const v1::Cluster& cluster) {
  std::string text = absl::StrCat("Cluster: ", cluster.allocated_gpus());
  if (cluster.capacity_known()) {
    absl::StrAppend(&text, "/", cluster.total_gpus(), " GPUs allocated (",
                    UtilizationPercent(cluster), ")");
  } else {
    absl::StrAppend(&text, " GPUs allocated (capacity unknown)");
  }
  absl::StrAppend(&text, ", ", cluster.waiting_jobs(),
                  cluster.waiting_jobs() == 1 ? " job" : " jobs", " waiting; plan gap ",
                  GapPercent(cluster));
  return text;
}

// The cells of a recommendation row, shared by `get recommendations` and
// `watch` so the two tables always agree.
static std::vector<std::string> RecommendationCells(const v1::Recommendation& rec) {
  auto [ns, name] = SplitJobId(rec.job_id());
  return {
      ns,
      name,
      absl::StrCat(rec.replicas()),
      ActionName(rec.action()),
      absl::StrCat(rec.generation()),
      ConstraintName(rec.binding_constraint()),
      // 0 means "running", which a dash says more plainly than a zero.
      rec.queue_position() == 0 ? "-" : absl::StrCat(rec.queue_position()),
      OrNone(rec.reason()),
  };
}

std::string FormatRecommendationsTable(
    const google::protobuf::RepeatedPtrField<v1::Recommendation>& recommendations) {
  Table table({"NAMESPACE", "NAME", "REPLICAS", "ACTION", "GENERATION", "CONSTRAINT", "QUEUE",
               "REASON"});
  for (const auto& rec : recommendations) table.AddRow(RecommendationCells(rec));
  return table.Render();
}

std::string DescribeJob(const v1::Job& job, absl::Time now) {
  const auto& spec = job.spec();
  const auto& status = job.status();
  auto [ns, name] = SplitJobId(spec.job_id());
  std::string text;

  KeyValueSection identity;
  identity.Add("Name", name);
  identity.Add("Namespace", OrNone(ns));
  identity.Add("Job ID", spec.job_id());
  text += identity.Render("");

  // Unset optional fields show the server-side default they stand for.
  KeyValueSection spec_section;
  spec_section.Add("Min Replicas", absl::StrCat(spec.min_replicas()));
  spec_section.Add("Max Replicas", absl::StrCat(spec.max_replicas()));
  spec_section.Add("GPUs Per Replica", spec.has_gpus_per_replica()
                                           ? absl::StrCat(spec.gpus_per_replica())
                                           : "1 (default)");
  spec_section.Add("Priority", absl::StrCat(spec.priority()));
  spec_section.Add("Preemptible",
                   spec.has_preemptible() ? YesNo(spec.preemptible()) : "true (default)");
  spec_section.Add("Restart Cost", spec.has_restart_cost_seconds()
                                       ? FormatDouble("%gs", spec.restart_cost_seconds())
                                       : "60s (default)");
  spec_section.Add("Local Batch Size", absl::StrCat(spec.local_batch_size()));
  spec_section.Add("Policy", spec.policy().empty() ? "<server default>" : spec.policy());
  spec_section.Add("Prior Points", spec.prior().empty() ? std::string(kNone)
                                                        : absl::StrCat(spec.prior_size()));
  text += "Spec:\n" + spec_section.Render("  ");
  if (!spec.prior().empty()) {
    text += PriorPointsTable(spec.prior(), "    ");
  }

  KeyValueSection status_section;
  status_section.Add("Current Replicas", absl::StrCat(status.current_replicas()));
  status_section.Add("Suspended", YesNo(status.suspended()));
  status_section.Add("Last Applied Generation", absl::StrCat(status.last_applied_generation()));
  status_section.Add("Last Applied At", FormatTimestamp(status.last_applied_at(), now, "<never>"));
  status_section.Add("Registered At", FormatTimestamp(status.registered_at(), now, "<unknown>"));
  status_section.Add("Samples Accepted", absl::StrCat(status.samples_accepted()));
  text += "Status:\n" + status_section.Render("  ");

  text += "Pods:\n";
  if (job.pods().empty()) {
    text += "  <none>\n";
  } else {
    Table pods({"POD", "WORLD SIZE", "STEP TIME", "SAMPLES", "LAST SEEN", "STRAGGLER"});
    for (const auto& pod : job.pods()) {
      pods.AddRow({
          pod.pod(),
          absl::StrCat(pod.world_size()),
          FormatDouble("%.3fs", pod.recent_step_seconds()),
          absl::StrCat(pod.sample_count()),
          IsSet(pod.last_seen()) ? HumanDuration(now - ToAbslTime(pod.last_seen())) + " ago"
                                 : std::string("<never>"),
          pod.straggler() ? "yes" : "no",
      });
    }
    text += pods.Render("  ");
  }
  // The Pods table can be long; stragglers are what someone scans it for.
  std::vector<std::string> stragglers;
  for (const auto& pod : job.pods()) {
    if (pod.straggler()) stragglers.push_back(pod.pod());
  }
  text += "Stragglers:";
  if (stragglers.empty()) text += " none";
  for (size_t i = 0; i < stragglers.size(); ++i) text += (i == 0 ? " " : ", ") + stragglers[i];
  text += "\n";

  text += FormatThroughputCurve(job);

  text += "Recommendation:\n";
  if (!job.has_recommendation()) {
    text += "  <none>\n";
  } else {
    const auto& rec = job.recommendation();
    KeyValueSection rec_section;
    rec_section.Add("Replicas", absl::StrCat(rec.replicas()));
    rec_section.Add("Suspend", YesNo(rec.suspend()));
    rec_section.Add("Action", ActionName(rec.action()));
    rec_section.Add("Generation", absl::StrCat(rec.generation()));
    rec_section.Add("Binding Constraint", ConstraintName(rec.binding_constraint()));
    // A job recommended 0 replicas outside the planner's queue (suspended
    // by a policy) is not running either.
    rec_section.Add("Queue Position", rec.queue_position() > 0
                                          ? absl::StrCat(rec.queue_position())
                                          : RecommendedReplicas(job) > 0 ? "- (running)" : "-");
    rec_section.Add("GPUs", absl::StrCat(rec.gpus()));
    rec_section.Add("Current Samples/s", Rate(rec.current_samples_per_second()));
    rec_section.Add("Predicted Samples/s", Rate(rec.predicted_samples_per_second()));
    // Why this size and not a neighbour: the planner's utility would change
    // by these amounts. Unset when the neighbouring size is not allowed.
    if (rec.has_value_one_more()) {
      rec_section.Add("Value of one more replica",
                      FormatDouble("%.4f", rec.value_one_more()) + " (change in planner utility)");
    }
    if (rec.has_value_one_fewer()) {
      rec_section.Add("Value of one fewer replica",
                      FormatDouble("%.4f", rec.value_one_fewer()) + " (change in planner utility)");
    }
    rec_section.Add("Policy", OrNone(rec.policy()));
    rec_section.Add("Decided At", FormatTimestamp(rec.decided_at(), now, "<never>"));
    rec_section.Add("Reason", OrNone(rec.reason()));
    text += rec_section.Render("  ");
  }
  return text;
}

std::string FormatThroughputCurve(const v1::Job& job) {
  const v1::ThroughputCurve& curve = job.curve();
  if (curve.points().empty()) {
    return "Throughput curve: no data yet (the job starts at min_replicas)\n";
  }
  std::string text = "Throughput curve:\n";
  if (!curve.model().empty()) {
    const bool any_observed = std::any_of(curve.points().begin(), curve.points().end(),
                                          [](const auto& point) { return point.observed(); });
    // The fit's RMS log error is, for errors this small, the typical
    // relative error, which is how people read "fit error". It is measured
    // on observed sizes only, so a prior-only fit has none to report.
    absl::StrAppend(&text, "  Model: ", curve.model(),
                    any_observed
                        ? FormatDouble(" (fit error %.1f%% RMS)", 100 * curve.fit_rms_log_error())
                        : std::string(" (no sizes observed yet)"),
                    "\n");
  }

  const std::vector<const v1::CurvePoint*> points = PointsByReplicas(curve);
  const std::vector<const v1::CurvePoint*> rows = CurveTableRows(job, points);
  const double one_replica_rate = OneReplicaRate(points);
  const uint32_t recommended = RecommendedReplicas(job);
  const uint32_t current = CurrentReplicas(job);
  // The last, unnamed column holds the size markers; Table trims it away on
  // rows without one.
  Table table({"N", "PREDICTED/S", "±", "EFFICIENCY", "OBSERVED/S", "ERROR", "SAMPLES", ""});
  for (const v1::CurvePoint* point : rows) {
    const double efficiency = EfficiencyOf(*point, one_replica_rate);
    const bool has_observed = HasObservedRate(*point);
    const double observed = point->observed_samples_per_second();
    table.AddRow({
        absl::StrCat(point->replicas()),
        Rate(point->samples_per_second()),
        Rate(point->uncertainty()),
        efficiency > 0 ? FormatDouble("%.0f%%", 100 * efficiency) : "-",
        has_observed ? Rate(observed) : "-",
        // Positive: the model promises more than the job delivered.
        has_observed
            ? FormatDouble("%+.1f%%", 100 * (point->samples_per_second() - observed) / observed)
            : "-",
        point->observed() ? absl::StrCat(point->sample_count()) : "-",
        SizeMarker(point->replicas(), recommended, current),
    });
  }
  text += table.Render("  ");
  if (rows.size() < points.size()) {
    absl::StrAppend(&text, "  (", rows.size(), " of ", points.size(),
                    " sizes: observed, recommended, current, min, max and powers of 2;"
                    " -o yaml lists all)\n");
  }

  text += "\n";
  const std::string plot = RenderCurvePlot(curve);
  for (size_t start = 0; start < plot.size();) {
    const size_t end = plot.find('\n', start);
    const std::string line =
        plot.substr(start, (end == std::string::npos ? plot.size() : end) - start);
    if (!line.empty()) text += "  " + line;
    text += "\n";
    start = end == std::string::npos ? plot.size() : end + 1;
  }
  return text;
}

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

std::string FormatCluster(const v1::Cluster& cluster) {
  // Until capacity is set the planner hands out GPUs without bound, so the
  // total and the free count are not numbers yet.
  const std::string unbounded = "unbounded";
  Table totals({"TOTAL", "ALLOCATED", "FREE", "WAITING", "UTILIZATION", "GAP"});
  totals.AddRow({
      cluster.capacity_known() ? absl::StrCat(cluster.total_gpus()) : unbounded,
      absl::StrCat(cluster.allocated_gpus()),
      cluster.capacity_known() ? absl::StrCat(cluster.free_gpus()) : unbounded,
      absl::StrCat(cluster.waiting_jobs()),
      cluster.capacity_known() ? UtilizationPercent(cluster) : "-",
      GapPercent(cluster),
  });
  std::string text = totals.Render();
  if (!cluster.allocations().empty()) {
    Table allocations({"NAMESPACE", "NAME", "REPLICAS", "GPUS", "PRIORITY"});
    for (const auto& allocation : cluster.allocations()) {
      auto [ns, name] = SplitJobId(allocation.job_id());
      allocations.AddRow({ns, name, absl::StrCat(allocation.replicas()),
                          absl::StrCat(allocation.gpus()), absl::StrCat(allocation.priority())});
    }
    text += "\n" + allocations.Render();
  }
  return text;
}

// --------------------------------------------------------------- watch --

namespace {
struct WatchColumn {
  const char* header;
  size_t min_width;
};
// Widths fit the common case (short namespaces, names up to ~24 chars);
// REASON is last and unpadded.
constexpr WatchColumn kWatchColumns[] = {
    {"EVENT", 8},   {"NAMESPACE", 12},  {"NAME", 24},  {"REPLICAS", 8}, {"ACTION", 10},
    {"GENERATION", 10}, {"CONSTRAINT", 17}, {"QUEUE", 5}, {"REASON", 0},
};
}  // namespace

void WatchTablePrinter::PrintRow(const std::vector<std::string>& cells) {
  std::string line;
  for (size_t c = 0; c < cells.size(); ++c) {
    line += cells[c];
    if (c + 1 < cells.size()) {
      const size_t width = std::max(kWatchColumns[c].min_width, cells[c].size());
      line += std::string(width - cells[c].size() + 2, ' ');
    }
  }
  while (!line.empty() && line.back() == ' ') line.pop_back();
  // Flush per row: someone is watching this live, possibly through a pipe.
  out_ << line << std::endl;
}

void WatchTablePrinter::PrintEvent(const v1::RecommendationEvent& event) {
  if (!header_printed_) {
    std::vector<std::string> headers;
    for (const auto& column : kWatchColumns) headers.emplace_back(column.header);
    PrintRow(headers);
    header_printed_ = true;
  }
  if (event.type() == v1::RecommendationEvent::SYNCED) {
    // The end-of-initial-list marker carries no recommendation.
    PrintRow({EventTypeName(event.type())});
    return;
  }
  std::vector<std::string> cells = {EventTypeName(event.type())};
  for (std::string& cell : RecommendationCells(event.recommendation())) cells.push_back(std::move(cell));
  PrintRow(cells);
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
    case grpc::StatusCode::OK: return "OK";
    case grpc::StatusCode::CANCELLED: return "Cancelled";
    case grpc::StatusCode::UNKNOWN: return "Unknown";
    case grpc::StatusCode::INVALID_ARGUMENT: return "InvalidArgument";
    case grpc::StatusCode::DEADLINE_EXCEEDED: return "DeadlineExceeded";
    case grpc::StatusCode::NOT_FOUND: return "NotFound";
    case grpc::StatusCode::ALREADY_EXISTS: return "AlreadyExists";
    case grpc::StatusCode::PERMISSION_DENIED: return "PermissionDenied";
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return "ResourceExhausted";
    case grpc::StatusCode::FAILED_PRECONDITION: return "FailedPrecondition";
    case grpc::StatusCode::ABORTED: return "Aborted";
    case grpc::StatusCode::OUT_OF_RANGE: return "OutOfRange";
    case grpc::StatusCode::UNIMPLEMENTED: return "Unimplemented";
    case grpc::StatusCode::INTERNAL: return "Internal";
    case grpc::StatusCode::UNAVAILABLE: return "Unavailable";
    case grpc::StatusCode::DATA_LOSS: return "DataLoss";
    case grpc::StatusCode::UNAUTHENTICATED: return "Unauthenticated";
    default: return absl::StrCat("Code", static_cast<int>(code));
  }
}

std::pair<std::string, std::string> SplitJobId(std::string_view job_id) {
  const size_t slash = job_id.find('/');
  if (slash == std::string_view::npos) return {"", std::string(job_id)};
  return {std::string(job_id.substr(0, slash)), std::string(job_id.substr(slash + 1))};
}

}  // namespace rescale::cli
