// Adapter::ListWatch (see client/adapter/adapter.h): Kubernetes' list-then-
// watch loop, as client-go's reflector runs it. List, hand the items over,
// watch from the list's resourceVersion, relist on 410 Gone, back off on
// other errors and resume from the last version seen (bookmarks keep it
// recent).
#include "client/adapter/adapter.h"
#include "spdlog/spdlog.h"

namespace rescale::adapter {

using json = nlohmann::json;

void Adapter::ListWatch(const std::string& path, const Selectors& selector,
                        const std::function<void(const std::vector<json>&)>& on_list,
                        const std::function<void(const WatchEvent&)>& on_event,
                        const std::function<void()>& on_list_error, AdapterEvent::Kind listed_kind,
                        const std::string& what) {
  client::Backoff backoff(options_.backoff, [this] { return NextRandom(); });
  bool warned_missing = false;
  while (!stopping()) {
    absl::StatusOr<json> list = kube_->List(path, selector);
    if (!list.ok()) {
      if (list.status().code() == absl::StatusCode::kNotFound) {
        // The CRD is not installed (yet); say so once, keep checking.
        if (!warned_missing)
          spdlog::warn("{}: not served ({}); will retry", what,
                       std::string(list.status().message()));
        warned_missing = true;
      } else {
        spdlog::warn("list {}: {}", what, list.status().ToString());
      }
      if (on_list_error) on_list_error();
      if (!SleepFor(backoff.Next())) return;
      continue;
    }
    warned_missing = false;
    std::string resource_version;
    if (FieldAt(*list, {"metadata", "resourceVersion"}).is_string()) {
      resource_version = (*list)["metadata"]["resourceVersion"].get<std::string>();
    }
    std::vector<json> items;
    if (FieldAt(*list, {"items"}).is_array()) {
      for (const json& item : (*list)["items"]) items.push_back(item);
    }
    on_list(items);
    Emit({listed_kind, "", items.size(), path});

    // Watch from the list's resourceVersion until the server says it is too
    // old (410: relist) or we stop. Other errors: back off and re-watch from
    // the last version seen, which bookmarks keep recent.
    bool relist = false;
    while (!stopping() && !relist) {
      absl::Status error_event;
      absl::Status status = kube_->Watch(
          path, selector, resource_version,
          [&](const WatchEvent& event) {
            if (event.type == "ERROR") {
              const json& code = FieldAt(event.object, {"code"});
              std::string message = FieldAt(event.object, {"message"}).is_string()
                                        ? event.object["message"].get<std::string>()
                                        : event.object.dump();
              error_event = code.is_number_integer()
                                ? StatusFromHttp(code.get<long>(), "WATCH " + path, message)
                                : absl::UnknownError("WATCH " + path + ": " + message);
              return false;
            }
            const json& rv = FieldAt(event.object, {"metadata", "resourceVersion"});
            if (rv.is_string()) resource_version = rv.get<std::string>();
            if (event.type == "BOOKMARK") {
              Emit({AdapterEvent::Kind::kBookmark, "", 0, resource_version});
              return true;
            }
            on_event(event);
            return true;
          },
          stop_);
      if (status.ok() && !error_event.ok()) status = error_event;
      if (stopping()) return;
      if (status.code() == absl::StatusCode::kOutOfRange) {
        spdlog::info("watch {}: resourceVersion {} is too old (410 Gone); relisting", what,
                     resource_version);
        Emit({AdapterEvent::Kind::kWatchRelisted, "", 0, path});
        relist = true;
      } else if (!status.ok()) {
        spdlog::warn("watch {}: {}", what, status.ToString());
        if (!SleepFor(backoff.Next())) return;
      } else {
        backoff.Reset();
      }
    }
  }
}

}  // namespace rescale::adapter
