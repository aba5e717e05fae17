// Loading KubeConfig: from a kubeconfig file (out of cluster) or from the
// service-account mount and environment (in cluster). Pure parsing; the
// transport lives in client/adapter/curl_kube_client.h.
#ifndef RESCALE_CLIENT_ADAPTER_KUBE_CONFIG_H_
#define RESCALE_CLIENT_ADAPTER_KUBE_CONFIG_H_

#include <string>

#include "absl/status/statusor.h"
#include "client/adapter/kube_client.h"

namespace rescale::adapter {

// Parses a kubeconfig: the current context (or `context` when not empty) ->
// its cluster's server, certificate-authority(-data), and its user's token,
// tokenFile, client-certificate(-data) and client-key(-data). Relative file
// paths are resolved against the kubeconfig's directory, as kubectl does.
// Errors name the file and the missing or malformed field. Rejects
// insecure-skip-tls-verify: true (TLS is always verified).
absl::StatusOr<KubeConfig> LoadKubeconfig(const std::string& path, const std::string& context = "");

// Same, from YAML text; `base_dir` resolves relative paths.
absl::StatusOr<KubeConfig> ParseKubeconfig(const std::string& yaml_text,
                                           const std::string& base_dir,
                                           const std::string& context = "");

// The in-cluster service account: https://$KUBERNETES_SERVICE_HOST:
// $KUBERNETES_SERVICE_PORT, token file and ca.crt under `mount_dir`
// (default /var/run/secrets/kubernetes.io/serviceaccount). NOT_FOUND when
// not running in a pod (environment unset or token missing).
absl::StatusOr<KubeConfig> InClusterConfig(
    const std::string& mount_dir = "/var/run/secrets/kubernetes.io/serviceaccount");

// Same, with the service host and port given (what InClusterConfig reads
// from the environment); tests use it instead of changing the environment.
absl::StatusOr<KubeConfig> InClusterConfigFrom(const std::string& host, const std::string& port,
                                               const std::string& mount_dir);

// The kubeconfig path to use when --kubeconfig is not given: $KUBECONFIG
// (its first entry), else ~/.kube/config. Empty when neither is known.
std::string DefaultKubeconfigPath();

}  // namespace rescale::adapter

#endif  // RESCALE_CLIENT_ADAPTER_KUBE_CONFIG_H_
