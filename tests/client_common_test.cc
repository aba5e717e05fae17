// Tests of client/common: the one Backoff schedule (equal jitter) and the
// one ReadFileToString error rule. Pure functions with an injected random
// source and temporary files; built into adapter_tests, whose program uses
// both.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstddef>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "client/common/backoff.h"
#include "rescale/read_file.h"
#include "tests/temp_dir.h"

namespace {

using rescale::ReadFileToString;
using rescale::client::Backoff;
using rescale::client::BackoffOptions;

TEST_CASE("backoff doubles up to its cap with equal jitter in [d/2, d]") {
  BackoffOptions options;
  options.initial = absl::Milliseconds(100);
  options.max = absl::Milliseconds(500);
  std::vector<double> draws = {0.5, 0.0, 0.5, 0.5, 0.999};
  size_t i = 0;
  Backoff backoff(options, [&] { return draws[i++ % draws.size()]; });
  CHECK(backoff.Next() == absl::Milliseconds(75));   // 100 * 3/4
  CHECK(backoff.Next() == absl::Milliseconds(100));  // 200 * 1/2: the floor
  CHECK(backoff.Next() == absl::Milliseconds(300));  // 400 * 3/4
  CHECK(backoff.Next() == absl::Milliseconds(375));  // capped at 500, * 3/4
  const absl::Duration top = backoff.Next();         // 500 * ~1
  CHECK(top > absl::Milliseconds(499));
  CHECK(top <= absl::Milliseconds(500));  // never above the cap
  CHECK(backoff.attempts() == 5);
  backoff.Reset();
  CHECK(backoff.attempts() == 0);
  CHECK(backoff.Next() == absl::Milliseconds(75));
}

TEST_CASE("backoff without an injected source stays within [d/2, d]") {
  BackoffOptions options;
  options.initial = absl::Seconds(1);
  options.max = absl::Seconds(4);
  Backoff backoff(options);
  for (absl::Duration ceiling :
       {absl::Seconds(1), absl::Seconds(2), absl::Seconds(4), absl::Seconds(4)}) {
    const absl::Duration delay = backoff.Next();
    CHECK(delay >= ceiling / 2);
    CHECK(delay <= ceiling);
  }
}

using rescale::testing::TempDir;

TEST_CASE("ReadFileToString returns the whole file, bytes as they are") {
  TempDir dir;
  const std::string content = std::string("line one\nline\0two\n", 18) + std::string(100000, 'x');
  const std::string path = (dir.path() / "data").string();
  std::ofstream(path, std::ios::binary) << content;
  absl::StatusOr<std::string> read = ReadFileToString(path, "test file");
  REQUIRE(read.ok());
  CHECK(*read == content);
}

TEST_CASE("ReadFileToString: a missing file is NOT_FOUND naming what and where") {
  TempDir dir;
  const std::string path = (dir.path() / "absent.yaml").string();
  absl::StatusOr<std::string> read = ReadFileToString(path, "kubeconfig");
  REQUIRE_FALSE(read.ok());
  CHECK(read.status().code() == absl::StatusCode::kNotFound);
  const std::string message(read.status().message());
  CHECK_THAT(message, Catch::Contains("kubeconfig"));
  CHECK_THAT(message, Catch::Contains(path));
  CHECK_THAT(message, Catch::Contains("No such file"));
  // A file below something that is not a directory does not exist either.
  std::ofstream(dir.path() / "plain") << "x";
  CHECK(ReadFileToString((dir.path() / "plain" / "child").string(), "x").status().code() ==
        absl::StatusCode::kNotFound);
}

TEST_CASE("ReadFileToString: a directory is FAILED_PRECONDITION") {
  TempDir dir;
  absl::StatusOr<std::string> read = ReadFileToString(dir.path().string(), "--ca-file");
  REQUIRE_FALSE(read.ok());
  CHECK(read.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK_THAT(std::string(read.status().message()), Catch::Contains("--ca-file"));
}

TEST_CASE("ReadFileToString: an unreadable file is PERMISSION_DENIED") {
  // Root reads any file, so the case only exists for other users.
  if (::geteuid() == 0)
    SUCCEED("running as root: every file is readable");
  else {
    TempDir dir;
    const std::filesystem::path path = dir.path() / "secret";
    std::ofstream(path) << "token";
    std::filesystem::permissions(path, std::filesystem::perms::none);
    absl::StatusOr<std::string> read = ReadFileToString(path.string(), "token file");
    REQUIRE_FALSE(read.ok());
    CHECK(read.status().code() == absl::StatusCode::kPermissionDenied);
    CHECK_THAT(std::string(read.status().message()), Catch::Contains("token file"));
  }
}

}  // namespace
