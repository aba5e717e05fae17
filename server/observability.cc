// rescaled's Prometheus metrics: the registry's families, the gRPC
// interceptor, the scrape-time engine collector and the exposer (see
// server/observability.h).
#include "server/observability.h"

#include <google/protobuf/descriptor.h>
#include <prometheus/collectable.h>
#include <prometheus/counter.h>
#include <prometheus/exposer.h>
#include <prometheus/histogram.h>
#include <prometheus/metric_family.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <exception>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "rescale/mutex.h"

namespace rescale::server {
namespace {

using grpc::experimental::InterceptionHookPoints;
using grpc::experimental::ServerRpcInfo;

// Unary calls take well under a millisecond, plans up to seconds: both
// histograms start finer than Prometheus' default buckets (5 ms).
const prometheus::Histogram::BucketBoundaries kCallBuckets = {
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
    0.05,   0.1,     0.25,   0.5,   1,      2.5,   5,    10};
const prometheus::Histogram::BucketBoundaries kPlanBuckets = {
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};

// grpc_code values as go-grpc-prometheus writes them: Go's
// codes.Code.String() (google.golang.org/grpc/codes/code_string.go), so
// dashboards and alerts written for Go services work unchanged.
constexpr int kCodeCount = 17;
constexpr std::array<std::string_view, kCodeCount> kGoCodeNames = {
    "OK",       "Canceled",       "Unknown",          "InvalidArgument",   "DeadlineExceeded",
    "NotFound", "AlreadyExists",  "PermissionDenied", "ResourceExhausted", "FailedPrecondition",
    "Aborted",  "OutOfRange",     "Unimplemented",    "Internal",          "Unavailable",
    "DataLoss", "Unauthenticated"};

// The sample stream, which its reactor records (ServerMetrics::StreamCall).
constexpr char kStreamSamplesMethod[] = "/rescale.v1.MetricsService/StreamSamples";

std::string_view GrpcTypeName(ServerRpcInfo::Type type) {
  switch (type) {
    case ServerRpcInfo::Type::UNARY:
      return "unary";
    case ServerRpcInfo::Type::CLIENT_STREAMING:
      return "client_stream";
    case ServerRpcInfo::Type::SERVER_STREAMING:
      return "server_stream";
    case ServerRpcInfo::Type::BIDI_STREAMING:
      return "bidi_stream";
  }
  return "unknown";
}

}  // namespace

// One method's grpc_server_* series, found once per method (then per
// call: one map lookup under a shared lock, not a family lookup with label
// hashing).
struct GrpcMethodMetrics {
  prometheus::Counter* started = nullptr;
  prometheus::Histogram* handling = nullptr;
  prometheus::Family<prometheus::Counter>* handled_family = nullptr;
  prometheus::Labels labels;
  // Created on a code's first use: 17 codes x every method would be
  // mostly zeros.
  std::array<std::atomic<prometheus::Counter*>, kCodeCount> handled{};

  void Handled(int code) {
    if (code < 0 || code >= kCodeCount) code = 2;  // Unknown
    prometheus::Counter* counter = handled[code].load(std::memory_order_acquire);
    if (counter == nullptr) {
      prometheus::Labels with_code = labels;
      with_code["grpc_code"] = std::string(kGoCodeNames[code]);
      // Family::Add returns the existing series for the same labels, so
      // two threads racing here get the same counter.
      counter = &handled_family->Add(with_code);
      handled[code].store(counter, std::memory_order_release);
    }
    counter->Increment();
  }
};

// The grpc_server_* families and the methods seen so far.
class ServerMetrics::GrpcMetrics {
 public:
  using Method = GrpcMethodMetrics;

  explicit GrpcMetrics(prometheus::Registry& registry)
      : started_(prometheus::BuildCounter()
                     .Name("grpc_server_started_total")
                     .Help("Total number of RPCs started on the server.")
                     .Register(registry)),
        handled_(prometheus::BuildCounter()
                     .Name("grpc_server_handled_total")
                     .Help("Total number of RPCs completed on the server, regardless of success "
                           "or failure.")
                     .Register(registry)),
        handling_(prometheus::BuildHistogram()
                      .Name("grpc_server_handling_seconds")
                      .Help("Histogram of response latency (seconds) of gRPC that had been "
                            "application-level handled by the server.")
                      .Register(registry)) {}

  Method* Find(const char* path, ServerRpcInfo::Type type) {
    if (path == nullptr) path = "";
    {
      // Every call looks its method up: readers share the lock, so calls
      // on many threads do not queue here once each method was seen.
      ReaderMutexLock lock(mu_);
      auto it = methods_.find(path);
      if (it != methods_.end()) return it->second.get();
    }
    WriterMutexLock lock(mu_);
    auto it = methods_.find(path);
    if (it != methods_.end()) return it->second.get();
    auto [service, method] = Split(path);
    auto entry = std::make_unique<Method>();
    entry->labels = {{"grpc_type", std::string(GrpcTypeName(type))},
                     {"grpc_service", service},
                     {"grpc_method", method}};
    entry->started = &started_.Add(entry->labels);
    entry->handling = &handling_.Add(entry->labels, kCallBuckets);
    entry->handled_family = &handled_;
    Method* found = entry.get();
    // Unknown paths share one entry (below), so the map stays bounded by
    // the served methods whatever clients send.
    if (service == "unknown") {
      auto [unknown, inserted] = methods_.try_emplace("", std::move(entry));
      return unknown->second.get();
    }
    methods_.emplace(path, std::move(entry));
    return found;
  }

 private:
  // "/pkg.Service/Method" -> (pkg.Service, Method) when the generated
  // descriptors know that method; ("unknown", "unknown") otherwise, so a
  // client cannot grow the label set by calling made-up methods.
  static std::pair<std::string, std::string> Split(std::string_view path) {
    if (path.starts_with('/')) path.remove_prefix(1);
    const size_t slash = path.find('/');
    if (slash != std::string_view::npos) {
      const std::string service(path.substr(0, slash));
      const std::string method(path.substr(slash + 1));
      const google::protobuf::ServiceDescriptor* descriptor =
          google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(service);
      if (descriptor != nullptr && descriptor->FindMethodByName(method) != nullptr) {
        return {service, method};
      }
    }
    return {"unknown", "unknown"};
  }

  prometheus::Family<prometheus::Counter>& started_;
  prometheus::Family<prometheus::Counter>& handled_;
  prometheus::Family<prometheus::Histogram>& handling_;
  SharedMutex mu_;
  absl::flat_hash_map<std::string, std::unique_ptr<Method>> methods_ ABSL_GUARDED_BY(mu_);
};

namespace {

// One per call: created when the call starts (the clock starts then),
// records the status the server sends. Every other hook just proceeds.
class CallInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit CallInterceptor(GrpcMethodMetrics* method)
      : method_(method), started_(std::chrono::steady_clock::now()) {
    method_->started->Increment();
  }
  ~CallInterceptor() override {
    // A call torn down without sending a status (the client went away
    // first) counts as cancelled, as in go-grpc-prometheus.
    if (!recorded_) Record(static_cast<int>(grpc::StatusCode::CANCELLED));
  }

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS)) {
      Record(static_cast<int>(methods->GetSendStatus().error_code()));
    }
    methods->Proceed();
  }

 private:
  void Record(int code) {
    recorded_ = true;
    method_->handling->Observe(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count());
    method_->Handled(code);
  }

  GrpcMethodMetrics* const method_;
  const std::chrono::steady_clock::time_point started_;
  bool recorded_ = false;
};

class InterceptorFactory final : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit InterceptorFactory(std::shared_ptr<ServerMetrics::GrpcMetrics> metrics)
      : metrics_(std::move(metrics)) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(ServerRpcInfo* info) override {
    // With any interceptor on a call, gRPC finishes each of its received
    // messages through an extra empty batch on the completion queue
    // (call_op_set.h, ContinueFinalizeResultAfterInterception): overhead
    // per batch on the sample stream, the hottest path, tens of thousands
    // of batches a second. Its reactor records it instead, once per
    // stream (ServerMetrics::StreamCall).
    if (info->method() != nullptr && std::string_view(info->method()) == kStreamSamplesMethod) {
      return nullptr;
    }
    return new CallInterceptor(metrics_->Find(info->method(), info->type()));
  }

 private:
  const std::shared_ptr<ServerMetrics::GrpcMetrics> metrics_;
};

prometheus::MetricFamily GaugeFamily(std::string name, std::string help) {
  prometheus::MetricFamily family;
  family.name = std::move(name);
  family.help = std::move(help);
  family.type = prometheus::MetricType::Gauge;
  return family;
}

void AddGauge(prometheus::MetricFamily& family, double value,
              std::vector<prometheus::ClientMetric::Label> labels = {}) {
  prometheus::ClientMetric metric;
  metric.label = std::move(labels);
  metric.gauge.value = value;
  family.metric.push_back(std::move(metric));
}

}  // namespace

// The engine's state, read when Prometheus scrapes rather than pushed on
// every change: it costs nothing between scrapes. Registered with the
// exposer beside the registry.
class ServerMetrics::EngineCollector final : public prometheus::Collectable {
 public:
  explicit EngineCollector(const DecisionEngine* engine) : engine_(engine) {}

  std::vector<prometheus::MetricFamily> Collect() const override {
    const ClusterView cluster = engine_->GetCluster();
    const JobStateCounts jobs = engine_->CountJobStates();
    std::vector<prometheus::MetricFamily> out;

    prometheus::MetricFamily states = GaugeFamily(
        "rescale_jobs",
        "Registered jobs by state: running (recommended replicas), waiting (never ran), "
        "suspended (ran before, recommended none now).");
    AddGauge(states, static_cast<double>(jobs.running), {{"state", "running"}});
    AddGauge(states, static_cast<double>(jobs.waiting), {{"state", "waiting"}});
    AddGauge(states, static_cast<double>(jobs.suspended), {{"state", "suspended"}});
    out.push_back(std::move(states));

    // Absent while the capacity is unknown (no --capacity_gpus, no
    // SetCapacity yet): unknown is not 0.
    prometheus::MetricFamily capacity =
        GaugeFamily("rescale_gpus_capacity", "GPUs the planner may hand out.");
    if (cluster.total_gpus.has_value()) AddGauge(capacity, *cluster.total_gpus);
    out.push_back(std::move(capacity));

    // Absent while not reported (a fixed capacity): not reported is not 0.
    // Minus rescale_gpus_capacity, it is the GPUs the planner cannot use.
    prometheus::MetricFamily allocatable = GaugeFamily(
        "rescale_gpus_allocatable",
        "GPUs allocatable on all nodes, before those the planner cannot use are taken out.");
    if (cluster.allocatable_gpus > 0) AddGauge(allocatable, cluster.allocatable_gpus);
    out.push_back(std::move(allocatable));

    prometheus::MetricFamily allocated =
        GaugeFamily("rescale_gpus_allocated", "GPUs the current recommendations allocate.");
    AddGauge(allocated, cluster.allocated_gpus);
    out.push_back(std::move(allocated));

    prometheus::MetricFamily gap = GaugeFamily(
        "rescale_plan_optimality_gap",
        "The last plan's relative gap between its utility and the upper bound (0 = optimal).");
    AddGauge(gap, cluster.optimality_gap);
    out.push_back(std::move(gap));

    prometheus::MetricFamily watchers =
        GaugeFamily("rescale_watchers", "Open WatchRecommendations streams.");
    AddGauge(watchers, engine_->watcher_count());
    out.push_back(std::move(watchers));

    prometheus::MetricFamily leading = GaugeFamily(
        "rescale_leading", "1 when this rescaled plans (leads, or runs without HA), else 0.");
    AddGauge(leading, engine_->leading() ? 1 : 0);
    out.push_back(std::move(leading));
    return out;
  }

 private:
  const DecisionEngine* const engine_;
};

ServerMetrics::ServerMetrics() : registry_(std::make_shared<prometheus::Registry>()) {
  prometheus::Registry& registry = *registry_;
  samples_accepted_ = &prometheus::BuildCounter()
                           .Name("rescale_samples_accepted_total")
                           .Help("Step samples stored.")
                           .Register(registry)
                           .Add({});
  samples_duplicate_ =
      &prometheus::BuildCounter()
           .Name("rescale_samples_duplicate_total")
           .Help(
               "Valid step samples not stored: their pod already had one with the same or a "
               "later step (a resend).")
           .Register(registry)
           .Add({});
  auto& rejected = prometheus::BuildCounter()
                       .Name("rescale_samples_rejected_total")
                       .Help(
                           "Step samples rejected, by reason: invalid (a field out of range), "
                           "unknown_job, limit (a store limit: jobs, pods, sizes), "
                           "batch_too_large (--max_batch_samples), permission_denied (not the "
                           "caller's namespace).")
                       .Register(registry);
  // Every reason from the start, so rate() sees the first rejection.
  rejected_invalid_ = &rejected.Add({{"reason", "invalid"}});
  rejected_unknown_job_ = &rejected.Add({{"reason", "unknown_job"}});
  rejected_limit_ = &rejected.Add({{"reason", "limit"}});
  rejected_batch_too_large_ = &rejected.Add({{"reason", "batch_too_large"}});
  rejected_permission_denied_ = &rejected.Add({{"reason", "permission_denied"}});
  plan_duration_ = &prometheus::BuildHistogram()
                        .Name("rescale_plan_duration_seconds")
                        .Help(
                            "Time a plan took: copying the changed jobs, fitting, planning, "
                            "publishing (the checkpoint after it is not included).")
                        .Register(registry)
                        .Add({}, kPlanBuckets);
  plans_unpublished_ =
      &prometheus::BuildCounter()
           .Name("rescale_plans_unpublished_total")
           .Help("Plans not published because the state store refused their generations.")
           .Register(registry)
           .Add({});
  auto& changes = prometheus::BuildCounter()
                      .Name("rescale_recommendation_changes_total")
                      .Help(
                          "Recommendations whose target (replicas, suspend) a plan changed, new "
                          "jobs' first ones included, by the new recommendation's action.")
                      .Register(registry);
  const std::array<std::pair<Action, const char*>, 5> actions = {
      {{Action::kHold, "hold"},
       {Action::kScaleUp, "scale_up"},
       {Action::kScaleDown, "scale_down"},
       {Action::kSuspend, "suspend"},
       {Action::kResume, "resume"}}};
  for (const auto& [action, name] : actions) {
    changes_by_action_[static_cast<size_t>(action)] = &changes.Add({{"action", name}});
  }
  grpc_ = std::make_shared<GrpcMetrics>(registry);
}

ServerMetrics::~ServerMetrics() { StopServing(); }

absl::Status ServerMetrics::Serve(const std::string& listen) {
  if (exposer_ != nullptr) return absl::FailedPreconditionError("metrics are already served");
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos || colon + 1 == listen.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--metrics_listen \"", listen, "\" is not host:port (empty turns metrics off)"));
  }
  try {
    // Two threads: one scrape at a time is the norm, a second keeps a
    // slow client from blocking Prometheus.
    exposer_ = std::make_unique<prometheus::Exposer>(listen, 2);
  } catch (const std::exception& error) {
    return absl::UnavailableError(absl::StrCat("cannot serve metrics on ", listen,
                                               " (--metrics_listen): address invalid or in use (",
                                               error.what(), ")"));
  }
  const std::vector<int> ports = exposer_->GetListeningPorts();
  if (ports.empty() || ports.front() <= 0) {
    exposer_.reset();
    return absl::UnavailableError(
        absl::StrCat("cannot serve metrics on ", listen, " (--metrics_listen): no port was bound"));
  }
  port_ = ports.front();
  exposer_->RegisterCollectable(registry_);
  if (engine_collector_ != nullptr) exposer_->RegisterCollectable(engine_collector_);
  return absl::OkStatus();
}

void ServerMetrics::WatchEngine(const DecisionEngine* engine) {
  engine_collector_ = std::make_shared<EngineCollector>(engine);
  if (exposer_ != nullptr) exposer_->RegisterCollectable(engine_collector_);
}

void ServerMetrics::StopServing() {
  // The exposer's destructor stops civetweb and joins its threads, so no
  // scrape runs once this returns.
  exposer_.reset();
}

void ServerMetrics::RecordIngest(const IngestResult& result) {
  // Only non-zero adds: each is an atomic read-modify-write on a shared
  // cache line, and most batches have nothing to reject.
  if (result.accepted > 0) samples_accepted_->Increment(static_cast<double>(result.accepted));
  if (result.duplicates > 0) samples_duplicate_->Increment(static_cast<double>(result.duplicates));
  if (result.rejected > 0) {
    const uint64_t classified =
        result.rejected_for_limits + result.rejected_unknown_job + result.rejected_for_permission;
    const uint64_t other = result.rejected - std::min(result.rejected, classified);
    if (result.rejected_for_limits > 0) {
      rejected_limit_->Increment(static_cast<double>(result.rejected_for_limits));
    }
    if (result.rejected_unknown_job > 0) {
      rejected_unknown_job_->Increment(static_cast<double>(result.rejected_unknown_job));
    }
    if (result.rejected_for_permission > 0) {
      rejected_permission_denied_->Increment(static_cast<double>(result.rejected_for_permission));
    }
    if (other > 0) rejected_invalid_->Increment(static_cast<double>(other));
  }
}

void ServerMetrics::RecordBatchTooLarge(uint64_t samples) {
  rejected_batch_too_large_->Increment(static_cast<double>(samples));
}

void ServerMetrics::OnPlan(const PlanStats& stats) {
  plan_duration_->Observe(absl::ToDoubleSeconds(stats.duration));
  if (!stats.published) {
    plans_unpublished_->Increment();
    return;
  }
  for (size_t action = 0; action < kActionCount; ++action) {
    if (stats.changes_by_action[action] > 0 && changes_by_action_[action] != nullptr) {
      changes_by_action_[action]->Increment(static_cast<double>(stats.changes_by_action[action]));
    }
  }
}

std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
ServerMetrics::InterceptorFactories() {
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> factories;
  factories.push_back(std::make_unique<InterceptorFactory>(grpc_));
  return factories;
}

ServerMetrics::StreamCall::StreamCall(ServerMetrics* metrics)
    : method_(metrics == nullptr ? nullptr
                                 : metrics->grpc_->Find(kStreamSamplesMethod,
                                                        ServerRpcInfo::Type::CLIENT_STREAMING)),
      started_(std::chrono::steady_clock::now()) {
  if (method_ != nullptr) method_->started->Increment();
}

ServerMetrics::StreamCall::~StreamCall() {
  // Torn down without a status: the client went away (as the interceptor).
  Finish(grpc::Status(grpc::StatusCode::CANCELLED, ""));
}

void ServerMetrics::StreamCall::Finish(const grpc::Status& status) {
  if (method_ == nullptr || finished_) return;
  finished_ = true;
  method_->handling->Observe(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count());
  method_->Handled(static_cast<int>(status.error_code()));
}

std::string ServerMetrics::Serialize() const {
  std::vector<prometheus::MetricFamily> families = registry_->Collect();
  if (engine_collector_ != nullptr) {
    for (prometheus::MetricFamily& family : engine_collector_->Collect()) {
      families.push_back(std::move(family));
    }
  }
  return prometheus::TextSerializer().Serialize(families);
}

}  // namespace rescale::server
