// ChildProcess: fork/exec with the output on a pipe read by a thread, and
// the signals tests send to the programs they start.
#include "tests/child_process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace rescale::testing {

absl::StatusOr<std::unique_ptr<ChildProcess>> ChildProcess::Start(std::vector<std::string> argv) {
  if (argv.empty()) return absl::InvalidArgumentError("argv is empty");
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) return absl::InternalError(strerror(errno));
  std::vector<char*> args;
  for (std::string& arg : argv) args.push_back(arg.data());
  args.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", strerror(errno)));
  if (pid == 0) {
    // The child: only async-signal-safe calls until exec.
    dup2(pipe_fds[1], STDOUT_FILENO);
    dup2(pipe_fds[1], STDERR_FILENO);
    // The test process blocks signals in some threads; the child starts clean.
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  close(pipe_fds[1]);
  return std::unique_ptr<ChildProcess>(new ChildProcess(pid, pipe_fds[0]));
}

ChildProcess::ChildProcess(pid_t pid, int output_fd) : pid_(pid), output_fd_(output_fd) {
  reader_ = std::thread([this] { ReadOutput(); });
}

ChildProcess::~ChildProcess() {
  Kill();
  reader_.join();  // the pipe closes when the child is gone
  close(output_fd_);
}

void ChildProcess::ReadOutput() {
  char buffer[4096];
  while (true) {
    const ssize_t n = read(output_fd_, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    std::lock_guard<std::mutex> lock(mu_);
    if (n <= 0) {
      if (!partial_.empty()) lines_.push_back(std::move(partial_));
      output_closed_ = true;
      changed_.notify_all();
      return;
    }
    partial_.append(buffer, static_cast<size_t>(n));
    size_t newline;
    while ((newline = partial_.find('\n')) != std::string::npos) {
      lines_.push_back(partial_.substr(0, newline));
      partial_.erase(0, newline + 1);
    }
    changed_.notify_all();
  }
}

std::optional<std::string> ChildProcess::WaitForLine(const std::string& needle,
                                                     absl::Duration timeout) {
  const auto deadline = std::chrono::steady_clock::now() + absl::ToChronoNanoseconds(timeout);
  std::unique_lock<std::mutex> lock(mu_);
  size_t checked = 0;
  while (true) {
    for (; checked < lines_.size(); ++checked) {
      if (lines_[checked].find(needle) != std::string::npos) return lines_[checked];
    }
    if (output_closed_) return std::nullopt;
    if (changed_.wait_until(lock, deadline) == std::cv_status::timeout &&
        checked == lines_.size()) {
      return std::nullopt;
    }
  }
}

std::string ChildProcess::Output() {
  std::lock_guard<std::mutex> lock(mu_);
  return absl::StrCat(absl::StrJoin(lines_, "\n"), "\n", partial_);
}

void ChildProcess::Signal(int signal) {
  if (!reaped_) kill(pid_, signal);
}

void ChildProcess::Kill() {
  if (reaped_) return;
  kill(pid_, SIGKILL);
  int status = 0;
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  reaped_ = true;
}

std::optional<int> ChildProcess::WaitForExit(absl::Duration timeout) {
  if (reaped_) return std::nullopt;
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    int status = 0;
    const pid_t done = waitpid(pid_, &status, WNOHANG);
    if (done == pid_) {
      reaped_ = true;
      return status;
    }
    if (absl::Now() >= deadline) return std::nullopt;
    // No event to wait on for another process's exit short of SIGCHLD
    // handling; a short poll keeps this simple.
    usleep(10'000);
  }
}

int FreeLoopbackPort() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address);
  socklen_t length = sizeof address;
  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  close(fd);
  return ntohs(address.sin_port);
}

}  // namespace rescale::testing
