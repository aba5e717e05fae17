// Fuzz target: rescalectl's JobSpec manifests (client/rescalectl/manifests.h
// ReadJobSpecs, YAML or JSON, bare or kubectl-style wrapped, several
// documents per file), then each spec as rescaled converts and validates it
// (server/convert.h FromProto, rescale/validation.h). Manifests are
// hand-written and pasted around; the input is the file's text, read as
// stdin ("-").
//
// Invariants checked: a failure prints an error; each spec read either
// validates or is rejected with INVALID_ARGUMENT; and what `rescalectl get
// -o yaml` would print for a spec (MessageToYaml) reads back as a manifest
// to the same spec, but for Unicode noncharacters, which yaml-cpp writes as
// U+FFFD in a double-quoted string (docs/usage.md says so).
#include <google/protobuf/util/field_comparator.h>
#include <google/protobuf/util/message_differencer.h>

#include <google/protobuf/stubs/logging.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "client/rescalectl/manifests.h"
#include "client/rescalectl/output.h"
#include "rescale/validation.h"
#include "server/convert.h"

namespace {

std::optional<std::vector<rescale::cli::SpecDocument>> Read(const std::string& text,
                                                            std::string* errors) {
  std::istringstream in(text);
  std::ostringstream err;
  auto specs = rescale::cli::ReadJobSpecs({"-"}, in, err);
  *errors = err.str();
  return specs;
}

// `text` with each Unicode noncharacter (U+FDD0-U+FDEF, U+xFFFE, U+xFFFF)
// replaced by U+FFFD, as yaml-cpp's emitter replaces them in a string it
// double-quotes. `text` is valid UTF-8 (protobuf refused anything else).
std::string NoncharactersReplaced(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const auto lead = static_cast<unsigned char>(text[i]);
    const size_t length = lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
    uint32_t code_point = length == 1 ? lead : lead & (0x7F >> length);
    for (size_t k = 1; k < length && i + k < text.size(); ++k) {
      code_point = (code_point << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3F);
    }
    const bool noncharacter =
        (code_point >= 0xFDD0 && code_point <= 0xFDEF) || (code_point & 0xFFFE) == 0xFFFE;
    out += noncharacter ? std::string("\xEF\xBF\xBD") : text.substr(i, length);
    i += length;
  }
  return out;
}

// Replaces noncharacters in every string field of `message`, nested
// messages and map entries included.
void ReplaceNoncharacters(google::protobuf::Message* message) {
  const google::protobuf::Reflection* reflection = message->GetReflection();
  std::vector<const google::protobuf::FieldDescriptor*> fields;
  reflection->ListFields(*message, &fields);
  for (const google::protobuf::FieldDescriptor* field : fields) {
    using Type = google::protobuf::FieldDescriptor::CppType;
    if (field->cpp_type() == Type::CPPTYPE_STRING) {
      if (field->is_repeated()) {
        for (int k = 0; k < reflection->FieldSize(*message, field); ++k) {
          reflection->SetRepeatedString(
              message, field, k,
              NoncharactersReplaced(reflection->GetRepeatedString(*message, field, k)));
        }
      } else {
        reflection->SetString(message, field,
                              NoncharactersReplaced(reflection->GetString(*message, field)));
      }
    } else if (field->cpp_type() == Type::CPPTYPE_MESSAGE) {
      if (field->is_repeated()) {
        for (int k = 0; k < reflection->FieldSize(*message, field); ++k) {
          ReplaceNoncharacters(reflection->MutableRepeatedMessage(message, field, k));
        }
      } else {
        ReplaceNoncharacters(reflection->MutableMessage(message, field));
      }
    }
  }
}

}  // namespace

// protobuf logs every string field that is not UTF-8 (a parse failure the
// target expects); millions of such lines would drown the fuzzer's output.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string errors;
  const auto specs = Read(std::string(reinterpret_cast<const char*>(data), size), &errors);
  if (!specs) {
    if (errors.find("error: ") == std::string::npos) std::abort();
    return 0;
  }
  if (specs->empty()) std::abort();  // "contains no job specs" is an error
  for (const rescale::cli::SpecDocument& document : *specs) {
    const absl::Status valid = rescale::ValidateJobSpec(rescale::server::FromProto(document.spec));
    if (!valid.ok() && valid.code() != absl::StatusCode::kInvalidArgument) std::abort();

    const std::string yaml = rescale::cli::MessageToYaml(document.spec);
    const auto again = Read(yaml, &errors);
    if (!again || again->size() != 1) std::abort();
    // .nan reads back as NaN, which equals nothing, itself included.
    google::protobuf::util::DefaultFieldComparator nan_equal;
    nan_equal.set_treat_nan_as_equal(true);
    google::protobuf::util::MessageDifferencer differencer;
    differencer.set_field_comparator(&nan_equal);
    differencer.set_message_field_comparison(
        google::protobuf::util::MessageDifferencer::EQUIVALENT);
    // Each string comes back as written (a plain scalar) or with its
    // noncharacters replaced (double-quoted): equal once both are replaced.
    rescale::v1::JobSpec written = document.spec;
    rescale::v1::JobSpec read_back = (*again)[0].spec;
    ReplaceNoncharacters(&written);
    ReplaceNoncharacters(&read_back);
    if (!differencer.Compare(written, read_back)) std::abort();
  }
  return 0;
}
