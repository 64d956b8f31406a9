// SPDX-License-Identifier: Apache-2.0
#include "server/core/core_slice.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <thread>
#include <utility>

namespace sluice::core {

SliceOptions SliceOptions::PerCpu() {
  SliceOptions options;
  options.count = std::min<size_t>(
      kMaxSlices, std::max(1u, std::thread::hardware_concurrency()));
  return options;
}

bool CoreSlice::TryAcquire(uint32_t permits, Unreported unreported,
                           absl::Time now, Decision* out) {
  if (!armed_ || now >= terms_.until) return false;
  // A permit due to expire settles as a failure: that is the owner's.
  if (ledger_.NextDeadline() <= now ||
      ledger_.live() + 1 >= PermitLedger::kMaxPermits) {
    return false;
  }
  if (permits > terms_.most_permits) return false;  // the owner says why
  const double n = permits == 0 ? 1 : permits;
  if (terms_.has_bucket && tokens_ < n) return false;
  if (terms_.has_cap && slots_ == 0) return false;

  GateSet::StartAllow(*terms_.policy, out);
  if (terms_.has_bucket) {
    tokens_ -= n;
    spent_ += n;
    out->remaining =
        static_cast<int64_t>(std::floor(bucket_left_ + tokens_));
  }
  if (terms_.has_cap) --slots_;
  permits_ += n;
  // As the owner does: a caller that may never report holds a permit only
  // where one serves, a slot to give back or an outcome to judge.
  const bool may_not_report = unreported == Unreported::kRelease;
  if (!may_not_report || terms_.has_cap || terms_.has_breaker) {
    PermitLedger::Permit evicted;  // none: live() is below the most
    out->permit_id.serial = ledger_.Issue(
        now, now + terms_.expiry, terms_.has_cap, 0, nullptr, &evicted,
        may_not_report ? Outcome::kCancelled : Outcome::kTimeout);
  }
  ++admitted_;
  return true;
}

bool CoreSlice::TrySettle(uint64_t id, Outcome outcome,
                          absl::Duration latency, absl::Time now) {
  if (!armed_ || now >= terms_.until || outcome != Outcome::kSuccess ||
      latency > terms_.slow_after ||
      pending_ == std::numeric_limits<uint32_t>::max() ||
      ledger_.NextDeadline() <= now) {
    return false;
  }
  PermitLedger::Permit permit;
  if (!ledger_.Retire(id, &permit)) return false;
  // The slot stays borrowed, for the slice's next call.
  if (permit.holds_slot) ++slots_;
  ++successes_;
  if (terms_.has_breaker) {
    ++pending_;
    last_success_ = now;
  }
  return true;
}

bool CoreSlice::Arm(Terms terms, GateSet* gates, double least,
                    double tokens, uint32_t slots, absl::Time now) {
  Reclaim(gates, nullptr, now);
  double lent_tokens = 0;
  uint32_t lent_slots = 0;
  gates->Lend(least, tokens, slots, now, &lent_tokens, &lent_slots);
  const bool enough =
      lent_tokens >= least && (!terms.has_cap || lent_slots > 0);
  if (!enough) {
    gates->Repay(terms.has_bucket ? lent_tokens : 0, 0, lent_slots);
    return false;
  }
  terms_ = std::move(terms);
  tokens_ = lent_tokens;
  slots_ = lent_slots;
  bucket_left_ = terms_.has_bucket ? gates->remaining(now) : 0;
  armed_ = true;
  return true;
}

void CoreSlice::Fold(GateSet* gates, DecisionCounters* counters,
                     absl::Time now) {
  if (counters != nullptr) {
    counters->CountAllowed(admitted_);
    counters->outcomes[static_cast<int>(Outcome::kSuccess)] += successes_;
    admitted_ = 0;
    successes_ = 0;
  }
  gates->SettleSuccesses(pending_, last_success_, now);
  pending_ = 0;
  if (terms_.has_bucket) gates->Repay(0, spent_, 0);
  spent_ = 0;
  gates->CountLent(permits_, permits_);
  permits_ = 0;
}

void CoreSlice::Reclaim(GateSet* gates, DecisionCounters* counters,
                        absl::Time now) {
  Fold(gates, counters, now);
  if (!armed_) return;
  gates->Repay(terms_.has_bucket ? tokens_ : 0, 0, slots_);
  tokens_ = 0;
  slots_ = 0;
  armed_ = false;
  terms_.policy.reset();
}

}  // namespace sluice::core
