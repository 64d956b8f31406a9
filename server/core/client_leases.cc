// SPDX-License-Identifier: Apache-2.0
#include "server/core/client_leases.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "server/core/outcome.h"

namespace sluice::core {
namespace {

// Most outcomes of one kind one renewal hands to the breaker one by one;
// the rest are counted only. A client that ended more calls than that in
// one tick sends them in a later renewal anyway (its counts are
// cumulative), so this only bounds the work a hostile count could ask for.
constexpr uint64_t kMostOutcomesPerRenewal = 1 << 16;

// b - a for cumulative counts, 0 when a renewal older than the one seen
// arrives late.
uint64_t Since(uint64_t a, uint64_t b) { return b > a ? b - a : 0; }

}  // namespace

void ClientLeases::Settle(const LeaseSettlement& in,
                          const PolicyConfig& policy, GateSet* gates,
                          DecisionCounters* counters, absl::Time now,
                          Lease* lease) {
  LeaseSettlement& seen = lease->seen;
  const uint64_t admitted = Since(seen.admitted, in.admitted);
  counters->CountAllowed(admitted);
  counters->leased += admitted;
  // Demand and books of a cluster share: what the calls decided from the
  // lease asked for and took.
  const auto taken =
      static_cast<double>(Since(seen.tokens_spent, in.tokens_spent));
  gates->CountLent(taken + static_cast<double>(
                               Since(seen.tokens_refused, in.tokens_refused)),
                   taken);
  if (!lease->unlimited_tokens) {
    // Never more than the lease held: a client cannot spend tokens it was
    // not lent.
    const double outstanding =
        std::max(0.0, lease->token_limit - static_cast<double>(
                                               seen.tokens_spent));
    const double spent = std::min(
        outstanding,
        static_cast<double>(Since(seen.tokens_spent, in.tokens_spent)));
    gates->Repay(0, spent, 0);
  }
  // Successes first: each came before the failures this renewal carries
  // (the client renews as soon as one fails), so the consecutive-failure
  // rule sees them in their order.
  const uint64_t successes = Since(seen.successes, in.successes);
  counters->outcomes[static_cast<int>(Outcome::kSuccess)] += successes;
  gates->SettleSuccesses(
      static_cast<uint32_t>(std::min<uint64_t>(
          successes, std::numeric_limits<uint32_t>::max())),
      now, now);
  const absl::Duration slow_latency =
      policy.breaker && policy.breaker->slow_rule_enabled()
          ? policy.breaker->slow_call_duration + absl::Nanoseconds(1)
          : absl::ZeroDuration();
  const Admission admitted_call{true, false, 0, 0};
  const auto feed = [&](uint64_t since, uint64_t total, Outcome outcome,
                        absl::Duration latency) {
    const uint64_t n = Since(since, total);
    const uint64_t fed = std::min(n, kMostOutcomesPerRenewal);
    for (uint64_t i = 0; i < fed; ++i) {
      gates->Settle(admitted_call, outcome, latency, true, now);
    }
    counters->outcomes[static_cast<int>(outcome)] += n - fed;
  };
  feed(seen.slow, in.slow, Outcome::kSuccess, slow_latency);
  feed(seen.failures, in.failures, Outcome::kFailure, absl::ZeroDuration());
  feed(seen.timeouts, in.timeouts, Outcome::kTimeout, policy.call_timeout);
  feed(seen.cancelled, in.cancelled, Outcome::kCancelled,
       absl::ZeroDuration());
  // Keep the largest of each count, so a late, older renewal never moves
  // the baseline back.
  seen.tokens_spent = std::max(seen.tokens_spent, in.tokens_spent);
  seen.admitted = std::max(seen.admitted, in.admitted);
  seen.tokens_refused = std::max(seen.tokens_refused, in.tokens_refused);
  seen.successes = std::max(seen.successes, in.successes);
  seen.slow = std::max(seen.slow, in.slow);
  seen.failures = std::max(seen.failures, in.failures);
  seen.timeouts = std::max(seen.timeouts, in.timeouts);
  seen.cancelled = std::max(seen.cancelled, in.cancelled);
}

void ClientLeases::GiveBack(GateSet* gates, bool spent_rest,
                            uint32_t keep_slots, Lease* lease) {
  if (!lease->unlimited_tokens) {
    const double rest =
        std::max(0.0, lease->token_limit -
                          static_cast<double>(lease->seen.tokens_spent));
    gates->Repay(spent_rest ? 0 : rest, spent_rest ? rest : 0, 0);
    lease->token_limit = static_cast<double>(lease->seen.tokens_spent);
  }
  if (lease->slots > keep_slots) {
    gates->Repay(0, 0, lease->slots - keep_slots);
    lease->slots = keep_slots;
  }
}

void ClientLeases::Renew(const LeaseSettlement& in, const PolicyConfig& policy,
                         GateSet* gates, uint64_t* lease_ids,
                         DecisionCounters* counters, absl::Time now,
                         LeaseTerms* out) {
  *out = LeaseTerms();
  out->call_timeout = policy.call_timeout;
  if (policy.breaker && policy.breaker->slow_rule_enabled()) {
    out->slow_after = policy.breaker->slow_call_duration;
  }
  out->policy_version = policy.version;
  auto it = leases_.find(in.client);
  Lease* lease = it == leases_.end() ? nullptr : &it->second;
  if (lease != nullptr) Settle(in, policy, gates, counters, now, lease);

  const bool give_back = in.want_tokens == 0 && in.want_slots == 0;
  if (lease != nullptr && (give_back || in.lease != lease->id)) {
    // The client decides from no lease of ours (it gave this one back, or
    // stopped when it heard the lease had ended), and stopped before it
    // sent this: what it did not spend comes back, and its slots as its
    // calls end.
    GiveBack(gates, false, std::min(lease->slots, in.in_flight), lease);
    if (give_back) {
      if (lease->slots == 0) {
        leases_.erase(it);
        lease = nullptr;
      } else {
        lease->runs_out = now + gates->permit_expiry();
        next_due_ = std::min(next_due_, lease->runs_out);
      }
    }
  }
  out->breaker_state = gates->breaker_state(now);
  if (give_back) {
    out->reason = "given back";
    return;
  }
  std::string why;
  const absl::Time sliceable_until = gates->SliceableUntil(now, &why);
  if (sliceable_until <= now) {
    // A lease the client still decides from stays lent as it is: the
    // client may spend it until it hears this, and settles it with its
    // next renewal. One it settled already goes once nothing is in flight.
    if (lease != nullptr && in.lease != lease->id && lease->slots == 0) {
      leases_.erase(it);
    }
    out->reason = std::move(why);
    return;
  }
  if (lease == nullptr) {
    if (leases_.size() >= kMaxLeases) {
      out->reason = "too many clients hold a lease on this dependency";
      return;
    }
    Lease fresh;
    fresh.id = ++*lease_ids;
    // Counts from before this lease are not this process's to settle
    // (a restart, or a lease that ran out).
    fresh.seen = in;
    fresh.token_limit = static_cast<double>(in.tokens_spent);
    fresh.unlimited_tokens = !gates->has_bucket();
    it = leases_.emplace(in.client, fresh).first;
    lease = &it->second;
  }

  // Lend what the client wants on top of what it still holds. Slots only
  // grow while the lease lasts: the client may fill the ones it holds
  // before it hears of fewer.
  const double held = std::max(
      0.0, lease->token_limit - static_cast<double>(lease->seen.tokens_spent));
  const double more_tokens =
      lease->unlimited_tokens ? 0 : std::max(0.0, in.want_tokens - held);
  uint32_t more_slots = 0;
  if (gates->has_cap() && policy.concurrency) {
    const uint32_t target =
        std::min(std::max({lease->slots, in.in_flight, in.want_slots}),
                 policy.concurrency->max_in_flight);
    more_slots = target > lease->slots ? target - lease->slots : 0;
  }
  double lent_tokens = 0;
  uint32_t lent_slots = 0;
  gates->Lend(0, more_tokens, more_slots, now, &lent_tokens, &lent_slots);
  if (!lease->unlimited_tokens) lease->token_limit += lent_tokens;
  lease->slots += lent_slots;

  const absl::Duration valid_for =
      std::min(kMaxValidFor, sliceable_until - now);
  lease->runs_out = now + valid_for + gates->permit_expiry();

  out->lease = lease->id;
  out->valid_for = valid_for;
  out->unlimited_tokens = lease->unlimited_tokens;
  out->token_limit =
      lease->unlimited_tokens
          ? std::numeric_limits<uint64_t>::max()
          : static_cast<uint64_t>(std::floor(lease->token_limit));
  out->unlimited_slots = !gates->has_cap();
  out->slot_limit = lease->slots;
  if (!lease->unlimited_tokens && gates->remaining(now) < 1 &&
      policy.rate_limit) {
    // The bucket is empty: once the lease is spent, asking would only be
    // refused. The next renewal is worth it when the bucket has refilled
    // what the client still wants, or half its burst, whichever comes
    // first: a bucket left to fill up would stop refilling, and what it
    // did not refill would be lost to every caller.
    out->exhausted = true;
    // The bucket's own rate and burst: a cluster share's, not the
    // policy's.
    const double per_second = std::max(gates->refill_per_second(), 1e-9);
    const double missing =
        std::max(1.0, in.want_tokens - (held + lent_tokens));
    const double half_burst = std::max(1.0, gates->burst() / 2);
    out->retry_after =
        std::min(valid_for,
                 absl::Seconds(std::min(missing, half_burst) / per_second));
  }
  // Only ever early: Expire finds nothing due then and looks again.
  next_due_ = std::min(next_due_, lease->runs_out);
}

void ClientLeases::Expire(GateSet* gates, absl::Time now) {
  if (now < next_due_) return;
  for (auto it = leases_.begin(); it != leases_.end();) {
    Lease& lease = it->second;
    if (lease.runs_out <= now) {
      // Nothing more will come of it: what it did not hand back counts
      // as spent, and its calls have ended or expired.
      GiveBack(gates, true, 0, &lease);
      leases_.erase(it++);
    } else {
      ++it;
    }
  }
  Recompute();
}

void ClientLeases::Recompute() {
  next_due_ = absl::InfiniteFuture();
  for (const auto& [client, lease] : leases_) {
    next_due_ = std::min(next_due_, lease.runs_out);
  }
}

void ClientLeases::AddUsage(const GateSet& gates, absl::Time now,
                            KeyTick* key) const {
  absl::Time last = now;
  for (const auto& [client, lease] : leases_) {
    last = std::max(last, lease.runs_out);
  }
  const absl::Duration left = last - now;
  if (key->limit[kRateUnits] > 0 && gates.lent_tokens() > 0) {
    key->usage[kRateUnits] =
        std::max(key->usage[kRateUnits],
                 static_cast<int64_t>(std::ceil(gates.lent_tokens())));
    key->usage_left[kRateUnits] = std::max(key->usage_left[kRateUnits], left);
  }
  // The slots are counted in flight already (GateSet::CollectTick); a
  // lease keeps them until it runs out.
  if (key->limit[kSlotUnits] > 0 && key->usage[kSlotUnits] > 0) {
    key->usage_left[kSlotUnits] = std::max(key->usage_left[kSlotUnits], left);
  }
}

LeaseTotals ClientLeases::totals() const {
  LeaseTotals t;
  for (const auto& [client, lease] : leases_) {
    ++t.leases;
    if (!lease.unlimited_tokens) {
      const double spent = static_cast<double>(lease.seen.tokens_spent);
      t.tokens += std::max(0.0, lease.token_limit - spent);
    }
    t.slots += lease.slots;
  }
  return t;
}

}  // namespace sluice::core
