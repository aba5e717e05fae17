// KubeClient: the slice of the Kubernetes REST API that rescale-adapter uses
// (GET, LIST, WATCH, JSON merge PATCH and POST-create of arbitrary
// resources by path),
// and KubeConfig, the connection settings it needs.
//
// The controller (client/adapter/adapter.h) talks only to this interface, so the
// decisions it makes do not depend on the transport; the one implementation
// users run is CurlKubeClient (client/adapter/curl_kube_client.h), and the tests run
// that same implementation against an in-process fake API server.
//
// HTTP status codes map to absl codes in one place (StatusFromHttp):
//   404 -> NOT_FOUND, 409 -> ABORTED (resourceVersion conflict: re-GET and
//   retry), 410 -> OUT_OF_RANGE (resourceVersion too old: relist),
//   401/403 -> UNAUTHENTICATED/PERMISSION_DENIED, 422/400 -> INVALID_ARGUMENT,
//   429/5xx and transport errors -> UNAVAILABLE (retry with backoff).
#ifndef RESCALE_CLIENT_ADAPTER_KUBE_CLIENT_H_
#define RESCALE_CLIENT_ADAPTER_KUBE_CLIENT_H_

#include <atomic>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace rescale::adapter {

// Where the API server is and how to authenticate. Built from a kubeconfig
// or the in-cluster service account (client/adapter/kube_config.h).
struct KubeConfig {
  // "https://host:port". "http://" is accepted only because tests run a
  // plaintext fake server; it is never chosen implicitly (see docs/kubernetes.md).
  std::string server;
  // CA bundle to verify the server with: PEM file, or PEM bytes (from
  // certificate-authority-data). Both empty = the system's CAs.
  std::string ca_file;
  std::string ca_data;
  // Bearer token: literal, or a file re-read every `token_refresh` seconds
  // (projected service-account tokens rotate).
  std::string token;
  std::string token_file;
  // Client certificate and key: PEM files or PEM bytes.
  std::string client_cert_file;
  std::string client_cert_data;
  std::string client_key_file;
  std::string client_key_data;
  // Namespace of the current context or the service account; informational.
  std::string default_namespace;
};

// Which objects of a collection a LIST or WATCH returns: the API server's
// labelSelector and fieldSelector parameters (empty = no constraint). With
// either, a WATCH reports an object that stops matching as DELETED and one
// that starts matching as ADDED, as the API server's watch cache does.
struct Selectors {
  std::string labels;
  std::string fields;
};

// One watch event: type is ADDED, MODIFIED, DELETED, BOOKMARK or ERROR.
struct WatchEvent {
  std::string type;
  nlohmann::json object;
};

class KubeClient {
 public:
  virtual ~KubeClient() = default;

  // GET `path` (e.g. /apis/kubeflow.org/v1/namespaces/ns/pytorchjobs/x) and
  // its decoded JSON body. Errors name the path and the HTTP status.
  virtual absl::StatusOr<nlohmann::json> Get(const std::string& path) = 0;

  // LIST the objects of a collection that `selectors` select. Returns the
  // List object (items and metadata.resourceVersion).
  virtual absl::StatusOr<nlohmann::json> List(const std::string& path,
                                              const Selectors& selectors) = 0;

  // PATCH `path` with `body` sent as `content_type` (the adapter only sends
  // application/merge-patch+json). Returns the updated object.
  virtual absl::StatusOr<nlohmann::json> Patch(const std::string& path,
                                               const std::string& content_type,
                                               const nlohmann::json& body) = 0;

  // POST `body` (application/json) to the collection at `path`, creating an
  // object (the adapter creates only Events). Returns the created object,
  // with the name the server generated for a metadata.generateName.
  virtual absl::StatusOr<nlohmann::json> Post(const std::string& path,
                                              const nlohmann::json& body) = 0;

  // WATCH a collection from `resource_version` with bookmarks, calling
  // `on_event` for each event as it arrives, until the server ends the
  // stream (returns OK), `on_event` returns false (OK), `stop` becomes true
  // (CANCELLED), or an error (HTTP 410 -> OUT_OF_RANGE, others as above).
  // `stop` is polled; Cancel() wakes a blocked watch at once.
  virtual absl::Status Watch(const std::string& path, const Selectors& selectors,
                             const std::string& resource_version,
                             const std::function<bool(const WatchEvent&)>& on_event,
                             const std::atomic<bool>& stop) = 0;

  // Wakes every Watch blocked in this client so it re-checks its `stop`.
  // Thread-safe; cheap when nothing is blocked.
  virtual void Cancel() = 0;
};

// The absl status for an HTTP response that is not 2xx. `what` names the
// request, e.g. "PATCH /apis/.../pytorchjobs/x"; `body` is the response
// body, whose Status message (if JSON) is quoted.
absl::Status StatusFromHttp(long http_code, const std::string& what, const std::string& body);

}  // namespace rescale::adapter

#endif  // RESCALE_CLIENT_ADAPTER_KUBE_CLIENT_H_
