// StateWriter (see state_writer.h).
#include "src/engine/state_writer.h"

#include <utility>
#include <vector>

namespace rescale::engine {

absl::Status WriteTicket::Wait() {
  MutexLock lock(mu_);
  cv_.Wait(mu_, [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return finished_; });
  return status_;
}

void WriteTicket::Finish(absl::Status status) {
  {
    MutexLock lock(mu_);
    finished_ = true;
    status_ = std::move(status);
  }
  cv_.SignalAll();
}

StateWriter::StateWriter(StateStore& store) : store_(store), thread_([this] { Run(); }) {}

StateWriter::~StateWriter() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  cv_.SignalAll();
  thread_.join();
}

std::shared_ptr<WriteTicket> StateWriter::Submit(StateChange change, Done done) {
  auto ticket = std::make_shared<WriteTicket>();
  {
    MutexLock lock(mu_);
    queue_.push_back({std::move(change), std::move(done), ticket});
  }
  cv_.Signal();
  return ticket;
}

uint64_t StateWriter::groups_written() const {
  MutexLock lock(mu_);
  return groups_;
}

uint64_t StateWriter::changes_written() const {
  MutexLock lock(mu_);
  return changes_;
}

void StateWriter::Run() {
  std::vector<Pending> group;
  std::vector<StateChange> changes;
  while (true) {
    {
      MutexLock lock(mu_);
      cv_.Wait(mu_,
               [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || !queue_.empty(); });
      // Stops only once the queue is empty: every accepted change is
      // written (or fails) before the writer goes.
      if (queue_.empty()) return;
      while (!queue_.empty() && group.size() < kMaxGroup) {
        group.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      ++groups_;
      changes_ += group.size();
    }
    // The write, without the queue's lock: new changes queue meanwhile and
    // form the next group.
    changes.clear();
    for (Pending& p : group) changes.push_back(std::move(p.change));
    const absl::Status written = store_.Write(changes);
    for (Pending& p : group) {
      if (p.done) p.done(written);
      p.ticket->Finish(written);
    }
    group.clear();
  }
}

}  // namespace rescale::engine
