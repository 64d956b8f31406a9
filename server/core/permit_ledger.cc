// SPDX-License-Identifier: Apache-2.0
#include "server/core/permit_ledger.h"

#include <algorithm>
#include <utility>

namespace sluice::core {

namespace {

constexpr size_t kInitialSlots = 16;
constexpr uint64_t kEpochCount = (uint64_t{1} << 23) - 1;

// splitmix64's finaliser: cheap, and a bijection, so distinct inputs give
// distinct, well spread outputs.
uint64_t Mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EB;
  return x ^ (x >> 31);
}

}  // namespace

PermitLedger::PermitLedger(Origin origin)
    : epoch_(origin.epoch & 0xFFFFFF),
      head_(origin.first_seq & kSeqMask),
      next_(head_) {}

uint64_t PermitLedger::Issue(absl::Time issued, absl::Time deadline,
                             bool holds_slot, uint64_t probe_round,
                             void* holder, Permit* evicted,
                             Outcome on_expiry, uint32_t adaptive_epoch) {
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
  const uint64_t position = next_++;
  Slot& slot = SlotFor(position);
  slot.permit.id = (uint64_t{epoch_} << kSeqBits) | (position & kSeqMask);
  slot.permit.issued = issued;
  slot.permit.deadline = deadline;
  slot.permit.holds_slot = holds_slot;
  slot.permit.adaptive_epoch = adaptive_epoch;
  slot.permit.probe_round = probe_round;
  slot.permit.holder = holder;
  slot.permit.on_expiry = on_expiry;
  slot.live = true;
  ++live_;
  return slot.permit.id;
}

PermitLedger::Slot* PermitLedger::LiveSlot(uint64_t id) {
  if ((id >> kSeqBits) != epoch_) return nullptr;
  // The position of `id` if it lies at or after head_, counting across a
  // wrap of the 40-bit sequence; an older id lands far past next_.
  const uint64_t position = head_ + (((id & kSeqMask) - head_) & kSeqMask);
  if (position >= next_) return nullptr;
  Slot& slot = SlotFor(position);
  if (!slot.live || slot.permit.id != id) return nullptr;
  return &slot;
}

const PermitLedger::Permit* PermitLedger::Find(uint64_t id) {
  Slot* slot = LiveSlot(id);
  return slot == nullptr ? nullptr : &slot->permit;
}

bool PermitLedger::Retire(uint64_t id, Permit* out) {
  Slot* found = LiveSlot(id);
  if (found == nullptr) return false;
  Slot& slot = *found;
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

absl::Time PermitLedger::NextDeadline() {
  SkipDead();
  return head_ == next_ ? absl::InfiniteFuture() : SlotFor(head_).permit.deadline;
}

void PermitLedger::SkipDead() {
  while (head_ < next_ && !SlotFor(head_).live) ++head_;
}

void PermitLedger::Grow() {
  std::vector<Slot> bigger(std::max(kInitialSlots, ring_.size() * 2));
  for (uint64_t position = head_; position < next_; ++position) {
    bigger[position & (bigger.size() - 1)] = SlotFor(position);
  }
  ring_ = std::move(bigger);
}

PermitEpochs::PermitEpochs(uint64_t seed) : seed_(seed), next_(Mix(seed)) {}

PermitLedger::Origin PermitEpochs::Next() {
  const uint64_t n = next_.fetch_add(1, std::memory_order_relaxed);
  PermitLedger::Origin origin;
  origin.epoch = static_cast<uint32_t>(1 + n % kEpochCount);
  // Mixed with the seed and the full count, not just the epoch, so a ledger
  // whose epoch came round again still starts elsewhere.
  origin.first_seq = Mix(n ^ seed_);
  return origin;
}

}  // namespace sluice::core
