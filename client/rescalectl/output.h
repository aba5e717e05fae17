// Text formats of rescalectl: everything that turns API messages into what a
// person or a script reads, and turns YAML/JSON manifests into proto JSON.
//
// Output side: kubectl-like tables (upper-case headers, columns aligned with
// two spaces), the multi-section `describe job` view, the streaming watch
// table, and the json/yaml renderings of any message (proto JSON, then JSON
// converted to block YAML). Input side: YAML nodes become JSON with the
// type inference YAML 1.2's core schema gives plain scalars, so a manifest
// can be handed to protobuf's JSON parser. None of this talks to a server.
#ifndef RESCALE_CLIENT_RESCALECTL_OUTPUT_H_
#define RESCALE_CLIENT_RESCALECTL_OUTPUT_H_

#include <google/protobuf/message.h>
#include <google/protobuf/repeated_ptr_field.h>
#include <grpcpp/support/status.h>
#include <yaml-cpp/yaml.h>

#include <cstddef>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "absl/time/time.h"
#include "rescale/v1/rescale.pb.h"

namespace rescale::cli {

enum class OutputFormat { kTable, kJson, kYaml };

// "table", "json" or "yaml"; nullopt for anything else.
std::optional<OutputFormat> ParseOutputFormat(std::string_view name);

// ---------------------------------------------------------- json / yaml --

// Proto JSON with lowerCamel names and every primitive field printed (so a
// script sees `currentReplicas: 0` rather than a missing key). `pretty`
// indents; otherwise the object is one line (for streamed events).
std::string MessageToJson(const google::protobuf::Message& message, bool pretty);

// Block-style YAML of any JSON value, keys in the JSON's order. Strings that
// a YAML reader would take for another type ("3", "true", "null") are quoted
// so the document reads back to the same JSON.
std::string JsonToYaml(const nlohmann::ordered_json& value);

// MessageToJson then JsonToYaml.
std::string MessageToYaml(const google::protobuf::Message& message);

// Writes `message` as pretty JSON or as YAML, ending with a newline. In YAML,
// `document_marker` starts it with "---" so several messages form a stream.
void PrintMessage(const google::protobuf::Message& message, OutputFormat format, std::ostream& out,
                  bool document_marker = false);

// A YAML node as JSON. Plain (untagged, unquoted) scalars get the type YAML
// 1.2's core schema gives them: true/false → bool, integers → number,
// floats → number (.inf/.nan → the strings "Infinity"/"NaN" proto JSON uses),
// null/~/empty → null, anything else → string. Quoted scalars and `!!str`
// stay strings. Throws std::invalid_argument naming the line for things JSON
// cannot hold (non-scalar map keys).
nlohmann::json YamlToJson(const YAML::Node& node);

// ---------------------------------------------------------------- tables --

// Rows of cells printed as aligned columns: each column as wide as its
// widest cell, two spaces between columns, no trailing blanks.
class Table {
 public:
  explicit Table(std::vector<std::string> headers);
  void AddRow(std::vector<std::string> cells);
  size_t row_count() const { return rows_.size(); }
  // `indent` prefixes every line (for tables nested in `describe`).
  std::string Render(std::string_view indent = "") const;

 private:
  std::vector<std::string> headers_;
  std::vector<std::vector<std::string>> rows_;
};

// get jobs / get job: NAMESPACE NAME MIN MAX GPUS/REPLICA PRIORITY POLICY
// CURRENT RECOMMENDED ACTION AGE GPUS STATE QUEUE PROGRESS ETA BATCH
// EFFICIENCY. The first eleven columns are a contract with scripts and keep
// their names and places; newer ones are appended. `now` computes AGE. GPUS
// is the recommendation's GPUs (what the job holds at the recommended size),
// STATE is JobState, QUEUE the 1-based wait-queue position or "-". BATCH is
// the recommended batch of a goodput-planned job, "64" or "64x3" (local batch
// x micro-steps per optimizer step), else "-"; EFFICIENCY the statistical
// efficiency of that batch, else of the one the job runs, as a percentage,
// else "-". GPU-TYPE, the recommendation's GPU type, is appended only when
// some job's recommendation has one.
std::string FormatJobsTable(const google::protobuf::RepeatedPtrField<v1::Job>& jobs,
                            absl::Time now);

// A job's STATE from its recommendation and applied status: the name of
// rescale::JobStateOf (rescale/job_rules.h, the one rule, shared with the
// server's rescale_jobs gauge), with "recommended" 0 when the
// recommendation suspends: Pending, Starting, Running, Suspended, Waiting.
std::string JobState(const v1::Job& job);

// The line get jobs prints after its table, e.g.
//   "Cluster: 48/64 GPUs allocated (75%), 2 jobs waiting; plan gap 0.00%"
// or, before capacity is set,
//   "Cluster: 12 GPUs allocated (capacity unknown), 0 jobs waiting; plan gap 0.00%".
// No trailing newline.
std::string FormatClusterSummary(const v1::Cluster& cluster);
// `rescalectl status`: where the server keeps its state and when it last
// checkpointed, its capacity, and its last plan, as "Key: value" lines.
std::string FormatStatus(const v1::Cluster& cluster, absl::Time now);

// get recommendations / get recommendation: NAMESPACE NAME REPLICAS ACTION
// GENERATION CONSTRAINT QUEUE REASON, then GPU-TYPE (the recommendation's
// gpu_type, "-" when empty) only when some row has one: single-type output
// stays as it was. get jobs appends GPU-TYPE by the same rule.
std::string FormatRecommendationsTable(
    const google::protobuf::RepeatedPtrField<v1::Recommendation>& recommendations);

// describe job: Spec, Status, Pods (then a "Stragglers:" line), Throughput
// curve (FormatThroughputCurve) and Recommendation sections. The
// Recommendation section shows the planner's marginal values ("Value of one
// more replica:", "Value of one fewer replica:", %.4f) when the server set
// them, the queue position when the job waits, and for a goodput-planned job
// its batch ("Local Batch Size:", "Accumulation Steps:" with the micro-steps
// and the total batch), "Predicted Goodput:" and "Statistical Efficiency:"
// (%.2f), each when set. GPU types, each line only when set: "GPU Types:"
// in Spec (the types the job may use), "GPU Type:" in Status (where it runs)
// and in Recommendation (where to run it), and after the throughput curve
// FormatCurvesByType.
std::string DescribeJob(const v1::Job& job, absl::Time now);

// The job's curve on each GPU type (Job.curves_by_type), "" when it has
// none: a "Throughput curves by GPU type:" line, then per type a heading
// "  Curve on NAME (SOURCE):" (SOURCE as the server says it: "measured",
// "predicted from Tesla-T4", ...), the model line and the table of
// FormatThroughputCurve (no plot), or "  Curve on NAME (SOURCE): no data" for
// a curve without points. The recommended size is marked on the recommended
// type's curve, the current size on the type the job runs on.
std::string FormatCurvesByType(const v1::Job& job);

// The "Throughput curve" section of describe job. With no points: the single
// line "Throughput curve: no data yet (the job starts at min_replicas)".
// Otherwise the model line ("Model: <model> (fit error 4.2% RMS)", or "(no
// sizes observed yet)" for a prior-only fit) when the curve names one, a
// table N PREDICTED/S ± EFFICIENCY OBSERVED/S ERROR SAMPLES with the
// recommended and current sizes marked ("<- recommended", "<- current"), and
// RenderCurvePlot's plot. OBSERVED/S and ERROR ((predicted - observed) /
// observed, signed) are "-" at sizes not measured. A curve of more than
// kMaxCurveTableRows points lists only the observed sizes (always all of
// them), the recommended and current sizes, min/max replicas, the first and
// last points and the powers of two, and says how many it left out.
inline constexpr int kMaxCurveTableRows = 24;
std::string FormatThroughputCurve(const v1::Job& job);

// An ASCII plot of a curve's throughput against n; "" for a curve with no
// points. Lines, none with trailing blanks:
//   "samples/s"                       the y axis title
//   `height` rows "<label> |<cells>"  the plot area, `width` cells wide; the
//                                     top row is labelled with the y max
//   "      0 +-----+-----..."         the x axis, '+' under each x tick
//   "         1    4    8"            x tick labels (first and last point
//                                     always), then "  n"
//   a legend line
// The x axis runs from n = 1 to the last point: n sits in column
// round((n - 1) * (width - 1) / max(last - 1, 1)). The y axis runs from 0 to
// y max = the largest predicted + uncertainty or observed rate: a value v
// sits in row min(height - 1, floor(v / y max * height)), counted from the
// bottom. Drawn in this order, later marks overwriting earlier ones: '/' the
// linear scaling from the 1-replica rate (clipped at y max), ':' the
// uncertainty band, '*' the prediction (a column holding a whole n shows that
// point's; others interpolate, so every column from the first point to the
// last has one), 'o' each observed rate.
// width and height below 2 are taken as 2.
std::string RenderCurvePlot(const v1::ThroughputCurve& curve, int width = 60, int height = 14);

// capacity get: the totals (TOTAL ALLOCATED FREE WAITING UTILIZATION GAP
// USABLE), then one row per job allocation. TOTAL is the nodes' allocatable
// GPUs when reported (Cluster.allocatable_gpus), else the same as USABLE, the
// GPUs the planner hands out (total_gpus), of which FREE are not allocated.
// TOTAL and USABLE are "unbounded" and UTILIZATION "-" until capacity is set;
// GAP is the last plan's relative optimality gap. When the server knows the
// node slots, a table with one row per size class: GPUS/REPLICA, FIT
// (replicas of that size the nodes hold) and PLANNED (replicas the plan runs).
// In a cluster of several GPU types the allocations table gains a last
// GPU-TYPE column and FormatGpuTypesTable follows. Without types the output
// is what it was before types existed (scripts read it).
std::string FormatCluster(const v1::Cluster& cluster);

// The cluster's GPU types, one row each: TYPE, GPUS (its total_gpus),
// PER-NODE (gpus_per_node, "-" when not said) and ALLOCATED (the GPUs the
// recommendations run of it, Cluster.allocated_gpus_by_type). "" when the
// cluster has no types.
std::string FormatGpuTypesTable(const v1::Cluster& cluster);

// `get queues`: NAME, COHORT, NOMINAL, IN-USE, BORROWED, LENT, WAITING,
// RUNNING, WEIGHT per queue (the queue the server added shows as
// "default" with COHORT "<none>" like any other).
std::string FormatQueuesTable(const google::protobuf::RepeatedPtrField<v1::QueueStatus>& queues);

// capacity set --slots: "GPUS=REPLICAS[,GPUS=REPLICAS...]", e.g. "8=3,4=7"
// (three 8-GPU replicas and seven 4-GPU ones fit on the nodes). Appends to
// `slots`; returns "" or what is wrong with `text`. The server checks the
// numbers against its limits and the total.
std::string ParseSlotsFlag(const std::string& text,
                           google::protobuf::RepeatedPtrField<v1::ReplicaSlots>* slots);

// capacity set --types: "NAME=GPUS[:PER_NODE][,NAME=GPUS[:PER_NODE]...]",
// e.g. "Tesla-T4=24:4,NVIDIA-A100-SXM4-40GB=16:8" (24 T4s, 4 per node, and
// 16 A100s, 8 per node). Appends to `types`; returns "" or what is wrong,
// naming --types and the element: a name that is not a GPU type name
// (rescale/names.h), a type given twice, more than kMaxGpuTypes types, or
// numbers that are not unsigned integers. The server checks the rest.
std::string ParseGpuTypesFlag(const std::string& text,
                              google::protobuf::RepeatedPtrField<v1::GpuType>* types);

// capacity set --type-slots: "TYPE:GPUS=REPLICAS[,GPUS=REPLICAS...]", e.g.
// "Tesla-T4:4=6,1=24", one per type: --slots for one of the types `types`
// holds (parsed from --types). Sets that type's slots; returns "" or what is
// wrong, naming --type-slots and the value: a type not among `types`, a type
// given twice, or slots that do not parse.
std::string ParseTypeSlotsFlag(const std::string& text,
                               google::protobuf::RepeatedPtrField<v1::GpuType>* types);

// The watch table: rows arrive one at a time, so column widths cannot come
// from the data. Each column has a minimum width that fits typical values;
// a longer value just pushes the rest of its own row right. `gpu_types`
// (the cluster has GPU types, known before the first row) adds GPU-TYPE
// before REASON, which stays last because it is unpadded free text.
class WatchTablePrinter {
 public:
  explicit WatchTablePrinter(std::ostream& out, bool gpu_types = false)
      : out_(out), gpu_types_(gpu_types) {}
  // Prints the header before the first row.
  void PrintEvent(const v1::RecommendationEvent& event);

 private:
  void PrintRow(const std::vector<std::string>& cells);

  std::ostream& out_;
  const bool gpu_types_;
  bool header_printed_ = false;
};

// ------------------------------------------------------------- pieces --

// Enum value names as tables show them: the value name with a leading
// `prefix` removed ("SCALE_UP"), "<none>" for the *_UNSPECIFIED zero value.
std::string ActionName(v1::Action action);
std::string ConstraintName(v1::BindingConstraint constraint);
std::string EventTypeName(v1::RecommendationEvent::Type type);

// kubectl's compact ages: "42s", "3m12s", "5h", "2d4h", "400d".
std::string HumanDuration(absl::Duration duration);

// The kubectl-style name of a gRPC status code: "InvalidArgument",
// "NotFound", "Unavailable".
std::string StatusCodeName(grpc::StatusCode code);

// "namespace/name" split at the first '/'; no '/' → {"", job_id}.
std::pair<std::string, std::string> SplitJobId(std::string_view job_id);

}  // namespace rescale::cli

#endif  // RESCALE_CLIENT_RESCALECTL_OUTPUT_H_
