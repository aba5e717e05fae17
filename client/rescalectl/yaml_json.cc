// json/yaml rendering of messages and YAML→JSON for manifests (see
// output.h), with YAML 1.2 core-schema scalar inference for plain scalars.
#include <google/protobuf/timestamp.pb.h>
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <regex>
#include <set>
#include <stdexcept>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/rescalectl/output.h"
#include "client/rescalectl/output_internal.h"

namespace rescale::cli {
namespace {

// ------------------------------------------------------ scalar inference --

// YAML 1.2 core schema for plain scalars. Deliberately not YAML 1.1: `yes`,
// `on` and `NO` stay strings, so a namespace called "no" is not a bool.
bool IsYamlNull(std::string_view s) {
  return s.empty() || s == "~" || s == "null" || s == "Null" || s == "NULL";
}

std::optional<bool> AsYamlBool(std::string_view s) {
  if (s == "true" || s == "True" || s == "TRUE") return true;
  if (s == "false" || s == "False" || s == "FALSE") return false;
  return std::nullopt;
}

// An integer literal as JSON: signed when it fits int64, unsigned when only
// uint64 holds it. Larger literals stay strings; protobuf's JSON parser then
// reports the range error against the field, which is the useful message.
std::optional<nlohmann::json> AsYamlInteger(std::string_view s) {
  static const std::regex kDecimal("[-+]?[0-9]+");
  static const std::regex kOctal("0o[0-7]+");
  static const std::regex kHex("0x[0-9a-fA-F]+");
  const std::string text(s);
  int base = 10;
  std::string_view digits = s;
  if (std::regex_match(text, kOctal)) {
    base = 8;
    digits.remove_prefix(2);
  } else if (std::regex_match(text, kHex)) {
    base = 16;
    digits.remove_prefix(2);
  } else if (!std::regex_match(text, kDecimal)) {
    return std::nullopt;
  }
  // from_chars accepts '-' but not '+'.
  if (!digits.empty() && digits.front() == '+') digits.remove_prefix(1);
  const char* end = digits.data() + digits.size();
  int64_t signed_value = 0;
  if (auto [ptr, ec] = std::from_chars(digits.data(), end, signed_value, base);
      ec == std::errc() && ptr == end) {
    return nlohmann::json(signed_value);
  }
  uint64_t unsigned_value = 0;
  if (auto [ptr, ec] = std::from_chars(digits.data(), end, unsigned_value, base);
      ec == std::errc() && ptr == end) {
    return nlohmann::json(unsigned_value);
  }
  return nlohmann::json(std::string(s));
}

std::optional<nlohmann::json> AsYamlFloat(std::string_view s) {
  static const std::regex kFloat(R"([-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?)");
  static const std::regex kInfinity(R"([-+]?\.(inf|Inf|INF))");
  static const std::regex kNotANumber(R"(\.(nan|NaN|NAN))");
  const std::string text(s);
  // JSON has no infinity or NaN; proto JSON spells them as these strings.
  if (std::regex_match(text, kInfinity)) {
    return nlohmann::json(text.front() == '-' ? "-Infinity" : "Infinity");
  }
  if (std::regex_match(text, kNotANumber)) return nlohmann::json("NaN");
  if (!std::regex_match(text, kFloat)) return std::nullopt;
  return nlohmann::json(std::strtod(text.c_str(), nullptr));
}

nlohmann::json InferPlainScalar(const std::string& s) {
  if (IsYamlNull(s)) return nullptr;
  if (auto b = AsYamlBool(s)) return *b;
  if (auto i = AsYamlInteger(s)) return *i;
  if (auto f = AsYamlFloat(s)) return *f;
  return s;
}

// Whether a plain scalar with this text would read back as something other
// than this string, so that the emitter has to quote it.
bool NeedsQuotesToStayString(const std::string& s) {
  // yaml-cpp writes control characters (a '\r', say) into plain scalars as
  // they are, and a reader then takes them for line breaks or trims them:
  // only a double-quoted scalar, which escapes them, keeps them.
  if (std::any_of(s.begin(), s.end(),
                  [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; })) {
    return true;
  }
  // ".inf" infers to the string "Infinity": a string, but not this one.
  const nlohmann::json read_back = InferPlainScalar(s);
  return !read_back.is_string() || read_back != s;
}

// ------------------------------------------------------------- emitting --

// The YAML spec limits an implicit key to 1024 characters; yaml-cpp's
// scanner counts them from the key's first character to its ':'. A margin
// keeps indentation and the indicator out of the question.
constexpr std::size_t kMaxImplicitKeyLength = 1000;

// How many characters a scalar takes once written, quotes and escapes
// included (a "\x10" escape is four).
std::size_t EmittedScalarLength(const std::string& s, bool double_quoted) {
  YAML::Emitter probe;
  if (double_quoted) probe << YAML::DoubleQuoted;
  probe << s;
  return probe.size();
}

void EmitJson(YAML::Emitter& emitter, const nlohmann::ordered_json& value) {
  switch (value.type()) {
    case nlohmann::ordered_json::value_t::null:
      emitter << YAML::Null;
      break;
    case nlohmann::ordered_json::value_t::boolean:
      emitter << value.get<bool>();
      break;
    case nlohmann::ordered_json::value_t::number_integer:
      emitter << value.get<int64_t>();
      break;
    case nlohmann::ordered_json::value_t::number_unsigned:
      emitter << value.get<uint64_t>();
      break;
    case nlohmann::ordered_json::value_t::number_float:
      // nlohmann prints the shortest text that reads back to the same
      // double; yaml-cpp's own double output pads to a fixed precision.
      emitter << value.dump();
      break;
    case nlohmann::ordered_json::value_t::string: {
      const auto& s = value.get_ref<const std::string&>();
      if (NeedsQuotesToStayString(s)) emitter << YAML::DoubleQuoted;
      emitter << s;
      break;
    }
    case nlohmann::ordered_json::value_t::array:
      if (value.empty()) emitter << YAML::Flow;
      emitter << YAML::BeginSeq;
      for (const auto& element : value) EmitJson(emitter, element);
      emitter << YAML::EndSeq;
      break;
    case nlohmann::ordered_json::value_t::object:
      if (value.empty()) emitter << YAML::Flow;
      emitter << YAML::BeginMap;
      for (const auto& [key, element] : value.items()) {
        const bool quoted = NeedsQuotesToStayString(key);
        // A reader takes a key written as "key: value" (an implicit key) to
        // be at most 1024 characters long, as the YAML spec says, and
        // yaml-cpp's reader refuses a longer one ("illegal map value"). A
        // longer key is written as an explicit "? key" line instead. The
        // choice is made for every key, since yaml-cpp keeps LongKey in
        // force for the rest of the map once set.
        emitter << (EmittedScalarLength(key, quoted) > kMaxImplicitKeyLength ? YAML::LongKey
                                                                             : YAML::Auto);
        emitter << YAML::Key;
        if (quoted) emitter << YAML::DoubleQuoted;
        emitter << key << YAML::Value;
        EmitJson(emitter, element);
      }
      emitter << YAML::EndMap;
      break;
    default:  // binary and discarded never come out of a JSON parse.
      emitter << YAML::Null;
      break;
  }
}

}  // namespace

std::optional<OutputFormat> ParseOutputFormat(std::string_view name) {
  if (name == "table") return OutputFormat::kTable;
  if (name == "json") return OutputFormat::kJson;
  if (name == "yaml") return OutputFormat::kYaml;
  return std::nullopt;
}

// ---------------------------------------------------------- json / yaml --

std::string MessageToJson(const google::protobuf::Message& message, bool pretty) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = false;
  options.always_print_primitive_fields = true;
  options.always_print_enums_as_ints = false;
  options.preserve_proto_field_names = false;
  std::string json;
  // Printing a well-formed message cannot fail (no Any with unknown types in
  // this API); an empty object is the safe fallback if it ever does.
  if (!google::protobuf::util::MessageToJsonString(message, &json, options).ok()) return "{}";
  if (!pretty) return json;
  // protobuf indents by one space; re-indent by two (as kubectl and jq do),
  // keeping field order. Numbers keep their text: nlohmann prints doubles in
  // the shortest form that reads back exactly.
  return nlohmann::ordered_json::parse(json).dump(2, ' ', /*ensure_ascii=*/false,
                                                  nlohmann::ordered_json::error_handler_t::replace);
}

std::string JsonToYaml(const nlohmann::ordered_json& value) {
  YAML::Emitter emitter;
  emitter.SetIndent(2);
  emitter << YAML::Block;
  EmitJson(emitter, value);
  return emitter.c_str();
}

std::string MessageToYaml(const google::protobuf::Message& message) {
  return JsonToYaml(nlohmann::ordered_json::parse(MessageToJson(message, /*pretty=*/false)));
}

void PrintMessage(const google::protobuf::Message& message, OutputFormat format, std::ostream& out,
                  bool document_marker) {
  if (format == OutputFormat::kYaml) {
    if (document_marker) out << "---\n";
    out << MessageToYaml(message) << "\n";
  } else {
    out << MessageToJson(message, /*pretty=*/true) << "\n";
  }
}

nlohmann::json YamlToJson(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Undefined:
    case YAML::NodeType::Null:
      return nullptr;
    case YAML::NodeType::Scalar: {
      // "!" marks a quoted scalar (and the non-specific tag); quoting is how
      // a manifest says "this is a string", so no inference.
      const std::string& tag = node.Tag();
      if (tag == "!" || tag == "tag:yaml.org,2002:str") return node.Scalar();
      return InferPlainScalar(node.Scalar());
    }
    case YAML::NodeType::Sequence: {
      nlohmann::json array = nlohmann::json::array();
      for (const auto& element : node) array.push_back(YamlToJson(element));
      return array;
    }
    case YAML::NodeType::Map: {
      nlohmann::json object = nlohmann::json::object();
      for (const auto& entry : node) {
        const YAML::Node& key = entry.first;
        if (!key.IsScalar()) {
          throw std::invalid_argument(
              absl::StrCat("line ", key.Mark().line + 1, ": map keys must be plain strings"));
        }
        // yaml-cpp keeps duplicate keys; JSON would silently keep the last,
        // hiding a copy-paste mistake.
        if (object.contains(key.Scalar())) {
          throw std::invalid_argument(
              absl::StrCat("line ", key.Mark().line + 1, ": duplicate key \"", key.Scalar(), "\""));
        }
        object[key.Scalar()] = YamlToJson(entry.second);
      }
      return object;
    }
  }
  return nullptr;
}

}  // namespace rescale::cli
