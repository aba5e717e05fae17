// Test helpers shared by the DecisionEngine test files: create an engine,
// register a job and read a recommendation, failing the test with the
// engine's status when a call that must succeed does not.
#ifndef RESCALE_TESTS_ENGINE_HELPERS_H_
#define RESCALE_TESTS_ENGINE_HELPERS_H_

#include <catch2/catch.hpp>
#include <memory>
#include <string>
#include <utility>

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

inline Recommendation MustRecommendation(const DecisionEngine& engine, const std::string& id) {
  absl::StatusOr<Recommendation> rec = engine.GetRecommendation(id);
  INFO(rec.status().ToString());
  REQUIRE(rec.ok());
  return *rec;
}

}  // namespace rescale::testing

#endif  // RESCALE_TESTS_ENGINE_HELPERS_H_
