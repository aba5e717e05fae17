// Tests of rescale-sim's statistical-efficiency world (bench/sim/
// pollux_efficiency.h): what the embedded validation traces give (M0, the
// largest batch, epoch boundaries and the target, exactly as Pollux's
// simulator/applications.py derives them), the gradient statistics of an
// epoch linear in the batch between files, a step counting M x EFF(M)
// samples at M0 (a job at M0 runs as fast as without efficiency, a job at a
// larger batch slower, by the epochs' EFF), `--efficiency off` leaving the
// engine deciding exactly as before (planner and planner-throughput alike),
// and the goodput planner against its throughput-only ablation.
#include <catch2/catch.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "bench/sim/baselines.h"
#include "bench/sim/pollux_efficiency.h"
#include "bench/sim/simulator.h"
#include "bench/sim/workload.h"
#include "rescale/goodput.h"

namespace rescale::sim {
namespace {

const EfficiencyTrace& MustLoad(std::string_view app) {
  absl::StatusOr<const EfficiencyTrace*> trace = LoadEfficiencyTrace(app);
  INFO(trace.status().ToString());
  REQUIRE(trace.ok());
  return **trace;
}

Workload MustParseCsv(const std::string& text) {
  absl::StatusOr<Workload> workload = ParseWorkload(text, "csv");
  INFO(workload.status().ToString());
  REQUIRE(workload.ok());
  return *workload;
}

SimulationResult MustRun(const Workload& workload, const std::string& policy, bool efficiency,
                         uint32_t capacity, double noise = 0) {
  SimulationOptions options;
  options.policy = policy;
  options.capacity_gpus = capacity;
  options.step_noise = noise;
  options.efficiency = efficiency;
  absl::StatusOr<SimulationResult> result = Simulate(workload, options);
  INFO(result.status().ToString());
  REQUIRE(result.ok());
  REQUIRE(result->samples_rejected == 0);
  return *std::move(result);
}

double MeanJct(const SimulationResult& r) {
  double sum = 0;
  for (const JobOutcome& job : r.jobs) {
    REQUIRE(job.finished());
    sum += job.jct_seconds();
  }
  return sum / r.jobs.size();
}

TEST_CASE("the validation traces give Pollux's M0, largest batch, epochs and target") {
  // Per app: M0 (smallest file), largest file, rows, the end of the first
  // epoch and TARGET (the least last-row progress over the files), as read
  // from the osdi21-artifact's traces with applications.py's rules.
  struct Expected {
    std::string_view app;
    uint32_t m0, max_batch;
    size_t epochs;
    double first_boundary, target;
  };
  const Expected expected[] = {
      {"bert", 12, 384, 2, 7387.0, 14774.0},
      {"cifar10", 128, 4096, 100, 390.714, 39062.908},
      {"deepspeech2", 20, 640, 80, 356.727, 28536.0},
      {"imagenet", 200, 12800, 90, 6405.927, 576525.595},
      {"ncf", 256, 32768, 10, 19417.594, 194174.0},
      {"yolov3", 8, 512, 50, 2068.973, 103443.978},
  };
  for (const Expected& e : expected) {
    INFO(e.app);
    const EfficiencyTrace& trace = MustLoad(e.app);
    CHECK(trace.initial_batch() == e.m0);
    CHECK(trace.max_batch() == e.max_batch);
    CHECK(trace.epochs() == e.epochs);
    CHECK(trace.boundary(0) == Approx(e.first_boundary).epsilon(1e-5));
    CHECK(trace.target() == Approx(e.target).epsilon(1e-6));
    for (size_t i = 1; i < trace.epochs(); ++i) CHECK(trace.boundary(i) > trace.boundary(i - 1));
  }
  CHECK(LoadEfficiencyTrace("linear").status().code() == absl::StatusCode::kNotFound);
}

TEST_CASE("an epoch's statistics are its row, linear in the batch between files, and EFF(M0) = 1") {
  const EfficiencyTrace& cifar = MustLoad("cifar10");
  // validation-128.csv, first row: grad_sqr 8.9473..., grad_var 5.0666...
  const GradientStats first = cifar.StatsAt(0, 128);
  CHECK(first.sqr == Approx(8.9473).epsilon(1e-4));
  CHECK(first.var == Approx(5.0666).epsilon(1e-4));
  for (size_t epoch : {size_t{0}, size_t{40}, size_t{99}}) {
    INFO("epoch " << epoch);
    const GradientStats lo = cifar.StatsAt(epoch, 256), hi = cifar.StatsAt(epoch, 512);
    const GradientStats mid = cifar.StatsAt(epoch, 320);  // a quarter of the way
    CHECK(mid.sqr == Approx(lo.sqr + 0.25 * (hi.sqr - lo.sqr)));
    CHECK(mid.var == Approx(lo.var + 0.25 * (hi.var - lo.var)));
    CHECK(cifar.Efficiency(epoch, 128) == Approx(1.0));
    for (double batch : {200.0, 1000.0, 4096.0}) {
      CHECK(cifar.Efficiency(epoch, batch) ==
            Approx(StatisticalEfficiency(cifar.StatsAt(epoch, batch), 128, batch)));
      CHECK(cifar.Efficiency(epoch, batch) < 1);
    }
  }
  // Outside the files' range, the nearest file.
  CHECK(cifar.StatsAt(3, 9000).sqr == cifar.StatsAt(3, 4096).sqr);
  // Early in training a large batch wastes most of its samples; late, little.
  CHECK(cifar.Efficiency(0, 4096) < 0.1);
  CHECK(cifar.Efficiency(99, 4096) > 0.9);
}

TEST_CASE("the epoch follows the fraction of the work done") {
  const EfficiencyTrace& cifar = MustLoad("cifar10");
  CHECK(cifar.EpochAt(0) == 0);
  const double first = cifar.boundary(0) / cifar.target();
  CHECK(cifar.EpochAt(first * 0.999) == 0);
  CHECK(cifar.EpochAt(first * 1.001) == 1);
  CHECK(cifar.EpochAt(1.0) == cifar.epochs() - 1);
  CHECK(cifar.EpochAt(2.0) == cifar.epochs() - 1);
}

// The JCT of a lone job at total batch `batch` on one GPU: each epoch's
// share of the work at `off_jct`'s pace divided by that epoch's EFF.
double ExpectedJct(const EfficiencyTrace& trace, double off_jct, double batch) {
  double expected = 0, previous = 0;
  for (size_t e = 0; e < trace.epochs(); ++e) {
    expected +=
        (trace.boundary(e) - previous) / trace.target() * off_jct / trace.Efficiency(e, batch);
    previous = trace.boundary(e);
  }
  return expected;
}

TEST_CASE("a step counts M x EFF(M): near M0 as fast as without efficiency, above it slower") {
  // One cifar10 job alone on one GPU (fifo runs its requested size), no
  // noise. Its local batch is the nearest measured one: 129 for 128 (EFF
  // within a hair of 1 against M0 = 128), 363 for 363.
  const EfficiencyTrace& cifar = MustLoad("cifar10");
  for (const auto& [batch, slower] : {std::pair{129.0, false}, std::pair{363.0, true}}) {
    INFO("total batch " << batch);
    const Workload job = MustParseCsv(absl::StrFormat(
        "name,time,application,num_replicas,batch_size\nc-0,0,cifar10,1,%d\n", int(batch)));
    REQUIRE(job.jobs[0].local_batch_size == batch);
    const double off = MeanJct(MustRun(job, "fifo", false, 4));
    const double on = MeanJct(MustRun(job, "fifo", true, 4));
    // The simulator refreshes EFF at every event; a lone job's events are
    // the plan ticks, 30 s apart: within 0.5% of the epoch-exact figure.
    CHECK(on == Approx(ExpectedJct(cifar, off, batch)).epsilon(0.005));
    if (slower) {
      CHECK(on > 1.05 * off);
    } else {
      CHECK(on == Approx(off).epsilon(0.002));
    }
  }
}

// A small mix of the measured applications at their Pollux batch sizes.
constexpr char kMix[] =
    "name,time,application,num_replicas,batch_size\n"
    "cifar10-0,0,cifar10,4,2048\n"
    "bert-1,60,bert,2,24\n"
    "deepspeech2-2,120,deepspeech2,4,160\n"
    "cifar10-3,300,cifar10,2,512\n"
    "yolov3-4,400,yolov3,2,16\n"
    "ncf-5,500,ncf,1,32768\n"
    "cifar10-6,900,cifar10,8,4096\n";

TEST_CASE("with --efficiency off the planner decides as before, goodput or not") {
  const Workload mix = MustParseCsv(kMix);
  const SimulationResult planner = MustRun(mix, "planner", false, 16, 0.05);
  const SimulationResult ablation = MustRun(mix, "planner-throughput", false, 16, 0.05);
  // No job reports gradient statistics or batch scaling, so the goodput
  // planner has nothing to plan on: the same decisions to the allocation.
  REQUIRE(planner.allocations == ablation.allocations);
  REQUIRE(planner.timeline == ablation.timeline);
  CHECK(MeanJct(planner) == MeanJct(ablation));
}

TEST_CASE("in the efficiency world the goodput planner beats its throughput-only ablation") {
  const Workload mix = MustParseCsv(kMix);
  const SimulationResult planner = MustRun(mix, "planner", true, 16, 0.05);
  const SimulationResult ablation = MustRun(mix, "planner-throughput", true, 16, 0.05);
  INFO("planner " << MeanJct(planner) << " s, planner-throughput " << MeanJct(ablation) << " s");
  CHECK(MeanJct(planner) < MeanJct(ablation));
  // Both runs took the same work: the world, not the accounting, differs.
  for (size_t i = 0; i < planner.jobs.size(); ++i)
    CHECK(planner.jobs[i].done_samples == ablation.jobs[i].done_samples);
}

TEST_CASE("planner-throughput is a planner-kind policy that runs the planner") {
  CHECK(IsSimulatorPolicy("planner-throughput"));
  CHECK(KindOf("planner-throughput") == PolicyKind::kPlanner);
  CHECK(EnginePolicyFor("planner-throughput") == "planner");
}

}  // namespace
}  // namespace rescale::sim
