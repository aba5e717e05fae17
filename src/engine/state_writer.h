// StateWriter: the one ordered queue through which the engine's changes
// reach its StateStore, with group commit.
//
// The engine records a change in memory only once it is durable, and never
// writes while it holds a lock of its own: a mutation checks and prepares
// its change under the registry's lock, hands it to Submit (cheap, in
// memory) before releasing that lock, so the queue's order is the order in
// which the engine decided the changes, and then calls Wait without any
// lock.
//
// Group commit as LevelDB's writers do it: there is no writer thread. A
// caller in Wait whose change is not written yet and finds nobody writing
// becomes the writer: it takes every change waiting (up to kMaxGroup),
// writes them with one StateStore::Write (one SQLite transaction, one
// fsync; one etcd Txn), runs each change's `done` in queue order, and wakes
// the callers of the group. Callers that arrive meanwhile queue up and form
// the next group, written by one of them. One caller alone writes its own
// change on its own thread, with no hand-off; concurrent callers share one
// commit, so durable throughput grows with concurrency instead of queueing
// behind each other's fsync.
//
// Callers that must not block (gRPC's callback handlers, through the
// engine's *Async methods) use SubmitAsync instead: the writer's own
// thread writes their changes when no caller is writing, and runs their
// `after` once the group is done.
//
// `done` is where a change enters memory (or, on error, is dropped): it runs
// on the writing thread with no lock of the writer's held, after the whole
// group is durable (or failed: then every change of the group fails with
// the store's error, and nothing of it is applied). `after` (SubmitAsync)
// runs once the group is over and its writer no longer writes, so it may
// submit and wait on further changes (an engine continuation may plan).
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

class StateWriter;

// What Submit returns, for StateWriter::Wait.
class WriteTicket {
 public:
  bool finished() const;
  absl::Status status() const;

 private:
  friend class StateWriter;
  void Finish(absl::Status status);

  mutable Mutex mu_;
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
  // Writes what is still queued, then stops the thread.
  ~StateWriter();
  StateWriter(const StateWriter&) = delete;
  StateWriter& operator=(const StateWriter&) = delete;

  // Queues `change`; `done` (may be empty) runs once it is durable or
  // failed, before Wait on its ticket returns.
  std::shared_ptr<WriteTicket> Submit(StateChange change, Done done = nullptr);
  // Queues `change` for the writer's thread: `done` runs as for Submit,
  // then `after` once its group is over. Never blocks.
  void SubmitAsync(StateChange change, Done done, std::function<void()> after);
  // Returns once the ticket's change is written (or failed), writing it
  // (and whatever else waits) itself when nobody else is. Call with no lock
  // held: the `done` of other callers' changes may run here.
  absl::Status Wait(const std::shared_ptr<WriteTicket>& ticket);

  // Writes (StateStore::Write calls) and changes written so far: their
  // ratio is the mean group size.
  uint64_t groups_written() const;
  uint64_t changes_written() const;

 private:
  struct Pending {
    StateChange change;
    Done done;
    std::shared_ptr<WriteTicket> ticket;  // null: SubmitAsync's
    std::function<void()> after;
  };
  // Takes a group from the queue and writes it, releasing mu_ for the write
  // and the callbacks; nobody else may be writing.
  void WriteGroupLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The writer's thread: writes the asynchronous changes nobody else does.
  void Run();

  StateStore& store_;
  mutable Mutex mu_;
  CondVar written_;  // a group was written: its callers may be done
  CondVar work_;     // asynchronous changes wait, or stop
  std::deque<Pending> queue_ ABSL_GUARDED_BY(mu_);
  // SubmitAsync's changes in queue_, which the writer's thread must write
  // if no caller does.
  size_t async_queued_ ABSL_GUARDED_BY(mu_) = 0;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t groups_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t changes_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

}  // namespace rescale::engine

#endif  // RESCALE_SRC_ENGINE_STATE_WRITER_H_
