// The fake Kubernetes API server's implementation (see fake_kube_api.h):
// routing of /api and /apis paths, the object store with its
// resourceVersion counter and event history, and the streaming watches.
#include "tests/fake_kube_api.h"

#include <httplib.h>

#include <csignal>
#include <cstdio>
#include <stdexcept>
#include <variant>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

namespace rescale::testing {
namespace {

using json = nlohmann::json;

json StatusObject(int code, const std::string& reason, const std::string& message) {
  return {{"kind", "Status"},   {"apiVersion", "v1"}, {"status", "Failure"},
          {"message", message}, {"reason", reason},   {"code", code}};
}

void Reply(httplib::Response& res, int code, const json& body) {
  res.status = code;
  res.set_content(body.dump(), "application/json");
}

std::string ResourceOfKindOrEmpty(const std::string& kind) {
  if (kind == "PyTorchJob") return "pytorchjobs";
  if (kind == "TrainJob") return "trainjobs";
  if (kind == "Event") return "events";
  if (kind == "PodGroup") return "podgroups";
  if (kind == "Node") return "nodes";
  if (kind == "Pod") return "pods";
  // Kueue (kueue.x-k8s.io v1beta2 and v1beta1): ClusterQueue is
  // cluster-scoped, LocalQueue namespaced (the CRDs' scope, Kueue v0.19.2
  // config/components/crd/bases). The fake stores each object at the
  // version it was put with and does not convert between versions.
  if (kind == "ClusterQueue") return "clusterqueues";
  if (kind == "LocalQueue") return "localqueues";
  return "";
}

std::string ResourceOfKind(const std::string& kind) {
  std::string resource = ResourceOfKindOrEmpty(kind);
  if (resource.empty()) throw std::invalid_argument("FakeKubeApi: unsupported kind " + kind);
  return resource;
}

bool MatchesSelector(const json& object, const std::string& selector) {
  if (selector.empty()) return true;
  for (const std::string& term :
       std::vector<std::string>(absl::StrSplit(selector, ',', absl::SkipEmpty()))) {
    std::vector<std::string> kv = absl::StrSplit(term, absl::MaxSplits('=', 1));
    if (kv.size() != 2) return false;
    std::string value = kv[1];
    if (!value.empty() && value[0] == '=') value = value.substr(1);  // k==v
    const json& labels = object["metadata"].value("labels", json::object());
    if (!labels.contains(kv[0]) || labels[kv[0]] != value) return false;
  }
  return true;
}

// A LIST's or WATCH's labelSelector and fieldSelector, parsed.
struct Selection {
  std::string labels;
  struct FieldTerm {
    std::string field;  // "spec.nodeName"
    bool equal = true;  // = or ==; false for !=
    std::string value;
  };
  std::vector<FieldTerm> fields;
};

// The fields a fieldSelector may name, per resource, as the API server
// registers them (metadata.name and metadata.namespace everywhere, and a
// few per kind); any other is refused 400 like the real one does.
bool FieldSelectable(const std::string& resource, const std::string& field) {
  if (field == "metadata.name" || field == "metadata.namespace") return true;
  if (resource == "pods") {
    return field == "spec.nodeName" || field == "status.phase" || field == "spec.restartPolicy" ||
           field == "spec.schedulerName" || field == "spec.serviceAccountName" ||
           field == "status.podIP" || field == "status.nominatedNodeName";
  }
  if (resource == "nodes") return field == "spec.unschedulable";
  return false;
}

// The selectors of a request, or the message of the 400 it gets.
std::variant<Selection, std::string> ParseSelection(
    const std::string& resource, const std::map<std::string, std::string>& query) {
  Selection selection;
  if (query.count("labelSelector")) selection.labels = query.at("labelSelector");
  if (!query.count("fieldSelector")) return selection;
  for (const std::string& term : std::vector<std::string>(
           absl::StrSplit(query.at("fieldSelector"), ',', absl::SkipEmpty()))) {
    Selection::FieldTerm parsed;
    size_t at = term.find("!=");
    size_t value_at = at + 2;
    if (at != std::string::npos) {
      parsed.equal = false;
    } else if ((at = term.find("==")) != std::string::npos) {
      value_at = at + 2;
    } else if ((at = term.find('=')) != std::string::npos) {
      value_at = at + 1;
    } else {
      return "invalid selector: '" + term + "'; can't understand '" + term + "'";
    }
    parsed.field = term.substr(0, at);
    parsed.value = term.substr(value_at);
    if (!FieldSelectable(resource, parsed.field)) {
      return "field label not supported: " + parsed.field;
    }
    selection.fields.push_back(std::move(parsed));
  }
  return selection;
}

// A selectable field's value: the string at its path, "" when absent
// (booleans as "true"/"false", as the API server's field sets hold them).
std::string FieldValue(const json& object, const std::string& field) {
  const json* at = &object;
  for (const std::string& key : std::vector<std::string>(absl::StrSplit(field, '.'))) {
    if (!at->is_object() || !at->contains(key)) return "";
    at = &(*at)[key];
  }
  if (at->is_string()) return at->get<std::string>();
  if (at->is_boolean()) return at->get<bool>() ? "true" : "false";
  return "";
}

bool Matches(const json& object, const Selection& selection) {
  if (!MatchesSelector(object, selection.labels)) return false;
  for (const Selection::FieldTerm& term : selection.fields) {
    if ((FieldValue(object, term.field) == term.value) != term.equal) return false;
  }
  return true;
}

// What the API server checks on a new events.k8s.io/v1 Event
// (ValidateEventCreate for the events.k8s.io group): the field that fails,
// with why, or empty when it is valid.
std::string InvalidEventField(const json& event, const std::string& ns) {
  auto text = [&](const char* key) -> std::string {
    return event.contains(key) && event[key].is_string() ? event[key].get<std::string>() : "";
  };
  if (text("eventTime").empty()) return "eventTime: Required value";
  if (text("reportingController").empty()) return "reportingController: Required value";
  if (text("reportingInstance").empty()) return "reportingInstance: Required value";
  if (text("reportingInstance").size() > 128) return "reportingInstance: Too long";
  if (text("action").empty()) return "action: Required value";
  if (text("action").size() > 128) return "action: Too long";
  if (text("reason").empty()) return "reason: Required value";
  if (text("reason").size() > 128) return "reason: Too long";
  if (text("type") != "Normal" && text("type") != "Warning")
    return "type: Unsupported value: \"" + text("type") + "\"";
  if (text("note").size() > 1024) return "note: Too long: may not be more than 1024 bytes";
  if (!event.contains("regarding") || !event["regarding"].is_object())
    return "regarding: Required value";
  if (event["regarding"].value("namespace", "") != ns)
    return "regarding.namespace: Invalid value: does not match event.namespace";
  return "";
}

}  // namespace

// A parsed request path.
struct FakeKubeApi::Route {
  bool valid = false;
  std::string api_version;  // "v1" or "group/version"
  std::string collection;   // "/api/v1/nodes", "/apis/G/V/pytorchjobs"
  std::string resource;
  std::string ns;
  std::string name;
  bool scale = false;

  // The canonical path of the named object.
  std::string ObjectPath() const {
    std::string prefix = api_version == "v1" ? "/api/v1" : "/apis/" + api_version;
    if (!ns.empty()) prefix += "/namespaces/" + ns;
    return prefix + "/" + resource + "/" + name;
  }

  static Route Parse(const std::string& path) {
    Route route;
    std::vector<std::string> parts = absl::StrSplit(path, '/', absl::SkipEmpty());
    size_t i = 0;
    if (parts.size() >= 2 && parts[0] == "api") {
      route.api_version = parts[1];
      i = 2;
    } else if (parts.size() >= 3 && parts[0] == "apis") {
      route.api_version = parts[1] + "/" + parts[2];
      i = 3;
    } else {
      return route;
    }
    if (i + 1 < parts.size() && parts[i] == "namespaces") {
      route.ns = parts[i + 1];
      i += 2;
    }
    if (i >= parts.size()) return route;
    route.resource = parts[i++];
    if (i < parts.size()) route.name = parts[i++];
    if (i < parts.size()) {
      if (parts[i] != "scale" || i + 1 != parts.size()) return route;
      route.scale = true;
    }
    route.collection =
        (route.api_version == "v1" ? "/api/v1/" : "/apis/" + route.api_version + "/") +
        route.resource;
    route.valid = true;
    return route;
  }

  static std::string PathOf(const json& object) {
    Route route;
    route.api_version = object.at("apiVersion").get<std::string>();
    route.resource = ResourceOfKind(object.at("kind").get<std::string>());
    route.ns = object["metadata"].value("namespace", "");
    route.name = object["metadata"].at("name").get<std::string>();
    return route.ObjectPath();
  }
};

FakeKubeApi::FakeKubeApi() {
  // cpp-httplib writes with flags 0: a client that hung up must not kill the
  // test process with SIGPIPE.
  std::signal(SIGPIPE, SIG_IGN);
  Serve();
}

FakeKubeApi::FakeKubeApi(const std::string& tls_cert_file, const std::string& tls_key_file)
    : tls_cert_file_(tls_cert_file), tls_key_file_(tls_key_file) {
  std::signal(SIGPIPE, SIG_IGN);
  Serve();
}

FakeKubeApi::~FakeKubeApi() { Stop(); }

std::string FakeKubeApi::url() const {
  return (tls_cert_file_.empty() ? "http://127.0.0.1:" : "https://127.0.0.1:") +
         std::to_string(port_);
}

void FakeKubeApi::Serve() {
  if (tls_cert_file_.empty()) {
    server_ = std::make_unique<httplib::Server>();
  } else {
    auto tls = std::make_unique<httplib::SSLServer>(tls_cert_file_.c_str(), tls_key_file_.c_str());
    if (!tls->is_valid())
      throw std::runtime_error("FakeKubeApi: cannot load the TLS certificate or key");
    server_ = std::move(tls);
  }
  // Each open watch holds a worker; leave room for the adapter's requests.
  server_->new_task_queue = [] { return new httplib::ThreadPool(32); };
  server_->Get(".*", [this](const httplib::Request& req, httplib::Response& res) {
    Handle(&req, &res, "GET");
  });
  server_->Patch(".*", [this](const httplib::Request& req, httplib::Response& res) {
    Handle(&req, &res, "PATCH");
  });
  for (const char* method : {"POST", "PUT", "DELETE"}) {
    auto handler = [this, method](const httplib::Request& req, httplib::Response& res) {
      Handle(&req, &res, method);
    };
    if (std::string(method) == "POST") server_->Post(".*", handler);
    if (std::string(method) == "PUT") server_->Put(".*", handler);
    if (std::string(method) == "DELETE") server_->Delete(".*", handler);
  }
  if (port_ == 0) {
    port_ = server_->bind_to_any_port("127.0.0.1");
    if (port_ <= 0) throw std::runtime_error("FakeKubeApi: cannot bind 127.0.0.1:0");
  } else if (!server_->bind_to_port("127.0.0.1", port_)) {
    throw std::runtime_error("FakeKubeApi: cannot bind 127.0.0.1:" + std::to_string(port_));
  }
  httplib::Server* server = server_.get();
  thread_ = std::thread([server] { server->listen_after_bind(); });
  // httplib's stop() is a no-op until the accept loop has marked itself
  // running, so a Stop() right after Start() would hang in join(). The
  // loop marks itself first thing; wait for that.
  while (!server->is_running()) std::this_thread::yield();
}

void FakeKubeApi::Stop() {
  if (!server_) return;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  changed_.notify_all();
  server_->stop();
  thread_.join();  // returns once every worker (and open watch) is done
  server_.reset();
  std::lock_guard lock(mu_);
  stopping_ = false;
}

void FakeKubeApi::Start() {
  if (!server_) Serve();
}

void FakeKubeApi::Record(const RecordedRequest& request) {
  {
    std::lock_guard lock(mu_);
    requests_.push_back(request);
  }
  changed_.notify_all();
}

void FakeKubeApi::EmitLocked(const std::string& type, const std::string& path, const json& object,
                             const json& old_object) {
  Route route = Route::Parse(path);
  events_.push_back({rv_, type, route.collection, route.ns, object, old_object});
}

json FakeKubeApi::WriteLocked(const std::string& path, json object, bool created) {
  ++rv_;
  object["metadata"]["resourceVersion"] = std::to_string(rv_);
  if (created) {
    object["metadata"]["generation"] = 1;
    if (!object["metadata"].contains("uid")) {
      char uid[40];
      std::snprintf(uid, sizeof uid, "00000000-0000-4000-8000-%012lld",
                    static_cast<long long>(next_uid_++));
      object["metadata"]["uid"] = uid;
    }
  } else {
    const json& old = objects_[path];
    int64_t generation = old["metadata"].value("generation", int64_t{1});
    if (old.value("spec", json()) != object.value("spec", json())) ++generation;
    object["metadata"]["generation"] = generation;
  }
  json old_object = created ? json() : std::move(objects_[path]);
  objects_[path] = object;
  EmitLocked(created ? "ADDED" : "MODIFIED", path, object, old_object);
  return object;
}

json FakeKubeApi::Put(json object) {
  json stored;
  {
    std::lock_guard lock(mu_);
    std::string path = Route::PathOf(object);
    bool created = !objects_.count(path);
    stored = WriteLocked(path, std::move(object), created);
  }
  changed_.notify_all();
  return stored;
}

json FakeKubeApi::Update(const std::string& path, const std::function<void(json&)>& mutate) {
  json stored;
  {
    std::lock_guard lock(mu_);
    auto it = objects_.find(path);
    if (it == objects_.end()) throw std::invalid_argument("FakeKubeApi::Update: no object " + path);
    json object = it->second;
    mutate(object);
    stored = WriteLocked(path, std::move(object), false);
  }
  changed_.notify_all();
  return stored;
}

void FakeKubeApi::Delete(const std::string& path) {
  {
    std::lock_guard lock(mu_);
    auto it = objects_.find(path);
    if (it == objects_.end()) return;
    json object = it->second;
    objects_.erase(it);
    ++rv_;
    object["metadata"]["resourceVersion"] = std::to_string(rv_);
    EmitLocked("DELETED", path, object, object);
  }
  changed_.notify_all();
}

json FakeKubeApi::Object(const std::string& path) const {
  std::lock_guard lock(mu_);
  auto it = objects_.find(path);
  return it == objects_.end() ? json() : it->second;
}

void FakeKubeApi::SendBookmarks() {
  {
    std::lock_guard lock(mu_);
    ++bookmark_epoch_;
  }
  changed_.notify_all();
}

void FakeKubeApi::Compact(bool as_http_status) {
  {
    std::lock_guard lock(mu_);
    ++rv_;
    compacted_rv_ = rv_;
    gone_as_http_ = as_http_status;
    events_.clear();
    ++watch_epoch_;
  }
  changed_.notify_all();
}

void FakeKubeApi::ConflictOnNextPatch(const std::string& path, int times) {
  std::lock_guard lock(mu_);
  conflicts_[path] += times;
}

void FakeKubeApi::Unserve(const std::string& api_prefix) {
  std::lock_guard lock(mu_);
  unserved_.push_back(api_prefix);
}

void FakeKubeApi::RejectNextPosts(int http_code, int times) {
  std::lock_guard lock(mu_);
  reject_posts_ = times;
  reject_posts_code_ = http_code;
}

std::vector<RecordedRequest> FakeKubeApi::Requests() const {
  std::lock_guard lock(mu_);
  return requests_;
}

std::vector<RecordedRequest> FakeKubeApi::Writes() const {
  std::vector<RecordedRequest> writes;
  for (const RecordedRequest& request : Requests()) {
    if (request.method != "GET") writes.push_back(request);
  }
  return writes;
}

void FakeKubeApi::ClearRequests() {
  std::lock_guard lock(mu_);
  requests_.clear();
}

bool FakeKubeApi::WaitForRequests(
    const std::function<bool(const std::vector<RecordedRequest>&)>& predicate,
    std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  return changed_.wait_for(lock, timeout, [&] { return predicate(requests_); });
}

int FakeKubeApi::open_watches() const {
  std::lock_guard lock(mu_);
  return open_watches_;
}

bool FakeKubeApi::WaitForOpenWatches(int count, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  return changed_.wait_for(lock, timeout, [&] { return open_watches_ >= count; });
}

void FakeKubeApi::Handle(const void* request_ptr, void* response_ptr, const std::string& method) {
  const auto& req = *static_cast<const httplib::Request*>(request_ptr);
  auto& res = *static_cast<httplib::Response*>(response_ptr);
  RecordedRequest recorded;
  recorded.method = method;
  recorded.path = req.path;
  for (const auto& [key, value] : req.params) recorded.query[key] = value;
  recorded.content_type = req.get_header_value("Content-Type");
  recorded.body = req.body;
  recorded.authorization = req.get_header_value("Authorization");
  Record(recorded);

  Route route = Route::Parse(req.path);
  {
    std::lock_guard lock(mu_);
    for (const std::string& prefix : unserved_) {
      if (req.path.rfind(prefix, 0) == 0) route.valid = false;
    }
  }
  if (!route.valid) {
    Reply(res, 404, StatusObject(404, "NotFound", "no route " + req.path));
    return;
  }
  if (method == "GET" && recorded.is_watch()) {
    HandleWatch(route, recorded, &res);
    return;
  }
  if (method == "POST" && route.name.empty() && !route.scale) {
    HandlePost(route, recorded, &res);
    return;
  }
  std::unique_lock lock(mu_);
  if (method == "GET" && route.name.empty()) {
    json list = {{"kind", "List"},
                 {"apiVersion", route.api_version},
                 {"metadata", {{"resourceVersion", std::to_string(rv_)}}},
                 {"items", json::array()}};
    auto selection = ParseSelection(route.resource, recorded.query);
    if (const std::string* refused = std::get_if<std::string>(&selection)) {
      Reply(res, 400, StatusObject(400, "BadRequest", *refused));
      return;
    }
    for (const auto& [path, object] : objects_) {
      Route at = Route::Parse(path);
      if (at.collection != route.collection || (!route.ns.empty() && at.ns != route.ns)) continue;
      if (Matches(object, std::get<Selection>(selection))) list["items"].push_back(object);
    }
    Reply(res, 200, list);
    return;
  }
  const std::string path = route.ObjectPath();
  auto it = objects_.find(path);
  if (method != "GET" && method != "PATCH") {
    Reply(res, 405, StatusObject(405, "MethodNotAllowed", method + " is not served by the fake"));
    return;
  }
  if (it == objects_.end()) {
    Reply(res, 404,
          StatusObject(404, "NotFound", route.resource + " \"" + route.name + "\" not found"));
    return;
  }
  if (route.scale && route.resource != "pytorchjobs") {
    // Only the PyTorchJob CRD declares a scale subresource.
    Reply(res, 404,
          StatusObject(404, "NotFound", "the server could not find the requested resource"));
    return;
  }
  auto scale_of = [&](const json& object) {
    json replicas = object["spec"]["pytorchReplicaSpecs"]["Worker"].value("replicas", json(1));
    return json{{"kind", "Scale"},
                {"apiVersion", "autoscaling/v1"},
                {"metadata",
                 {{"name", route.name},
                  {"namespace", route.ns},
                  {"resourceVersion", object["metadata"]["resourceVersion"]}}},
                {"spec", {{"replicas", replicas}}}};
  };
  if (method == "GET") {
    Reply(res, 200, route.scale ? scale_of(it->second) : it->second);
    return;
  }
  // PATCH
  if (recorded.content_type != "application/merge-patch+json") {
    Reply(res, 415,
          StatusObject(415, "UnsupportedMediaType",
                       "the fake serves only application/merge-patch+json, got \"" +
                           recorded.content_type + "\""));
    return;
  }
  if (int& pending = conflicts_[path]; pending > 0) {
    // A concurrent writer gets in first.
    --pending;
    json object = it->second;
    object["metadata"]["annotations"]["fake.rescale.io/concurrent-writes"] = std::to_string(rv_);
    WriteLocked(path, std::move(object), false);
    it = objects_.find(path);
  }
  json patch = json::parse(req.body, nullptr, false);
  if (patch.is_discarded() || !patch.is_object()) {
    Reply(res, 400, StatusObject(400, "BadRequest", "patch body is not a JSON object"));
    return;
  }
  if (patch.contains("metadata") && patch["metadata"].contains("resourceVersion")) {
    if (patch["metadata"]["resourceVersion"] != it->second["metadata"]["resourceVersion"]) {
      Reply(res, 409,
            StatusObject(409, "Conflict",
                         "Operation cannot be fulfilled on " + route.resource + " \"" + route.name +
                             "\": the object has been modified; please apply your "
                             "changes to the latest version and try again"));
      return;
    }
    patch["metadata"].erase("resourceVersion");
    if (patch["metadata"].empty()) patch.erase("metadata");
  }
  if (route.scale) {
    json replicas = patch["spec"]["replicas"];
    patch = {{"spec", {{"pytorchReplicaSpecs", {{"Worker", {{"replicas", replicas}}}}}}}};
  }
  json object = it->second;
  object.merge_patch(patch);
  if (route.resource == "trainjobs" &&
      object["spec"].value("trainer", json()) != it->second["spec"].value("trainer", json())) {
    // The TrainJob CRD: spec.trainer has x-kubernetes-validations
    // `self == oldSelf`.
    Reply(res, 422,
          StatusObject(422, "Invalid",
                       "TrainJob.trainer.kubeflow.org \"" + route.name +
                           "\" is invalid: spec.trainer: Invalid value: \"object\": field is "
                           "immutable"));
    return;
  }
  json stored = WriteLocked(path, std::move(object), false);
  lock.unlock();
  changed_.notify_all();
  Reply(res, 200, route.scale ? scale_of(stored) : stored);
}

void FakeKubeApi::HandlePost(const Route& route, const RecordedRequest& recorded,
                             void* response_ptr) {
  auto& res = *static_cast<httplib::Response*>(response_ptr);
  if (recorded.content_type != "application/json") {
    Reply(res, 415,
          StatusObject(415, "UnsupportedMediaType",
                       "the fake creates from application/json only, got \"" +
                           recorded.content_type + "\""));
    return;
  }
  json object = json::parse(recorded.body, nullptr, false);
  if (object.is_discarded() || !object.is_object() || !object.contains("metadata") ||
      !object["metadata"].is_object()) {
    Reply(res, 400, StatusObject(400, "BadRequest", "body is not an object with metadata"));
    return;
  }
  if (route.ns.empty()) {
    Reply(res, 405,
          StatusObject(405, "MethodNotAllowed", "the fake creates namespaced objects only"));
    return;
  }
  if (object.value("apiVersion", "") != route.api_version ||
      ResourceOfKindOrEmpty(object.value("kind", "")) != route.resource) {
    Reply(
        res, 400,
        StatusObject(400, "BadRequest",
                     "the API version in the data (" + object.value("apiVersion", "") +
                         ") does not match the expected API version (" + route.api_version + ")"));
    return;
  }
  json& metadata = object["metadata"];
  const std::string body_ns = metadata.value("namespace", "");
  if (!body_ns.empty() && body_ns != route.ns) {
    Reply(res, 400,
          StatusObject(400, "BadRequest",
                       "the namespace of the provided object does not match the namespace sent "
                       "on the request"));
    return;
  }
  metadata["namespace"] = route.ns;
  if (route.resource == "events") {
    if (std::string invalid = InvalidEventField(object, route.ns); !invalid.empty()) {
      Reply(res, 422, StatusObject(422, "Invalid", "Event is invalid: " + invalid));
      return;
    }
  }
  std::unique_lock lock(mu_);
  if (reject_posts_ > 0) {
    --reject_posts_;
    Reply(
        res, reject_posts_code_,
        StatusObject(reject_posts_code_, reject_posts_code_ == 403 ? "Forbidden" : "InternalError",
                     "rejected by the test"));
    return;
  }
  if (metadata.value("name", "").empty()) {
    const std::string prefix = metadata.value("generateName", "");
    if (prefix.empty()) {
      Reply(res, 422,
            StatusObject(422, "Invalid",
                         "metadata.name: Required value: name or generateName is "
                         "required"));
      return;
    }
    // The API server appends five random characters from a DNS-safe
    // alphabet; a counter is as unique and repeatable.
    static constexpr char kAlphabet[] = "bcdfghjklmnpqrstvwxz2456789";
    int64_t n = next_generated_name_++;
    std::string suffix;
    for (int i = 0; i < 5; ++i, n /= 27) suffix += kAlphabet[n % 27];
    metadata["name"] = prefix + suffix;
  }
  Route at = route;
  at.name = metadata["name"].get<std::string>();
  const std::string path = at.ObjectPath();
  if (objects_.count(path)) {
    Reply(
        res, 409,
        StatusObject(409, "AlreadyExists", route.resource + " \"" + at.name + "\" already exists"));
    return;
  }
  json stored = WriteLocked(path, std::move(object), true);
  lock.unlock();
  changed_.notify_all();
  Reply(res, 201, stored);
}

void FakeKubeApi::HandleWatch(const Route& route, const RecordedRequest& recorded,
                              void* response_ptr) {
  auto& res = *static_cast<httplib::Response*>(response_ptr);
  struct WatchState {
    int64_t cursor = 0;
    int64_t epoch = 0;
    int64_t bookmark_epoch = 0;
    bool bookmarks = false;
    std::string collection;
    std::string ns;
    Selection selection;
  };
  auto state = std::make_shared<WatchState>();
  auto selection = ParseSelection(route.resource, recorded.query);
  if (const std::string* refused = std::get_if<std::string>(&selection)) {
    Reply(res, 400, StatusObject(400, "BadRequest", *refused));
    return;
  }
  state->selection = std::get<Selection>(std::move(selection));
  std::unique_lock lock(mu_);
  int64_t from = rv_;
  if (recorded.query.count("resourceVersion") && !recorded.query.at("resourceVersion").empty() &&
      !absl::SimpleAtoi(recorded.query.at("resourceVersion"), &from)) {
    Reply(res, 400, StatusObject(400, "BadRequest", "resourceVersion is not a number"));
    return;
  }
  if (from < compacted_rv_) {
    json gone = StatusObject(410, "Expired",
                             "too old resource version: " + std::to_string(from) + " (" +
                                 std::to_string(compacted_rv_) + ")");
    if (gone_as_http_) {
      Reply(res, 410, gone);
    } else {
      res.status = 200;
      res.set_content(json{{"type", "ERROR"}, {"object", gone}}.dump() + "\n", "application/json");
    }
    return;
  }
  state->cursor = from;
  state->epoch = watch_epoch_;
  state->bookmark_epoch = bookmark_epoch_;
  state->bookmarks = recorded.query.count("allowWatchBookmarks") &&
                     recorded.query.at("allowWatchBookmarks") == "true";
  state->collection = route.collection;
  state->ns = route.ns;
  ++open_watches_;
  lock.unlock();
  changed_.notify_all();

  res.status = 200;
  res.set_chunked_content_provider(
      "application/json",
      [this, state](size_t, httplib::DataSink& sink) -> bool {
        std::unique_lock lock(mu_);
        while (true) {
          if (stopping_ || watch_epoch_ != state->epoch) {
            lock.unlock();
            sink.done();
            return true;
          }
          std::string out;
          for (const Event& event : events_) {
            if (event.rv <= state->cursor) continue;
            state->cursor = event.rv;
            if (event.collection != state->collection) continue;
            if (!state->ns.empty() && event.ns != state->ns) continue;
            // As the API server's watch cache filters: an object that
            // starts matching is ADDED, one that stops matching is DELETED
            // (its previous state, at the event's resourceVersion).
            const bool before =
                !event.old_object.is_null() && Matches(event.old_object, state->selection);
            const bool now = event.type != "DELETED" && Matches(event.object, state->selection);
            if (event.type == "DELETED" || (before && !now)) {
              if (!before) continue;
              json gone = event.old_object;
              gone["metadata"]["resourceVersion"] = std::to_string(event.rv);
              out += json{{"type", "DELETED"}, {"object", gone}}.dump() + "\n";
            } else if (now) {
              out +=
                  json{{"type", before ? "MODIFIED" : "ADDED"}, {"object", event.object}}.dump() +
                  "\n";
            }
          }
          if (bookmark_epoch_ != state->bookmark_epoch) {
            state->bookmark_epoch = bookmark_epoch_;
            if (state->bookmarks) {
              state->cursor = std::max(state->cursor, rv_);
              out += json{{"type", "BOOKMARK"},
                          {"object",
                           {{"kind", "Bookmark"},
                            {"metadata", {{"resourceVersion", std::to_string(rv_)}}}}}}
                         .dump() +
                     "\n";
            }
          }
          if (!out.empty()) {
            lock.unlock();
            return sink.write(out.data(), out.size());
          }
          // Idle: a blank line now and then finds out whether the client
          // has gone (the write fails), so its worker is not held forever.
          // Clients skip blank lines between events.
          if (changed_.wait_for(lock, std::chrono::milliseconds(200)) == std::cv_status::timeout) {
            lock.unlock();
            return sink.write("\n", 1);
          }
        }
      },
      [this](bool) {
        {
          std::lock_guard lock(mu_);
          --open_watches_;
        }
        changed_.notify_all();
      });
}

}  // namespace rescale::testing
