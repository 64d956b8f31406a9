#ifndef SLUICE_SERVER_CORE_PERMIT_LEDGER_H_
#define SLUICE_SERVER_CORE_PERMIT_LEDGER_H_

#include <cstdint>
#include <vector>

#include "absl/time/time.h"

namespace sluice::core {

// The permits handed out and not yet reported, in issue order. A permit's
// low 40 bits are its sequence number and index a power-of-two ring, so
// issuing, finding and retiring a permit are O(1) and allocate nothing once
// the ring has grown to the number of permits alive within one expiry time.
// The high 24 bits are the ledger's `epoch`, so a permit of a ledger that was
// replaced (evicted key, recreated policy) does not match the new one.
// Not thread-safe; the owner locks.
class PermitLedger {
 public:
  struct Permit {
    uint64_t id = 0;
    absl::Time issued;
    absl::Time deadline;
    bool holds_slot = false;  // holds a concurrency slot
    uint64_t probe_round = 0;  // breaker round of a HALF_OPEN probe, or 0
  };

  // The ring never grows beyond this many live permits; past it the oldest
  // permit is retired early (see Issue).
  static constexpr size_t kMaxPermits = size_t{1} << 20;

  explicit PermitLedger(uint32_t epoch);

  // Records a permit. If kMaxPermits are already alive, the oldest is
  // retired first and returned through `evicted` (so the caller can count it
  // as a timeout); `evicted->id` is 0 otherwise.
  uint64_t Issue(absl::Time issued, absl::Time deadline, bool holds_slot,
                 uint64_t probe_round, Permit* evicted);

  // Removes and returns the live permit `id`. False for an unknown, already
  // reported or expired permit.
  bool Retire(uint64_t id, Permit* out);

  // Removes the oldest live permit if its deadline is at or before `now`.
  // Call in a loop to expire everything due. Deadlines follow issue order
  // unless call_timeout changed, so a later permit may expire a little late.
  bool PopExpired(absl::Time now, Permit* out);

  size_t live() const { return live_; }
  uint32_t epoch() const { return epoch_; }

 private:
  struct Slot {
    Permit permit;
    bool live = false;
  };
  static constexpr int kSeqBits = 40;
  static constexpr uint64_t kSeqMask = (uint64_t{1} << kSeqBits) - 1;

  Slot& SlotFor(uint64_t seq) { return ring_[seq & (ring_.size() - 1)]; }
  void Grow();
  // Moves head_ past retired slots.
  void SkipDead();

  const uint32_t epoch_;
  std::vector<Slot> ring_;
  uint64_t head_ = 1;  // oldest sequence that may be live
  uint64_t next_ = 1;  // sequence of the next permit
  size_t live_ = 0;
};

}  // namespace sluice::core

#endif  // SLUICE_SERVER_CORE_PERMIT_LEDGER_H_
