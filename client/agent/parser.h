// Log-line parsers of rescale-agent: each turns one line of a training log
// into a step measurement, or ignores the line.
//
// Formats (the --format flag):
//   imagenet     the PyTorch ImageNet example's ProgressMeter lines, the
//                format KubeDL parses:
//                  Epoch: [3][ 10/5005]\tTime  0.468 ( 0.512)\tData ...
//                seconds = the first number after "Time" (this batch's
//                time; the parenthesised one is the running average),
//                step = epoch * batches_per_epoch + batch index. Anything
//                may precede "Epoch:" (kubectl --timestamps, rank prefixes).
//                Validation lines ("Test: [..]") and summaries are ignored.
//   kv           whitespace-separated key=value pairs with at least
//                step_time=<seconds>; step=<n> and batch_size=<n> are used
//                when present, other keys are ignored.
//   regex:EXPR   an ECMAScript regular expression searched in each line.
//                seconds = the group named step_time, else group 1; the
//                optional groups named step and batch_size fill those
//                fields. Named groups may be written (?<name>...) or
//                (?P<name>...) (std::regex has no named groups: they are
//                rewritten to numbered ones).
// A line that does not match, or whose seconds are not a positive finite
// number, is ignored (Parse returns nullopt). Parsers are immutable after
// construction and safe to share between threads.
#ifndef RESCALE_CLIENT_AGENT_PARSER_H_
#define RESCALE_CLIENT_AGENT_PARSER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace rescale::agent {

// One step measured in a log line.
struct ParsedStep {
  double seconds = 0;                  // > 0, finite
  std::optional<uint64_t> step;        // training step index, if the line has one
  std::optional<uint32_t> batch_size;  // samples in the step, if the line says
};

class LineParser {
 public:
  virtual ~LineParser() = default;
  // The step measured in `line` (without its newline; a trailing '\r' is
  // ignored), or nullopt when the line carries none.
  virtual std::optional<ParsedStep> Parse(std::string_view line) const = 0;
};

// The parser for a --format value. INVALID_ARGUMENT names the format or the
// regex error.
absl::StatusOr<std::unique_ptr<LineParser>> MakeLineParser(std::string_view format);

}  // namespace rescale::agent

#endif  // RESCALE_CLIENT_AGENT_PARSER_H_
