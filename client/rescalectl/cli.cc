// rescalectl's command tree and what each command does: CLI11 parsing,
// reading job manifests, one gRPC call (or stream) per command, and handing
// the result to output.h for printing.
//
// Layout: a Session carries what every command needs (streams, output
// format, channel, deadline); each command is a function of a Session and
// its own flags; RunCli builds the CLI11 tree, parses, connects and runs the
// one command that was named.
#include "client/rescalectl/cli.h"

#include <google/protobuf/util/json_util.h>
#include <grpcpp/grpcpp.h>
#include <yaml-cpp/yaml.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/common/credentials.h"
#include "client/common/server_list.h"
#include "client/rescalectl/manifests.h"
#include "client/rescalectl/output.h"
#include "client/rescalectl/session.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "rescale/read_file.h"
#include "rescale/v1/rescale.grpc.pb.h"

namespace rescale::cli {
namespace {

constexpr char kDefaultServer[] = "127.0.0.1:50051";
// kubectl prints "<kind>.<group>/<name> created"; this is our equivalent.
constexpr char kJobResourcePrefix[] = "job.rescale.io/";

struct GlobalFlags {
  std::string server = kDefaultServer;
  std::string output = "table";
  double timeout_seconds = 10;
  client::SecurityFlags security;
};

using Command = std::function<int(Session&)>;

// ----------------------------------------------------------- commands --

int RegisterOrUpdate(Session& session, const std::vector<std::string>& files, bool update) {
  std::optional<std::vector<SpecDocument>> specs = ReadJobSpecs(files, session.in(), session.err());
  if (!specs) return 1;
  const char* verb = update ? "updated" : "registered";
  int exit_code = 0;
  // Like kubectl apply: every document gets its call; any failure fails the
  // whole command.
  for (const SpecDocument& document : *specs) {
    const std::string failure =
        absl::StrCat("error when ", update ? "updating " : "registering ", document.origin, ": ");
    v1::Job job;
    bool ok;
    if (update) {
      v1::UpdateJobRequest request;
      *request.mutable_spec() = document.spec;
      ok = session.Call(&v1::JobService::Stub::UpdateJob, request, &job, failure);
    } else {
      v1::RegisterJobRequest request;
      *request.mutable_spec() = document.spec;
      ok = session.Call(&v1::JobService::Stub::RegisterJob, request, &job, failure);
    }
    if (!ok) {
      exit_code = 1;
      continue;
    }
    if (session.table()) {
      const std::string& job_id =
          job.spec().job_id().empty() ? document.spec.job_id() : job.spec().job_id();
      session.out() << kJobResourcePrefix << job_id << " " << verb << "\n";
    } else {
      PrintMessage(job, session.format(), session.out(), /*document_marker=*/specs->size() > 1);
    }
  }
  return exit_code;
}

// The line under the get jobs table: how full the cluster is. It goes to
// stderr, like the "No jobs found" note, so stdout stays the table alone and
// `| wc -l` or `| awk 'NR>1'` still see only job rows. The table is the
// answer; this line is extra, so a server without ClusterService (or one
// that fails the call) just leaves it out.
void PrintClusterSummary(Session& session) {
  auto stub = v1::ClusterService::NewStub(session.channel());
  grpc::ClientContext context;
  session.ApplyDeadline(context);
  v1::Cluster cluster;
  // Not Session::Call: a failure here prints nothing.
  if (!stub->GetCluster(&context, v1::GetClusterRequest(), &cluster).ok()) return;
  session.out().flush();  // keep the line after the table on a shared terminal
  session.err() << FormatClusterSummary(cluster) << "\n";
}

int GetJobs(Session& session, const std::string& ns) {
  v1::ListJobsRequest request;
  request.set_namespace_(ns);
  v1::ListJobsResponse response;
  if (!session.Call(&v1::JobService::Stub::ListJobs, request, &response)) return 1;
  if (!session.table()) {
    PrintMessage(response, session.format(), session.out());
  } else if (response.jobs().empty()) {
    // Like kubectl: the note goes to stderr so `| wc -l` still counts rows.
    session.err() << "No jobs found" << (ns.empty() ? "" : " in namespace " + ns) << ".\n";
  } else {
    session.out() << FormatJobsTable(response.jobs(), absl::Now());
    PrintClusterSummary(session);
  }
  return 0;
}

std::optional<v1::Job> FetchJob(Session& session, const std::string& job_id) {
  v1::GetJobRequest request;
  request.set_job_id(job_id);
  v1::Job job;
  if (!session.Call(&v1::JobService::Stub::GetJob, request, &job)) return std::nullopt;
  return job;
}

int GetJob(Session& session, const std::string& job_id) {
  std::optional<v1::Job> job = FetchJob(session, job_id);
  if (!job) return 1;
  if (!session.table()) {
    PrintMessage(*job, session.format(), session.out());
    return 0;
  }
  google::protobuf::RepeatedPtrField<v1::Job> rows;
  *rows.Add() = *job;
  session.out() << FormatJobsTable(rows, absl::Now());
  return 0;
}

int DescribeJobCommand(Session& session, const std::string& job_id) {
  std::optional<v1::Job> job = FetchJob(session, job_id);
  if (!job) return 1;
  if (session.table()) {
    session.out() << DescribeJob(*job, absl::Now());
  } else {
    PrintMessage(*job, session.format(), session.out());
  }
  return 0;
}

int GetRecommendations(Session& session, const std::string& ns) {
  v1::ListRecommendationsRequest request;
  request.set_namespace_(ns);
  v1::ListRecommendationsResponse response;
  if (!session.Call(&v1::RecommendationService::Stub::ListRecommendations, request, &response))
    return 1;
  if (!session.table()) {
    PrintMessage(response, session.format(), session.out());
  } else if (response.recommendations().empty()) {
    session.err() << "No recommendations found" << (ns.empty() ? "" : " in namespace " + ns)
                  << ".\n";
  } else {
    session.out() << FormatRecommendationsTable(response.recommendations());
  }
  return 0;
}

int GetRecommendation(Session& session, const std::string& job_id) {
  v1::GetRecommendationRequest request;
  request.set_job_id(job_id);
  v1::Recommendation recommendation;
  if (!session.Call(&v1::RecommendationService::Stub::GetRecommendation, request, &recommendation))
    return 1;
  if (!session.table()) {
    PrintMessage(recommendation, session.format(), session.out());
    return 0;
  }
  google::protobuf::RepeatedPtrField<v1::Recommendation> rows;
  *rows.Add() = recommendation;
  session.out() << FormatRecommendationsTable(rows);
  return 0;
}

int Deregister(Session& session, const std::string& job_id) {
  v1::DeregisterJobRequest request;
  request.set_job_id(job_id);
  v1::DeregisterJobResponse response;
  if (!session.Call(&v1::JobService::Stub::DeregisterJob, request, &response)) return 1;
  // The response is empty, so every format prints the confirmation.
  session.out() << kJobResourcePrefix << job_id << " deregistered\n";
  return 0;
}

int Watch(Session& session, const std::string& ns, int64_t max_events) {
  auto stub = v1::RecommendationService::NewStub(session.channel());
  // No deadline: a watch runs until the server ends it, --count is reached,
  // or the user interrupts. An unreachable server still fails at once
  // (calls are fail-fast, not wait-for-ready).
  grpc::ClientContext context;
  v1::WatchRecommendationsRequest request;
  request.set_namespace_(ns);
  std::unique_ptr<grpc::ClientReader<v1::RecommendationEvent>> reader =
      stub->WatchRecommendations(&context, request);

  // The table's columns are fixed by its header, printed before any row:
  // ask once whether the cluster has GPU types (a failure: as if not).
  bool gpu_types = false;
  if (session.format() == OutputFormat::kTable) {
    grpc::ClientContext cluster_context;
    session.ApplyDeadline(cluster_context);
    v1::Cluster cluster;
    gpu_types = v1::ClusterService::NewStub(session.channel())
                    ->GetCluster(&cluster_context, v1::GetClusterRequest(), &cluster)
                    .ok() &&
                cluster.gpu_types_size() > 0;
  }
  WatchTablePrinter table(session.out(), gpu_types);
  v1::RecommendationEvent event;
  int64_t printed = 0;
  while (reader->Read(&event)) {
    switch (session.format()) {
      case OutputFormat::kTable:
        table.PrintEvent(event);
        break;
      case OutputFormat::kJson:
        // One object per line, so `| jq -c` and line-based tools work.
        session.out() << MessageToJson(event, /*pretty=*/false) << std::endl;
        break;
      case OutputFormat::kYaml:
        session.out() << "---\n" << MessageToYaml(event) << std::endl;
        break;
    }
    if (max_events > 0 && ++printed >= max_events) {
      // We ended the stream on purpose: the CANCELLED that Finish reports
      // is ours, not an error.
      context.TryCancel();
      reader->Finish();
      return 0;
    }
  }
  grpc::Status status = reader->Finish();
  if (!status.ok()) return session.ServerError(status);
  return 0;
}

struct CapacityFlags {
  uint32_t total_gpus = 0;  // 0 with --types: their sum
  // --slots and --types, already checked by ParseSlotsFlag and
  // ParseGpuTypesFlag ("" = none); never both.
  std::string slots;
  std::string types;
  // --type-slots, one per type, checked with --types (ParseTypeSlotsFlag).
  std::vector<std::string> type_slots;
  // --allocatable (0 = not reported); the server checks it against the total.
  uint32_t allocatable_gpus = 0;
};

int SetCapacity(Session& session, const CapacityFlags& flags) {
  v1::SetCapacityRequest request;
  request.set_total_gpus(flags.total_gpus);
  if (!flags.slots.empty()) ParseSlotsFlag(flags.slots, request.mutable_slots());
  if (!flags.types.empty()) ParseGpuTypesFlag(flags.types, request.mutable_gpu_types());
  for (const std::string& slots : flags.type_slots)
    ParseTypeSlotsFlag(slots, request.mutable_gpu_types());
  request.set_allocatable_gpus(flags.allocatable_gpus);
  v1::Cluster cluster;
  if (!session.Call(&v1::ClusterService::Stub::SetCapacity, request, &cluster)) return 1;
  if (session.table()) {
    session.out() << "cluster capacity set to " << cluster.total_gpus() << " GPUs";
    if (cluster.allocatable_gpus() > 0) {
      session.out() << " of " << cluster.allocatable_gpus() << " allocatable";
    }
    for (int i = 0; i < cluster.slots_size(); ++i) {
      const v1::ReplicaSlots& s = cluster.slots(i);
      session.out() << (i == 0 ? "; fit on the nodes: " : ", ") << s.replicas() << " x "
                    << s.gpus_per_replica() << " GPUs";
    }
    session.out() << "\n";
    // A mixed cluster: its types under the line, as capacity get shows them.
    if (!cluster.gpu_types().empty()) session.out() << FormatGpuTypesTable(cluster);
  } else {
    PrintMessage(cluster, session.format(), session.out());
  }
  return 0;
}

int GetCapacity(Session& session) {
  v1::Cluster cluster;
  const v1::GetClusterRequest request;
  if (!session.Call(&v1::ClusterService::Stub::GetCluster, request, &cluster)) return 1;
  if (session.table()) {
    session.out() << FormatCluster(cluster);
  } else {
    PrintMessage(cluster, session.format(), session.out());
  }
  return 0;
}

int Status(Session& session) {
  v1::Cluster cluster;
  const v1::GetClusterRequest request;
  if (!session.Call(&v1::ClusterService::Stub::GetCluster, request, &cluster)) return 1;
  if (session.table()) {
    session.out() << FormatStatus(cluster, absl::Now());
  } else {
    PrintMessage(cluster, session.format(), session.out());
  }
  return 0;
}

int Health(Session& session, const std::string& service) {
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);  // "" = the server as a whole.
  grpc::health::v1::HealthCheckResponse response;
  if (!session.Call(&grpc::health::v1::Health::Stub::Check, request, &response)) return 1;
  if (session.table()) {
    session.out() << grpc::health::v1::HealthCheckResponse::ServingStatus_Name(response.status())
                  << "\n";
  } else {
    PrintMessage(response, session.format(), session.out());
  }
  // The exit code is the answer for Docker HEALTHCHECK and scripts.
  return response.status() == grpc::health::v1::HealthCheckResponse::SERVING ? 0 : 1;
}

struct ApplyStatusFlags {
  std::string job_id;
  uint32_t replicas = 0;
  bool suspended = false;
  uint64_t generation = 0;
};

int ApplyStatus(Session& session, const ApplyStatusFlags& flags) {
  v1::ReportAppliedRequest request;
  request.set_job_id(flags.job_id);
  request.set_replicas(flags.replicas);
  request.set_suspended(flags.suspended);
  request.set_generation(flags.generation);
  v1::ReportAppliedResponse response;
  if (!session.Call(&v1::RecommendationService::Stub::ReportApplied, request, &response)) return 1;
  if (session.table()) {
    const auto& status = response.status();
    session.out() << kJobResourcePrefix << flags.job_id
                  << " applied (replicas=" << status.current_replicas()
                  << ", suspended=" << (status.suspended() ? "true" : "false")
                  << ", generation=" << status.last_applied_generation() << ")\n";
  } else {
    PrintMessage(response, session.format(), session.out());
  }
  return 0;
}

// ------------------------------------------------------------ plumbing --

// TLS when --tls, --ca-file or --cert-file is given (the CA file replaces
// the system roots), plaintext otherwise; the token of --token-file or
// RESCALE_TOKEN goes with every call.
std::shared_ptr<grpc::Channel> Connect(const GlobalFlags& flags, std::ostream& err) {
  auto connection =
      client::RescaledConnection::Create(flags.security, std::getenv("RESCALE_TOKEN"));
  if (!connection.ok()) {
    err << "error: " << connection.status().message() << "\n";
    return nullptr;
  }
  // With high availability --server lists every replica; the leader is
  // used (changes go there; reads are served by any).
  auto servers = client::ServerList::Create(flags.server, *std::move(connection));
  if (!servers.ok()) {
    err << "error: " << servers.status().message() << "\n";
    return nullptr;
  }
  (*servers)->FindLeader();
  return (*servers)->Current();
}

// Subcommand help only lists the subcommand's own flags; this reminds the
// reader that the global ones work there too.
constexpr char kGlobalFlagsFooter[] =
    "Global flags (--server, -o/--output, --timeout, --tls, --ca-file, --cert-file, --key-file,\n"
    "--tls-server-name, --token-file) may also follow the command; see `rescalectl --help`.";

constexpr char kManifestHelp[] =
    "FILE holds one or more YAML documents (separated by ---) or JSON, each a JobSpec\n"
    "with proto JSON field names (minReplicas or min_replicas), or a wrapper\n"
    "{apiVersion, kind, metadata: {name, namespace}, spec: JobSpec}. Every document is\n"
    "checked before any is sent; unknown fields are errors. Example:\n"
    "  jobId: default/bert\n"
    "  minReplicas: 1\n"
    "  maxReplicas: 8\n"
    "  localBatchSize: 32";

// Every command names its job the same way.
CLI::Option* AddJobIdArgument(CLI::App* command, std::string* job_id) {
  return command->add_option("NS/NAME", *job_id, "The job's id, e.g. default/bert")
      ->type_name("")
      ->required();
}

}  // namespace

int RunCli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  return RunCli(args, std::cin, out, err);
}

int RunCli(const std::vector<std::string>& args, std::istream& in, std::ostream& out,
           std::ostream& err) {
  CLI::App app(
      "rescalectl controls Rescale, the elastic-scaling service for distributed "
      "training jobs.",
      "rescalectl");
  // Fallthrough lets an option a subcommand does not know (say -o) reach
  // its parent, which is how `get jobs -o json` works with -o defined once.
  app.fallthrough();
  app.require_subcommand(1);

  GlobalFlags global;
  app.add_option("--server", global.server,
                 "Address of rescaled, host:port; with high availability, every replica's, "
                 "comma-separated (the leader is used)")
      ->envname("RESCALE_SERVER")
      ->capture_default_str();
  app.add_option("-o,--output", global.output, "Output format")
      ->check(CLI::IsMember({"table", "json", "yaml"}))
      ->capture_default_str();
  app.add_option("--timeout", global.timeout_seconds,
                 "Deadline of each call in seconds; 0 = none (watch never has one)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  client::AddSecurityFlags(app, global.security);

  // The command that was named on the command line. Leaf subcommands fill
  // it from their parse callback; groups (get, describe, capacity) only
  // require a subcommand.
  Command selected;
  auto leaf = [&](CLI::App* parent, const std::string& name, const std::string& description,
                  Command command, const std::string& details = "") {
    CLI::App* sub = parent->add_subcommand(name, description);
    sub->footer(details.empty() ? std::string(kGlobalFlagsFooter)
                                : details + "\n\n" + kGlobalFlagsFooter);
    sub->callback([&selected, command = std::move(command)] { selected = command; });
    return sub;
  };
  auto group = [&](const std::string& name, const std::string& description) {
    CLI::App* sub = app.add_subcommand(name, description);
    sub->require_subcommand(1);
    sub->footer(kGlobalFlagsFooter);
    return sub;
  };

  // ---- get / describe
  CLI::App* get = group("get", "Show jobs or recommendations");
  std::string jobs_namespace;
  CLI::App* get_jobs = leaf(
      get, "jobs", "List registered jobs", [&](Session& s) { return GetJobs(s, jobs_namespace); },
      "STATE is Running, Starting (recommended, not yet applied), Waiting\n"
      "(queued for capacity; QUEUE is its place), Suspended or Pending (no\n"
      "recommendation yet). BATCH is the batch recommended to a goodput-planned\n"
      "job, LOCAL or LOCALxSTEPS: LOCAL samples per worker per micro-step, STEPS\n"
      "micro-steps per optimizer step (64x3 = 3 micro-steps of 64), '-' when\n"
      "none. EFFICIENCY is that batch's statistical efficiency (else the running\n"
      "batch's), '-' when unknown. GPU-TYPE, last and only when a job has one, is the\n"
      "GPU type recommended. In table mode a line on stderr then gives the\n"
      "cluster's GPU utilisation, waiting jobs and the plan's optimality gap.");
  get_jobs->add_option("-n,--namespace", jobs_namespace, "Only jobs in this namespace");

  std::string recs_namespace;
  CLI::App* get_recs = leaf(get, "recommendations", "List every job's current recommendation",
                            [&](Session& s) { return GetRecommendations(s, recs_namespace); });
  get_recs->alias("recs");
  get_recs->add_option("-n,--namespace", recs_namespace, "Only jobs in this namespace");

  leaf(get, "queues",
       "List the queues: nominal quota, GPUs in use, borrowed and lent, waiting jobs",
       [&](Session& s) { return GetQueues(s); });

  std::string get_job_id;
  AddJobIdArgument(
      leaf(get, "job", "Show one job", [&](Session& s) { return GetJob(s, get_job_id); }),
      &get_job_id);

  std::string get_rec_id;
  CLI::App* get_rec = leaf(get, "recommendation", "Show one job's recommendation",
                           [&](Session& s) { return GetRecommendation(s, get_rec_id); });
  get_rec->alias("rec");
  AddJobIdArgument(get_rec, &get_rec_id);

  CLI::App* describe = group("describe", "Show a job in detail");
  std::string describe_job_id;
  AddJobIdArgument(
      leaf(describe, "job",
           "Show a job's spec, status, throughput curve and recommendation with its reason",
           [&](Session& s) { return DescribeJobCommand(s, describe_job_id); }),
      &describe_job_id);

  // ---- register / update / deregister
  std::vector<std::string> register_files;
  leaf(
      &app, "register", "Register jobs from a YAML or JSON manifest",
      [&](Session& s) { return RegisterOrUpdate(s, register_files, /*update=*/false); },
      kManifestHelp)
      ->add_option("-f,--filename", register_files, "Manifest file; - reads stdin")
      ->type_name("FILE")
      ->required();

  std::vector<std::string> update_files;
  leaf(
      &app, "update", "Replace the specs of registered jobs from a manifest",
      [&](Session& s) { return RegisterOrUpdate(s, update_files, /*update=*/true); }, kManifestHelp)
      ->add_option("-f,--filename", update_files, "Manifest file; - reads stdin")
      ->type_name("FILE")
      ->required();

  std::string deregister_job_id;
  AddJobIdArgument(leaf(&app, "deregister", "Remove a job",
                        [&](Session& s) { return Deregister(s, deregister_job_id); }),
                   &deregister_job_id);

  // ---- watch
  std::string watch_namespace;
  int64_t watch_count = 0;
  CLI::App* watch = leaf(
      &app, "watch", "Stream recommendation changes",
      [&](Session& s) { return Watch(s, watch_namespace, watch_count); },
      "Prints every job's current recommendation (ADDED), one SYNCED marker, then each\n"
      "change (ADDED, MODIFIED, DELETED), each plan's changes followed by a PLAN_END\n"
      "marker, until the server ends the stream or --count events (markers included)\n"
      "have been printed. -o json prints one object per line; -o yaml one document per\n"
      "event. When the cluster has GPU types, the table has GPU-TYPE before REASON.");
  watch->add_option("-n,--namespace", watch_namespace, "Only jobs in this namespace");
  watch->add_option("--count", watch_count, "Stop after this many events (0 = never)")
      ->check(CLI::NonNegativeNumber);

  // ---- queue
  CLI::App* queue = group("queue", "Set the queues teams draw GPUs from");
  std::string queues_file;
  leaf(
      queue, "set", "Replace every queue with those of a queue file",
      [&](Session& s) { return SetQueuesCommand(s, queues_file); },
      "The file (YAML): queues: [{name, nominal_gpus, cohort, borrowing_limit_gpus,\n"
      "lending_limit_gpus, weight}]; see docs/queues.md. An empty list removes them all.")
      ->add_option("-f,--filename", queues_file, "Queue file; - reads stdin")
      ->type_name("FILE")
      ->required();

  // ---- capacity
  CLI::App* capacity = group("capacity", "Show or set the cluster's GPU capacity");
  CapacityFlags capacity_flags;
  CLI::App* capacity_set = leaf(
      capacity, "set", "Set the GPUs the planner may hand out",
      [&](Session& s) { return SetCapacity(s, capacity_flags); },
      "--types makes a cluster of several GPU types, as NAME=GPUS[:PER_NODE] elements,\n"
      "comma-separated: --types Tesla-T4=24:4,NVIDIA-A100-SXM4-40GB=16:8 says 24 T4s, 4\n"
      "per node, and 16 A100s, 8 per node. NAME is the nodes' nvidia.com/gpu.product\n"
      "label; PER_NODE may be left out. N may then be left out (it is the types' sum);\n"
      "--slots cannot be given with --types: --type-slots TYPE:GPUS=REPLICAS,... gives\n"
      "one type's, once per type. Without --types, any types set before go.\n"
      "--slots tells how many replicas of each size fit on the nodes' free GPUs, as\n"
      "GPUS=REPLICAS pairs, comma-separated: --slots 8=3,4=7 says three 8-GPU replicas\n"
      "or seven 4-GPU ones fit (per node, floor(free GPUs / GPUS), summed). The planner\n"
      "then never recommends more replicas of a listed size; sizes not listed are\n"
      "bounded by the total only. Without --slots, any slots set before are dropped.\n"
      "--allocatable tells all the nodes' GPUs, usable or not (at least N): capacity\n"
      "get shows them as TOTAL and N as USABLE. Without it they are not reported.");
  CLI::Option* gpus_option = capacity_set->add_option("gpus", capacity_flags.total_gpus,
                                                      "Total GPUs (0 with --types: their sum)");
  gpus_option->type_name("N");
  CLI::Option* slots_option =
      capacity_set
          ->add_option("--slots", capacity_flags.slots,
                       "Replicas per size that fit on the nodes, e.g. 8=3,4=7 (GPUS=REPLICAS,...)")
          ->type_name("GPUS=N,...")
          ->check(CLI::Validator(
              [](std::string& text) {
                google::protobuf::RepeatedPtrField<v1::ReplicaSlots> ignored;
                return ParseSlotsFlag(text, &ignored);
              },
              "", "slots"));
  auto check_types = [](std::string& text) {
    google::protobuf::RepeatedPtrField<v1::GpuType> ignored;
    std::string error = ParseGpuTypesFlag(text, &ignored);
    // CLI11 puts the flag's name before the message already.
    constexpr std::string_view kFlag = "--types: ";
    if (error.rfind(kFlag, 0) == 0) error.erase(0, kFlag.size());
    return error;
  };
  CLI::Option* types_option = capacity_set->add_option(
      "--types", capacity_flags.types,
      "GPU types: NAME=GPUS[:PER_NODE],..., e.g. Tesla-T4=24:4,NVIDIA-A100-SXM4-40GB=16:8");
  types_option->type_name("NAME=GPUS[:PER_NODE],...")
      ->check(CLI::Validator(check_types, "", "types"));
  CLI::Option* type_slots_option =
      capacity_set
          ->add_option("--type-slots", capacity_flags.type_slots,
                       "One type's slots, e.g. Tesla-T4:4=6,1=24 (TYPE:GPUS=REPLICAS,...); "
                       "once per type, with --types")
          ->type_name("TYPE:GPUS=N,...")
          ->allow_extra_args(false);  // one value per --type-slots
  // Checked at parse time, as usage errors (exit 2), before any call.
  capacity_set->parse_complete_callback(
      [gpus_option, slots_option, types_option, type_slots_option, &capacity_flags] {
        if (type_slots_option->count() > 0) {
          if (types_option->count() == 0) {
            throw CLI::ValidationError(
                "--type-slots needs --types: it gives one of those types' slots");
          }
          google::protobuf::RepeatedPtrField<v1::GpuType> types;
          ParseGpuTypesFlag(capacity_flags.types, &types);
          for (const std::string& slots : capacity_flags.type_slots) {
            if (std::string error = ParseTypeSlotsFlag(slots, &types); !error.empty())
              throw CLI::ValidationError(error);
          }
        }
        if (types_option->count() > 0 && slots_option->count() > 0) {
          throw CLI::ValidationError(
              "--slots cannot be given with --types: a replica runs on one GPU type, so slots are "
              "per type (GpuType.slots in the API)");
        }
        if (types_option->count() == 0 && gpus_option->count() == 0) {
          throw CLI::RequiredError("N (the total GPUs; it may be left out only with --types)");
        }
      });
  capacity_set
      ->add_option("--allocatable", capacity_flags.allocatable_gpus,
                   "All nodes' allocatable GPUs, usable or not (0 = not reported)")
      ->type_name("M");
  leaf(capacity, "get",
       "Show total, usable, allocated and free GPUs, each job's allocation and, when known, "
       "the replicas per size that fit on the nodes and each GPU type's GPUs",
       [&](Session& s) { return GetCapacity(s); });

  // ---- status / health / apply-status
  leaf(&app, "status",
       "Show where the server keeps its state (and its last checkpoint), its capacity and its "
       "last plan",
       [&](Session& s) { return Status(s); });
  std::string health_service;
  CLI::App* health = leaf(&app, "health", "Check the server's health (exit 0 only when SERVING)",
                          [&](Session& s) { return Health(s, health_service); });
  health->add_option("--service", health_service,
                     "One service's health, e.g. rescale.v1.JobService (with high "
                     "availability SERVING only on the leader); default: the server's");

  ApplyStatusFlags apply_flags;
  CLI::App* apply_status =
      leaf(&app, "apply-status",
           "Report the replicas a job runs now (what an operator does after scaling)",
           [&](Session& s) { return ApplyStatus(s, apply_flags); });
  AddJobIdArgument(apply_status, &apply_flags.job_id);
  apply_status->add_option("--replicas", apply_flags.replicas, "Replicas now running")->required();
  apply_status->add_flag("--suspended", apply_flags.suspended, "The job is suspended");
  apply_status
      ->add_option("--generation", apply_flags.generation,
                   "Generation of the recommendation applied; 0 = out of band")
      ->capture_default_str();

  // CLI11 wants the arguments without the program name, in reverse order.
  std::vector<std::string> reversed_args(args.rbegin(), args.rend());
  if (!reversed_args.empty()) reversed_args.pop_back();
  try {
    app.parse(std::move(reversed_args));
  } catch (const CLI::ParseError& e) {
    // --help arrives here too, with exit code 0; CLI11 prints it to `out`.
    const int code = app.exit(e, out, err);
    return code == 0 ? 0 : 2;
  }
  if (!selected) {  // Unreachable with require_subcommand, but cheap.
    err << app.help();
    return 2;
  }

  const OutputFormat format = ParseOutputFormat(global.output).value_or(OutputFormat::kTable);
  std::shared_ptr<grpc::Channel> channel = Connect(global, err);
  if (!channel) return 1;
  Session session(std::move(channel), format, global.timeout_seconds, in, out, err);
  return selected(session);
}

}  // namespace rescale::cli
