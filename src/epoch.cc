// EpochDomain (see rescale/epoch.h for the memory-ordering argument).
#include "rescale/epoch.h"

#include <vector>

namespace rescale {

// Per-thread slot bookkeeping: which slot this thread owns in each domain it
// has used (normally only the global one), and how deeply guards nest.
struct ThreadSlots {
  struct Entry {
    EpochDomain* domain;
    int slot;
    int depth;
  };
  std::vector<Entry> entries;

  Entry& For(EpochDomain& domain) {
    for (Entry& e : entries) {
      if (e.domain == &domain) return e;
    }
    entries.push_back({&domain, domain.ClaimSlot(), 0});
    return entries.back();
  }
  ~ThreadSlots() {
    for (Entry& e : entries) {
      if (e.slot >= 0) e.domain->ReleaseSlot(e.slot);
    }
  }
};

namespace {
thread_local ThreadSlots thread_slots;
}  // namespace

EpochDomain& EpochDomain::Global() {
  static EpochDomain* const domain =
      new EpochDomain();  // never destroyed: threads may outlive main
  return *domain;
}

int EpochDomain::ClaimSlot() {
  for (int i = 0; i < kSlots; ++i) {
    bool expected = false;
    // acq_rel: the claim orders after the previous owner's release below.
    if (!slots_[i].owned.load(std::memory_order_relaxed) &&
        slots_[i].owned.compare_exchange_strong(expected, true, std::memory_order_acq_rel)) {
      return i;
    }
  }
  return -1;
}

void EpochDomain::ReleaseSlot(int slot) {
  slots_[slot].epoch.store(0, std::memory_order_release);
  slots_[slot].owned.store(false, std::memory_order_release);
}

EpochDomain::Guard::Guard(EpochDomain& domain) : domain_(domain) {
  ThreadSlots::Entry& entry = thread_slots.For(domain);
  slot_ = entry.slot;
  if (entry.depth++ > 0) {
    slot_ = -2;  // nested: the outer guard already protects this thread
    return;
  }
  const uint64_t epoch = domain.global_epoch_.load(std::memory_order_seq_cst);
  if (slot_ >= 0) {
    domain.slots_[slot_].epoch.store(epoch, std::memory_order_seq_cst);
  } else {
    MutexLock lock(domain.overflow_mu_);
    // Re-read under the lock: IsSafe reads the list under the same lock, so
    // the announcement and the scan are ordered by it.
    overflow_epoch_ = domain.global_epoch_.load(std::memory_order_seq_cst);
    ++domain.overflow_epochs_[overflow_epoch_];
  }
}

EpochDomain::Guard::~Guard() {
  ThreadSlots::Entry& entry = thread_slots.For(domain_);
  --entry.depth;
  if (slot_ == -2) return;
  if (slot_ >= 0) {
    domain_.slots_[slot_].epoch.store(0, std::memory_order_release);
  } else {
    MutexLock lock(domain_.overflow_mu_);
    auto it = domain_.overflow_epochs_.find(overflow_epoch_);
    if (--it->second == 0) domain_.overflow_epochs_.erase(it);
  }
}

uint64_t EpochDomain::Advance() {
  return global_epoch_.fetch_add(1, std::memory_order_seq_cst) + 1;
}

bool EpochDomain::IsSafe(uint64_t r) {
  for (const Slot& slot : slots_) {
    const uint64_t e = slot.epoch.load(std::memory_order_seq_cst);
    if (e != 0 && e < r) return false;
  }
  MutexLock lock(overflow_mu_);
  return overflow_epochs_.empty() || overflow_epochs_.begin()->first >= r;
}

}  // namespace rescale
