// Tests of what the engine learns about GPU types from the jobs measured on
// two of them (engine::TypeSpeeds) and how a job's model on a type it has
// barely run on uses it (engine::ModelOnType): the interconnect ratios
// within a node and across nodes, ThroughputModel::SyncAt and
// OnOtherType's two scales. Exact laws here; the accuracy on Sia's traces
// is measured in tests/sim_sia_test.cc ("cross-type prediction").
#include <catch2/catch.hpp>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "rescale/throughput_model.h"
#include "src/engine/job_entry.h"
#include "src/engine/type_curves.h"

namespace rescale::engine {
namespace {

constexpr double kBatch = 32;
constexpr uint32_t kSlowNode = 4;  // "slow": 4 GPUs per node
constexpr uint32_t kFastNode = 8;  // "fast": 8 GPUs per node
// On "fast" the sync within a node costs a quarter of "slow"'s, and
// spanning nodes a tenth.
constexpr double kWithin = 0.25;
constexpr double kAcross = 0.1;

// One job's exact law on a type: compute, then Pollux's sync terms (the
// model's own basis, so a fit recovers them). n replicas run on the fewest
// nodes of `per_node` GPUs, spread evenly (6 on 4-GPU nodes: 3 and 3), as
// Observation::nodes tells the fit.
struct Law {
  double compute, base, slope, node, colocated;
  double Step(uint32_t n, uint32_t per_node) const {
    if (n < 2) return compute;
    const uint32_t nodes = (n + per_node - 1) / per_node;
    const uint32_t fullest = (n + nodes - 1) / nodes;
    return compute + base + slope * (n - 2) + (nodes > 1 ? node + colocated * (fullest - 1) : 0);
  }
};
Law SlowLaw(double k) { return {0.2 * k, 0.05 * k, 0.005 * k, 0.2 * k, 0.01 * k}; }
Law FastLaw(double k) {
  const Law slow = SlowLaw(k);
  return {slow.compute / 2, kWithin * slow.base, kWithin * slow.slope, kAcross * slow.node,
          kAcross * slow.colocated};
}

Observation Observe(const Law& law, uint32_t n, uint32_t per_node) {
  Observation o;
  o.replicas = n;
  o.nodes = (n + per_node - 1) / per_node;
  o.step_seconds = law.Step(n, per_node);
  o.spread_seconds = 0.01 * o.step_seconds;
  o.sample_count = 50;
  o.mean_batch = kBatch;
  return o;
}

ModelOptions Options(uint32_t per_node) {
  ModelOptions options;
  options.default_local_batch = kBatch;
  options.gpus_per_node = per_node;
  return options;
}

Fitted::TypeFit FitOn(const std::string& type, const Law& law, std::vector<uint32_t> sizes,
                      uint32_t per_node) {
  Fitted::TypeFit fit;
  fit.gpu_type = type;
  for (uint32_t n : sizes) fit.observations.push_back(Observe(law, n, per_node));
  fit.model = ThroughputModel::Fit(fit.observations, {}, Options(per_node));
  return fit;
}

// Sizes whose placements tell every term apart (across nodes: two
// different fullest nodes).
const std::vector<uint32_t> kSlowSizes = {1, 2, 4, 6, 8, 16};
const std::vector<uint32_t> kFastSizes = {1, 2, 4, 8, 12, 16};

// A job measured on both types at several sizes.
Fitted Both(double k) {
  Fitted job;
  job.by_type = {FitOn("fast", FastLaw(k), kFastSizes, kFastNode),
                 FitOn("slow", SlowLaw(k), kSlowSizes, kSlowNode)};
  return job;
}

const std::vector<GpuType> kTypes = {{.name = "fast", .gpus_per_node = kFastNode},
                                     {.name = "slow", .gpus_per_node = kSlowNode}};

TEST_CASE("SyncAt splits a step's sync into within and across nodes", "[model][types]") {
  const Law law = SlowLaw(1);
  const Fitted::TypeFit slow = FitOn("slow", law, kSlowSizes, kSlowNode);
  REQUIRE(!slow.model.empty());
  const ThroughputModel::SyncSplit one_node = slow.model.SyncAt(4, kSlowNode);
  CHECK_FALSE(one_node.spans_nodes);
  CHECK(one_node.within == Approx(law.base + 2 * law.slope).epsilon(0.02));
  CHECK(one_node.across == Approx(0).margin(1e-6));
  // 8 replicas on 4-GPU nodes span two; on 8-GPU nodes, one. (The fit
  // recovers the cross-node terms only roughly: its weak prior on them
  // weighs in.)
  const ThroughputModel::SyncSplit two = slow.model.SyncAt(8, kSlowNode);
  CHECK(two.spans_nodes);
  CHECK(two.across == Approx(law.node + 3 * law.colocated).epsilon(0.1));
  CHECK_FALSE(slow.model.SyncAt(8, kFastNode).spans_nodes);
  // Spread over four nodes: two per node, less colocated traffic.
  CHECK(slow.model.SyncAt(8, kSlowNode, 4).spans_nodes);
  CHECK(slow.model.SyncAt(8, kSlowNode, 4).across < two.across);
  CHECK(slow.model.SyncAt(1, kSlowNode).within == 0);
}

TEST_CASE("OnOtherType scales sync within and across nodes apart", "[model][types]") {
  const Law law = SlowLaw(1);
  const ThroughputModel slow = FitOn("slow", law, kSlowSizes, kSlowNode).model;
  Observation one = Observe(law, 1, kSlowNode);
  const ThroughputModel both =
      ThroughputModel::OnOtherType(slow, one, Options(kSlowNode), 0.5, 3.0);
  const ThroughputModel::SyncSplit before = slow.SyncAt(16, kSlowNode);
  const ThroughputModel::SyncSplit after = both.SyncAt(16, kSlowNode);
  CHECK(after.within == Approx(0.5 * before.within).epsilon(1e-9));
  CHECK(after.across == Approx(3.0 * before.across).epsilon(1e-9));
  // Unset: the across scale is the within one, as before.
  const ThroughputModel one_scale =
      ThroughputModel::OnOtherType(slow, one, Options(kSlowNode), 0.5);
  CHECK(one_scale.SyncAt(16, kSlowNode).across == Approx(0.5 * before.across).epsilon(1e-9));
}

TEST_CASE("TypeSpeeds learns each pair's interconnect ratios from jobs on both",
          "[engine][types]") {
  std::vector<Fitted> jobs = {Both(1), Both(2), Both(0.5)};
  std::vector<const Fitted*> fits;
  for (const Fitted& job : jobs) fits.push_back(&job);
  const TypeSpeeds speeds = TypeSpeeds::Learn(fits, kTypes);
  const TypeSpeeds::SyncRatios to_fast = speeds.Sync("slow", "fast");
  REQUIRE(to_fast.within);
  REQUIRE(to_fast.across);
  // Within a node exactly; across nodes as far as the source's fit splits
  // its sync right (see above): the ratio absorbs the rest, and the next
  // test holds the prediction it makes to 3%.
  CHECK(*to_fast.within == Approx(kWithin).epsilon(0.05));
  CHECK(*to_fast.across == Approx(kAcross).epsilon(0.25));
  const TypeSpeeds::SyncRatios to_slow = speeds.Sync("fast", "slow");
  REQUIRE(to_slow.within);
  REQUIRE(to_slow.across);
  CHECK(*to_slow.within == Approx(1 / kWithin).epsilon(0.05));
  CHECK(*to_slow.across == Approx(1 / kAcross).epsilon(0.25));
  CHECK(speeds.Ratio("slow", "fast").value_or(0) == Approx(2).epsilon(0.01));

  // Without the node sizes, or with one type only, nothing is learned.
  CHECK_FALSE(TypeSpeeds::Learn(fits).Sync("slow", "fast").within);
  Fitted one_type;
  one_type.by_type = {Both(1).by_type[1]};
  const std::vector<const Fitted*> single = {&one_type};
  CHECK_FALSE(TypeSpeeds::Learn(single, kTypes).Sync("slow", "fast").within);
  // The fingerprint follows the ratios.
  std::vector<Fitted> other = {Both(1)};
  other[0].by_type[0] = FitOn("fast", Law{0.1, 0.05, 0.005, 0.2, 0.01}, kFastSizes, kFastNode);
  const std::vector<const Fitted*> other_fits = {&other[0]};
  CHECK(TypeSpeeds::Learn(other_fits, kTypes).Fingerprint() != speeds.Fingerprint());
}

TEST_CASE("a source whose sync is noise teaches no ratio", "[engine][types]") {
  // "slow" here barely synchronises (under 5% of its step at every size):
  // its sync says nothing of how the job's traffic compares.
  Fitted job;
  const Law quiet{0.2, 0.001, 0.0001, 0.002, 0.0001};
  job.by_type = {FitOn("fast", FastLaw(1), kFastSizes, kFastNode),
                 FitOn("slow", quiet, kSlowSizes, kSlowNode)};
  const std::vector<const Fitted*> fits = {&job};
  const TypeSpeeds speeds = TypeSpeeds::Learn(fits, kTypes);
  CHECK_FALSE(speeds.Sync("slow", "fast").within);
  CHECK_FALSE(speeds.Sync("slow", "fast").across);
  CHECK(speeds.SizeRatios("slow", "fast") == nullptr);
}

TEST_CASE("a job measured on one GPU of a type is predicted with the learned ratios",
          "[engine][types]") {
  std::vector<Fitted> jobs = {Both(1), Both(2), Both(0.5)};
  std::vector<const Fitted*> fits;
  for (const Fitted& job : jobs) fits.push_back(&job);
  const TypeSpeeds speeds = TypeSpeeds::Learn(fits, kTypes);

  // A new job: measured on "slow" at every size, on "fast" at one GPU.
  const double k = 1.5;
  Fitted job;
  job.by_type = {FitOn("fast", FastLaw(k), {1}, kFastNode),
                 FitOn("slow", SlowLaw(k), kSlowSizes, kSlowNode)};
  const GpuType fast = kTypes[0];
  ModelOptions options = Options(kSlowNode);
  options.min_samples = 1;
  const TypeModel learned = ModelOnType(job, fast, speeds, options);
  REQUIRE(learned.source == TypeCurveSource::kTransferred);
  CHECK(learned.from_type == "slow");
  const TypeModel same_seconds = ModelOnType(job, fast, TypeSpeeds(), options);
  const Law truth = FastLaw(k);
  for (uint32_t n : {2u, 4u, 8u, 16u}) {
    INFO("n = " << n);
    const double actual = truth.Step(n, kFastNode);
    CHECK(learned.model.StepSeconds(n) == Approx(actual).epsilon(0.03));
  }
  // Carrying "slow"'s sync seconds as they are overstates "fast"'s 16-GPU
  // step by half or more.
  CHECK(same_seconds.model.StepSeconds(16) > 1.5 * truth.Step(16, kFastNode));
}

TEST_CASE("a type whose sync grows differently by size is predicted size by size",
          "[engine][types]") {
  // On "slow" the ring's cost saturates (no slope); on "fast" it grows with
  // every worker, and spanning nodes costs little. No pair of scales turns
  // one shape into the other: at 2 GPUs "fast" pays a fifth of "slow"'s
  // overhead, at 4 as much, at 8 about half.
  auto slow = [](double k) { return Law{0.2 * k, 0.05 * k, 0, 0.2 * k, 0.01 * k}; };
  auto fast = [](double k) { return Law{0.1 * k, 0.01 * k, 0.02 * k, 0.02 * k, 0.001 * k}; };
  std::vector<Fitted> jobs;
  for (double k : {1.0, 2.0, 0.5}) {
    Fitted job;
    job.by_type = {FitOn("fast", fast(k), kFastSizes, kFastNode),
                   FitOn("slow", slow(k), kSlowSizes, kSlowNode)};
    jobs.push_back(std::move(job));
  }
  std::vector<const Fitted*> fits;
  for (const Fitted& job : jobs) fits.push_back(&job);
  const TypeSpeeds speeds = TypeSpeeds::Learn(fits, kTypes);
  const std::map<uint32_t, double>* ratios = speeds.SizeRatios("slow", "fast");
  REQUIRE(ratios != nullptr);
  REQUIRE(ratios->count(2));
  CHECK(ratios->at(2) == Approx(0.2).epsilon(0.01));
  CHECK(ratios->at(4) == Approx(1.0).epsilon(0.01));

  const double k = 1.5;
  Fitted job;
  job.by_type = {FitOn("fast", fast(k), {1}, kFastNode),
                 FitOn("slow", slow(k), kSlowSizes, kSlowNode)};
  ModelOptions options = Options(kSlowNode);
  options.min_samples = 1;
  const TypeModel learned = ModelOnType(job, kTypes[0], speeds, options);
  REQUIRE(learned.source == TypeCurveSource::kTransferred);
  // What the two scales alone would predict (the model before sizes were
  // learned): off by more than a tenth somewhere.
  const TypeSpeeds::SyncRatios sync = speeds.Sync("slow", "fast");
  ModelOptions on_fast = options;
  on_fast.gpus_per_node = kFastNode;
  const ThroughputModel scaled =
      ThroughputModel::OnOtherType(job.by_type[1].model, job.by_type[0].observations[0], on_fast,
                                   sync.within.value_or(1), sync.across);
  double worst_scaled = 0;
  for (uint32_t n : {2u, 4u, 8u, 12u, 16u}) {
    INFO("n = " << n);
    const double actual = fast(k).Step(n, kFastNode);
    CHECK(learned.model.StepSeconds(n) == Approx(actual).epsilon(0.03));
    worst_scaled = std::max(worst_scaled, std::abs(scaled.StepSeconds(n) / actual - 1));
  }
  CHECK(worst_scaled > 0.1);
}

}  // namespace
}  // namespace rescale::engine
