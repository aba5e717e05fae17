// A job as the simulator runs it (private to simulator.cc): its phase, the
// size it runs at, its progress and restart, the segments of the plan
// interval that become its step samples, and the outcome being recorded.
#ifndef RESCALE_BENCH_SIM_SIM_JOB_H_
#define RESCALE_BENCH_SIM_SIM_JOB_H_

#include <algorithm>
#include <cstdint>
#include <deque>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "bench/sim/profiles.h"
#include "bench/sim/simulator.h"
#include "bench/sim/workload.h"

namespace rescale::sim {

inline constexpr double kInfinity = std::numeric_limits<double>::infinity();

enum class Phase { kNotArrived, kWaiting, kRunning, kSuspended, kDone };

// Time a job spent stepping at one size inside the current plan interval.
struct Segment {
  uint32_t replicas = 0;
  double from = 0;
  double to = 0;
  double step_seconds = 0;  // true step time at that size
  // The job's global step count at `from`, and seconds per step in the
  // segment (noise included): what numbers the steps of its samples.
  double first_step = 0;
  double step_period = 0;
};

struct SimJob {
  const JobDescription* desc = nullptr;
  std::string engine_id;
  std::string label;
  JobCurve curve;
  Phase phase = Phase::kNotArrived;
  uint32_t replicas = 0;  // running replicas (0 unless kRunning)
  // fifo and tiresias run the job at this size (requested_replicas, capped
  // by the largest capacity so a job cannot block a FIFO queue forever).
  uint32_t requested = 0;
  // JobSpec.total_samples: the work, times the --size-noise factor.
  uint64_t total_samples = 0;
  // Steps taken over the job's whole life (a trainer resuming from its
  // checkpoint continues the count), and the last step number sent.
  double steps = 0;
  std::optional<uint64_t> last_step_sent;
  double restart_until = -kInfinity;
  double done = 0;
  // Step-time multiplier for the current interval (mean of its steps' noise).
  double interval_noise = 1;
  // Samples/s now (0 unless running); refreshed on every change.
  double rate = 0;
  std::vector<Segment> segments;
  // A deque: samples hold views of these names until ingested, and growing
  // a deque never moves its elements (a vector would, with short strings
  // stored inline).
  std::deque<std::string> pod_names;
  uint64_t next_pod = 0;
  JobOutcome outcome;

  uint32_t gpus() const { return replicas * desc->gpus_per_replica; }
  bool running() const { return phase == Phase::kRunning; }
  // When the job would finish at its current rate (infinity if it would not:
  // a job with a Pending pod does not train).
  double CompletionTime(double now, uint32_t pending_replicas) const {
    if (!running() || rate <= 0 || pending_replicas > 0) return kInfinity;
    const double start = std::max(now, restart_until);
    return start + std::max(0.0, desc->work_samples - done) / rate;
  }
};

}  // namespace rescale::sim

#endif  // RESCALE_BENCH_SIM_SIM_JOB_H_
