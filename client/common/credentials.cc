// Client credentials and the bearer-token interceptor (see
// client/common/credentials.h).
#include "client/common/credentials.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_credentials_options.h>
#include <grpcpp/support/client_interceptor.h>
#include <sys/stat.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "rescale/address.h"
#include "rescale/read_file.h"

namespace rescale::client {
namespace {

// Adds the token to the initial metadata of every call on its channel.
class BearerTokenInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit BearerTokenInterceptor(std::shared_ptr<BearerToken> token) : token_(std::move(token)) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->emplace("authorization",
                                                 absl::StrCat("Bearer ", token_->Current()));
    }
    methods->Proceed();
  }

 private:
  const std::shared_ptr<BearerToken> token_;
};

class BearerTokenInterceptorFactory final
    : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit BearerTokenInterceptorFactory(std::shared_ptr<BearerToken> token)
      : token_(std::move(token)) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo*) override {
    return new BearerTokenInterceptor(token_);
  }

 private:
  const std::shared_ptr<BearerToken> token_;
};

absl::StatusOr<std::string> ReadToken(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFileToString(path, "--token-file");
  if (!text.ok()) return text.status();
  std::string token(absl::StripAsciiWhitespace(*text));
  if (token.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("--token-file \"", path, "\" is empty"));
  }
  return token;
}

}  // namespace

void AddSecurityFlags(CLI::App& app, SecurityFlags& flags, const std::string& group) {
  app.add_flag("--tls", flags.tls, "Connect with TLS, trusting the system's root CAs")
      ->group(group);
  app.add_option("--ca-file", flags.ca_file,
                 "PEM file of CAs to trust instead of the system's; implies --tls")
      ->envname("RESCALE_CA_FILE")
      ->group(group);
  app.add_option("--cert-file", flags.cert_file,
                 "PEM client certificate for mutual TLS (with --key-file); implies --tls")
      ->envname("RESCALE_CERT_FILE")
      ->group(group);
  app.add_option("--key-file", flags.key_file, "PEM private key of --cert-file")
      ->envname("RESCALE_KEY_FILE")
      ->group(group);
  app.add_option("--tls-server-name", flags.tls_server_name,
                 "Name rescaled's certificate must be valid for, if not the --server host (e.g. "
                 "rescaled.rescale.svc when following a leader to its pod IP)")
      ->envname("RESCALE_TLS_SERVER_NAME")
      ->group(group);
  app.add_option("--token-file", flags.token_file,
                 "File holding the bearer token sent with every call (re-read when it "
                 "changes); default: $RESCALE_TOKEN")
      ->envname("RESCALE_TOKEN_FILE")
      ->group(group);
}

absl::StatusOr<std::shared_ptr<BearerToken>> BearerToken::FromFile(const std::string& path) {
  std::shared_ptr<BearerToken> token(new BearerToken());
  token->path_ = path;
  absl::StatusOr<std::string> first = ReadToken(path);
  if (!first.ok()) return first.status();
  struct stat info {};
  const bool stamped = stat(path.c_str(), &info) == 0;
  MutexLock lock(token->mu_);  // not shared yet; taken for the analysis
  token->token_ = *std::move(first);
  if (stamped) {
    token->stamp_mtime_ns_ = int64_t{info.st_mtim.tv_sec} * 1'000'000'000 + info.st_mtim.tv_nsec;
    token->stamp_size_ = info.st_size;
  }
  token->checked_at_ns_ = absl::GetCurrentTimeNanos();
  return token;
}

std::shared_ptr<BearerToken> BearerToken::Fixed(std::string token) {
  std::shared_ptr<BearerToken> fixed(new BearerToken());
  MutexLock lock(fixed->mu_);  // not shared yet; taken for the analysis
  fixed->token_ = std::move(token);
  return fixed;
}

std::string BearerToken::Current() {
  int64_t known_mtime = 0;
  int64_t known_size = 0;
  {
    MutexLock lock(mu_);
    if (path_.empty()) return token_;
    const int64_t now = absl::GetCurrentTimeNanos();
    if (now - checked_at_ns_ < 1'000'000'000) return token_;
    checked_at_ns_ = now;
    known_mtime = stamp_mtime_ns_;
    known_size = stamp_size_;
  }
  // The file is looked at and read outside the lock: a slow volume must not
  // hold up the other calls' Current(), which keep the last token meanwhile.
  struct stat info {};
  const bool changed = stat(path_.c_str(), &info) == 0 &&
                       (int64_t{info.st_mtim.tv_sec} * 1'000'000'000 + info.st_mtim.tv_nsec !=
                            known_mtime ||
                        info.st_size != known_size);
  absl::StatusOr<std::string> token =
      changed ? ReadToken(path_) : absl::StatusOr<std::string>(absl::UnknownError("unchanged"));
  MutexLock lock(mu_);
  if (token.ok()) {
    token_ = *std::move(token);
    stamp_mtime_ns_ = int64_t{info.st_mtim.tv_sec} * 1'000'000'000 + info.st_mtim.tv_nsec;
    stamp_size_ = info.st_size;
  }
  return token_;
}

absl::StatusOr<RescaledConnection> RescaledConnection::Create(const SecurityFlags& flags,
                                                              const char* env_token) {
  if (flags.cert_file.empty() != flags.key_file.empty()) {
    return absl::InvalidArgumentError("--cert-file and --key-file must be given together");
  }
  RescaledConnection connection;
  const bool tls = flags.tls || !flags.ca_file.empty() || !flags.cert_file.empty() ||
                   !flags.tls_server_name.empty();
  connection.tls_server_name_ = flags.tls_server_name;
  connection.tls_ = tls;
  if (!tls) {
    connection.credentials_ = grpc::InsecureChannelCredentials();
  } else {
    grpc::SslCredentialsOptions ssl;
    if (!flags.ca_file.empty()) {
      absl::StatusOr<std::string> pem = ReadFileToString(flags.ca_file, "--ca-file");
      if (!pem.ok()) return pem.status();
      ssl.pem_root_certs = *std::move(pem);
    }
    if (flags.cert_file.empty()) {
      connection.credentials_ = grpc::SslCredentials(ssl);
    } else {
      // Checked now so a wrong path fails here, naming its flag; then a
      // watcher re-reads the files, so a long-running adapter or agent
      // presents its renewed certificate on its next connection.
      absl::StatusOr<std::string> cert = ReadFileToString(flags.cert_file, "--cert-file");
      if (!cert.ok()) return cert.status();
      absl::StatusOr<std::string> key = ReadFileToString(flags.key_file, "--key-file");
      if (!key.ok()) return key.status();
      auto files = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
          flags.key_file, flags.cert_file, flags.ca_file,
          std::max(1u, flags.certificate_reload_seconds));
      grpc::experimental::TlsChannelCredentialsOptions tls_options;
      tls_options.set_certificate_provider(files);
      tls_options.watch_identity_key_cert_pairs();
      // Without a CA file the system's roots verify the server.
      if (!flags.ca_file.empty()) tls_options.watch_root_certs();
      tls_options.set_verify_server_certs(true);
      connection.credentials_ = grpc::experimental::TlsCredentials(tls_options);
    }
  }
  if (!flags.token_file.empty()) {
    absl::StatusOr<std::shared_ptr<BearerToken>> token = BearerToken::FromFile(flags.token_file);
    if (!token.ok()) return token.status();
    connection.token_ = *std::move(token);
  } else if (env_token != nullptr && *env_token != '\0') {
    connection.token_ = BearerToken::Fixed(std::string(absl::StripAsciiWhitespace(env_token)));
  }
  return connection;
}

absl::Status RescaledConnection::CheckTokenSafeFor(const std::string& address) const {
  if (token_ == nullptr || tls_ || IsLocalAddress(address)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("refusing to send the token (--token-file or RESCALE_TOKEN) in plaintext to ",
                   address, ": connect with --tls or --ca-file"));
}

RescaledConnection RescaledConnection::Insecure() { return Of(grpc::InsecureChannelCredentials()); }

RescaledConnection RescaledConnection::Of(std::shared_ptr<grpc::ChannelCredentials> credentials,
                                          std::shared_ptr<BearerToken> token) {
  RescaledConnection connection;
  connection.credentials_ = std::move(credentials);
  connection.token_ = std::move(token);
  // Given credentials are trusted to be what the caller chose; plaintext
  // ones are the tests' and benchmarks', on loopback.
  connection.tls_ = true;
  return connection;
}

std::shared_ptr<grpc::Channel> RescaledConnection::Dial(const std::string& address,
                                                        const grpc::ChannelArguments& given) const {
  grpc::ChannelArguments args = given;
  if (!tls_server_name_.empty()) args.SetSslTargetNameOverride(tls_server_name_);
  if (token_ == nullptr || !CheckTokenSafeFor(address).ok()) {
    return grpc::CreateCustomChannel(address, credentials_, args);
  }
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> creators;
  creators.push_back(std::make_unique<BearerTokenInterceptorFactory>(token_));
  return grpc::experimental::CreateCustomChannelWithInterceptors(address, credentials_, args,
                                                                 std::move(creators));
}

}  // namespace rescale::client
