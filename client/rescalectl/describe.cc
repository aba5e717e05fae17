// `rescalectl describe job` (see output.h): the kubectl-describe-style view
// of a job, its throughput-curve table and its curve on each GPU type.
#include <google/protobuf/timestamp.pb.h>
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <regex>
#include <set>
#include <stdexcept>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/rescalectl/output.h"
#include "client/rescalectl/output_internal.h"

namespace rescale::cli {
namespace {

// "initial 128, max 4096, local 16-512, accumulation": what the job lets
// the planner do with its batch; "fixed" without batch_scaling.
std::string BatchScalingText(const v1::JobSpec& spec) {
  if (!spec.has_batch_scaling()) return "fixed";
  const v1::BatchScaling& b = spec.batch_scaling();
  const uint32_t max_batch = b.max_batch_size() == 0 ? b.initial_batch_size() : b.max_batch_size();
  const uint32_t max_local = b.max_local_batch_size() == 0 ? max_batch : b.max_local_batch_size();
  return absl::StrCat("initial ", b.initial_batch_size(), ", max ", max_batch, ", local ",
                      std::max(b.min_local_batch_size(), 1u), "-", max_local,
                      b.gradient_accumulation() ? ", accumulation" : "");
}

// The "Model:" and "Planned on:" lines and the per-size table of one curve,
// each line starting with `indent`; the recommended and current sizes are
// marked (0 = no mark). Shared by the job's curve and its curve per type so
// the two read the same.
std::string CurveTable(const v1::Job& job, const v1::ThroughputCurve& curve, uint32_t recommended,
                       uint32_t current, const std::string& indent) {
  std::string text;
  if (!curve.model().empty()) {
    const bool any_observed = std::any_of(curve.points().begin(), curve.points().end(),
                                          [](const auto& point) { return point.observed(); });
    // The fit's RMS log error is, for errors this small, the typical
    // relative error, which is how people read "fit error". It is measured
    // on observed sizes only, so a prior-only fit has none to report.
    absl::StrAppend(&text, indent, "Model: ", curve.model(),
                    any_observed
                        ? FormatDouble(" (fit error %.1f%% RMS)", 100 * curve.fit_rms_log_error())
                        : std::string(" (no sizes observed yet)"),
                    "\n");
  }
  // The model missed a point: the table and every plan use the points.
  if (!curve.planned_on().empty())
    absl::StrAppend(&text, indent, "Planned on: ", curve.planned_on(), "\n");

  const std::vector<const v1::CurvePoint*> points = PointsByReplicas(curve);
  const std::vector<const v1::CurvePoint*> rows = CurveTableRows(job, points);
  const double one_replica_rate = OneReplicaRate(points);
  // The last, unnamed column holds the size markers; Table trims it away on
  // rows without one.
  Table table({"N", "PREDICTED/S", "±", "EFFICIENCY", "OBSERVED/S", "ERROR", "SAMPLES", ""});
  for (const v1::CurvePoint* point : rows) {
    const double efficiency = EfficiencyOf(*point, one_replica_rate);
    const bool has_observed = HasObservedRate(*point);
    const double observed = point->observed_samples_per_second();
    table.AddRow({
        absl::StrCat(point->replicas()),
        Rate(point->samples_per_second()),
        Rate(point->uncertainty()),
        efficiency > 0 ? FormatDouble("%.0f%%", 100 * efficiency) : "-",
        has_observed ? Rate(observed) : "-",
        // Positive: the model promises more than the job delivered.
        has_observed
            ? FormatDouble("%+.1f%%", 100 * (point->samples_per_second() - observed) / observed)
            : "-",
        point->observed() ? absl::StrCat(point->sample_count()) : "-",
        SizeMarker(point->replicas(), recommended, current),
    });
  }
  text += table.Render(indent);
  if (rows.size() < points.size()) {
    absl::StrAppend(&text, indent, "(", rows.size(), " of ", points.size(),
                    " sizes: observed, recommended, current, min, max and powers of 2;"
                    " -o yaml lists all)\n");
  }
  return text;
}

}  // namespace

std::string DescribeJob(const v1::Job& job, absl::Time now) {
  const auto& spec = job.spec();
  const auto& status = job.status();
  auto [ns, name] = SplitJobId(spec.job_id());
  std::string text;

  KeyValueSection identity;
  identity.Add("Name", name);
  identity.Add("Namespace", OrNone(ns));
  identity.Add("Job ID", spec.job_id());
  text += identity.Render("");

  // Unset optional fields show the server-side default they stand for.
  KeyValueSection spec_section;
  spec_section.Add("Min Replicas", absl::StrCat(spec.min_replicas()));
  spec_section.Add("Max Replicas", absl::StrCat(spec.max_replicas()));
  spec_section.Add("GPUs Per Replica", spec.has_gpus_per_replica()
                                           ? absl::StrCat(spec.gpus_per_replica())
                                           : "1 (default)");
  spec_section.Add("Priority", absl::StrCat(spec.priority()));
  spec_section.Add("Queue", spec.queue().empty() ? "default" : spec.queue());
  // Only when set: a job of a one-type cluster reads as before.
  if (!spec.gpu_types().empty())
    spec_section.Add("GPU Types", absl::StrJoin(spec.gpu_types(), ", "));
  if (!spec.admission().empty()) spec_section.Add("Admitted By", spec.admission());
  spec_section.Add("Preemptible",
                   spec.has_preemptible() ? YesNo(spec.preemptible()) : "true (default)");
  spec_section.Add("Restart Cost", spec.has_restart_cost_seconds()
                                       ? FormatDouble("%gs", spec.restart_cost_seconds())
                                       : "60s (default)");
  spec_section.Add("Local Batch Size", absl::StrCat(spec.local_batch_size()));
  spec_section.Add("Total Samples",
                   spec.has_total_samples() ? absl::StrCat(spec.total_samples()) : "<unknown>");
  spec_section.Add("Batch Scaling", BatchScalingText(spec));
  spec_section.Add("Policy", spec.policy().empty() ? "<server default>" : spec.policy());
  spec_section.Add("Prior Points",
                   spec.prior().empty() ? std::string(kNone) : absl::StrCat(spec.prior_size()));
  text += "Spec:\n" + spec_section.Render("  ");
  if (!spec.prior().empty()) {
    text += PriorPointsTable(spec.prior(), "    ");
  }

  KeyValueSection status_section;
  status_section.Add("Current Replicas", absl::StrCat(status.current_replicas()));
  status_section.Add("Suspended", YesNo(status.suspended()));
  if (!status.gpu_type().empty()) status_section.Add("GPU Type", status.gpu_type());
  status_section.Add("Last Applied Generation", absl::StrCat(status.last_applied_generation()));
  status_section.Add("Last Applied At", FormatTimestamp(status.last_applied_at(), now, "<never>"));
  status_section.Add("Registered At", FormatTimestamp(status.registered_at(), now, "<unknown>"));
  status_section.Add("Samples Accepted", absl::StrCat(status.samples_accepted()));
  // Goodput-planned jobs progress in samples at the initial batch M0, which
  // is what total_samples counts for them; the raw count follows.
  const bool at_m0 = status.has_progress_samples();
  std::string progress =
      CompactCount(at_m0 ? status.progress_samples() : status.samples_processed());
  const char* unit = at_m0 ? " samples at M0" : " samples";
  absl::StrAppend(&progress, spec.has_total_samples()
                                 ? absl::StrCat(" of ", CompactCount(spec.total_samples()), unit,
                                                " (", ProgressPercent(job), ")")
                                 : absl::StrCat(unit, " (total unknown)"));
  if (at_m0)
    absl::StrAppend(&progress, "; ", CompactCount(status.samples_processed()), " processed");
  status_section.Add("Progress", progress);
  // The estimate is at the size the job runs now, which only a running
  // status has (unset otherwise).
  status_section.Add("Estimated Remaining",
                     status.has_estimated_remaining_seconds()
                         ? absl::StrCat(RemainingTime(status), " at ", status.current_replicas(),
                                        status.current_replicas() == 1 ? " replica" : " replicas")
                         : std::string(kNone));
  // Past this total batch, a larger one needs more samples for the same
  // progress; only jobs that report gradient statistics have one.
  status_section.Add("Statistical Efficiency",
                     status.has_statistical_efficiency()
                         ? FormatDouble("%.2f", status.statistical_efficiency())
                         : std::string(kNone));
  status_section.Add(
      "Gradient Noise Scale",
      status.has_gradient_noise_scale()
          ? absl::StrCat(
                CompactCount(static_cast<uint64_t>(std::llround(status.gradient_noise_scale()))),
                " samples")
          : std::string(kNone));
  text += "Status:\n" + status_section.Render("  ");

  text += "Pods:\n";
  if (job.pods().empty()) {
    text += "  <none>\n";
  } else {
    Table pods({"POD", "WORLD SIZE", "STEP TIME", "SAMPLES", "LAST SEEN", "STRAGGLER"});
    for (const auto& pod : job.pods()) {
      pods.AddRow({
          pod.pod(),
          absl::StrCat(pod.world_size()),
          FormatDouble("%.3fs", pod.recent_step_seconds()),
          absl::StrCat(pod.sample_count()),
          IsSet(pod.last_seen()) ? HumanDuration(now - ToAbslTime(pod.last_seen())) + " ago"
                                 : std::string("<never>"),
          pod.straggler() ? "yes" : "no",
      });
    }
    text += pods.Render("  ");
  }
  // The Pods table can be long; stragglers are what someone scans it for.
  std::vector<std::string> stragglers;
  for (const auto& pod : job.pods()) {
    if (pod.straggler()) stragglers.push_back(pod.pod());
  }
  text += "Stragglers:";
  if (stragglers.empty()) text += " none";
  for (size_t i = 0; i < stragglers.size(); ++i) text += (i == 0 ? " " : ", ") + stragglers[i];
  text += "\n";

  text += FormatThroughputCurve(job);
  text += FormatCurvesByType(job);

  text += "Recommendation:\n";
  if (!job.has_recommendation()) {
    text += "  <none>\n";
  } else {
    const auto& rec = job.recommendation();
    KeyValueSection rec_section;
    rec_section.Add("Replicas", absl::StrCat(rec.replicas()));
    rec_section.Add("Suspend", YesNo(rec.suspend()));
    rec_section.Add("Action", ActionName(rec.action()));
    rec_section.Add("Generation", absl::StrCat(rec.generation()));
    rec_section.Add("Binding Constraint", ConstraintName(rec.binding_constraint()));
    // A job recommended 0 replicas outside the planner's queue (suspended
    // by a policy) is not running either.
    rec_section.Add("Queue Position", rec.queue_position() > 0 ? absl::StrCat(rec.queue_position())
                                      : RecommendedReplicas(job) > 0 ? "- (running)"
                                                                     : "-");
    rec_section.Add("GPUs", absl::StrCat(rec.gpus()));
    if (!rec.gpu_type().empty()) rec_section.Add("GPU Type", rec.gpu_type());
    rec_section.Add("Current Samples/s", Rate(rec.current_samples_per_second()));
    rec_section.Add("Predicted Samples/s", Rate(rec.predicted_samples_per_second()));
    // Goodput-planned jobs only: the batch the workers are to run at these
    // replicas, and the progress it buys.
    if (rec.has_local_batch_size()) {
      const uint64_t micro_steps = uint64_t{rec.accumulation_steps()} + 1;
      rec_section.Add("Local Batch Size", absl::StrCat(rec.local_batch_size(), " per worker"));
      rec_section.Add(
          "Accumulation Steps",
          absl::StrCat(rec.accumulation_steps(), " (", micro_steps,
                       micro_steps == 1 ? " micro-step" : " micro-steps",
                       " per optimizer step; total batch ",
                       uint64_t{rec.replicas()} * rec.local_batch_size() * micro_steps, ")"));
    }
    if (rec.has_predicted_goodput()) {
      rec_section.Add("Predicted Goodput",
                      Rate(rec.predicted_goodput()) + " (samples/s at the initial batch)");
    }
    if (rec.has_statistical_efficiency()) {
      rec_section.Add("Statistical Efficiency", FormatDouble("%.2f", rec.statistical_efficiency()));
    }
    // Why this size and not a neighbour: the planner's utility would change
    // by these amounts. Unset when the neighbouring size is not allowed.
    if (rec.has_value_one_more()) {
      rec_section.Add("Value of one more replica",
                      FormatDouble("%.4f", rec.value_one_more()) + " (change in planner utility)");
    }
    if (rec.has_value_one_fewer()) {
      rec_section.Add("Value of one fewer replica",
                      FormatDouble("%.4f", rec.value_one_fewer()) + " (change in planner utility)");
    }
    rec_section.Add("Policy", OrNone(rec.policy()));
    rec_section.Add("Decided At", FormatTimestamp(rec.decided_at(), now, "<never>"));
    rec_section.Add("Reason", OrNone(rec.reason()));
    text += rec_section.Render("  ");
  }
  return text;
}

std::string FormatThroughputCurve(const v1::Job& job) {
  const v1::ThroughputCurve& curve = job.curve();
  if (curve.points().empty()) {
    return "Throughput curve: no data yet (the job starts at min_replicas)\n";
  }
  std::string text = "Throughput curve:\n";
  text += CurveTable(job, curve, RecommendedReplicas(job), CurrentReplicas(job), "  ");
  text += "\n";
  const std::string plot = RenderCurvePlot(curve);
  for (size_t start = 0; start < plot.size();) {
    const size_t end = plot.find('\n', start);
    const std::string line =
        plot.substr(start, (end == std::string::npos ? plot.size() : end) - start);
    if (!line.empty()) text += "  " + line;
    text += "\n";
    start = end == std::string::npos ? plot.size() : end + 1;
  }
  return text;
}

std::string FormatCurvesByType(const v1::Job& job) {
  if (job.curves_by_type().empty()) return "";
  // A size is marked on the type it applies to only: the recommendation's
  // type for "recommended", the type the job reports running on for
  // "current". An empty type marks nothing (which type it means is unknown).
  const std::string& recommended_type = job.recommendation().gpu_type();
  const std::string& current_type = job.status().gpu_type();
  std::string text = "Throughput curves by GPU type:\n";
  for (const v1::ThroughputCurve& curve : job.curves_by_type()) {
    const std::string heading =
        absl::StrCat("  Curve on ", OrNone(curve.gpu_type()), " (",
                     curve.source().empty() ? "unknown" : curve.source(), ")");
    if (curve.points().empty()) {
      absl::StrAppend(&text, heading, ": no data\n");
      continue;
    }
    const uint32_t recommended = !recommended_type.empty() && recommended_type == curve.gpu_type()
                                     ? RecommendedReplicas(job)
                                     : 0;
    const uint32_t current =
        !current_type.empty() && current_type == curve.gpu_type() ? CurrentReplicas(job) : 0;
    absl::StrAppend(&text, heading, ":\n", CurveTable(job, curve, recommended, current, "    "));
  }
  return text;
}

}  // namespace rescale::cli
