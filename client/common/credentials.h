// How Rescale's clients (rescalectl, rescale-adapter, rescale-agent) reach
// rescaled and prove who they are: one rule for their --tls, --ca-file,
// --cert-file, --key-file and --token-file flags (and RESCALE_TOKEN).
//
// TLS when --tls, a CA file or a client certificate is given; plaintext
// otherwise. A token, when there is one, goes with every call as
// `authorization: Bearer TOKEN`, added by a client interceptor: gRPC's own
// call credentials refuse plaintext channels, and a loopback rescaled with
// a token file but no TLS is a configuration users run (and tests).
#ifndef RESCALE_CLIENT_COMMON_CREDENTIALS_H_
#define RESCALE_CLIENT_COMMON_CREDENTIALS_H_

#include <grpcpp/channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>

#include <memory>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "rescale/mutex.h"

namespace rescale::client {

// What a client's security flags say.
struct SecurityFlags {
  bool tls = false;
  std::string ca_file;
  // Mutual TLS: the client's certificate chain and key (PEM).
  std::string cert_file;
  std::string key_file;
  // The name the server's certificate must be valid for, when it is not
  // the dialled host: with high availability clients follow the leader to
  // its pod IP, which a certificate for the Service's name does not cover.
  std::string tls_server_name;
  // How often --cert-file, --key-file and --ca-file are checked for a
  // renewal when a client certificate is used (not a flag; tests shorten
  // it). >= 1.
  unsigned int certificate_reload_seconds = 10;
  // A file holding the token (a Kubernetes Secret mounted as a file);
  // read again when it changes. Empty: the RESCALE_TOKEN environment
  // variable, if set.
  std::string token_file;
};

// Adds --tls, --ca-file, --cert-file, --key-file, --tls-server-name and
// --token-file to `app`, in `group` of its help; each may come from the
// environment too (RESCALE_CA_FILE, RESCALE_CERT_FILE, RESCALE_KEY_FILE,
// RESCALE_TLS_SERVER_NAME, RESCALE_TOKEN_FILE; and RESCALE_TOKEN holds a
// token itself), as a container's health check needs.
void AddSecurityFlags(CLI::App& app, SecurityFlags& flags, const std::string& group = "Security");

// The bearer token of every call: fixed, or a file's trimmed content, read
// again (at most once a second) when the file's modification time or size
// changed, so a rotated Secret is picked up without a restart. When a new
// read fails, the last token stays.
class BearerToken {
 public:
  static absl::StatusOr<std::shared_ptr<BearerToken>> FromFile(const std::string& path);
  static std::shared_ptr<BearerToken> Fixed(std::string token);

  std::string Current();

 private:
  BearerToken() = default;
  std::string path_;  // empty: fixed
  Mutex mu_;
  std::string token_ ABSL_GUARDED_BY(mu_);
  int64_t stamp_mtime_ns_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t stamp_size_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t checked_at_ns_ ABSL_GUARDED_BY(mu_) = 0;
};

// Credentials and token, ready to dial any number of rescaled replicas.
class RescaledConnection {
 public:
  // `env_token` is RESCALE_TOKEN's value (null when unset). Errors name the
  // flag whose file cannot be read or is missing its partner.
  static absl::StatusOr<RescaledConnection> Create(const SecurityFlags& flags,
                                                   const char* env_token);
  // Plaintext, no token.
  static RescaledConnection Insecure();
  // The caller vouches for `credentials` (tests, benchmarks): the token is
  // sent whatever they are.
  static RescaledConnection Of(std::shared_ptr<grpc::ChannelCredentials> credentials,
                               std::shared_ptr<BearerToken> token = nullptr);

  // A channel to `address`. A token goes only over TLS or to a local
  // address (include/rescale/address.h): elsewhere the calls go without it
  // (and fail UNAUTHENTICATED) rather than show it to the network.
  std::shared_ptr<grpc::Channel> Dial(const std::string& address,
                                      const grpc::ChannelArguments& args) const;
  // INVALID_ARGUMENT when a token would go in plaintext to `address`.
  absl::Status CheckTokenSafeFor(const std::string& address) const;
  bool has_token() const { return token_ != nullptr; }
  const std::shared_ptr<grpc::ChannelCredentials>& credentials() const { return credentials_; }

 private:
  std::shared_ptr<grpc::ChannelCredentials> credentials_;
  std::shared_ptr<BearerToken> token_;  // null: calls carry no token
  std::string tls_server_name_;         // empty: the dialled host
  bool tls_ = false;
};

}  // namespace rescale::client

#endif  // RESCALE_CLIENT_COMMON_CREDENTIALS_H_
