// Throughput profiles: the true speed of a simulated job, seconds per
// training step at n replicas, each replica processing `local_batch` samples
// per step. The simulator advances jobs with these curves and generates the
// step-time samples the decision engine sees from them; the engine never
// reads a profile directly (it must learn the curve from samples, as it does
// from real pods).
//
// A workload names a profile in one of three ways (the `profile` field):
//   NAME                     a built-in profile (BuiltinProfiles())
//   curve:N=R;N=R;...        whole-job samples/s R measured at N replicas;
//                            linear in between, proportional to N below the
//                            first point, flat beyond the last
//   model:a_c=..;b_c=..;...  Pollux's step-time model (../shared/reference/algorithms.md, section
//                            3): T_grad = a_c + b_c*m, T_sync = 0 at one
//                            replica, a_r + b_r*max(n-2,0) on one node,
//                            a_n + b_n*max(n-2,0) across nodes,
//                            T_step = (T_grad^g + T_sync^g)^(1/g); keys
//                            a_c b_c a_r b_r a_n b_n g gpus_per_node
//                            (defaults 0, except g=1, gpus_per_node=4)
//
// Built-ins: the six measured Pollux applications (bert, cifar10,
// deepspeech2, imagenet, ncf, yolov3; step times from the embedded traces,
// see pollux_traces.h) and synthetic curves with exact, documented forms
// (linear, knee, flat, amdahl), used by the analytic tests.
#ifndef RESCALE_BENCH_SIM_PROFILES_H_
#define RESCALE_BENCH_SIM_PROFILES_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace rescale::sim {

// What one built-in profile is, and the defaults it lends a job.
struct BuiltinProfile {
  std::string_view name;
  std::string_view description;
  // Whether the curve comes from the Pollux measurements.
  bool measured = false;
  // Samples in one epoch of the application's dataset (0 = no dataset: give
  // the work in samples). See profiles.cc for where each number comes from.
  double dataset_samples = 0;
  // Epochs the Pollux simulator trains the application for (0 = none).
  double pollux_epochs = 0;
  // Seconds of lost progress per restart (Sia's measurements, or assumed).
  double restart_cost_seconds = 0;
  // Local batch when the workload gives none.
  uint32_t default_local_batch = 32;
  // Largest local batch the application trains with (0 = any); the Pollux
  // artifact caps yolov3 at 8.
  uint32_t max_local_batch = 0;
};

// Every built-in profile, measured ones first.
std::span<const BuiltinProfile> BuiltinProfiles();
// The built-in called `name`, or null.
const BuiltinProfile* FindBuiltinProfile(std::string_view name);

// Parameters of Pollux's step-time model (seconds).
struct PolluxModel {
  double a_c = 0, b_c = 0, a_r = 0, b_r = 0, a_n = 0, b_n = 0;
  double g = 1;
  uint32_t gpus_per_node = 4;
  // Packed on nodes of gpus_per_node...
  double StepSeconds(uint32_t replicas, double local_batch) const;
  // ...or over `nodes` nodes as measured (Sia's and Pollux's placements).
  double StepSecondsOn(uint32_t replicas, uint32_t nodes, double local_batch) const;
};

// A parsed `profile` field.
struct ProfileSpec {
  enum class Kind { kBuiltin, kCurve, kModel };
  Kind kind = Kind::kBuiltin;
  std::string name;  // kBuiltin
  // kCurve: (replicas, whole-job samples/s), ascending replicas, unique.
  std::vector<std::pair<uint32_t, double>> curve;
  PolluxModel model;  // kModel
  // The field as written (canonical form for curves and models).
  std::string text;
};

// Parses NAME | curve:... | model:... ; INVALID_ARGUMENT naming the problem
// (unknown name with the known ones listed, malformed numbers, a curve with
// non-positive or repeated points, unknown model keys).
absl::StatusOr<ProfileSpec> ParseProfile(std::string_view text);

// The true curve of one job: step time at every replica count.
class JobCurve {
 public:
  JobCurve() = default;
  // `step_seconds[n - 1]` is the step time at n replicas, n = 1..size().
  JobCurve(std::vector<double> step_seconds, double local_batch);

  // Seconds per step at `replicas` (>= 1): the table, and beyond it the
  // last entry's throughput (no invented speedup).
  double StepSeconds(uint32_t replicas) const;
  // Whole-job samples/s at `replicas`.
  double SamplesPerSecond(uint32_t replicas) const;
  double local_batch() const { return local_batch_; }

 private:
  std::vector<double> step_seconds_;
  double local_batch_ = 1;
};

// The curve of `profile` at `local_batch` for 1..max_replicas replicas.
// Measured built-ins accept any local batch (see MeasuredApp::StepSeconds).
absl::StatusOr<JobCurve> MakeJobCurve(const ProfileSpec& profile, uint32_t local_batch,
                                      uint32_t max_replicas);

// The measured local batch of built-in `name` nearest to `local_batch` in
// ratio (log scale), capped by the profile's max_local_batch; `local_batch`
// itself for synthetic profiles.
uint32_t RoundToMeasuredLocalBatch(std::string_view name, double local_batch);

}  // namespace rescale::sim

#endif  // RESCALE_BENCH_SIM_PROFILES_H_
