// StateWriter: the one ordered queue through which the engine's changes
// reach its StateStore, with group commit.
//
// The engine records a change in memory only once it is durable, and never
// writes while it holds a lock of its own: a mutation checks and prepares
// its change under the registry's lock, hands it to Submit (cheap, in
// memory) before releasing that lock, so the queue's order is the order in
// which the engine decided the changes, and waits for it without any lock.
// One thread writes: it takes every change waiting, writes them with one
// StateStore::Write (one SQLite transaction, one fsync; one etcd Txn), and
// then runs each change's `done` in queue order. Concurrent writers thus
// share one commit: durable throughput grows with concurrency instead of
// queueing behind each other's fsync.
//
// `done` is where a change enters memory (or, on error, is dropped): it runs
// on the writer's thread with no lock of the writer's held, after the whole
// group is durable (or failed: then every change of the group fails with
// the store's error, and nothing of it is applied).
#ifndef RESCALE_SRC_ENGINE_STATE_WRITER_H_
#define RESCALE_SRC_ENGINE_STATE_WRITER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <thread>

#include "absl/status/status.h"
#include "rescale/mutex.h"
#include "rescale/state_store.h"

namespace rescale::engine {

// What a Submit returns: Wait blocks until the change's `done` ran.
class WriteTicket {
 public:
  absl::Status Wait();
  void Finish(absl::Status status);

 private:
  Mutex mu_;
  CondVar cv_;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
};

class StateWriter {
 public:
  using Done = std::function<void(const absl::Status&)>;
  // Changes written by one Write at most: bounds the time a change waits
  // behind a group that was already being written.
  static constexpr size_t kMaxGroup = 256;

  // `store` must outlive the writer. Starts the writer's thread.
  explicit StateWriter(StateStore& store);
  // Writes what is queued, then stops.
  ~StateWriter();
  StateWriter(const StateWriter&) = delete;
  StateWriter& operator=(const StateWriter&) = delete;

  // Queues `change`; `done` (may be empty) runs once it is durable or
  // failed, before the ticket's Wait returns.
  std::shared_ptr<WriteTicket> Submit(StateChange change, Done done = nullptr);

  // Writes (StateStore::Write calls) and changes written so far: their
  // ratio is the mean group size.
  uint64_t groups_written() const;
  uint64_t changes_written() const;

 private:
  struct Pending {
    StateChange change;
    Done done;
    std::shared_ptr<WriteTicket> ticket;
  };
  void Run();

  StateStore& store_;
  mutable Mutex mu_;
  CondVar cv_;
  std::deque<Pending> queue_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t groups_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t changes_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

}  // namespace rescale::engine

#endif  // RESCALE_SRC_ENGINE_STATE_WRITER_H_
