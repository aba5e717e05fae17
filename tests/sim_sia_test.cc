// Tests of the per-GPU-type profiles of Sia's applications
// (bench/sim/sia_profiles.h) and the fit that derives them
// (bench/sim/pollux_fit.h). Reading placements is tested on files written
// here. The built-in parameters are checked against Sia's raw traces where
// the machine has them (SiaDataDirectory: CI does; the files carry no
// licence and are not in the repository): each reproduces its recorded fit
// error on its rows, and refitting one pair gives the same parameters.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "bench/sim/csv.h"
#include "bench/sim/pollux_fit.h"
#include "bench/sim/sia_profiles.h"
#include "bench/sim/sia_transfer.h"

namespace rescale::sim {
namespace {

std::string TempFile(const std::string& name, const std::string& text) {
  const std::string path = (std::filesystem::temp_directory_path() / name).string();
  REQUIRE(WriteFile(path, text).ok());
  return path;
}

double RmsLogError(const PolluxModel& model, const std::vector<TraceRow>& rows) {
  double sum = 0;
  for (const TraceRow& r : rows) {
    const double e = std::log(ModelStepSeconds(model, r) / r.step_seconds);
    sum += e * e;
  }
  return std::sqrt(sum / double(rows.size()));
}

TEST_CASE("placements are read by header, in any column order", "[sim][sia]") {
  // aws files put placement first, rtx and dgx-ext last.
  const std::string first = TempFile("sia-first.csv",
                                     "placement,local_bsz,step_time,sync_time\n"
                                     "1,32,0.0428,0.0005\n44,16,0.2,0.1\n");
  const std::string last = TempFile("sia-last.csv",
                                    "local_bsz,step_time,sync_time,placement\n"
                                    "32,0.0435,0.0004,1\n16,0.2,0.1,44\n");
  for (const std::string& path : {first, last}) {
    absl::StatusOr<std::vector<TraceRow>> rows = ReadPlacements(path);
    REQUIRE(rows.ok());
    REQUIRE(rows->size() == 2);
    CHECK((*rows)[0].replicas == 1);
    CHECK((*rows)[0].nodes == 1);
    CHECK((*rows)[0].local_batch == 32);
    CHECK((*rows)[1].replicas == 8);
    CHECK((*rows)[1].nodes == 2);
    CHECK((*rows)[1].step_seconds == 0.2);
  }
  const std::string bad = TempFile("sia-bad.csv", "placement,local_bsz,step_time\n4x,8,0.1\n");
  const absl::StatusOr<std::vector<TraceRow>> rows = ReadPlacements(bad);
  REQUIRE(!rows.ok());
  CHECK_THAT(std::string(rows.status().message()), Catch::Contains(":2: expected placement"));
  const std::string missing = TempFile("sia-missing.csv", "placement,step_time\n1,0.1\n");
  CHECK_THAT(std::string(ReadPlacements(missing).status().message()),
             Catch::Contains("needs the columns placement, local_bsz and step_time"));
}

TEST_CASE("the fit recovers a Pollux model from its own step times", "[sim][sia]") {
  PolluxModel truth;
  truth.a_c = 0.05, truth.b_c = 0.004, truth.a_r = 0.03, truth.b_r = 0.002;
  truth.a_n = 0.12, truth.b_n = 0.01, truth.g = 2, truth.gpus_per_node = 4;
  std::vector<TraceRow> rows;
  for (uint32_t nodes : {1u, 2u, 4u}) {
    for (uint32_t per_node : {1u, 2u, 4u}) {
      for (double batch : {8.0, 16.0, 32.0, 64.0}) {
        TraceRow row;
        row.replicas = nodes * per_node;
        row.nodes = nodes;
        row.per_node = per_node;
        row.local_batch = batch;
        row.step_seconds = ModelStepSeconds(truth, row);
        rows.push_back(row);
      }
    }
  }
  const PolluxFit fit = FitPolluxModel(rows, 4);
  CHECK(fit.rows == rows.size());
  CHECK(fit.rms_log_error < 0.01);
  // Step times, not parameters, are what the simulator uses.
  for (const TraceRow& row : rows) {
    CHECK(ModelStepSeconds(fit.model, row) == Approx(row.step_seconds).epsilon(0.02));
  }
}

TEST_CASE("the built-in per-type profiles are the fits of Sia's traces", "[sim][sia]") {
  REQUIRE(SiaProfiles().size() == 18);
  for (const SiaGpuType& type : SiaGpuTypes()) {
    for (std::string_view app : {"bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3"}) {
      const SiaProfile* p = FindSiaProfile(app, type.trace_suffix);
      REQUIRE(p != nullptr);
      CHECK(p->model.gpus_per_node == type.gpus_per_node);
      CHECK(p->rms_log_error < 0.3);
    }
  }
  CHECK(FindSiaProfile("gpt_pmp", "rtx") == nullptr);
  const std::optional<std::string> dir = SiaDataDirectory();
  if (!dir) {
    WARN("Sia's traces are not on this machine (RESCALE_SIA_DATA): raw checks skipped");
    return;
  }
  for (const SiaProfile& p : SiaProfiles()) {
    INFO(p.app << " on " << p.type);
    const absl::StatusOr<std::vector<TraceRow>> rows = ReadPlacements(
        absl::StrCat(*dir, "/traces/", Absl(p.app), "/placements-", Absl(p.type), ".csv"));
    REQUIRE(rows.ok());
    CHECK(rows->size() == p.rows);
    CHECK(RmsLogError(p.model, *rows) == Approx(p.rms_log_error).margin(1e-4));
  }
  // The derivation is deterministic: refitting the smallest pair gives the
  // built-in's step times.
  const SiaProfile* p = FindSiaProfile("yolov3", "rtx");
  const absl::StatusOr<std::vector<TraceRow>> rows =
      ReadPlacements(absl::StrCat(*dir, "/traces/yolov3/placements-rtx.csv"));
  REQUIRE(rows.ok());
  const PolluxFit fit = FitPolluxModel(*rows, 8);
  CHECK(fit.rms_log_error == Approx(p->rms_log_error).margin(1e-4));
  for (const TraceRow& row : *rows) {
    CHECK(ModelStepSeconds(fit.model, row) ==
          Approx(ModelStepSeconds(p->model, row)).epsilon(1e-5));
  }
}

TEST_CASE("cross-type prediction on Sia's traces", "[sim][sia][xtype]") {
  const std::optional<std::string> dir = SiaDataDirectory();
  if (!dir) {
    WARN("Sia's traces are not on this machine (RESCALE_SIA_DATA): skipped");
    return;
  }
  const absl::StatusOr<std::vector<CrossTypeError>> errors = MeasureCrossType(*dir);
  REQUIRE(errors.ok());
  // Every (app, ordered pair of types) is measured on enough placements.
  REQUIRE(errors->size() == 36);
  std::vector<double> same, pair, size;
  for (const CrossTypeError& e : *errors) {
    INFO(e.app << " " << e.from << " -> " << e.to);
    CHECK(e.points >= 45);
    CHECK(e.size_ratio_errors.size() == e.points);
    same.push_back(e.same_seconds);
    pair.push_back(e.pair_ratio);
    size.push_back(e.size_ratio);
  }
  // What a per-pair table of interconnect ratios buys over taking the
  // source's sync seconds as they are, and a table per size over one per
  // pair: a lower median error over the cells.
  std::sort(same.begin(), same.end());
  std::sort(pair.begin(), pair.end());
  std::sort(size.begin(), size.end());
  CHECK(pair[18] < same[18]);
  CHECK(size[18] < pair[18]);
  // The target (median <= 15% per app, over every pair) is met by
  // the size ratio for bert, cifar10 and ncf, by the planner's own (what
  // rescaled predicts with, engine::ModelOnType: the sync fitted size by
  // size to the ratios TypeSpeeds learns) for cifar10, imagenet and ncf;
  // not for deepspeech2 and yolov3, whose steps slow down on several GPUs
  // for reasons other than sync. The table is in docs/simulator.md, and
  // `./build/sim_tests '[xtype]' -s` prints it. The planner's is below
  // carrying the seconds over as they are, over the cells, and for at least
  // five of the six apps pooled over every pair.
  std::vector<double> planner;
  for (const CrossTypeError& e : *errors) planner.push_back(e.planner);
  std::sort(planner.begin(), planner.end());
  CHECK(planner[18] < same[18]);
  int better = 0;
  for (const PerApp& app : PooledPerApp(*errors)) {
    INFO(app.app << ": size ratio " << app.size_ratio << ", planner " << app.planner
                 << ", same seconds " << app.same_seconds);
    if (app.app == "bert" || app.app == "cifar10" || app.app == "ncf")
      CHECK(app.size_ratio <= 0.15);
    if (app.app == "cifar10" || app.app == "imagenet" || app.app == "ncf")
      CHECK(app.planner <= 0.15);
    better += app.planner < app.same_seconds;
  }
  CHECK(better >= 5);
  INFO(CrossTypeTable(*errors));
  SUCCEED();
}

}  // namespace
}  // namespace rescale::sim
