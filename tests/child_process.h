// ChildProcess: a program a test starts for real (rescaled from this build,
// Debian's etcd), its output collected line by line so the test can wait for
// the line that says it is ready, and signals to kill, stop and continue it.
// Also FreeLoopbackPort, for programs that must be told their ports.
//
// The destructor kills (SIGKILL) and reaps a child still running, so a
// failing test leaves no process behind.
#ifndef RESCALE_TESTS_CHILD_PROCESS_H_
#define RESCALE_TESTS_CHILD_PROCESS_H_

#include <sys/types.h>

#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace rescale::testing {

class ChildProcess {
 public:
  // Starts `argv[0]` (a path) with `argv`; stdout and stderr both feed the
  // collected output.
  static absl::StatusOr<std::unique_ptr<ChildProcess>> Start(std::vector<std::string> argv);
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  // The first output line containing `needle`, waiting up to `timeout` for
  // it; nullopt when it did not come (or the child exited first).
  std::optional<std::string> WaitForLine(const std::string& needle, absl::Duration timeout);
  // Everything printed so far (for a failing test's message).
  std::string Output();
  // Sends `signal` (SIGSTOP, SIGCONT, SIGTERM...).
  void Signal(int signal);
  // SIGKILL, then reaps it. Idempotent.
  void Kill();
  // Waits up to `timeout` for it to exit by itself; its exit status as
  // waitpid gives it, or nullopt if it is still running.
  std::optional<int> WaitForExit(absl::Duration timeout);

 private:
  ChildProcess(pid_t pid, int output_fd);
  void ReadOutput();

  pid_t pid_;
  int output_fd_;
  bool reaped_ = false;
  std::thread reader_;
  std::mutex mu_;
  std::condition_variable changed_;
  std::vector<std::string> lines_;  // guarded by mu_
  std::string partial_;             // guarded by mu_
  bool output_closed_ = false;      // guarded by mu_
};

// A TCP port on 127.0.0.1 that was free a moment ago (bound to port 0, read
// back, closed): for programs such as etcd that cannot report the port they
// chose.
int FreeLoopbackPort();

}  // namespace rescale::testing

#endif  // RESCALE_TESTS_CHILD_PROCESS_H_
