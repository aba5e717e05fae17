// rescalectl's tables (see output.h): jobs, recommendations, the cluster
// summary and view (with its GPU types), the watch table printer, and the
// parsers of capacity set's --slots and --types.
#include <google/protobuf/timestamp.pb.h>
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <regex>
#include <set>
#include <stdexcept>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/rescalectl/output.h"
#include "client/rescalectl/output_internal.h"
#include "rescale/job_rules.h"
#include "rescale/names.h"
#include "rescale/types.h"

namespace rescale::cli {

// ---------------------------------------------------------------- tables --

Table::Table(std::vector<std::string> headers) : headers_(std::move(headers)) {}

void Table::AddRow(std::vector<std::string> cells) {
  cells.resize(headers_.size());
  rows_.push_back(std::move(cells));
}

std::string Table::Render(std::string_view indent) const {
  std::vector<size_t> widths(headers_.size());
  for (size_t c = 0; c < headers_.size(); ++c) {
    widths[c] = DisplayWidth(headers_[c]);
    for (const auto& row : rows_) widths[c] = std::max(widths[c], DisplayWidth(row[c]));
  }
  auto render_line = [&](const std::vector<std::string>& cells) {
    std::string line(indent);
    for (size_t c = 0; c < cells.size(); ++c) {
      line += cells[c];
      if (c + 1 < cells.size()) line += std::string(widths[c] - DisplayWidth(cells[c]) + 2, ' ');
    }
    // A trailing empty cell would leave blanks at the end of the line.
    StripTrailingBlanks(line);
    return line + "\n";
  };
  std::string text = render_line(headers_);
  for (const auto& row : rows_) text += render_line(row);
  return text;
}

namespace {

// GPU-TYPE columns appear only when some row has a type, so the output of a
// cluster of one type stays what scripts were written against.
constexpr char kGpuTypeHeader[] = "GPU-TYPE";

std::string TypeCell(const std::string& gpu_type) { return gpu_type.empty() ? "-" : gpu_type; }

// The GPUs the recommendations run of type `t`; 0 when the server sent fewer
// counts than types (the API promises the same order, not the same length).
uint32_t AllocatedOfType(const v1::Cluster& cluster, int t) {
  return t < cluster.allocated_gpus_by_type_size() ? cluster.allocated_gpus_by_type(t) : 0;
}

}  // namespace

std::string FormatJobsTable(const google::protobuf::RepeatedPtrField<v1::Job>& jobs,
                            absl::Time now) {
  // The first eleven columns are a contract with scripts; new ones go last.
  std::vector<std::string> headers = {
      "NAMESPACE", "NAME",    "MIN",         "MAX",    "GPUS/REPLICA", "PRIORITY",
      "POLICY",    "CURRENT", "RECOMMENDED", "ACTION", "AGE",          "GPUS",
      "STATE",     "QUEUE",   "PROGRESS",    "ETA",    "BATCH",        "EFFICIENCY"};
  const bool typed = std::any_of(jobs.begin(), jobs.end(), [](const v1::Job& job) {
    return !job.recommendation().gpu_type().empty();
  });
  if (typed) headers.push_back(kGpuTypeHeader);
  Table table(std::move(headers));
  for (const auto& job : jobs) {
    const auto& spec = job.spec();
    const auto& status = job.status();
    auto [ns, name] = SplitJobId(spec.job_id());
    // An empty spec policy means "the server's default"; the recommendation
    // names the policy that actually decided.
    std::string policy = spec.policy();
    if (policy.empty()) policy = job.recommendation().policy();
    if (policy.empty()) policy = "<default>";
    const bool has_recommendation = job.has_recommendation();
    std::vector<std::string> cells = {
        ns,
        name,
        absl::StrCat(spec.min_replicas()),
        absl::StrCat(spec.max_replicas()),
        absl::StrCat(spec.has_gpus_per_replica() ? spec.gpus_per_replica() : 1),
        absl::StrCat(spec.priority()),
        policy,
        status.suspended() ? "suspended" : absl::StrCat(status.current_replicas()),
        has_recommendation ? absl::StrCat(job.recommendation().replicas()) : std::string(kNone),
        has_recommendation ? ActionName(job.recommendation().action()) : std::string(kNone),
        IsSet(status.registered_at()) ? HumanDuration(now - ToAbslTime(status.registered_at()))
                                      : std::string("<unknown>"),
        has_recommendation ? absl::StrCat(job.recommendation().gpus()) : std::string(kNone),
        JobState(job),
        // 0 means "not queued", which a dash says more plainly than a zero.
        job.recommendation().queue_position() == 0
            ? "-"
            : absl::StrCat(job.recommendation().queue_position()),
        ProgressPercent(job),
        RemainingTime(status),
        RecommendedBatch(job.recommendation()),
        EfficiencyPercent(job),
    };
    if (typed) cells.push_back(TypeCell(job.recommendation().gpu_type()));
    table.AddRow(std::move(cells));
  }
  return table.Render();
}

std::string JobState(const v1::Job& job) {
  JobStatus status;
  status.current_replicas = job.status().current_replicas();
  status.suspended = job.status().suspended();
  std::optional<uint32_t> recommended;
  if (job.has_recommendation()) recommended = RecommendedReplicas(job);
  return std::string(JobStateName(JobStateOf(status, recommended)));
}

std::string FormatClusterSummary(const v1::Cluster& cluster) {
  std::string text = absl::StrCat("Cluster: ", cluster.allocated_gpus());
  if (cluster.capacity_known()) {
    absl::StrAppend(&text, "/", cluster.total_gpus(), " GPUs allocated (",
                    UtilizationPercent(cluster), ")");
  } else {
    absl::StrAppend(&text, " GPUs allocated (capacity unknown)");
  }
  absl::StrAppend(&text, ", ", cluster.waiting_jobs(),
                  cluster.waiting_jobs() == 1 ? " job" : " jobs", " waiting; plan gap ",
                  GapPercent(cluster));
  return text;
}

// The cells of a recommendation row, shared by `get recommendations` and
// `watch` so the two tables always agree.
static std::vector<std::string> RecommendationCells(const v1::Recommendation& rec) {
  auto [ns, name] = SplitJobId(rec.job_id());
  return {
      ns,
      name,
      absl::StrCat(rec.replicas()),
      ActionName(rec.action()),
      absl::StrCat(rec.generation()),
      ConstraintName(rec.binding_constraint()),
      // 0 means "running", which a dash says more plainly than a zero.
      rec.queue_position() == 0 ? "-" : absl::StrCat(rec.queue_position()),
      OrNone(rec.reason()),
  };
}

std::string FormatRecommendationsTable(
    const google::protobuf::RepeatedPtrField<v1::Recommendation>& recommendations) {
  std::vector<std::string> headers = {"NAMESPACE",  "NAME",       "REPLICAS", "ACTION",
                                      "GENERATION", "CONSTRAINT", "QUEUE",    "REASON"};
  const bool typed =
      std::any_of(recommendations.begin(), recommendations.end(),
                  [](const v1::Recommendation& rec) { return !rec.gpu_type().empty(); });
  if (typed) headers.push_back(kGpuTypeHeader);
  Table table(std::move(headers));
  for (const auto& rec : recommendations) {
    std::vector<std::string> cells = RecommendationCells(rec);
    // After REASON: the columns before it keep their places for scripts.
    if (typed) cells.push_back(TypeCell(rec.gpu_type()));
    table.AddRow(std::move(cells));
  }
  return table.Render();
}

std::string FormatStatus(const v1::Cluster& cluster, absl::Time now) {
  const bool kept = !cluster.state_backend().empty() && cluster.state_backend() != "memory";
  std::string state =
      kept ? absl::StrCat(cluster.state_backend(), ", last checkpoint ",
                          FormatTimestamp(cluster.last_checkpoint_at(), now, "<none yet>"))
           : "memory (nothing is kept across restarts)";
  std::string capacity =
      cluster.capacity_known()
          ? absl::StrCat(
                cluster.total_gpus(), " GPUs",
                // Reported by the adapter: what the nodes have,
                // before readiness, taints and other work.
                cluster.allocatable_gpus() > 0
                    ? absl::StrCat(" usable of ", cluster.allocatable_gpus(), " on the nodes")
                    : "",
                ", ", cluster.allocated_gpus(), " allocated (", UtilizationPercent(cluster), ")")
          : absl::StrCat("unknown (unbounded), ", cluster.allocated_gpus(), " GPUs allocated");
  absl::StrAppend(&capacity, ", ", cluster.waiting_jobs(),
                  cluster.waiting_jobs() == 1 ? " job" : " jobs", " waiting");
  const std::string plan = absl::StrCat(FormatTimestamp(cluster.planned_at(), now, "<none yet>"),
                                        ", gap ", GapPercent(cluster));
  std::string text = absl::StrCat("State:     ", state, "\n");
  // High availability: who leads, and this replica's part (why it does not
  // lead, when it does not).
  if (!cluster.leadership().empty()) {
    absl::StrAppend(&text,
                    "Leader:    ", cluster.leader().empty() ? "<none elected>" : cluster.leader(),
                    " (this server: ", cluster.leadership(), ")\n");
  }
  absl::StrAppend(&text, "Capacity:  ", capacity, "\n");
  // A mixed cluster: each type's share, in the order the types were set.
  if (!cluster.gpu_types().empty()) {
    std::string types;
    for (int t = 0; t < cluster.gpu_types_size(); ++t) {
      const v1::GpuType& type = cluster.gpu_types(t);
      absl::StrAppend(&types, t == 0 ? "" : ", ", type.name(), " ", type.total_gpus(), " (",
                      AllocatedOfType(cluster, t), " allocated)");
    }
    absl::StrAppend(&text, "GPU types: ", types, "\n");
  }
  absl::StrAppend(&text, "Last plan: ", plan, "\n");
  return text;
}

std::string FormatCluster(const v1::Cluster& cluster) {
  // Until capacity is set the planner hands out GPUs without bound, so the
  // total and the free count are not numbers yet.
  const std::string unbounded = "unbounded";
  // TOTAL is all the nodes' GPUs when the server was told them, USABLE what
  // the planner hands out of them; without the first the two are one.
  // USABLE comes last so that the columns before it keep their places for
  // whoever reads them by position.
  const uint32_t all_gpus =
      cluster.allocatable_gpus() > 0 ? cluster.allocatable_gpus() : cluster.total_gpus();
  Table totals({"TOTAL", "ALLOCATED", "FREE", "WAITING", "UTILIZATION", "GAP", "USABLE"});
  totals.AddRow({
      cluster.capacity_known() ? absl::StrCat(all_gpus) : unbounded,
      absl::StrCat(cluster.allocated_gpus()),
      cluster.capacity_known() ? absl::StrCat(cluster.free_gpus()) : unbounded,
      absl::StrCat(cluster.waiting_jobs()),
      cluster.capacity_known() ? UtilizationPercent(cluster) : "-",
      GapPercent(cluster),
      cluster.capacity_known() ? absl::StrCat(cluster.total_gpus()) : unbounded,
  });
  std::string text = totals.Render();
  if (!cluster.allocations().empty()) {
    std::vector<std::string> headers = {"NAMESPACE", "NAME", "REPLICAS", "GPUS", "PRIORITY"};
    const bool typed = std::any_of(
        cluster.allocations().begin(), cluster.allocations().end(),
        [](const v1::JobAllocation& allocation) { return !allocation.gpu_type().empty(); });
    if (typed) headers.push_back(kGpuTypeHeader);
    Table allocations(std::move(headers));
    for (const auto& allocation : cluster.allocations()) {
      auto [ns, name] = SplitJobId(allocation.job_id());
      std::vector<std::string> cells = {ns, name, absl::StrCat(allocation.replicas()),
                                        absl::StrCat(allocation.gpus()),
                                        absl::StrCat(allocation.priority())};
      if (typed) cells.push_back(TypeCell(allocation.gpu_type()));
      allocations.AddRow(std::move(cells));
    }
    text += "\n" + allocations.Render();
  }
  if (!cluster.slot_use().empty()) {
    Table slots({"GPUS/REPLICA", "FIT", "PLANNED"});
    for (const auto& use : cluster.slot_use()) {
      slots.AddRow({absl::StrCat(use.gpus_per_replica()), absl::StrCat(use.replicas_fit()),
                    absl::StrCat(use.replicas_planned())});
    }
    text += "\n" + slots.Render();
  }
  // The queues, once any is defined (without, every job shares one pool).
  if (std::any_of(cluster.queues().begin(), cluster.queues().end(),
                  [](const v1::QueueStatus& q) { return q.defined(); })) {
    text += "\n" + FormatQueuesTable(cluster.queues());
  }
  if (!cluster.gpu_types().empty()) text += "\n" + FormatGpuTypesTable(cluster);
  return text;
}

std::string FormatGpuTypesTable(const v1::Cluster& cluster) {
  if (cluster.gpu_types().empty()) return "";
  // SLOTS only when a type has them (what --type-slots set), as
  // GPUS=REPLICAS the way the flag takes them.
  const bool any_slots = std::any_of(cluster.gpu_types().begin(), cluster.gpu_types().end(),
                                     [](const v1::GpuType& t) { return t.slots_size() > 0; });
  std::vector<std::string> header = {"TYPE", "GPUS", "PER-NODE", "ALLOCATED"};
  if (any_slots) header.push_back("SLOTS");
  Table table(header);
  for (int t = 0; t < cluster.gpu_types_size(); ++t) {
    const v1::GpuType& type = cluster.gpu_types(t);
    std::vector<std::string> row = {
        type.name(), absl::StrCat(type.total_gpus()),
        type.gpus_per_node() == 0 ? "-" : absl::StrCat(type.gpus_per_node()),
        absl::StrCat(AllocatedOfType(cluster, t))};
    if (any_slots) {
      std::vector<std::string> slots;
      for (const v1::ReplicaSlots& s : type.slots())
        slots.push_back(absl::StrCat(s.gpus_per_replica(), "=", s.replicas()));
      row.push_back(slots.empty() ? "-" : absl::StrJoin(slots, ","));
    }
    table.AddRow(row);
  }
  return table.Render();
}

std::string FormatQueuesTable(const google::protobuf::RepeatedPtrField<v1::QueueStatus>& queues) {
  Table table(
      {"NAME", "COHORT", "NOMINAL", "IN-USE", "BORROWED", "LENT", "WAITING", "RUNNING", "WEIGHT"});
  for (const v1::QueueStatus& q : queues) {
    const v1::Queue& spec = q.queue();
    table.AddRow({spec.name(), spec.cohort().empty() ? "<none>" : spec.cohort(),
                  absl::StrCat(spec.nominal_gpus()), absl::StrCat(q.in_use_gpus()),
                  absl::StrCat(q.borrowed_gpus()), absl::StrCat(q.lent_gpus()),
                  absl::StrCat(q.waiting_jobs()), absl::StrCat(q.running_jobs()),
                  absl::StrCat(spec.has_weight() ? spec.weight() : 1.0)});
  }
  return table.Render();
}

std::string ParseSlotsFlag(const std::string& text,
                           google::protobuf::RepeatedPtrField<v1::ReplicaSlots>* slots) {
  const std::string form = "expected GPUS=REPLICAS[,GPUS=REPLICAS...], e.g. 8=3,4=7";
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    const size_t eq = item.find('=');
    uint32_t gpus = 0, replicas = 0;
    if (eq == absl::string_view::npos || !absl::SimpleAtoi(item.substr(0, eq), &gpus) ||
        !absl::SimpleAtoi(item.substr(eq + 1), &replicas) ||
        item.substr(0, eq).find_first_not_of("0123456789") != absl::string_view::npos ||
        item.substr(eq + 1).find_first_not_of("0123456789") != absl::string_view::npos) {
      return absl::StrCat("--slots: \"", std::string(item.data(), item.size()), "\": ", form);
    }
    v1::ReplicaSlots* s = slots->Add();
    s->set_gpus_per_replica(gpus);
    s->set_replicas(replicas);
  }
  return "";
}

std::string ParseGpuTypesFlag(const std::string& text,
                              google::protobuf::RepeatedPtrField<v1::GpuType>* types) {
  const std::string form =
      "expected NAME=GPUS[:PER_NODE][,NAME=GPUS[:PER_NODE]...], e.g. "
      "Tesla-T4=24:4,NVIDIA-A100-SXM4-40GB=16:8";
  auto digits = [](absl::string_view s) {
    return !s.empty() && s.find_first_not_of("0123456789") == absl::string_view::npos;
  };
  std::set<std::string> seen;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    const std::string element(item.data(), item.size());
    const size_t eq = item.find('=');
    if (eq == absl::string_view::npos) return absl::StrCat("--types: \"", element, "\": ", form);
    const std::string name(item.substr(0, eq));
    // A bad name is named as such: "expected NAME=..." would not say why.
    if (!IsGpuTypeName(name)) {
      return absl::StrCat(GpuTypeNameError("--types: type", name), " (in \"", element, "\")");
    }
    const absl::string_view numbers = item.substr(eq + 1);
    const size_t colon = numbers.find(':');
    const absl::string_view gpus_text = numbers.substr(0, colon);
    const absl::string_view per_node_text =
        colon == absl::string_view::npos ? absl::string_view() : numbers.substr(colon + 1);
    uint32_t gpus = 0, per_node = 0;
    if (!digits(gpus_text) || !absl::SimpleAtoi(gpus_text, &gpus) ||
        (colon != absl::string_view::npos &&
         (!digits(per_node_text) || !absl::SimpleAtoi(per_node_text, &per_node)))) {
      return absl::StrCat("--types: \"", element, "\": ", form);
    }
    if (!seen.insert(name).second) {
      return absl::StrCat("--types: \"", element, "\": type \"", name,
                          "\" is given twice; give each type once");
    }
    if (seen.size() > kMaxGpuTypes) {
      return absl::StrCat("--types: \"", element, "\": more than ", kMaxGpuTypes,
                          " types, the limit");
    }
    v1::GpuType* type = types->Add();
    type->set_name(name);
    type->set_total_gpus(gpus);
    type->set_gpus_per_node(per_node);
  }
  return "";
}

std::string ParseTypeSlotsFlag(const std::string& text,
                               google::protobuf::RepeatedPtrField<v1::GpuType>* types) {
  const std::string form = "expected TYPE:GPUS=REPLICAS[,GPUS=REPLICAS...], e.g. Tesla-T4:4=6,1=24";
  const size_t colon = text.find(':');
  if (colon == std::string::npos) return absl::StrCat("--type-slots: \"", text, "\": ", form);
  const std::string name = text.substr(0, colon);
  auto type = std::find_if(types->begin(), types->end(),
                           [&](const v1::GpuType& t) { return t.name() == name; });
  if (type == types->end()) {
    return absl::StrCat("--type-slots: \"", text, "\": type \"", name,
                        "\" is not one of --types; give its slots with it");
  }
  if (type->slots_size() > 0) {
    return absl::StrCat("--type-slots: \"", text, "\": type \"", name,
                        "\" is given twice; give each type's slots once");
  }
  std::string error = ParseSlotsFlag(text.substr(colon + 1), type->mutable_slots());
  // ParseSlotsFlag names --slots and its form; this flag is another.
  if (!error.empty()) return absl::StrCat("--type-slots: \"", text, "\": ", form);
  return "";
}

// --------------------------------------------------------------- watch --

namespace {
struct WatchColumn {
  const char* header;
  size_t min_width;
};
// Widths fit the common case (short namespaces, names up to ~24 chars);
// REASON is last and unpadded.
constexpr WatchColumn kWatchColumns[] = {
    {"EVENT", 8},       {"NAMESPACE", 12},  {"NAME", 24}, {"REPLICAS", 8}, {"ACTION", 10},
    {"GENERATION", 10}, {"CONSTRAINT", 17}, {"QUEUE", 5}, {"REASON", 0},
};
constexpr size_t kWatchReasonColumn = std::size(kWatchColumns) - 1;
// With GPU types, before REASON ("Tesla-T4", "NVIDIA-A100-SXM4-40GB").
constexpr WatchColumn kWatchGpuTypeColumn = {kGpuTypeHeader, 10};
}  // namespace

void WatchTablePrinter::PrintRow(const std::vector<std::string>& cells) {
  std::string line;
  for (size_t c = 0; c < cells.size(); ++c) {
    line += cells[c];
    if (c + 1 < cells.size()) {
      const WatchColumn& column =
          gpu_types_ && c == kWatchReasonColumn ? kWatchGpuTypeColumn : kWatchColumns[c];
      const size_t width = std::max(column.min_width, cells[c].size());
      line += std::string(width - cells[c].size() + 2, ' ');
    }
  }
  while (!line.empty() && line.back() == ' ') line.pop_back();
  // Flush per row: someone is watching this live, possibly through a pipe.
  out_ << line << std::endl;
}

void WatchTablePrinter::PrintEvent(const v1::RecommendationEvent& event) {
  if (!header_printed_) {
    std::vector<std::string> headers;
    for (const auto& column : kWatchColumns) headers.emplace_back(column.header);
    if (gpu_types_) headers.insert(headers.end() - 1, kGpuTypeHeader);
    PrintRow(headers);
    header_printed_ = true;
  }
  if (event.type() == v1::RecommendationEvent::SYNCED ||
      event.type() == v1::RecommendationEvent::PLAN_END) {
    // The end-of-initial-list and end-of-plan markers carry no
    // recommendation: a bare row, so the rows above it read as one plan.
    PrintRow({EventTypeName(event.type())});
    return;
  }
  std::vector<std::string> cells = {EventTypeName(event.type())};
  for (std::string& cell : RecommendationCells(event.recommendation()))
    cells.push_back(std::move(cell));
  if (gpu_types_) cells.insert(cells.end() - 1, TypeCell(event.recommendation().gpu_type()));
  PrintRow(cells);
}

}  // namespace rescale::cli
