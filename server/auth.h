// Who may call rescaled, and what they may do.
//
// Identities come from a token file (--auth_token_file: one CSV line per
// identity, `token,user,role,namespaces`, clients send `authorization:
// Bearer TOKEN`) or, with mutual TLS (--tls_client_ca_file), from the
// verified client certificate: its CN is the user and its O the role, and
// the namespaces are those of the token file's line for that user, or all.
// Four roles, each a superset of the one before it except reporter:
//
//   reporter    MetricsService only (samples), for jobs in its namespaces
//   viewer      every read and watch, in its namespaces
//   controller  viewer + job writes and ReportApplied in its namespaces,
//               SetCapacity when it has every namespace (`*`)
//   admin       everything, in its namespaces (cluster-wide calls need `*`)
//
// Health and reflection are not Rescale's services and stay open. With
// neither a token file nor client certificates, every caller is
// "anonymous" and may do everything, as before authentication existed:
// rescaled only allows that on a loopback address (or with --insecure).
#ifndef RESCALE_SERVER_AUTH_H_
#define RESCALE_SERVER_AUTH_H_

#include <grpcpp/server_context.h>

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "rescale/mutex.h"
#include "rescale/types.h"

namespace rescale::server {

enum class Role { kReporter, kViewer, kController, kAdmin };

absl::string_view RoleName(Role role);
std::optional<Role> ParseRole(absl::string_view name);

// What a method needs from its caller (see the table above).
enum class Access {
  kReportSamples,  // MetricsService
  kRead,           // Get*, List*, Watch*
  kWrite,          // RegisterJob, UpdateJob, DeregisterJob, ReportApplied
  kClusterWrite,   // SetCapacity: cluster-wide, so every namespace is needed
  kLeadership,     // who leads (GetCluster's leader fields): every role, so
                   // every client can follow the leader
};

struct Identity {
  std::string user;
  Role role = Role::kAdmin;
  // Authentication is off, or failed: the caller is nobody in particular.
  bool anonymous = false;
  // Where an unidentified caller called from (gRPC's peer string), for the
  // audit log; empty otherwise.
  std::string peer;
  bool all_namespaces = true;
  std::vector<std::string> namespaces;  // sorted, when !all_namespaces

  bool MayAccessNamespace(absl::string_view ns) const;
  // "*" or "team-a;team-b", as in the token file.
  std::string NamespacesText() const;
  // "anonymous" or `user "alice" (role viewer)`, for messages.
  std::string Describe() const;
};

// A parsed token file. Tokens are kept as SHA-256 digests and looked up by
// comparing the presented token's digest with every entry's in constant
// time, so neither the position of a match nor a common prefix shows in the
// time a lookup takes.
class TokenTable {
 public:
  // `text` is the file's content; `source` names it in errors, which give
  // the line and the field: `tokens.csv:3: role "root" is not one of
  // reporter, viewer, controller, admin`. Blank lines and lines starting
  // with '#' are skipped. Tokens and users must be unique.
  static absl::StatusOr<TokenTable> Parse(absl::string_view text, absl::string_view source);

  std::shared_ptr<const Identity> FindByToken(absl::string_view token) const;
  std::shared_ptr<const Identity> FindByUser(absl::string_view user) const;
  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    std::array<uint8_t, 32> token_digest;
    std::shared_ptr<const Identity> identity;
  };
  std::vector<Entry> entries_;
};

struct AuthOptions {
  // --auth_token_file; empty = no tokens.
  std::string token_file;
  // --tls_client_ca_file is set: every peer presents a verified client
  // certificate, which identifies it when it sends no token.
  bool client_certificates = false;
  // How often the token file is checked for changes (StartReloading).
  absl::Duration reload_interval = absl::Seconds(10);
};

class Authenticator {
 public:
  // Reads the token file; its errors name it (--auth_token_file).
  static absl::StatusOr<std::unique_ptr<Authenticator>> Create(AuthOptions options);
  ~Authenticator();

  // False when every caller is anonymous (no token file, no client
  // certificates).
  bool enabled() const { return !options_.token_file.empty() || options_.client_certificates; }

  // The caller of a call: the token's identity, else the client
  // certificate's; UNAUTHENTICATED when it presents neither or an unknown
  // token; PERMISSION_DENIED for a certificate whose O is not a role.
  absl::StatusOr<std::shared_ptr<const Identity>> Authenticate(
      const grpc::ServerContextBase& context) const;

  // Re-reads the token file when its modification time, size or inode
  // changed since the last read. A file that does not parse any more keeps
  // the last good table in force (locking everyone out for a typo would
  // stop every agent) and returns the error. OK when nothing changed.
  absl::Status ReloadIfChanged() ABSL_LOCKS_EXCLUDED(mu_, reading_mu_);
  // A background thread calls ReloadIfChanged every reload_interval and
  // logs what it did; stopped by the destructor.
  void StartReloading();

 private:
  struct FileStamp {
    int64_t mtime_ns = 0;
    int64_t size = 0;
    uint64_t inode = 0;
    bool operator==(const FileStamp&) const = default;
  };

  explicit Authenticator(AuthOptions options) : options_(std::move(options)) {}
  std::shared_ptr<const TokenTable> Table() const ABSL_LOCKS_EXCLUDED(mu_);

  const AuthOptions options_;
  mutable Mutex mu_;
  // Null without a token file.
  std::shared_ptr<const TokenTable> table_ ABSL_GUARDED_BY(mu_);
  FileStamp stamp_ ABSL_GUARDED_BY(mu_);

  // Serialises ReloadIfChanged (the reload thread and SIGHUP): a slower
  // reload of an older file must not install it over a newer one. Guards
  // no member: it orders whole reloads, file reads included.
  Mutex reading_mu_ ABSL_ACQUIRED_BEFORE(mu_);

  Mutex reload_mu_;
  CondVar reload_cv_;
  bool stopping_ ABSL_GUARDED_BY(reload_mu_) = false;
  std::thread reloader_;
};

// Whether `identity` may make a call of kind `access` to `method`
// ("rescale.v1.JobService/DeregisterJob") about namespace `ns` (empty: the
// call names none, e.g. a list of every namespace, which the caller's
// namespaces then filter). PERMISSION_DENIED names the user, the role and
// the method.
absl::Status Authorize(const Identity& identity, Access access, absl::string_view method,
                       absl::string_view ns);

// JobNamespace (rescale/types.h, the one rule, which says why an id without
// '/' is its own namespace) as the absl::string_view the checks here take:
// Debian's Abseil has its own string_view type.
inline absl::string_view NamespaceOfJobId(absl::string_view job_id) {
  const std::string_view ns = JobNamespace(std::string_view(job_id.data(), job_id.size()));
  return absl::string_view(ns.data(), ns.size());
}

// The identity of every caller when authentication is off.
std::shared_ptr<const Identity> AnonymousIdentity();

}  // namespace rescale::server

#endif  // RESCALE_SERVER_AUTH_H_
