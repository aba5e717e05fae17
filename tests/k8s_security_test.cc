// The Kubernetes manifests (docker/k8s): the default set renders with
// `kubectl kustomize` and every object of every manifest parses; and their
// security wiring: what scripts/k8s-credentials.sh makes is what rescaled's
// token file needs (each component a token of the role docs/kubernetes.md gives
// it), and every file a container's flags name is mounted from a Secret
// that holds that key.
#include <yaml-cpp/yaml.h>

#include <array>
#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "server/auth.h"
#include "tests/temp_dir.h"

namespace {

using rescale::server::Role;
using rescale::server::TokenTable;

// Runs `command`, returning its standard output; fails the test when it
// exits non-zero.
std::string Run(const std::string& command) {
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(command.c_str(), "r"), pclose);
  REQUIRE(pipe != nullptr);
  std::string out;
  std::array<char, 4096> buffer;
  while (size_t n = fread(buffer.data(), 1, buffer.size(), pipe.get()))
    out.append(buffer.data(), n);
  REQUIRE(pclose(pipe.release()) == 0);
  return out;
}

// "Kind/namespace/name" -> document, for every document of `yaml`.
std::map<std::string, YAML::Node> ByKey(const std::vector<YAML::Node>& docs) {
  std::map<std::string, YAML::Node> by_key;
  for (const YAML::Node& doc : docs) {
    if (!doc || doc.IsNull()) continue;
    const std::string ns =
        doc["metadata"]["namespace"] ? doc["metadata"]["namespace"].as<std::string>() : "";
    by_key[doc["kind"].as<std::string>() + "/" + ns + "/" +
           doc["metadata"]["name"].as<std::string>()] = doc;
  }
  return by_key;
}

}  // namespace

TEST_CASE("kubectl kustomize renders the default manifests and every manifest's objects parse") {
  const std::filesystem::path k8s = std::filesystem::path(RESCALE_SOURCE_DIR) / "docker" / "k8s";
  // Every object of every manifest, straight from the files.
  std::map<std::string, std::vector<YAML::Node>> objects_of;  // file -> objects
  for (const auto& entry : std::filesystem::recursive_directory_iterator(k8s)) {
    if (entry.path().extension() != ".yaml") continue;
    const std::string file = std::filesystem::relative(entry.path(), k8s).string();
    if (file == "kustomization.yaml") continue;
    INFO(file);
    for (const YAML::Node& doc : YAML::LoadAllFromFile(entry.path().string())) {
      if (!doc || doc.IsNull()) continue;
      REQUIRE(doc.IsMap());
      CHECK(doc["apiVersion"].as<std::string>().size() > 0);
      CHECK(doc["kind"].as<std::string>().size() > 0);
      CHECK(doc["metadata"]["name"].as<std::string>().size() > 0);
      objects_of[file].push_back(doc);
    }
  }
  // namespace, rescaled, adapter, example job, ha, keda, cert-manager
  CHECK(objects_of.size() >= 7);

  // kustomize renders exactly the objects of the files it lists.
  const YAML::Node kustomization = YAML::LoadFile((k8s / "kustomization.yaml").string());
  std::vector<YAML::Node> listed;
  for (const YAML::Node& resource : kustomization["resources"]) {
    const std::string file = resource.as<std::string>();
    INFO(file);
    REQUIRE(objects_of.count(file));
    listed.insert(listed.end(), objects_of[file].begin(), objects_of[file].end());
  }
  const std::string rendered = Run("kubectl kustomize " + k8s.string());
  std::map<std::string, YAML::Node> rendered_objects = ByKey(YAML::LoadAll(rendered));
  std::map<std::string, YAML::Node> listed_objects = ByKey(listed);
  std::set<std::string> rendered_keys, listed_keys;
  for (const auto& [key, doc] : rendered_objects) rendered_keys.insert(key);
  for (const auto& [key, doc] : listed_objects) listed_keys.insert(key);
  CHECK(rendered_keys == listed_keys);
  CHECK(rendered_keys.count("StatefulSet/rescale/rescaled"));
  CHECK(rendered_keys.count("Deployment/rescale/rescale-adapter"));
}

TEST_CASE("k8s-credentials.sh makes a token per component with the role it needs") {
  const std::filesystem::path root(RESCALE_SOURCE_DIR);
  rescale::testing::TempDir dir;
  const std::string ca = dir.File("ca.crt");
  std::ofstream(ca) << "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
  const std::string script = (root / "scripts" / "k8s-credentials.sh").string();
  const std::string yaml = Run("bash " + script + " --ca-file " + ca + " team-a team-b");
  std::map<std::string, YAML::Node> secrets = ByKey(YAML::LoadAll(yaml));
  REQUIRE(secrets.count("Secret/rescale/rescale-tokens"));
  auto table = TokenTable::Parse(
      secrets["Secret/rescale/rescale-tokens"]["stringData"]["tokens.csv"].as<std::string>(),
      "tokens.csv");
  REQUIRE(table.status().message() == "");
  CHECK(table->size() == 4);

  auto identity_of = [&](const std::string& key) {
    REQUIRE(secrets.count(key));
    auto identity = table->FindByToken(secrets[key]["stringData"]["token"].as<std::string>());
    REQUIRE(identity != nullptr);
    return identity;
  };
  auto adapter = identity_of("Secret/rescale/rescale-adapter-token");
  CHECK(adapter->user == "rescale-adapter");
  CHECK(adapter->role == Role::kController);
  CHECK(adapter->all_namespaces);
  auto admin = identity_of("Secret/rescale/rescale-admin-token");
  CHECK(admin->role == Role::kAdmin);
  for (const std::string ns : {"team-a", "team-b"}) {
    auto agent = identity_of("Secret/" + ns + "/rescale-agent");
    CHECK(agent->role == Role::kReporter);
    CHECK(agent->namespaces == std::vector<std::string>{ns});
    CHECK(secrets["Secret/" + ns + "/rescale-agent"]["stringData"]["ca.crt"].as<std::string>() ==
          "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n");
  }
  // Fresh tokens each run: running it again rotates them.
  const std::string again = Run("bash " + script + " team-a");
  CHECK(again.find(secrets["Secret/rescale/rescale-adapter-token"]["stringData"]["token"]
                       .as<std::string>()) == std::string::npos);
  // A namespace that is not a label is refused.
  CHECK(std::system(("bash " + script + " Team_A > /dev/null 2>&1").c_str()) != 0);
}

TEST_CASE("every file a manifest's flags name is mounted from a Secret that holds it") {
  const std::filesystem::path k8s = std::filesystem::path(RESCALE_SOURCE_DIR) / "docker" / "k8s";
  // The keys of each Secret the manifests may mount: the script's, and
  // cert-manager's for rescaled-tls.
  const std::map<std::string, std::set<std::string>> secret_keys = {
      {"rescaled-tls", {"tls.crt", "tls.key", "ca.crt"}},
      {"rescale-tokens", {"tokens.csv"}},
      {"rescale-adapter-token", {"token"}},
      {"rescale-admin-token", {"token"}},
      {"rescale-agent", {"token", "ca.crt"}}};
  int checked_files = 0;
  std::set<std::string> secured;
  for (const std::string file : {"rescaled.yaml", "adapter.yaml", "ha/rescaled-ha.yaml"}) {
    for (const YAML::Node& doc : YAML::LoadAllFromFile((k8s / file).string())) {
      if (!doc || !doc["spec"] || !doc["spec"]["template"]) continue;
      const YAML::Node pod = doc["spec"]["template"]["spec"];
      std::map<std::string, YAML::Node> volumes;
      for (const YAML::Node& volume : pod["volumes"])
        volumes[volume["name"].as<std::string>()] = volume;
      for (const YAML::Node& container : pod["containers"]) {
        std::map<std::string, std::string> mounts;  // mountPath -> volume
        for (const YAML::Node& mount : container["volumeMounts"]) {
          mounts[mount["mountPath"].as<std::string>()] = mount["name"].as<std::string>();
        }
        std::set<std::string> flags;
        for (const YAML::Node& arg : container["args"]) {
          const std::string text = arg.as<std::string>();
          flags.insert(text.substr(0, text.find('=')));
          const size_t path = text.find("=/etc/rescale/");
          if (path == std::string::npos) continue;
          const std::filesystem::path named(text.substr(path + 1));
          INFO(file << ": " << text);
          REQUIRE(mounts.count(named.parent_path().string()));
          const YAML::Node volume = volumes[mounts[named.parent_path().string()]];
          REQUIRE(volume["secret"]);
          const std::string secret = volume["secret"]["secretName"].as<std::string>();
          REQUIRE(secret_keys.count(secret));
          CHECK(secret_keys.at(secret).count(named.filename().string()));
          if (volume["secret"]["items"]) {
            bool projected = false;
            for (const YAML::Node& item : volume["secret"]["items"]) {
              projected |= item["path"].as<std::string>() == named.filename().string();
            }
            CHECK(projected);
          }
          ++checked_files;
        }
        // Each program serves or calls rescaled with TLS and a credential.
        const std::string name = container["name"].as<std::string>();
        if (name == "rescaled") {
          CHECK(flags.count("--tls_cert_file"));
          CHECK(flags.count("--auth_token_file"));
          // Client certificates optional, for KEDA (docker/k8s/keda).
          CHECK(flags.count("--tls_client_ca_file"));
          CHECK(flags.count("--tls_client_auth"));
          CHECK_FALSE(flags.count("--insecure"));
        } else {
          CHECK(flags.count("--ca-file"));
          CHECK(flags.count("--token-file"));
        }
        secured.insert(file + ":" + name);
      }
    }
  }
  CHECK(secured == std::set<std::string>{"rescaled.yaml:rescaled", "adapter.yaml:rescale-adapter",
                                         "ha/rescaled-ha.yaml:rescaled"});
  CHECK(checked_files == 10);
}

TEST_CASE("the KEDA example scales the example PyTorchJob with a client certificate for rescaled") {
  const std::filesystem::path k8s = std::filesystem::path(RESCALE_SOURCE_DIR) / "docker" / "k8s";
  std::map<std::string, YAML::Node> keda =
      ByKey(YAML::LoadAllFromFile((k8s / "keda" / "scaledobject.yaml").string()));
  const YAML::Node job = YAML::LoadFile((k8s / "example-pytorchjob.yaml").string());
  const std::string job_ns =
      job["metadata"]["namespace"] ? job["metadata"]["namespace"].as<std::string>() : "default";
  const std::string job_name = job["metadata"]["name"].as<std::string>();

  const std::string scaled_key = "ScaledObject/" + job_ns + "/" + job_name;
  REQUIRE(keda.count(scaled_key));
  const YAML::Node spec = keda[scaled_key]["spec"];
  CHECK(spec["scaleTargetRef"]["apiVersion"].as<std::string>() ==
        job["apiVersion"].as<std::string>());
  CHECK(spec["scaleTargetRef"]["kind"].as<std::string>() == "PyTorchJob");
  CHECK(spec["scaleTargetRef"]["name"].as<std::string>() == job_name);
  const YAML::Node elastic = job["spec"]["elasticPolicy"];
  CHECK(spec["minReplicaCount"].as<int>() == elastic["minReplicas"].as<int>());
  CHECK(spec["maxReplicaCount"].as<int>() == elastic["maxReplicas"].as<int>());

  REQUIRE(spec["triggers"].size() == 1);
  const YAML::Node trigger = spec["triggers"][0];
  CHECK(trigger["type"].as<std::string>() == "external-push");
  CHECK(trigger["metadata"]["job"].as<std::string>() == job_ns + "/" + job_name);
  // rescaled's Service and port, under the name its certificate carries.
  CHECK(trigger["metadata"]["scalerAddress"].as<std::string>() == "rescaled.rescale.svc:50051");
  const std::string auth_key =
      "TriggerAuthentication/" + job_ns + "/" + trigger["authenticationRef"]["name"].as<std::string>();
  REQUIRE(keda.count(auth_key));
  std::set<std::string> parameters;
  for (const YAML::Node& ref : keda[auth_key]["spec"]["secretTargetRef"]) {
    parameters.insert(ref["parameter"].as<std::string>());
  }
  CHECK(parameters == std::set<std::string>{"caCert", "tlsClientCert", "tlsClientKey"});
}
