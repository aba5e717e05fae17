// The simulation of a cluster of GPU types (see typed_sim.h).
#include "bench/sim/typed_sim.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <random>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "bench/sim/baselines.h"
#include "bench/sim/sia_profiles.h"
#include "bench/sim/sim_options.h"
#include "rescale/clock.h"
#include "rescale/decision_engine.h"
#include "rescale/status_macros.h"

namespace rescale::sim {
namespace {

const absl::Time kOrigin = absl::FromUnixSeconds(1'700'000'000);
constexpr int kNoType = -1;
// Steps each arriving job reports on one GPU of every type (planner only).
constexpr int kProfileSteps = 10;

// Sia's checkpoint-restore time per application (applications.py).
double RestartSeconds(std::string_view app) {
  if (app == "bert") return 120;
  if (app == "cifar10") return 50;
  if (app == "deepspeech2") return 25;
  if (app == "imagenet") return 250;
  if (app == "ncf") return 15;
  if (app == "yolov3") return 80;
  return 30;
}

struct Job {
  const JobDescription* desc = nullptr;
  std::string app;
  std::vector<const PolluxModel*> models;  // per cluster type
  bool arrived = false;
  bool done = false;
  int type = kNoType;
  uint32_t replicas = 0;
  bool ever_ran = false;
  double restart_until = 0;
  double progress = 0;
  TypedJobOutcome outcome;
  double attained_gpu_seconds = 0;  // tiresias
};

class TypedSimulation {
 public:
  TypedSimulation(const Workload& workload, const TypedSimOptions& options)
      : workload_(workload), options_(options), rng_(options.seed), clock_(kOrigin) {}

  absl::StatusOr<TypedSimResult> Run();

 private:
  bool engine_policy() const {
    return options_.policy == "planner" || options_.policy == "planner-typeblind";
  }
  bool typed_engine() const { return options_.policy == "planner"; }
  const SimGpuType& type(int t) const { return options_.cluster.types[t]; }
  double StepSeconds(const Job& job, int t, uint32_t n) const {
    const uint32_t nodes = (n + type(t).gpus_per_node - 1) / type(t).gpus_per_node;
    return job.models[t]->StepSecondsOn(n, nodes, job.desc->local_batch_size);
  }
  absl::Status Arrive(Job& job);
  absl::Status Report(Job& job);
  // What each active job should run now: (type, replicas).
  absl::StatusOr<std::vector<std::pair<int, uint32_t>>> Decide();
  absl::Status Apply(const std::vector<std::pair<int, uint32_t>>& targets);
  void Advance(double dt);
  std::vector<uint32_t> FreeGpus() const {
    std::vector<uint32_t> free;
    for (const SimGpuType& t : options_.cluster.types) free.push_back(t.gpus());
    for (const Job& j : jobs_)
      if (j.type != kNoType) free[j.type] -= j.replicas;
    return free;
  }

  const Workload& workload_;
  const TypedSimOptions& options_;
  std::mt19937_64 rng_;
  std::normal_distribution<double> normal_{0.0, 1.0};
  ManualClock clock_;
  std::unique_ptr<DecisionEngine> engine_;
  std::vector<Job> jobs_;
  std::vector<uint64_t> generations_;  // of each job's latest recommendation
  double now_ = 0;
  uint64_t plans_ = 0;
};

absl::Status TypedSimulation::Arrive(Job& job) {
  job.arrived = true;
  if (!engine_policy()) return absl::OkStatus();
  JobSpec spec;
  spec.job_id = "sim/" + job.desc->id;
  spec.min_replicas = 1;
  spec.max_replicas = job.desc->max_replicas;
  spec.local_batch_size = job.desc->local_batch_size;
  spec.restart_cost_seconds = RestartSeconds(job.app);
  spec.total_samples = static_cast<uint64_t>(job.desc->work_samples);
  spec.policy = "planner";
  RETURN_IF_ERROR(engine_->RegisterJob(spec).status());
  if (!typed_engine()) return absl::OkStatus();
  // Sia's bootstrapping: a few steps on one GPU of every type.
  for (size_t t = 0; t < options_.cluster.types.size(); ++t) {
    std::vector<StepSample> batch(kProfileSteps);
    const std::string pod = job.desc->id + "-profile";
    for (StepSample& s : batch) {
      s.job_id = spec.job_id;
      s.pod = pod;
      s.world_size = 1;
      s.step_seconds =
          StepSeconds(job, static_cast<int>(t), 1) * std::exp(options_.step_noise * normal_(rng_));
      s.gpu_type = type(static_cast<int>(t)).name;
    }
    const IngestResult r = engine_->Ingest(batch);
    if (r.accepted != batch.size()) {
      return absl::InternalError(
          absl::StrFormat("%s: profiling samples refused: %s", spec.job_id,
                          r.rejections.empty() ? r.limit_reason : r.rejections[0].reason));
    }
  }
  return absl::OkStatus();
}

absl::Status TypedSimulation::Report(Job& job) {
  // Steps of the last interval the job trained through (not restarting).
  if (job.replicas == 0 || now_ < job.restart_until || options_.samples_per_tick <= 0)
    return absl::OkStatus();
  const std::string id = "sim/" + job.desc->id;
  std::vector<std::string> pods;
  for (uint32_t r = 0; r < job.replicas; ++r) pods.push_back(absl::StrFormat("%s-%d", id, r));
  std::vector<StepSample> batch(options_.samples_per_tick);
  const double step = StepSeconds(job, job.type, job.replicas);
  for (size_t k = 0; k < batch.size(); ++k) {
    StepSample& s = batch[k];
    s.job_id = id;
    s.pod = pods[k % pods.size()];
    s.world_size = job.replicas;
    s.step_seconds = step * std::exp(options_.step_noise * normal_(rng_));
    if (typed_engine()) s.gpu_type = type(job.type).name;
  }
  const IngestResult r = engine_->Ingest(batch);
  if (r.accepted != batch.size()) {
    return absl::InternalError(
        absl::StrFormat("%s: samples refused: %s", id,
                        r.rejections.empty() ? r.limit_reason : r.rejections[0].reason));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::pair<int, uint32_t>>> TypedSimulation::Decide() {
  std::vector<std::pair<int, uint32_t>> targets(jobs_.size(), {kNoType, 0});
  const size_t types = options_.cluster.types.size();
  auto active = [](const Job& j) { return j.arrived && !j.done; };
  if (engine_policy()) {
    engine_->Replan();
    ++plans_;
    for (size_t i = 0; i < jobs_.size(); ++i) {
      if (!active(jobs_[i])) continue;
      ASSIGN_OR_RETURN(const Recommendation rec,
                       engine_->GetRecommendation("sim/" + jobs_[i].desc->id));
      targets[i].second = rec.suspend ? 0 : rec.replicas;
      generations_[i] = rec.generation;
      if (typed_engine() && targets[i].second > 0) {
        for (size_t t = 0; t < types; ++t)
          if (type(static_cast<int>(t)).name == rec.gpu_type)
            targets[i].first = static_cast<int>(t);
        if (targets[i].first == kNoType)
          return absl::InternalError(absl::StrFormat("%s: recommended onto unknown type \"%s\"",
                                                     rec.job_id, rec.gpu_type));
      }
    }
    return targets;  // type-blind: placed in Apply
  }
  // fifo and tiresias: the submitted size, planned from scratch each round
  // in priority order (fifo: running jobs keep their place).
  std::vector<size_t> order;
  for (size_t i = 0; i < jobs_.size(); ++i)
    if (active(jobs_[i])) order.push_back(i);
  const bool fifo = options_.policy == "fifo";
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    auto rank = [&](const Job& j) {
      if (fifo) return j.replicas > 0 ? 0 : 1;
      return j.attained_gpu_seconds >= kTiresiasDemotionGpuSeconds ? 1 : 0;
    };
    return rank(jobs_[a]) < rank(jobs_[b]);  // then arrival (stable)
  });
  std::vector<uint32_t> free;
  for (const SimGpuType& t : options_.cluster.types) free.push_back(t.gpus());
  for (size_t i : order) {
    const Job& j = jobs_[i];
    const uint32_t want = j.desc->requested_replicas;
    int chosen = kNoType;
    if (j.type != kNoType && free[j.type] >= want) chosen = j.type;
    for (size_t t = 0; t < types && chosen == kNoType; ++t)
      if (free[t] >= want) chosen = static_cast<int>(t);
    if (chosen == kNoType) {
      if (fifo && j.replicas == 0) break;  // strict FIFO: the head blocks
      continue;
    }
    free[chosen] -= want;
    targets[i] = {chosen, want};
  }
  return targets;
}

absl::Status TypedSimulation::Apply(const std::vector<std::pair<int, uint32_t>>& targets) {
  const size_t types = options_.cluster.types.size();
  std::vector<std::pair<int, uint32_t>> before;
  for (const Job& j : jobs_) before.emplace_back(j.type, j.replicas);
  std::vector<std::pair<int, uint32_t>> placed = targets;
  auto stays = [&](size_t i) {
    return placed[i].second == jobs_[i].replicas &&
           (placed[i].second == 0 || placed[i].first == jobs_[i].type);
  };
  if (engine_policy() && !typed_engine()) {
    // Where it runs, to begin with; placed first-fit below if it changes.
    for (size_t i = 0; i < jobs_.size(); ++i)
      if (placed[i].second > 0) placed[i].first = jobs_[i].type;
  }
  // Shrinks, stops and moves first: what they free is there for the rest.
  for (size_t i = 0; i < jobs_.size(); ++i) {
    Job& j = jobs_[i];
    if (j.replicas == 0 || stays(i)) continue;
    const bool grows_in_place = placed[i].second > j.replicas && placed[i].first == j.type;
    if (grows_in_place) continue;
    j.type = kNoType;
    j.replicas = 0;
  }
  std::vector<uint32_t> free = FreeGpus();
  for (size_t i = 0; i < jobs_.size(); ++i) {
    Job& j = jobs_[i];
    auto [t, n] = placed[i];
    if (n == 0 || stays(i)) continue;
    if (engine_policy() && !typed_engine()) {
      // First fit: its own type, then the first in cluster order with room
      // for all of it. Where it fits nowhere: a running job stays on its
      // type, as large as the type lets it (re-placing it every plan would
      // restart it every plan), a waiting one starts where most is free.
      const int own = before[i].first;
      const uint32_t own_room = own == kNoType ? 0 : free[own] + (j.type == own ? j.replicas : 0);
      t = kNoType;
      if (own != kNoType && own_room >= n) t = own;
      for (size_t k = 0; k < types && t == kNoType; ++k)
        if (free[k] >= n) t = static_cast<int>(k);
      if (t == kNoType && own != kNoType) {
        t = own;
        n = std::min(n, own_room);
      } else if (t == kNoType) {
        int most = 0;
        for (size_t k = 1; k < types; ++k)
          if (free[k] > free[most]) most = static_cast<int>(k);
        n = std::min(n, free[most]);
        t = most;
      }
    }
    const uint32_t room = free[t] + (j.type == t ? j.replicas : 0);
    if (n > room) {  // every policy's targets fit (type-blind: by the choice above)
      return absl::InternalError(absl::StrFormat("%s: %d replicas on %s, where %d GPUs are free",
                                                 j.desc->id, n, type(t).name, room));
    }
    if (j.type != kNoType) free[j.type] += j.replicas;
    j.type = n > 0 ? t : kNoType;
    j.replicas = n;
    if (n > 0) free[t] -= n;
  }
  // Every change is a checkpoint-restore; the engine hears what runs.
  for (size_t i = 0; i < jobs_.size(); ++i) {
    Job& j = jobs_[i];
    if (j.type == before[i].first && j.replicas == before[i].second) continue;
    if (j.replicas > 0) {
      j.restart_until = now_ + RestartSeconds(j.app);
      if (j.ever_ran) ++j.outcome.restarts;
      j.ever_ran = true;
    }
    if (!engine_policy()) continue;
    const bool as_told = j.replicas == targets[i].second;
    RETURN_IF_ERROR(engine_
                        ->ReportApplied("sim/" + j.desc->id, j.replicas, j.replicas == 0,
                                        as_told ? generations_[i] : 0,
                                        typed_engine() && j.replicas > 0 ? type(j.type).name : "")
                        .status());
  }
  return absl::OkStatus();
}

void TypedSimulation::Advance(double dt) {
  for (Job& j : jobs_) {
    if (j.done || j.replicas == 0) continue;
    const double start = std::max(now_, j.restart_until);
    const double end = now_ + dt;
    const double rate = j.replicas * j.desc->local_batch_size / StepSeconds(j, j.type, j.replicas);
    double finish = end;
    if (end > start) {
      const double left = j.desc->work_samples - j.progress;
      if (rate * (end - start) >= left) {
        finish = start + left / rate;
        j.progress = j.desc->work_samples;
        j.done = true;
        j.outcome.finish_seconds = finish;
      } else {
        j.progress += rate * (end - start);
      }
    }
    const double held = finish - now_;
    j.outcome.gpu_seconds_by_type[j.type] += held * j.replicas;
    j.attained_gpu_seconds += held * j.replicas;
  }
}

absl::StatusOr<TypedSimResult> TypedSimulation::Run() {
  const std::vector<std::string> known = TypedPolicies();
  if (std::find(known.begin(), known.end(), options_.policy) == known.end()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("unknown policy \"%s\" with --cluster (known: %s)", options_.policy,
                        absl::StrJoin(known, ", ")));
  }
  const std::vector<SimGpuType>& types = options_.cluster.types;
  if (types.empty()) return absl::InvalidArgumentError("the cluster has no GPU types");
  TypedSimResult result;
  result.policy = options_.policy;
  for (const SimGpuType& t : types) result.types.push_back(t.name);
  uint32_t largest = 1;
  double last_arrival = 0;
  for (const JobDescription& d : workload_.jobs) {
    Job job;
    job.desc = &d;
    job.app = d.profile.name;
    for (const SimGpuType& t : types) {
      const SiaProfile* profile = FindSiaProfile(job.app, t.profile);
      if (d.profile.kind != ProfileSpec::Kind::kBuiltin || profile == nullptr) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "job %s: profile \"%s\" has no built-in per-type step times on %s (known: bert, "
            "cifar10, deepspeech2, imagenet, ncf, yolov3)",
            d.id, d.profile.text, t.profile));
      }
      job.models.push_back(&profile->model);
    }
    job.outcome.id = d.id;
    job.outcome.app = job.app;
    job.outcome.arrival_seconds = d.arrival_seconds;
    job.outcome.gpu_seconds_by_type.assign(types.size(), 0);
    largest = std::max(largest, d.max_replicas);
    last_arrival = std::max(last_arrival, d.arrival_seconds);
    jobs_.push_back(std::move(job));
  }
  generations_.assign(jobs_.size(), 0);
  if (engine_policy()) {
    SimulationOptions sim;
    sim.policy = "planner";
    sim.capacity_gpus = options_.cluster.total_gpus();
    sim.plan_interval_seconds = options_.plan_interval_seconds;
    sim.cooldown_seconds = options_.cooldown_seconds;
    sim.horizon_seconds = options_.horizon_seconds;
    sim.objective = options_.objective;
    sim.efficiency = false;
    EngineOptions engine = EngineOptionsFor(sim, jobs_.size(), largest);
    // A cell per (type, size) a job may try.
    engine.store.max_sizes_per_job = std::min<int>(
        kMaxSizesPerJob, engine.store.max_sizes_per_job * static_cast<int>(types.size()));
    absl::StatusOr<std::unique_ptr<DecisionEngine>> created =
        DecisionEngine::Create(std::move(engine), &clock_);
    if (!created.ok()) return created.status();
    engine_ = *std::move(created);
    CapacityReport report;
    if (typed_engine()) {
      for (const SimGpuType& t : types)
        report.gpu_types.push_back({t.name, t.gpus(), t.gpus_per_node, {}});
    } else {
      report.total_gpus = options_.cluster.total_gpus();
    }
    RETURN_IF_ERROR(engine_->SetCapacity(report).status());
  }
  const double dt = options_.plan_interval_seconds;
  const double stop = last_arrival + options_.max_seconds_after_last_arrival;
  size_t finished = 0;
  for (now_ = 0; finished < jobs_.size() && now_ <= stop; now_ += dt) {
    clock_.Set(kOrigin + absl::Seconds(now_));
    for (Job& j : jobs_) {
      if (j.done && j.replicas > 0) {  // finished in the last interval
        j.replicas = 0;
        j.type = kNoType;
        ++finished;
        if (engine_policy()) RETURN_IF_ERROR(engine_->DeregisterJob("sim/" + j.desc->id));
      }
    }
    for (Job& j : jobs_) {
      if (!j.arrived && j.desc->arrival_seconds <= now_) RETURN_IF_ERROR(Arrive(j));
    }
    if (engine_policy()) {
      for (Job& j : jobs_) RETURN_IF_ERROR(Report(j));
    }
    ASSIGN_OR_RETURN(const auto targets, Decide());
    RETURN_IF_ERROR(Apply(targets));
    Advance(dt);
  }
  for (Job& j : jobs_) {
    result.makespan_seconds = std::max(result.makespan_seconds, j.outcome.finish_seconds);
    result.jobs.push_back(std::move(j.outcome));
  }
  result.plans = plans_;
  return result;
}

}  // namespace

std::vector<std::string> TypedPolicies() {
  return {"planner", "planner-typeblind", "fifo", "tiresias"};
}

absl::StatusOr<TypedSimResult> SimulateTyped(const Workload& workload,
                                             const TypedSimOptions& options) {
  TypedSimulation simulation(workload, options);
  return simulation.Run();
}

TypedSummary Summarize(const TypedSimResult& result) {
  TypedSummary summary;
  summary.policy = result.policy;
  summary.gpu_hours_by_type.assign(result.types.size(), 0);
  std::vector<double> jct;
  double restarts = 0;
  for (const TypedJobOutcome& j : result.jobs) {
    restarts += j.restarts;
    for (size_t t = 0; t < j.gpu_seconds_by_type.size(); ++t)
      summary.gpu_hours_by_type[t] += j.gpu_seconds_by_type[t] / 3600;
    if (j.finish_seconds < 0) {
      ++summary.unfinished;
      continue;
    }
    jct.push_back((j.finish_seconds - j.arrival_seconds) / 3600);
  }
  if (!result.jobs.empty()) summary.restarts_per_job = restarts / result.jobs.size();
  if (!jct.empty()) {
    double sum = 0;
    for (double v : jct) sum += v;
    summary.avg_jct_hours = sum / jct.size();
    std::sort(jct.begin(), jct.end());
    summary.p99_jct_hours = jct[std::min(jct.size() - 1, static_cast<size_t>(0.99 * jct.size()))];
  }
  summary.makespan_hours = result.makespan_seconds / 3600;
  return summary;
}

}  // namespace rescale::sim
