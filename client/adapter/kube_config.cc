// Kubeconfig and in-cluster configuration parsing (see kube_config.h).
#include "client/adapter/kube_config.h"

#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <filesystem>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "rescale/read_file.h"

namespace rescale::adapter {
namespace {

std::string Resolve(const std::string& base_dir, const std::string& path) {
  if (path.empty() || std::filesystem::path(path).is_absolute() || base_dir.empty()) return path;
  return (std::filesystem::path(base_dir) / path).string();
}

// Finds the entry named `name` in a kubeconfig list (clusters, users,
// contexts) and returns its inner map (cluster:, user:, context:).
absl::StatusOr<YAML::Node> FindNamed(const YAML::Node& root, const std::string& list,
                                     const std::string& inner, const std::string& name) {
  const YAML::Node entries = root[list];
  if (entries && entries.IsSequence()) {
    for (const YAML::Node& entry : entries) {
      // yaml-cpp throws when a scalar or a list is subscripted, or a
      // non-scalar read as a string: entries of another shape are not the
      // one we look for.
      if (!entry.IsMap()) continue;
      const YAML::Node entry_name = entry["name"];
      if (entry_name && entry_name.IsScalar() && entry_name.Scalar() == name) {
        if (!entry[inner] || !entry[inner].IsMap()) {
          return absl::InvalidArgumentError(
              absl::StrCat("kubeconfig: ", list, "[name=", name, "] has no \"", inner, "\" map"));
        }
        return entry[inner];
      }
    }
  }
  return absl::NotFoundError(absl::StrCat("kubeconfig: no entry named \"", name, "\" in ", list));
}

std::string Str(const YAML::Node& map, const std::string& key) {
  const YAML::Node value = map[key];
  return value && value.IsScalar() ? value.as<std::string>() : std::string();
}

absl::StatusOr<std::string> Base64Field(const YAML::Node& map, const std::string& key) {
  std::string encoded = Str(map, key);
  if (encoded.empty()) return std::string();
  std::string decoded;
  if (!absl::Base64Unescape(encoded, &decoded)) {
    return absl::InvalidArgumentError(absl::StrCat("kubeconfig: ", key, " is not valid base64"));
  }
  return decoded;
}

}  // namespace

absl::StatusOr<KubeConfig> ParseKubeconfig(const std::string& yaml_text,
                                           const std::string& base_dir,
                                           const std::string& context) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("kubeconfig: not YAML: ", e.what()));
  }
  if (!root.IsMap()) return absl::InvalidArgumentError("kubeconfig: not a YAML map");
  std::string context_name = context.empty() ? Str(root, "current-context") : context;
  if (context_name.empty()) {
    return absl::InvalidArgumentError("kubeconfig: no current-context (and no context given)");
  }
  absl::StatusOr<YAML::Node> ctx = FindNamed(root, "contexts", "context", context_name);
  if (!ctx.ok()) return ctx.status();
  KubeConfig config;
  config.default_namespace = Str(*ctx, "namespace");
  const std::string cluster_name = Str(*ctx, "cluster");
  const std::string user_name = Str(*ctx, "user");

  absl::StatusOr<YAML::Node> cluster = FindNamed(root, "clusters", "cluster", cluster_name);
  if (!cluster.ok()) return cluster.status();
  config.server = Str(*cluster, "server");
  if (config.server.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("kubeconfig: cluster \"", cluster_name, "\" has no server"));
  }
  if (Str(*cluster, "insecure-skip-tls-verify") == "true") {
    return absl::InvalidArgumentError(absl::StrCat(
        "kubeconfig: cluster \"", cluster_name,
        "\" sets insecure-skip-tls-verify; rescale-adapter always verifies TLS: give it "
        "certificate-authority or certificate-authority-data"));
  }
  config.ca_file = Resolve(base_dir, Str(*cluster, "certificate-authority"));
  absl::StatusOr<std::string> ca_data = Base64Field(*cluster, "certificate-authority-data");
  if (!ca_data.ok()) return ca_data.status();
  config.ca_data = *ca_data;

  if (!user_name.empty()) {
    absl::StatusOr<YAML::Node> user = FindNamed(root, "users", "user", user_name);
    if (!user.ok()) return user.status();
    config.token = Str(*user, "token");
    config.token_file = Resolve(base_dir, Str(*user, "tokenFile"));
    config.client_cert_file = Resolve(base_dir, Str(*user, "client-certificate"));
    config.client_key_file = Resolve(base_dir, Str(*user, "client-key"));
    absl::StatusOr<std::string> cert = Base64Field(*user, "client-certificate-data");
    if (!cert.ok()) return cert.status();
    config.client_cert_data = *cert;
    absl::StatusOr<std::string> key = Base64Field(*user, "client-key-data");
    if (!key.ok()) return key.status();
    config.client_key_data = *key;
    if ((*user)["exec"] || (*user)["auth-provider"]) {
      if (config.token.empty() && config.token_file.empty() && config.client_cert_file.empty() &&
          config.client_cert_data.empty()) {
        return absl::UnimplementedError(absl::StrCat(
            "kubeconfig: user \"", user_name,
            "\" uses exec/auth-provider credentials, which rescale-adapter does not run; use a "
            "token or client certificate"));
      }
    }
  }
  return config;
}

absl::StatusOr<KubeConfig> LoadKubeconfig(const std::string& path, const std::string& context) {
  absl::StatusOr<std::string> text = ReadFileToString(path, "kubeconfig");
  if (!text.ok()) return text.status();
  absl::StatusOr<KubeConfig> config =
      ParseKubeconfig(*text, std::filesystem::path(path).parent_path().string(), context);
  if (!config.ok()) {
    return absl::Status(config.status().code(),
                        absl::StrCat(config.status().message(), " (file \"", path, "\")"));
  }
  return config;
}

absl::StatusOr<KubeConfig> InClusterConfig(const std::string& mount_dir) {
  const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
  const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
  return InClusterConfigFrom(host ? host : "", port ? port : "", mount_dir);
}

absl::StatusOr<KubeConfig> InClusterConfigFrom(const std::string& host, const std::string& port,
                                               const std::string& mount_dir) {
  if (host.empty() || port.empty()) {
    return absl::NotFoundError(
        "not in a cluster: KUBERNETES_SERVICE_HOST/KUBERNETES_SERVICE_PORT are unset");
  }
  KubeConfig config;
  std::string host_str = host;
  // An IPv6 service address needs brackets in a URL.
  if (host_str.find(':') != std::string::npos) host_str = absl::StrCat("[", host_str, "]");
  config.server = absl::StrCat("https://", host_str, ":", port);
  config.token_file = mount_dir + "/token";
  config.ca_file = mount_dir + "/ca.crt";
  if (!std::filesystem::exists(config.token_file)) {
    return absl::NotFoundError(
        absl::StrCat("in-cluster token \"", config.token_file, "\" is missing"));
  }
  absl::StatusOr<std::string> ns = ReadFileToString(mount_dir + "/namespace", "namespace file");
  if (ns.ok()) config.default_namespace = *ns;
  return config;
}

std::string DefaultKubeconfigPath() {
  if (const char* env = std::getenv("KUBECONFIG"); env != nullptr && *env != '\0') {
    std::vector<std::string> parts = absl::StrSplit(env, ':', absl::SkipEmpty());
    if (!parts.empty()) return parts.front();
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    std::string path = std::string(home) + "/.kube/config";
    if (std::filesystem::exists(path)) return path;
  }
  return "";
}

}  // namespace rescale::adapter
