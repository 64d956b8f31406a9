// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_CORE_PERMIT_LEDGER_H_
#define SLUICE_SERVER_CORE_PERMIT_LEDGER_H_

#include <atomic>
#include <cstdint>
#include <vector>

#include "absl/time/time.h"
#include "server/core/outcome.h"

namespace sluice::core {

// The permits handed out and not yet reported, in issue order. A permit's
// low 40 bits are its sequence number and index a power-of-two ring, so
// issuing, finding and retiring a permit are O(1) and allocate nothing once
// the ring has grown to the number of permits alive within one expiry time.
// The ring is empty until the first permit, so a ledger never used (a
// shard of a per_key policy no key has reached) costs no allocation.
// The high 24 bits are the ledger's `epoch`, so a permit of a ledger that was
// replaced (evicted key, recreated policy) does not match the new one.
// The sequence starts at the Origin's first_seq and wraps from 2^40 - 1 to 0
// (see Retire), so a ledger may start anywhere in its 40 bits; an id comes
// back only after 2^40 more permits of the same ledger.
// These ids are the serials of PermitId: consecutive, so easy to guess. They
// never leave the core alone; the engine seals each with a MAC (PermitSeal)
// and checks the MAC before a report reaches the ledger.
// Not thread-safe; the owner locks.
class PermitLedger {
 public:
  struct Permit {
    uint64_t id = 0;
    absl::Time issued;
    absl::Time deadline;
    bool holds_slot = false;  // holds a concurrency slot
    // What the permit counts as if it expires unreported.
    Outcome on_expiry = Outcome::kTimeout;
    // The adaptive limit's epoch of the slot it holds, or 0.
    uint32_t adaptive_epoch = 0;
    uint64_t probe_round = 0;  // breaker round of a HALF_OPEN probe, or 0
    // Whose permit it is, for an owner that keeps one ledger for many
    // holders (the keys of a dependency); opaque to the ledger.
    void* holder = nullptr;
  };

  // The ring never grows beyond this many live permits; past it the oldest
  // permit is retired early (see Issue).
  static constexpr size_t kMaxPermits = size_t{1} << 20;

  // Where a ledger's ids start.
  struct Origin {
    // The high 24 bits of every id. Must not be 0 (mod 2^24): the sequence
    // passes through 0 when it wraps, and the epoch keeps that id non-zero.
    uint32_t epoch = 1;
    // The sequence of the first permit; only its low 40 bits count.
    uint64_t first_seq = 1;
  };

  explicit PermitLedger(Origin origin);

  // Records a permit. If kMaxPermits are already alive, the oldest is
  // retired first and returned through `evicted` (so the caller can count it
  // as a timeout); `evicted->id` is 0 otherwise.
  uint64_t Issue(absl::Time issued, absl::Time deadline, bool holds_slot,
                 uint64_t probe_round, void* holder, Permit* evicted,
                 Outcome on_expiry = Outcome::kTimeout,
                 uint32_t adaptive_epoch = 0);

  // The live permit `id`, left in place; null for an unknown, already
  // reported or expired permit.
  const Permit* Find(uint64_t id);

  // Removes and returns the live permit `id`. False for an unknown, already
  // reported or expired permit.
  bool Retire(uint64_t id, Permit* out);

  // Removes the oldest live permit if its deadline is at or before `now`.
  // Call in a loop to expire everything due. Deadlines follow issue order
  // unless call_timeout changed, so a later permit may expire a little late.
  bool PopExpired(absl::Time now, Permit* out);
  // The deadline of the oldest live permit: PopExpired takes nothing while
  // `now` is before it. InfiniteFuture when no permit is live.
  absl::Time NextDeadline();

  size_t live() const { return live_; }
  uint32_t epoch() const { return epoch_; }

 private:
  struct Slot {
    Permit permit;
    bool live = false;
  };
  static constexpr int kSeqBits = 40;
  static constexpr uint64_t kSeqMask = (uint64_t{1} << kSeqBits) - 1;
  // Live permits span far less than the 40-bit sequence space, so an id's
  // sequence names one position in [head_, next_) even after a wrap.
  static_assert(kMaxPermits < kSeqMask);

  Slot& SlotFor(uint64_t position) {
    return ring_[position & (ring_.size() - 1)];
  }
  void Grow();
  // The slot of live permit `id`, or null.
  Slot* LiveSlot(uint64_t id);
  // Moves head_ past retired slots.
  void SkipDead();

  const uint32_t epoch_;
  std::vector<Slot> ring_;
  // Positions count issued permits from the origin's first_seq without
  // wrapping (64 bits do not run out); an id carries position & kSeqMask.
  uint64_t head_;  // oldest position that may be live
  uint64_t next_;  // position of the next permit
  size_t live_ = 0;
};

// Hands each new ledger of one engine its Origin. Epochs are consecutive, so
// no two ledgers of one process share one until 2^23 - 1 have been made (and
// those then start at other sequences). The first epoch and every first
// sequence are drawn from `seed`, so a process with another seed (a
// restarted replica) issues other ids than the one before. Epochs skip 0
// (see Origin) and stay below 2^23, keeping ids below 2^63.
// Safe for concurrent use.
class PermitEpochs {
 public:
  explicit PermitEpochs(uint64_t seed);
  PermitEpochs(const PermitEpochs&) = delete;
  PermitEpochs& operator=(const PermitEpochs&) = delete;

  PermitLedger::Origin Next();

 private:
  const uint64_t seed_;
  // Counts ledgers from a start drawn from the seed; the epoch is this
  // count modulo the number of epochs.
  std::atomic<uint64_t> next_;
};

}  // namespace sluice::core

#endif  // SLUICE_SERVER_CORE_PERMIT_LEDGER_H_
