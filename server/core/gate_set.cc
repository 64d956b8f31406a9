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

GateSet::GateSet(const PolicyConfig& policy, absl::Time now,
                 PermitLedger::Origin origin,
                 EventSink* sink, DecisionCounters* counters,
                 std::string dependency, std::string key)
    : sink_(sink),
      counters_(counters),
      dependency_(std::move(dependency)),
      key_(std::move(key)),
      ledger_(origin) {
  Reconfigure(policy, now);
}

void GateSet::Reconfigure(const PolicyConfig& policy, absl::Time now) {
  call_timeout_ = policy.call_timeout;
  permit_expiry_ = 2 * call_timeout_ + permit_grace_;
  rate_config_ = policy.rate_limit;
  cluster_rate_ = rate_config_ && rate_config_->scope == Scope::kCluster;
  max_in_flight_ = policy.concurrency ? policy.concurrency->max_in_flight : 0;
  cluster_concurrency_ =
      policy.concurrency && policy.concurrency->scope == Scope::kCluster;
  store_failure_ = policy.on_store_failure;
  ApplyLimits(now);

  if (policy.breaker) {
    if (breaker_) {
      breaker_->Reconfigure(*policy.breaker, now);
    } else {
      breaker_.emplace(*policy.breaker, now, this);
      if (override_ != BreakerOverride::kAuto) {
        breaker_->SetOverride(override_, now, "override carried over");
      }
      if (cluster_.enabled && cluster_.store_up) breaker_->SetProbeLeases(0);
    }
  } else {
    breaker_.reset();
  }
}

void GateSet::ApplyLimits(absl::Time now) {
  double rate_fraction = 1;
  double concurrency_fraction = 1;
  if (cluster_.enabled) {
    // Without a share of its own yet, a replica takes an even split.
    const double even = 1.0 / std::max<uint32_t>(1, cluster_.live_replicas);
    if (cluster_rate_) rate_fraction = rate_fraction_.value_or(even);
    if (cluster_concurrency_) {
      concurrency_fraction = concurrency_fraction_.value_or(even);
    }
  }

  const RateLimitConfig* rate = rate_config_ ? &*rate_config_ : nullptr;
  if (rate && rate->algorithm == RateAlgorithm::kTokenBucket) {
    const double refill = rate->rate * rate_fraction;
    // At least one whole token, or a small share could never admit a call.
    const double burst =
        std::max(rate->burst * rate_fraction, std::min(rate->burst, 1.0));
    if (bucket_) {
      bucket_->Reconfigure(refill, rate->per, burst, now);
    } else {
      bucket_.emplace(refill, rate->per, burst, now);
    }
  } else {
    bucket_.reset();
  }
  if (rate && rate->algorithm == RateAlgorithm::kSlidingWindow) {
    const auto limit = std::max<int64_t>(
        1, std::llround(std::floor(rate->rate) * rate_fraction));
    if (window_) {
      window_->Reconfigure(limit, rate->per, rate->buckets, now);
    } else {
      window_.emplace(limit, rate->per, rate->buckets);
    }
  } else {
    window_.reset();
  }

  if (max_in_flight_ > 0) {
    const auto max = static_cast<uint32_t>(
        std::max<long>(1, std::lround(max_in_flight_ * concurrency_fraction)));
    if (concurrency_) {
      concurrency_->SetMax(max);
    } else {
      concurrency_.emplace(max);
    }
  } else {
    concurrency_.reset();
  }
}

bool GateSet::ClusterGatesOpen() const {
  return cluster_.enabled && !cluster_.store_up &&
         store_failure_ == StoreFailureMode::kFailOpen;
}

bool GateSet::StoreRefuses() const {
  return cluster_.enabled && !cluster_.store_up &&
         store_failure_ == StoreFailureMode::kFailClosed &&
         (cluster_rate_ || cluster_concurrency_);
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
    out->permit_id = ledger_.Issue(now, now + permit_expiry_, false, 0,
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
  if (StoreRefuses()) {
    Refuse(policy, Reason::kStoreUnavailable, absl::Seconds(1), now, out);
    return;
  }
  tick_active_ = true;
  tick_asked_ += n;
  // 2. Rate. With the store down and FAIL_OPEN, a cluster-scope limit does
  // not limit.
  const bool rate_open = cluster_rate_ && ClusterGatesOpen();
  if (!rate_open && !TakeRate(n, now)) {
    Refuse(policy, Reason::kRateLimited, RateRetryAfter(n, now), now, out);
    return;
  }
  // 3. Concurrency. An open cluster-scope cap still counts the call.
  bool holds_slot = false;
  if (concurrency_) {
    if (cluster_concurrency_ && ClusterGatesOpen()) {
      concurrency_->ForceTake();
    } else if (!concurrency_->TryTake()) {
      ++tick_concurrency_refused_;
      if (!rate_open) RefundRate(n, now);
      Refuse(policy, Reason::kConcurrencyLimited,
             ConcurrencyRetryAfter(call_timeout_), now, out);
      return;
    }
    holds_slot = true;
    tick_peak_in_flight_ =
        std::max(tick_peak_in_flight_, concurrency_->in_flight());
  }
  // 4. Probe slot while HALF_OPEN.
  uint64_t probe_round = 0;
  if (out->breaker_state == BreakerState::kHalfOpen) {
    probe_round = breaker_->TryTakeProbe();
    if (probe_round == 0) {
      if (holds_slot) concurrency_->Release();
      if (!rate_open) RefundRate(n, now);
      Refuse(policy, Reason::kProbeLimit, ConcurrencyRetryAfter(call_timeout_),
             now, out);
      return;
    }
  }
  admitted_total_ += static_cast<uint64_t>(n);
  out->remaining = RemainingRate(now);
  PermitLedger::Permit evicted;
  out->permit_id = ledger_.Issue(now, now + permit_expiry_, holds_slot,
                                 probe_round, &evicted);
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
    s.effective_rate = static_cast<double>(window_->limit());
  }
  if (bucket_) {
    s.effective_rate = bucket_->rate_per_second() *
                       absl::ToDoubleSeconds(rate_config_->per);
  }
  if (cluster_rate_ && cluster_.enabled && rate_config_->rate > 0) {
    s.rate_fraction = s.effective_rate / rate_config_->rate;
  }
  if (concurrency_) {
    s.in_flight = concurrency_->in_flight();
    s.effective_max_in_flight = concurrency_->max();
  }
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

void GateSet::SetClusterState(const ClusterState& cluster, absl::Time now) {
  cluster_ = cluster;
  if (breaker_) {
    // Probe leases need the store; without it, probe as a single replica
    // would rather than never.
    if (cluster_.enabled && cluster_.store_up) {
      breaker_->SetProbeLeases(breaker_->probes_in_flight());
    } else {
      breaker_->UseLocalProbes();
    }
  }
  ApplyLimits(now);
}

bool GateSet::CollectTick(absl::Duration interval, KeyTick* out) {
  const uint32_t in_flight = concurrency_ ? concurrency_->in_flight() : 0;
  const bool active = tick_active_ || in_flight > 0;
  const double seconds = std::max(absl::ToDoubleSeconds(interval), 1e-3);
  out->key = key_;
  out->rate_demand = tick_asked_ / seconds;
  out->concurrency_demand =
      std::max(tick_peak_in_flight_, in_flight) +
      static_cast<double>(tick_concurrency_refused_);
  out->admitted_total = admitted_total_;
  tick_asked_ = 0;
  tick_peak_in_flight_ = in_flight;
  tick_concurrency_refused_ = 0;
  tick_active_ = false;
  return active;
}

void GateSet::ApplyShare(const KeyShare& share, absl::Time now) {
  rate_fraction_ = share.rate_fraction;
  concurrency_fraction_ = share.concurrency_fraction;
  ApplyLimits(now);
}

void GateSet::CollectBreaker(absl::Time now, DependencyTick* out) {
  if (!breaker_) return;
  out->has_breaker = true;
  out->outcomes = breaker_->totals();
  out->breaker = breaker_->Export(now);
  out->lease_cap = breaker_->config().half_open_probes;
  out->lease_ttl = permit_expiry_;
  const uint32_t refused = breaker_->TakeProbeRefusals();
  if (breaker_->State(now) == BreakerState::kHalfOpen) {
    out->leases_wanted =
        std::min(out->lease_cap,
                 breaker_->probes_in_flight() + (refused > 0 ? 1u : 0u));
  }
}

void GateSet::ApplyBreaker(const DependencyUpdate& update, absl::Time now) {
  if (!breaker_) return;
  if (update.breaker) breaker_->Adopt(*update.breaker, update.mine, now);
  breaker_->AddRemoteOutcomes(update.remote_outcomes, now);
  if (cluster_.enabled && cluster_.store_up) {
    breaker_->SetProbeLeases(update.leases_granted);
  }
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
