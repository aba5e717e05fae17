// rescale-agent's line parsers (formats documented in client/agent/parser.h). The
// two built-in formats are hand-written scanners rather than regexes: every
// log line passes through them, and std::regex is slow and recursive.
#include "client/agent/parser.h"

#include <charconv>
#include <cmath>
#include <limits>
#include <map>
#include <regex>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace rescale::agent {
namespace {

bool IsSpace(char c) { return c == ' ' || c == '\t'; }

std::string_view TrimCr(std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  return line;
}

void SkipSpaces(std::string_view& s) {
  while (!s.empty() && IsSpace(s.front())) s.remove_prefix(1);
}

bool Consume(std::string_view& s, std::string_view prefix) {
  if (s.substr(0, prefix.size()) != prefix) return false;
  s.remove_prefix(prefix.size());
  return true;
}

// Reads an unsigned integer after optional spaces, advancing `s`.
bool ReadUint(std::string_view& s, uint64_t& out) {
  SkipSpaces(s);
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  if (ec != std::errc() || end == s.data()) return false;
  s.remove_prefix(static_cast<size_t>(end - s.data()));
  return true;
}

// Reads a double after optional spaces, advancing `s`.
bool ReadDouble(std::string_view& s, double& out) {
  SkipSpaces(s);
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  if (ec != std::errc() || end == s.data()) return false;
  s.remove_prefix(static_cast<size_t>(end - s.data()));
  return true;
}

bool PlausibleSeconds(double seconds) { return std::isfinite(seconds) && seconds > 0; }

template <typename T>
bool ParseWhole(std::string_view text, T& out) {
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size() && !text.empty();
}

// "Epoch: [E][ I/N]\tTime  CUR ( AVG)\t..." (pytorch/examples imagenet/main.py,
// ProgressMeter.display joins "Epoch: [E]" + "[I/N]" and the meters with tabs).
class ImagenetParser final : public LineParser {
 public:
  std::optional<ParsedStep> Parse(std::string_view line) const override {
    line = TrimCr(line);
    const size_t at = line.find("Epoch: [");
    if (at == std::string_view::npos) return std::nullopt;
    std::string_view rest = line.substr(at + 8);
    uint64_t epoch = 0, batch = 0, batches = 0;
    if (!ReadUint(rest, epoch) || !Consume(rest, "][") || !ReadUint(rest, batch) ||
        !Consume(rest, "/") || !ReadUint(rest, batches) || !Consume(rest, "]")) {
      return std::nullopt;
    }
    if (batches == 0 || batch > batches) return std::nullopt;
    // The "Time" meter: the first field named exactly Time after the header.
    size_t time_at = rest.find("Time");
    while (time_at != std::string_view::npos &&
           ((time_at > 0 && !IsSpace(rest[time_at - 1])) || time_at + 4 >= rest.size() ||
            !IsSpace(rest[time_at + 4]))) {
      time_at = rest.find("Time", time_at + 4);
    }
    if (time_at == std::string_view::npos) return std::nullopt;
    rest.remove_prefix(time_at + 4);
    ParsedStep out;
    if (!ReadDouble(rest, out.seconds) || !PlausibleSeconds(out.seconds)) return std::nullopt;
    if (epoch > (std::numeric_limits<uint64_t>::max() - 1 - batch) / batches) return std::nullopt;
    out.step = epoch * batches + batch;
    return out;
  }
};

// "step=12 step_time=0.25 batch_size=64 loss=1.2"
class KeyValueParser final : public LineParser {
 public:
  std::optional<ParsedStep> Parse(std::string_view line) const override {
    line = TrimCr(line);
    ParsedStep out;
    bool have_seconds = false;
    for (absl::string_view piece : absl::StrSplit(absl::string_view(line.data(), line.size()),
                                                  absl::ByAnyChar(" \t"), absl::SkipEmpty())) {
      const std::string_view token(piece.data(), piece.size());
      const size_t eq = token.find('=');
      if (eq == std::string_view::npos) continue;
      const std::string_view key = token.substr(0, eq);
      std::string_view value = token.substr(eq + 1);
      while (!value.empty() && (value.back() == ',' || value.back() == ';')) value.remove_suffix(1);
      if (key == "step_time") {
        if (!ParseWhole(value, out.seconds)) return std::nullopt;
        have_seconds = true;
      } else if (key == "step") {
        uint64_t step = 0;
        if (!ParseWhole(value, step)) return std::nullopt;
        out.step = step;
      } else if (key == "batch_size") {
        uint32_t batch = 0;
        if (!ParseWhole(value, batch)) return std::nullopt;
        out.batch_size = batch;
      }
    }
    if (!have_seconds || !PlausibleSeconds(out.seconds)) return std::nullopt;
    return out;
  }
};

class RegexParser final : public LineParser {
 public:
  RegexParser(std::regex re, size_t seconds_group, size_t step_group, size_t batch_group)
      : re_(std::move(re)),
        seconds_group_(seconds_group),
        step_group_(step_group),
        batch_group_(batch_group) {}

  std::optional<ParsedStep> Parse(std::string_view line) const override {
    line = TrimCr(line);
    // std::regex recurses per character: bound the work on absurd lines.
    if (line.size() > kMaxLine) return std::nullopt;
    std::match_results<std::string_view::const_iterator> m;
    if (!std::regex_search(line.begin(), line.end(), m, re_)) return std::nullopt;
    auto group = [&](size_t i) {
      return std::string_view(&*line.begin() + m.position(i), static_cast<size_t>(m.length(i)));
    };
    ParsedStep out;
    if (!m[seconds_group_].matched || !ParseWhole(group(seconds_group_), out.seconds) ||
        !PlausibleSeconds(out.seconds)) {
      return std::nullopt;
    }
    if (step_group_ != 0 && m[step_group_].matched) {
      uint64_t step = 0;
      if (!ParseWhole(group(step_group_), step)) return std::nullopt;
      out.step = step;
    }
    if (batch_group_ != 0 && m[batch_group_].matched) {
      uint32_t batch = 0;
      if (!ParseWhole(group(batch_group_), batch)) return std::nullopt;
      out.batch_size = batch;
    }
    return out;
  }

 private:
  static constexpr size_t kMaxLine = 64 * 1024;
  const std::regex re_;
  const size_t seconds_group_, step_group_, batch_group_;
};

// Rewrites (?<name>...) and (?P<name>...) to plain groups, recording each
// name's group number. Capturing groups are counted the way ECMAScript
// numbers them: every "(" that is not escaped, not in a class and not "(?".
absl::StatusOr<std::string> RewriteNamedGroups(std::string_view expr,
                                               std::map<std::string, size_t>& names) {
  std::string out;
  size_t group = 0;
  bool in_class = false;
  for (size_t i = 0; i < expr.size(); ++i) {
    const char c = expr[i];
    if (c == '\\') {
      out += c;
      if (i + 1 < expr.size()) out += expr[++i];
      continue;
    }
    if (in_class) {
      in_class = c != ']';
      out += c;
      continue;
    }
    if (c == '[') {
      in_class = true;
      out += c;
      continue;
    }
    if (c != '(') {
      out += c;
      continue;
    }
    std::string_view after = expr.substr(i + 1);
    size_t skip = 0;
    if (after.substr(0, 2) == "?<" && after.substr(0, 3) != "?<=" && after.substr(0, 3) != "?<!") {
      skip = 2;
    } else if (after.substr(0, 3) == "?P<") {
      skip = 3;
    }
    if (skip != 0) {
      const size_t close = after.find('>', skip);
      if (close == std::string_view::npos) {
        return absl::InvalidArgumentError(
            absl::StrCat("unterminated group name in regex \"", std::string(expr), "\""));
      }
      const std::string name(after.substr(skip, close - skip));
      if (name.empty() || !names.emplace(name, group + 1).second) {
        return absl::InvalidArgumentError(absl::StrCat("empty or repeated group name \"", name,
                                                       "\" in regex \"", std::string(expr), "\""));
      }
      ++group;
      out += '(';
      i += close + 1;
      continue;
    }
    if (after.substr(0, 1) != "?") ++group;
    out += c;
  }
  return out;
}

absl::StatusOr<std::unique_ptr<LineParser>> MakeRegexParser(std::string_view expr) {
  std::map<std::string, size_t> names;
  absl::StatusOr<std::string> rewritten = RewriteNamedGroups(expr, names);
  if (!rewritten.ok()) return rewritten.status();
  std::regex re;
  try {
    re = std::regex(*rewritten, std::regex::ECMAScript | std::regex::optimize);
  } catch (const std::regex_error& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("--format regex \"", std::string(expr), "\" does not compile: ", e.what()));
  }
  auto named = [&](const char* name) -> size_t {
    auto it = names.find(name);
    return it == names.end() ? 0 : it->second;
  };
  size_t seconds = named("step_time");
  if (seconds == 0) seconds = 1;
  if (re.mark_count() < seconds) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--format regex \"", std::string(expr),
        "\" has no capturing group for the step time (name one step_time, or make it group 1)"));
  }
  return std::make_unique<RegexParser>(std::move(re), seconds, named("step"), named("batch_size"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<LineParser>> MakeLineParser(std::string_view format) {
  if (format == "imagenet") return std::make_unique<ImagenetParser>();
  if (format == "kv") return std::make_unique<KeyValueParser>();
  if (format.substr(0, 6) == "regex:") return MakeRegexParser(format.substr(6));
  return absl::InvalidArgumentError(absl::StrCat(
      "--format \"", std::string(format), "\" is not a format; use imagenet, kv or regex:EXPR"));
}

}  // namespace rescale::agent
