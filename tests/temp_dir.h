// TempDir: a fresh directory for a test's files, removed with everything in
// it when the test ends. mkdtemp names it, so tests running at once (ctest
// -j) never share one.
#ifndef RESCALE_TESTS_TEMP_DIR_H_
#define RESCALE_TESTS_TEMP_DIR_H_

#include <stdlib.h>

#include <filesystem>
#include <string>

namespace rescale::testing {

class TempDir {
 public:
  TempDir() {
    std::string pattern = std::filesystem::temp_directory_path() / "rescale-test-XXXXXX";
    path_ = mkdtemp(pattern.data());
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  // The path of `name` inside it.
  std::string File(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

}  // namespace rescale::testing

#endif  // RESCALE_TESTS_TEMP_DIR_H_
