// Queues: validation, the queue file and the default queue (see
// rescale/queues.h).
#include "rescale/queues.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "rescale/names.h"

namespace rescale {
namespace {

absl::Status Invalid(std::string message) { return absl::InvalidArgumentError(std::move(message)); }

std::string Field(size_t i, std::string_view name) {
  return absl::StrCat("queues[", i, "].", std::string(name));
}

// A YAML scalar as a non-negative integer, or an error naming the field.
absl::StatusOr<uint64_t> GpuCount(const YAML::Node& node, const std::string& field,
                                  std::string_view source) {
  const std::string text = node.IsScalar() ? node.Scalar() : "";
  uint64_t value = 0;
  if (!text.empty() &&
      std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    try {
      value = node.as<uint64_t>();
      return value;
    } catch (const YAML::Exception&) {
    }
  }
  return Invalid(absl::StrFormat("%s: %s must be a whole number of GPUs (0 or more), got \"%s\"",
                                 source, field, text));
}

}  // namespace

absl::Status ValidateQueues(std::span<const QueueSpec> queues, const QueueLimits& limits) {
  if (queues.size() > limits.max_queues) {
    return Invalid(absl::StrFormat("queues: %d queues given, at most %d are allowed", queues.size(),
                                   limits.max_queues));
  }
  std::set<std::string_view> names;
  for (size_t i = 0; i < queues.size(); ++i) {
    const QueueSpec& q = queues[i];
    if (!IsDns1123Label(q.name)) {
      return Invalid(absl::StrFormat(
          "%s \"%s\" is not a DNS-1123 label (1-63 characters of a-z, 0-9 and '-', starting and "
          "ending with a letter or digit)",
          Field(i, "name"), q.name));
    }
    if (!names.insert(q.name).second) {
      return Invalid(absl::StrFormat("%s \"%s\" is defined twice", Field(i, "name"), q.name));
    }
    if (!q.cohort.empty() && !IsDns1123Label(q.cohort)) {
      return Invalid(
          absl::StrFormat("%s \"%s\" is not a DNS-1123 label", Field(i, "cohort"), q.cohort));
    }
    auto check_gpus = [&](uint64_t v, std::string_view name) -> absl::Status {
      if (v > limits.max_gpus) {
        return Invalid(absl::StrFormat("%s = %d is more than the limit of %d GPUs", Field(i, name),
                                       v, limits.max_gpus));
      }
      return absl::OkStatus();
    };
    if (absl::Status s = check_gpus(q.nominal_gpus, "nominal_gpus"); !s.ok()) return s;
    for (const auto& [limit, name] : {std::pair{q.borrowing_limit_gpus, "borrowing_limit_gpus"},
                                      std::pair{q.lending_limit_gpus, "lending_limit_gpus"}}) {
      if (!limit) continue;
      if (absl::Status s = check_gpus(*limit, name); !s.ok()) return s;
      if (q.cohort.empty()) {
        return Invalid(absl::StrFormat(
            "%s is set but the queue has no cohort: a queue lends and borrows only within its "
            "cohort (set %s, or remove the limit)",
            Field(i, name), Field(i, "cohort")));
      }
    }
    if (q.lending_limit_gpus && *q.lending_limit_gpus > q.nominal_gpus) {
      return Invalid(
          absl::StrFormat("%s = %d is more than %s = %d: a queue lends only its own "
                          "unused quota",
                          Field(i, "lending_limit_gpus"), *q.lending_limit_gpus,
                          Field(i, "nominal_gpus"), q.nominal_gpus));
    }
    if (!std::isfinite(q.weight) || q.weight < 0 || q.weight > limits.max_weight) {
      return Invalid(absl::StrFormat("%s = %g must be between 0 and %g", Field(i, "weight"),
                                     q.weight, limits.max_weight));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<QueueSpec>> ParseQueuesYaml(std::string_view text,
                                                       std::string_view source) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    return Invalid(absl::StrFormat("%s: not valid YAML: %s", source, e.what()));
  }
  if (!root.IsMap() || !root["queues"]) {
    return Invalid(absl::StrFormat(
        "%s: expected a mapping with a \"queues\" list (queues: [{name, nominal_gpus, ...}])",
        source));
  }
  const YAML::Node list = root["queues"];
  for (const auto& entry : root) {
    const std::string key = entry.first.IsScalar() ? entry.first.Scalar() : "";
    if (key != "queues") {
      return Invalid(
          absl::StrFormat("%s: unknown top-level key \"%s\" (only \"queues\")", source, key));
    }
  }
  std::vector<QueueSpec> out;
  if (list.IsNull()) return out;
  if (!list.IsSequence()) {
    return Invalid(absl::StrFormat("%s: queues must be a list", source));
  }
  for (size_t i = 0; i < list.size(); ++i) {
    const YAML::Node q = list[i];
    if (!q.IsMap()) {
      return Invalid(absl::StrFormat("%s: queues[%d] must be a mapping", source, i));
    }
    QueueSpec spec;
    bool have_nominal = false;
    for (const auto& entry : q) {
      const std::string key = entry.first.IsScalar() ? entry.first.Scalar() : "";
      const YAML::Node& value = entry.second;
      const std::string field = Field(i, key);
      if (key == "name" || key == "cohort") {
        if (!value.IsScalar()) {
          return Invalid(absl::StrFormat("%s: %s must be a string", source, field));
        }
        (key == "name" ? spec.name : spec.cohort) = value.Scalar();
      } else if (key == "nominal_gpus") {
        absl::StatusOr<uint64_t> v = GpuCount(value, field, source);
        if (!v.ok()) return v.status();
        spec.nominal_gpus = *v;
        have_nominal = true;
      } else if (key == "borrowing_limit_gpus" || key == "lending_limit_gpus") {
        absl::StatusOr<uint64_t> v = GpuCount(value, field, source);
        if (!v.ok()) return v.status();
        (key == "borrowing_limit_gpus" ? spec.borrowing_limit_gpus : spec.lending_limit_gpus) = *v;
      } else if (key == "weight") {
        double w = std::numeric_limits<double>::quiet_NaN();
        try {
          w = value.as<double>();
        } catch (const YAML::Exception&) {
        }
        if (!std::isfinite(w)) {
          return Invalid(absl::StrFormat("%s: %s must be a number, got \"%s\"", source, field,
                                         value.IsScalar() ? value.Scalar() : ""));
        }
        spec.weight = w;
      } else {
        return Invalid(absl::StrFormat(
            "%s: unknown key \"%s\" in queues[%d] (known: name, nominal_gpus, cohort, "
            "borrowing_limit_gpus, lending_limit_gpus, weight)",
            source, key, i));
      }
    }
    if (spec.name.empty()) {
      return Invalid(absl::StrFormat("%s: %s is required", source, Field(i, "name")));
    }
    if (!have_nominal) {
      return Invalid(absl::StrFormat("%s: %s is required", source, Field(i, "nominal_gpus")));
    }
    out.push_back(std::move(spec));
  }
  if (absl::Status s = ValidateQueues(out); !s.ok()) {
    return Invalid(absl::StrCat(std::string(source), ": ", s.message()));
  }
  return out;
}

std::string QueuesToYaml(std::span<const QueueSpec> queues) {
  YAML::Emitter out;
  out << YAML::BeginMap << YAML::Key << "queues" << YAML::Value << YAML::BeginSeq;
  for (const QueueSpec& q : queues) {
    out << YAML::BeginMap;
    out << YAML::Key << "name" << YAML::Value << q.name;
    out << YAML::Key << "nominal_gpus" << YAML::Value << q.nominal_gpus;
    if (!q.cohort.empty()) out << YAML::Key << "cohort" << YAML::Value << q.cohort;
    if (q.borrowing_limit_gpus) {
      out << YAML::Key << "borrowing_limit_gpus" << YAML::Value << *q.borrowing_limit_gpus;
    }
    if (q.lending_limit_gpus) {
      out << YAML::Key << "lending_limit_gpus" << YAML::Value << *q.lending_limit_gpus;
    }
    out << YAML::Key << "weight" << YAML::Value << q.weight;
    out << YAML::EndMap;
  }
  out << YAML::EndSeq << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

std::vector<QueueSpec> ResolveQueues(std::span<const QueueSpec> defined,
                                     std::optional<uint64_t> capacity) {
  std::vector<QueueSpec> out(defined.begin(), defined.end());
  if (FindQueue(out, kDefaultQueueName)) return out;
  QueueSpec fallback;
  fallback.name = std::string(kDefaultQueueName);
  if (defined.empty()) {
    fallback.nominal_gpus = capacity.value_or(std::numeric_limits<uint64_t>::max());
  } else if (capacity) {
    uint64_t claimed = 0;
    for (const QueueSpec& q : defined) claimed += q.nominal_gpus;
    fallback.nominal_gpus = *capacity > claimed ? *capacity - claimed : 0;
  }
  out.push_back(std::move(fallback));
  return out;
}

std::optional<uint32_t> FindQueue(std::span<const QueueSpec> queues, std::string_view name) {
  if (name.empty()) name = kDefaultQueueName;
  for (size_t i = 0; i < queues.size(); ++i) {
    if (queues[i].name == name) return static_cast<uint32_t>(i);
  }
  return std::nullopt;
}

}  // namespace rescale
