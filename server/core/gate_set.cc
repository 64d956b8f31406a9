#include "server/core/gate_set.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace sluice::core {
namespace {

constexpr int kTooManyRequests = 429;
constexpr int kServiceUnavailable = 503;

// What a concurrency refusal suggests as retry_after: slots free up as calls
// finish, which takes at most about one call timeout.
absl::Duration ConcurrencyRetryAfter(absl::Duration call_timeout) {
  return std::min(call_timeout, absl::Seconds(1));
}

}  // namespace

GateSet::GateSet(const PolicyConfig& policy, absl::Time now, uint32_t epoch,
                 EventSink* sink, DecisionCounters* counters,
                 std::string dependency, std::string key)
    : sink_(sink),
      counters_(counters),
      dependency_(std::move(dependency)),
      key_(std::move(key)),
      ledger_(epoch) {
  Reconfigure(policy, now);
}

void GateSet::Reconfigure(const PolicyConfig& policy, absl::Time now) {
  call_timeout_ = policy.call_timeout;

  const RateLimitConfig* rate =
      policy.rate_limit ? &*policy.rate_limit : nullptr;
  if (rate && rate->algorithm == RateAlgorithm::kTokenBucket) {
    if (bucket_) {
      bucket_->Reconfigure(rate->rate, rate->per, rate->burst, now);
    } else {
      bucket_.emplace(rate->rate, rate->per, rate->burst, now);
    }
  } else {
    bucket_.reset();
  }
  if (rate && rate->algorithm == RateAlgorithm::kSlidingWindow) {
    const auto limit = static_cast<int64_t>(std::floor(rate->rate));
    if (window_) {
      window_->Reconfigure(limit, rate->per, rate->buckets, now);
    } else {
      window_.emplace(limit, rate->per, rate->buckets);
    }
  } else {
    window_.reset();
  }

  if (policy.concurrency) {
    if (concurrency_) {
      concurrency_->SetMax(policy.concurrency->max_in_flight);
    } else {
      concurrency_.emplace(policy.concurrency->max_in_flight);
    }
  } else {
    concurrency_.reset();
  }

  if (policy.breaker) {
    if (breaker_) {
      breaker_->Reconfigure(*policy.breaker, now);
    } else {
      breaker_.emplace(*policy.breaker, now, this);
      if (override_ != BreakerOverride::kAuto) {
        breaker_->SetOverride(override_, now, "override carried over");
      }
    }
  } else {
    breaker_.reset();
  }
}

bool GateSet::TakeRate(double permits, absl::Time now) {
  if (bucket_) return bucket_->TryTake(permits, now);
  if (window_) return window_->TryTake(static_cast<int64_t>(permits), now);
  return true;
}

void GateSet::RefundRate(double permits, absl::Time now) {
  if (bucket_) bucket_->Refund(permits);
  if (window_) window_->Refund(static_cast<int64_t>(permits), now);
}

int64_t GateSet::RemainingRate(absl::Time now) {
  if (bucket_) return static_cast<int64_t>(std::floor(bucket_->Available(now)));
  if (window_) return window_->Available(now);
  return -1;
}

absl::Duration GateSet::RateRetryAfter(double permits, absl::Time now) {
  if (bucket_) return bucket_->TimeUntil(permits, now);
  if (window_) return window_->TimeUntil(static_cast<int64_t>(permits), now);
  return absl::ZeroDuration();
}

void GateSet::Refuse(const PolicyConfig& policy, Reason reason,
                     absl::Duration retry_after, absl::Time now,
                     Decision* out) {
  out->remaining = RemainingRate(now);
  if (policy.shadow) {
    // Counted as a refusal by the owner, but the call goes ahead. It holds no
    // slot or probe, yet its outcome still feeds the breaker.
    out->verdict = Verdict::kAllow;
    out->reason = Reason::kShadow;
    PermitLedger::Permit evicted;
    out->permit_id = ledger_.Issue(now, now + 2 * call_timeout_, false, 0,
                                   &evicted);
    if (evicted.id != 0) {
      Settle(evicted, Outcome::kTimeout, now - evicted.issued, now);
    }
    return;
  }
  out->reason = reason;
  out->retry_after = retry_after;
  if (policy.fallback.AppliesTo(reason)) {
    out->verdict = Verdict::kDegrade;
    out->http_status = 0;
    return;
  }
  out->verdict = Verdict::kReject;
  out->http_status =
      reason == Reason::kRateLimited || reason == Reason::kConcurrencyLimited
          ? kTooManyRequests
          : kServiceUnavailable;
}

void GateSet::Acquire(const PolicyConfig& policy, uint32_t permits,
                      absl::Time now, Decision* out) {
  ExpireDue(now);
  out->verdict = Verdict::kAllow;
  out->reason = Reason::kNone;
  out->permit_id = 0;
  out->call_timeout = call_timeout_;
  out->retry_after = absl::ZeroDuration();
  out->http_status = 0;
  out->policy_version = policy.version;
  out->breaker_state = breaker_ ? breaker_->State(now) : BreakerState::kClosed;
  const double n = permits == 0 ? 1 : permits;

  // 1. Breaker, without side effects: no tokens for calls never made.
  if (breaker_ && !breaker_->Permits(now)) {
    Refuse(policy, Reason::kCircuitOpen, breaker_->RetryAfter(now), now, out);
    return;
  }
  // 2. Rate.
  if (!TakeRate(n, now)) {
    Refuse(policy, Reason::kRateLimited, RateRetryAfter(n, now), now, out);
    return;
  }
  // 3. Concurrency.
  if (concurrency_ && !concurrency_->TryTake()) {
    RefundRate(n, now);
    Refuse(policy, Reason::kConcurrencyLimited,
           ConcurrencyRetryAfter(call_timeout_), now, out);
    return;
  }
  // 4. Probe slot while HALF_OPEN.
  uint64_t probe_round = 0;
  if (out->breaker_state == BreakerState::kHalfOpen) {
    probe_round = breaker_->TryTakeProbe();
    if (probe_round == 0) {
      if (concurrency_) concurrency_->Release();
      RefundRate(n, now);
      Refuse(policy, Reason::kProbeLimit, ConcurrencyRetryAfter(call_timeout_),
             now, out);
      return;
    }
  }
  out->remaining = RemainingRate(now);
  PermitLedger::Permit evicted;
  out->permit_id = ledger_.Issue(now, now + 2 * call_timeout_,
                                 concurrency_.has_value(), probe_round,
                                 &evicted);
  if (evicted.id != 0) {
    Settle(evicted, Outcome::kTimeout, now - evicted.issued, now);
  }
}

bool GateSet::Report(uint64_t permit_id, Outcome outcome,
                     absl::Duration latency, absl::Time now) {
  ExpireDue(now);
  PermitLedger::Permit permit;
  if (!ledger_.Retire(permit_id, &permit)) return false;
  Settle(permit, outcome, latency, now);
  return true;
}

void GateSet::Settle(const PermitLedger::Permit& permit, Outcome outcome,
                     absl::Duration latency, absl::Time now) {
  ++counters_->outcomes[static_cast<int>(outcome)];
  // The slot flag is from issue time; a cap removed since then holds nothing.
  if (permit.holds_slot && concurrency_) concurrency_->Release();
  if (breaker_) breaker_->Record(outcome, latency, permit.probe_round, now);
}

void GateSet::ExpireDue(absl::Time now) {
  PermitLedger::Permit permit;
  while (ledger_.PopExpired(now, &permit)) {
    Settle(permit, Outcome::kTimeout, now - permit.issued, now);
  }
}

void GateSet::Sweep(absl::Time now) {
  ExpireDue(now);
  if (breaker_) breaker_->State(now);
}

void GateSet::SetOverride(BreakerOverride override, absl::Time now,
                          const std::string& cause) {
  override_ = override;
  if (breaker_) breaker_->SetOverride(override, now, cause);
}

GateStatus GateSet::Status(absl::Time now) {
  ExpireDue(now);
  GateStatus s;
  if (bucket_) s.tokens_available = bucket_->Available(now);
  if (window_) {
    s.window_count = window_->Count(now);
    s.tokens_available = static_cast<double>(window_->Available(now));
  }
  if (concurrency_) s.in_flight = concurrency_->in_flight();
  s.live_permits = ledger_.live();
  if (breaker_) {
    s.has_breaker = true;
    s.breaker_state = breaker_->State(now);
    s.override_mode = breaker_->override_mode();
    s.open_until = breaker_->open_until();
    s.current_open_duration = breaker_->current_open_duration();
    s.trip_cause = breaker_->trip_cause();
    s.breaker_generation = breaker_->generation();
    s.probes_in_flight = breaker_->probes_in_flight();
    s.window = breaker_->WindowCounts(now);
  }
  return s;
}

void GateSet::OnTransition(BreakerState from, BreakerState to,
                           const std::string& cause, absl::Time at,
                           uint64_t generation, absl::Time open_until) {
  if (sink_ == nullptr) return;
  BreakerTransition t;
  t.dependency = dependency_;
  t.key = key_;
  t.from = from;
  t.to = to;
  t.cause = cause;
  t.at = at;
  t.generation = generation;
  t.open_until = open_until;
  sink_->OnBreakerTransition(t);
}

}  // namespace sluice::core
