// Fuzz target: rescale-sim's workload readers (bench/sim/workload.h
// ParseWorkload: JSON Lines, Rescale CSV and the Pollux CSV, told apart by
// the header) and the flag parsers beside them (ParseCapacityChanges,
// ParseMix). Workload files come from other people's traces and generators.
// The first input byte picks the reader; the rest is its text.
//
// Invariants checked: a workload that parses writes out as JSONL to text
// that parses again to the same workload (compared by its JSONL form), and
// as CSV to text that reads back to the same CSV; jobs are ordered by arrival with
// min_replicas <= requested_replicas <= max_replicas.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "bench/sim/workload.h"

namespace {

using rescale::sim::Workload;

void CheckWorkload(const Workload& workload) {
  for (size_t i = 0; i < workload.jobs.size(); ++i) {
    const auto& job = workload.jobs[i];
    if (job.min_replicas > job.requested_replicas || job.requested_replicas > job.max_replicas) {
      std::abort();
    }
    if (i > 0 && workload.jobs[i - 1].arrival_seconds > job.arrival_seconds) std::abort();
  }
  const std::string jsonl = rescale::sim::WorkloadToJsonl(workload);
  absl::StatusOr<Workload> from_jsonl = rescale::sim::ParseWorkload(jsonl, "jsonl");
  if (!from_jsonl.ok() || rescale::sim::WorkloadToJsonl(*from_jsonl) != jsonl) std::abort();
  // CSV has no cluster lines and one work column for the whole file (a
  // mix of epochs and samples is written as samples), so it is checked as a
  // fixed point: its text reads back and writes out the same.
  const std::string csv = rescale::sim::WorkloadToCsv(workload);
  absl::StatusOr<Workload> from_csv = rescale::sim::ParseWorkload(csv, "csv");
  if (!from_csv.ok() || rescale::sim::WorkloadToCsv(*from_csv) != csv) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  switch (data[0] % 4) {
    case 0:
    case 1: {
      absl::StatusOr<Workload> workload =
          rescale::sim::ParseWorkload(text, data[0] % 4 == 0 ? "jsonl" : "csv");
      if (workload.ok()) CheckWorkload(*workload);
      break;
    }
    case 2:
      (void)rescale::sim::ParseCapacityChanges(text);
      break;
    case 3:
      (void)rescale::sim::ParseMix(text);
      break;
  }
  return 0;
}
