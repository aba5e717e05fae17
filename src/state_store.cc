// StateStore (see rescale/state_store.h): the spec parser, the in-memory
// backend and the JSON form of the kept records, which the SQLite backend
// stores one row per job (state_store_internal.h).
#include "rescale/state_store.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <type_traits>

#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"
#include "rescale/mutex.h"
#include "state_store_internal.h"

namespace rescale {
namespace state_internal {
namespace {

using nlohmann::json;

// Times as Unix nanoseconds; null stands for "never" (InfinitePast), which
// has no finite nanosecond count.
json TimeToJson(absl::Time t) {
  if (t == absl::InfinitePast()) return nullptr;
  return absl::ToUnixNanos(t);
}

absl::Time TimeFromJson(const json& j) {
  if (j.is_null()) return absl::InfinitePast();
  return absl::FromUnixNanos(j.get<int64_t>());
}

// NaN and infinities are not JSON numbers: kept as strings.
json DoubleToJson(double v) {
  if (std::isfinite(v)) return v;
  if (std::isnan(v)) return "nan";
  return v > 0 ? "inf" : "-inf";
}

double DoubleFromJson(const json& j) {
  if (j.is_number()) return j.get<double>();
  const std::string s = j.get<std::string>();
  if (s == "inf") return std::numeric_limits<double>::infinity();
  if (s == "-inf") return -std::numeric_limits<double>::infinity();
  return std::numeric_limits<double>::quiet_NaN();
}

json SpecToJson(const JobSpec& spec) {
  json prior = json::array();
  for (const CurvePoint& p : spec.prior) {
    prior.push_back({{"replicas", p.replicas},
                     {"samples_per_second", DoubleToJson(p.samples_per_second)},
                     {"uncertainty", DoubleToJson(p.uncertainty)}});
  }
  json out = {{"job_id", spec.job_id},
              {"min_replicas", spec.min_replicas},
              {"max_replicas", spec.max_replicas},
              {"gpus_per_replica", spec.gpus_per_replica},
              {"priority", spec.priority},
              {"preemptible", spec.preemptible},
              {"restart_cost_seconds", DoubleToJson(spec.restart_cost_seconds)},
              {"local_batch_size", spec.local_batch_size},
              {"policy", spec.policy},
              {"prior", std::move(prior)},
              {"parameters", spec.parameters}};
  if (spec.total_samples.has_value()) out["total_samples"] = *spec.total_samples;
  if (!spec.queue.empty()) out["queue"] = spec.queue;
  if (!spec.admission.empty()) out["admission"] = spec.admission;
  if (!spec.gpu_types.empty()) out["gpu_types"] = spec.gpu_types;
  if (spec.batch_scaling.has_value()) {
    const BatchLimits& b = *spec.batch_scaling;
    out["batch_scaling"] = {{"initial_batch", b.initial_batch},
                            {"max_batch", b.max_batch},
                            {"min_local_batch", b.min_local_batch},
                            {"max_local_batch", b.max_local_batch},
                            {"accumulation", b.accumulation}};
  }
  return out;
}

JobSpec SpecFromJson(const json& j) {
  JobSpec spec;
  spec.job_id = j.at("job_id").get<std::string>();
  spec.min_replicas = j.at("min_replicas").get<uint32_t>();
  spec.max_replicas = j.at("max_replicas").get<uint32_t>();
  spec.gpus_per_replica = j.at("gpus_per_replica").get<uint32_t>();
  spec.priority = j.at("priority").get<int32_t>();
  spec.preemptible = j.at("preemptible").get<bool>();
  spec.restart_cost_seconds = DoubleFromJson(j.at("restart_cost_seconds"));
  spec.local_batch_size = j.at("local_batch_size").get<uint32_t>();
  spec.policy = j.at("policy").get<std::string>();
  for (const json& p : j.at("prior")) {
    CurvePoint point;
    point.replicas = p.at("replicas").get<uint32_t>();
    point.samples_per_second = DoubleFromJson(p.at("samples_per_second"));
    point.uncertainty = DoubleFromJson(p.at("uncertainty"));
    spec.prior.push_back(point);
  }
  spec.parameters = j.at("parameters").get<std::map<std::string, std::string>>();
  if (j.contains("total_samples")) spec.total_samples = j.at("total_samples").get<uint64_t>();
  if (j.contains("queue")) spec.queue = j.at("queue").get<std::string>();
  if (j.contains("admission")) spec.admission = j.at("admission").get<std::string>();
  if (j.contains("gpu_types")) spec.gpu_types = j.at("gpu_types").get<std::vector<std::string>>();
  if (j.contains("batch_scaling")) {
    const json& b = j.at("batch_scaling");
    spec.batch_scaling = BatchLimits{.initial_batch = b.at("initial_batch").get<uint32_t>(),
                                     .max_batch = b.at("max_batch").get<uint32_t>(),
                                     .min_local_batch = b.at("min_local_batch").get<uint32_t>(),
                                     .max_local_batch = b.at("max_local_batch").get<uint32_t>(),
                                     .accumulation = b.at("accumulation").get<bool>()};
  }
  return spec;
}

}  // namespace

std::string JobToJson(const StoredJob& job) {
  json events = json::array();
  for (const auto& [at, delta] : job.scale_events) events.push_back({TimeToJson(at), delta});
  json out = {{"spec", SpecToJson(job.spec)},
              {"current_replicas", job.current_replicas},
              {"suspended", job.suspended},
              {"last_applied_generation", job.last_applied_generation},
              {"last_applied_at", TimeToJson(job.last_applied_at)},
              {"has_applied", job.has_applied},
              {"registered_at", TimeToJson(job.registered_at)},
              {"last_change_at", TimeToJson(job.last_change_at)},
              {"started_at", TimeToJson(job.started_at)},
              {"stopped_at", TimeToJson(job.stopped_at)},
              {"previous_replicas", job.previous_replicas},
              {"scale_events", std::move(events)}};
  if (!job.gpu_type.empty()) out["gpu_type"] = job.gpu_type;
  return out.dump();
}

absl::StatusOr<StoredJob> JobFromJson(std::string_view text) {
  try {
    const json j = json::parse(text);
    StoredJob job;
    job.spec = SpecFromJson(j.at("spec"));
    job.current_replicas = j.at("current_replicas").get<uint32_t>();
    job.suspended = j.at("suspended").get<bool>();
    job.last_applied_generation = j.at("last_applied_generation").get<uint64_t>();
    job.last_applied_at = TimeFromJson(j.at("last_applied_at"));
    job.has_applied = j.at("has_applied").get<bool>();
    job.registered_at = TimeFromJson(j.at("registered_at"));
    job.last_change_at = TimeFromJson(j.at("last_change_at"));
    job.started_at = TimeFromJson(j.at("started_at"));
    job.stopped_at = TimeFromJson(j.at("stopped_at"));
    job.previous_replicas = j.at("previous_replicas").get<uint32_t>();
    if (j.contains("gpu_type")) job.gpu_type = j.at("gpu_type").get<std::string>();
    for (const json& e : j.at("scale_events")) {
      job.scale_events.emplace_back(TimeFromJson(e.at(0)), e.at(1).get<int32_t>());
    }
    return job;
  } catch (const json::exception& e) {
    return absl::DataLossError(absl::StrFormat("a job record does not parse: %s", e.what()));
  }
}

std::string RecommendationToJson(const Recommendation& rec) {
  json out = {{"job_id", rec.job_id},
              {"replicas", rec.replicas},
              {"suspend", rec.suspend},
              // Enums by their numbers, as in the rescale.v1 API: append-only.
              {"action", static_cast<int>(rec.action)},
              {"generation", rec.generation},
              {"reason", rec.reason},
              {"binding_constraint", static_cast<int>(rec.binding_constraint)},
              {"current_samples_per_second", DoubleToJson(rec.current_samples_per_second)},
              {"predicted_samples_per_second", DoubleToJson(rec.predicted_samples_per_second)},
              {"queue_position", rec.queue_position},
              {"decided_at", TimeToJson(rec.decided_at)},
              {"policy", rec.policy},
              {"gpus", rec.gpus}};
  if (!rec.gpu_type.empty()) out["gpu_type"] = rec.gpu_type;
  if (rec.value_one_more) out["value_one_more"] = DoubleToJson(*rec.value_one_more);
  if (rec.value_one_fewer) out["value_one_fewer"] = DoubleToJson(*rec.value_one_fewer);
  // Goodput-planned jobs only. Kept so that a restarted rescaled, or a
  // follower, serves the batch the adapter may already have applied.
  if (rec.local_batch_size) out["local_batch_size"] = *rec.local_batch_size;
  if (rec.accumulation_steps) out["accumulation_steps"] = *rec.accumulation_steps;
  if (rec.predicted_goodput) out["predicted_goodput"] = DoubleToJson(*rec.predicted_goodput);
  if (rec.statistical_efficiency) {
    out["statistical_efficiency"] = DoubleToJson(*rec.statistical_efficiency);
  }
  return out.dump();
}

absl::StatusOr<Recommendation> RecommendationFromJson(std::string_view text) {
  try {
    const json j = json::parse(text);
    Recommendation rec;
    rec.job_id = j.at("job_id").get<std::string>();
    rec.replicas = j.at("replicas").get<uint32_t>();
    rec.suspend = j.at("suspend").get<bool>();
    rec.action = static_cast<Action>(j.at("action").get<int>());
    rec.generation = j.at("generation").get<uint64_t>();
    rec.reason = j.at("reason").get<std::string>();
    rec.binding_constraint = static_cast<BindingConstraint>(j.at("binding_constraint").get<int>());
    rec.current_samples_per_second = DoubleFromJson(j.at("current_samples_per_second"));
    rec.predicted_samples_per_second = DoubleFromJson(j.at("predicted_samples_per_second"));
    rec.queue_position = j.at("queue_position").get<uint32_t>();
    rec.decided_at = TimeFromJson(j.at("decided_at"));
    rec.policy = j.at("policy").get<std::string>();
    rec.gpus = j.at("gpus").get<uint32_t>();
    if (j.contains("gpu_type")) rec.gpu_type = j.at("gpu_type").get<std::string>();
    if (j.contains("value_one_more")) rec.value_one_more = DoubleFromJson(j.at("value_one_more"));
    if (j.contains("value_one_fewer"))
      rec.value_one_fewer = DoubleFromJson(j.at("value_one_fewer"));
    // Absent from records of jobs planned on throughput, and of every
    // recommendation written before goodput planning.
    if (j.contains("local_batch_size"))
      rec.local_batch_size = j.at("local_batch_size").get<uint32_t>();
    if (j.contains("accumulation_steps"))
      rec.accumulation_steps = j.at("accumulation_steps").get<uint32_t>();
    if (j.contains("predicted_goodput"))
      rec.predicted_goodput = DoubleFromJson(j.at("predicted_goodput"));
    if (j.contains("statistical_efficiency"))
      rec.statistical_efficiency = DoubleFromJson(j.at("statistical_efficiency"));
    return rec;
  } catch (const json::exception& e) {
    return absl::DataLossError(
        absl::StrFormat("a recommendation record does not parse: %s", e.what()));
  }
}

// Measurements are written every checkpoint, for thousands of jobs: each
// size as a positional array (no keys to build and hash), in the order of
// kMeasurementFields. Rows written as keyed objects (the first version-2
// files) are still read.
constexpr const char* kMeasurementFields[] = {
    "world_size",         "sample_count",   "lifetime_count",  "step_seconds",
    "spread_seconds",     "mean_batch",     "steps_processed", "samples_processed",
    "samples_per_second", "from_window",    "last_sample_at",  "gradient_count",
    "gradient_sqr",       "gradient_noise", "gpu_type"};

std::string MeasurementsToJson(const std::vector<SizeStats>& sizes) {
  json out = json::array();
  for (const SizeStats& s : sizes) {
    json row =
        json::array({s.world_size, s.sample_count, s.lifetime_count, DoubleToJson(s.step_seconds),
                     DoubleToJson(s.spread_seconds), DoubleToJson(s.mean_batch), s.steps_processed,
                     s.samples_processed, DoubleToJson(s.samples_per_second), s.from_window,
                     TimeToJson(s.last_sample_at), s.gradient_count, DoubleToJson(s.gradient_sqr),
                     DoubleToJson(s.gradient_noise)});
    // Only typed sizes carry the type: untyped rows stay as they were.
    if (!s.gpu_type.empty()) row.push_back(s.gpu_type);
    out.push_back(std::move(row));
  }
  return out.dump();
}

absl::StatusOr<std::vector<SizeStats>> MeasurementsFromJson(std::string_view text) {
  try {
    std::vector<SizeStats> sizes;
    for (const json& row : json::parse(text)) {
      // Field k, by position or by name.
      auto field = [&](int k) -> const json& {
        return row.is_array() ? row.at(k) : row.at(kMeasurementFields[k]);
      };
      SizeStats s;
      s.world_size = field(0).get<uint32_t>();
      s.sample_count = field(1).get<uint64_t>();
      s.lifetime_count = field(2).get<uint64_t>();
      s.step_seconds = DoubleFromJson(field(3));
      s.spread_seconds = DoubleFromJson(field(4));
      s.mean_batch = DoubleFromJson(field(5));
      s.steps_processed = field(6).get<uint64_t>();
      s.samples_processed = field(7).get<uint64_t>();
      s.samples_per_second = DoubleFromJson(field(8));
      s.from_window = field(9).get<bool>();
      s.last_sample_at = TimeFromJson(field(10));
      // Gradient statistics came later: rows written before have none.
      const bool has_gradients = row.is_array() ? row.size() > 13 : row.contains("gradient_count");
      if (has_gradients) {
        s.gradient_count = field(11).get<uint64_t>();
        s.gradient_sqr = DoubleFromJson(field(12));
        s.gradient_noise = DoubleFromJson(field(13));
      }
      if (row.is_array() ? row.size() > 14 : row.contains("gpu_type"))
        s.gpu_type = field(14).get<std::string>();
      sizes.push_back(s);
    }
    return sizes;
  } catch (const json::exception& e) {
    return absl::DataLossError(
        absl::StrFormat("a measurements record does not parse: %s", e.what()));
  }
}

std::string PolicyMemoryToJson(const StoredMeasurements& m) {
  json recent = json::array();
  for (const auto& [at, replicas] : m.recent_recommendations)
    recent.push_back({TimeToJson(at), replicas});
  return json({{"exploration_stopped", m.exploration_stopped},
               {"recent_recommendations", std::move(recent)}})
      .dump();
}

absl::Status PolicyMemoryFromJson(std::string_view text, StoredMeasurements& m) {
  try {
    const json j = json::parse(text);
    m.exploration_stopped = j.at("exploration_stopped").get<bool>();
    m.recent_recommendations.clear();
    for (const json& r : j.at("recent_recommendations"))
      m.recent_recommendations.emplace_back(TimeFromJson(r.at(0)), r.at(1).get<uint32_t>());
    return absl::OkStatus();
  } catch (const json::exception& e) {
    return absl::DataLossError(
        absl::StrFormat("a policy memory record does not parse: %s", e.what()));
  }
}

}  // namespace state_internal

namespace state_internal {

std::string GpuTypesToJson(std::span<const GpuType> types) {
  json out = json::array();
  for (const GpuType& t : types) {
    out.push_back({{"name", t.name},
                   {"total_gpus", t.total_gpus},
                   {"gpus_per_node", t.gpus_per_node},
                   {"slots", SlotsToText(t.slots)}});
  }
  return out.dump();
}

absl::StatusOr<std::vector<GpuType>> GpuTypesFromJson(std::string_view text) {
  try {
    std::vector<GpuType> types;
    for (const json& item : json::parse(text)) {
      GpuType t;
      t.name = item.at("name").get<std::string>();
      t.total_gpus = item.at("total_gpus").get<uint32_t>();
      t.gpus_per_node = item.at("gpus_per_node").get<uint32_t>();
      absl::StatusOr<std::vector<ReplicaSlots>> slots =
          SlotsFromText(item.at("slots").get<std::string>());
      if (!slots.ok()) return slots.status();
      t.slots = *std::move(slots);
      types.push_back(std::move(t));
    }
    return types;
  } catch (const json::exception& e) {
    return absl::DataLossError(absl::StrFormat("the GPU types do not parse: %s", e.what()));
  }
}

std::string SlotsToText(std::span<const ReplicaSlots> slots) {
  std::string out;
  for (const ReplicaSlots& s : slots) {
    if (!out.empty()) out += ',';
    out += absl::StrFormat("%d=%d", s.gpus_per_replica, s.replicas);
  }
  return out;
}

absl::StatusOr<std::vector<ReplicaSlots>> SlotsFromText(std::string_view text) {
  std::vector<ReplicaSlots> slots;
  if (text.empty()) return slots;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view item = text.substr(start, end - start);
    const size_t eq = item.find('=');
    ReplicaSlots s;
    auto number = [](std::string_view digits, uint32_t& out) {
      if (digits.empty() || digits.size() > 10) return false;
      uint64_t v = 0;
      for (char c : digits) {
        if (c < '0' || c > '9') return false;
        v = v * 10 + uint64_t(c - '0');
      }
      if (v > std::numeric_limits<uint32_t>::max()) return false;
      out = static_cast<uint32_t>(v);
      return true;
    };
    if (eq == std::string_view::npos || !number(item.substr(0, eq), s.gpus_per_replica) ||
        !number(item.substr(eq + 1), s.replicas)) {
      return absl::DataLossError(
          absl::StrFormat("the capacity's slots \"%s\" are not GPUS=REPLICAS,...", text));
    }
    slots.push_back(s);
    start = end + 1;
  }
  return slots;
}

std::string QueuesToJson(std::span<const QueueSpec> queues) {
  json out = json::array();
  for (const QueueSpec& q : queues) {
    json item = {{"name", q.name},
                 {"nominal_gpus", q.nominal_gpus},
                 {"cohort", q.cohort},
                 {"weight", DoubleToJson(q.weight)}};
    if (q.borrowing_limit_gpus) item["borrowing_limit_gpus"] = *q.borrowing_limit_gpus;
    if (q.lending_limit_gpus) item["lending_limit_gpus"] = *q.lending_limit_gpus;
    out.push_back(std::move(item));
  }
  return out.dump();
}

absl::StatusOr<std::vector<QueueSpec>> QueuesFromJson(std::string_view text) {
  try {
    std::vector<QueueSpec> queues;
    for (const json& item : json::parse(text)) {
      QueueSpec q;
      q.name = item.at("name").get<std::string>();
      q.nominal_gpus = item.at("nominal_gpus").get<uint64_t>();
      q.cohort = item.at("cohort").get<std::string>();
      q.weight = DoubleFromJson(item.at("weight"));
      if (item.contains("borrowing_limit_gpus"))
        q.borrowing_limit_gpus = item.at("borrowing_limit_gpus").get<uint64_t>();
      if (item.contains("lending_limit_gpus"))
        q.lending_limit_gpus = item.at("lending_limit_gpus").get<uint64_t>();
      queues.push_back(std::move(q));
    }
    return queues;
  } catch (const json::exception& e) {
    return absl::DataLossError(absl::StrFormat("the queues are not valid: %s", e.what()));
  }
}

}  // namespace state_internal

namespace {

// Kept in this process: a map per kind of record, so Load returns them
// ordered by job id as the SQLite backend does.
class MemoryStateStore : public StateStore {
 public:
  std::string Describe() const override { return "memory"; }

  absl::StatusOr<StoredState> Load() override {
    MutexLock lock(mu_);
    StoredState state;
    for (const auto& [id, measured] : measurements_) state.measurements.push_back(measured);
    for (const auto& [id, job] : jobs_) state.jobs.push_back(job);
    state.capacity_gpus = capacity_gpus_;
    state.capacity_slots = capacity_slots_;
    state.capacity_allocatable_gpus = capacity_allocatable_gpus_;
    state.capacity_gpu_types = capacity_gpu_types_;
    state.queues = queues_;
    for (const auto& [id, rec] : recommendations_) state.recommendations.push_back(rec);
    for (const auto& [id, generation] : retired_)
      state.retired_generations.emplace_back(id, generation);
    return state;
  }

  absl::Status PutJob(const StoredJob& job) override {
    MutexLock lock(mu_);
    jobs_[job.spec.job_id] = job;
    return absl::OkStatus();
  }

  absl::Status DeleteJob(std::string_view job_id, uint64_t last_generation) override {
    MutexLock lock(mu_);
    const std::string id(job_id);
    jobs_.erase(id);
    recommendations_.erase(id);
    measurements_.erase(id);
    if (last_generation > 0) retired_[id] = last_generation;
    return absl::OkStatus();
  }

  absl::Status PutCapacity(const CapacityReport& capacity) override {
    MutexLock lock(mu_);
    capacity_gpus_ = capacity.total_gpus;
    capacity_slots_ = capacity.slots;
    capacity_allocatable_gpus_ = capacity.allocatable_gpus;
    capacity_gpu_types_ = capacity.gpu_types;
    return absl::OkStatus();
  }

  absl::Status PutQueues(std::span<const QueueSpec> queues) override {
    MutexLock lock(mu_);
    queues_.assign(queues.begin(), queues.end());
    return absl::OkStatus();
  }

  absl::Status PutRecommendations(std::span<const Recommendation> recs) override {
    MutexLock lock(mu_);
    for (const Recommendation& rec : recs) {
      recommendations_[rec.job_id] = rec;
      retired_.erase(rec.job_id);
    }
    return absl::OkStatus();
  }

  absl::Status PutMeasurements(std::span<const StoredMeasurements> jobs) override {
    MutexLock lock(mu_);
    for (const StoredMeasurements& job : jobs) {
      // As the SQLite backend: only for jobs still kept.
      if (jobs_.contains(job.job_id)) measurements_[job.job_id] = job;
    }
    return absl::OkStatus();
  }

 private:
  Mutex mu_;
  std::map<std::string, StoredJob> jobs_ ABSL_GUARDED_BY(mu_);
  std::optional<uint32_t> capacity_gpus_ ABSL_GUARDED_BY(mu_);
  std::vector<ReplicaSlots> capacity_slots_ ABSL_GUARDED_BY(mu_);
  uint32_t capacity_allocatable_gpus_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<GpuType> capacity_gpu_types_ ABSL_GUARDED_BY(mu_);
  std::vector<QueueSpec> queues_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Recommendation> recommendations_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, uint64_t> retired_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, StoredMeasurements> measurements_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

absl::Status StateStore::Write(std::span<const StateChange> changes) {
  for (const StateChange& change : changes) {
    absl::Status written = std::visit(
        [&](const auto& c) -> absl::Status {
          using T = std::decay_t<decltype(c)>;
          if constexpr (std::is_same_v<T, StoredJob>) {
            return PutJob(c);
          } else if constexpr (std::is_same_v<T, DeletedJob>) {
            return DeleteJob(c.job_id, c.last_generation);
          } else if constexpr (std::is_same_v<T, CapacityReport>) {
            return PutCapacity(c);
          } else if constexpr (std::is_same_v<T, std::vector<Recommendation>>) {
            return PutRecommendations(c);
          } else if constexpr (std::is_same_v<T, QueueSet>) {
            return PutQueues(c.queues);
          } else {
            return PutMeasurements(c);
          }
        },
        change);
    if (!written.ok()) return written;
  }
  return absl::OkStatus();
}

ReplicatedChange ReplicatedChange::Full(StoredState state) {
  ReplicatedChange change;
  change.full = true;
  change.jobs = std::move(state.jobs);
  change.capacity_gpus = state.capacity_gpus;
  change.capacity_slots = std::move(state.capacity_slots);
  change.capacity_allocatable_gpus = state.capacity_allocatable_gpus;
  change.capacity_gpu_types = std::move(state.capacity_gpu_types);
  change.queues = std::move(state.queues);
  change.recommendations = std::move(state.recommendations);
  change.retired_generations = std::move(state.retired_generations);
  change.measurements = std::move(state.measurements);
  return change;
}

absl::StatusOr<std::unique_ptr<StateStore>> OpenStateStore(std::string_view spec) {
  if (spec == "memory") return std::make_unique<MemoryStateStore>();
  if (spec.starts_with("sqlite:")) {
    const std::string_view path = spec.substr(std::string_view("sqlite:").size());
    if (path.empty()) {
      return absl::InvalidArgumentError(
          "--state sqlite:PATH needs a file path, e.g. sqlite:rescale-state.db");
    }
    return state_internal::OpenSqliteStateStore(std::string(path));
  }
  return absl::InvalidArgumentError(
      absl::StrFormat("--state \"%s\" is not a state backend; use memory or sqlite:PATH", spec));
}

}  // namespace rescale
