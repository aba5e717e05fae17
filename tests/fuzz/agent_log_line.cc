// Fuzz target: rescale-agent's log-line parsers (client/agent/parser.h).
// Training logs are written by user code inside the pods, so every byte of
// a line is untrusted. The first input byte picks the format: imagenet, kv,
// or one of the regex formats the agent's documentation and tests use (the
// expression itself is the operator's --format flag, not untrusted input);
// the rest is one log line.
//
// Invariants checked: a parsed step has finite seconds > 0; a trailing '\r'
// (a CRLF log) does not change what a line parses to.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "client/agent/parser.h"

namespace {

using rescale::agent::LineParser;
using rescale::agent::ParsedStep;

const std::vector<std::unique_ptr<LineParser>>& Parsers() {
  static const auto* parsers = [] {
    auto* list = new std::vector<std::unique_ptr<LineParser>>();
    for (const char* format : {
             "imagenet",
             "kv",
             R"(regex:iter (?<step>\d+) .*took (?P<step_time>[0-9.]+)s(?: bs=(?<batch_size>\d+))?)",
             R"(regex:(?:train|fit) \([a-z]+\) [(]step\) ([0-9.]+))",
         }) {
      auto parser = rescale::agent::MakeLineParser(format);
      if (!parser.ok()) std::abort();  // a documented format must compile
      list->push_back(*std::move(parser));
    }
    return list;
  }();
  return *parsers;
}

bool SameStep(const std::optional<ParsedStep>& a, const std::optional<ParsedStep>& b) {
  if (a.has_value() != b.has_value()) return false;
  if (!a) return true;
  return a->seconds == b->seconds && a->step == b->step && a->batch_size == b->batch_size;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const auto& parsers = Parsers();
  const LineParser& parser = *parsers[data[0] % parsers.size()];
  const std::string_view line(reinterpret_cast<const char*>(data + 1), size - 1);

  const std::optional<ParsedStep> step = parser.Parse(line);
  if (step && !(std::isfinite(step->seconds) && step->seconds > 0)) std::abort();

  // A line that already ends in '\r' would lose only one; the check is for
  // lines without one.
  if (line.empty() || line.back() != '\r') {
    const std::string with_cr = std::string(line) + '\r';
    if (!SameStep(step, parser.Parse(with_cr))) std::abort();
  }
  return 0;
}
