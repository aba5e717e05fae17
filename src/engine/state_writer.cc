// StateWriter (see state_writer.h).
#include "src/engine/state_writer.h"

#include <utility>
#include <vector>

namespace rescale::engine {

bool WriteTicket::finished() const {
  MutexLock lock(mu_);
  return finished_;
}

absl::Status WriteTicket::status() const {
  MutexLock lock(mu_);
  return status_;
}

void WriteTicket::Finish(absl::Status status) {
  MutexLock lock(mu_);
  finished_ = true;
  status_ = std::move(status);
}

StateWriter::StateWriter(StateStore& store) : store_(store), thread_([this] { Run(); }) {}

StateWriter::~StateWriter() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  work_.SignalAll();
  thread_.join();
  // Changes submitted and never waited for (none, normally) are written
  // too: an accepted change is never dropped.
  MutexLock lock(mu_);
  while (!queue_.empty()) {
    written_.Wait(mu_, [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !writing_; });
    if (!queue_.empty()) WriteGroupLocked();
  }
}

std::shared_ptr<WriteTicket> StateWriter::Submit(StateChange change, Done done) {
  auto ticket = std::make_shared<WriteTicket>();
  MutexLock lock(mu_);
  queue_.push_back({std::move(change), std::move(done), ticket, nullptr});
  return ticket;
}

void StateWriter::SubmitAsync(StateChange change, Done done, std::function<void()> after) {
  {
    MutexLock lock(mu_);
    queue_.push_back({std::move(change), std::move(done), nullptr, std::move(after)});
    ++async_queued_;
  }
  work_.Signal();
}

absl::Status StateWriter::Wait(const std::shared_ptr<WriteTicket>& ticket) {
  MutexLock lock(mu_);
  while (true) {
    // Someone else writing may be writing this change: wait for their
    // group before deciding.
    written_.Wait(
        mu_, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !writing_ || ticket->finished(); });
    if (ticket->finished()) break;
    // Nobody writes and this change is still queued: write it, and every
    // change queued before and after it, up to kMaxGroup.
    WriteGroupLocked();
  }
  return ticket->status();
}

void StateWriter::WriteGroupLocked() {
  writing_ = true;
  std::vector<Pending> group;
  while (!queue_.empty() && group.size() < kMaxGroup) {
    if (group.emplace_back(std::move(queue_.front())).ticket == nullptr) --async_queued_;
    queue_.pop_front();
  }
  ++groups_;
  changes_ += group.size();
  mu_.Unlock();
  // The write and the completions, with no lock held: new changes queue
  // meanwhile and form the next group.
  std::vector<StateChange> changes;
  changes.reserve(group.size());
  for (Pending& p : group) changes.push_back(std::move(p.change));
  const absl::Status written = store_.Write(changes);
  for (Pending& p : group) {
    if (p.done) p.done(written);
    if (p.ticket != nullptr) p.ticket->Finish(written);
  }
  mu_.Lock();
  writing_ = false;
  written_.SignalAll();
  if (async_queued_ > 0) work_.Signal();
  // The continuations, once the group is over: one may submit and wait.
  mu_.Unlock();
  for (Pending& p : group) {
    if (p.after) p.after();
  }
  mu_.Lock();
}

void StateWriter::Run() {
  MutexLock lock(mu_);
  while (true) {
    work_.Wait(mu_, [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stop_ || (async_queued_ > 0 && !writing_);
    });
    if (async_queued_ == 0 || writing_) {
      if (stop_) return;
      continue;
    }
    WriteGroupLocked();
  }
}

uint64_t StateWriter::groups_written() const {
  MutexLock lock(mu_);
  return groups_;
}

uint64_t StateWriter::changes_written() const {
  MutexLock lock(mu_);
  return changes_;
}

}  // namespace rescale::engine
