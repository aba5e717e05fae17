// Tests of rescale-sim (bench/sim): analytic runs whose completion times are
// computed by hand from a synthetic curve without noise (restart costs
// included: the first start is free, a rescale and a resume each cost
// restart_cost_seconds, a suspension stops progress), a two-job priority
// case whose answer is obvious, the planner preferring the job that scales,
// determinism (same seed, same bytes; another seed, other numbers), capacity
// never exceeded under every known policy while nodes come and go, the
// embedded Pollux tables (packed placements, interpolation), the workload
// formats, the report files, the cluster-native baselines (fifo, tiresias,
// kubedl-raw) on tiny workloads, total_samples and its noise, step numbers,
// the sweep's means over seeds, and the node model (placement, the foreign
// load, Pending pods, node-aware against node-unaware planning).
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench/sim/baselines.h"
#include "bench/sim/csv.h"
#include "bench/sim/nodes.h"
#include "bench/sim/pollux_traces.h"
#include "bench/sim/profiles.h"
#include "bench/sim/report.h"
#include "bench/sim/runner.h"
#include "bench/sim/simulator.h"
#include "bench/sim/summary.h"
#include "bench/sim/sweep.h"
#include "bench/sim/workload.h"
#include "rescale/decision_engine.h"
#include "rescale/read_file.h"

namespace rescale::sim {
namespace {

Workload MustParse(const std::string& text, std::string_view format = "jsonl") {
  absl::StatusOr<Workload> workload = ParseWorkload(text, format);
  INFO(workload.status().ToString());
  REQUIRE(workload.ok());
  return *workload;
}

SimulationResult MustSimulate(const Workload& workload, const SimulationOptions& options) {
  absl::StatusOr<SimulationResult> result = Simulate(workload, options);
  INFO(result.status().ToString());
  REQUIRE(result.ok());
  REQUIRE(result->samples_rejected == 0);
  return *std::move(result);
}

SimulationOptions Exact(std::string policy, uint32_t capacity) {
  SimulationOptions options;
  options.policy = std::move(policy);
  options.capacity_gpus = capacity;
  options.step_noise = 0;
  return options;
}

const JobOutcome& Job(const SimulationResult& result, const std::string& id) {
  for (const JobOutcome& job : result.jobs) {
    if (job.id == id) return job;
  }
  FAIL("no job " << id);
  return result.jobs.front();
}

// Time-weighted mean GPUs of job `id` over [from, to).
double AverageGpus(const SimulationResult& r, double from, double to, const std::string& id) {
  uint32_t index = 0;
  while (r.jobs[index].id != id) ++index;
  double gpu_seconds = 0, gpus = 0, at = from;
  for (const AllocationChange& a : r.allocations) {
    if (a.job != index) continue;
    const double t = std::clamp(a.time_seconds, from, to);
    gpu_seconds += gpus * (t - at);
    at = t;
    gpus = a.gpus;
  }
  gpu_seconds += gpus * (to - at);
  return gpu_seconds / (to - from);
}

// `linear`: 1 s per step at any size, 32 samples per replica per step, so
// n replicas train 32n samples/s.
constexpr char kLoneLinearJob[] =
    R"({"id": "solo", "arrival_seconds": 10, "profile": "linear", "samples": 32000,)"
    R"( "min_replicas": 2, "max_replicas": 8, "restart_cost_seconds": 20, "local_batch_size": 32})";

TEST_CASE("a lone static-min job runs at min_replicas and finishes when computed by hand") {
  const SimulationResult r = MustSimulate(MustParse(kLoneLinearJob), Exact("static-min", 8));
  const JobOutcome& job = Job(r, "solo");
  // 32000 samples at 2 x 32 samples/s = 500 s, from its arrival at 10 s.
  CHECK(job.first_start_seconds == 10);
  CHECK(job.finish_seconds == 510);
  CHECK(job.jct_seconds() == 500);
  CHECK(job.peak_replicas == 2);
  CHECK(job.restarts() == 0);
  CHECK(job.restart_gpu_seconds == 0);
  CHECK(job.gpu_seconds == Approx(2 * 500.0));
  const PolicySummary s = Summarize(r);
  CHECK(s.avg_jct_s == 500);
  CHECK(s.makespan_s == 500);
  CHECK(s.utilization == Approx(2.0 / 8));
}

TEST_CASE("a lone static-max job starts at max_replicas and its first start costs nothing") {
  const SimulationResult r = MustSimulate(MustParse(kLoneLinearJob), Exact("static-max", 8));
  const JobOutcome& job = Job(r, "solo");
  // 32000 samples at 8 x 32 samples/s = 125 s; no restart cost.
  CHECK(job.finish_seconds == 135);
  CHECK(job.rescales == 0);
  CHECK(job.restarts() == 0);
  CHECK(Summarize(r).effective_utilization == Approx(1.0));
}

TEST_CASE("growing when capacity is added costs restart_cost_seconds once") {
  SimulationOptions options = Exact("static-max", 4);
  options.capacity_changes = {{100, 8}};
  const SimulationResult r = MustSimulate(MustParse(kLoneLinearJob), options);
  const JobOutcome& job = Job(r, "solo");
  // [10, 100): 4 replicas, 128 samples/s -> 11520 samples. At 100 it grows
  // to 8 and restarts until 120; the remaining 20480 take 80 s at 256/s.
  CHECK(job.finish_seconds == 200);
  CHECK(job.rescales == 1);
  CHECK(job.restarts() == 1);
  CHECK(job.restart_gpu_seconds == Approx(8 * 20.0));
  CHECK(Summarize(r).restart_gpu_hours == Approx(8 * 20.0 / 3600));
}

TEST_CASE("shrinking when nodes are lost costs restart_cost_seconds too") {
  SimulationOptions options = Exact("static-max", 8);
  options.capacity_changes = {{100, 4}};
  const SimulationResult r = MustSimulate(MustParse(kLoneLinearJob), options);
  const JobOutcome& job = Job(r, "solo");
  // [10, 100): 8 replicas, 256 samples/s -> 23040 samples. At 100 it
  // shrinks to 4 and restarts until 120; the remaining 8960 take 70 s.
  CHECK(job.finish_seconds == 190);
  CHECK(job.rescales == 1);
  CHECK(job.restart_gpu_seconds == Approx(4 * 20.0));
  for (const TimelinePoint& p : r.timeline) CHECK(p.allocated_gpus <= p.capacity_gpus);
}

TEST_CASE(
    "a higher-priority arrival suspends the running job, which resumes after it at a restart "
    "cost") {
  // Both jobs need the whole cluster (4 GPUs) for 100 s of work.
  const Workload workload = MustParse(
      R"({"id": "low", "arrival_seconds": 0, "profile": "linear", "samples": 12800, "min_replicas": 4,)"
      R"( "max_replicas": 4, "priority": 0, "restart_cost_seconds": 20, "local_batch_size": 32})"
      "\n"
      R"({"id": "high", "arrival_seconds": 50, "profile": "linear", "samples": 12800, "min_replicas": 4,)"
      R"( "max_replicas": 4, "priority": 10, "restart_cost_seconds": 20, "local_batch_size": 32})");
  const SimulationResult r = MustSimulate(workload, Exact("static-min", 4));
  const JobOutcome& low = Job(r, "low");
  const JobOutcome& high = Job(r, "high");
  // high: starts on arrival (50), runs 100 s.
  CHECK(high.first_start_seconds == 50);
  CHECK(high.finish_seconds == 150);
  CHECK(high.restarts() == 0);
  // low: 6400 samples done by 50, suspended, resumed at 150, restarts until
  // 170, then the other 6400 take 50 s.
  CHECK(low.first_start_seconds == 0);
  CHECK(low.suspensions == 1);
  CHECK(low.resumes == 1);
  CHECK(low.restarts() == 1);
  CHECK(low.finish_seconds == 220);
  CHECK(low.restart_gpu_seconds == Approx(4 * 20.0));
  const PolicySummary s = Summarize(r);
  CHECK(s.avg_jct_s == Approx((220.0 + 100.0) / 2));
  CHECK(s.suspensions == 1);
}

TEST_CASE("the planner gives the GPUs to the job that scales, not to the one that does not") {
  // The flat job arrives first and has the idle cluster to itself: it
  // starts where the default prior says (all 8). When the scalable job
  // arrives they share; the resize measures the flat job at a second size
  // with the same throughput, and from then on the planner gives the GPUs
  // to the job that turns them into samples. (One size each says nothing
  // about scaling: two jobs started together at 4 each look alike until a
  // resize measures one of them elsewhere.)
  const Workload workload = MustParse(
      R"({"id": "flat", "arrival_seconds": 0, "profile": "flat", "samples": 1000000, "min_replicas": 1,)"
      R"( "max_replicas": 8, "restart_cost_seconds": 10})"
      "\n"
      R"({"id": "scales", "arrival_seconds": 100, "profile": "linear", "samples": 2000000, "min_replicas": 1,)"
      R"( "max_replicas": 8, "restart_cost_seconds": 10})");
  const SimulationResult r = MustSimulate(workload, Exact("planner", 8));
  const JobOutcome& scales = Job(r, "scales");
  const JobOutcome& flat = Job(r, "flat");
  REQUIRE(scales.finished());
  REQUIRE(flat.finished());
  CHECK(flat.first_start_seconds == 0);
  CHECK(flat.peak_replicas == 8);
  // Average GPUs of each while both run: the scalable job gets most.
  const double both_from = 100;
  const double both_until = std::min(scales.finish_seconds, flat.finish_seconds);
  REQUIRE(both_until > both_from);
  const double scales_gpus = AverageGpus(r, both_from, both_until, "scales");
  const double flat_gpus = AverageGpus(r, both_from, both_until, "flat");
  INFO("while both ran: scales " << scales_gpus << " GPUs on average, flat " << flat_gpus);
  CHECK(scales_gpus > 5);
  CHECK(flat_gpus < 2);
  CHECK(scales.peak_replicas >= 6);
}

// A small Pollux-recipe workload (a dozen jobs), fast even in Debug+ASan.
Workload SmallPolluxWorkload() {
  GenerateOptions options;
  options.jobs_per_hour = 24;
  options.hours = 0.5;
  options.seed = 3;
  absl::StatusOr<Workload> workload = GenerateWorkload(options);
  REQUIRE(workload.ok());
  REQUIRE(workload->jobs.size() >= 5);
  return *workload;
}

TEST_CASE("the same seed gives identical results, another seed, with noise, different ones") {
  const Workload workload = SmallPolluxWorkload();
  SimulationOptions options;
  options.policy = "planner";
  options.capacity_gpus = 16;
  options.step_noise = 0.1;
  options.seed = 11;
  const SimulationResult a = MustSimulate(workload, options);
  const SimulationResult b = MustSimulate(workload, options);
  CHECK(Summarize(a) == Summarize(b));
  CHECK(JobsCsv({a}) == JobsCsv({b}));
  CHECK(TimelineCsv({a}) == TimelineCsv({b}));
  CHECK(AllocationsCsv({a}) == AllocationsCsv({b}));
  options.seed = 12;
  const SimulationResult c = MustSimulate(workload, options);
  CHECK(JobsCsv({a}) != JobsCsv({c}));
  CHECK(Summarize(a).avg_jct_s != Summarize(c).avg_jct_s);
}

TEST_CASE("running policies in parallel gives the results of running them one by one") {
  const Workload workload = SmallPolluxWorkload();
  std::vector<SimulationTask> tasks;
  for (const char* policy : {"planner", "static-max", "efficiency", "tiresias", "kubedl-raw"}) {
    SimulationOptions options;
    options.policy = policy;
    options.capacity_gpus = 16;
    tasks.push_back({&workload, options});
  }
  std::vector<absl::StatusOr<SimulationResult>> parallel =
      RunSimulations(tasks, {.threads = 3, .progress = false});
  REQUIRE(parallel.size() == tasks.size());
  for (size_t i = 0; i < tasks.size(); ++i) {
    REQUIRE(parallel[i].ok());
    const SimulationResult alone = MustSimulate(workload, tasks[i].options);
    CHECK(parallel[i]->policy == tasks[i].options.policy);
    CHECK(JobsCsv({*parallel[i]}) == JobsCsv({alone}));
  }
}

TEST_CASE("no known policy runs more GPUs than the cluster has, while nodes are lost and added") {
  const Workload workload = SmallPolluxWorkload();
  for (const std::string& policy : SimulatorPolicies()) {
    SimulationOptions options;
    options.policy = policy;
    options.capacity_gpus = 16;
    options.capacity_changes = {{600, 8}, {1500, 12}, {2400, 20}};
    const SimulationResult r = MustSimulate(workload, options);
    INFO(policy);
    for (const TimelinePoint& p : r.timeline) REQUIRE(p.allocated_gpus <= p.capacity_gpus);
    const PolicySummary s = Summarize(r);
    CHECK(s.finished == s.jobs);
    CHECK(s.utilization <= 1.0 + 1e-9);
  }
}

TEST_CASE("an unknown policy is rejected with the known ones listed") {
  SimulationOptions options = Exact("no-such-policy", 8);
  absl::StatusOr<SimulationResult> r = Simulate(MustParse(kLoneLinearJob), options);
  REQUIRE(r.status().code() == absl::StatusCode::kInvalidArgument);
  // The cluster-native four and planner-throughput (the planner without
  // goodput) beside the engine's own.
  REQUIRE(SimulatorPolicies().size() == DecisionEngine::KnownPolicies().size() + 5);
  for (const std::string& known : SimulatorPolicies()) {
    CHECK_THAT(std::string(r.status().message()), Catch::Matchers::Contains(known));
  }
}

TEST_CASE("a job that can never fit is rejected before the run") {
  SimulationOptions options = Exact("static-min", 1);
  absl::StatusOr<SimulationResult> r = Simulate(MustParse(kLoneLinearJob), options);
  CHECK(r.status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("measured profiles use the packed placement of each replica count") {
  absl::StatusOr<const MeasuredApp*> app = LoadMeasuredApp("imagenet");
  REQUIRE(app.ok());
  const MeasuredApp& imagenet = **app;
  // One node holds 4 GPUs: 4 replicas is placement "4"; 8 is "44" (2 nodes)
  // and 5 is "14" (4 + 1) rather than "23".
  CHECK(imagenet.placement.at(4) == "4");
  CHECK(imagenet.placement.at(8) == "44");
  CHECK(imagenet.placement.at(5) == "14");
  CHECK(imagenet.placement.at(16) == "4444");
  CHECK(imagenet.placement.at(20) == "6 nodes");  // scalability.csv, fewest nodes
  // The table's value is the CSV's row: "4,20,..." in placements.csv.
  const std::string_view csv = EmbeddedTrace("imagenet", "placements");
  const size_t row = csv.find("\n4,20,");
  REQUIRE(row != std::string_view::npos);
  const std::vector<std::string> fields =
      absl::StrSplit(std::string(csv.substr(row + 1, csv.find('\n', row + 1) - row - 1)), ',');
  CHECK(imagenet.StepSeconds(4, 20) == std::stod(fields[2]));
  // Between measured counts (16 and 20) step time is linear in replicas.
  const double t16 = imagenet.StepSeconds(16, 115), t20 = imagenet.StepSeconds(20, 115);
  CHECK(imagenet.StepSeconds(18, 115) == Approx((t16 + t20) / 2));
  // Between measured batches, linear in the batch.
  CHECK(imagenet.StepSeconds(1, 24) ==
        Approx((imagenet.StepSeconds(1, 20) + imagenet.StepSeconds(1, 28)) / 2));
  // Beyond 64 replicas: no extra throughput.
  CHECK(imagenet.StepSeconds(128, 115) == Approx(2 * imagenet.StepSeconds(64, 115)));
}

TEST_CASE("every measured application parses and has a positive curve up to 64 replicas") {
  for (std::string_view name : kPolluxApps) {
    const BuiltinProfile* builtin = FindBuiltinProfile(name);
    REQUIRE(builtin != nullptr);
    absl::StatusOr<ProfileSpec> spec = ParseProfile(name);
    REQUIRE(spec.ok());
    absl::StatusOr<JobCurve> curve = MakeJobCurve(*spec, builtin->default_local_batch, 64);
    REQUIRE(curve.ok());
    for (uint32_t n = 1; n <= 64; ++n) CHECK(curve->StepSeconds(n) > 0);
  }
}

TEST_CASE("curve and model profiles give the step times they describe") {
  absl::StatusOr<ProfileSpec> curve = ParseProfile("curve:1=100;4=300");
  REQUIRE(curve.ok());
  absl::StatusOr<JobCurve> c = MakeJobCurve(*curve, 10, 8);
  REQUIRE(c.ok());
  CHECK(c->SamplesPerSecond(1) == Approx(100));
  CHECK(c->SamplesPerSecond(2) == Approx(100 + 200.0 / 3));
  CHECK(c->SamplesPerSecond(4) == Approx(300));
  CHECK(c->SamplesPerSecond(8) == Approx(300));  // flat beyond the last point
  absl::StatusOr<ProfileSpec> model =
      ParseProfile("model:a_c=0.1;b_c=0.01;a_r=0.05;b_r=0.01;a_n=0.2;b_n=0.02;g=1");
  REQUIRE(model.ok());
  absl::StatusOr<JobCurve> m = MakeJobCurve(*model, 10, 8);
  REQUIRE(m.ok());
  CHECK(m->StepSeconds(1) == Approx(0.2));
  CHECK(m->StepSeconds(4) == Approx(0.2 + 0.05 + 0.02));  // one node
  CHECK(m->StepSeconds(8) == Approx(0.2 + 0.2 + 0.12));   // two nodes
  CHECK_FALSE(ParseProfile("curve:1=100;1=200").ok());
  CHECK_FALSE(ParseProfile("model:speed=3").ok());
  absl::StatusOr<ProfileSpec> unknown = ParseProfile("resnet");
  REQUIRE_FALSE(unknown.ok());
  CHECK_THAT(std::string(unknown.status().message()), Catch::Matchers::Contains("cifar10"));
}

TEST_CASE("JSONL, CSV and generated workloads read back identically") {
  const Workload generated = SmallPolluxWorkload();
  const Workload from_jsonl = MustParse(WorkloadToJsonl(generated), "jsonl");
  const Workload from_csv = MustParse(WorkloadToCsv(generated), "csv");
  REQUIRE(from_jsonl.jobs.size() == generated.jobs.size());
  REQUIRE(from_csv.jobs.size() == generated.jobs.size());
  for (size_t i = 0; i < generated.jobs.size(); ++i) {
    for (const Workload* w : {&from_jsonl, &from_csv}) {
      const JobDescription& a = generated.jobs[i];
      const JobDescription& b = w->jobs[i];
      CHECK(a.id == b.id);
      CHECK(a.arrival_seconds == b.arrival_seconds);
      CHECK(a.profile.text == b.profile.text);
      CHECK(a.work_samples == b.work_samples);
      CHECK(a.max_replicas == b.max_replicas);
      CHECK(a.requested_replicas == b.requested_replicas);
      CHECK(a.local_batch_size == b.local_batch_size);
      CHECK(a.restart_cost_seconds == b.restart_cost_seconds);
    }
  }
}

TEST_CASE("a Pollux workload row maps to a job as documented") {
  const Workload w = MustParse(
      "name,time,application,num_replicas,batch_size\n"
      "cifar10-0,107,cifar10,6,2048\n"
      "imagenet-1,200,imagenet,48,6400\n"
      "yolov3-2,300,yolov3,4,64\n",
      "csv");
  REQUIRE(w.jobs.size() == 3);
  const JobDescription& cifar = w.jobs[0];
  CHECK(cifar.work_samples == 100 * 50'000.0);  // 100 epochs of CIFAR-10
  CHECK(cifar.min_replicas == 1);
  CHECK(cifar.max_replicas == 24);       // 4 x 6
  CHECK(cifar.local_batch_size == 363);  // 2048 / 6 = 341 -> nearest measured
  CHECK(cifar.restart_cost_seconds == 30);
  CHECK(w.jobs[1].max_replicas == 64);   // 4 x 48 capped
  CHECK(cifar.requested_replicas == 6);  // num_replicas
  CHECK(w.jobs[1].requested_replicas == 48);
  CHECK(w.jobs[2].local_batch_size == 8);  // 64 / 4 = 16, capped at 8
}

// Found by tests/fuzz/sim_workload.cc: a job id "#bert-a" was written
// unquoted at the start of a CSV line, which the reader skips as a comment.
TEST_CASE("CSV fields that would read as a comment or lose blanks are quoted") {
  CHECK(CsvField("#bert-a") == "\"#bert-a\"");
  CHECK(CsvField(" a") == "\" a\"");
  CHECK(CsvField("a\t") == "\"a\t\"");
  CHECK(CsvField("a#b") == "a#b");
  absl::StatusOr<CsvTable> table = ParseCsv("id,x\n" + CsvField("#bert-a") + ",1\n");
  REQUIRE(table.ok());
  REQUIRE(table->rows.size() == 1);
  CHECK(table->rows[0][0] == "#bert-a");
}

TEST_CASE("workload errors name the line and the field") {
  auto error = [](const std::string& text, std::string_view format) {
    absl::StatusOr<Workload> w = ParseWorkload(text, format);
    REQUIRE_FALSE(w.ok());
    return std::string(w.status().message());
  };
  CHECK_THAT(
      error(R"({"id": "a", "arrival_seconds": 0, "profile": "linear", "samples": 1})", "jsonl"),
      Catch::Matchers::Contains("max_replicas"));
  CHECK_THAT(error("id,arrival_seconds,profile,samples,max_replicas\na,0,linear,10,0\n", "csv"),
             Catch::Matchers::Contains("line 2"));
  CHECK_THAT(
      error(
          R"({"id": "a", "arrival_seconds": 0, "profile": "linear", "epochs": 3, "max_replicas": 2})",
          "jsonl"),
      Catch::Matchers::Contains("dataset"));
  CHECK_THAT(
      error(
          R"({"id": "a", "arrival_seconds": 0, "profile": "linear", "samples": 1, "max_replicas": 2,)"
          R"( "colour": "red"})",
          "jsonl"),
      Catch::Matchers::Contains("colour"));
  // Found by tests/fuzz/sim_workload.cc: a Pollux row named "ci\xe6ar10-12"
  // was accepted, and writing the workload as JSONL then threw.
  CHECK_THAT(error("name,time,application,num_replicas,batch_size\n"
                   "cifar10-0,107,cifar10,6,2048\nci\xe6" "ar10-12,1611,cifar10,8,2048\n",
                   "csv"),
             Catch::Matchers::Contains("line 3: not UTF-8"));
  // Found by tests/fuzz/sim_workload.cc: SimpleAtod reads "inf", and an
  // infinite batch_size reached a float-to-uint32 conversion (undefined).
  const std::string pollux_header = "name,time,application,num_replicas,batch_size\n";
  CHECK_THAT(error(pollux_header + "a,0,cifar10,6,inf\n", "csv"),
             Catch::Matchers::Contains("line 2"));
  CHECK_THAT(error(pollux_header + "a,nan,cifar10,6,2048\n", "csv"),
             Catch::Matchers::Contains("finite"));
  // Found by tests/fuzz/sim_workload.cc: a row without a name made a job
  // with an empty id, which WorkloadToJsonl wrote and the JSONL reader refused.
  CHECK_THAT(error(pollux_header + "a,0,cifar10,6,2048\n,1611,cifar10,8,2048\n", "csv"),
             Catch::Matchers::Contains("line 3: name is required"));
  // A finite batch beyond uint32_t's range takes the largest measured one.
  absl::StatusOr<Workload> huge = ParseWorkload(pollux_header + "a,0,cifar10,1,1e20\n", "csv");
  REQUIRE(huge.ok());
  CHECK(huge->jobs[0].local_batch_size ==
        RoundToMeasuredLocalBatch("cifar10", std::numeric_limits<uint32_t>::max()));
  // Overlong forms and surrogates are not UTF-8 either; real UTF-8 is fine.
  CHECK_THAT(error("id,arrival_seconds\n\xc0\xaf,0\n", "csv"), Catch::Matchers::Contains("line 2"));
  CHECK_THAT(error("id,arrival_seconds\n\xed\xa0\x80,0\n", "csv"),
             Catch::Matchers::Contains("not UTF-8"));
  CHECK(ParseWorkload("id,arrival_seconds,profile,samples,max_replicas\n"
                      "b\xc3\xa9" "b\xe2\x82\xac\xf0\x9f\x9a\x80,0,linear,10,2\n",
                      "csv")
            .ok());
}

TEST_CASE("a JSONL workload carries the cluster's capacity and its changes") {
  const Workload w =
      MustParse(std::string(R"({"capacity_gpus": 64})") + "\n" +
                R"({"capacity_gpus": 48, "at_seconds": 3600})" + "\n" + kLoneLinearJob);
  CHECK(w.capacity_gpus == 64u);
  REQUIRE(w.capacity_changes.size() == 1);
  CHECK(w.capacity_changes[0] == CapacityChange{3600, 48});
}

TEST_CASE("a workload file that cannot be read is NOT_FOUND naming it as the workload") {
  const std::string path = std::filesystem::temp_directory_path() / "rescale-sim-no-such.jsonl";
  absl::StatusOr<Workload> workload = LoadWorkload(path);
  REQUIRE_FALSE(workload.ok());
  CHECK(workload.status().code() == absl::StatusCode::kNotFound);
  CHECK_THAT(std::string(workload.status().message()),
             Catch::Matchers::Contains("cannot read workload \"" + path + "\""));
}

TEST_CASE("the report directory holds the CSVs, the plots and report.md") {
  const Workload workload = SmallPolluxWorkload();
  std::vector<SimulationResult> results;
  for (const char* policy : {"planner", "static-min"}) {
    SimulationOptions options;
    options.policy = policy;
    options.capacity_gpus = 16;
    results.push_back(MustSimulate(workload, options));
  }
  const std::string dir =
      (std::filesystem::temp_directory_path() / absl::StrFormat("rescale-sim-test-%d", ::getpid()))
          .string();
  RunDescription run;
  run.workload = "small";
  run.jobs = workload.jobs.size();
  run.capacity_gpus = 16;
  run.baseline = "planner";
  REQUIRE(WriteRunReport(dir, run, results).ok());
  absl::StatusOr<std::string> summary = rescale::ReadFileToString(dir + "/summary.csv", "summary");
  REQUIRE(summary.ok());
  for (const char* column : {"policy", "avg_jct_s", "p50_jct_s", "p99_jct_s", "makespan_s",
                             "avg_queue_s", "utilization", "rescales", "suspensions"}) {
    CHECK_THAT(summary->substr(0, summary->find('\n')), Catch::Matchers::Contains(column));
  }
  for (const char* file :
       {"jobs.csv", "timeline.csv", "allocations.csv", "jct_cdf.svg", "utilization.svg",
        "allocation-planner.svg", "allocation-static-min.svg"}) {
    INFO(file);
    CHECK(std::filesystem::file_size(dir + "/" + file) > 100);
  }
  absl::StatusOr<std::string> report = rescale::ReadFileToString(dir + "/report.md", "report");
  REQUIRE(report.ok());
  CHECK_THAT(*report, Catch::Matchers::Contains("jct_cdf.svg"));
  CHECK_THAT(*report, Catch::Matchers::Contains("| planner *"));
  std::filesystem::remove_all(dir);
}

// `linear` jobs (1 s per step, 32 samples per replica per step): `work` in
// seconds at `requested` replicas.
std::string LinearJob(const std::string& id, double arrival, uint32_t requested, double work,
                      uint32_t min = 1, uint32_t max = 8) {
  return absl::StrFormat(
      R"({"id": "%s", "arrival_seconds": %g, "profile": "linear", "samples": %g,)"
      R"( "min_replicas": %d, "max_replicas": %d, "requested_replicas": %d,)"
      R"( "restart_cost_seconds": 20, "local_batch_size": 32})"
      "\n",
      id, arrival, 32.0 * requested * work, min, max, requested);
}

TEST_CASE("fifo runs requested sizes in arrival order, the head blocking smaller jobs behind it") {
  // 8 GPUs: a (6 GPUs, 100 s) runs; b (4) does not fit in the 2 left, and
  // c (2) would, but waits behind b. Tiresias lets c through.
  const Workload workload =
      MustParse(LinearJob("a", 0, 6, 100) + LinearJob("b", 1, 4, 100) + LinearJob("c", 2, 2, 100));
  const SimulationResult fifo = MustSimulate(workload, Exact("fifo", 8));
  CHECK(Job(fifo, "a").finish_seconds == 100);
  CHECK(Job(fifo, "b").first_start_seconds == 100);
  CHECK(Job(fifo, "c").first_start_seconds == 100);
  CHECK(Job(fifo, "c").finish_seconds == 200);
  for (const JobOutcome& job : fifo.jobs) {
    CHECK(job.restarts() == 0);
    CHECK(job.suspensions == 0);
    CHECK(job.peak_replicas == job.requested_replicas);
  }
  const SimulationResult tiresias = MustSimulate(workload, Exact("tiresias", 8));
  CHECK(Job(tiresias, "c").first_start_seconds == 2);
  CHECK(Job(tiresias, "b").first_start_seconds == 100);
}

TEST_CASE("fifo and tiresias cap a request the cluster can never hold, and clamp it to the range") {
  const Workload workload =
      MustParse(LinearJob("big", 0, 16, 10, 2, 16) + LinearJob("small", 0, 12, 10, 1, 4));
  const SimulationResult r = MustSimulate(workload, Exact("fifo", 8));
  CHECK(Job(r, "big").requested_replicas == 8);    // the cluster's 8 GPUs
  CHECK(Job(r, "small").requested_replicas == 4);  // max_replicas
  CHECK(r.jobs.size() == 2);
  for (const JobOutcome& job : r.jobs) CHECK(job.finished());
}

TEST_CASE("tiresias demotes a job after 16 GPU-hours, and a queue-0 job then preempts it") {
  // long: the whole cluster (8 GPUs) for 10000 s; 16 GPU-hours at 8 GPUs is
  // 7200 s. short arrives at 3600 and waits (long is ahead in queue 0) until
  // long is demoted at 7200; long is preempted and resumes at 7300, paying
  // its 20 s restart: 2800 s of work remain, so it ends at 10120.
  const Workload workload =
      MustParse(LinearJob("long", 0, 8, 10000) + LinearJob("short", 3600, 4, 100));
  const SimulationResult r = MustSimulate(workload, Exact("tiresias", 8));
  const JobOutcome& lng = Job(r, "long");
  const JobOutcome& shrt = Job(r, "short");
  CHECK(shrt.first_start_seconds == 7200);
  CHECK(shrt.finish_seconds == 7300);
  CHECK(lng.suspensions == 1);
  CHECK(lng.resumes == 1);
  CHECK(lng.rescales == 0);
  CHECK(lng.finish_seconds == Approx(10120));
  CHECK(AverageGpus(r, 7200, 7300, "long") == 0);

  TiresiasScheduler scheduler;
  std::vector<ClusterJob> jobs(2);
  for (ClusterJob& job : jobs) {
    job.active = true;
    job.requested_replicas = 8;
  }
  jobs[0].attained_gpu_seconds = kTiresiasDemotionGpuSeconds - 1;
  CHECK(scheduler.Round(jobs, 8) == std::vector<uint32_t>{8, 0});
  jobs[0].attained_gpu_seconds = kTiresiasDemotionGpuSeconds;
  CHECK(scheduler.Round(jobs, 8) == std::vector<uint32_t>{0, 8});
  CHECK(scheduler.demoted(0));
  jobs[0].attained_gpu_seconds = 0;  // no rescue: demotion is for good
  CHECK(scheduler.Round(jobs, 8) == std::vector<uint32_t>{0, 8});
}

TEST_CASE("kubedl-raw grows only into free GPUs and runs with the workers that fit") {
  // 9 GPUs; fixed holds 6 until 600 s. grows (kubedl: 1, then doubles) gets
  // 2, then asks for 4 and runs on the 3 free; more only after fixed ends.
  const Workload workload =
      MustParse(LinearJob("fixed", 0, 6, 600, 6, 6) + LinearJob("grows", 0, 1, 20000, 1, 8));
  const SimulationResult r = MustSimulate(workload, Exact("kubedl-raw", 9));
  const double fixed_end = Job(r, "fixed").finish_seconds;
  CHECK(Job(r, "fixed").first_start_seconds == 0);
  CHECK(fixed_end == 600);
  uint32_t before = 0, after = 0;
  for (const AllocationChange& a : r.allocations) {
    if (r.jobs[a.job].id != "grows") continue;
    (a.time_seconds < fixed_end ? before : after) =
        std::max(a.time_seconds < fixed_end ? before : after, a.replicas);
  }
  CHECK(before == 3);
  CHECK(after > 3);
  for (const TimelinePoint& p : r.timeline) REQUIRE(p.allocated_gpus <= 9);
  CHECK(FirstComeFirstServed({{true, 1, 1, 1, 4, 8, 0}, {true, 2, 2, 1, 0, 4, 0}}, 5) ==
        std::vector<uint32_t>{5, 0});  // the older job's scale-up comes first; 0 < min 2 waits
  CHECK(FirstComeFirstServed({{true, 1, 1, 1, 4, 2, 0}, {true, 2, 2, 1, 0, 4, 0}}, 5) ==
        std::vector<uint32_t>{2, 3});  // a shrink frees GPUs for a start in the same round
}

TEST_CASE("total_samples is the work, or with --size-noise a per-job factor the same everywhere") {
  const Workload workload = SmallPolluxWorkload();
  SimulationOptions options = Exact("static-max", 16);
  // The fair objective ignores declared sizes (jct ranks jobs by them), so
  // with it the noise may change nothing but the declaration.
  options.objective = PlanObjectiveKind::kFair;
  const SimulationResult exact = MustSimulate(workload, options);
  for (const JobOutcome& job : exact.jobs) CHECK(double(job.total_samples) == job.work_samples);
  options.size_noise = 0.5;
  const SimulationResult noisy = MustSimulate(workload, options);
  options.policy = "fifo";
  const SimulationResult fifo = MustSimulate(workload, options);
  options.seed = 2;
  const SimulationResult other_seed = MustSimulate(workload, options);
  size_t differs = 0, seed_differs = 0;
  for (size_t i = 0; i < exact.jobs.size(); ++i) {
    differs += noisy.jobs[i].total_samples != exact.jobs[i].total_samples;
    seed_differs += other_seed.jobs[i].total_samples != fifo.jobs[i].total_samples;
    CHECK(fifo.jobs[i].total_samples == noisy.jobs[i].total_samples);
    // Only the declaration changes: the jobs train as before.
    CHECK(noisy.jobs[i].work_samples == exact.jobs[i].work_samples);
    CHECK(noisy.jobs[i].finish_seconds == exact.jobs[i].finish_seconds);
  }
  CHECK(differs == exact.jobs.size());
  CHECK(seed_differs == exact.jobs.size());
  options.size_noise = -1;
  CHECK(Simulate(workload, options).status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("step numbers run on across resizes and suspensions, so the engine sees the progress") {
  // kLoneLinearJob under static-max grows from 4 to 8 at 100 s; under
  // tiresias, "long" is preempted at 7200 and resumes at the same size (the
  // same pod names) at 7300. Each step number is sent once per job, so
  // nothing is dropped as a resend, and the engine's progress at the end is
  // the work less the last interval's (never sent) and a step at each end.
  SimulationOptions options = Exact("static-max", 4);
  options.capacity_changes = {{100, 8}};
  const SimulationResult grown = MustSimulate(MustParse(kLoneLinearJob), options);
  CHECK(grown.samples_duplicate == 0);
  const JobOutcome& solo = Job(grown, "solo");
  CHECK(solo.engine_samples_processed <= solo.work_samples);
  CHECK(solo.engine_samples_processed >= solo.work_samples - (30 + 2) * 8 * 32);
  const SimulationResult r =
      MustSimulate(MustParse(LinearJob("long", 0, 8, 10000) + LinearJob("short", 3600, 4, 100)),
                   Exact("tiresias", 8));
  REQUIRE(Job(r, "long").resumes == 1);
  CHECK(r.samples_duplicate == 0);
  const JobOutcome& lng = Job(r, "long");
  CHECK(lng.engine_samples_processed <= lng.work_samples);
  CHECK(lng.engine_samples_processed >= lng.work_samples - (30 + 4) * 8 * 32);
}

TEST_CASE("the sweep averages over seeds and labels each policy's kind") {
  SweepInput in;
  in.workloads = {"w1", "w2"};
  in.policies = {"planner", "kubedl", "fifo"};
  in.seeds = {1, 2};
  in.baseline = "planner";
  for (size_t w = 0; w < 2; ++w) {
    for (size_t s = 0; s < 2; ++s) {
      for (size_t p = 0; p < 3; ++p) {
        PolicySummary summary;
        summary.policy = in.policies[p];
        summary.jobs = summary.finished = 10;
        summary.avg_jct_s = 100.0 * (p + 1) + 10.0 * w + s;  // seeds: +0, +1
        summary.restarts = static_cast<uint64_t>(p * 10 + s * 10);
        in.summaries.push_back(summary);
      }
    }
  }
  const SweepTables t = MakeSweepTables(in);
  CHECK(t.cells[1][2].avg_jct_s == Approx(310.5));
  CHECK(t.cells[0][1].restarts_per_job == Approx(1.5));
  CHECK(t.overall[0].avg_jct_s == Approx(105.5));
  CHECK(t.overall[2].restarts_per_job == Approx(2.5));
  CHECK_THAT(t.markdown, Catch::Matchers::Contains("| fifo | cluster-native | 306 | 2.90 |"));
  CHECK_THAT(t.markdown, Catch::Matchers::Contains("| kubedl | planner-wrapped |"));
  CHECK_THAT(t.csv, Catch::Matchers::StartsWith("workload,policy,jobs,"));
  CHECK_THAT(t.csv, Catch::Matchers::Contains("w2,fifo,10,10,311.000,"));
  CHECK_THAT(t.csv, Catch::Matchers::Contains(",2,cluster-native,3.000000\n"));
  CHECK_THAT(t.means_csv, Catch::Matchers::Contains("mean,fifo,cluster-native,2,305.500,"));
  CHECK(ParseSeeds("1, 2,3").value() == std::vector<uint64_t>{1, 2, 3});
  CHECK(!ParseSeeds("1,x").ok());
}

TEST_CASE("a replica of 8 GPUs does not fit on two nodes of 4 free GPUs each") {
  NodePool pool(8, 2);
  pool.SetForeign(0, 4);
  pool.SetForeign(1, 4);
  CHECK(!pool.BestFit(8).has_value());
  REQUIRE(pool.BestFit(4).has_value());
  // The report a node-aware adapter sends: 8 GPUs free, but no 8-GPU slot.
  const std::vector<uint32_t> classes = {8, 1, 4, 4};
  const CapacityReport report = pool.Report(classes);
  CHECK(report.total_gpus == 8);
  CHECK(report.slots == std::vector<ReplicaSlots>{{1, 8}, {4, 2}, {8, 0}});
  // Placed replicas of Rescale's own jobs still count as free in the report.
  pool.Take(0, 4);
  CHECK(pool.Idle(0) == 0);
  CHECK(pool.Report(classes) == report);
}

TEST_CASE("best fit takes the fullest node that holds the replica and keeps whole nodes free") {
  NodePool pool(8, 3);
  pool.SetForeign(0, 2);  // 6 idle
  pool.SetForeign(2, 5);  // 3 idle; node 1 is empty
  CHECK(pool.BestFit(1) == 2u);
  CHECK(pool.BestFit(4) == 0u);
  CHECK(pool.BestFit(8) == 1u);
  pool.Take(1, 8);
  CHECK(!pool.BestFit(8).has_value());
  pool.SetForeign(0, 7);  // foreign pods came first: node 0 has 6 placed on 1 free
  pool.Take(0, 6);
  CHECK(pool.Overcommit(0) == 5);
  pool.SetActiveNodes(1);  // nodes 1 and 2 lost
  CHECK(pool.ForeignGpus() == 7);
  CHECK(pool.Report(std::vector<uint32_t>{1}).total_gpus == 1);
}

TEST_CASE("the foreign load is the same for a seed and another for another seed with mean F") {
  auto series = [](uint64_t seed) {
    ForeignLoad load(seed, 8, 8, 0.25, 1800);
    std::vector<uint32_t> gpus = load.initial();
    double total = std::accumulate(gpus.begin(), gpus.end(), 0.0);
    double last = 0;
    for (int i = 0; i < 2000; ++i) {
      const ForeignChange change = *load.Peek();
      CHECK(change.at_seconds >= last);
      last = change.at_seconds;
      gpus.push_back(change.gpus);
      total += change.gpus;
      load.Pop();
    }
    return std::pair(gpus, total / double(gpus.size()) / 8);
  };
  CHECK(series(1).first == series(1).first);
  CHECK(series(1).first != series(2).first);
  CHECK(series(1).second == Approx(0.25).margin(0.02));
  CHECK(!ForeignLoad(1, 8, 8, 0, 1800).Peek().has_value());
}

// Jobs of 1-, 4- and 8-GPU replicas (`linear`: 32 samples/s per replica),
// arriving every 5 minutes for an hour, on 4 nodes of 8 GPUs with a quarter
// of the GPUs foreign.
Workload MixedReplicaWorkload() {
  std::string text;
  const uint32_t classes[] = {1, 4, 8};
  for (int i = 0; i < 12; ++i) {
    const uint32_t g = classes[i % 3];
    absl::StrAppendFormat(&text,
                          R"({"id": "j%d", "arrival_seconds": %d, "profile": "linear", )"
                          R"("samples": %d, "min_replicas": 1, "max_replicas": %d, )"
                          R"("gpus_per_replica": %d, "restart_cost_seconds": 30})"
                          "\n",
                          i, 300 * i, 32 * 3600 * 8 / g, 16 / g, g);
  }
  return MustParse(text);
}

SimulationOptions OnNodes(bool node_aware) {
  SimulationOptions options = Exact("planner", 32);
  options.node_gpus = 8;
  options.foreign_load = 0.25;
  options.foreign_interval_seconds = 900;
  options.node_aware = node_aware;
  return options;
}

TEST_CASE("told the nodes the planner leaves almost no pod Pending and never plans past them") {
  const Workload workload = MixedReplicaWorkload();
  const SimulationResult unaware = MustSimulate(workload, OnNodes(false));
  const SimulationResult aware = MustSimulate(workload, OnNodes(true));
  const PolicySummary u = Summarize(unaware), a = Summarize(aware);
  CHECK(u.finished == u.jobs);
  CHECK(a.finished == a.jobs);
  INFO("pending GPU-hours: unaware " << u.pending_gpu_hours << ", aware " << a.pending_gpu_hours);
  CHECK(u.pending_gpu_hours > 1);
  CHECK(a.pending_gpu_hours <= 0.1 * u.pending_gpu_hours);
  // Both saw the same foreign load.
  CHECK(u.foreign_gpu_hours > 0);
  CHECK(aware.timeline.front().foreign_gpus == unaware.timeline.front().foreign_gpus);
  // Unaware, the planner runs more GPUs than the foreign pods leave (so pods
  // pend); aware, never: the simulator would have ended the run with
  // INTERNAL, and the timeline agrees.
  bool overplanned = false;
  for (const TimelinePoint& p : unaware.timeline) {
    overplanned |= p.allocated_gpus + p.pending_gpus > p.capacity_gpus - p.foreign_gpus;
  }
  CHECK(overplanned);
  for (const TimelinePoint& p : aware.timeline) {
    REQUIRE(p.allocated_gpus + p.pending_gpus <= p.capacity_gpus - p.foreign_gpus);
  }
  // The same run twice gives the same bytes.
  CHECK(JobsCsv({aware}) == JobsCsv({MustSimulate(workload, OnNodes(true))}));
}

TEST_CASE("a job with a Pending pod does not train until its gang is whole") {
  // One node of 8 GPUs, 4 of them foreign from the start (a seed found
  // below); static-max runs 2 replicas of 4 GPUs, one of which cannot be
  // placed while the foreign pods stay.
  const Workload workload = MustParse(
      R"({"id": "pair", "arrival_seconds": 0, "profile": "linear", "samples": 64000,)"
      R"( "min_replicas": 2, "max_replicas": 2, "gpus_per_replica": 4,)"
      R"( "restart_cost_seconds": 20})");
  SimulationOptions options = Exact("static-max", 8);
  options.node_gpus = 8;
  options.foreign_load = 0.5;
  options.foreign_interval_seconds = 3600;
  uint64_t seed = 1;
  // A seed whose first draw leaves room for one replica, whose first change
  // frees the node, and whose second comes after the job is done.
  for (;; ++seed) {
    REQUIRE(seed < 100000);
    ForeignLoad load(seed, 1, 8, 0.5, 3600);
    if (load.initial()[0] != 4 || load.Peek()->gpus != 0) continue;
    const double freed = load.Peek()->at_seconds;
    load.Pop();
    if (load.Peek()->at_seconds > freed + 2000) break;
  }
  options.seed = seed;
  ForeignLoad load(seed, 1, 8, 0.5, 3600);
  const double freed = load.Peek()->at_seconds;
  const SimulationResult r = MustSimulate(workload, options);
  const JobOutcome& job = Job(r, "pair");
  // From 0 to `freed` one 4-GPU pod pends and nothing trains; then the first
  // start (free: it never trained) and 64000 / 64 = 1000 s.
  CHECK(job.pending_gpu_seconds == Approx(4 * freed));
  CHECK(job.finish_seconds == Approx(freed + 1000));
  CHECK(job.gpu_seconds == Approx(4 * freed + 8 * 1000.0));
}

TEST_CASE("foreign pods evict a replica and the job pays a restart when it is placed again") {
  // One node of 8 GPUs and one job on a replica of 8, 3000 s of work. A
  // seed whose foreign load is 0 at first, takes GPUs of the node before
  // the job is done (evicting it), frees the node again, and then stays
  // away until the job is done.
  const Workload workload = MustParse(
      R"({"id": "big", "arrival_seconds": 0, "profile": "linear", "samples": 96000,)"
      R"( "min_replicas": 1, "max_replicas": 1, "gpus_per_replica": 8,)"
      R"( "restart_cost_seconds": 20})");
  double taken = 0, freed = 0;
  uint64_t seed = 1;
  for (;; ++seed) {
    REQUIRE(seed < 100000);
    ForeignLoad load(seed, 1, 8, 0.1, 600);
    if (load.initial()[0] != 0 || load.Peek()->gpus == 0) continue;
    taken = load.Peek()->at_seconds;
    load.Pop();
    if (taken >= 3000 || load.Peek()->gpus != 0) continue;
    freed = load.Peek()->at_seconds;
    load.Pop();
    if (load.Peek()->at_seconds > freed + 20 + (3000 - taken) + 1) break;
  }
  SimulationOptions options = Exact("static-max", 8);
  options.node_gpus = 8;
  options.foreign_load = 0.1;
  options.foreign_interval_seconds = 600;
  options.seed = seed;
  const SimulationResult r = MustSimulate(workload, options);
  const JobOutcome& job = Job(r, "big");
  // Trains [0, taken), pends [taken, freed), restarts 20 s, trains the rest.
  CHECK(job.pending_gpu_seconds == Approx(8 * (freed - taken)));
  CHECK(job.finish_seconds == Approx(freed + 20 + (3000 - taken)));
  CHECK(job.restart_gpu_seconds == Approx(8 * 20.0));
  CHECK(job.gpu_seconds == Approx(8 * (taken + 20 + 3000 - taken)));
}

TEST_CASE("the node flags are checked and outputs have node columns only with nodes") {
  SimulationOptions options = Exact("planner", 12);
  options.node_gpus = 8;
  absl::StatusOr<SimulationResult> r = Simulate(MustParse(kLoneLinearJob), options);
  REQUIRE(r.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(r.status().message()), Catch::Matchers::Contains("--node-gpus 8"));
  SimulationOptions off = Exact("planner", 16);
  off.foreign_load = 0.25;
  CHECK_THAT(std::string(ValidateSimulationOptions(off).message()),
             Catch::Matchers::Contains("--node-gpus"));
  SimulationOptions full = OnNodes(true);
  full.foreign_load = 1;
  CHECK_THAT(std::string(ValidateSimulationOptions(full).message()),
             Catch::Matchers::Contains("--foreign-load"));
  // Off, the outputs have no node columns: files stay as before nodes.
  const SimulationResult plain = MustSimulate(MixedReplicaWorkload(), Exact("planner", 32));
  CHECK(SummaryCsv({Summarize(plain)}).find("pending") == std::string::npos);
  CHECK(TimelineCsv({plain}).find("foreign") == std::string::npos);
  const SimulationResult nodes = MustSimulate(MixedReplicaWorkload(), OnNodes(false));
  CHECK_THAT(SummaryCsv({Summarize(nodes)}),
             Catch::Matchers::Contains(",pending_gpu_hours,foreign_gpu_hours\n"));
  CHECK_THAT(JobsCsv({nodes}), Catch::Matchers::Contains(",pending_gpu_hours\n"));
}

TEST_CASE("generate puts jobs on replicas of 1 or 4 or 8 GPUs and changes nothing else") {
  GenerateOptions options;
  options.jobs = 60;
  options.seed = 3;
  const Workload plain = GenerateWorkload(options).value();
  options.gpus_per_replica_mix = {{1, 1}, {4, 1}, {8, 1}};
  const Workload mixed = GenerateWorkload(options).value();
  REQUIRE(mixed.jobs.size() == plain.jobs.size());
  std::map<uint32_t, int> per_class;
  for (size_t i = 0; i < plain.jobs.size(); ++i) {
    const JobDescription &a = plain.jobs[i], &b = mixed.jobs[i];
    const uint32_t g = b.gpus_per_replica;
    ++per_class[g];
    CHECK(a.id == b.id);
    CHECK(a.arrival_seconds == b.arrival_seconds);
    CHECK(b.requested_replicas == std::max(1u, (a.requested_replicas + g - 1) / g));
    CHECK(b.work_samples == Approx(a.work_samples / g));
  }
  CHECK(per_class.size() == 3);
  CHECK(ParseGpusPerReplicaMix("1=50, 4=30,8=20").value().size() == 3);
  CHECK_THAT(std::string(ParseGpusPerReplicaMix("0=5").status().message()),
             Catch::Matchers::Contains("GPUS >= 1"));
}

TEST_CASE("quantiles interpolate linearly between order statistics") {
  CHECK(Quantile({}, 0.5) == 0);
  CHECK(Quantile({3, 1, 2}, 0.5) == 2);
  CHECK(Quantile({1, 2, 3, 4}, 0.5) == 2.5);
  CHECK(Quantile({0, 100}, 0.99) == Approx(99));
}

}  // namespace
}  // namespace rescale::sim
