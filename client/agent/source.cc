// FileFollower (POSIX read/fstat/stat) and LineFeeder; see client/agent/source.h.
#include "client/agent/source.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace rescale::agent {

FileFollower::FileFollower(std::string path, bool from_start)
    : path_(std::move(path)), start_at_end_(!from_start) {}

FileFollower::~FileFollower() { CloseFile(); }

void FileFollower::CloseFile() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

absl::Status FileFollower::Open(bool at_end) {
  const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    const std::string message = absl::StrCat("cannot open ", path_, ": ", std::strerror(err));
    return err == ENOENT ? absl::NotFoundError(message) : absl::PermissionDeniedError(message);
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return absl::InternalError(absl::StrCat("cannot stat ", path_));
  }
  fd_ = fd;
  inode_ = st.st_ino;
  device_ = st.st_dev;
  offset_ = at_end ? static_cast<uint64_t>(st.st_size) : 0;
  partial_.clear();
  return absl::OkStatus();
}

void FileFollower::Emit(std::string_view data,
                        const std::function<void(std::string_view)>& on_line) {
  size_t start = 0;
  for (size_t nl = data.find('\n'); nl != std::string_view::npos; nl = data.find('\n', start)) {
    if (partial_.empty()) {
      on_line(data.substr(start, nl - start));
    } else {
      partial_.append(data.substr(start, nl - start));
      on_line(partial_);
      partial_.clear();
    }
    start = nl + 1;
  }
  partial_.append(data.substr(start));
}

absl::Status FileFollower::Poll(const std::function<void(std::string_view)>& on_line) {
  if (fd_ < 0) {
    absl::Status opened = Open(start_at_end_);
    start_at_end_ = false;  // a file that appears later is new: read whole
    if (!opened.ok()) return opened;
  }
  for (int round = 0; round < 2; ++round) {
    struct stat st;
    if (::fstat(fd_, &st) == 0 && static_cast<uint64_t>(st.st_size) < offset_) {
      offset_ = 0;  // truncated in place
      partial_.clear();
    }
    char buffer[64 * 1024];
    for (;;) {
      const ssize_t n = ::pread(fd_, buffer, sizeof(buffer), static_cast<off_t>(offset_));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      offset_ += static_cast<uint64_t>(n);
      Emit(std::string_view(buffer, static_cast<size_t>(n)), on_line);
    }
    // Rotated? Only once a new file exists at the path: until then the
    // writer may still be appending to the old one (renamed, not yet
    // reopened), so it is kept open.
    struct stat now;
    if (::stat(path_.c_str(), &now) != 0) return absl::OkStatus();
    if (static_cast<uint64_t>(now.st_ino) == inode_ &&
        static_cast<uint64_t>(now.st_dev) == device_) {
      return absl::OkStatus();
    }
    // The old file has just been read to its end; continue with the new one.
    if (!partial_.empty()) {
      on_line(partial_);  // the old file's last line had no newline
      partial_.clear();
    }
    CloseFile();
    if (!Open(/*at_end=*/false).ok()) return absl::OkStatus();  // gone again: retried next Poll
  }
  return absl::OkStatus();
}

void LineFeeder::Feed(std::string_view line) {
  lines_read_.fetch_add(1, std::memory_order_relaxed);
  std::optional<ParsedStep> parsed = parser_->Parse(line);
  if (!parsed) return;
  lines_parsed_.fetch_add(1, std::memory_order_relaxed);
  AgentSample sample;
  sample.seconds = parsed->seconds;
  sample.step = parsed->step;
  sample.batch_size = parsed->batch_size.value_or(batch_size_);
  sample.at = clock_->Now();
  sender_->Add(sample);
}

}  // namespace rescale::agent
