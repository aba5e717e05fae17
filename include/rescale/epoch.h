// EpochDomain: epoch-based reclamation for Rescale's lock-free structures.
//
// Lock-free readers (the sample-ingest path) load pointers to shared objects
// that an administrative path (job registration, maintenance) may unlink and
// replace at any time. The unlinking side must not free an object while a
// reader may still hold a pointer to it. Epoch-based reclamation solves this
// with one store per reader critical section and no read-side locks:
//
//   reader:  EpochDomain::Guard g(EpochDomain::Global());   // announce epoch
//            const T* p = shared.load(std::memory_order_seq_cst);
//            ... use *p ...                                  // until g ends
//   writer:  shared.store(replacement, std::memory_order_seq_cst);   // unlink
//            uint64_t r = domain.Advance();   // p may be freed once IsSafe(r)
//
// Memory-ordering argument. The writer's unlink (U), its epoch increment (A)
// and its slot scan (S) are seq_cst; a reader's announcement (N) and its
// pointer load (L) are seq_cst, and N precedes L in program order. All of
// them sit in the single total order of seq_cst operations:
//  * If S reads a reader's slot as 0 or as an epoch >= r, then either the
//    reader is outside any critical section, or its N came after A (it read a
//    global epoch >= r, which only A and later increments write). In both
//    cases its L follows U in the total order, so it loads the replacement,
//    never the unlinked object. A reader that announced before S but read the
//    epoch before A shows an epoch < r, so IsSafe(r) waits for it.
//  * A reader leaves with a release store of 0 to its slot; the scan's
//    seq_cst load that reads this 0 synchronises with it, so every access the
//    reader made to the object happens before the writer frees it.
//
// Slots: each thread claims one cache-line-sized slot on first use (padding
// keeps readers on different cores from invalidating each other's line) and
// returns it when the thread exits. Guards nest: only the outermost
// announces. If all kSlots are taken, a thread falls back to a mutex-guarded
// overflow list, correct but slower; with kSlots = 512 this needs more than
// 512 threads inside Rescale at once.
#ifndef RESCALE_EPOCH_H_
#define RESCALE_EPOCH_H_

#include <atomic>
#include <cstdint>
#include <map>

#include "absl/base/thread_annotations.h"
#include "rescale/mutex.h"

namespace rescale {

class EpochDomain {
 public:
  static constexpr int kSlots = 512;
  static constexpr size_t kCacheLine = 64;

  // The process-wide domain every store shares (threads need one slot each,
  // not one per store instance).
  static EpochDomain& Global();

  EpochDomain() = default;
  EpochDomain(const EpochDomain&) = delete;
  EpochDomain& operator=(const EpochDomain&) = delete;

  // RAII read-side critical section. Cheap: one seq_cst store on entry, one
  // release store on exit (outermost guard only).
  class Guard {
   public:
    explicit Guard(EpochDomain& domain);
    ~Guard();
    Guard(const Guard&) = delete;
    Guard& operator=(const Guard&) = delete;

   private:
    EpochDomain& domain_;
    int slot_;  // -1 = overflow list
    uint64_t overflow_epoch_ = 0;
  };

  // Call after unlinking objects (seq_cst store of the replacement). Returns
  // the epoch r such that those objects may be freed once IsSafe(r).
  uint64_t Advance();

  // True when no reader can still hold a pointer unlinked before Advance()
  // returned r.
  bool IsSafe(uint64_t r);

 private:
  struct alignas(kCacheLine) Slot {
    std::atomic<uint64_t> epoch{0};  // 0 = not in a critical section
    std::atomic<bool> owned{false};
  };
  static_assert(sizeof(Slot) == kCacheLine, "one slot per cache line");

  friend struct ThreadSlots;
  int ClaimSlot();
  void ReleaseSlot(int slot);

  Slot slots_[kSlots];
  std::atomic<uint64_t> global_epoch_{1};
  Mutex overflow_mu_;
  std::map<uint64_t, int> overflow_epochs_ ABSL_GUARDED_BY(overflow_mu_);  // epoch -> readers
};

}  // namespace rescale

#endif  // RESCALE_EPOCH_H_
