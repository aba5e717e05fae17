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

StateWriter::~StateWriter() {
  std::deque<Pending> rest;
  {
    MutexLock lock(mu_);
    rest.swap(queue_);
  }
  if (!rest.empty()) WriteGroup(std::move(rest));
}

std::shared_ptr<WriteTicket> StateWriter::Submit(StateChange change, Done done) {
  auto ticket = std::make_shared<WriteTicket>();
  MutexLock lock(mu_);
  queue_.push_back({std::move(change), std::move(done), ticket});
  return ticket;
}

absl::Status StateWriter::Wait(const std::shared_ptr<WriteTicket>& ticket) {
  while (true) {
    std::deque<Pending> group;
    {
      MutexLock lock(mu_);
      // Someone else writing may be writing this change: wait for their
      // group before deciding.
      while (writing_ && !ticket->finished()) written_.Wait(mu_);
      if (ticket->finished()) break;
      // Nobody writes and this change is still queued: write it, and every
      // change queued before and after it, up to kMaxGroup.
      writing_ = true;
      while (!queue_.empty() && group.size() < kMaxGroup) {
        group.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      ++groups_;
      changes_ += group.size();
    }
    WriteGroup(std::move(group));
    {
      MutexLock lock(mu_);
      writing_ = false;
    }
    written_.SignalAll();
  }
  return ticket->status();
}

void StateWriter::WriteGroup(std::deque<Pending> group) {
  std::vector<StateChange> changes;
  changes.reserve(group.size());
  for (Pending& p : group) changes.push_back(std::move(p.change));
  // The write, with no lock held: new changes queue meanwhile and form the
  // next group.
  const absl::Status written = store_.Write(changes);
  for (Pending& p : group) {
    if (p.done) p.done(written);
    p.ticket->Finish(written);
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
