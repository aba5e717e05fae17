// Token files, caller identities and the role table (see server/auth.h).
#include "server/auth.h"

#include <grpc/grpc_security_constants.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cstring>
#include <map>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "rescale/read_file.h"
#include "rescale/validation.h"

namespace rescale::server {
namespace {

// Shorter tokens can be guessed by trying: 16 characters of base64 are 96
// bits. `openssl rand -base64 32` gives 44.
constexpr size_t kMinTokenLength = 16;

std::array<uint8_t, 32> Sha256(absl::string_view data) {
  std::array<uint8_t, 32> digest{};
  unsigned int length = 0;
  EVP_Digest(data.data(), data.size(), digest.data(), &length, EVP_sha256(), nullptr);
  return digest;
}

bool ContainsSpaceOrControl(absl::string_view s) {
  return std::any_of(s.begin(), s.end(), [](char c) {
    return absl::ascii_isspace(static_cast<unsigned char>(c)) ||
           absl::ascii_iscntrl(static_cast<unsigned char>(c));
  });
}

// The first O= value of an RFC 2253 subject ("CN=alice,O=controller", as
// gRPC prints it), with RFC 2253's backslash escapes undone; empty when it
// has none.
std::string OrganizationOf(absl::string_view subject) {
  std::vector<std::string> parts(1);
  for (size_t i = 0; i < subject.size(); ++i) {
    if (subject[i] == '\\' && i + 1 < subject.size()) {
      parts.back().push_back(subject[++i]);
    } else if (subject[i] == ',' || subject[i] == '+') {
      parts.emplace_back();
    } else {
      parts.back().push_back(subject[i]);
    }
  }
  for (const std::string& part : parts) {
    absl::string_view attribute = absl::StripAsciiWhitespace(part);
    if (absl::StartsWith(attribute, "O=")) return std::string(attribute.substr(2));
  }
  return "";
}

std::string PropertyOf(const grpc::AuthContext& context, const char* name) {
  std::vector<grpc::string_ref> values = context.FindPropertyValues(name);
  if (values.empty()) return "";
  return std::string(values.front().data(), values.front().size());
}

absl::string_view RolesFor(Access access) {
  switch (access) {
    case Access::kReportSamples:
      return "reporter or admin";
    case Access::kRead:
      return "viewer, controller or admin";
    case Access::kWrite:
    case Access::kClusterWrite:
      return "controller or admin";
    case Access::kLeadership:
      return "any role";
  }
  return "admin";
}

bool RoleAllows(Role role, Access access) {
  switch (access) {
    case Access::kReportSamples:
      return role == Role::kReporter || role == Role::kAdmin;
    case Access::kRead:
      return role != Role::kReporter;
    case Access::kWrite:
    case Access::kClusterWrite:
      return role == Role::kController || role == Role::kAdmin;
    case Access::kLeadership:
      return true;
  }
  return false;
}

}  // namespace

absl::string_view RoleName(Role role) {
  switch (role) {
    case Role::kReporter:
      return "reporter";
    case Role::kViewer:
      return "viewer";
    case Role::kController:
      return "controller";
    case Role::kAdmin:
      return "admin";
  }
  return "unknown";
}

std::optional<Role> ParseRole(absl::string_view name) {
  for (Role role : {Role::kReporter, Role::kViewer, Role::kController, Role::kAdmin}) {
    if (name == RoleName(role)) return role;
  }
  return std::nullopt;
}

bool Identity::MayAccessNamespace(absl::string_view ns) const {
  return all_namespaces || std::binary_search(namespaces.begin(), namespaces.end(), ns);
}

std::string Identity::NamespacesText() const {
  return all_namespaces ? "*" : absl::StrJoin(namespaces, ";");
}

std::string Identity::Describe() const {
  if (anonymous) return "anonymous";
  return absl::StrFormat("user \"%s\" (role %s)", user, RoleName(role));
}

absl::StatusOr<TokenTable> TokenTable::Parse(absl::string_view text, absl::string_view source) {
  TokenTable table;
  std::set<std::array<uint8_t, 32>> tokens;
  std::map<std::string, std::shared_ptr<const Identity>> users;
  int line_number = 0;
  for (absl::string_view raw : absl::StrSplit(text, '\n')) {
    ++line_number;
    const absl::string_view line = absl::StripAsciiWhitespace(raw);
    if (line.empty() || line.front() == '#') continue;
    auto error = [&](const std::string& what) {
      return absl::InvalidArgumentError(absl::StrFormat("%s:%d: %s", source, line_number, what));
    };
    std::vector<absl::string_view> fields = absl::StrSplit(line, ',');
    if (fields.size() != 4) {
      return error(absl::StrFormat(
          "expected 4 comma-separated fields (token,user,role,namespaces), got %d", fields.size()));
    }
    for (absl::string_view& field : fields) field = absl::StripAsciiWhitespace(field);
    const absl::string_view token = fields[0];
    const absl::string_view user = fields[1];
    if (token.size() < kMinTokenLength || ContainsSpaceOrControl(token)) {
      return error(absl::StrFormat(
          "token: must be at least %d characters without spaces (e.g. `openssl rand -base64 "
          "32`), got %d",
          kMinTokenLength, token.size()));
    }
    if (user.empty() || ContainsSpaceOrControl(user)) {
      return error("user: must be non-empty, without spaces");
    }
    std::optional<Role> role = ParseRole(fields[2]);
    if (!role) {
      return error(absl::StrFormat("role \"%s\" is not one of reporter, viewer, controller, admin",
                                   fields[2]));
    }
    auto identity = std::make_shared<Identity>();
    identity->user = std::string(user);
    identity->role = *role;
    if (fields[3] != "*") {
      identity->all_namespaces = false;
      for (absl::string_view ns : absl::StrSplit(fields[3], ';')) {
        ns = absl::StripAsciiWhitespace(ns);
        if (!IsDns1123Label(std::string_view(ns.data(), ns.size()))) {
          return error(
              absl::StrFormat("namespaces: \"%s\" is not a DNS-1123 label; give * or ns1;ns2", ns));
        }
        identity->namespaces.emplace_back(ns);
      }
      std::sort(identity->namespaces.begin(), identity->namespaces.end());
      identity->namespaces.erase(
          std::unique(identity->namespaces.begin(), identity->namespaces.end()),
          identity->namespaces.end());
    }
    Entry entry{Sha256(token), std::move(identity)};
    if (!tokens.insert(entry.token_digest).second) {
      return error(absl::StrFormat("token of user \"%s\" is already another line's", user));
    }
    // A user may have several tokens (to rotate one without an outage:
    // add the new line, move the clients, remove the old), all with the
    // same role and namespaces.
    if (auto [first, inserted] = users.emplace(std::string(user), entry.identity); !inserted) {
      const Identity& before = *first->second;
      if (before.role != entry.identity->role ||
          before.all_namespaces != entry.identity->all_namespaces ||
          before.namespaces != entry.identity->namespaces) {
        return error(absl::StrFormat(
            "user \"%s\" has another line with a different role or namespaces; a user's "
            "tokens must agree",
            user));
      }
    }
    table.entries_.push_back(std::move(entry));
  }
  return table;
}

std::shared_ptr<const Identity> TokenTable::FindByToken(absl::string_view token) const {
  const std::array<uint8_t, 32> digest = Sha256(token);
  // Every entry is compared, with CRYPTO_memcmp, whatever matched before.
  std::shared_ptr<const Identity> found;
  for (const Entry& entry : entries_) {
    if (CRYPTO_memcmp(entry.token_digest.data(), digest.data(), digest.size()) == 0) {
      found = entry.identity;
    }
  }
  return found;
}

std::shared_ptr<const Identity> TokenTable::FindByUser(absl::string_view user) const {
  for (const Entry& entry : entries_) {
    if (entry.identity->user == user) return entry.identity;
  }
  return nullptr;
}

absl::StatusOr<std::unique_ptr<Authenticator>> Authenticator::Create(AuthOptions options) {
  if (options.reload_interval < absl::Seconds(1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("credentials reload interval must be at least 1s, got ",
                     absl::FormatDuration(options.reload_interval)));
  }
  std::unique_ptr<Authenticator> auth(new Authenticator(std::move(options)));
  if (!auth->options_.token_file.empty()) {
    if (absl::Status loaded = auth->ReloadIfChanged(); !loaded.ok()) return loaded;
  }
  return auth;
}

Authenticator::~Authenticator() {
  {
    MutexLock lock(reload_mu_);
    stopping_ = true;
  }
  reload_cv_.SignalAll();
  if (reloader_.joinable()) reloader_.join();
}

std::shared_ptr<const TokenTable> Authenticator::Table() const {
  MutexLock lock(mu_);
  return table_;
}

absl::Status Authenticator::ReloadIfChanged() {
  if (options_.token_file.empty()) return absl::OkStatus();
  MutexLock reading(reading_mu_);
  struct stat info {};
  if (stat(options_.token_file.c_str(), &info) != 0) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "cannot read --auth_token_file \"%s\": %s", options_.token_file, std::strerror(errno)));
  }
  const FileStamp stamp{
      .mtime_ns = int64_t{info.st_mtim.tv_sec} * 1'000'000'000 + info.st_mtim.tv_nsec,
      .size = info.st_size,
      .inode = info.st_ino};
  {
    MutexLock lock(mu_);
    if (table_ != nullptr && stamp == stamp_) return absl::OkStatus();
  }
  absl::StatusOr<std::string> text = ReadFileToString(options_.token_file, "--auth_token_file");
  if (!text.ok()) return text.status();
  absl::StatusOr<TokenTable> table =
      TokenTable::Parse(*text, absl::StrCat("--auth_token_file ", options_.token_file));
  if (!table.ok()) return table.status();
  auto parsed = std::make_shared<const TokenTable>(*std::move(table));
  MutexLock lock(mu_);
  const bool first = table_ == nullptr;
  table_ = std::move(parsed);
  stamp_ = stamp;
  spdlog::info("{} {} identities from {}", first ? "loaded" : "reloaded", table_->size(),
               options_.token_file);
  return absl::OkStatus();
}

void Authenticator::StartReloading() {
  if (options_.token_file.empty() || reloader_.joinable()) return;
  reloader_ = std::thread([this] {
    reload_mu_.Lock();
    while (true) {
      const auto until = std::chrono::steady_clock::now() +
                         absl::ToChronoNanoseconds(options_.reload_interval);
      while (!stopping_ && reload_cv_.WaitUntil(reload_mu_, until)) {
      }
      if (stopping_) break;
      reload_mu_.Unlock();
      if (absl::Status reloaded = ReloadIfChanged(); !reloaded.ok()) {
        spdlog::error("token file not reloaded, the previous one stays in force: {}",
                      std::string(reloaded.message()));
      }
      reload_mu_.Lock();
    }
    reload_mu_.Unlock();
  });
}

absl::StatusOr<std::shared_ptr<const Identity>> Authenticator::Authenticate(
    const grpc::ServerContextBase& context) const {
  if (!enabled()) return AnonymousIdentity();
  const std::shared_ptr<const TokenTable> table = Table();
  const auto& metadata = context.client_metadata();
  if (auto header = metadata.find("authorization"); header != metadata.end() && table) {
    const absl::string_view value(header->second.data(), header->second.size());
    constexpr absl::string_view kBearer = "Bearer ";
    if (!absl::StartsWithIgnoreCase(value, kBearer)) {
      return absl::UnauthenticatedError(
          "the authorization metadata must be \"Bearer TOKEN\" (rescalectl --token-file)");
    }
    std::shared_ptr<const Identity> identity =
        table->FindByToken(absl::StripAsciiWhitespace(value.substr(kBearer.size())));
    if (identity == nullptr) {
      return absl::UnauthenticatedError(
          "unknown token: it is not in rescaled's --auth_token_file (revoked, or a typo?)");
    }
    return identity;
  }
  std::shared_ptr<const grpc::AuthContext> peer = context.auth_context();
  if (options_.client_certificates && peer != nullptr && peer->IsPeerAuthenticated()) {
    const std::string user = PropertyOf(*peer, GRPC_X509_CN_PROPERTY_NAME);
    const std::string organization =
        OrganizationOf(PropertyOf(*peer, GRPC_X509_SUBJECT_PROPERTY_NAME));
    std::optional<Role> role = ParseRole(organization);
    if (user.empty() || !role) {
      return absl::PermissionDeniedError(absl::StrFormat(
          "client certificate CN=\"%s\" O=\"%s\": the CN must name the user and the O be one of "
          "reporter, viewer, controller, admin",
          user, organization));
    }
    auto identity = std::make_shared<Identity>();
    identity->user = user;
    identity->role = *role;
    if (table != nullptr) {
      if (std::shared_ptr<const Identity> line = table->FindByUser(user)) {
        identity->all_namespaces = line->all_namespaces;
        identity->namespaces = line->namespaces;
      }
    }
    return std::shared_ptr<const Identity>(std::move(identity));
  }
  return absl::UnauthenticatedError(
      options_.client_certificates
          ? "no credentials: send \"authorization: Bearer TOKEN\" or a client certificate"
          : "no credentials: send \"authorization: Bearer TOKEN\" (rescalectl --token-file or "
            "RESCALE_TOKEN)");
}

absl::Status Authorize(const Identity& identity, Access access, absl::string_view method,
                       absl::string_view ns) {
  if (identity.anonymous) return absl::OkStatus();
  if (!RoleAllows(identity.role, access)) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "%s may not call %s: it needs role %s", identity.Describe(), method, RolesFor(access)));
  }
  if (access == Access::kClusterWrite && !identity.all_namespaces) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "%s may not call %s: it changes the whole cluster, which needs every namespace (*); "
        "this user has %s",
        identity.Describe(), method, identity.NamespacesText()));
  }
  if (!ns.empty() && !identity.MayAccessNamespace(ns)) {
    return absl::PermissionDeniedError(
        absl::StrFormat("%s may not call %s for namespace \"%s\": its namespaces are %s",
                        identity.Describe(), method, ns, identity.NamespacesText()));
  }
  return absl::OkStatus();
}

std::shared_ptr<const Identity> AnonymousIdentity() {
  static const auto* const kAnonymous = new std::shared_ptr<const Identity>([] {
    auto identity = std::make_shared<Identity>();
    identity->user = "anonymous";
    identity->anonymous = true;
    return identity;
  }());
  return *kAnonymous;
}

}  // namespace rescale::server
