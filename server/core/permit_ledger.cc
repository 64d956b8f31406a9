#include "server/core/permit_ledger.h"

#include <utility>

namespace sluice::core {

namespace {
constexpr size_t kInitialSlots = 16;
}  // namespace

PermitLedger::PermitLedger(uint32_t epoch)
    : epoch_(epoch & 0xFFFFFF), ring_(kInitialSlots) {}

uint64_t PermitLedger::Issue(absl::Time issued, absl::Time deadline,
                             bool holds_slot, uint64_t probe_round,
                             Permit* evicted) {
  evicted->id = 0;
  SkipDead();
  if (next_ - head_ == ring_.size()) {
    if (ring_.size() < kMaxPermits) {
      Grow();
    } else {
      // Full of live permits: retire the oldest early rather than grow
      // without bound.
      Slot& oldest = SlotFor(head_);
      *evicted = oldest.permit;
      oldest.live = false;
      --live_;
      ++head_;
      SkipDead();
    }
  }
  const uint64_t seq = next_++ & kSeqMask;
  Slot& slot = SlotFor(seq);
  slot.permit.id = (uint64_t{epoch_} << kSeqBits) | seq;
  slot.permit.issued = issued;
  slot.permit.deadline = deadline;
  slot.permit.holds_slot = holds_slot;
  slot.permit.probe_round = probe_round;
  slot.live = true;
  ++live_;
  return slot.permit.id;
}

bool PermitLedger::Retire(uint64_t id, Permit* out) {
  if ((id >> kSeqBits) != epoch_) return false;
  const uint64_t seq = id & kSeqMask;
  if (seq < head_ || seq >= next_) return false;
  Slot& slot = SlotFor(seq);
  if (!slot.live || slot.permit.id != id) return false;
  *out = slot.permit;
  slot.live = false;
  --live_;
  SkipDead();
  return true;
}

bool PermitLedger::PopExpired(absl::Time now, Permit* out) {
  SkipDead();
  if (head_ == next_) return false;
  Slot& slot = SlotFor(head_);
  if (slot.permit.deadline > now) return false;
  *out = slot.permit;
  slot.live = false;
  --live_;
  ++head_;
  SkipDead();
  return true;
}

void PermitLedger::SkipDead() {
  while (head_ < next_ && !SlotFor(head_).live) ++head_;
}

void PermitLedger::Grow() {
  std::vector<Slot> bigger(ring_.size() * 2);
  for (uint64_t seq = head_; seq < next_; ++seq) {
    bigger[seq & (bigger.size() - 1)] = SlotFor(seq);
  }
  ring_ = std::move(bigger);
}

}  // namespace sluice::core
