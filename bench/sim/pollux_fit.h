// Fitting Pollux's step-time model (PolluxModel, profiles.h) to measured
// placements, as Pollux's and Sia's simulators do per application and GPU
// type (Sia: sia-simulator/goodput.py fit_perf_params). Used offline to
// derive the built-in per-type profiles (sia_profiles.cc) from Sia's traces,
// which carry no licence and so stay out of the repository; `rescale-sim
// fit-sia` reruns the derivation, and tests that need raw measurements read
// them from where the machine keeps them (SiaDataDirectory).
#ifndef RESCALE_BENCH_SIM_POLLUX_FIT_H_
#define RESCALE_BENCH_SIM_POLLUX_FIT_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/sim/profiles.h"

namespace rescale::sim {

// One measured step: `replicas` GPUs over `nodes` nodes, each replica at
// `local_batch` samples per step.
struct TraceRow {
  uint32_t replicas = 0;
  uint32_t nodes = 0;
  uint32_t per_node = 0;  // GPUs on the fullest node (the largest digit)
  double local_batch = 0;
  double step_seconds = 0;
};

// Reads a Sia (or Pollux) placements file: columns placement, local_bsz,
// step_time (others ignored, any order); `placement` is one digit per node,
// the GPUs used on it ("44" = two nodes of 4). INVALID_ARGUMENT naming the
// line for a malformed row.
absl::StatusOr<std::vector<TraceRow>> ReadPlacements(const std::string& path);

// PolluxModel's step time for a row, on the row's own nodes.
double ModelStepSeconds(const PolluxModel& model, const TraceRow& row);

struct PolluxFit {
  PolluxModel model;
  double rms_log_error = 0;  // over the rows fitted
  size_t rows = 0;
};
// Least squares in log step time over `rows`: every parameter >= 0 and g in
// [1, 10] (Pollux's bounds), Nelder-Mead from a data-driven start, for each
// of a few values of g and then over g too. Deterministic.
PolluxFit FitPolluxModel(std::span<const TraceRow> rows, uint32_t gpus_per_node);

// Where Sia's data is on this machine: $RESCALE_SIA_DATA, else the
// project's sibling ../shared/data/sia, else /work/shared/data/sia;
// nullopt when none holds traces/.
std::optional<std::string> SiaDataDirectory();

}  // namespace rescale::sim

#endif  // RESCALE_BENCH_SIM_POLLUX_FIT_H_
