// Reading Kueue's ClusterQueues and LocalQueues (see client/adapter/kueue.h).
#include "client/adapter/kueue.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "rescale/names.h"

namespace rescale::adapter {

using json = nlohmann::json;

std::optional<double> ParseQuantity(const json& value) {
  if (value.is_number()) {
    const double v = value.get<double>();
    return std::isfinite(v) ? std::optional<double>(v) : std::nullopt;
  }
  if (!value.is_string()) return std::nullopt;
  const std::string text = value.get<std::string>();
  // The suffixes of apimachinery's quantity.go: binary (Ki..Ei), decimal
  // SI (m, k, M, G, T, P, E), or a decimal exponent (e/E and an integer).
  static const std::pair<const char*, double> kSuffixes[] = {
      {"Ki", 0x1p10}, {"Mi", 0x1p20}, {"Gi", 0x1p30}, {"Ti", 0x1p40}, {"Pi", 0x1p50},
      {"Ei", 0x1p60}, {"m", 1e-3},    {"k", 1e3},     {"M", 1e6},     {"G", 1e9},
      {"T", 1e12},    {"P", 1e15},    {"E", 1e18}};
  // The grammar of quantity.go: sign, digits with at most one '.', then an
  // exponent or a suffix (strtod alone would also take hex, "inf", "nan").
  if (text.empty() || text.size() > 64) return std::nullopt;
  size_t i = (text[0] == '+' || text[0] == '-') ? 1 : 0;
  size_t digits = 0;
  size_t dots = 0;
  for (; i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.');
       ++i) {
    text[i] == '.' ? ++dots : ++digits;
  }
  if (digits == 0 || dots > 1) return std::nullopt;
  const double number = std::strtod(text.substr(0, i).c_str(), nullptr);
  std::string suffix = text.substr(i);
  if (suffix.empty()) return number;
  if (suffix[0] == 'e' || suffix[0] == 'E') {
    size_t j = (suffix.size() > 1 && (suffix[1] == '+' || suffix[1] == '-')) ? 2 : 1;
    if (j < suffix.size() && suffix.find_first_not_of("0123456789", j) == std::string::npos) {
      const long exponent = std::clamp(std::strtol(suffix.c_str() + 1, nullptr, 10), -400L, 400L);
      const double value = number * std::pow(10.0, static_cast<double>(exponent));
      return std::isfinite(value) ? std::optional<double>(value) : std::nullopt;
    }
  }
  for (const auto& [name, factor] : kSuffixes) {
    if (suffix == name) return number * factor;
  }
  return std::nullopt;
}

namespace {

absl::StatusOr<std::string> NameOf(const json& object, const char* kind) {
  const json& name = FieldAt(object, {"metadata", "name"});
  if (!name.is_string()) return absl::InvalidArgumentError(absl::StrCat(kind, " without a name"));
  return name.get<std::string>();
}

// A GPU count from a quantity at `field` of `what`.
absl::StatusOr<uint64_t> Gpus(const json& value, const std::string& what,
                              const std::string& field) {
  std::optional<double> q = ParseQuantity(value);
  if (!q.has_value() || *q < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", field, " ", value.dump(), " is not a non-negative quantity"));
  }
  return static_cast<uint64_t>(std::floor(*q + 1e-9));
}

}  // namespace

absl::StatusOr<QueueSpec> ParseClusterQueue(const json& object) {
  absl::StatusOr<std::string> name = NameOf(object, "ClusterQueue");
  if (!name.ok()) return name.status();
  const std::string what = absl::StrCat("ClusterQueue ", *name);
  if (!IsDns1123Label(*name)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": the name is not a DNS-1123 label (1-63 characters of a-z, 0-9 and ",
                     "'-'), which Rescale's queue names are; its jobs wait"));
  }
  QueueSpec queue;
  queue.name = *name;
  const json& spec = FieldAt(object, {"spec"});
  // v1beta2 renamed spec.cohort to spec.cohortName.
  for (const char* key : {"cohortName", "cohort"}) {
    if (FieldAt(spec, {key}).is_string()) {
      queue.cohort = spec[key].get<std::string>();
      if (!queue.cohort.empty() && !IsDns1123Label(queue.cohort)) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": spec.", key, " \"", queue.cohort, "\" is not a DNS-1123 label"));
      }
      break;
    }
  }
  bool any_gpu = false;
  bool borrowing_unlimited = false;
  bool lending_all = true;  // no flavor set a lending limit
  uint64_t borrowing = 0;
  uint64_t lending = 0;
  const json& groups = FieldAt(spec, {"resourceGroups"});
  for (size_t g = 0; groups.is_array() && g < groups.size(); ++g) {
    const json& flavors = FieldAt(groups[g], {"flavors"});
    for (size_t f = 0; flavors.is_array() && f < flavors.size(); ++f) {
      const json& resources = FieldAt(flavors[f], {"resources"});
      for (size_t r = 0; resources.is_array() && r < resources.size(); ++r) {
        const json& resource = resources[r];
        if (FieldAt(resource, {"name"}) != kGpuResource) continue;
        const std::string at =
            absl::StrCat("spec.resourceGroups[", g, "].flavors[", f, "].resources[", r, "]");
        absl::StatusOr<uint64_t> nominal =
            Gpus(FieldAt(resource, {"nominalQuota"}), what, at + ".nominalQuota");
        if (!nominal.ok()) return nominal.status();
        any_gpu = true;
        queue.nominal_gpus += *nominal;
        if (const json& limit = FieldAt(resource, {"borrowingLimit"}); limit.is_null()) {
          borrowing_unlimited = true;
        } else {
          absl::StatusOr<uint64_t> gpus = Gpus(limit, what, at + ".borrowingLimit");
          if (!gpus.ok()) return gpus.status();
          borrowing += *gpus;
        }
        if (const json& limit = FieldAt(resource, {"lendingLimit"}); limit.is_null()) {
          lending += *nominal;
        } else {
          absl::StatusOr<uint64_t> gpus = Gpus(limit, what, at + ".lendingLimit");
          if (!gpus.ok()) return gpus.status();
          lending += std::min(*gpus, *nominal);
          lending_all = false;
        }
      }
    }
  }
  // Limits mean something only within a cohort (Kueue's CEL rules refuse
  // them without one); a queue without GPUs lends and borrows as Kueue
  // lets a resource it does not cover: not at all.
  if (!queue.cohort.empty() && any_gpu) {
    if (!borrowing_unlimited) queue.borrowing_limit_gpus = borrowing;
    if (!lending_all) queue.lending_limit_gpus = lending;
  } else if (!queue.cohort.empty()) {
    queue.borrowing_limit_gpus = 0;
  }
  const json& weight = FieldAt(spec, {"fairSharing", "weight"});
  if (!weight.is_null()) {
    std::optional<double> w = ParseQuantity(weight);
    if (!w.has_value() || *w < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": spec.fairSharing.weight ", weight.dump(), " is not a non-negative quantity"));
    }
    queue.weight = *w;
  }
  return queue;
}

absl::StatusOr<LocalQueueRef> ParseLocalQueue(const json& object) {
  absl::StatusOr<std::string> name = NameOf(object, "LocalQueue");
  if (!name.ok()) return name.status();
  const json& ns = FieldAt(object, {"metadata", "namespace"});
  if (!ns.is_string()) {
    return absl::InvalidArgumentError(absl::StrCat("LocalQueue ", *name, " without a namespace"));
  }
  LocalQueueRef ref;
  ref.key = absl::StrCat(ns.get<std::string>(), "/", *name);
  const json& cluster_queue = FieldAt(object, {"spec", "clusterQueue"});
  if (!cluster_queue.is_string() || cluster_queue.get<std::string>().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("LocalQueue ", ref.key, ": spec.clusterQueue is not set"));
  }
  ref.cluster_queue = cluster_queue.get<std::string>();
  return ref;
}

absl::StatusOr<std::vector<QueueSpec>> QueueSetOf(
    const std::map<std::string, QueueSpec>& cluster_queues) {
  std::vector<QueueSpec> queues;
  queues.reserve(cluster_queues.size());
  for (const auto& [name, queue] : cluster_queues) queues.push_back(queue);
  if (absl::Status valid = ValidateQueues(queues); !valid.ok()) return valid;
  return queues;
}

}  // namespace rescale::adapter
