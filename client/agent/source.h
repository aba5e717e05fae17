// Where rescale-agent's lines come from and where they go: FileFollower
// reads a growing log file (tail -f semantics), LineFeeder parses lines and
// queues their samples on a SampleSender.
#ifndef RESCALE_CLIENT_AGENT_SOURCE_H_
#define RESCALE_CLIENT_AGENT_SOURCE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "client/agent/parser.h"
#include "client/agent/sender.h"
#include "rescale/clock.h"

namespace rescale::agent {

// Follows one file by path. Poll() hands over the complete lines written
// since the last call and returns at once: the caller decides how long to
// wait between polls, so tests need no sleeps.
//  * Start: at the end of the file (like `tail -f -n 0`) unless
//    `from_start`; the agent stamps samples when it reads them, so a log's
//    history would be stamped with the wrong time (and perhaps the wrong
//    world size).
//  * Truncation (the file shrinks below what was read: copytruncate):
//    reading restarts at offset 0; a partial line is discarded.
//  * Rotation (the path names a different file): the old file is read to
//    its end first, then the new one from its start. While the path is
//    missing (between rename and create) the old file is still followed.
//  * A file missing at start is waited for, and read whole when it appears.
// Not thread-safe; one thread polls.
class FileFollower {
 public:
  FileFollower(std::string path, bool from_start);
  ~FileFollower();
  FileFollower(const FileFollower&) = delete;
  FileFollower& operator=(const FileFollower&) = delete;

  // Calls on_line for each new complete line (without '\n'). NOT_FOUND (or
  // the open error) while the file cannot be opened; the next Poll tries
  // again. A final line without '\n' is held until completed or rotated.
  absl::Status Poll(const std::function<void(std::string_view)>& on_line);

 private:
  absl::Status Open(bool at_end);
  void CloseFile();
  void Emit(std::string_view data, const std::function<void(std::string_view)>& on_line);

  const std::string path_;
  bool start_at_end_;  // only for the first open
  int fd_ = -1;
  uint64_t inode_ = 0, device_ = 0;
  uint64_t offset_ = 0;
  std::string partial_;
};

struct FeedStats {
  uint64_t lines_read = 0;
  uint64_t lines_parsed = 0;  // lines that yielded a sample
};

// Parses lines and queues their samples, stamped with the clock's now.
// Thread-safe counters; Feed from one thread at a time.
class LineFeeder {
 public:
  // `batch_size`: samples per step for lines that do not say (0 = the job's
  // local_batch_size on the server).
  LineFeeder(const LineParser* parser, SampleSender* sender, Clock* clock, uint32_t batch_size = 0)
      : parser_(parser), sender_(sender), clock_(clock), batch_size_(batch_size) {}
  void Feed(std::string_view line);
  FeedStats stats() const {
    return {lines_read_.load(std::memory_order_relaxed),
            lines_parsed_.load(std::memory_order_relaxed)};
  }

 private:
  const LineParser* parser_;
  SampleSender* sender_;
  Clock* clock_;
  const uint32_t batch_size_;
  // Relaxed: counters read for the final report after the reader joined,
  // or approximately while it runs.
  std::atomic<uint64_t> lines_read_{0};
  std::atomic<uint64_t> lines_parsed_{0};
};

}  // namespace rescale::agent

#endif  // RESCALE_CLIENT_AGENT_SOURCE_H_
