// FakeKubeApi: an in-process fake Kubernetes API server for the adapter's
// tests (never linked into a binary users run).
//
// It serves real HTTP on 127.0.0.1 (an ephemeral port) with cpp-httplib and
// keeps PyTorchJobs (kubeflow.org/v1, training.kubedl.io/v1alpha1),
// TrainJobs (trainer.kubeflow.org/v1alpha1), PodGroups
// (scheduling.x-k8s.io/v1alpha1, scheduling.volcano.sh/v1beta1), Nodes and
// Pods (/api/v1), Events (events.k8s.io/v1) and Kueue's ClusterQueues and
// LocalQueues (kueue.x-k8s.io, at the version they were put with) as JSON, with one resourceVersion
// counter as etcd would, and a metadata.uid for every object created. It
// implements what the adapter relies on, with the API server's semantics:
// GET, LIST (labelSelector k=v[,k=v]; fieldSelector f=v, f==v, f!=v on the
// fields the API server makes selectable, 400 for others), WATCH (?watch=true&
// resourceVersion=..., newline-delimited events, BOOKMARKs on request, 410
// Gone for a compacted resourceVersion, as an HTTP status or an ERROR event),
// JSON merge PATCH (RFC 7386, application/merge-patch+json only; 409 when the
// patch's metadata.resourceVersion is stale), POST to a namespaced
// collection (application/json; metadata.generateName -> a generated name;
// 201 Created with the stored object; 409 AlreadyExists; 400 when the
// body's namespace is not the path's), and the scale subresource of
// PyTorchJobs only: TrainJobs, as their CRD declares, have the status
// subresource alone, so .../trainjobs/x/scale is 404, and a PATCH that
// changes a TrainJob's spec.trainer is refused 422 like the CRD's
// `self == oldSelf` rule. A new Event is validated as the API server
// validates an events.k8s.io/v1 Event (422 naming the field). Every request is recorded (method,
// path, query, content type, body) so tests can assert on exactly what was sent, and tests can wait
// for a request or a state without sleeping.
//
// Stop() and Start() restart the server on the same port with its objects
// kept, like an API server restarting in front of etcd.
//
// Thread safety: all methods are thread-safe.
#ifndef RESCALE_TESTS_FAKE_KUBE_API_H_
#define RESCALE_TESTS_FAKE_KUBE_API_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

namespace httplib {
class Server;
}

namespace rescale::testing {

struct RecordedRequest {
  std::string method;  // GET or PATCH; watches are GET with watch=true
  std::string path;
  std::map<std::string, std::string> query;
  std::string content_type;
  std::string body;
  std::string authorization;  // the Authorization header
  bool is_watch() const { return query.count("watch") && query.at("watch") == "true"; }
};

class FakeKubeApi {
 public:
  // Starts serving plain HTTP on 127.0.0.1:0.
  FakeKubeApi();
  // Starts serving HTTPS on 127.0.0.1:0 with this PEM certificate and key
  // (to test that the client verifies the server).
  FakeKubeApi(const std::string& tls_cert_file, const std::string& tls_key_file);
  ~FakeKubeApi();

  int port() const { return port_; }
  // "http://127.0.0.1:PORT" (https:// when serving TLS)
  std::string url() const;

  // Stops serving (open watches end, connections close); objects are kept.
  void Stop();
  // Serves again on the same port.
  void Start();

  // Creates or replaces an object (its path follows from apiVersion, kind,
  // metadata.namespace and metadata.name); bumps resourceVersion (and
  // metadata.generation when spec changed) and emits ADDED or MODIFIED.
  // Returns the stored object.
  nlohmann::json Put(nlohmann::json object);
  // Applies `mutate` to the stored object at `path` as a write (MODIFIED).
  nlohmann::json Update(const std::string& path,
                        const std::function<void(nlohmann::json&)>& mutate);
  // Deletes the object at `path` (DELETED). No-op when absent.
  void Delete(const std::string& path);
  // The stored object, or null.
  nlohmann::json Object(const std::string& path) const;

  // Sends a BOOKMARK at the current resourceVersion on every open watch.
  void SendBookmarks();
  // Forgets the event history, as etcd compaction does: open watches end,
  // and a watch from any older resourceVersion gets 410 Gone, as an HTTP
  // status (`as_http_status`) or as an ERROR event in a 200 stream.
  void Compact(bool as_http_status);
  // The next PATCH of `path` finds the object changed by someone else first
  // (its resourceVersion moves on), so a patch built from an earlier GET
  // gets 409 Conflict. `times` such writes, one before each PATCH.
  void ConflictOnNextPatch(const std::string& path, int times = 1);
  // Requests under `api_prefix` (e.g. "/apis/trainer.kubeflow.org/") are
  // answered 404, as for an API group whose CRD is not installed.
  void Unserve(const std::string& api_prefix);
  // The next `times` POSTs are answered `http_code` (a Status object)
  // without creating anything, as an API server refusing them would (403
  // without RBAC, 500 on an etcd hiccup).
  void RejectNextPosts(int http_code, int times = 1);

  std::vector<RecordedRequest> Requests() const;
  // Requests that write (PATCH, POST).
  std::vector<RecordedRequest> Writes() const;
  void ClearRequests();
  // Waits until `predicate` holds over the recorded requests, or `timeout`.
  // Woken by every request; returns whether it held.
  bool WaitForRequests(const std::function<bool(const std::vector<RecordedRequest>&)>& predicate,
                       std::chrono::milliseconds timeout = std::chrono::seconds(20));
  // Open watch streams right now.
  int open_watches() const;
  bool WaitForOpenWatches(int count, std::chrono::milliseconds timeout = std::chrono::seconds(20));

 private:
  struct Event {
    int64_t rv;
    std::string type;
    std::string collection;  // "/apis/G/V/R" or "/api/v1/nodes"
    std::string ns;
    nlohmann::json object;
    // The object before this write (null for ADDED; for DELETED, the
    // deleted object): a selective watch turns a write into ADDED or
    // DELETED when it starts or stops matching.
    nlohmann::json old_object;
  };
  struct Route;
  void Serve();
  void Handle(const void* request, void* response, const std::string& method);
  void HandleWatch(const Route& route, const RecordedRequest& recorded, void* response);
  void HandlePost(const Route& route, const RecordedRequest& recorded, void* response);
  void Record(const RecordedRequest& request);
  nlohmann::json WriteLocked(const std::string& path, nlohmann::json object, bool created);
  void EmitLocked(const std::string& type, const std::string& path, const nlohmann::json& object,
                  const nlohmann::json& old_object);

  mutable std::mutex mu_;
  std::condition_variable changed_;  // objects, events, requests, watches
  std::map<std::string, nlohmann::json> objects_;
  std::vector<Event> events_;
  int64_t rv_ = 100;
  int64_t compacted_rv_ = 0;
  bool gone_as_http_ = false;
  int64_t watch_epoch_ = 0;     // bumped to end every open watch
  int64_t bookmark_epoch_ = 0;  // bumped to make every open watch send one
  bool stopping_ = false;
  int open_watches_ = 0;
  std::map<std::string, int> conflicts_;
  std::vector<std::string> unserved_;
  int reject_posts_ = 0;
  int reject_posts_code_ = 0;
  int64_t next_uid_ = 1;
  int64_t next_generated_name_ = 0;
  std::vector<RecordedRequest> requests_;

  int port_ = 0;
  std::string tls_cert_file_;
  std::string tls_key_file_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
};

}  // namespace rescale::testing

#endif  // RESCALE_TESTS_FAKE_KUBE_API_H_
