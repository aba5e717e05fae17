// Built-in per-GPU-type profiles of Sia's applications: Pollux's step-time
// model (PolluxModel) fitted per (application, GPU type) to Sia's measured
// placements, for the simulator's heterogeneous cluster (issue 34). The raw
// traces carry no licence, so only the fitted parameters are built in, with
// their source and fit error; `rescale-sim fit-sia` derives them again from
// the raw files (SiaDataDirectory, pollux_fit.h).
//
// Source: github.com/siasosp23/artifacts at aaf7a0d,
// sia-simulator/traces/APP/placements-TYPE.csv, as copied to
// ../shared/data/sia/traces/. Types: "aws" = NVIDIA T4 (g4dn.12xlarge, 4 per
// node), "rtx" = GeForce RTX 2080 Ti (8 per node, 50 Gb/s Ethernet),
// "dgx-ext" = A100 (DGX, 8 per node): sia-simulator/simulator_config.py.
#ifndef RESCALE_BENCH_SIM_SIA_PROFILES_H_
#define RESCALE_BENCH_SIM_SIA_PROFILES_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "bench/sim/profiles.h"

namespace rescale::sim {

// One Sia GPU type as its traces name it, and its node size.
struct SiaGpuType {
  std::string_view trace_suffix;  // aws, rtx, dgx-ext
  std::string_view product;       // the node label nvidia.com/gpu.product
  uint32_t gpus_per_node = 0;
};
std::span<const SiaGpuType> SiaGpuTypes();

struct SiaProfile {
  std::string_view app;   // bert, cifar10, deepspeech2, imagenet, ncf, yolov3
  std::string_view type;  // trace suffix
  PolluxModel model;
  double rms_log_error = 0;  // of the fit over its rows
  uint32_t rows = 0;         // measured placements fitted
};
// Every built-in (application, type), applications in order.
std::span<const SiaProfile> SiaProfiles();
// The built-in of (app, type suffix), or null.
const SiaProfile* FindSiaProfile(std::string_view app, std::string_view type);

// Fits every (application, type) from the traces under `sia_dir`
// (.../traces/APP/placements-TYPE.csv) and returns a report: per pair the
// parameters, the fit's rms log error, and each built-in's error on the same
// rows, followed by the C++ initialisers of SiaProfiles().
absl::StatusOr<std::string> FitSiaProfiles(const std::string& sia_dir);

}  // namespace rescale::sim

#endif  // RESCALE_BENCH_SIM_SIA_PROFILES_H_
