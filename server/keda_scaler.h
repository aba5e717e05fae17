// KEDA's external scaler (proto/externalscaler/externalscaler.proto), served
// by rescaled next to rescale.v1 so that a cluster running KEDA can scale a
// job to Rescale's recommendations without rescale-adapter.
//
// A ScaledObject names its job with the trigger metadata `job:
// NAMESPACE/NAME`, else the ScaledObject's own namespace and name are the
// job's. It gets one metric, `rescale-replicas` (renamed by the metadata
// `metricName`), with target 1 and value = the recommended replicas (0 when
// suspended), in both the integer and the float fields: KEDA creates an HPA
// with an AverageValue target, so desired = ceil(value / target) = the
// recommendation exactly (up to the HPA's tolerance; see docs/kubernetes.md). The
// job is active when the recommendation runs it (replicas > 0, not
// suspended); StreamIsActive (trigger type external-push) sends the
// activity at once, then again each time it changes.
//
// The batch of a goodput-planned job (Recommendation.local_batch_size,
// accumulation_steps) is not served: KEDA's contract carries metric names
// and values only, nothing KEDA writes to the workload, and a second metric
// would not do either, as the HPA scales to the largest of its metrics.
// rescale-adapter carries the batch, as annotations of the change it
// patches (client/adapter/pytorchjob.h).
//
// Calls are authorised as reads of the job's namespace (role viewer or
// above). KEDA authenticates with a client certificate (TriggerAuthentication
// caCert, tlsClientCert, tlsClientKey): it sends no bearer token. Every
// replica answers, as for rescale.v1's reads.
#ifndef RESCALE_SERVER_KEDA_SCALER_H_
#define RESCALE_SERVER_KEDA_SCALER_H_

#include <string>

#include "absl/status/statusor.h"
#include "externalscaler/externalscaler.grpc.pb.h"
#include "rescale/decision_engine.h"
#include "rescale/types.h"
#include "server/services.h"

namespace rescale::server {

// The metric served when the trigger metadata does not name one.
inline constexpr char kDefaultKedaMetricName[] = "rescale-replicas";
// Trigger metadata keys.
inline constexpr char kKedaJobKey[] = "job";
inline constexpr char kKedaMetricNameKey[] = "metricName";

// The job a ScaledObject scales: metadata job, else namespace/name.
// INVALID_ARGUMENT naming the field when neither gives a valid job id.
absl::StatusOr<std::string> KedaJobId(const externalscaler::ScaledObjectRef& ref);
// The metric's name for this ScaledObject.
std::string KedaMetricName(const externalscaler::ScaledObjectRef& ref);
// Whether KEDA should keep the job's workload up: the recommendation runs it.
bool KedaActive(const Recommendation& recommendation);
// The metric's value: the replicas the recommendation runs, 0 when suspended.
int64_t KedaReplicas(const Recommendation& recommendation);

class ExternalScalerImpl final : public externalscaler::ExternalScaler::CallbackService {
 public:
  ExternalScalerImpl(DecisionEngine& engine, CallSecurity security = {})
      : engine_(engine), security_(security) {}

  grpc::ServerUnaryReactor* IsActive(grpc::CallbackServerContext* context,
                                     const externalscaler::ScaledObjectRef* ref,
                                     externalscaler::IsActiveResponse* response) override;
  grpc::ServerWriteReactor<externalscaler::IsActiveResponse>* StreamIsActive(
      grpc::CallbackServerContext* context, const externalscaler::ScaledObjectRef* ref) override;
  grpc::ServerUnaryReactor* GetMetricSpec(grpc::CallbackServerContext* context,
                                          const externalscaler::ScaledObjectRef* ref,
                                          externalscaler::GetMetricSpecResponse* response) override;
  grpc::ServerUnaryReactor* GetMetrics(grpc::CallbackServerContext* context,
                                       const externalscaler::GetMetricsRequest* request,
                                       externalscaler::GetMetricsResponse* response) override;

 private:
  DecisionEngine& engine_;
  const CallSecurity security_;
};

}  // namespace rescale::server

#endif  // RESCALE_SERVER_KEDA_SCALER_H_
