// The discrete-event simulation of one policy run (see simulator.h).
#include "bench/sim/simulator.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <random>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "bench/sim/baselines.h"
#include "bench/sim/node_model.h"
#include "bench/sim/queue_report.h"
#include "bench/sim/sim_job.h"
#include "rescale/apply_order.h"
#include "rescale/clock.h"
#include "rescale/decision_engine.h"
#include "rescale/status_macros.h"
#include "rescale/types.h"
#include "rescale/validation.h"

namespace rescale::sim {
namespace {

// Rounds of apply-then-relist per event. The engine replans inline on each
// ReportApplied, so a second round picks up what the applied state changed;
// more than a few rounds would mean the plan oscillates at one instant.
constexpr int kMaxApplyRounds = 4;
// Where virtual time 0 sits on the engine's clock.
const absl::Time kOrigin = absl::FromUnixSeconds(1'700'000'000);
class Simulation {
 public:
  Simulation(const Workload& workload, const SimulationOptions& options)
      : workload_(workload), options_(options), rng_(options.seed), clock_(kOrigin) {}

  absl::StatusOr<SimulationResult> Run();

 private:
  absl::Status Prepare();
  // Moves every running job from now_ to `t`.
  void Advance(double t);
  absl::Status Finish(SimJob& job);
  absl::Status Arrive(SimJob& job);
  absl::Status Tick();
  absl::Status ApplyRecommendations();
  absl::Status ApplyClusterNative();
  // A size the controller sets, and the generation it reports it against.
  struct Change {
    SimJob* job;
    uint32_t target;
    uint64_t generation;
    // The recommended batch (goodput-planned jobs): local, accumulation.
    std::optional<std::pair<uint32_t, uint32_t>> batch;
  };
  // As rescale-adapter does: every shrink and suspension before any growth,
  // each reported with ReportApplied; then the capacity invariant.
  absl::Status ApplyChanges(std::vector<Change> changes);
  absl::Status Apply(SimJob& job, uint32_t target,
                     const std::optional<std::pair<uint32_t, uint32_t>>& batch);
  void DrawIntervalNoise(SimJob& job);
  void RecordTimeline();
  absl::Status CheckCapacity() const;
  // The node model (node_model.h); every one a no-op while it is off.
  bool nodes_modeled() const { return nodes_.has_value(); }
  size_t IndexOf(const SimJob& job) const { return static_cast<size_t>(&job - jobs_.data()); }
  // Replicas of the job without a node (0 without the node model).
  uint32_t PendingReplicas(const SimJob& job) const {
    return nodes_modeled() ? nodes_->PendingReplicas(IndexOf(job)) : 0;
  }
  // The job's placement follows its running replicas.
  void ResizePlacement(SimJob& job) {
    if (nodes_modeled()) nodes_->Resize(IndexOf(job), job.replicas);
  }
  // Places every Pending replica that fits (jobs in arrival order, best
  // fit); a job whose gang is whole again after it trained pays a restart.
  void PlacePending();
  // Node-aware engine policies: SetCapacity(report) when it changed.
  absl::Status ReportNodes();
  absl::Status CheckNodes() const;
  uint32_t AllocatedGpus() const;
  double StepNoise();

  const Workload& workload_;
  const SimulationOptions& options_;
  std::mt19937_64 rng_;
  std::normal_distribution<double> normal_{0.0, 1.0};
  ManualClock clock_;
  std::unique_ptr<DecisionEngine> engine_;
  std::vector<SimJob> jobs_;
  std::map<std::string, size_t, std::less<>> by_engine_id_;
  double now_ = 0;
  uint32_t capacity_ = 0;
  double next_tick_ = 0;
  double last_tick_ = 0;
  size_t in_system_ = 0;  // arrived and not done
  PolicyKind kind_ = PolicyKind::kPlanner;
  TiresiasScheduler tiresias_;
  std::optional<NodeModel> nodes_;
  std::optional<CapacityReport> reported_;  // last node report sent
  SimulationResult result_;
};

double Simulation::StepNoise() {
  if (options_.step_noise <= 0) return 1;
  const double sigma = options_.step_noise;
  return std::exp(sigma * normal_(rng_) - sigma * sigma / 2);
}

void Simulation::DrawIntervalNoise(SimJob& job) {
  job.interval_noise = 1;
  if (options_.step_noise > 0 && job.running()) {
    const double sigma = options_.step_noise;
    const double steps = std::max(1.0, options_.plan_interval_seconds / job.StepSeconds());
    const double sd = std::sqrt(std::expm1(sigma * sigma) / steps);
    // A mean of positive steps is positive; the floor only guards the tail
    // of the normal approximation for tiny K.
    job.interval_noise = std::max(0.1, 1 + sd * normal_(rng_));
  }
  job.rate = job.running() ? job.ProgressPerSecond() / job.interval_noise : 0;
}

// The job's work times exp(sigma x z), z standard normal from a generator
// of its own (seeded by the run's seed and the job's index), so the factor
// is the same under every policy and draws nothing from the noise stream.
uint64_t TotalSamples(double work, double sigma, uint64_t seed, size_t index) {
  double factor = 1;
  if (sigma > 0) {
    std::seed_seq seq{uint32_t(seed), uint32_t(seed >> 32), uint32_t(index),
                      uint32_t(uint64_t{index} >> 32), 0x517e5u};
    std::mt19937_64 rng(seq);
    factor = std::exp(sigma * std::normal_distribution<double>(0, 1)(rng));
  }
  return static_cast<uint64_t>(std::max(1.0, std::round(work * factor)));
}

absl::Status Simulation::Prepare() {
  if (absl::Status s = ValidateSimulationOptions(options_); !s.ok()) return s;
  kind_ = KindOf(options_.policy);
  uint32_t largest_capacity = options_.capacity_gpus;
  for (const CapacityChange& c : options_.capacity_changes)
    largest_capacity = std::max(largest_capacity, c.gpus);
  uint32_t largest_max = 1;
  std::set<std::string> labels;
  jobs_.reserve(workload_.jobs.size());
  for (const JobDescription& desc : workload_.jobs) {
    SimJob job;
    job.desc = &desc;
    const uint64_t min_gpus = uint64_t{desc.min_replicas} * desc.gpus_per_replica;
    if (min_gpus > largest_capacity) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "job \"%s\" needs %d GPUs at min_replicas but the cluster never has more than %d",
          desc.id, min_gpus, largest_capacity));
    }
    absl::StatusOr<JobCurve> curve =
        MakeJobCurve(desc.profile, desc.local_batch_size, desc.max_replicas);
    if (!curve.ok()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("job \"%s\": %s", desc.id, curve.status().message()));
    }
    job.curve = *std::move(curve);
    if (absl::Status s = job.PrepareBatch(options_.efficiency, options_.policy == "planner");
        !s.ok()) {
      return absl::InvalidArgumentError(absl::StrFormat("job \"%s\": %s", desc.id, s.message()));
    }
    job.requested = std::max(
        desc.min_replicas,
        std::min(desc.requested_replicas, largest_capacity / std::max(desc.gpus_per_replica, 1u)));
    job.total_samples =
        TotalSamples(desc.work_samples, options_.size_noise, options_.seed, jobs_.size());
    job.outcome.requested_replicas = job.requested;
    job.outcome.total_samples = job.total_samples;
    // Unique engine names, deterministic in workload order.
    std::string label = EngineLabel(desc.id);
    for (int suffix = 2; labels.contains(label); ++suffix) {
      label = EngineLabel(desc.id).substr(0, 200) + "-" + std::to_string(suffix);
    }
    labels.insert(label);
    job.label = label;
    job.engine_id = "sim/" + label;
    job.outcome.id = desc.id;
    job.outcome.engine_job_id = job.engine_id;
    job.outcome.profile = desc.profile.text;
    job.outcome.arrival_seconds = desc.arrival_seconds;
    job.outcome.work_samples = desc.work_samples;
    job.outcome.min_replicas = desc.min_replicas;
    job.outcome.max_replicas = desc.max_replicas;
    job.outcome.gpus_per_replica = desc.gpus_per_replica;
    job.outcome.queue = QueueOfJob(options_.queues, desc, jobs_.size());
    largest_max = std::max(largest_max, desc.max_replicas);
    jobs_.push_back(std::move(job));
  }
  for (size_t i = 0; i < jobs_.size(); ++i) by_engine_id_[jobs_[i].engine_id] = i;

  absl::StatusOr<std::unique_ptr<DecisionEngine>> engine = DecisionEngine::Create(
      EngineOptionsFor(options_, static_cast<uint32_t>(jobs_.size()), largest_max), &clock_);
  if (!engine.ok()) return engine.status();
  engine_ = *std::move(engine);
  // Cluster-native schedulers have one pool; their engine only states wishes.
  if (!options_.queues.empty() && kind_ != PolicyKind::kClusterNative)
    RETURN_IF_ERROR(engine_->SetQueues(options_.queues).status());
  capacity_ = options_.capacity_gpus;
  result_.policy = options_.policy;
  result_.first_arrival_seconds = jobs_.empty() ? 0 : jobs_.front().desc->arrival_seconds;
  if (options_.node_gpus > 0) {
    std::vector<uint32_t> capacities = {options_.capacity_gpus};
    for (const CapacityChange& c : options_.capacity_changes) capacities.push_back(c.gpus);
    absl::StatusOr<NodeModel> nodes =
        NodeModel::Create(options_.node_gpus, capacities, workload_.jobs, options_.seed,
                          options_.foreign_load, options_.foreign_interval_seconds);
    if (!nodes.ok()) return nodes.status();
    nodes_.emplace(*std::move(nodes));
    result_.nodes_modeled = true;
    if (absl::Status s = ReportNodes(); !s.ok()) return s;
  }
  return absl::OkStatus();
}

void Simulation::Advance(double t) {
  const double span = t - now_;
  if (span <= 0) {
    now_ = std::max(now_, t);
    return;
  }
  if (now_ >= result_.first_arrival_seconds) {
    result_.capacity_gpu_seconds += double(capacity_) * span;
    if (nodes_modeled()) result_.foreign_gpu_seconds += double(nodes_->ForeignGpus()) * span;
  }
  for (SimJob& job : jobs_) {
    if (!job.running()) continue;
    // Pending pods hold no GPU, and a job with one does not train.
    const uint32_t pending = PendingReplicas(job) * job.desc->gpus_per_replica;
    const double gpus = job.gpus() - pending;
    job.outcome.gpu_seconds += gpus * span;
    if (pending > 0) {
      job.outcome.pending_gpu_seconds += pending * span;
      continue;
    }
    const double restarting = std::clamp(job.restart_until - now_, 0.0, span);
    job.outcome.restart_gpu_seconds += gpus * restarting;
    const double from = now_ + restarting;
    if (from < t) {
      job.done += job.rate * (t - from);
      const double step = job.StepSeconds();
      const double period = step * job.interval_noise;
      if (!job.segments.empty() && job.segments.back().replicas == job.replicas &&
          job.segments.back().to == from && job.segments.back().step_period == period) {
        job.segments.back().to = t;
      } else {
        job.segments.push_back({job.replicas, from, t, step, job.steps, period, job.WorkerBatch()});
      }
      job.steps += (t - from) / period;
    }
  }
  now_ = t;
  clock_.Set(kOrigin + absl::Seconds(now_));
}

absl::Status Simulation::Arrive(SimJob& job) {
  const JobDescription& d = *job.desc;
  JobSpec spec;
  spec.job_id = job.engine_id;
  spec.min_replicas = d.min_replicas;
  spec.max_replicas = d.max_replicas;
  spec.gpus_per_replica = d.gpus_per_replica;
  spec.priority = d.priority;
  spec.preemptible = d.preemptible;
  spec.restart_cost_seconds = d.restart_cost_seconds;
  spec.local_batch_size = d.local_batch_size;
  spec.policy = EnginePolicyFor(options_.policy);
  spec.total_samples = job.total_samples;
  if (job.adaptive) spec.batch_scaling = job.Limits();
  spec.queue = job.outcome.queue;
  absl::StatusOr<JobView> view = engine_->RegisterJob(std::move(spec));
  if (!view.ok()) {
    return absl::InternalError(
        absl::StrFormat("RegisterJob(%s): %s", job.engine_id, view.status().ToString()));
  }
  job.phase = Phase::kWaiting;
  ++in_system_;
  return absl::OkStatus();
}

absl::Status Simulation::Finish(SimJob& job) {
  job.done = job.desc->work_samples;
  job.outcome.done_samples = job.done;
  job.outcome.finish_seconds = now_;
  job.phase = Phase::kDone;
  job.replicas = 0;
  ResizePlacement(job);
  job.rate = 0;
  job.segments.clear();
  --in_system_;
  result_.allocations.push_back({now_, static_cast<uint32_t>(&job - jobs_.data()), 0, 0});
  if (options_.jobs_finished != nullptr)
    options_.jobs_finished->fetch_add(1, std::memory_order_relaxed);
  if (absl::StatusOr<JobView> view = engine_->GetJob(job.engine_id); view.ok())
    job.outcome.engine_samples_processed = view->status.samples_processed;
  absl::Status status = engine_->DeregisterJob(job.engine_id);
  if (!status.ok()) {
    return absl::InternalError(
        absl::StrFormat("DeregisterJob(%s): %s", job.engine_id, status.ToString()));
  }
  return absl::OkStatus();
}

absl::Status Simulation::Tick() {
  // The samples of the interval just ended, as the agents would have sent.
  std::vector<StepSample> samples;
  const double interval = options_.plan_interval_seconds;
  for (SimJob& job : jobs_) {
    if (job.segments.empty()) continue;
    if (job.phase == Phase::kDone) {
      job.segments.clear();
      continue;
    }
    for (const Segment& seg : job.segments) {
      const double length = seg.to - seg.from;
      const double steps = std::floor(length / seg.step_seconds);
      int count = static_cast<int>(std::min<double>(
          steps, std::max(1.0, std::round(options_.samples_per_tick * length / interval))));
      if (options_.samples_per_tick <= 0) count = 0;
      if (job.pod_names.size() < seg.replicas) {
        for (size_t i = job.pod_names.size(); i < seg.replicas; ++i) {
          job.pod_names.push_back(absl::StrFormat("%s-worker-%d", job.label, i));
        }
      }
      for (int k = 0; k < count; ++k) {
        StepSample s;
        s.job_id = job.engine_id;
        s.pod = job.pod_names[job.next_pod++ % seg.replicas];
        s.world_size = seg.replicas;
        s.step_seconds = seg.step_seconds * StepNoise();
        s.batch_size = job.desc->local_batch_size;
        if (job.efficiency != nullptr) {
          // An instrumented trainer's report: its batch per step, and the
          // gradient statistics where it is in training, at M0 (AdaptDL's).
          s.batch_size = static_cast<uint32_t>(std::lround(seg.worker_batch));
          const GradientStats stats =
              job.efficiency->StatsAt(job.efficiency->EpochAt(job.done / job.desc->work_samples),
                                      seg.replicas * seg.worker_batch);
          s.grad_sqr = stats.sqr;
          s.grad_var = stats.var;
          s.grad_batch = job.efficiency->initial_batch();
        }
        const double at = seg.from + (k + 0.5) * length / count;
        // The job's step at that instant; strictly increasing per job (so
        // per pod), or the store would drop the sample as a resend.
        uint64_t step = static_cast<uint64_t>(seg.first_step + (at - seg.from) / seg.step_period);
        if (job.last_step_sent) step = std::max(step, *job.last_step_sent + 1);
        job.last_step_sent = step;
        s.step = step;
        s.timestamp_unix_nanos = absl::ToUnixNanos(kOrigin + absl::Seconds(at));
        samples.push_back(s);
      }
    }
    job.segments.clear();
  }
  if (!samples.empty()) {
    const IngestResult ingested = engine_->Ingest(samples);
    result_.samples_ingested += ingested.accepted;
    result_.samples_rejected += ingested.rejected;
    result_.samples_duplicate += ingested.duplicates;
  }
  engine_->Replan();
  ++result_.replans;
  for (SimJob& job : jobs_) {
    if (job.running()) DrawIntervalNoise(job);
  }
  return absl::OkStatus();
}

absl::Status Simulation::Apply(SimJob& job, uint32_t target,
                               const std::optional<std::pair<uint32_t, uint32_t>>& batch) {
  const uint32_t before = job.replicas;
  // The batch changes only with the size (workers read it at start).
  if (target > 0 && target != before && job.adaptive && batch.has_value())
    RETURN_IF_ERROR(job.SetBatch(batch->first, batch->second));
  const double cost = job.desc->restart_cost_seconds;
  if (target == 0) {
    job.phase = Phase::kSuspended;
    job.replicas = 0;
    job.restart_until = -kInfinity;
    ++job.outcome.suspensions;
  } else if (before == 0) {
    if (job.phase == Phase::kWaiting) {
      job.outcome.first_start_seconds = now_;  // the first start is free
      job.restart_until = -kInfinity;
    } else {
      ++job.outcome.resumes;
      job.restart_until = now_ + cost;
    }
    job.phase = Phase::kRunning;
    job.replicas = target;
  } else {
    ++job.outcome.rescales;
    job.replicas = target;
    job.restart_until = now_ + cost;
  }
  job.outcome.peak_replicas = std::max(job.outcome.peak_replicas, job.replicas);
  ResizePlacement(job);
  DrawIntervalNoise(job);
  result_.allocations.push_back(
      {now_, static_cast<uint32_t>(&job - jobs_.data()), job.replicas, job.gpus()});
  return absl::OkStatus();
}

absl::Status Simulation::ApplyRecommendations() {
  for (int round = 0; round < kMaxApplyRounds; ++round) {
    std::vector<Change> changes;
    for (const Recommendation& rec : engine_->ListRecommendations()) {
      auto it = by_engine_id_.find(rec.job_id);
      if (it == by_engine_id_.end()) continue;
      SimJob& job = jobs_[it->second];
      if (job.phase == Phase::kDone || job.phase == Phase::kNotArrived) continue;
      const uint32_t target = rec.suspend ? 0 : rec.replicas;
      if (target == job.replicas) {
        // An instrumented trainer takes a new batch at its size in place,
        // without a restart (as AdaptDL's data loader does).
        if (target > 0 && job.adaptive && rec.local_batch_size.has_value()) {
          RETURN_IF_ERROR(job.SetBatch(*rec.local_batch_size, rec.accumulation_steps.value_or(0)));
          job.rate = job.ProgressPerSecond() / job.interval_noise;
        }
        continue;
      }
      std::optional<std::pair<uint32_t, uint32_t>> batch;
      if (rec.local_batch_size.has_value())
        batch.emplace(*rec.local_batch_size, rec.accumulation_steps.value_or(0));
      changes.push_back({&job, target, rec.generation, batch});
    }
    if (changes.empty()) return absl::OkStatus();
    RETURN_IF_ERROR(ApplyChanges(std::move(changes)));
  }
  ++result_.unsettled_events;  // still changing after the last round
  return absl::OkStatus();
}

absl::Status Simulation::ApplyChanges(std::vector<Change> changes) {
  OrderForApply(changes, [](const Change& c) { return std::pair(c.job->replicas, c.target); });
  for (const Change& c : changes) {
    RETURN_IF_ERROR(Apply(*c.job, c.target, c.batch));
    ++result_.reports;
    // What actually runs, which for kubedl-raw and hpa-raw may be less than
    // the wish: the policy reacts to it as it would in the real cluster.
    absl::StatusOr<JobStatus> status =
        engine_->ReportApplied(c.job->engine_id, c.target, c.target == 0, c.generation);
    if (!status.ok()) {
      return absl::InternalError(absl::StrFormat("ReportApplied(%s, %d): %s", c.job->engine_id,
                                                 c.target, status.status().ToString()));
    }
  }
  return CheckCapacity();
}

absl::Status Simulation::ApplyClusterNative() {
  const bool elastic = options_.policy == "kubedl-raw" || options_.policy == "hpa-raw";
  for (int round = 0; round < kMaxApplyRounds; ++round) {
    std::vector<ClusterJob> view(jobs_.size());
    std::vector<uint64_t> generation(jobs_.size(), 0);
    if (elastic) {
      for (const Recommendation& rec : engine_->ListRecommendations()) {
        auto it = by_engine_id_.find(rec.job_id);
        if (it == by_engine_id_.end()) continue;
        view[it->second].wish = rec.suspend ? 0 : rec.replicas;
        generation[it->second] = rec.generation;
      }
    }
    for (size_t i = 0; i < jobs_.size(); ++i) {
      const SimJob& job = jobs_[i];
      ClusterJob& v = view[i];
      v.active = job.phase == Phase::kWaiting || job.phase == Phase::kRunning ||
                 job.phase == Phase::kSuspended;
      v.min_replicas = job.desc->min_replicas;
      v.requested_replicas = job.requested;
      v.gpus_per_replica = job.desc->gpus_per_replica;
      v.running_replicas = job.replicas;
      v.attained_gpu_seconds = job.outcome.gpu_seconds;
    }
    std::vector<uint32_t> targets;
    if (options_.policy == "fifo") {
      targets = FifoRound(view, capacity_);
    } else if (options_.policy == "tiresias") {
      targets = tiresias_.Round(view, capacity_);
    } else {
      targets = FirstComeFirstServed(view, capacity_);
    }
    std::vector<Change> changes;
    for (size_t i = 0; i < jobs_.size(); ++i) {
      if (view[i].active && targets[i] != jobs_[i].replicas)
        changes.push_back({&jobs_[i], targets[i], generation[i], std::nullopt});
    }
    if (changes.empty()) return absl::OkStatus();
    RETURN_IF_ERROR(ApplyChanges(std::move(changes)));
    if (!elastic) return absl::OkStatus();  // fixed sizes: one round settles
  }
  ++result_.unsettled_events;
  return absl::OkStatus();
}

uint32_t Simulation::AllocatedGpus() const {
  uint32_t gpus = 0;
  for (const SimJob& job : jobs_) gpus += job.gpus();
  return gpus;
}

absl::Status Simulation::CheckCapacity() const {
  const uint32_t allocated = AllocatedGpus();
  if (allocated <= capacity_) return absl::OkStatus();
  return absl::InternalError(absl::StrFormat(
      "policy %s: %d GPUs allocated on a cluster of %d at t=%.3f s (the plan over-commits)",
      options_.policy, allocated, capacity_, now_));
}

void Simulation::RecordTimeline() {
  TimelinePoint p;
  p.time_seconds = now_;
  p.capacity_gpus = capacity_;
  for (const SimJob& job : jobs_) {
    if (job.running()) {
      const uint32_t pending = PendingReplicas(job) * job.desc->gpus_per_replica;
      p.allocated_gpus += job.gpus() - pending;
      p.pending_gpus += pending;
      if (job.restart_until <= now_ && pending == 0) p.effective_gpus += job.gpus();
      ++p.running_jobs;
    } else if (job.phase == Phase::kWaiting || job.phase == Phase::kSuspended) {
      ++p.waiting_jobs;
    }
  }
  if (nodes_modeled()) p.foreign_gpus = nodes_->ForeignGpus();
  if (!result_.timeline.empty()) {
    TimelinePoint last = result_.timeline.back();
    last.time_seconds = now_;
    if (last == p) return;
    if (result_.timeline.back().time_seconds == now_) {
      result_.timeline.back() = p;  // several events at one instant: keep the last state
      return;
    }
  }
  result_.timeline.push_back(p);
}

void Simulation::PlacePending() {
  if (!nodes_modeled()) return;
  for (SimJob& job : jobs_) {
    if (!job.running()) continue;
    // The workers restart from the checkpoint once the world is whole
    // again; a job that never trained starts for free.
    if (nodes_->Place(IndexOf(job)) && job.steps > 0)
      job.restart_until = std::max(job.restart_until, now_ + job.desc->restart_cost_seconds);
  }
}

absl::Status Simulation::ReportNodes() {
  if (!nodes_modeled() || !options_.node_aware || kind_ == PolicyKind::kClusterNative)
    return absl::OkStatus();
  std::vector<uint32_t> classes;
  for (const SimJob& job : jobs_) {
    if (job.phase != Phase::kNotArrived && job.phase != Phase::kDone)
      classes.push_back(job.desc->gpus_per_replica);
  }
  CapacityReport report = nodes_->Report(classes);
  if (reported_ == report) return absl::OkStatus();
  absl::StatusOr<ClusterView> view = engine_->SetCapacity(report);
  if (!view.ok()) {
    return absl::InternalError(absl::StrFormat("SetCapacity(%d GPUs, %d classes): %s",
                                               report.total_gpus, report.slots.size(),
                                               view.status().ToString()));
  }
  reported_ = std::move(report);
  return absl::OkStatus();
}

absl::Status Simulation::CheckNodes() const {
  if (!nodes_modeled()) return absl::OkStatus();
  RETURN_IF_ERROR(nodes_->Check(options_.policy, now_));
  if (!reported_) return absl::OkStatus();
  // What the planner promised: never more than the free GPUs, nor more
  // replicas of a class than fit on the nodes.
  const uint32_t allocated = AllocatedGpus();
  if (allocated > reported_->total_gpus) {
    return absl::InternalError(absl::StrFormat(
        "policy %s (node-aware): %d GPUs run, but only %d are free of foreign pods at t=%.3f s",
        options_.policy, allocated, reported_->total_gpus, now_));
  }
  for (const ReplicaSlots& slots : reported_->slots) {
    uint32_t replicas = 0;
    for (const SimJob& job : jobs_) {
      if (job.desc->gpus_per_replica == slots.gpus_per_replica) replicas += job.replicas;
    }
    if (replicas > slots.replicas) {
      return absl::InternalError(absl::StrFormat(
          "policy %s (node-aware): %d replicas of %d GPUs run, but only %d fit on the nodes at "
          "t=%.3f s",
          options_.policy, replicas, slots.gpus_per_replica, slots.replicas, now_));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<SimulationResult> Simulation::Run() {
  if (absl::Status s = Prepare(); !s.ok()) return s;
  const double interval = options_.plan_interval_seconds;
  const double deadline = (jobs_.empty() ? 0 : jobs_.back().desc->arrival_seconds) +
                          options_.max_seconds_after_last_arrival;
  size_t next_arrival = 0;
  size_t next_capacity = 0;
  const auto& changes = options_.capacity_changes;
  while (true) {
    if (in_system_ == 0 && next_arrival == jobs_.size()) break;
    // The next event.
    double t = kInfinity;
    if (next_arrival < jobs_.size()) t = std::min(t, jobs_[next_arrival].desc->arrival_seconds);
    if (next_capacity < changes.size()) t = std::min(t, changes[next_capacity].at_seconds);
    if (in_system_ > 0) t = std::min(t, next_tick_);
    if (nodes_modeled()) {
      if (std::optional<double> change = nodes_->NextForeignChange()) t = std::min(t, *change);
    }
    std::vector<double> completion(jobs_.size(), kInfinity);
    for (size_t i = 0; i < jobs_.size(); ++i) {
      SimJob& job = jobs_[i];
      if (!job.running()) continue;
      completion[i] = job.CompletionTime(now_, PendingReplicas(job));
      t = std::min(t, completion[i]);
      if (job.restart_until > now_) t = std::min(t, job.restart_until);
    }
    if (t > deadline) {
      Advance(deadline);
      result_.stopped_early = true;
      break;
    }
    Advance(t);

    for (size_t i = 0; i < jobs_.size(); ++i) {
      if (completion[i] <= now_) {
        if (absl::Status s = Finish(jobs_[i]); !s.ok()) return s;
      }
    }
    while (next_capacity < changes.size() && changes[next_capacity].at_seconds <= now_) {
      capacity_ = changes[next_capacity++].gpus;
      if (nodes_modeled()) nodes_->SetCapacity(capacity_);
      // A cluster-native scheduler's engine never learns the capacity; a
      // node-aware one learns it from the node report below.
      if (kind_ != PolicyKind::kClusterNative && !reported_) {
        if (absl::Status s = engine_->SetCapacity(capacity_).status(); !s.ok()) return s;
      }
    }
    if (nodes_modeled()) {
      nodes_->ApplyForeignChanges(now_);
      nodes_->Evict();
    }
    while (next_arrival < jobs_.size() && jobs_[next_arrival].desc->arrival_seconds <= now_) {
      if (in_system_ == 0) {
        // Ticks pause while the cluster is empty; resume on the grid.
        next_tick_ = std::max(next_tick_, std::ceil(now_ / interval) * interval);
      }
      if (absl::Status s = Arrive(jobs_[next_arrival++]); !s.ok()) return s;
    }
    if (absl::Status s = ReportNodes(); !s.ok()) return s;
    if (in_system_ > 0 && now_ >= next_tick_) {
      if (absl::Status s = Tick(); !s.ok()) return s;
      last_tick_ = now_;
      next_tick_ = (std::floor(now_ / interval) + 1) * interval;
    }
    if (absl::Status s =
            kind_ == PolicyKind::kClusterNative ? ApplyClusterNative() : ApplyRecommendations();
        !s.ok())
      return s;
    PlacePending();
    if (absl::Status s = CheckCapacity(); !s.ok()) return s;
    if (absl::Status s = CheckNodes(); !s.ok()) return s;
    RecordTimeline();
  }
  result_.end_seconds = now_;
  for (SimJob& job : jobs_) {
    job.outcome.done_samples = std::min(job.done, job.desc->work_samples);
    result_.jobs.push_back(std::move(job.outcome));
  }
  return std::move(result_);
}

}  // namespace

absl::StatusOr<SimulationResult> Simulate(const Workload& workload,
                                          const SimulationOptions& options) {
  Simulation simulation(workload, options);
  return simulation.Run();
}

}  // namespace rescale::sim
