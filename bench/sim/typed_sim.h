// The simulation of a cluster of several GPU types (issue 34; `rescale-sim
// run|sweep --cluster FILE|sia`). Time advances in plan intervals; a job
// runs on one type at a time, its replicas packed on that type's nodes, and
// steps as Sia measured its application on that type (the built-in per-type
// Pollux models, sia_profiles.h). Every (re)start or resize holds the job's
// GPUs idle for its application's checkpoint-restore time (Sia's
// rescale_time: bert 120 s, cifar10 50, deepspeech2 25, imagenet 250, ncf
// 15, yolov3 80); a first start pays it too.
//
// Policies (TypedPolicies()):
//  * planner            Rescale's engine told the types (SetCapacity
//                       gpu_types): samples carry their type, the planner
//                       chooses type and size, the recommendation's gpu_type
//                       is applied. On arrival each job reports a few steps
//                       on one GPU of every type, as Sia's bootstrapping
//                       profiles it (uncharged, as in Sia's simulator).
//  * planner-typeblind  the same engine told only the total: one curve per
//                       job whatever type its samples ran on, and the
//                       recommended size placed first-fit (the type it runs
//                       on if it has room, else the first type in cluster
//                       order with room, else the most room).
//  * fifo               the submitted size on the first type with room,
//                       strictly in arrival order, never resized.
//  * tiresias           the submitted size, preemptive two-queue least
//                       attained service (baselines.h), each job on the
//                       first type with room (its own type first).
// What it leaves out: the efficiency world (every sample counts; the batch
// is the submitted one throughout), per-type batch limits (e.g. 11 GB RTX
// 2080 Ti), queues, and nodes shared by two jobs' replicas (each type is a
// pool of GPUs; replicas are packed on its nodes for the step time only).
#ifndef RESCALE_BENCH_SIM_TYPED_SIM_H_
#define RESCALE_BENCH_SIM_TYPED_SIM_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/sim/typed_cluster.h"
#include "bench/sim/workload.h"
#include "rescale/cluster_planner.h"

namespace rescale::sim {

std::vector<std::string> TypedPolicies();

struct TypedSimOptions {
  std::string policy = "planner";
  TypedCluster cluster;
  double plan_interval_seconds = 30;
  int samples_per_tick = 10;
  double step_noise = 0.05;  // sigma of the log-normal noise on reported steps
  uint64_t seed = 1;
  double cooldown_seconds = 60;
  double horizon_seconds = 600;
  PlanObjectiveKind objective = PlanObjectiveKind::kJct;
  double max_seconds_after_last_arrival = 30 * 86400.0;
};

struct TypedJobOutcome {
  std::string id;
  std::string app;
  double arrival_seconds = 0;
  double finish_seconds = -1;  // -1 = unfinished when the run stopped
  uint32_t restarts = 0;       // (re)starts after the first, and moves
  std::vector<double> gpu_seconds_by_type;
};

struct TypedSimResult {
  std::string policy;
  std::vector<std::string> types;  // cluster order
  std::vector<TypedJobOutcome> jobs;
  double makespan_seconds = 0;
  uint64_t plans = 0;
};

// INVALID_ARGUMENT for an unknown policy, or a job whose application has no
// built-in per-type profile.
absl::StatusOr<TypedSimResult> SimulateTyped(const Workload& workload,
                                             const TypedSimOptions& options);

// Per run: average JCT of the finished jobs (hours), their p99, restarts per
// job, GPU-hours per type, unfinished jobs.
struct TypedSummary {
  std::string policy;
  double avg_jct_hours = 0;
  double p99_jct_hours = 0;
  double makespan_hours = 0;
  double restarts_per_job = 0;
  std::vector<double> gpu_hours_by_type;
  uint32_t unfinished = 0;
};
TypedSummary Summarize(const TypedSimResult& result);

}  // namespace rescale::sim

#endif  // RESCALE_BENCH_SIM_TYPED_SIM_H_
