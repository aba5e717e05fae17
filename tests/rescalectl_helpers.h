// Test helpers for rescalectl run in-process (RunCli) against a real
// rescaled started on port 0: the result of one invocation, the server, and
// uniquely named temp files for manifests and queue files. Shared by
// rescalectl_test.cc and queues_server_test.cc.
#ifndef RESCALE_TESTS_RESCALECTL_HELPERS_H_
#define RESCALE_TESTS_RESCALECTL_HELPERS_H_

#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "client/rescalectl/cli.h"
#include "server/server.h"
#include "spdlog/spdlog.h"

namespace rescale::testing {

using rescale::server::RescaleServer;
using rescale::server::ServerOptions;

struct CliResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// Runs rescalectl with `args` (no program name), feeding `stdin_text` to
// `-f -`.
inline CliResult RunRaw(const std::vector<std::string>& args, const std::string& stdin_text = "") {
  std::vector<std::string> argv = {"rescalectl"};
  argv.insert(argv.end(), args.begin(), args.end());
  std::istringstream in(stdin_text);
  std::ostringstream out;
  std::ostringstream err;
  CliResult result;
  result.exit_code = rescale::cli::RunCli(argv, in, out, err);
  result.out = out.str();
  result.err = err.str();
  return result;
}

// A server for one test, and rescalectl pointed at it.
class CliServer {
 public:
  explicit CliServer(ServerOptions options = {}) {
    spdlog::set_level(spdlog::level::warn);
    options.listen = "127.0.0.1:0";
    options.run_plan_timer = false;
    auto started = RescaleServer::Start(options);
    REQUIRE(started.ok());
    server_ = std::move(started).value();
  }

  std::string address() const { return server_->address(); }

  CliResult Run(std::initializer_list<std::string> args, const std::string& stdin_text = "") {
    std::vector<std::string> argv = {"--server", address()};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunRaw(argv, stdin_text);
  }

 private:
  std::unique_ptr<RescaleServer> server_;
};

// A file (a manifest, a certificate) under the temp directory with a name no
// other test (or concurrent test process) uses; removed when the test ends.
class TempFile {
 public:
  explicit TempFile(const std::string& content, const std::string& extension = ".yaml") {
    static std::atomic<int> counter{0};
    std::random_device random;
    path_ = std::filesystem::temp_directory_path() /
            ("rescalectl_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++) +
             "_" + std::to_string(random()) + extension);
    std::ofstream file(path_);
    file << content;
    REQUIRE(file.good());
  }
  ~TempFile() {
    std::error_code ignored;
    std::filesystem::remove(path_, ignored);
  }
  std::string path() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

}  // namespace rescale::testing

#endif  // RESCALE_TESTS_RESCALECTL_HELPERS_H_
