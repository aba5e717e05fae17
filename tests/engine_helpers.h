// Test helpers shared by the DecisionEngine test files: create an engine,
// register a job, feed it samples and read a recommendation, failing the
// test with the engine's status when a call that must succeed does not.
#ifndef RESCALE_TESTS_ENGINE_HELPERS_H_
#define RESCALE_TESTS_ENGINE_HELPERS_H_

#include <catch2/catch.hpp>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "rescale/clock.h"
#include "rescale/decision_engine.h"

namespace rescale::testing {

inline std::unique_ptr<DecisionEngine> MustCreate(EngineOptions options, Clock* clock) {
  absl::StatusOr<std::unique_ptr<DecisionEngine>> engine =
      DecisionEngine::Create(std::move(options), clock);
  INFO(engine.status().ToString());
  REQUIRE(engine.ok());
  return *std::move(engine);
}

inline JobView MustRegister(DecisionEngine& engine, JobSpec spec) {
  absl::StatusOr<JobView> view = engine.RegisterJob(std::move(spec));
  INFO(view.status().ToString());
  REQUIRE(view.ok());
  return *view;
}

// `count` samples of `job_id` at `world_size` replicas taking `step_seconds`
// each, from `pods` in turn; every one must be accepted. (Samples view the
// ids, which outlive the call.)
inline void MustIngest(DecisionEngine& engine, std::string_view job_id,
                       std::initializer_list<std::string_view> pods, uint32_t world_size,
                       double step_seconds, int count) {
  std::vector<StepSample> batch(count);
  for (int k = 0; k < count; ++k) {
    batch[k].job_id = job_id;
    batch[k].pod = pods.begin()[k % pods.size()];
    batch[k].world_size = world_size;
    batch[k].step_seconds = step_seconds;
  }
  const IngestResult result = engine.Ingest(batch);
  INFO((result.rejections.empty() ? std::string() : result.rejections[0].reason));
  REQUIRE(result.accepted == batch.size());
}

inline ClusterView MustSetCapacity(DecisionEngine& engine, uint32_t total_gpus) {
  absl::StatusOr<ClusterView> view = engine.SetCapacity(total_gpus);
  INFO(view.status().ToString());
  REQUIRE(view.ok());
  return *view;
}

inline Recommendation MustRecommendation(const DecisionEngine& engine, const std::string& id) {
  absl::StatusOr<Recommendation> rec = engine.GetRecommendation(id);
  INFO(rec.status().ToString());
  REQUIRE(rec.ok());
  return *rec;
}

// The GPU types `job_id` has a curve on, and the samples observed on each.
inline std::map<std::string, uint64_t> SamplesByType(const DecisionEngine& engine,
                                                     const std::string& job_id) {
  std::map<std::string, uint64_t> out;
  absl::StatusOr<JobView> job = engine.GetJob(job_id);
  REQUIRE(job.ok());
  for (const JobView::TypeCurve& typed : job->curves_by_type) {
    uint64_t samples = 0;
    for (const CurvePoint& point : typed.curve) samples += point.observed ? point.sample_count : 0;
    out[typed.gpu_type] = samples;
  }
  return out;
}

}  // namespace rescale::testing

#endif  // RESCALE_TESTS_ENGINE_HELPERS_H_
