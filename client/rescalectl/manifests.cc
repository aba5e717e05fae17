// Reading JobSpec manifests for rescalectl (see manifests.h).
#include "client/rescalectl/manifests.h"

#include <google/protobuf/util/json_util.h>
#include <grpcpp/grpcpp.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/common/credentials.h"
#include "client/rescalectl/output.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "rescale/read_file.h"
#include "rescale/v1/rescale.grpc.pb.h"

namespace rescale::cli {

std::optional<std::string> ReadManifest(const std::string& path, std::istream& in,
                                        std::ostream& err) {
  std::ostringstream content;
  if (path == "-") {
    content << in.rdbuf();
    return content.str();
  }
  absl::StatusOr<std::string> read = ReadFileToString(path, "manifest");
  if (!read.ok()) {
    err << "error: " << read.status().message() << "\n";
    return std::nullopt;
  }
  return *std::move(read);
}

namespace {

// yaml-cpp 0.7's LoadAll never returns when a ',' stands at the top level
// of a document ("{...},{...}", or a leading ','): each document ends before
// the ',' without consuming it, so LoadAll collects empty documents until
// memory runs out. A first pass over the parser's events finds a document
// that starts where the previous one did; ReadJobSpecs reports it instead.
class DocumentStarts final : public YAML::EventHandler {
 public:
  YAML::Mark last;
  void OnDocumentStart(const YAML::Mark& mark) override { last = mark; }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

// Where the parser stops making progress, or nullopt. Throws
// YAML::Exception for syntax errors, as LoadAll would.
std::optional<YAML::Mark> FindStuckDocument(const std::string& content) {
  std::istringstream stream(content);
  YAML::Parser parser(stream);
  DocumentStarts starts;
  std::optional<int> previous_start;
  while (parser.HandleNextDocument(starts)) {
    if (previous_start == starts.last.pos) return starts.last;
    previous_start = starts.last.pos;
  }
  return std::nullopt;
}

// A document is either a bare JobSpec or a kubectl-style wrapper
// {apiVersion, kind, metadata, spec}. In the wrapper, metadata.name (and
// metadata.namespace, default "default") supply the job id when the spec
// has none. Sets `error` instead when the document is neither.
struct UnwrappedSpec {
  nlohmann::json spec;
  std::string error;
};

UnwrappedSpec UnwrapSpec(nlohmann::json document) {
  if (!document.is_object()) return {nullptr, "expected a mapping (a JobSpec)"};
  if (!document.contains("spec")) return {std::move(document), ""};
  if (!document["spec"].is_object()) return {nullptr, "\"spec\" must be a mapping"};
  for (const auto& [key, value] : document.items()) {
    if (key != "apiVersion" && key != "kind" && key != "metadata" && key != "spec") {
      return {nullptr, absl::StrCat("unknown top-level key \"", key,
                                    "\" (a wrapped document has apiVersion, kind, metadata, "
                                    "spec)")};
    }
  }
  nlohmann::json spec = document["spec"];
  const bool spec_has_id = spec.contains("jobId") || spec.contains("job_id");
  if (document.contains("metadata") && document["metadata"].is_object() && !spec_has_id) {
    const auto& metadata = document["metadata"];
    if (metadata.contains("name") && metadata["name"].is_string()) {
      std::string ns = "default";
      if (metadata.contains("namespace") && metadata["namespace"].is_string()) {
        ns = metadata["namespace"].get<std::string>();
      }
      spec["jobId"] = ns + "/" + metadata["name"].get<std::string>();
    }
  }
  return {std::move(spec), ""};
}

}  // namespace

std::optional<std::vector<SpecDocument>> ReadJobSpecs(const std::vector<std::string>& paths,
                                                      std::istream& in, std::ostream& err) {
  std::vector<SpecDocument> specs;
  for (const std::string& path : paths) {
    const std::string display_name = path == "-" ? "<stdin>" : path;
    std::optional<std::string> content = ReadManifest(path, in, err);
    if (!content) return std::nullopt;

    // JSON is (for manifests) a subset of YAML, so one parser serves both.
    std::vector<YAML::Node> documents;
    try {
      if (std::optional<YAML::Mark> stuck = FindStuckDocument(*content)) {
        err << "error: parsing \"" << display_name << "\": line " << stuck->line + 1 << ", column "
            << stuck->column + 1
            << ": unexpected ',' at the top level of a document"
               " (documents are separated by ---)\n";
        return std::nullopt;
      }
      documents = YAML::LoadAll(*content);
    } catch (const YAML::Exception& e) {
      err << "error: parsing \"" << display_name << "\": line " << e.mark.line + 1 << ", column "
          << e.mark.column + 1 << ": " << e.msg << "\n";
      return std::nullopt;
    }

    size_t specs_in_file = 0;
    for (size_t index = 0; index < documents.size(); ++index) {
      const YAML::Node& document = documents[index];
      // "---" at the end of a file, or between two, makes an empty document.
      if (document.IsNull()) continue;
      const std::string origin = absl::StrCat("\"", display_name, "\" document ", index + 1,
                                              " (line ", document.Mark().line + 1, ")");
      nlohmann::json json;
      try {
        json = YamlToJson(document);
      } catch (const std::invalid_argument& e) {
        err << "error: " << origin << ": " << e.what() << "\n";
        return std::nullopt;
      }
      UnwrappedSpec unwrapped = UnwrapSpec(std::move(json));
      if (!unwrapped.error.empty()) {
        err << "error: " << origin << ": " << unwrapped.error << "\n";
        return std::nullopt;
      }
      // yaml-cpp passes bytes through as they are; JSON text must be UTF-8,
      // and nlohmann's dump throws on anything else.
      std::string spec_json;
      try {
        spec_json = unwrapped.spec.dump();
      } catch (const nlohmann::json::exception& e) {
        err << "error: " << origin << ": not UTF-8 text (" << e.what() << ")\n";
        return std::nullopt;
      }
      SpecDocument spec_document;
      spec_document.origin = origin;
      google::protobuf::util::JsonParseOptions options;
      // A misspelled field must fail loudly, not be dropped.
      options.ignore_unknown_fields = false;
      const auto status =
          google::protobuf::util::JsonStringToMessage(spec_json, &spec_document.spec, options);
      if (!status.ok()) {
        err << "error: " << origin << ": invalid JobSpec: " << status.message() << "\n";
        return std::nullopt;
      }
      specs.push_back(std::move(spec_document));
      ++specs_in_file;
    }
    if (specs_in_file == 0) {
      err << "error: \"" << display_name << "\" contains no job specs\n";
      return std::nullopt;
    }
  }
  return specs;
}

}  // namespace rescale::cli
