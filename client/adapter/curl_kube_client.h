// CurlKubeClient: the KubeClient rescale-adapter runs, over libcurl.
//
// TLS is always verified (peer and host name) against the configured CA or
// the system's; plain http:// is accepted only when the configured server
// URL says so explicitly (the tests' fake API server). Bearer tokens read
// from a file are re-read every `token_refresh`, since projected
// service-account tokens rotate. Watches run on a curl multi handle so
// Cancel() can wake them at once instead of waiting for the next byte.
//
// Thread safety: every method may be called from any thread; each request
// uses its own easy handle. Construction takes a reference on libcurl's
// global state (curl_global_init) and destruction drops it, so the last
// client to go calls curl_global_cleanup.
#ifndef RESCALE_CLIENT_ADAPTER_CURL_KUBE_CLIENT_H_
#define RESCALE_CLIENT_ADAPTER_CURL_KUBE_CLIENT_H_

#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/adapter/kube_client.h"
#include "rescale/clock.h"

struct curl_slist;  // libcurl's header list; its header stays out of ours

namespace rescale::adapter {

struct CurlKubeClientOptions {
  KubeConfig config;
  // Whole-request limit for GET, LIST and PATCH (not for watches).
  absl::Duration request_timeout = absl::Seconds(30);
  absl::Duration connect_timeout = absl::Seconds(10);
  // Server-side watch timeout (timeoutSeconds); the watch then ends with OK
  // and the caller re-watches from its last resourceVersion.
  absl::Duration watch_timeout = absl::Minutes(5);
  // How often a token file is re-read.
  absl::Duration token_refresh = absl::Minutes(1);
  // Time source for token refresh; null = the real clock.
  Clock* clock = nullptr;
};

class CurlKubeClient final : public KubeClient {
 public:
  // Fails (INVALID_ARGUMENT) when the server URL is neither https:// nor
  // http://, or when a configured CA, certificate, key or token file cannot
  // be read; errors name the file.
  static absl::StatusOr<std::unique_ptr<CurlKubeClient>> Create(CurlKubeClientOptions options);
  ~CurlKubeClient() override;

  absl::StatusOr<nlohmann::json> Get(const std::string& path) override;
  absl::StatusOr<nlohmann::json> List(const std::string& path, const Selectors& selectors) override;
  absl::StatusOr<nlohmann::json> Patch(const std::string& path, const std::string& content_type,
                                       const nlohmann::json& body) override;
  absl::StatusOr<nlohmann::json> Post(const std::string& path, const nlohmann::json& body) override;
  absl::Status Watch(const std::string& path, const Selectors& selectors,
                     const std::string& resource_version,
                     const std::function<bool(const WatchEvent&)>& on_event,
                     const std::atomic<bool>& stop) override;
  void Cancel() override;

 private:
  explicit CurlKubeClient(CurlKubeClientOptions options);
  struct Request;
  // Runs one non-streaming request; returns the parsed JSON body.
  absl::StatusOr<nlohmann::json> Perform(const std::string& method, const std::string& path,
                                         const std::string& query, const std::string& content_type,
                                         const std::string& body);
  // Sets URL, TLS, auth and timeouts on `easy`; returns the header list the
  // caller frees.
  absl::StatusOr<::curl_slist*> Prepare(void* easy, const std::string& url,
                                        const std::string& content_type);
  std::string Url(const std::string& path, const std::string& query) const;
  std::string Escape(const std::string& value) const;
  // Appends "&labelSelector=...&fieldSelector=..." (those not empty) to `query`.
  void AppendSelectors(const Selectors& selectors, std::string* query) const;
  absl::StatusOr<std::string> BearerToken();

  const CurlKubeClientOptions options_;
  Clock* const clock_;
  bool allow_http_ = false;

  absl::Mutex token_mu_;
  std::string token_ ABSL_GUARDED_BY(token_mu_);
  absl::Time token_read_at_ ABSL_GUARDED_BY(token_mu_) = absl::InfinitePast();

  // Multi handles of the watches in flight, so Cancel() can wake them.
  absl::Mutex watches_mu_;
  std::set<void*> watches_ ABSL_GUARDED_BY(watches_mu_);
};

}  // namespace rescale::adapter

#endif  // RESCALE_CLIENT_ADAPTER_CURL_KUBE_CLIENT_H_
