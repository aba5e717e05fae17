// ReadFileToString (see rescale/read_file.h for the error-code rule).
// POSIX open/read rather than std::ifstream: the rule needs the errno of
// the call that failed, which iostreams do not promise to keep.
#include "rescale/read_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace rescale {
namespace {

absl::Status ReadError(int error, const std::string& path, absl::string_view what) {
  const std::string message =
      absl::StrCat("cannot read ", what, " \"", path, "\": ", std::strerror(error));
  switch (error) {
    case ENOENT:
    case ENOTDIR:
      return absl::NotFoundError(message);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(message);
    default:
      return absl::FailedPreconditionError(message);
  }
}

}  // namespace

absl::StatusOr<std::string> ReadFileToString(const std::string& path, absl::string_view what) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ReadError(errno, path, what);
  struct stat info {};
  if (::fstat(fd, &info) == 0 && S_ISDIR(info.st_mode)) {
    ::close(fd);
    return ReadError(EISDIR, path, what);
  }
  std::string content;
  char buffer[64 * 1024];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      const int error = errno;
      ::close(fd);
      return ReadError(error, path, what);
    }
    content.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return content;
}

}  // namespace rescale
