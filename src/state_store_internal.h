// Internals of the state stores (state_store.cc, state_store_sqlite.cc),
// shared with their white-box tests: the JSON form of the kept records and
// the SQLite backend's constructor.
#ifndef RESCALE_STATE_STORE_INTERNAL_H_
#define RESCALE_STATE_STORE_INTERNAL_H_

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "rescale/state_store.h"

namespace rescale::state_internal {

// One record per row, as JSON: a field added later is simply absent from
// older rows, so most schema changes need no migration of the data.
std::string JobToJson(const StoredJob& job);
absl::StatusOr<StoredJob> JobFromJson(std::string_view text);
std::string RecommendationToJson(const Recommendation& rec);
absl::StatusOr<Recommendation> RecommendationFromJson(std::string_view text);
// A job's measurements per size (StoredMeasurements::sizes).
std::string MeasurementsToJson(const std::vector<SizeStats>& sizes);
absl::StatusOr<std::vector<SizeStats>> MeasurementsFromJson(std::string_view text);
// The policy memory of a checkpoint (exploration_stopped and
// recent_recommendations of StoredMeasurements).
std::string PolicyMemoryToJson(const StoredMeasurements& m);
absl::Status PolicyMemoryFromJson(std::string_view text, StoredMeasurements& m);

// The slots of a capacity (CapacityReport::slots) as text, "8=3,4=7"
// (gpus_per_replica=replicas, comma-separated; "" = none): one value in
// the SQLite cluster table and one etcd key, each written with the total.
std::string SlotsToText(std::span<const ReplicaSlots> slots);
absl::StatusOr<std::vector<ReplicaSlots>> SlotsFromText(std::string_view text);

// The queues (QueueSet) as JSON: one value in the SQLite cluster table and
// one etcd key.
std::string QueuesToJson(std::span<const QueueSpec> queues);
absl::StatusOr<std::vector<QueueSpec>> QueuesFromJson(std::string_view text);
// A capacity's GPU types, JSON: [{"name", "total_gpus", "gpus_per_node",
// "slots": "8=3,4=7"}...] ("[]" = one type).
std::string GpuTypesToJson(std::span<const GpuType> types);
absl::StatusOr<std::vector<GpuType>> GpuTypesFromJson(std::string_view text);

// The SQLite backend on `path` (created when missing).
absl::StatusOr<std::unique_ptr<StateStore>> OpenSqliteStateStore(const std::string& path);

}  // namespace rescale::state_internal

#endif  // RESCALE_STATE_STORE_INTERNAL_H_
