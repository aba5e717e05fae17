// A simulated cluster of several GPU types (`rescale-sim run|sweep --cluster
// FILE|sia`): each type's name (what the engine and the adapter call it, the
// nodes' nvidia.com/gpu.product), the Sia trace whose built-in profiles give
// jobs' step times on it (sia_profiles.h), and its nodes.
//
// File format (YAML; JSON is YAML too):
//   types:
//     - name: Tesla-T4     # a GPU type name (rescale/names.h)
//       profile: aws       # aws | rtx | dgx-ext
//       nodes: 6
//       gpus_per_node: 4   # default: the profile's node size
#ifndef RESCALE_BENCH_SIM_TYPED_CLUSTER_H_
#define RESCALE_BENCH_SIM_TYPED_CLUSTER_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace rescale::sim {

struct SimGpuType {
  std::string name;
  std::string profile;  // Sia trace suffix
  uint32_t nodes = 0;
  uint32_t gpus_per_node = 0;
  uint32_t gpus() const { return nodes * gpus_per_node; }
};

struct TypedCluster {
  std::string description;  // "sia" or the file's path
  std::vector<SimGpuType> types;
  uint32_t total_gpus() const;
};

// Sia's default heterogeneous cluster (simulator_config.py, paper 4.3): 6
// nodes of 4 T4, 3 of 8 RTX 2080 Ti, 2 of 8 A100 = 64 GPUs.
TypedCluster SiaCluster();

// "sia", or a file in the format above. INVALID_ARGUMENT naming the file,
// the type and the field (unknown profile, a bad name, no nodes, a type
// twice, more than kMaxGpuTypes).
absl::StatusOr<TypedCluster> LoadTypedCluster(const std::string& arg);
absl::StatusOr<TypedCluster> ParseTypedCluster(std::string_view yaml, const std::string& where);

}  // namespace rescale::sim

#endif  // RESCALE_BENCH_SIM_TYPED_CLUSTER_H_
