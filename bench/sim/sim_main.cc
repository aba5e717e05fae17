// rescale-sim: the offline simulator of Rescale's scaling decisions.
//
//   rescale-sim run --workload FILE --capacity GPUS [--policies a,b,...]
//                   [--out DIR] [--seed S] [--baseline POLICY] ...
//       Simulates the workload once per policy (in parallel, one thread per
//       policy), prints a comparison table and writes CSVs, SVG plots and
//       report.md into DIR.
//   rescale-sim sweep --workloads FILE... --capacity GPUS [--seeds 1,2,3] [...]
//       The same for several workloads (e.g. the eight Pollux workloads) and
//       seeds, plus sweep.md / sweep.csv / sweep_means.csv with each policy's
//       kind, average JCT and restarts per job (means over seeds; sweep.h).
//   run/sweep ... --node-gpus 8 --foreign-load 0.25 --node-aware true|false
//       Nodes of 8 GPUs with foreign pods, each replica placed on one node;
//       pods that fit nowhere pend (pending GPU-hours are reported), and the
//       engine is told the nodes (SetCapacity slots) or only the total.
//   run/sweep ... --cluster sia|FILE
//       A cluster of GPU types (typed_sim.h): policies planner,
//       planner-typeblind, fifo and tiresias; typed.md / typed_sweep.md.
//   rescale-sim generate --rate JOBS_PER_HOUR --hours H --seed S --out FILE
//   rescale-sim generate --jobs N --hours H --seed S --out FILE
//       A synthetic workload following the Pollux recipe.
//   rescale-sim profiles [--name NAME] [--local-batch B]
//       The built-in profiles and their curves.
//   rescale-sim fit-sia [--data DIR]
//       Fits Pollux's model per (application, GPU type) to Sia's traces
//       (default: where SiaDataDirectory finds them) and prints the table
//       the built-in per-type profiles come from (sia_profiles.h).
//
// Exit status: 0 success, 1 a run failed, 2 bad usage (unknown policy,
// unreadable workload, bad flag). Workload formats, semantics and the
// definitions of every figure: bench/sim/README.md.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "bench/sim/baselines.h"
#include "bench/sim/csv.h"
#include "bench/sim/pollux_fit.h"
#include "bench/sim/pollux_traces.h"
#include "bench/sim/profiles.h"
#include "bench/sim/queue_report.h"
#include "bench/sim/report.h"
#include "bench/sim/run_flags.h"
#include "bench/sim/runner.h"
#include "bench/sim/sia_profiles.h"
#include "bench/sim/simulator.h"
#include "bench/sim/summary.h"
#include "bench/sim/sweep.h"
#include "bench/sim/workload.h"
#include "rescale/decision_engine.h"
#include "rescale/queues.h"
#include "rescale/read_file.h"
#include "spdlog/spdlog.h"

namespace rescale::sim {
namespace {

constexpr int kExitRunFailed = 1;
constexpr int kExitUsage = 2;

int Run(const RunFlags& f) {
  if (!f.cluster.empty()) return RunTyped(f);
  if (!f.verbose) spdlog::set_level(spdlog::level::err);
  std::optional<Prepared> prepared = PrepareRun(f);
  if (!prepared) return kExitUsage;
  const PolluxMapping mapping{f.max_factor, f.max_cap};
  absl::StatusOr<Workload> workload = LoadWorkload(f.workload, mapping);
  if (!workload.ok()) {
    std::cerr << "rescale-sim: " << workload.status().message() << "\n";
    return kExitUsage;
  }
  std::optional<uint32_t> capacity = CapacityFor(f, *workload, f.workload);
  if (!capacity) return kExitUsage;
  std::vector<SimulationTask> tasks;
  for (const std::string& policy : prepared->policies) {
    tasks.push_back({&*workload, OptionsFor(f, *workload, *prepared, policy, *capacity)});
  }
  const auto started = std::chrono::steady_clock::now();
  std::vector<absl::StatusOr<SimulationResult>> outcomes =
      RunSimulations(std::move(tasks), {.threads = f.threads, .progress = !f.no_progress});
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::vector<SimulationResult> results;
  for (size_t i = 0; i < outcomes.size(); ++i) {
    if (!outcomes[i].ok()) {
      std::cerr << "rescale-sim: policy " << prepared->policies[i] << ": " << outcomes[i].status()
                << "\n";
      return outcomes[i].status().code() == absl::StatusCode::kInvalidArgument ? kExitUsage
                                                                               : kExitRunFailed;
    }
    results.push_back(*std::move(outcomes[i]));
  }
  for (const SimulationResult& r : results) {
    if (r.unsettled_events > 0) {
      std::cerr << absl::StrFormat(
          "rescale-sim: note: %s: the plan kept changing after %d events\n", r.policy,
          r.unsettled_events);
    }
  }
  const RunDescription run = DescribeRun(f, f.workload, *workload, *prepared, *capacity, f.seed);
  std::vector<PolicySummary> summaries;
  for (const SimulationResult& r : results) summaries.push_back(Summarize(r));
  std::cout << absl::StrFormat("%s: %d jobs on %d GPUs, seed %d; (x) = ratio to %s\n", run.workload,
                               run.jobs, run.capacity_gpus, run.seed, run.baseline);
  std::cout << ComparisonTable(summaries, run.baseline, /*markdown=*/false);
  for (const SimulationResult& r : results) {
    if (prepared->queues.empty()) break;
    std::cout << "\n"
              << r.policy << ", per queue:\n"
              << QueueTable(QueueOutcomes(r, prepared->queues));
  }
  if (absl::Status s = WriteRunReport(f.out, run, results); !s.ok()) {
    std::cerr << "rescale-sim: " << s.message() << "\n";
    return kExitRunFailed;
  }
  std::cout << "wrote " << f.out << "/report.md (and summary.csv, jobs.csv, timeline.csv, SVGs)\n";
  std::cerr << absl::StrFormat("simulated %d policies in %.1f s wall\n", results.size(), wall);
  return 0;
}

int Sweep(const RunFlags& f) {
  if (!f.cluster.empty()) return SweepTyped(f);
  if (!f.verbose) spdlog::set_level(spdlog::level::err);
  std::optional<Prepared> prepared = PrepareRun(f);
  if (!prepared) return kExitUsage;
  std::vector<uint64_t> seeds = {f.seed};
  if (!f.seeds.empty()) {
    absl::StatusOr<std::vector<uint64_t>> parsed = ParseSeeds(f.seeds);
    if (!parsed.ok()) {
      std::cerr << "rescale-sim: --seeds: " << parsed.status().message() << "\n";
      return kExitUsage;
    }
    seeds = *parsed;
  }
  const PolluxMapping mapping{f.max_factor, f.max_cap};
  std::vector<Workload> workloads;
  std::vector<uint32_t> capacities;
  for (const std::string& path : f.workloads) {
    absl::StatusOr<Workload> workload = LoadWorkload(path, mapping);
    if (!workload.ok()) {
      std::cerr << "rescale-sim: " << workload.status().message() << "\n";
      return kExitUsage;
    }
    std::optional<uint32_t> capacity = CapacityFor(f, *workload, path);
    if (!capacity) return kExitUsage;
    workloads.push_back(*std::move(workload));
    capacities.push_back(*capacity);
  }
  // Tasks ordered workload, seed, policy: the layout SweepInput expects.
  std::vector<SimulationTask> tasks;
  for (size_t w = 0; w < workloads.size(); ++w) {
    for (uint64_t seed : seeds) {
      for (const std::string& policy : prepared->policies) {
        SimulationTask task{&workloads[w],
                            OptionsFor(f, workloads[w], *prepared, policy, capacities[w])};
        task.options.seed = seed;
        tasks.push_back(std::move(task));
      }
    }
  }
  const auto started = std::chrono::steady_clock::now();
  std::vector<absl::StatusOr<SimulationResult>> outcomes =
      RunSimulations(std::move(tasks), {.threads = f.threads, .progress = !f.no_progress});
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  const size_t per = prepared->policies.size();
  SweepInput input;
  input.policies = prepared->policies;
  input.seeds = seeds;
  input.baseline = prepared->baseline;
  for (size_t w = 0; w < workloads.size(); ++w) {
    input.workloads.push_back(WorkloadTag(f.workloads[w]));
    for (size_t s = 0; s < seeds.size(); ++s) {
      std::vector<SimulationResult> results;
      for (size_t p = 0; p < per; ++p) {
        auto& outcome = outcomes[(w * seeds.size() + s) * per + p];
        if (!outcome.ok()) {
          std::cerr << "rescale-sim: " << f.workloads[w] << ", seed " << seeds[s] << ", policy "
                    << prepared->policies[p] << ": " << outcome.status() << "\n";
          return kExitRunFailed;
        }
        results.push_back(*std::move(outcome));
      }
      const RunDescription run =
          DescribeRun(f, f.workloads[w], workloads[w], *prepared, capacities[w], seeds[s]);
      std::string dir = f.out + "/" + input.workloads.back();
      if (seeds.size() > 1) dir += absl::StrFormat("/seed-%d", seeds[s]);
      if (absl::Status st = WriteRunReport(dir, run, results); !st.ok()) {
        std::cerr << "rescale-sim: " << st.message() << "\n";
        return kExitRunFailed;
      }
      for (const SimulationResult& r : results) {
        input.summaries.push_back(Summarize(r));
        if (r.unsettled_events > 0) {
          std::cerr << absl::StrFormat(
              "rescale-sim: note: %s, seed %d, %s: the plan kept changing after %d events\n",
              f.workloads[w], seeds[s], r.policy, r.unsettled_events);
        }
      }
    }
  }
  const SweepTables tables = MakeSweepTables(input);
  std::error_code error;
  std::filesystem::create_directories(f.out, error);
  for (const auto& [name, contents] :
       {std::pair<std::string, const std::string*>{"sweep.csv", &tables.csv},
        {"sweep_means.csv", &tables.means_csv},
        {"sweep.md", &tables.markdown}}) {
    if (absl::Status st = WriteFile(f.out + "/" + name, *contents); !st.ok()) {
      std::cerr << "rescale-sim: " << st.message() << "\n";
      return kExitRunFailed;
    }
  }
  std::cout << tables.markdown;
  std::cerr << absl::StrFormat("simulated %d runs in %.1f s wall\n", outcomes.size(), wall);
  return 0;
}

struct GenerateFlags {
  double rate = 20;
  int jobs = 0;
  double hours = 8;
  uint64_t seed = 1;
  std::string mix;
  std::string gpus_per_replica;
  std::string out = "-";
  int64_t capacity = -1;
  double max_factor = 4;
  uint32_t max_cap = 64;
};

int Generate(const GenerateFlags& f) {
  GenerateOptions options;
  options.jobs_per_hour = f.rate;
  options.jobs = f.jobs;
  options.hours = f.hours;
  options.seed = f.seed;
  options.mapping = {f.max_factor, f.max_cap};
  if (!f.mix.empty()) {
    absl::StatusOr<std::vector<std::pair<std::string, double>>> mix = ParseMix(f.mix);
    if (!mix.ok()) {
      std::cerr << "rescale-sim: --mix: " << mix.status().message() << "\n";
      return kExitUsage;
    }
    options.mix = *mix;
  }
  if (!f.gpus_per_replica.empty()) {
    absl::StatusOr<std::vector<std::pair<uint32_t, double>>> classes =
        ParseGpusPerReplicaMix(f.gpus_per_replica);
    if (!classes.ok()) {
      std::cerr << "rescale-sim: --gpus-per-replica: " << classes.status().message() << "\n";
      return kExitUsage;
    }
    options.gpus_per_replica_mix = *classes;
  }
  absl::StatusOr<Workload> workload = GenerateWorkload(options);
  if (!workload.ok()) {
    std::cerr << "rescale-sim: " << workload.status().message() << "\n";
    return kExitUsage;
  }
  if (f.capacity >= 0) workload->capacity_gpus = static_cast<uint32_t>(f.capacity);
  const bool csv = f.out.size() > 4 && f.out.substr(f.out.size() - 4) == ".csv";
  const std::string text = csv ? WorkloadToCsv(*workload) : WorkloadToJsonl(*workload);
  if (csv && workload->capacity_gpus) {
    std::cerr << "rescale-sim: note: CSV workloads carry no capacity; pass --capacity to run\n";
  }
  if (f.out == "-") {
    std::cout << text;
  } else if (absl::Status s = WriteFile(f.out, text); !s.ok()) {
    std::cerr << "rescale-sim: " << s.message() << "\n";
    return kExitRunFailed;
  } else {
    std::cerr << absl::StrFormat("wrote %d jobs to %s\n", workload->jobs.size(), f.out);
  }
  return 0;
}

int FitSia(std::string dir) {
  if (dir.empty()) dir = SiaDataDirectory().value_or("");
  if (dir.empty()) {
    std::cerr << "no Sia data found: pass --data DIR or set RESCALE_SIA_DATA\n";
    return kExitUsage;
  }
  absl::StatusOr<std::string> report = FitSiaProfiles(dir);
  if (!report.ok()) {
    std::cerr << report.status().message() << "\n";
    return kExitUsage;
  }
  std::cout << *report;
  return 0;
}

int Profiles(const std::string& name, int64_t local_batch) {
  for (const BuiltinProfile& p : BuiltinProfiles()) {
    if (!name.empty() && p.name != name) continue;
    const uint32_t batch = local_batch > 0 ? RoundToMeasuredLocalBatch(p.name, double(local_batch))
                                           : p.default_local_batch;
    std::cout << absl::StrFormat("%s: %s\n  local batch %d", p.name, p.description, batch);
    if (p.dataset_samples > 0) {
      std::cout << absl::StrFormat(", %.0f samples per epoch, %g epochs (Pollux)",
                                   p.dataset_samples, p.pollux_epochs);
    }
    std::cout << absl::StrFormat(", restart cost %g s\n", p.restart_cost_seconds);
    absl::StatusOr<ProfileSpec> spec = ParseProfile(p.name);
    absl::StatusOr<JobCurve> curve = MakeJobCurve(*spec, batch, 64);
    if (!curve.ok()) {
      std::cerr << "rescale-sim: " << curve.status().message() << "\n";
      return kExitRunFailed;
    }
    std::cout << "  replicas  step_s     samples/s   efficiency\n";
    for (uint32_t n : {1u, 2u, 4u, 8u, 12u, 16u, 24u, 32u, 48u, 64u}) {
      std::cout << absl::StrFormat("  %8d  %-9.4f  %-10.1f  %.2f\n", n, curve->StepSeconds(n),
                                   curve->SamplesPerSecond(n),
                                   curve->SamplesPerSecond(n) / (n * curve->SamplesPerSecond(1)));
    }
  }
  if (!name.empty() && FindBuiltinProfile(name) == nullptr) {
    std::cerr << "rescale-sim: no built-in profile \"" << name << "\"\n";
    return kExitUsage;
  }
  return 0;
}

int Main(int argc, char** argv) {
  CLI::App app{"rescale-sim: simulate Rescale's scaling policies on a workload, offline"};
  app.require_subcommand(1);

  RunFlags run_flags;
  CLI::App* run = app.add_subcommand("run", "simulate one workload under each policy and compare");
  run->add_option("--workload", run_flags.workload,
                  "workload file (.jsonl, .csv, or a Pollux workload CSV)")
      ->required();
  AddRunFlags(run, run_flags);

  RunFlags sweep_flags;
  CLI::App* sweep = app.add_subcommand("sweep", "run several workloads and tabulate average JCT");
  sweep->add_option("--workloads", sweep_flags.workloads, "workload files")->required();
  sweep->add_option("--seeds", sweep_flags.seeds,
                    "comma-separated seeds, each run in turn; figures are means over them "
                    "(default: --seed)");
  AddRunFlags(sweep, sweep_flags);

  GenerateFlags gen_flags;
  CLI::App* generate = app.add_subcommand("generate", "write a synthetic workload (Pollux recipe)");
  generate->add_option("--rate", gen_flags.rate, "arrivals per hour (Poisson)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  generate
      ->add_option(
          "--jobs", gen_flags.jobs,
          "exactly this many jobs over --hours (Poisson given the count); overrides --rate")
      ->check(CLI::NonNegativeNumber);
  generate->add_option("--hours", gen_flags.hours, "span of arrivals, hours")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  generate->add_option("--seed", gen_flags.seed, "random seed")->capture_default_str();
  generate->add_option(
      "--mix", gen_flags.mix,
      "application weights, e.g. ncf=39,cifar10=39,deepspeech2=8.7,bert=6.7,yolov3=4.6,"
      "imagenet=2 (the default)");
  generate->add_option(
      "--gpus-per-replica", gen_flags.gpus_per_replica,
      "GPUs per replica by weight, e.g. 1=50,4=30,8=20: a job of class g has its replicas and "
      "work divided by g (default: 1 GPU each)");
  generate->add_option("--capacity", gen_flags.capacity,
                       "cluster GPUs to record in a JSONL workload");
  generate->add_option("--out", gen_flags.out, "file (.jsonl or .csv; - = stdout as JSONL)")
      ->capture_default_str();
  generate
      ->add_option("--pollux-max-factor", gen_flags.max_factor,
                   "max_replicas = factor x submitted size ...")
      ->capture_default_str();
  generate->add_option("--pollux-max-cap", gen_flags.max_cap, "... capped at this")
      ->capture_default_str();

  std::string profile_name;
  int64_t profile_batch = 0;
  CLI::App* profiles =
      app.add_subcommand("profiles", "list the built-in profiles and their curves");
  profiles->add_option("--name", profile_name, "only this profile");
  profiles->add_option("--local-batch", profile_batch,
                       "local batch (measured ones: rounded to the nearest measured)");

  std::string sia_dir;
  CLI::App* fit_sia = app.add_subcommand(
      "fit-sia", "fit Pollux's model per application and GPU type to Sia's traces");
  fit_sia->add_option("--data", sia_dir, "Sia's data directory (holding traces/)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : kExitUsage;
  }
  if (run->parsed()) return Run(run_flags);
  if (sweep->parsed()) return Sweep(sweep_flags);
  if (generate->parsed()) return Generate(gen_flags);
  if (profiles->parsed()) return Profiles(profile_name, profile_batch);
  if (fit_sia->parsed()) return FitSia(sia_dir);
  return kExitUsage;
}

}  // namespace
}  // namespace rescale::sim

int main(int argc, char** argv) { return rescale::sim::Main(argc, argv); }
