// rescale-sim run|sweep --cluster FILE|sia: the runs on a cluster of GPU
// types (typed_sim.h), their tables and files. Writes, into --out:
//   run:   typed.md (the table) and typed.csv (one row per policy);
//   sweep: typed_sweep.md (means over seeds per workload and over all
//          workloads) and typed_sweep.csv (one row per run).
#include <algorithm>
#include <atomic>
#include <filesystem>
#include <future>
#include <iostream>
#include <map>
#include <thread>
#include <variant>

#include "absl/strings/ascii.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "bench/sim/csv.h"
#include "bench/sim/run_flags.h"
#include "bench/sim/sweep.h"
#include "bench/sim/typed_sim.h"
#include "spdlog/spdlog.h"

namespace rescale::sim {
namespace {

constexpr int kExitRunFailed = 1;
constexpr int kExitUsage = 2;

struct TypedSetup {
  TypedCluster cluster;
  std::vector<std::string> policies;
  std::vector<uint64_t> seeds;
};

std::optional<TypedSetup> Prepare(const RunFlags& f) {
  TypedSetup setup;
  absl::StatusOr<TypedCluster> cluster = LoadTypedCluster(f.cluster);
  if (!cluster.ok()) {
    std::cerr << "rescale-sim: --cluster: " << cluster.status().message() << "\n";
    return std::nullopt;
  }
  setup.cluster = *std::move(cluster);
  const std::vector<std::string> known = TypedPolicies();
  if (f.policies.empty()) {
    setup.policies = known;
  } else {
    for (absl::string_view name : absl::StrSplit(f.policies, ',', absl::SkipWhitespace()))
      setup.policies.emplace_back(absl::StripAsciiWhitespace(name));
  }
  for (const std::string& p : setup.policies) {
    if (std::find(known.begin(), known.end(), p) == known.end()) {
      std::cerr << "rescale-sim: --policies: \"" << p
                << "\" does not run with --cluster (known: " << absl::StrJoin(known, ", ") << ")\n";
      return std::nullopt;
    }
  }
  setup.seeds = {f.seed};
  if (!f.seeds.empty()) {
    absl::StatusOr<std::vector<uint64_t>> parsed = ParseSeeds(f.seeds);
    if (!parsed.ok()) {
      std::cerr << "rescale-sim: --seeds: " << parsed.status().message() << "\n";
      return std::nullopt;
    }
    setup.seeds = *parsed;
  }
  if (f.node_gpus != 0 || !f.queues.empty() || !f.capacity_changes.empty()) {
    std::cerr << "rescale-sim: --cluster runs without --node-gpus, --queues or "
                 "--capacity-changes (the cluster file says the nodes)\n";
    return std::nullopt;
  }
  return setup;
}

TypedSimOptions OptionsOf(const RunFlags& f, const TypedSetup& setup, const std::string& policy,
                          uint64_t seed) {
  TypedSimOptions o;
  o.policy = policy;
  o.cluster = setup.cluster;
  o.plan_interval_seconds = f.plan_interval;
  o.samples_per_tick = f.samples_per_tick;
  o.step_noise = f.noise;
  o.seed = seed;
  o.cooldown_seconds = f.cooldown;
  o.horizon_seconds = f.horizon;
  o.objective = *ParsePlanObjective(f.objective);  // checked by the flag
  o.max_seconds_after_last_arrival = f.max_days * 86400;
  return o;
}

// Runs every (workload, seed, policy) on up to `threads` threads (0 = one
// per core), results in the same order.
std::vector<absl::StatusOr<TypedSimResult>> RunAll(
    const std::vector<std::pair<const Workload*, TypedSimOptions>>& tasks, unsigned threads) {
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  std::vector<absl::StatusOr<TypedSimResult>> out(tasks.size(), absl::UnknownError("not run"));
  std::atomic<size_t> next{0};
  std::vector<std::thread> pool;
  for (unsigned k = 0; k < std::min<size_t>(threads, tasks.size()); ++k) {
    pool.emplace_back([&]() {
      for (size_t i = next++; i < tasks.size(); i = next++)
        out[i] = SimulateTyped(*tasks[i].first, tasks[i].second);
    });
  }
  for (std::thread& t : pool) t.join();
  return out;
}

std::string ClusterLine(const TypedCluster& c) {
  std::vector<std::string> parts;
  for (const SimGpuType& t : c.types)
    parts.push_back(absl::StrFormat("%d x %d %s", t.nodes, t.gpus_per_node, t.name));
  return absl::StrFormat("%s, %d GPUs: %s", c.description, c.total_gpus(),
                         absl::StrJoin(parts, ", "));
}

std::string Header(const TypedCluster& c, bool with_workload) {
  std::string h = with_workload ? "| workload | policy" : "| policy";
  h += " | avg JCT (h) | p99 JCT (h) | makespan (h) | restarts/job";
  for (const SimGpuType& t : c.types) h += " | GPU-h " + t.name;
  h += " | unfinished |\n|";
  const size_t columns = (with_workload ? 2 : 1) + 4 + c.types.size() + 1;
  for (size_t i = 0; i < columns; ++i) h += i < (with_workload ? 2u : 1u) ? "---|" : "---:|";
  return h + "\n";
}

std::string Row(const TypedSummary& s) {
  std::string row = absl::StrFormat(" | %.2f | %.2f | %.1f | %.2f", s.avg_jct_hours,
                                    s.p99_jct_hours, s.makespan_hours, s.restarts_per_job);
  for (double h : s.gpu_hours_by_type) row += absl::StrFormat(" | %.0f", h);
  return row + absl::StrFormat(" | %d |\n", s.unfinished);
}

// The mean of several runs' summaries (over seeds, or workloads too).
TypedSummary Mean(const std::vector<TypedSummary>& runs) {
  TypedSummary m = runs.front();
  for (size_t i = 1; i < runs.size(); ++i) {
    m.avg_jct_hours += runs[i].avg_jct_hours;
    m.p99_jct_hours += runs[i].p99_jct_hours;
    m.makespan_hours += runs[i].makespan_hours;
    m.restarts_per_job += runs[i].restarts_per_job;
    m.unfinished += runs[i].unfinished;
    for (size_t t = 0; t < m.gpu_hours_by_type.size(); ++t)
      m.gpu_hours_by_type[t] += runs[i].gpu_hours_by_type[t];
  }
  const double n = runs.size();
  m.avg_jct_hours /= n;
  m.p99_jct_hours /= n;
  m.makespan_hours /= n;
  m.restarts_per_job /= n;
  for (double& h : m.gpu_hours_by_type) h /= n;
  return m;
}

std::string CsvRow(const std::string& workload, uint64_t seed, const TypedSummary& s) {
  std::string row =
      absl::StrFormat("%s,%d,%s,%.4f,%.4f,%.3f,%.4f,%d", workload, seed, s.policy, s.avg_jct_hours,
                      s.p99_jct_hours, s.makespan_hours, s.restarts_per_job, s.unfinished);
  for (double h : s.gpu_hours_by_type) row += absl::StrFormat(",%.2f", h);
  return row + "\n";
}

std::string CsvHeader(const TypedCluster& c) {
  std::string h =
      "workload,seed,policy,avg_jct_hours,p99_jct_hours,makespan_hours,restarts_per_job,"
      "unfinished";
  for (const SimGpuType& t : c.types) h += ",gpu_hours_" + t.name;
  return h + "\n";
}

int Write(const std::string& dir, const std::string& name, const std::string& text) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (absl::Status s = WriteFile(dir + "/" + name, text); !s.ok()) {
    std::cerr << "rescale-sim: " << s.message() << "\n";
    return kExitRunFailed;
  }
  return 0;
}

// Loads the workloads and runs every (workload, seed, policy); per
// workload, per seed, per policy summaries, or the exit status.
std::variant<int, std::vector<std::vector<std::vector<TypedSummary>>>> RunGrid(
    const RunFlags& f, const TypedSetup& setup, const std::vector<std::string>& paths) {
  const PolluxMapping mapping{f.max_factor, f.max_cap};
  std::vector<Workload> workloads;
  for (const std::string& path : paths) {
    absl::StatusOr<Workload> w = LoadWorkload(path, mapping);
    if (!w.ok()) {
      std::cerr << "rescale-sim: " << w.status().message() << "\n";
      return kExitUsage;
    }
    workloads.push_back(*std::move(w));
  }
  std::vector<std::pair<const Workload*, TypedSimOptions>> tasks;
  for (const Workload& w : workloads)
    for (uint64_t seed : setup.seeds)
      for (const std::string& policy : setup.policies)
        tasks.emplace_back(&w, OptionsOf(f, setup, policy, seed));
  std::vector<absl::StatusOr<TypedSimResult>> results = RunAll(tasks, f.threads);
  std::vector<std::vector<std::vector<TypedSummary>>> grid(workloads.size());
  size_t i = 0;
  for (size_t w = 0; w < workloads.size(); ++w) {
    for (size_t s = 0; s < setup.seeds.size(); ++s) {
      grid[w].emplace_back();
      for (const std::string& policy : setup.policies) {
        absl::StatusOr<TypedSimResult>& r = results[i++];
        if (!r.ok()) {
          std::cerr << "rescale-sim: " << paths[w] << ", seed " << setup.seeds[s] << ", " << policy
                    << ": " << r.status() << "\n";
          return r.status().code() == absl::StatusCode::kInvalidArgument ? kExitUsage
                                                                         : kExitRunFailed;
        }
        grid[w][s].push_back(Summarize(*r));
      }
    }
  }
  return grid;
}

}  // namespace

int RunTyped(const RunFlags& f) {
  if (!f.verbose) spdlog::set_level(spdlog::level::err);
  std::optional<TypedSetup> setup = Prepare(f);
  if (!setup) return kExitUsage;
  setup->seeds = {f.seed};
  auto grid = RunGrid(f, *setup, {f.workload});
  if (const int* status = std::get_if<int>(&grid)) return *status;
  const auto& runs = std::get<1>(grid)[0][0];
  std::string md =
      absl::StrFormat("%s on %s, seed %d\n\n", f.workload, ClusterLine(setup->cluster), f.seed);
  md += Header(setup->cluster, false);
  std::string csv = CsvHeader(setup->cluster);
  for (const TypedSummary& s : runs) {
    md += "| " + s.policy + Row(s);
    csv += CsvRow(WorkloadTag(f.workload), f.seed, s);
  }
  std::cout << md;
  if (int st = Write(f.out, "typed.md", md) + Write(f.out, "typed.csv", csv); st != 0) return st;
  std::cout << "wrote " << f.out << "/typed.md and typed.csv\n";
  return 0;
}

int SweepTyped(const RunFlags& f) {
  if (!f.verbose) spdlog::set_level(spdlog::level::err);
  std::optional<TypedSetup> setup = Prepare(f);
  if (!setup) return kExitUsage;
  auto grid = RunGrid(f, *setup, f.workloads);
  if (const int* status = std::get_if<int>(&grid)) return *status;
  const auto& runs = std::get<1>(grid);
  std::string md = absl::StrFormat("%s; seeds %s; means over seeds\n\n",
                                   ClusterLine(setup->cluster), absl::StrJoin(setup->seeds, ","));
  md += Header(setup->cluster, true);
  std::string csv = CsvHeader(setup->cluster);
  std::map<std::string, std::vector<TypedSummary>> all;
  for (size_t w = 0; w < runs.size(); ++w) {
    const std::string tag = WorkloadTag(f.workloads[w]);
    for (size_t p = 0; p < setup->policies.size(); ++p) {
      std::vector<TypedSummary> over_seeds;
      for (size_t s = 0; s < setup->seeds.size(); ++s) {
        over_seeds.push_back(runs[w][s][p]);
        all[setup->policies[p]].push_back(runs[w][s][p]);
        csv += CsvRow(tag, setup->seeds[s], runs[w][s][p]);
      }
      md += "| " + tag + " | " + setup->policies[p] + Row(Mean(over_seeds));
    }
  }
  for (const std::string& policy : setup->policies)
    md += "| **all** | " + policy + Row(Mean(all[policy]));
  std::cout << md;
  if (int st = Write(f.out, "typed_sweep.md", md) + Write(f.out, "typed_sweep.csv", csv); st != 0)
    return st;
  std::cout << "wrote " << f.out << "/typed_sweep.md and typed_sweep.csv\n";
  return 0;
}

}  // namespace rescale::sim
