// Workload reading, writing and generation (see workload.h).
//
// Both Rescale formats go through one job parser working on text fields
// (JSON values are turned into their text first), so CSV and JSONL accept
// exactly the same fields with the same defaults and errors.
#include "bench/sim/workload.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <numeric>
#include <random>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "bench/sim/csv.h"
#include "nlohmann/json.hpp"
#include "rescale/read_file.h"
#include "rescale/status_macros.h"
#include "rescale/types.h"

namespace rescale::sim {
namespace {

// The fields of one job, as text, by name.
using Fields = std::map<std::string, std::string, std::less<>>;

const std::set<std::string, std::less<>> kJobFields = {"id",
                                                       "arrival_seconds",
                                                       "profile",
                                                       "samples",
                                                       "epochs",
                                                       "dataset_samples",
                                                       "min_replicas",
                                                       "max_replicas",
                                                       "requested_replicas",
                                                       "gpus_per_replica",
                                                       "priority",
                                                       "preemptible",
                                                       "restart_cost_seconds",
                                                       "local_batch_size"};

absl::Status FieldError(std::string_view where, std::string_view field, std::string_view why) {
  return absl::InvalidArgumentError(absl::StrFormat("%s: field %s %s", where, field, why));
}

std::optional<std::string_view> Get(const Fields& fields, std::string_view key) {
  auto it = fields.find(key);
  if (it == fields.end() || it->second.empty()) return std::nullopt;
  return std::string_view(it->second);
}

absl::Status ReadDouble(const Fields& f, std::string_view where, std::string_view key, double min,
                        double& out) {
  auto text = Get(f, key);
  if (!text) return absl::OkStatus();
  double value = 0;
  if (!absl::SimpleAtod(Absl(*text), &value) || !std::isfinite(value) || value < min) {
    return FieldError(where, key,
                      absl::StrFormat("must be a number >= %g, got \"%s\"", min, *text));
  }
  out = value;
  return absl::OkStatus();
}

template <typename Int>
absl::Status ReadInt(const Fields& f, std::string_view where, std::string_view key, int64_t min,
                     int64_t max, Int& out) {
  auto text = Get(f, key);
  if (!text) return absl::OkStatus();
  int64_t value = 0;
  double as_double = 0;
  // JSON may write integers as 4.0; accept integral doubles.
  if (!absl::SimpleAtoi(Absl(*text), &value)) {
    if (!absl::SimpleAtod(Absl(*text), &as_double) || as_double != std::floor(as_double) ||
        std::abs(as_double) > 9e15) {
      return FieldError(where, key, absl::StrFormat("must be an integer, got \"%s\"", *text));
    }
    value = static_cast<int64_t>(as_double);
  }
  if (value < min || value > max) {
    return FieldError(where, key, absl::StrFormat("must be in [%d, %d], got %d", min, max, value));
  }
  out = static_cast<Int>(value);
  return absl::OkStatus();
}

absl::Status ReadBool(const Fields& f, std::string_view where, std::string_view key, bool& out) {
  auto text = Get(f, key);
  if (!text) return absl::OkStatus();
  const std::string lower = absl::AsciiStrToLower(Absl(*text));
  if (lower == "true" || lower == "1" || lower == "yes") {
    out = true;
  } else if (lower == "false" || lower == "0" || lower == "no") {
    out = false;
  } else {
    return FieldError(where, key, absl::StrFormat("must be true or false, got \"%s\"", *text));
  }
  return absl::OkStatus();
}

// One job from its fields; `where` prefixes errors ("FILE line N").
absl::StatusOr<JobDescription> ParseJob(const Fields& f, std::string_view where) {
  for (const auto& [key, value] : f) {
    if (!kJobFields.contains(key)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: unknown field \"%s\" (known: %s)", where, key, absl::StrJoin(kJobFields, ", ")));
    }
  }
  JobDescription job;
  auto id = Get(f, "id");
  if (!id) return FieldError(where, "id", "is required");
  job.id = std::string(*id);
  if (!Get(f, "arrival_seconds")) return FieldError(where, "arrival_seconds", "is required");
  RETURN_IF_ERROR(ReadDouble(f, where, "arrival_seconds", 0, job.arrival_seconds));
  auto profile_text = Get(f, "profile");
  if (!profile_text) return FieldError(where, "profile", "is required");
  absl::StatusOr<ProfileSpec> profile = ParseProfile(*profile_text);
  if (!profile.ok()) return FieldError(where, "profile", Std(profile.status().message()));
  job.profile = *std::move(profile);
  const BuiltinProfile* builtin = job.profile.kind == ProfileSpec::Kind::kBuiltin
                                      ? FindBuiltinProfile(job.profile.name)
                                      : nullptr;

  const bool has_samples = Get(f, "samples").has_value();
  const bool has_epochs = Get(f, "epochs").has_value();
  if (has_samples == has_epochs) {
    return FieldError(where, "samples/epochs", "exactly one of samples or epochs is required");
  }
  if (has_samples) {
    RETURN_IF_ERROR(ReadDouble(f, where, "samples", 0, job.work_samples));
  } else {
    RETURN_IF_ERROR(ReadDouble(f, where, "epochs", 0, job.epochs));
    double dataset = builtin != nullptr ? builtin->dataset_samples : 0;
    RETURN_IF_ERROR(ReadDouble(f, where, "dataset_samples", 1, dataset));
    if (dataset <= 0) {
      return FieldError(
          where, "epochs",
          "needs a dataset size: profile has none, so give dataset_samples or samples");
    }
    job.work_samples = job.epochs * dataset;
  }
  if (!(job.work_samples > 0))
    return FieldError(where, "samples/epochs", "must give positive work");

  RETURN_IF_ERROR(ReadInt(f, where, "min_replicas", 1, 100'000, job.min_replicas));
  if (!Get(f, "max_replicas")) return FieldError(where, "max_replicas", "is required");
  RETURN_IF_ERROR(ReadInt(f, where, "max_replicas", 1, 100'000, job.max_replicas));
  if (job.max_replicas < job.min_replicas) {
    return FieldError(
        where, "max_replicas",
        absl::StrFormat("(%d) must be >= min_replicas (%d)", job.max_replicas, job.min_replicas));
  }
  // The size a non-elastic scheduler runs the job at; clamped rather than
  // refused, as a cluster would round a request to the job's own range.
  job.requested_replicas = job.min_replicas;
  RETURN_IF_ERROR(ReadInt(f, where, "requested_replicas", 1, 100'000, job.requested_replicas));
  job.requested_replicas = std::clamp(job.requested_replicas, job.min_replicas, job.max_replicas);
  RETURN_IF_ERROR(ReadInt(f, where, "gpus_per_replica", 1, 64, job.gpus_per_replica));
  RETURN_IF_ERROR(ReadInt(f, where, "priority", -1'000'000, 1'000'000, job.priority));
  RETURN_IF_ERROR(ReadBool(f, where, "preemptible", job.preemptible));
  job.restart_cost_seconds =
      builtin != nullptr ? builtin->restart_cost_seconds : kDefaultRestartCostSeconds;
  RETURN_IF_ERROR(ReadDouble(f, where, "restart_cost_seconds", 0, job.restart_cost_seconds));
  job.local_batch_size = builtin != nullptr ? builtin->default_local_batch : 32;
  RETURN_IF_ERROR(ReadInt(f, where, "local_batch_size", 1, 1 << 24, job.local_batch_size));
  return job;
}

// Text of a JSON value for the field parser; profile objects become the
// curve:/model: syntax.
absl::StatusOr<std::string> JsonFieldText(const std::string& key, const nlohmann::json& value,
                                          std::string_view where) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_boolean()) return std::string(value.get<bool>() ? "true" : "false");
  if (value.is_number_integer()) return std::to_string(value.get<int64_t>());
  if (value.is_number()) return absl::StrFormat("%.17g", value.get<double>());
  if (value.is_null()) return std::string();
  if (key == "profile" && value.is_object()) {
    if (value.contains("curve") && value["curve"].is_array()) {
      std::vector<std::string> points;
      for (const auto& point : value["curve"]) {
        if (!point.is_array() || point.size() != 2 || !point[0].is_number() ||
            !point[1].is_number()) {
          return FieldError(where, "profile",
                            "curve points must be [replicas, samples_per_second]");
        }
        points.push_back(
            absl::StrFormat("%d=%.17g", point[0].get<int64_t>(), point[1].get<double>()));
      }
      return "curve:" + absl::StrJoin(points, ";");
    }
    if (value.contains("model") && value["model"].is_object()) {
      std::vector<std::string> items;
      for (const auto& [k, v] : value["model"].items()) {
        if (!v.is_number()) return FieldError(where, "profile", "model parameters must be numbers");
        items.push_back(absl::StrFormat("%s=%.17g", k, v.get<double>()));
      }
      return "model:" + absl::StrJoin(items, ";");
    }
    return FieldError(where, "profile", "an object profile needs \"curve\" or \"model\"");
  }
  return FieldError(where, key, "must be a string, number or boolean");
}

absl::Status CheckAndSort(Workload& workload) {
  std::set<std::string> ids;
  for (const JobDescription& job : workload.jobs) {
    if (!ids.insert(job.id).second) {
      return absl::InvalidArgumentError(absl::StrFormat("job id \"%s\" appears twice", job.id));
    }
  }
  if (workload.jobs.empty()) return absl::InvalidArgumentError("the workload has no jobs");
  std::stable_sort(workload.jobs.begin(), workload.jobs.end(),
                   [](const JobDescription& a, const JobDescription& b) {
                     if (a.arrival_seconds != b.arrival_seconds)
                       return a.arrival_seconds < b.arrival_seconds;
                     return a.id < b.id;
                   });
  std::stable_sort(
      workload.capacity_changes.begin(), workload.capacity_changes.end(),
      [](const CapacityChange& a, const CapacityChange& b) { return a.at_seconds < b.at_seconds; });
  return absl::OkStatus();
}

absl::StatusOr<JobDescription> PolluxJob(const std::string& name, double time,
                                         const std::string& app, uint32_t num_replicas,
                                         double batch_size, const PolluxMapping& mapping,
                                         std::string_view where) {
  const BuiltinProfile* builtin = FindBuiltinProfile(app);
  if (builtin == nullptr || !builtin->measured) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: application \"%s\" is not one of the measured profiles", where, app));
  }
  JobDescription job;
  job.id = name;
  job.arrival_seconds = time;
  job.profile.kind = ProfileSpec::Kind::kBuiltin;
  job.profile.name = app;
  job.profile.text = app;
  job.epochs = builtin->pollux_epochs;
  job.work_samples = builtin->pollux_epochs * builtin->dataset_samples;
  job.min_replicas = 1;
  const double scaled = std::ceil(mapping.max_replicas_factor * std::max(num_replicas, 1u));
  job.max_replicas = static_cast<uint32_t>(
      std::clamp<double>(scaled, 1, std::max<uint32_t>(mapping.max_replicas_cap, 1)));
  job.requested_replicas = std::clamp(num_replicas, job.min_replicas, job.max_replicas);
  job.gpus_per_replica = 1;
  job.priority = 0;
  job.preemptible = true;
  job.restart_cost_seconds = builtin->restart_cost_seconds;
  job.local_batch_size = RoundToMeasuredLocalBatch(app, batch_size / std::max(num_replicas, 1u));
  return job;
}

absl::StatusOr<Workload> ParsePollux(const CsvTable& table, const PolluxMapping& mapping) {
  Workload workload;
  const size_t name = *table.Find("name"), time = *table.Find("time"),
               app = *table.Find("application"), replicas = *table.Find("num_replicas"),
               batch = *table.Find("batch_size");
  for (size_t i = 0; i < table.rows.size(); ++i) {
    const auto& row = table.rows[i];
    const std::string where = absl::StrFormat("line %d", table.line_numbers[i]);
    double t = 0, b = 0;
    uint32_t n = 0;
    // SimpleAtod reads "inf" and "nan" (and 1e999 as inf): the checks must
    // exclude them, as the Rescale formats' number fields do.
    if (!absl::SimpleAtod(row[time], &t) || !std::isfinite(t) || t < 0 ||
        !absl::SimpleAtoi(row[replicas], &n) || n == 0 || !absl::SimpleAtod(row[batch], &b) ||
        !std::isfinite(b) || b <= 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: time, num_replicas and batch_size must be positive finite numbers", where));
    }
    // Every job needs an id, as in the Rescale formats (their "id is required").
    if (row[name].empty()) {
      return absl::InvalidArgumentError(absl::StrFormat("%s: name is required", where));
    }
    absl::StatusOr<JobDescription> job = PolluxJob(row[name], t, row[app], n, b, mapping, where);
    if (!job.ok()) return job.status();
    workload.jobs.push_back(*std::move(job));
  }
  RETURN_IF_ERROR(CheckAndSort(workload));
  return workload;
}

absl::StatusOr<Workload> ParseRescaleCsv(const CsvTable& table) {
  Workload workload;
  for (size_t i = 0; i < table.rows.size(); ++i) {
    Fields fields;
    for (size_t c = 0; c < table.columns.size(); ++c) fields[table.columns[c]] = table.rows[i][c];
    absl::StatusOr<JobDescription> job =
        ParseJob(fields, absl::StrFormat("line %d", table.line_numbers[i]));
    if (!job.ok()) return job.status();
    workload.jobs.push_back(*std::move(job));
  }
  RETURN_IF_ERROR(CheckAndSort(workload));
  return workload;
}

absl::StatusOr<Workload> ParseJsonl(std::string_view text) {
  Workload workload;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(Absl(text), '\n')) {
    ++line_number;
    const absl::string_view trimmed = absl::StripAsciiWhitespace(line);
    if (trimmed.empty() || trimmed.front() == '#') continue;
    const std::string where = absl::StrFormat("line %d", line_number);
    nlohmann::json object =
        nlohmann::json::parse(Std(trimmed), nullptr, /*allow_exceptions=*/false);
    if (object.is_discarded() || !object.is_object()) {
      return absl::InvalidArgumentError(absl::StrFormat("%s: not a JSON object", where));
    }
    if (object.contains("capacity_gpus")) {
      CapacityChange change;
      const auto& gpus = object["capacity_gpus"];
      if (!gpus.is_number_integer() || gpus.get<int64_t>() < 0 ||
          gpus.get<int64_t>() > 10'000'000) {
        return absl::InvalidArgumentError(
            absl::StrFormat("%s: capacity_gpus must be a non-negative integer", where));
      }
      change.gpus = static_cast<uint32_t>(gpus.get<int64_t>());
      if (object.contains("at_seconds")) {
        if (!object["at_seconds"].is_number() || object["at_seconds"].get<double>() < 0) {
          return absl::InvalidArgumentError(absl::StrFormat("%s: at_seconds must be >= 0", where));
        }
        change.at_seconds = object["at_seconds"].get<double>();
      }
      for (const auto& [key, value] : object.items()) {
        if (key != "capacity_gpus" && key != "at_seconds") {
          return absl::InvalidArgumentError(absl::StrFormat(
              "%s: a cluster line takes capacity_gpus and at_seconds only, not \"%s\"", where,
              key));
        }
      }
      if (change.at_seconds == 0) {
        workload.capacity_gpus = change.gpus;
      } else {
        workload.capacity_changes.push_back(change);
      }
      continue;
    }
    Fields fields;
    for (const auto& [key, value] : object.items()) {
      absl::StatusOr<std::string> text_value = JsonFieldText(key, value, where);
      if (!text_value.ok()) return text_value.status();
      fields[key] = *std::move(text_value);
    }
    absl::StatusOr<JobDescription> job = ParseJob(fields, where);
    if (!job.ok()) return job.status();
    workload.jobs.push_back(*std::move(job));
  }
  RETURN_IF_ERROR(CheckAndSort(workload));
  return workload;
}

// Shortest text that reads back as the same double.
std::string Num(double v) {
  std::string s = absl::StrFormat("%.15g", v);
  double back = 0;
  if (absl::SimpleAtod(s, &back) && back == v) return s;
  return absl::StrFormat("%.17g", v);
}

// The work as epochs when that reads back exactly, else as samples.
std::pair<std::string, std::string> WorkOf(const JobDescription& job) {
  const BuiltinProfile* builtin = job.profile.kind == ProfileSpec::Kind::kBuiltin
                                      ? FindBuiltinProfile(job.profile.name)
                                      : nullptr;
  if (job.epochs > 0 && builtin != nullptr && builtin->dataset_samples > 0 &&
      job.epochs * builtin->dataset_samples == job.work_samples) {
    return {"epochs", Num(job.epochs)};
  }
  return {"samples", Num(job.work_samples)};
}

// Every field of a job, in the documented order.
std::vector<std::pair<std::string, std::string>> JobFieldsOf(const JobDescription& job) {
  std::vector<std::pair<std::string, std::string>> out = {
      {"id", job.id},
      {"arrival_seconds", Num(job.arrival_seconds)},
      {"profile", job.profile.text},
      WorkOf(job),
      {"min_replicas", std::to_string(job.min_replicas)},
      {"max_replicas", std::to_string(job.max_replicas)},
      {"requested_replicas", std::to_string(job.requested_replicas)},
      {"gpus_per_replica", std::to_string(job.gpus_per_replica)},
      {"priority", std::to_string(job.priority)},
      {"preemptible", job.preemptible ? "true" : "false"},
      {"restart_cost_seconds", Num(job.restart_cost_seconds)},
      {"local_batch_size", std::to_string(job.local_batch_size)},
  };
  return out;
}

}  // namespace

absl::StatusOr<Workload> ParseWorkload(std::string_view text, std::string_view format,
                                       const PolluxMapping& pollux) {
  if (format == "jsonl") return ParseJsonl(text);
  if (format != "csv") return absl::InvalidArgumentError("format must be jsonl or csv");
  absl::StatusOr<CsvTable> table = ParseCsv(text);
  if (!table.ok()) return table.status();
  const bool is_pollux = table->Find("name") && table->Find("time") && table->Find("application") &&
                         table->Find("num_replicas") && table->Find("batch_size");
  return is_pollux ? ParsePollux(*table, pollux) : ParseRescaleCsv(*table);
}

absl::StatusOr<Workload> LoadWorkload(const std::string& path, const PolluxMapping& pollux) {
  absl::StatusOr<std::string> text = ReadFileToString(path, "workload");
  if (!text.ok()) return text.status();
  const std::string format =
      absl::EndsWith(path, ".jsonl") || absl::EndsWith(path, ".json") ? "jsonl" : "csv";
  absl::StatusOr<Workload> workload = ParseWorkload(*text, format, pollux);
  if (!workload.ok()) {
    return absl::Status(workload.status().code(),
                        absl::StrFormat("%s: %s", path, workload.status().message()));
  }
  return workload;
}

absl::StatusOr<std::vector<CapacityChange>> ParseCapacityChanges(std::string_view text) {
  std::vector<CapacityChange> changes;
  for (absl::string_view item : absl::StrSplit(Absl(text), ',', absl::SkipWhitespace())) {
    std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(item, ':');
    CapacityChange change;
    if (!absl::SimpleAtod(absl::StripAsciiWhitespace(kv.first), &change.at_seconds) ||
        change.at_seconds < 0 ||
        !absl::SimpleAtoi(absl::StripAsciiWhitespace(kv.second), &change.gpus)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("capacity change \"%s\" is not SECONDS:GPUS (e.g. 3600:48)", item));
    }
    changes.push_back(change);
  }
  std::stable_sort(
      changes.begin(), changes.end(),
      [](const CapacityChange& a, const CapacityChange& b) { return a.at_seconds < b.at_seconds; });
  return changes;
}

std::string WorkloadToJsonl(const Workload& workload) {
  std::string out;
  if (workload.capacity_gpus) {
    out += absl::StrFormat("{\"capacity_gpus\": %d, \"at_seconds\": 0}\n", *workload.capacity_gpus);
  }
  for (const CapacityChange& c : workload.capacity_changes) {
    out +=
        absl::StrFormat("{\"capacity_gpus\": %d, \"at_seconds\": %s}\n", c.gpus, Num(c.at_seconds));
  }
  for (const JobDescription& job : workload.jobs) {
    nlohmann::ordered_json object;
    for (const auto& [key, value] : JobFieldsOf(job)) {
      if (key == "id" || key == "profile") {
        object[key] = value;
      } else if (key == "preemptible") {
        object[key] = job.preemptible;
      } else {
        // Numbers as JSON numbers, exactly as written.
        object[key] = nlohmann::ordered_json::parse(value);
      }
    }
    out += object.dump() + "\n";
  }
  return out;
}

std::string WorkloadToCsv(const Workload& workload) {
  std::string out;
  std::vector<std::string> header;
  // One work column for the whole file: epochs only when every job has them.
  const bool all_epochs =
      std::all_of(workload.jobs.begin(), workload.jobs.end(),
                  [](const JobDescription& j) { return WorkOf(j).first == "epochs"; });
  for (const auto& [key, value] : JobFieldsOf(JobDescription{})) {
    header.push_back(key == "samples" && all_epochs ? "epochs" : key);
  }
  out += absl::StrJoin(header, ",") + "\n";
  for (const JobDescription& job : workload.jobs) {
    std::vector<std::string> fields;
    for (auto [key, value] : JobFieldsOf(job)) {
      if (key == "epochs" && !all_epochs) value = Num(job.work_samples);
      fields.push_back(CsvField(value));
    }
    out += absl::StrJoin(fields, ",") + "\n";
  }
  return out;
}

absl::StatusOr<std::vector<std::pair<std::string, double>>> ParseMix(std::string_view text) {
  std::vector<std::pair<std::string, double>> mix;
  for (absl::string_view item : absl::StrSplit(Absl(text), ',', absl::SkipWhitespace())) {
    std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(item, '=');
    double weight = 0;
    const std::string name(absl::StripAsciiWhitespace(kv.first));
    if (!absl::SimpleAtod(kv.second, &weight) || weight < 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("mix item \"%s\" is not NAME=WEIGHT", item));
    }
    mix.emplace_back(name, weight);
  }
  return mix;
}

absl::StatusOr<std::vector<std::pair<uint32_t, double>>> ParseGpusPerReplicaMix(
    std::string_view text) {
  absl::StatusOr<std::vector<std::pair<std::string, double>>> mix = ParseMix(text);
  if (!mix.ok()) return mix.status();
  std::vector<std::pair<uint32_t, double>> classes;
  for (const auto& [name, weight] : *mix) {
    uint32_t gpus = 0;
    if (!absl::SimpleAtoi(name, &gpus) || gpus == 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "gpus-per-replica item \"%s=%g\" is not GPUS=WEIGHT with GPUS >= 1", name, weight));
    }
    classes.emplace_back(gpus, weight);
  }
  if (classes.empty()) return absl::InvalidArgumentError("gpus-per-replica names no class");
  return classes;
}

namespace {

// GenerateOptions::gpus_per_replica_mix applied to one generated job.
void PutOnReplicasOf(uint32_t gpus, JobDescription& job) {
  if (gpus <= 1) return;
  auto divided = [gpus](uint32_t replicas) { return std::max(1u, (replicas + gpus - 1) / gpus); };
  job.gpus_per_replica = gpus;
  job.requested_replicas = divided(job.requested_replicas);
  job.max_replicas = std::max(job.requested_replicas, divided(job.max_replicas));
  job.min_replicas = std::min(job.min_replicas, job.requested_replicas);
  job.work_samples /= gpus;
  job.epochs = 0;  // the work no longer reads as whole epochs
}

}  // namespace

absl::StatusOr<Workload> GenerateWorkload(const GenerateOptions& options) {
  // The Pollux workloads' application mix (../shared/reference/algorithms.md, section 6) and the
  // submitted (num_replicas, batch_size) each application gets in them.
  static const std::vector<std::pair<std::string, double>> kPolluxMix = {
      {"ncf", 0.39},   {"cifar10", 0.39}, {"deepspeech2", 0.087},
      {"bert", 0.067}, {"yolov3", 0.046}, {"imagenet", 0.02}};
  static const std::map<std::string, std::vector<std::pair<uint32_t, double>>> kSubmittedSizes = {
      {"ncf", {{1, 32768}}},
      {"cifar10", {{6, 2048}, {8, 2048}, {12, 4096}, {16, 4096}}},
      {"deepspeech2", {{6, 320}, {8, 320}, {12, 640}}},
      {"bert", {{6, 384}, {8, 384}, {12, 384}, {16, 384}}},
      {"yolov3", {{4, 64}}},
      {"imagenet", {{24, 3200}, {32, 6400}, {48, 6400}}},
  };
  if ((options.jobs <= 0 && !(options.jobs_per_hour > 0)) || !(options.hours > 0)) {
    return absl::InvalidArgumentError("rate and duration must be positive");
  }
  const auto& mix = options.mix.empty() ? kPolluxMix : options.mix;
  std::vector<double> weights;
  for (const auto& [name, weight] : mix) {
    if (!kSubmittedSizes.contains(name)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("mix: \"%s\" is not a measured profile (bert, cifar10, deepspeech2, "
                          "imagenet, ncf, yolov3)",
                          name));
    }
    weights.push_back(weight);
  }
  if (std::accumulate(weights.begin(), weights.end(), 0.0) <= 0) {
    return absl::InvalidArgumentError("mix: the weights sum to zero");
  }
  std::mt19937_64 rng(options.seed);
  const double end = options.hours * 3600;
  std::vector<double> arrivals;
  if (options.jobs > 0) {
    std::uniform_real_distribution<double> uniform(0, end);
    for (int i = 0; i < options.jobs; ++i) arrivals.push_back(uniform(rng));
    std::sort(arrivals.begin(), arrivals.end());
  } else {
    std::exponential_distribution<double> gap(options.jobs_per_hour / 3600.0);
    for (double t = gap(rng); t < end; t += gap(rng)) arrivals.push_back(t);
  }
  std::discrete_distribution<size_t> pick_app(weights.begin(), weights.end());
  std::vector<double> class_weights;
  for (const auto& [gpus, weight] : options.gpus_per_replica_mix) {
    if (gpus == 0 || !(weight >= 0)) {
      return absl::InvalidArgumentError("gpus_per_replica_mix: classes >= 1, weights >= 0");
    }
    class_weights.push_back(weight);
  }
  if (!class_weights.empty() &&
      std::accumulate(class_weights.begin(), class_weights.end(), 0.0) <= 0) {
    return absl::InvalidArgumentError("gpus_per_replica_mix: the weights sum to zero");
  }
  Workload workload;
  for (size_t index = 0; index < arrivals.size(); ++index) {
    const std::string& app = mix[pick_app(rng)].first;
    const auto& sizes = kSubmittedSizes.at(app);
    std::uniform_int_distribution<size_t> pick_size(0, sizes.size() - 1);
    const auto& [replicas, batch] = sizes[pick_size(rng)];
    // Whole seconds, as the Pollux workloads have.
    const double arrival = std::floor(arrivals[index]);
    absl::StatusOr<JobDescription> job =
        PolluxJob(absl::StrFormat("%s-%d", app, index), arrival, app, replicas, batch,
                  options.mapping, "generate");
    if (!job.ok()) return job.status();
    if (!class_weights.empty()) {
      // Its own stream per job: the applications, sizes and arrivals stay
      // those of the same seed without classes.
      std::seed_seq seq{uint32_t(options.seed), uint32_t(options.seed >> 32), uint32_t(index),
                        0x6b0c5u};
      std::mt19937_64 class_rng(seq);
      std::discrete_distribution<size_t> pick_class(class_weights.begin(), class_weights.end());
      PutOnReplicasOf(options.gpus_per_replica_mix[pick_class(class_rng)].first, *job);
    }
    workload.jobs.push_back(*std::move(job));
  }
  if (workload.jobs.empty()) {
    return absl::InvalidArgumentError("no job arrived: raise the rate or the duration");
  }
  RETURN_IF_ERROR(CheckAndSort(workload));
  return workload;
}

}  // namespace rescale::sim
