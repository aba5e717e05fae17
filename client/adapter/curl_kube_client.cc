// libcurl implementation of KubeClient, and StatusFromHttp (see
// kube_client.h for the status mapping, curl_kube_client.h for TLS and auth).
#include "client/adapter/curl_kube_client.h"

#include <curl/curl.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "rescale/read_file.h"
#include "spdlog/spdlog.h"

namespace rescale::adapter {
namespace {

// libcurl's global state is reference-counted across clients so that the
// last client cleans it up (leak checkers see nothing left behind).
absl::Mutex g_curl_mu(absl::kConstInit);
int g_curl_users ABSL_GUARDED_BY(g_curl_mu) = 0;

void CurlGlobalRef() {
  absl::MutexLock lock(&g_curl_mu);
  if (g_curl_users++ == 0) curl_global_init(CURL_GLOBAL_DEFAULT);
}
void CurlGlobalUnref() {
  absl::MutexLock lock(&g_curl_mu);
  if (--g_curl_users == 0) curl_global_cleanup();
}

size_t AppendToString(char* data, size_t size, size_t count, void* user) {
  static_cast<std::string*>(user)->append(data, size * count);
  return size * count;
}

// A server's Status object carries a human message; quote it when present.
std::string ServerMessage(const std::string& body) {
  nlohmann::json parsed = nlohmann::json::parse(body, nullptr, false);
  if (parsed.is_object() && parsed.contains("message") && parsed["message"].is_string()) {
    return parsed["message"].get<std::string>();
  }
  return body.size() > 200 ? body.substr(0, 200) + "..." : body;
}

struct EasyDeleter {
  void operator()(CURL* easy) const { curl_easy_cleanup(easy); }
};
struct SlistDeleter {
  void operator()(curl_slist* list) const { curl_slist_free_all(list); }
};
using EasyPtr = std::unique_ptr<CURL, EasyDeleter>;
using SlistPtr = std::unique_ptr<curl_slist, SlistDeleter>;

}  // namespace

absl::Status StatusFromHttp(long http_code, const std::string& what, const std::string& body) {
  std::string message = absl::StrCat(what, ": HTTP ", http_code);
  std::string server = ServerMessage(body);
  if (!server.empty()) absl::StrAppend(&message, ": ", server);
  switch (http_code) {
    case 400:
    case 415:
    case 422:
      return absl::InvalidArgumentError(message);
    case 401:
      return absl::UnauthenticatedError(message);
    case 403:
      return absl::PermissionDeniedError(message);
    case 404:
      return absl::NotFoundError(message);
    case 409:
      return absl::AbortedError(message);
    case 410:
      return absl::OutOfRangeError(message);
    default:
      break;
  }
  if (http_code == 429 || http_code >= 500) return absl::UnavailableError(message);
  return absl::UnknownError(message);
}

CurlKubeClient::CurlKubeClient(CurlKubeClientOptions options)
    : options_(std::move(options)), clock_(options_.clock ? options_.clock : Clock::Real()) {
  CurlGlobalRef();
}

CurlKubeClient::~CurlKubeClient() { CurlGlobalUnref(); }

absl::StatusOr<std::unique_ptr<CurlKubeClient>> CurlKubeClient::Create(
    CurlKubeClientOptions options) {
  const std::string& server = options.config.server;
  bool http = absl::StartsWith(server, "http://");
  if (!http && !absl::StartsWith(server, "https://")) {
    return absl::InvalidArgumentError(
        absl::StrCat("Kubernetes API server \"", server, "\" must start with https://"));
  }
  for (const auto& [file, what] : {std::pair{options.config.ca_file, "certificate-authority"},
                                   std::pair{options.config.client_cert_file, "client-certificate"},
                                   std::pair{options.config.client_key_file, "client-key"},
                                   std::pair{options.config.token_file, "token file"}}) {
    if (file.empty()) continue;
    absl::StatusOr<std::string> read = ReadFileToString(file, what);
    if (!read.ok()) return read.status();
  }
  auto client = std::unique_ptr<CurlKubeClient>(new CurlKubeClient(std::move(options)));
  client->allow_http_ = http;
  return client;
}

absl::StatusOr<std::string> CurlKubeClient::BearerToken() {
  if (options_.config.token_file.empty()) return options_.config.token;
  absl::MutexLock lock(&token_mu_);
  absl::Time now = clock_->Now();
  if (now - token_read_at_ >= options_.token_refresh) {
    absl::StatusOr<std::string> read = ReadFileToString(options_.config.token_file, "token file");
    if (!read.ok()) {
      // Keep using the last token: a rotation in progress may briefly hide
      // the file; the server will say 401 if the old one has expired.
      if (token_.empty()) return read.status();
      spdlog::warn("{}; keeping the previous token", std::string(read.status().message()));
    } else {
      token_ = *read;
      while (!token_.empty() && (token_.back() == '\n' || token_.back() == '\r')) token_.pop_back();
      token_read_at_ = now;
    }
  }
  return token_;
}

std::string CurlKubeClient::Escape(const std::string& value) const {
  char* escaped = curl_easy_escape(nullptr, value.data(), static_cast<int>(value.size()));
  std::string result = escaped ? escaped : "";
  curl_free(escaped);
  return result;
}

void CurlKubeClient::AppendSelectors(const Selectors& selectors, std::string* query) const {
  auto append = [&](const char* name, const std::string& value) {
    if (value.empty()) return;
    absl::StrAppend(query, query->empty() ? "" : "&", name, "=", Escape(value));
  };
  append("labelSelector", selectors.labels);
  append("fieldSelector", selectors.fields);
}

std::string CurlKubeClient::Url(const std::string& path, const std::string& query) const {
  std::string server = options_.config.server;
  while (!server.empty() && server.back() == '/') server.pop_back();
  return query.empty() ? server + path : absl::StrCat(server, path, "?", query);
}

absl::StatusOr<curl_slist*> CurlKubeClient::Prepare(void* handle, const std::string& url,
                                                    const std::string& content_type) {
  CURL* easy = static_cast<CURL*>(handle);
  const KubeConfig& config = options_.config;
  curl_easy_setopt(easy, CURLOPT_URL, url.c_str());
  curl_easy_setopt(easy, CURLOPT_PROTOCOLS_STR, allow_http_ ? "http,https" : "https");
  curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(easy, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS,
                   static_cast<long>(absl::ToInt64Milliseconds(options_.connect_timeout)));
  // Verification is never switched off; these are libcurl's defaults, set
  // anyway so a changed default cannot weaken them.
  curl_easy_setopt(easy, CURLOPT_SSL_VERIFYPEER, 1L);
  curl_easy_setopt(easy, CURLOPT_SSL_VERIFYHOST, 2L);
  if (!config.ca_file.empty()) curl_easy_setopt(easy, CURLOPT_CAINFO, config.ca_file.c_str());
  if (!config.ca_data.empty()) {
    curl_blob blob{const_cast<char*>(config.ca_data.data()), config.ca_data.size(), CURL_BLOB_COPY};
    curl_easy_setopt(easy, CURLOPT_CAINFO_BLOB, &blob);
  }
  if (!config.client_cert_file.empty()) {
    curl_easy_setopt(easy, CURLOPT_SSLCERT, config.client_cert_file.c_str());
  }
  if (!config.client_cert_data.empty()) {
    curl_blob blob{const_cast<char*>(config.client_cert_data.data()),
                   config.client_cert_data.size(), CURL_BLOB_COPY};
    curl_easy_setopt(easy, CURLOPT_SSLCERT_BLOB, &blob);
    curl_easy_setopt(easy, CURLOPT_SSLCERTTYPE, "PEM");
  }
  if (!config.client_key_file.empty()) {
    curl_easy_setopt(easy, CURLOPT_SSLKEY, config.client_key_file.c_str());
  }
  if (!config.client_key_data.empty()) {
    curl_blob blob{const_cast<char*>(config.client_key_data.data()), config.client_key_data.size(),
                   CURL_BLOB_COPY};
    curl_easy_setopt(easy, CURLOPT_SSLKEY_BLOB, &blob);
    curl_easy_setopt(easy, CURLOPT_SSLKEYTYPE, "PEM");
  }
  curl_slist* headers = curl_slist_append(nullptr, "Accept: application/json");
  if (!content_type.empty()) {
    headers = curl_slist_append(headers, ("Content-Type: " + content_type).c_str());
  }
  absl::StatusOr<std::string> token = BearerToken();
  if (!token.ok()) {
    curl_slist_free_all(headers);
    return token.status();
  }
  if (!token->empty()) {
    headers = curl_slist_append(headers, ("Authorization: Bearer " + *token).c_str());
  }
  curl_easy_setopt(easy, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(easy, CURLOPT_USERAGENT, "rescale-adapter/0.1");
  return headers;
}

absl::StatusOr<nlohmann::json> CurlKubeClient::Perform(const std::string& method,
                                                       const std::string& path,
                                                       const std::string& query,
                                                       const std::string& content_type,
                                                       const std::string& body) {
  const std::string what = absl::StrCat(method, " ", path);
  EasyPtr easy(curl_easy_init());
  if (!easy) return absl::InternalError(absl::StrCat(what, ": curl_easy_init failed"));
  absl::StatusOr<curl_slist*> headers = Prepare(easy.get(), Url(path, query), content_type);
  if (!headers.ok()) return headers.status();
  SlistPtr header_list(*headers);
  std::string response;
  curl_easy_setopt(easy.get(), CURLOPT_WRITEFUNCTION, &AppendToString);
  curl_easy_setopt(easy.get(), CURLOPT_WRITEDATA, &response);
  curl_easy_setopt(easy.get(), CURLOPT_TIMEOUT_MS,
                   static_cast<long>(absl::ToInt64Milliseconds(options_.request_timeout)));
  if (method != "GET") {
    curl_easy_setopt(easy.get(), CURLOPT_CUSTOMREQUEST, method.c_str());
    curl_easy_setopt(easy.get(), CURLOPT_POSTFIELDS, body.c_str());
    curl_easy_setopt(easy.get(), CURLOPT_POSTFIELDSIZE, static_cast<long>(body.size()));
  }
  char error[CURL_ERROR_SIZE] = {};
  curl_easy_setopt(easy.get(), CURLOPT_ERRORBUFFER, error);
  CURLcode code = curl_easy_perform(easy.get());
  if (code != CURLE_OK) {
    return absl::UnavailableError(
        absl::StrCat(what, ": ", error[0] ? error : curl_easy_strerror(code)));
  }
  long http_code = 0;
  curl_easy_getinfo(easy.get(), CURLINFO_RESPONSE_CODE, &http_code);
  if (http_code < 200 || http_code >= 300) return StatusFromHttp(http_code, what, response);
  nlohmann::json parsed = nlohmann::json::parse(response, nullptr, false);
  if (parsed.is_discarded()) {
    return absl::InternalError(absl::StrCat(what, ": response is not JSON"));
  }
  return parsed;
}

absl::StatusOr<nlohmann::json> CurlKubeClient::Get(const std::string& path) {
  return Perform("GET", path, "", "", "");
}

absl::StatusOr<nlohmann::json> CurlKubeClient::List(const std::string& path,
                                                    const Selectors& selectors) {
  std::string query;
  AppendSelectors(selectors, &query);
  return Perform("GET", path, query, "", "");
}

absl::StatusOr<nlohmann::json> CurlKubeClient::Patch(const std::string& path,
                                                     const std::string& content_type,
                                                     const nlohmann::json& body) {
  return Perform("PATCH", path, "", content_type, body.dump());
}

absl::StatusOr<nlohmann::json> CurlKubeClient::Post(const std::string& path,
                                                    const nlohmann::json& body) {
  return Perform("POST", path, "", "application/json", body.dump());
}

namespace {

// State of one watch's write callback: splits the body into lines and hands
// each decoded event on, or collects an error body.
struct WatchSink {
  CURL* easy = nullptr;
  const std::function<bool(const WatchEvent&)>* on_event = nullptr;
  std::string buffer;
  std::string error_body;
  bool http_error = false;
  bool status_checked = false;
  bool stopped_by_callback = false;
  absl::Status decode_error;
};

size_t WatchWrite(char* data, size_t size, size_t count, void* user) {
  auto* sink = static_cast<WatchSink*>(user);
  const size_t bytes = size * count;
  if (!sink->status_checked) {
    long http_code = 0;
    curl_easy_getinfo(sink->easy, CURLINFO_RESPONSE_CODE, &http_code);
    sink->http_error = http_code < 200 || http_code >= 300;
    sink->status_checked = true;
  }
  if (sink->http_error) {
    sink->error_body.append(data, bytes);
    return bytes;
  }
  sink->buffer.append(data, bytes);
  size_t start = 0;
  for (size_t newline; (newline = sink->buffer.find('\n', start)) != std::string::npos;
       start = newline + 1) {
    std::string_view line(sink->buffer.data() + start, newline - start);
    if (line.find_first_not_of(" \r\t") == std::string_view::npos) continue;
    nlohmann::json parsed = nlohmann::json::parse(line, nullptr, false);
    if (parsed.is_discarded() || !parsed.is_object() || !parsed.contains("type") ||
        !parsed["type"].is_string()) {
      sink->decode_error = absl::InternalError("watch event is not a JSON object with a type");
      return 0;  // aborts the transfer
    }
    WatchEvent event{parsed["type"].get<std::string>(),
                     parsed.contains("object") ? parsed["object"] : nlohmann::json::object()};
    if (!(*sink->on_event)(event)) {
      sink->stopped_by_callback = true;
      return 0;
    }
  }
  sink->buffer.erase(0, start);
  return bytes;
}

}  // namespace

absl::Status CurlKubeClient::Watch(const std::string& path, const Selectors& selectors,
                                   const std::string& resource_version,
                                   const std::function<bool(const WatchEvent&)>& on_event,
                                   const std::atomic<bool>& stop) {
  const std::string what = absl::StrCat("WATCH ", path);
  std::string query = absl::StrCat("watch=true&allowWatchBookmarks=true&timeoutSeconds=",
                                   absl::ToInt64Seconds(options_.watch_timeout));
  if (!resource_version.empty())
    absl::StrAppend(&query, "&resourceVersion=", Escape(resource_version));
  AppendSelectors(selectors, &query);

  EasyPtr easy(curl_easy_init());
  if (!easy) return absl::InternalError(absl::StrCat(what, ": curl_easy_init failed"));
  absl::StatusOr<curl_slist*> headers = Prepare(easy.get(), Url(path, query), "");
  if (!headers.ok()) return headers.status();
  SlistPtr header_list(*headers);
  WatchSink sink;
  sink.easy = easy.get();
  sink.on_event = &on_event;
  curl_easy_setopt(easy.get(), CURLOPT_WRITEFUNCTION, &WatchWrite);
  curl_easy_setopt(easy.get(), CURLOPT_WRITEDATA, &sink);
  char error[CURL_ERROR_SIZE] = {};
  curl_easy_setopt(easy.get(), CURLOPT_ERRORBUFFER, error);

  CURLM* multi = curl_multi_init();
  if (multi == nullptr) return absl::InternalError(absl::StrCat(what, ": curl_multi_init failed"));
  curl_multi_add_handle(multi, easy.get());
  {
    absl::MutexLock lock(&watches_mu_);
    watches_.insert(multi);
  }
  bool cancelled = false;
  CURLcode result = CURLE_OK;
  int running = 1;
  while (true) {
    if (stop.load(std::memory_order_acquire)) {
      cancelled = true;
      break;
    }
    CURLMcode mc = curl_multi_perform(multi, &running);
    if (mc != CURLM_OK) {
      result = CURLE_RECV_ERROR;
      break;
    }
    if (running == 0) {
      int queued = 0;
      while (CURLMsg* msg = curl_multi_info_read(multi, &queued)) {
        if (msg->msg == CURLMSG_DONE) result = msg->data.result;
      }
      break;
    }
    // Wakes on data, on Cancel() (curl_multi_wakeup), or after a second so
    // `stop` is re-checked even if a Cancel() raced with this call.
    curl_multi_poll(multi, nullptr, 0, 1000, nullptr);
  }
  {
    absl::MutexLock lock(&watches_mu_);
    watches_.erase(multi);
  }
  curl_multi_remove_handle(multi, easy.get());
  curl_multi_cleanup(multi);

  if (cancelled) return absl::CancelledError(absl::StrCat(what, ": stopped"));
  if (sink.stopped_by_callback) return absl::OkStatus();
  if (!sink.decode_error.ok()) {
    return absl::Status(sink.decode_error.code(),
                        absl::StrCat(what, ": ", sink.decode_error.message()));
  }
  if (result == CURLE_OK || sink.http_error) {
    // An error status may come with no body, so the write callback never
    // saw it: ask for the code once the transfer is over.
    long http_code = 0;
    curl_easy_getinfo(easy.get(), CURLINFO_RESPONSE_CODE, &http_code);
    if (http_code < 200 || http_code >= 300)
      return StatusFromHttp(http_code, what, sink.error_body);
  }
  if (result != CURLE_OK) {
    return absl::UnavailableError(
        absl::StrCat(what, ": ", error[0] ? error : curl_easy_strerror(result)));
  }
  return absl::OkStatus();
}

void CurlKubeClient::Cancel() {
  absl::MutexLock lock(&watches_mu_);
  for (void* multi : watches_) curl_multi_wakeup(static_cast<CURLM*>(multi));
}

}  // namespace rescale::adapter
