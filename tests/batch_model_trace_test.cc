// Validation of ThroughputModel's batch input (StepSecondsAt, Pollux's
// T_grad = alpha_c + beta_c x m) on the Pollux traces (tests/data/pollux,
// T4 GPUs, 4 per node): fitted at <= 4 GPUs and two local batches, the step
// time it predicts at the other (replicas, local batch) pairs up to 8 GPUs.
//
// Protocol, per app (bert, cifar10, deepspeech2, imagenet, ncf, yolov3):
//  * Measurements: placements.csv rows at the packed placement of n GPUs,
//    the one a scheduler that fills 4-GPU nodes gives ("1", "2", "3", "4",
//    "14", "24", "34", "44", ..., "4444"); repeated rows of one (placement,
//    local batch) are averaged. scalability.csv (6 to 16 nodes) has no
//    packed placement of <= 16 GPUs and is not used.
//  * Batches: A = the median (lower middle) of the local batches measured at
//    all of "1", "2" and "4"; B = among those batches, the one whose ratio to
//    A (larger over smaller) is in [1.9, 4.1] and closest to 2 (the nearest
//    batch about 2x away: the traces step batches by about sqrt(2), so "2x"
//    is 1.99-2.04 there), ties to the larger batch.
//  * Fit: one Observation per world size, as the store keys them: n = 1 and
//    n = 4 at batch A, n = 2 at batch B (the typical batch at both ends of
//    the fitted range, the other batch in between), step_seconds = the
//    measured step time, spread 5%, 20 samples, nodes 0 (packed),
//    ModelOptions::gpus_per_node = 4. The two batches are >= 1.25x apart, so
//    the model fits its fixed share of compute.
//  * Prediction: StepSecondsAt(n, b, 0) at every other measured packed
//    (n, b) with n in 1..8 (the three fitted pairs excluded); relative error
//    |predicted - measured| / measured. The target, a median per
//    app <= 10%, is NOT met (bert 55%, cifar10 12%, deepspeech2 15%,
//    imagenet 7.7%, ncf 33%, yolov3 48% when written); asserted as a guard:
//    the one-node median (n <= 4) <= 25% for every app, and imagenet's
//    <= 10% at <= 8 GPUs. Printed, not asserted: the median at 16
//    GPUs ("4444"), and the medians on one node (n <= 4) and across nodes
//    (n = 5..8) separately, and sensitivity runs: B about 4x away, the
//    other assignments of A and B to the three sizes, and (not one
//    observation per size) every placement of <= 4 GPUs at A and B with its
//    node count, as tests/throughput_model_test.cc fits.
// Why the criterion is hard here: on 4-GPU nodes no packed placement of
// <= 4 GPUs spans nodes, so the fit never sees the cross-node cost that
// dominates n = 5..8 ("44" is 2-5x "4" in bert and yolov3); it keeps its
// weak prior for it (5% of compute). The table prints the one-node and
// cross-node medians apart so the two causes can be told apart.
// The table is printed to stdout: `core_tests "[trace]"`.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "rescale/throughput_model.h"
#include "tests/trace_csv.h"

#ifndef RESCALE_TEST_DATA_DIR
#error "CMake must define RESCALE_TEST_DATA_DIR (the repo's tests/data folder)"
#endif

namespace rescale {
namespace {

using testing::CsvRow;
using testing::ReadCsv;

double Median(std::vector<double> values) {
  if (values.empty()) return std::nan("");
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

constexpr uint32_t kGpusPerNode = 4;
const std::vector<std::string> kApps = {"bert",     "cifar10", "deepspeech2",
                                        "imagenet", "ncf",     "yolov3"};

// The packed placement of n GPUs as placements.csv spells it: the partial
// node first, then full nodes ("14" for 5, "44" for 8).
std::string PackedPlacement(uint32_t n) {
  std::string out;
  if (n % kGpusPerNode != 0) out += std::to_string(n % kGpusPerNode);
  out += std::string(n / kGpusPerNode, static_cast<char>('0' + kGpusPerNode));
  return out;
}

// Mean measured step time at the packed placement, by (replicas, batch).
using Key = std::pair<uint32_t, int>;
using Table = std::map<Key, double>;

// Mean measured step time by (placement, local batch), every placements.csv row.
std::map<std::pair<std::string, int>, double> LoadPlacements(const std::string& app) {
  const std::string path =
      std::string(RESCALE_TEST_DATA_DIR) + "/pollux/" + app + "/placements.csv";
  std::map<std::pair<std::string, int>, std::pair<double, int>> sums;
  for (const CsvRow& row : ReadCsv(path)) {
    auto& [sum, count] = sums[{row.at("placement"), std::stoi(row.at("local_bsz"))}];
    sum += std::stod(row.at("step_time"));
    ++count;
  }
  std::map<std::pair<std::string, int>, double> out;
  for (const auto& [key, sum_count] : sums) out[key] = sum_count.first / sum_count.second;
  return out;
}

uint32_t Replicas(const std::string& placement) {
  uint32_t replicas = 0;
  for (char digit : placement) replicas += static_cast<uint32_t>(digit - '0');
  return replicas;
}

Table LoadPacked(const std::string& app) {
  Table out;
  for (const auto& [key, step] : LoadPlacements(app)) {
    const uint32_t replicas = Replicas(key.first);
    if (key.first == PackedPlacement(replicas)) out[{replicas, key.second}] = step;
  }
  return out;
}

bool Has(const Table& table, uint32_t n, int batch) { return table.count({n, batch}) > 0; }

// Batch A: the lower-middle batch measured at all of 1, 2 and 4 GPUs.
std::vector<int> FitCandidates(const Table& table) {
  std::vector<int> out;
  for (const auto& [key, step] : table) {
    const int b = key.second;
    if (key.first == 1 && Has(table, 2, b) && Has(table, 4, b)) out.push_back(b);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Batch B: ratio to A in [1.9, 4.1], closest to 2; ties to the larger. With
// `prefer_far`, closest to 4 instead (sensitivity only).
int SecondBatch(const std::vector<int>& candidates, int a, bool prefer_far = false) {
  const double target = prefer_far ? 4.0 : 2.0;
  int best = 0;
  double best_distance = 1e300;
  for (int b : candidates) {
    const double ratio = static_cast<double>(std::max(a, b)) / std::min(a, b);
    if (ratio < 1.9 || ratio > 4.1) continue;
    const double distance = std::abs(ratio - target);
    if (distance < best_distance || (distance == best_distance && b > best)) {
      best = b;
      best_distance = distance;
    }
  }
  return best;
}

Observation TraceObservation(uint32_t n, int batch, double step_seconds) {
  Observation o;
  o.replicas = n;
  o.step_seconds = step_seconds;
  o.spread_seconds = 0.05 * step_seconds;
  o.sample_count = 20;
  o.mean_batch = batch;
  o.nodes = 0;  // packed
  return o;
}

struct Evaluation {
  std::string model;
  double fixed_share = 0;
  std::vector<double> errors_to_8, errors_one_node, errors_across, errors_16;
  double median_to_8() const { return Median(errors_to_8); }
};

// Observations of the packed (size, batch) pairs `fit`.
std::vector<Observation> PackedObservations(const Table& table, const std::vector<Key>& fit) {
  std::vector<Observation> observed;
  for (const auto& [n, b] : fit) {
    REQUIRE(Has(table, n, b));
    observed.push_back(TraceObservation(n, b, table.at({n, b})));
  }
  return observed;
}

// Fits `observed` and predicts every packed pair at 1..8 and 16 GPUs but
// the `fitted` ones.
Evaluation Evaluate(const Table& table, const std::vector<Observation>& observed,
                    const std::vector<Key>& fitted) {
  Evaluation e;
  ModelOptions options;
  options.gpus_per_node = kGpusPerNode;
  const ThroughputModel model = ThroughputModel::Fit(observed, {}, options);
  REQUIRE_FALSE(model.empty());
  e.model = model.Describe();
  e.fixed_share = model.compute_fixed_share();
  for (const auto& [key, measured] : table) {
    const auto [n, b] = key;
    if (std::find(fitted.begin(), fitted.end(), key) != fitted.end()) continue;
    if (n > 8 && n != 16) continue;
    const double predicted = model.StepSecondsAt(n, b, 0);
    REQUIRE(std::isfinite(predicted));
    REQUIRE(predicted > 0);
    const double error = std::abs(predicted - measured) / measured;
    if (n == 16) {
      e.errors_16.push_back(error);
      continue;
    }
    e.errors_to_8.push_back(error);
    (n <= kGpusPerNode ? e.errors_one_node : e.errors_across).push_back(error);
  }
  return e;
}

// The protocol's fit: n = 1 and 4 at A, n = 2 at B.
std::vector<Key> ProtocolFit(int a, int b) { return {{1, a}, {2, b}, {4, a}}; }

TEST_CASE("fitted at <= 4 GPUs and two batches, the model predicts other batches up to 8 GPUs",
          "[model][trace][goodput]") {
  std::ostringstream out;
  out << "Batch-aware model vs Pollux traces, packed placements (fit n=1,4 at A and n=2 at B; "
         "median |pred-meas|/meas over the other pairs)\n";
  out << absl::StrFormat("%-12s %6s %6s %6s | %5s %8s | %8s %8s | %5s %8s\n", "app", "A", "B",
                         "share", "pairs", "<=8", "n<=4", "n=5..8", "pairs", "16");
  std::vector<std::tuple<std::string, double, double>> medians;
  std::ostringstream models, sensitivity;
  for (const std::string& app : kApps) {
    const Table table = LoadPacked(app);
    const std::vector<int> candidates = FitCandidates(table);
    REQUIRE(candidates.size() >= 2);
    const int a = candidates[(candidates.size() - 1) / 2];
    const int b = SecondBatch(candidates, a);
    INFO(app << ": A = " << a);
    REQUIRE(b > 0);
    const std::vector<Key> fit = ProtocolFit(a, b);
    const Evaluation e = Evaluate(table, PackedObservations(table, fit), fit);
    out << absl::StrFormat("%-12s %6d %6d %6.3f | %5d %7.1f%% | %7.1f%% %7.1f%% | %5d %7.1f%%\n",
                           app, a, b, e.fixed_share, e.errors_to_8.size(), 100 * e.median_to_8(),
                           100 * Median(e.errors_one_node), 100 * Median(e.errors_across),
                           e.errors_16.size(), 100 * Median(e.errors_16));
    models << "  " << app << ": " << e.model << ", fixed share " << e.fixed_share << "\n";
    medians.emplace_back(app, e.median_to_8(), Median(e.errors_one_node));

    // Sensitivity (printed only): B about 4x away; the other assignments of
    // the two batches to the three sizes.
    const int far = SecondBatch(candidates, a, /*prefer_far=*/true);
    const std::vector<std::pair<std::string, std::vector<Key>>> variants = {
        {absl::StrCat("B=", far, " (about 4x)"), ProtocolFit(a, far)},
        {"n=1 at B", {{1, b}, {2, a}, {4, a}}},
        {"n=4 at B", {{1, a}, {2, a}, {4, b}}},
        {"n=1,4 at B", {{1, b}, {2, a}, {4, b}}},
    };
    sensitivity << absl::StrFormat("  %-12s", app);
    for (const auto& [name, pairs] : variants) {
      const Evaluation v = Evaluate(table, PackedObservations(table, pairs), pairs);
      sensitivity << absl::StrFormat(" | %s: %.1f%% (n<=4 %.1f%%)", name, 100 * v.median_to_8(),
                                     100 * Median(v.errors_one_node));
    }
    // Not one observation per size: every placement of <= 4 GPUs at A and
    // at B, with its node count, as tests/throughput_model_test.cc fits
    // (the two-to-four-node placements teach the cross-node cost).
    std::vector<Observation> every;
    std::vector<Key> every_packed;
    for (const auto& [key, step] : LoadPlacements(app)) {
      const uint32_t n = Replicas(key.first);
      if (n > kGpusPerNode || (key.second != a && key.second != b)) continue;
      every.push_back(TraceObservation(n, key.second, step));
      every.back().nodes = static_cast<uint32_t>(key.first.size());
      if (key.first == PackedPlacement(n)) every_packed.emplace_back(n, key.second);
    }
    const Evaluation all = Evaluate(table, every, every_packed);
    sensitivity << absl::StrFormat(
        "\n  %-12s | every placement <= 4 GPUs at A and B (%d obs): %.1f%% (n<=4 %.1f%%, "
        "n=5..8 %.1f%%, 16: %.1f%%), share %.3f",
        "", every.size(), 100 * all.median_to_8(), 100 * Median(all.errors_one_node),
        100 * Median(all.errors_across), 100 * Median(all.errors_16), all.fixed_share);
    sensitivity << "\n";
  }
  out << models.str() << "sensitivity (median at <= 8):\n" << sensitivity.str();
  std::cout << out.str() << std::flush;

  // Issue 31's target, a median <= 10% up to 8 GPUs, is not met under this
  // protocol (see the comment at the top: the fit never sees a placement
  // across nodes). What is asserted guards what holds: on the fitted
  // node (n <= 4) every app's median stays within 25%, and the apps that
  // meet the target keep meeting it.
  for (const auto& [app, median, one_node] : medians) {
    INFO(app << ": median step-time error " << 100 * median << "% at <= 8 GPUs, " << 100 * one_node
             << "% on one node");
    CHECK(one_node <= 0.25);
    if (app == "imagenet") CHECK(median <= 0.10);
    if (median > 0.10) WARN(app << ": issue 31's <= 10% at <= 8 GPUs not met");
  }
}

}  // namespace
}  // namespace rescale
