// PlanPipeline: the plans' own copies of the jobs (PlanSlot), their fits and
// planner inputs, and the three steps of a plan: sync the jobs changed since
// the last plan from the registry, compute (fits, policies, the cluster
// planner) on the copies without any lock of the registry's, and commit the
// result through the registry, which records the new generations durably
// before the board shows them. Also the measurements' checkpoint and what
// the last plan did (PlanSummary, for GetCluster).
//
// One plan runs at a time: plan_mu_ is the plan gate, taken by Replan for
// the whole plan and by nothing on a call's path (mutations and reads never
// wait for it). A plan holds it while its generations are written (see
// StateWriter), so the next plan assigns generations after this one's: the
// only wait on I/O under a lock in the engine, and it blocks only the next
// plan.
#ifndef RESCALE_SRC_ENGINE_PLAN_PIPELINE_H_
#define RESCALE_SRC_ENGINE_PLAN_PIPELINE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/time/time.h"
#include "rescale/clock.h"
#include "rescale/cluster_planner.h"
#include "rescale/decision_engine.h"
#include "rescale/metrics_store.h"
#include "rescale/mutex.h"
#include "rescale/policy.h"
#include "src/engine/batch_plan.h"
#include "src/engine/job_entry.h"
#include "src/engine/job_registry.h"
#include "src/engine/job_views.h"
#include "src/engine/state_writer.h"
#include "src/engine/type_curves.h"

namespace rescale::engine {

// What the last plan did, for GetCluster.
struct PlanSummary {
  absl::Time planned_at = absl::InfinitePast();
  double utility = 0;
  double upper_bound = 0;
  double gap = 0;
  bool exact = true;
  uint64_t plans_run = 0;
  // The queues it planned with (ResolveQueues: the defined ones and the
  // default queue) and each one's use, in the same order.
  std::vector<QueueSpec> queues;
  std::vector<PlannedQueue> queue_use;
  // When a checkpoint last wrote every job it meant to.
  absl::Time checkpointed_at = absl::InfinitePast();
  // The GPU types' speed ratios it learned (what views predict with).
  TypeSpeeds type_speeds;
};

class PlanPipeline {
 public:
  // All references outlive the pipeline; `writer` null = no state store.
  PlanPipeline(const EngineOptions& options, Clock& clock, MetricsStore& store,
               JobRegistry& registry, const JobViews& views, StateWriter* writer);

  // Plans every job now and publishes the decisions, unless the engine does
  // not lead (`leading` false).
  void Replan(const std::atomic<bool>& leading);
  // Forgets what earlier plans kept (slots, policy memory, checkpoint
  // marks): the next plan starts from the registry's entries alone.
  void Reset();
  PlanSummary Summary() const;

 private:
  // What a plan derives from one slot that stays put while the entry's
  // version, its fit and whether the capacity is known do: its policy's
  // wish and its planner input, less the fields that move with time
  // (cooldown, waiting). Kept only for `planner` jobs, whose policy reads no
  // clock (the per-job policies' windows and cooldowns do).
  struct PlanInput {
    uint64_t version = 0;
    std::shared_ptr<const Fitted> fitted;
    bool capacity_known = false;
    std::string_view policy;  // the spec's, or the default (static storage)
    bool planned_by_cluster = false;
    PolicyDecision wish;
    absl::Duration cooldown;  // the job's, before any backoff
    PlannerJob job;           // in_cooldown and waiting_seconds unset
    // Goodput planning (batch_plan.h); nullopt = planned on throughput. It
    // points into `fitted`, which this input keeps alive.
    std::optional<GoodputPlan> goodput;
    // Its batch and goodput at n = job.min_replicas + i (goodput planning
    // only): what the planner's curve was made of, and what the
    // recommendation carries for the size planned.
    std::vector<std::optional<BatchChoice>> choices;
    // The GPU types it was made for (TypesKey; 0 = one type), and where
    // each type's curve came from (job.throughput_by_type's order).
    uint64_t types_key = 0;
    std::vector<TypeCurveSource> type_sources;
  };
  // A plan's copy of one job, kept from plan to plan and brought up to date
  // only for the jobs changed since, with what plans keep between them.
  struct PlanSlot {
    // The job's entry as of the last sync, with the plan's policy memory
    // (exploration_stopped, recommendations) in entry.memory beside the
    // cluster's (previous_replicas, scale_events, from the registry).
    JobEntry entry;
    // The curve fitted to the store's statistics at `stats_revision` with
    // the spec of `fitted_spec_version`, refitted only when either moved on.
    std::shared_ptr<const Fitted> fitted;
    std::shared_ptr<const PlanInput> plan_input;
    MetricsStore::StatsRevision stats_revision;
    uint64_t fitted_spec_version = 0;
    std::string fitted_type;  // the GPU type the job ran on when fitted
    // Bumped by every refit; the checkpoint writes the jobs whose fit
    // moved on since the last (checkpointed_fit).
    uint64_t fit_serial = 0;
    uint64_t checkpointed_fit = 0;
    // The plan-written policy memory as last checkpointed.
    bool checkpointed_exploration_stopped = false;
    std::vector<std::pair<absl::Time, uint32_t>> checkpointed_recommendations;
    // The batch last recommended (goodput-planned jobs): what the job runs
    // once that size is applied.
    std::optional<RecommendedBatch> batch;
  };
  using SlotMap = absl::btree_map<std::string, PlanSlot>;
  struct PlanResult {
    std::vector<Recommendation> recs;
    std::vector<uint64_t> registrations;  // the registration each rec is for
    double utility = 0;
    double upper_bound = 0;
    double gap = 0;
    bool exact = true;
    std::vector<QueueSpec> queues;
    std::vector<PlannedQueue> queue_use;
  };

  // Brings the slots up to date with the registry's changes; the capacity.
  CapacityState SyncLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(plan_mu_);
  PlanResult ComputeLocked(std::optional<uint32_t> capacity_gpus, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(plan_mu_);
  // The slot's fit, refitted when its statistics or spec moved on.
  void FitInto(PlanSlot& slot, absl::Time now, bool& refitted) const;
  // The slot's PlanInput: its kept one while it stands, else a new one
  // (see the .cc); `job` gets its planner input.
  // `types`: the cluster's GPU types (null = one type), `types_key` what
  // identifies them and the speeds the typed curves are predicted with.
  struct TypeContext {
    std::span<const GpuType> types;
    const TypeSpeeds* speeds = nullptr;
    uint64_t key = 0;
  };
  // The planner job's curve per GPU type (PlannerJob::throughput_by_type)
  // and the type it runs on, from its fits (type_curves.h).
  void TypedCurves(const JobSpec& spec, const JobStatus& status, const Fitted& fit,
                   const TypeContext& types, PlanInput& input) const;
  std::shared_ptr<const PlanInput> PlanInputOf(PlanSlot& slot, bool refitted, bool capacity_known,
                                               const TypeContext& types, absl::Time now,
                                               PlannerJob& job,
                                               std::shared_ptr<const PlanInput>& source) const;
  // Writes the measurements of the jobs refitted since the last checkpoint
  // (once a plan_interval).
  void CheckpointLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(plan_mu_);

  const EngineOptions& options_;
  Clock& clock_;
  MetricsStore& store_;
  JobRegistry& registry_;
  const JobViews& views_;
  StateWriter* const writer_;

  Mutex plan_mu_;
  SlotMap slots_ ABSL_GUARDED_BY(plan_mu_);
  std::vector<ReplicaSlots> capacity_slots_ ABSL_GUARDED_BY(plan_mu_);
  // The cluster's GPU types (empty = one type), and the speed ratios the
  // last plan's fits taught (type_curves.h): a plan predicts the types a
  // job never ran on with the ratios of the plan before it.
  std::vector<GpuType> capacity_gpu_types_ ABSL_GUARDED_BY(plan_mu_);
  TypeSpeeds type_speeds_ ABSL_GUARDED_BY(plan_mu_);
  std::vector<QueueSpec> capacity_queues_ ABSL_GUARDED_BY(plan_mu_);
  // The planner's input of the last plan, one per slot in the slots'
  // order, and the kept PlanInput each was copied from (null: none): the
  // next plan copies only the jobs whose input changed or moved.
  std::vector<PlannerJob> planner_jobs_ ABSL_GUARDED_BY(plan_mu_);
  std::vector<std::shared_ptr<const PlanInput>> planner_job_sources_ ABSL_GUARDED_BY(plan_mu_);
  absl::Time last_checkpoint_at_ ABSL_GUARDED_BY(plan_mu_) = absl::InfinitePast();
  // Whether the last plan's optimality gap was above kGapWarnShare: a warning
  // is logged when it rises past it, not on every plan above it.
  static constexpr double kGapWarnShare = 0.01;
  bool gap_warned_ ABSL_GUARDED_BY(plan_mu_) = false;

  mutable Mutex summary_mu_;
  PlanSummary summary_ ABSL_GUARDED_BY(summary_mu_);
};

}  // namespace rescale::engine

#endif  // RESCALE_SRC_ENGINE_PLAN_PIPELINE_H_
