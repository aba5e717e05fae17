// Tables, CSVs, SVG plots and report.md (see report.h).
#include "bench/sim/report.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "bench/sim/baselines.h"
#include "bench/sim/csv.h"
#include "bench/sim/svg.h"

namespace rescale::sim {
namespace {

// Resolution of the time-binned plots: enough for a page, small files.
constexpr int kTimeBins = 600;

std::string Seconds(double s) { return std::isnan(s) ? "" : absl::StrFormat("%.3f", s); }

std::string Ratio(double value, double base) {
  if (!(base > 0)) return "-";
  return absl::StrFormat("%.2f", value / base);
}

const PolicySummary* FindSummary(const std::vector<PolicySummary>& summaries,
                                 const std::string& policy) {
  for (const PolicySummary& s : summaries) {
    if (s.policy == policy) return &s;
  }
  return summaries.empty() ? nullptr : &summaries.front();
}

bool AnyNodes(const std::vector<PolicySummary>& summaries) {
  return std::any_of(summaries.begin(), summaries.end(),
                     [](const PolicySummary& s) { return s.nodes_modeled; });
}
bool AnyNodes(const std::vector<SimulationResult>& results) {
  return std::any_of(results.begin(), results.end(),
                     [](const SimulationResult& r) { return r.nodes_modeled; });
}

// Hours on plot axes: simulated spans run from minutes to weeks.
double Hours(double seconds) { return seconds / 3600; }

}  // namespace

std::string FileSafe(std::string_view name) {
  std::string out;
  for (char c : name) {
    out +=
        (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.') ? c : '_';
  }
  return out;
}

std::string ComparisonTable(const std::vector<PolicySummary>& summaries,
                            const std::string& baseline, bool markdown) {
  const PolicySummary* base = FindSummary(summaries, baseline);
  const bool nodes = AnyNodes(summaries);
  std::vector<std::string> header = {
      "policy",      "avg JCT s (x)", "p50 JCT s (x)", "p99 JCT s (x)", "makespan s (x)",
      "avg queue s", "util",          "eff util",      "rescales",      "suspensions",
      "restarts",    "GPU-h lost",    "finished",      "kind"};
  if (nodes) header.push_back("pending GPU-h");
  std::vector<std::vector<std::string>> rows;
  for (const PolicySummary& s : summaries) {
    auto with_ratio = [&](double v, double b) {
      return absl::StrFormat("%.0f (%s)", v, Ratio(v, b));
    };
    rows.push_back(
        {s.policy + (base != nullptr && s.policy == base->policy ? " *" : ""),
         with_ratio(s.avg_jct_s, base->avg_jct_s), with_ratio(s.p50_jct_s, base->p50_jct_s),
         with_ratio(s.p99_jct_s, base->p99_jct_s), with_ratio(s.makespan_s, base->makespan_s),
         absl::StrFormat("%.0f", s.avg_queue_s), absl::StrFormat("%.3f", s.utilization),
         absl::StrFormat("%.3f", s.effective_utilization), absl::StrFormat("%d", s.rescales),
         absl::StrFormat("%d", s.suspensions), absl::StrFormat("%d", s.restarts),
         absl::StrFormat("%.1f", s.restart_gpu_hours),
         absl::StrFormat("%d/%d%s", s.finished, s.jobs, s.stopped_early ? " (stopped)" : ""),
         std::string(KindName(KindOf(s.policy)))});
    if (nodes) rows.back().push_back(absl::StrFormat("%.1f", s.pending_gpu_hours));
  }
  std::string out;
  if (markdown) {
    out += "| " + absl::StrJoin(header, " | ") + " |\n|";
    for (size_t i = 0; i < header.size(); ++i) out += i == 0 ? "---|" : "---:|";
    out += "\n";
    for (const auto& row : rows) out += "| " + absl::StrJoin(row, " | ") + " |\n";
    return out;
  }
  std::vector<size_t> width(header.size());
  for (size_t c = 0; c < header.size(); ++c) {
    width[c] = header[c].size();
    for (const auto& row : rows) width[c] = std::max(width[c], row[c].size());
  }
  auto line = [&](const std::vector<std::string>& cells) {
    std::string l;
    for (size_t c = 0; c < cells.size(); ++c) {
      if (c == 0) {
        l += absl::StrFormat("%-*s", width[c], cells[c]);
      } else {
        l += absl::StrFormat("  %*s", width[c], cells[c]);
      }
    }
    return l + "\n";
  };
  out += line(header);
  for (const auto& row : rows) out += line(row);
  return out;
}

std::string SummaryCsv(const std::vector<PolicySummary>& summaries) {
  std::string out =
      "policy,jobs,finished,avg_jct_s,p50_jct_s,p99_jct_s,makespan_s,avg_queue_s,utilization,"
      "effective_utilization,rescales,suspensions,resumes,restarts,gpu_hours,restart_gpu_hours,"
      "samples_rejected,stopped_early";
  const bool nodes = AnyNodes(summaries);
  out += nodes ? ",pending_gpu_hours,foreign_gpu_hours\n" : "\n";
  for (const PolicySummary& s : summaries) {
    absl::StrAppendFormat(
        &out, "%s,%d,%d,%.3f,%.3f,%.3f,%.3f,%.3f,%.6f,%.6f,%d,%d,%d,%d,%.6f,%.6f,%d,%s",
        CsvField(s.policy), s.jobs, s.finished, s.avg_jct_s, s.p50_jct_s, s.p99_jct_s, s.makespan_s,
        s.avg_queue_s, s.utilization, s.effective_utilization, s.rescales, s.suspensions, s.resumes,
        s.restarts, s.gpu_hours, s.restart_gpu_hours, s.samples_rejected,
        s.stopped_early ? "true" : "false");
    if (nodes) absl::StrAppendFormat(&out, ",%.6f,%.6f", s.pending_gpu_hours, s.foreign_gpu_hours);
    out += "\n";
  }
  return out;
}

std::string JobsCsv(const std::vector<SimulationResult>& results) {
  std::string out =
      "policy,job,profile,arrival_s,first_start_s,finish_s,jct_s,queue_s,work_samples,done_samples,"
      "min_replicas,max_replicas,gpus_per_replica,peak_replicas,gpu_hours,restart_gpu_hours,"
      "rescales,"
      "suspensions,resumes,restarts,finished,requested_replicas,total_samples,"
      "engine_samples_processed";
  const bool nodes = AnyNodes(results);
  out += nodes ? ",pending_gpu_hours\n" : "\n";
  for (const SimulationResult& r : results) {
    for (const JobOutcome& j : r.jobs) {
      absl::StrAppendFormat(
          &out, "%s,%s,%s,%s,%s,%s,%s,%s,%.1f,%.1f,%d,%d,%d,%d,%.6f,%.6f,%d,%d,%d,%d,%s,%d,%d,%d",
          CsvField(r.policy), CsvField(j.id), CsvField(j.profile), Seconds(j.arrival_seconds),
          Seconds(j.first_start_seconds), Seconds(j.finish_seconds),
          j.finished() ? Seconds(j.jct_seconds()) : "",
          std::isnan(j.first_start_seconds) ? "" : Seconds(j.queue_seconds()), j.work_samples,
          j.done_samples, j.min_replicas, j.max_replicas, j.gpus_per_replica, j.peak_replicas,
          j.gpu_seconds / 3600, j.restart_gpu_seconds / 3600, j.rescales, j.suspensions, j.resumes,
          j.restarts(), j.finished() ? "true" : "false", j.requested_replicas, j.total_samples,
          j.engine_samples_processed);
      if (nodes) absl::StrAppendFormat(&out, ",%.6f", j.pending_gpu_seconds / 3600);
      out += "\n";
    }
  }
  return out;
}

std::string TimelineCsv(const std::vector<SimulationResult>& results) {
  std::string out =
      "policy,time_s,capacity_gpus,allocated_gpus,effective_gpus,running_jobs,waiting_jobs";
  const bool nodes = AnyNodes(results);
  out += nodes ? ",pending_gpus,foreign_gpus\n" : "\n";
  for (const SimulationResult& r : results) {
    for (const TimelinePoint& p : r.timeline) {
      absl::StrAppendFormat(&out, "%s,%s,%d,%d,%d,%d,%d", CsvField(r.policy),
                            Seconds(p.time_seconds), p.capacity_gpus, p.allocated_gpus,
                            p.effective_gpus, p.running_jobs, p.waiting_jobs);
      if (nodes) absl::StrAppendFormat(&out, ",%d,%d", p.pending_gpus, p.foreign_gpus);
      out += "\n";
    }
  }
  return out;
}

std::string AllocationsCsv(const std::vector<SimulationResult>& results) {
  std::string out = "policy,time_s,job,replicas,gpus\n";
  for (const SimulationResult& r : results) {
    for (const AllocationChange& a : r.allocations) {
      absl::StrAppendFormat(&out, "%s,%s,%s,%d,%d\n", CsvField(r.policy), Seconds(a.time_seconds),
                            CsvField(r.jobs[a.job].id), a.replicas, a.gpus);
    }
  }
  return out;
}

std::string JctCdfSvg(const std::vector<SimulationResult>& results) {
  double lo = INFINITY, hi = 0;
  std::vector<std::vector<double>> jcts;
  for (const SimulationResult& r : results) {
    std::vector<double> v;
    for (const JobOutcome& j : r.jobs) {
      if (j.finished()) v.push_back(std::max(Hours(j.jct_seconds()), 1e-4));
    }
    std::sort(v.begin(), v.end());
    if (!v.empty()) {
      lo = std::min(lo, v.front());
      hi = std::max(hi, v.back());
    }
    jcts.push_back(std::move(v));
  }
  if (!(hi > 0)) lo = 0.01, hi = 1;
  SvgChart chart({.title = "Job completion time CDF",
                  .x_label = "JCT (hours, log scale)",
                  .y_label = "fraction of jobs finished",
                  .log_x = true},
                 std::pow(10, std::floor(std::log10(lo))), std::pow(10, std::ceil(std::log10(hi))),
                 0, 1);
  for (size_t p = 0; p < results.size(); ++p) {
    const std::vector<double>& v = jcts[p];
    const double total = static_cast<double>(results[p].jobs.size());
    std::vector<std::pair<double, double>> points;
    for (size_t i = 0; i < v.size(); ++i) {
      points.emplace_back(v[i], i / total);
      points.emplace_back(v[i], (i + 1) / total);
    }
    chart.Line(points, PaletteColor(p));
    chart.LegendEntry(results[p].policy, std::string(PaletteColor(p)));
  }
  return chart.Render();
}

// Time-weighted mean of a step function (value_of each timeline point,
// held until the next) over kTimeBins equal bins of [start, end].
template <typename ValueOf>
std::vector<std::pair<double, double>> Binned(const std::vector<TimelinePoint>& timeline,
                                              double start, double end, ValueOf value_of) {
  const double bin = (end - start) / kTimeBins;
  std::vector<double> sums(kTimeBins, 0);
  for (size_t i = 0; i < timeline.size(); ++i) {
    const double from = timeline[i].time_seconds;
    const double to = i + 1 < timeline.size() ? timeline[i + 1].time_seconds : end;
    const double v = value_of(timeline[i]);
    for (int b = std::max(0, int((from - start) / bin)); b < kTimeBins; ++b) {
      const double b0 = start + b * bin, b1 = b0 + bin;
      if (b0 >= to) break;
      const double overlap = std::min(to, b1) - std::max(from, b0);
      if (overlap > 0) sums[b] += v * overlap;
    }
  }
  std::vector<std::pair<double, double>> points;
  for (int b = 0; b < kTimeBins; ++b)
    points.emplace_back(Hours(start + (b + 0.5) * bin), sums[b] / bin);
  return points;
}

std::string UtilizationSvg(const std::vector<SimulationResult>& results) {
  // One panel per policy, each over its own run: runs differ in length by
  // orders of magnitude (static-min), which one shared axis would hide.
  std::vector<SvgChart> panels;
  for (size_t p = 0; p < results.size(); ++p) {
    const SimulationResult& r = results[p];
    const double start = r.first_arrival_seconds;
    const double end = std::max(r.end_seconds, start + 1);
    uint32_t peak_capacity = 1;
    for (const TimelinePoint& t : r.timeline)
      peak_capacity = std::max(peak_capacity, t.capacity_gpus);
    const PolicySummary s = Summarize(r);
    SvgChart chart(
        {.width = 800,
         .height = 190,
         .title = absl::StrFormat("%s: GPUs over time (utilization %.2f, effective %.2f)", r.policy,
                                  s.utilization, s.effective_utilization),
         .x_label = p + 1 == results.size() ? "time since the first arrival (hours)" : "",
         .y_label = "GPUs",
         .legend_right = true},
        0, Hours(end - start), 0, peak_capacity * 1.05);
    auto shifted = [&](std::vector<std::pair<double, double>> points) {
      for (auto& [x, y] : points) x -= Hours(start);
      return points;
    };
    chart.Line(shifted(Binned(r.timeline, start, end,
                              [](const TimelinePoint& t) { return double(t.capacity_gpus); })),
               "#000000", 1.2, "6,4");
    chart.Line(shifted(Binned(r.timeline, start, end,
                              [](const TimelinePoint& t) { return double(t.allocated_gpus); })),
               PaletteColor(p));
    chart.Line(shifted(Binned(r.timeline, start, end,
                              [](const TimelinePoint& t) { return double(t.effective_gpus); })),
               "#666666", 1.0, "2,2");
    chart.LegendEntry("capacity", "#000000", "6,4");
    chart.LegendEntry("allocated", std::string(PaletteColor(p)));
    chart.LegendEntry("allocated, not restarting", "#666666", "2,2");
    panels.push_back(std::move(chart));
  }
  return StackVertically(panels);
}

std::string AllocationSvg(const SimulationResult& result) {
  const double start = result.first_arrival_seconds;
  const double end = std::max(result.end_seconds, start + 1);
  // GPUs of every job at each grid time (sample and hold of its changes).
  std::vector<double> times(kTimeBins + 1);
  for (int i = 0; i <= kTimeBins; ++i) times[i] = start + (end - start) * i / kTimeBins;
  std::map<uint32_t, std::vector<const AllocationChange*>> by_job;
  for (const AllocationChange& a : result.allocations) by_job[a.job].push_back(&a);
  std::vector<double> base(kTimeBins + 1, 0);
  uint32_t peak_capacity = 1;
  for (const TimelinePoint& p : result.timeline)
    peak_capacity = std::max(peak_capacity, p.capacity_gpus);
  SvgChart chart({.title = absl::StrFormat("GPUs per job over time, stacked (%s)", result.policy),
                  .x_label = "time (hours)",
                  .y_label = "GPUs"},
                 Hours(start), Hours(end), 0, peak_capacity * 1.05);
  for (const auto& [job, changes] : by_job) {
    std::vector<double> gpus(kTimeBins + 1, 0);
    size_t next = 0;
    double current = 0;
    int first = -1, last = -1;
    for (int i = 0; i <= kTimeBins; ++i) {
      while (next < changes.size() && changes[next]->time_seconds <= times[i])
        current = changes[next++]->gpus;
      gpus[i] = current;
      if (current > 0) {
        if (first < 0) first = i;
        last = i;
      }
    }
    if (first < 0) continue;  // never held GPUs at a grid time
    const int from = std::max(first - 1, 0), to = std::min(last + 1, kTimeBins);
    std::vector<std::pair<double, double>> polygon;
    for (int i = from; i <= to; ++i) polygon.emplace_back(Hours(times[i]), base[i] + gpus[i]);
    for (int i = to; i >= from; --i) polygon.emplace_back(Hours(times[i]), base[i]);
    chart.Area(polygon, PaletteColor(job));
    for (int i = 0; i <= kTimeBins; ++i) base[i] += gpus[i];
  }
  std::vector<std::pair<double, double>> capacity;
  for (size_t i = 0; i < result.timeline.size(); ++i) {
    const TimelinePoint& p = result.timeline[i];
    if (!capacity.empty()) capacity.emplace_back(Hours(p.time_seconds), capacity.back().second);
    capacity.emplace_back(Hours(p.time_seconds), p.capacity_gpus);
  }
  if (!capacity.empty()) capacity.emplace_back(Hours(end), capacity.back().second);
  chart.Line(capacity, "#000000", 1.2, "6,4");
  chart.LegendEntry("capacity", "#000000", "6,4");
  return chart.Render();
}

std::string ReportMarkdown(const RunDescription& run, const std::vector<PolicySummary>& summaries,
                           const std::vector<SimulationResult>& results) {
  std::string out = "# rescale-sim report\n\n";
  absl::StrAppendFormat(&out, "Workload `%s`: %d jobs. Cluster: %d GPUs", run.workload, run.jobs,
                        run.capacity_gpus);
  if (!run.capacity_changes.empty()) {
    std::vector<std::string> changes;
    for (const CapacityChange& c : run.capacity_changes) {
      changes.push_back(absl::StrFormat("%d GPUs at %.0f s", c.gpus, c.at_seconds));
    }
    out += ", then " + absl::StrJoin(changes, ", ");
  }
  if (run.node_gpus > 0) {
    absl::StrAppendFormat(&out,
                          ", nodes of %d GPUs, foreign load %.3g (changing every %.0f s on "
                          "average), the engine %s the nodes",
                          run.node_gpus, run.foreign_load, run.foreign_interval_seconds,
                          run.node_aware ? "told" : "not told");
  }
  out += run.efficiency ? ". Statistical efficiency on (measured applications progress by M x "
                          "EFF(M) samples at M0 per step, from the Pollux validation traces)"
                        : ". Statistical efficiency off (a larger batch is free)";
  absl::StrAppendFormat(
      &out,
      ". Seed %d, plan interval %.0f s, step noise sigma %.3g, declared-size noise sigma "
      "%.3g, %d samples per job per interval. Every engine policy is the real "
      "DecisionEngine under a virtual clock; cluster-native ones are simulated schedulers "
      "around it.\n\n",
      run.seed, run.plan_interval_seconds, run.step_noise, run.size_noise, run.samples_per_tick);
  out += "## Comparison\n\n";
  out += ComparisonTable(summaries, run.baseline, /*markdown=*/true);
  absl::StrAppendFormat(
      &out,
      "\nTimes in seconds; (x) is the ratio to the baseline, `%s` (marked *). JCT = "
      "finish - arrival over finished jobs; p50/p99 interpolate linearly; makespan = "
      "last completion - first arrival; queue = first start - arrival; util = "
      "allocated / available GPU-time, eff util excludes restarts; restarts = rescales "
      "+ resumes (each costs the job's restart_cost_seconds); GPU-h lost = GPU-hours "
      "held while restarting; kind: planner (Rescale's planner), planner-wrapped (a per-job "
      "policy fitted by the planner) or cluster-native (a scheduler as clusters run it). "
      "See bench/sim/README.md.\n\n",
      run.baseline);
  if (run.node_gpus > 0) {
    out +=
        "Pending GPU-h = GPUs requested by Pending pods (replicas that fit on no node) x the "
        "time they pended; a job with a Pending pod does not train. util counts placed GPUs "
        "over all GPUs, foreign ones included.\n\n";
  }
  out += "## Job completion times\n\n![JCT CDF](jct_cdf.svg)\n\n";
  out += "## Cluster allocation\n\n![Allocated GPUs over time](utilization.svg)\n\n";
  out += "## GPUs per job\n\n";
  for (const SimulationResult& r : results) {
    absl::StrAppendFormat(&out, "![%s](allocation-%s.svg)\n\n", r.policy, FileSafe(r.policy));
  }
  out +=
      "## Data\n\n`summary.csv` (per policy), `jobs.csv` (per job and policy), `timeline.csv` "
      "(cluster state after each change), `allocations.csv` (every change of a job's replicas).\n";
  return out;
}

absl::Status WriteRunReport(const std::string& dir, const RunDescription& run,
                            const std::vector<SimulationResult>& results) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error)
    return absl::InternalError(absl::StrFormat("cannot create %s: %s", dir, error.message()));
  std::vector<PolicySummary> summaries;
  for (const SimulationResult& r : results) summaries.push_back(Summarize(r));
  const std::vector<std::pair<std::string, std::string>> files = {
      {"summary.csv", SummaryCsv(summaries)},
      {"jobs.csv", JobsCsv(results)},
      {"timeline.csv", TimelineCsv(results)},
      {"allocations.csv", AllocationsCsv(results)},
      {"jct_cdf.svg", JctCdfSvg(results)},
      {"utilization.svg", UtilizationSvg(results)},
      {"report.md", ReportMarkdown(run, summaries, results)},
  };
  for (const auto& [name, contents] : files) {
    if (absl::Status s = WriteFile(dir + "/" + name, contents); !s.ok()) return s;
  }
  for (const SimulationResult& r : results) {
    if (absl::Status s =
            WriteFile(dir + "/allocation-" + FileSafe(r.policy) + ".svg", AllocationSvg(r));
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace rescale::sim
