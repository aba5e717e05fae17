// Simulated clusters of GPU types (see typed_cluster.h).
#include "bench/sim/typed_cluster.h"

#include <yaml-cpp/yaml.h>

#include "absl/strings/str_format.h"
#include "bench/sim/sia_profiles.h"
#include "rescale/names.h"
#include "rescale/read_file.h"

namespace rescale::sim {

uint32_t TypedCluster::total_gpus() const {
  uint32_t total = 0;
  for (const SimGpuType& t : types) total += t.gpus();
  return total;
}

TypedCluster SiaCluster() {
  TypedCluster cluster;
  cluster.description = "sia";
  const uint32_t nodes[] = {6, 3, 2};  // aws, rtx, dgx-ext
  size_t i = 0;
  for (const SiaGpuType& type : SiaGpuTypes()) {
    cluster.types.push_back({std::string(type.product), std::string(type.trace_suffix), nodes[i++],
                             type.gpus_per_node});
  }
  return cluster;
}

absl::StatusOr<TypedCluster> ParseTypedCluster(std::string_view yaml, const std::string& where) {
  auto invalid = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: %s", where, what));
  };
  TypedCluster cluster;
  cluster.description = where;
  try {
    const YAML::Node root = YAML::Load(std::string(yaml));
    const YAML::Node types = root["types"];
    if (!types || !types.IsSequence() || types.size() == 0)
      return invalid("`types` must be a list of at least one GPU type");
    if (types.size() > kMaxGpuTypes)
      return invalid(absl::StrFormat("%d types; the limit is %d", types.size(), kMaxGpuTypes));
    for (size_t i = 0; i < types.size(); ++i) {
      const YAML::Node t = types[i];
      const std::string field = absl::StrFormat("types[%d]", i);
      SimGpuType type;
      type.name = t["name"] ? t["name"].as<std::string>() : "";
      if (!IsGpuTypeName(type.name)) return invalid(GpuTypeNameError(field + ".name", type.name));
      for (const SimGpuType& before : cluster.types) {
        if (before.name == type.name)
          return invalid(absl::StrFormat("%s.name \"%s\" is given twice", field, type.name));
      }
      type.profile = t["profile"] ? t["profile"].as<std::string>() : "";
      const SiaGpuType* known = nullptr;
      for (const SiaGpuType& sia : SiaGpuTypes())
        if (sia.trace_suffix == type.profile) known = &sia;
      if (known == nullptr) {
        return invalid(absl::StrFormat(
            "%s.profile \"%s\" is not a built-in GPU type profile (aws, rtx, dgx-ext)", field,
            type.profile));
      }
      type.nodes = t["nodes"] ? t["nodes"].as<uint32_t>() : 0;
      if (type.nodes < 1 || type.nodes > 4096)
        return invalid(absl::StrFormat("%s.nodes must be in [1, 4096], got %d", field, type.nodes));
      type.gpus_per_node =
          t["gpus_per_node"] ? t["gpus_per_node"].as<uint32_t>() : known->gpus_per_node;
      if (type.gpus_per_node < 1 || type.gpus_per_node > 64) {
        return invalid(absl::StrFormat("%s.gpus_per_node must be in [1, 64], got %d", field,
                                       type.gpus_per_node));
      }
      cluster.types.push_back(std::move(type));
    }
  } catch (const YAML::Exception& e) {
    return invalid(absl::StrFormat("not YAML of GPU types: %s", e.what()));
  }
  return cluster;
}

absl::StatusOr<TypedCluster> LoadTypedCluster(const std::string& arg) {
  if (arg == "sia") return SiaCluster();
  absl::StatusOr<std::string> text = ReadFileToString(arg, "--cluster");
  if (!text.ok()) return text.status();
  return ParseTypedCluster(*text, arg);
}

}  // namespace rescale::sim
