// A job as the simulator runs it (private to simulator.cc): its phase, the
// size and batch it runs at, its progress and restart, the segments of the
// plan interval that become its step samples, and the outcome being
// recorded. The batch and statistical efficiency (the --efficiency world,
// pollux_efficiency.h) are in sim_job.cc.
#ifndef RESCALE_BENCH_SIM_SIM_JOB_H_
#define RESCALE_BENCH_SIM_SIM_JOB_H_

#include <algorithm>
#include <cstdint>
#include <deque>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "bench/sim/pollux_efficiency.h"
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
  // Samples per worker per optimizer step (local batch x micro-steps).
  double worker_batch = 0;
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

  // The statistical-efficiency world (SimulationOptions::efficiency, a
  // measured application): its traces; null = every sample counts fully,
  // as before that world existed. `adaptive`: the job takes the batch the
  // engine recommends; otherwise it keeps the workload's local batch. Every
  // job starts at the workload's batch (what its user tuned it for; the
  // trace's M0 is the reference EFF and progress are counted against).
  const EfficiencyTrace* efficiency = nullptr;
  bool adaptive = false;
  uint32_t min_local_batch = 1;
  uint32_t max_local_batch = 0;  // 0 = no bound
  // Extra micro-steps per optimizer step (the curve is at the local batch).
  uint32_t accumulation = 0;

  uint32_t gpus() const { return replicas * desc->gpus_per_replica; }
  // One optimizer step at the running size, seconds: the curve's step, plus
  // a single replica's compute per extra micro-step (no synchronisation).
  double StepSeconds() const {
    return accumulation == 0 ? curve.StepSeconds(replicas)
                             : curve.StepSeconds(replicas) + accumulation * curve.StepSeconds(1);
  }
  // Samples per worker per optimizer step, and the total batch.
  double WorkerBatch() const { return curve.local_batch() * (accumulation + 1.0); }
  double TotalBatch() const { return replicas * WorkerBatch(); }
  // EFF of the total batch where the job is in its training (1 outside the
  // efficiency world).
  double Efficiency() const;
  // Progress per second at the running size without noise: samples/s, and
  // in the efficiency world samples at M0 per second (x EFF).
  double ProgressPerSecond() const;
  // Sets up the batch world of a job before its arrival (see above).
  absl::Status PrepareBatch(bool efficiency_world, bool adaptive_batch);
  // Runs at (local, accumulation) from now on: the curve at that batch.
  absl::Status SetBatch(uint32_t local, uint32_t accumulation_steps);
  // The engine's view of the batch bounds (JobSpec.batch_scaling), for
  // adaptive jobs.
  BatchLimits Limits() const;
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
