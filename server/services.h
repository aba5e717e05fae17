// The rescale.v1 gRPC services, on gRPC's callback API.
//
// Handlers are thin and stateless: convert the request, call the
// DecisionEngine, convert the reply, map errors with ToGrpcStatus. Reads
// finish inline (they take no lock of the engine's). Calls that change state
// use the engine's *Async forms and finish from the engine's completion, once
// the change is durable: no gRPC thread ever waits for the state store (or
// for a plan). The two streaming calls each have one small reactor class in
// services.cc.
#ifndef RESCALE_SERVER_SERVICES_H_
#define RESCALE_SERVER_SERVICES_H_

#include "rescale/decision_engine.h"
#include "rescale/v1/rescale.grpc.pb.h"
#include "server/audit.h"
#include "server/auth.h"
#include "server/leadership.h"
#include "server/observability.h"

namespace rescale::server {

struct ServiceLimits {
  // Samples one SampleBatch may carry.
  int max_batch_samples = 10000;
};

// With high availability (leadership non-null), calls that change state
// or carry samples are refused on a replica that does not lead:
// UNAVAILABLE, the leader's address in the message and in the trailing
// metadata kLeaderMetadataKey, so a client can call it instead. Reads are
// served by every replica.
inline constexpr char kLeaderMetadataKey[] = "rescale-leader";

// Who may call (server/auth.h) and the trail of what they changed
// (server/audit.h). Every handler authenticates and authorises its caller
// before anything else; a null `auth` makes every caller anonymous, a null
// `audit` records nothing. Both outlive the services.
struct CallSecurity {
  const Authenticator* auth = nullptr;
  AuditLog* audit = nullptr;
};

class MetricsServiceImpl final : public v1::MetricsService::CallbackService {
 public:
  // `observability` (may be null) counts every batch's samples by outcome.
  MetricsServiceImpl(DecisionEngine& engine, ServiceLimits limits,
                     const Leadership* leadership = nullptr, CallSecurity security = {},
                     ServerMetrics* observability = nullptr)
      : engine_(engine),
        limits_(limits),
        leadership_(leadership),
        security_(security),
        observability_(observability) {}

  grpc::ServerReadReactor<v1::SampleBatch>* StreamSamples(grpc::CallbackServerContext* context,
                                                          v1::IngestSummary* summary) override;
  grpc::ServerUnaryReactor* ReportSamples(grpc::CallbackServerContext* context,
                                          const v1::SampleBatch* batch,
                                          v1::IngestSummary* summary) override;

 private:
  DecisionEngine& engine_;
  const ServiceLimits limits_;
  const Leadership* const leadership_;
  const CallSecurity security_;
  ServerMetrics* const observability_;
};

class JobServiceImpl final : public v1::JobService::CallbackService {
 public:
  JobServiceImpl(DecisionEngine& engine, const Leadership* leadership = nullptr,
                 CallSecurity security = {})
      : engine_(engine), leadership_(leadership), security_(security) {}

  grpc::ServerUnaryReactor* RegisterJob(grpc::CallbackServerContext* context,
                                        const v1::RegisterJobRequest* request,
                                        v1::Job* response) override;
  grpc::ServerUnaryReactor* UpdateJob(grpc::CallbackServerContext* context,
                                      const v1::UpdateJobRequest* request,
                                      v1::Job* response) override;
  grpc::ServerUnaryReactor* GetJob(grpc::CallbackServerContext* context,
                                   const v1::GetJobRequest* request, v1::Job* response) override;
  grpc::ServerUnaryReactor* ListJobs(grpc::CallbackServerContext* context,
                                     const v1::ListJobsRequest* request,
                                     v1::ListJobsResponse* response) override;
  grpc::ServerUnaryReactor* DeregisterJob(grpc::CallbackServerContext* context,
                                          const v1::DeregisterJobRequest* request,
                                          v1::DeregisterJobResponse* response) override;

 private:
  DecisionEngine& engine_;
  const Leadership* const leadership_;
  const CallSecurity security_;
};

class RecommendationServiceImpl final : public v1::RecommendationService::CallbackService {
 public:
  RecommendationServiceImpl(DecisionEngine& engine, const Leadership* leadership = nullptr,
                            CallSecurity security = {})
      : engine_(engine), leadership_(leadership), security_(security) {}

  grpc::ServerUnaryReactor* GetRecommendation(grpc::CallbackServerContext* context,
                                              const v1::GetRecommendationRequest* request,
                                              v1::Recommendation* response) override;
  grpc::ServerUnaryReactor* ListRecommendations(grpc::CallbackServerContext* context,
                                                const v1::ListRecommendationsRequest* request,
                                                v1::ListRecommendationsResponse* response) override;
  grpc::ServerWriteReactor<v1::RecommendationEvent>* WatchRecommendations(
      grpc::CallbackServerContext* context,
      const v1::WatchRecommendationsRequest* request) override;
  grpc::ServerUnaryReactor* ReportApplied(grpc::CallbackServerContext* context,
                                          const v1::ReportAppliedRequest* request,
                                          v1::ReportAppliedResponse* response) override;

 private:
  DecisionEngine& engine_;
  const Leadership* const leadership_;
  const CallSecurity security_;
};

class ClusterServiceImpl final : public v1::ClusterService::CallbackService {
 public:
  ClusterServiceImpl(DecisionEngine& engine, const Leadership* leadership = nullptr,
                     CallSecurity security = {})
      : engine_(engine), leadership_(leadership), security_(security) {}

  grpc::ServerUnaryReactor* SetCapacity(grpc::CallbackServerContext* context,
                                        const v1::SetCapacityRequest* request,
                                        v1::Cluster* response) override;
  grpc::ServerUnaryReactor* GetCluster(grpc::CallbackServerContext* context,
                                       const v1::GetClusterRequest* request,
                                       v1::Cluster* response) override;
  grpc::ServerUnaryReactor* SetQueues(grpc::CallbackServerContext* context,
                                      const v1::SetQueuesRequest* request,
                                      v1::ListQueuesResponse* response) override;
  grpc::ServerUnaryReactor* ListQueues(grpc::CallbackServerContext* context,
                                       const v1::ListQueuesRequest* request,
                                       v1::ListQueuesResponse* response) override;

 private:
  DecisionEngine& engine_;
  const Leadership* const leadership_;
  const CallSecurity security_;
};

}  // namespace rescale::server

#endif  // RESCALE_SERVER_SERVICES_H_
