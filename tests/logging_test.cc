// Tests of the shared logging setup (rescale/logging.h): every JSON line
// parses, whatever the message holds.
#include "rescale/logging.h"

#include <spdlog/sinks/ostream_sink.h>

#include <catch2/catch.hpp>
#include <sstream>

#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"

namespace rescale {
namespace {

TEST_CASE("json log lines stay valid JSON when messages hold quotes, escapes and bad UTF-8") {
  std::ostringstream out;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_st>(out);
  auto logger = MakeLogger("rescaled", "json", "info", sink);
  REQUIRE(logger.ok());
  const std::vector<std::string> messages = {
      R"(job "x" is not registered)",
      "a backslash \\ and a tab \t and a newline \n in one message",
      std::string("control \x01 and bad utf-8 \xff\xfe end"),
      "plain",
  };
  for (const std::string& message : messages) (*logger)->info("{}", message);
  (*logger)->flush();

  std::vector<std::string> lines = absl::StrSplit(out.str(), '\n', absl::SkipEmpty());
  REQUIRE(lines.size() == messages.size());
  for (size_t i = 0; i < lines.size(); ++i) {
    INFO(lines[i]);
    nlohmann::json parsed;
    REQUIRE_NOTHROW(parsed = nlohmann::json::parse(lines[i]));
    CHECK(parsed["level"] == "info");
    CHECK(parsed["logger"] == "rescaled");
    if (i != 2) CHECK(parsed["message"] == messages[i]);
  }
  // Bytes that are not UTF-8 become U+FFFD; the rest of the message stays.
  CHECK(nlohmann::json::parse(lines[2])["message"] ==
        "control \x01 and bad utf-8 \uFFFD\uFFFD end");
}

TEST_CASE("MakeLogger names the bad format or level") {
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_st>(std::cerr);
  auto format = MakeLogger("x", "xml", "info", sink);
  CHECK(format.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(format.status().message().find("xml") != std::string::npos);
  auto level = MakeLogger("x", "text", "loud", sink);
  CHECK(level.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(level.status().message().find("loud") != std::string::npos);
}

}  // namespace
}  // namespace rescale
