// Fuzz target: the queue file (rescale/queues.h ParseQueuesYaml), read by
// rescalectl queue set -f and rescale-sim --queues from a file a person
// wrote. A malformed one must give an error naming what is wrong, never
// crash (yaml-cpp throws on lookups of the wrong node type).
//
// Invariants checked: queues returned OK pass ValidateQueues, and print
// (QueuesToYaml) to a file that parses back to the same queues.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "rescale/queues.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<std::vector<rescale::QueueSpec>> queues =
      rescale::ParseQueuesYaml(text, "queues.yaml");
  if (!queues.ok()) {
    if (queues.status().message().empty()) std::abort();  // errors must say what is wrong
    return 0;
  }
  if (!rescale::ValidateQueues(*queues).ok()) std::abort();
  absl::StatusOr<std::vector<rescale::QueueSpec>> again =
      rescale::ParseQueuesYaml(rescale::QueuesToYaml(*queues), "again");
  if (!again.ok() || *again != *queues) std::abort();
  return 0;
}
