// Kueue's objects as rescale-adapter reads them, free of threads and RPCs
// (issue 33; docs/kueue.md). Kueue (kueue.x-k8s.io) divides a cluster's
// quota between ClusterQueues; a job names a LocalQueue (namespaced) with
// the label kueue.x-k8s.io/queue-name, and the LocalQueue names its
// ClusterQueue. The adapter mirrors every ClusterQueue as a Rescale queue
// (rescale/queues.h) and puts each Kueue-labelled job in its ClusterQueue's
// queue, with JobSpec.admission "kueue": Kueue admits it, not rescaled.
//
// Versions: kueue.x-k8s.io/v1beta2 (storage since Kueue v0.16, served since
// v0.15) and v1beta1 (storage up to v0.15, still served, deprecated, by
// v0.16-v0.19). Checked against kubernetes-sigs/kueue v0.19.2
// (8eab68778fc1), apis/kueue/v1beta2/clusterqueue_types.go and
// localqueue_types.go, and the CRDs in config/components/crd/bases:
//   ClusterQueue spec.cohortName (v1beta1: spec.cohort),
//     spec.resourceGroups[].flavors[].resources[] {name, nominalQuota,
//     borrowingLimit, lendingLimit} (quantities, int-or-string),
//     spec.fairSharing.weight (quantity, default 1);
//   LocalQueue spec.clusterQueue (both versions).
// A queue's GPUs are the nvidia.com/gpu entries summed over its flavors
// (Rescale plans GPUs of one kind); a limit unset on any flavor is unset
// for the sum (no limit / everything lendable), as Kueue reads nil.
#ifndef RESCALE_CLIENT_ADAPTER_KUEUE_H_
#define RESCALE_CLIENT_ADAPTER_KUEUE_H_

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/adapter/pytorchjob.h"
#include "rescale/queues.h"

namespace rescale::adapter {

// The label a job names its LocalQueue with (Kueue's QueueLabel,
// pkg/controller/constants/constants.go; the annotation form was removed
// in v0.15).
inline constexpr char kKueueQueueLabel[] = "kueue.x-k8s.io/queue-name";
inline const ApiVersion kKueueV1beta2{"kueue.x-k8s.io", "v1beta2"};
inline const ApiVersion kKueueV1beta1{"kueue.x-k8s.io", "v1beta1"};
// The versions tried, newest first.
inline const std::vector<ApiVersion> kKueueVersions = {kKueueV1beta2, kKueueV1beta1};

// A Kubernetes resource.Quantity (apimachinery pkg/api/resource): a JSON
// number, or a string of a decimal (optionally signed, with an exponent
// "e3"/"E3") and an optional suffix (m, k, M, G, T, P, E, Ki, Mi, Gi, Ti,
// Pi, Ei). nullopt for anything else.
std::optional<double> ParseQuantity(const nlohmann::json& value);

// A ClusterQueue of either version as a Rescale queue. INVALID_ARGUMENT
// names the object and the field: a name that is not a DNS-1123 label
// (Rescale's queue names are), a quantity that does not parse, a negative
// one. GPUs are whole: a fractional quota is rounded down.
absl::StatusOr<QueueSpec> ParseClusterQueue(const nlohmann::json& object);

// A LocalQueue: "namespace/name" and the ClusterQueue it points to.
struct LocalQueueRef {
  std::string key;  // "namespace/name"
  std::string cluster_queue;
};
absl::StatusOr<LocalQueueRef> ParseLocalQueue(const nlohmann::json& object);

// The queue set to send: the ClusterQueues by name, in name order, with
// ValidateQueues' checks on the set.
absl::StatusOr<std::vector<QueueSpec>> QueueSetOf(
    const std::map<std::string, QueueSpec>& cluster_queues);

}  // namespace rescale::adapter

#endif  // RESCALE_CLIENT_ADAPTER_KUEUE_H_
