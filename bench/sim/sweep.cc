// The sweep's means and tables (see sweep.h).
#include "bench/sim/sweep.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "bench/sim/baselines.h"
#include "bench/sim/csv.h"
#include "bench/sim/report.h"

namespace rescale::sim {
namespace {

double RestartsPerJob(const PolicySummary& s) {
  return s.jobs == 0 ? 0 : double(s.restarts) / double(s.jobs);
}

std::string Ratio(double value, double base) {
  return base > 0 ? absl::StrFormat("%.2f", value / base) : "-";
}

}  // namespace

SweepTables MakeSweepTables(const SweepInput& in) {
  const size_t workloads = in.workloads.size(), seeds = in.seeds.size(),
               policies = in.policies.size();
  SweepTables out;
  out.cells.assign(workloads, std::vector<SweepCell>(policies));
  out.overall.assign(policies, SweepCell{});
  for (size_t w = 0; w < workloads; ++w) {
    for (size_t p = 0; p < policies; ++p) {
      SweepCell& cell = out.cells[w][p];
      for (size_t s = 0; s < seeds; ++s) {
        const PolicySummary& summary = in.summaries[(w * seeds + s) * policies + p];
        cell.avg_jct_s += summary.avg_jct_s / double(seeds);
        cell.p99_jct_s += summary.p99_jct_s / double(seeds);
        cell.restarts_per_job += RestartsPerJob(summary) / double(seeds);
        cell.unfinished = cell.unfinished || summary.finished < summary.jobs;
      }
      SweepCell& all = out.overall[p];
      all.avg_jct_s += cell.avg_jct_s / double(workloads);
      all.p99_jct_s += cell.p99_jct_s / double(workloads);
      all.restarts_per_job += cell.restarts_per_job / double(workloads);
      all.unfinished = all.unfinished || cell.unfinished;
    }
  }
  const size_t base = static_cast<size_t>(
      std::find(in.policies.begin(), in.policies.end(), in.baseline) - in.policies.begin());
  const double base_jct = base < policies ? out.overall[base].avg_jct_s : 0;

  std::string& md = out.markdown;
  absl::StrAppendFormat(
      &md,
      "# rescale-sim sweep\n\n%d workloads, policies %s, seed%s %s, baseline %s. "
      "Every figure is the mean over the seeds; average JCT in seconds (finished jobs); "
      "restarts per job = (rescales + resumes) / jobs.\n\n",
      workloads, absl::StrJoin(in.policies, ", "), seeds == 1 ? "" : "s",
      absl::StrJoin(in.seeds, ", "), in.baseline);
  md +=
      "Kinds: `planner` = Rescale's cluster planner sizes every job; `planner-wrapped` = a "
      "per-job policy whose wish the planner fits into the cluster; `cluster-native` = a "
      "scheduler as clusters run it, no planner (bench/sim/README.md).\n\n";
  absl::StrAppend(&md, "| policy | kind | avg JCT s | ratio to ", in.baseline,
                  " | p99 JCT s | restarts/job |\n|---|---|---:|---:|---:|---:|\n");
  for (size_t p = 0; p < policies; ++p) {
    const SweepCell& c = out.overall[p];
    absl::StrAppendFormat(&md, "| %s | %s | %.0f%s | %s | %.0f | %.2f |\n", in.policies[p],
                          KindName(KindOf(in.policies[p])), c.avg_jct_s,
                          c.unfinished ? " (unfinished jobs)" : "", Ratio(c.avg_jct_s, base_jct),
                          c.p99_jct_s, c.restarts_per_job);
  }
  auto per_workload = [&](const std::string& title, auto value, int digits, bool ratio) {
    absl::StrAppend(&md, "\n## ", title, "\n\n| workload | ", absl::StrJoin(in.policies, " | "),
                    " |\n|---|");
    for (size_t p = 0; p < policies; ++p) md += "---:|";
    md += "\n";
    for (size_t w = 0; w < workloads; ++w) {
      absl::StrAppend(&md, "| ", in.workloads[w], " |");
      for (size_t p = 0; p < policies; ++p) {
        const SweepCell& c = out.cells[w][p];
        md += absl::StrFormat(" %.*f%s |", digits, value(c),
                              ratio && c.unfinished ? " (unfinished jobs)" : "");
      }
      md += "\n";
    }
    md += "| **mean** |";
    for (size_t p = 0; p < policies; ++p) {
      md += absl::StrFormat(" **%.*f** |", digits, value(out.overall[p]));
    }
    if (ratio) {
      absl::StrAppend(&md, "\n| ratio to ", in.baseline, " |");
      for (size_t p = 0; p < policies; ++p)
        absl::StrAppend(&md, " ", Ratio(out.overall[p].avg_jct_s, base_jct), " |");
    }
    md += "\n";
  };
  per_workload(
      "Average JCT per workload (s)", [](const SweepCell& c) { return c.avg_jct_s; }, 0, true);
  per_workload(
      "Restarts per job per workload", [](const SweepCell& c) { return c.restarts_per_job; }, 2,
      false);
  if (std::any_of(in.summaries.begin(), in.summaries.end(),
                  [](const PolicySummary& s) { return s.nodes_modeled; })) {
    md +=
        "\n## Nodes: pending pods\n\nPending GPU-h = GPUs requested by Pending pods x the time "
        "they pended; util = placed GPUs / all GPUs (foreign included).\n\n"
        "| workload | seed | policy | pending GPU-h | avg JCT s | util | foreign GPU-h |\n"
        "|---|---:|---|---:|---:|---:|---:|\n";
    for (size_t w = 0; w < workloads; ++w) {
      for (size_t s = 0; s < seeds; ++s) {
        for (size_t p = 0; p < policies; ++p) {
          const PolicySummary& summary = in.summaries[(w * seeds + s) * policies + p];
          absl::StrAppendFormat(&md, "| %s | %d | %s | %.1f | %.0f%s | %.3f | %.1f |\n",
                                in.workloads[w], in.seeds[s], in.policies[p],
                                summary.pending_gpu_hours, summary.avg_jct_s,
                                summary.finished < summary.jobs ? " (unfinished jobs)" : "",
                                summary.utilization, summary.foreign_gpu_hours);
        }
      }
    }
  }
  md +=
      "\nPer-workload reports: `<workload>/report.md` (one seed) or "
      "`<workload>/seed-<S>/report.md`.\n";

  // summary.csv's header, with the node columns when the rows have them.
  const std::string summary_csv = SummaryCsv(in.summaries);
  const std::string header = summary_csv.substr(0, summary_csv.find('\n') + 1);
  out.csv = absl::StrCat("workload,", absl::string_view(header).substr(0, header.size() - 1),
                         ",seed,kind,restarts_per_job\n");
  for (size_t w = 0; w < workloads; ++w) {
    for (size_t s = 0; s < seeds; ++s) {
      for (size_t p = 0; p < policies; ++p) {
        const PolicySummary& summary = in.summaries[(w * seeds + s) * policies + p];
        std::string row = SummaryCsv({summary});
        row = row.substr(row.find('\n') + 1);
        row.pop_back();  // its newline
        absl::StrAppendFormat(&out.csv, "%s,%s,%d,%s,%.6f\n", CsvField(in.workloads[w]), row,
                              in.seeds[s], KindName(KindOf(in.policies[p])),
                              RestartsPerJob(summary));
      }
    }
  }
  out.means_csv = "workload,policy,kind,seeds,avg_jct_s,p99_jct_s,restarts_per_job,unfinished\n";
  auto mean_row = [&](const std::string& workload, size_t p, const SweepCell& c) {
    absl::StrAppendFormat(&out.means_csv, "%s,%s,%s,%d,%.3f,%.3f,%.6f,%s\n", CsvField(workload),
                          CsvField(in.policies[p]), KindName(KindOf(in.policies[p])), seeds,
                          c.avg_jct_s, c.p99_jct_s, c.restarts_per_job,
                          c.unfinished ? "true" : "false");
  };
  for (size_t w = 0; w < workloads; ++w) {
    for (size_t p = 0; p < policies; ++p) mean_row(in.workloads[w], p, out.cells[w][p]);
  }
  for (size_t p = 0; p < policies; ++p) mean_row("mean", p, out.overall[p]);
  return out;
}

absl::StatusOr<std::vector<uint64_t>> ParseSeeds(std::string_view text) {
  std::vector<uint64_t> seeds;
  for (absl::string_view item :
       absl::StrSplit(absl::string_view(text.data(), text.size()), ',', absl::SkipWhitespace())) {
    uint64_t seed = 0;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(item), &seed)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("\"%s\" is not a seed (a non-negative integer)", item));
    }
    seeds.push_back(seed);
  }
  if (seeds.empty()) return absl::InvalidArgumentError("names no seed");
  return seeds;
}

}  // namespace rescale::sim
