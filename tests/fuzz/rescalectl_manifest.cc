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
// to the same spec.
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
    if (!differencer.Compare(document.spec, (*again)[0].spec)) std::abort();
  }
  return 0;
}
