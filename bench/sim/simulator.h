// The discrete-event simulation of one policy on one workload: a simulated
// cluster and its jobs around the real rescale::DecisionEngine (no second
// implementation of any policy), driven by a ManualClock.
//
// What happens, in virtual time (seconds from the workload's origin):
//  * Events: job arrivals, capacity changes, plan ticks (every
//    plan_interval_seconds, on a fixed grid; skipped while no job is in the
//    system), job completions and ends of restarts. Between two events every
//    running job trains at a constant rate, so completions are exact.
//  * Arrival: RegisterJob with the job's spec, the policy under test (for a
//    cluster-native one, EnginePolicyFor it) and total_samples = the work
//    times the size-noise factor. Completion: DeregisterJob. Capacity
//    change: SetCapacity (cluster-native: never; their engine plans with
//    the capacity unknown, so each job's recommendation is its own wish).
//  * Tick: the step samples of the interval just ended are ingested (about
//    samples_per_tick per running job, from its true curve at the size it
//    ran, with noise, world_size = running replicas, one pod name per
//    replica, timestamped inside the interval, numbered with the job's
//    global step: one count over its whole life, strictly increasing, as a
//    trainer resuming from a checkpoint numbers them), then Replan().
//  * After every event the simulated controller reads ListRecommendations()
//    and applies each recommendation whose target differs from what runs
//    (shrinks and suspensions first, so GPUs are freed before they are
//    taken), reporting each with ReportApplied(job, replicas, suspended,
//    generation); it repeats while the engine's answer to the new state
//    changes (at most kMaxApplyRounds rounds per event). Cluster-native
//    policies instead ask their scheduler (baselines.h) what every job runs
//    now, reading the recommendations only as kubedl-raw / hpa-raw wishes,
//    and apply and report the difference the same way.
//  * Cost of a change (what restart_cost_seconds means here): a job's very
//    first start is free; a change of size while running (up or down) and a
//    resume after suspension each cost restart_cost_seconds of no progress
//    with the new GPUs held (a further change during the restart starts the
//    cost again); a suspension frees the GPUs at once and stops progress.
//  * Noise: each step of a job takes true_step x exp(sigma*z - sigma^2/2)
//    (mean true_step, z standard normal, sigma = step_noise). The samples the
//    engine sees are single steps with that noise; the job's progress over a
//    plan interval uses the mean of the K steps it takes (K = interval /
//    step), drawn once per interval as 1 + sd*z with sd = sqrt(e^(sigma^2) -
//    1) / sqrt(K), the central-limit equivalent of simulating every step.
//  * Invariant: allocated GPUs never exceed capacity after an event; a
//    violation ends the run with INTERNAL (the controller would have
//    over-committed the cluster).
//  * Nodes (opt-in, node_gpus > 0; node_model.h): the cluster is capacity /
//    node_gpus nodes, some GPUs held by foreign pods. After every event the
//    controller places each replica not yet on a node (jobs in arrival
//    order, best fit, all gpus_per_replica GPUs of a replica on one node);
//    placed replicas stay where they are; one that fits nowhere is a
//    Pending pod. A job trains only while every replica is placed: a
//    PyTorchJob's workers wait at the rendezvous for the whole world, so a
//    job with one pod Pending makes no progress while its placed pods hold
//    their GPUs (we keep them held rather than release them, as the
//    training operator does without gang scheduling). When the gang is whole
//    again after it trained, it pays restart_cost_seconds (it restarts from
//    its checkpoint). A shrink deletes Pending pods first (as a ReplicaSet
//    does), then the highest-numbered ones. Foreign pods come first: when
//    the foreign load on a node grows past what its replicas leave, the
//    replicas of the latest-arrived jobs on it are evicted (Pending again);
//    lost nodes evict theirs. Pending GPU-seconds (GPUs of Pending pods x
//    time) are counted per job. node_aware picks what the engine is told
//    (SimulationOptions::node_aware). Invariants, checked after every event
//    (INTERNAL otherwise): no node holds more than its GPUs; node-aware
//    engine policies never run more GPUs than the free total nor more
//    replicas of a class than its slots.
//  * Deterministic: one std::mt19937_64 seeded with `seed` (the same for
//    every policy, so a policy's result does not depend on which others run)
//    drives all noise; jobs are visited in workload order; no wall clock.
#ifndef RESCALE_BENCH_SIM_SIMULATOR_H_
#define RESCALE_BENCH_SIM_SIMULATOR_H_

#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/sim/sim_options.h"
#include "bench/sim/workload.h"
#include "rescale/decision_engine.h"

namespace rescale::sim {

inline constexpr double kNever = std::numeric_limits<double>::quiet_NaN();

// What happened to one job.
struct JobOutcome {
  std::string id;             // as in the workload
  std::string engine_job_id;  // "sim/<label>" as the engine knew it
  std::string profile;
  double arrival_seconds = 0;
  double first_start_seconds = kNever;  // NaN = never started
  double finish_seconds = kNever;       // NaN = unfinished
  double work_samples = 0;
  double done_samples = 0;
  uint32_t min_replicas = 0, max_replicas = 0, gpus_per_replica = 1;
  // The size fifo and tiresias run it at (workload's requested_replicas,
  // capped by the largest capacity).
  uint32_t requested_replicas = 0;
  uint32_t peak_replicas = 0;
  // What the engine was told (JobSpec.total_samples: work_samples times the
  // size-noise factor) and what it derived from the step numbers it received
  // by the job's completion (JobStatus.samples_processed; short of the work
  // by the last plan interval, whose samples were never sent).
  uint64_t total_samples = 0;
  uint64_t engine_samples_processed = 0;
  // GPU-seconds allocated, and the part of them spent restarting.
  double gpu_seconds = 0;
  double restart_gpu_seconds = 0;
  uint32_t rescales = 0;     // size changes while running
  uint32_t suspensions = 0;  // running -> suspended
  uint32_t resumes = 0;      // suspended -> running
  // Node model: GPUs of this job's Pending pods x the time they pended.
  double pending_gpu_seconds = 0;
  // Its queue (QueueOfJob); empty without queues.
  std::string queue;
  bool finished() const { return !std::isnan(finish_seconds); }
  double jct_seconds() const { return finish_seconds - arrival_seconds; }
  double queue_seconds() const { return first_start_seconds - arrival_seconds; }
  // Changes that paid restart_cost_seconds.
  uint32_t restarts() const { return rescales + resumes; }
};

// The cluster after each event that changed it (a step function).
struct TimelinePoint {
  double time_seconds = 0;
  uint32_t capacity_gpus = 0;
  uint32_t allocated_gpus = 0;
  uint32_t effective_gpus = 0;  // allocated to jobs not restarting
  uint32_t running_jobs = 0;
  uint32_t waiting_jobs = 0;  // arrived, not running (queued or suspended)
  // Node model only (0 otherwise): GPUs of Pending pods, and of foreign pods.
  uint32_t pending_gpus = 0;
  uint32_t foreign_gpus = 0;
  friend bool operator==(const TimelinePoint&, const TimelinePoint&) = default;
};

// From `time_seconds` on, job `job` (index into SimulationResult::jobs) runs
// `replicas` replicas (0 = not running).
struct AllocationChange {
  double time_seconds = 0;
  uint32_t job = 0;
  uint32_t replicas = 0;
  uint32_t gpus = 0;
  friend bool operator==(const AllocationChange&, const AllocationChange&) = default;
};

struct SimulationResult {
  std::string policy;
  std::vector<JobOutcome> jobs;  // workload order
  std::vector<TimelinePoint> timeline;
  std::vector<AllocationChange> allocations;
  double first_arrival_seconds = 0;
  double end_seconds = 0;           // last completion (or the stop)
  double capacity_gpu_seconds = 0;  // capacity integrated from first arrival to end
  uint64_t replans = 0;             // explicit Replan() calls (ticks)
  uint64_t reports = 0;             // ReportApplied calls
  uint64_t samples_ingested = 0;
  uint64_t samples_rejected = 0;  // should stay 0: a rejection is a simulator bug
  // Samples the store dropped as resends (a step not above the pod's last);
  // should stay 0: the simulated trainers number their steps globally.
  uint64_t samples_duplicate = 0;
  bool stopped_early = false;  // hit max_seconds_after_last_arrival
  // The node model ran (node_gpus > 0); foreign GPU-seconds from the first
  // arrival to the end (part of capacity_gpu_seconds).
  bool nodes_modeled = false;
  double foreign_gpu_seconds = 0;
  // Events after which the engine still changed its answer in the last
  // apply round (the rest waits for the next event); expected 0.
  uint64_t unsettled_events = 0;
};

// Runs `workload` under `options.policy`. INVALID_ARGUMENT for an unknown
// policy (listing the known ones), a job that can never fit (min_replicas x
// gpus_per_replica above every capacity) or a curve that cannot be built;
// INTERNAL if the engine rejects a call or the cluster is over-committed.
// Thread-safe: concurrent calls share nothing but read-only data.
absl::StatusOr<SimulationResult> Simulate(const Workload& workload,
                                          const SimulationOptions& options);

// The engine-side name of a workload job id: a DNS-1123-safe label
// (sim_job.cc).
std::string EngineLabel(std::string_view id);

}  // namespace rescale::sim

#endif  // RESCALE_BENCH_SIM_SIMULATOR_H_
