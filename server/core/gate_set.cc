// SPDX-License-Identifier: Apache-2.0
#include "server/core/gate_set.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>

#include "absl/numeric/int128.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace sluice::core {
namespace {

// What a concurrency refusal suggests as retry_after: slots free up as calls
// finish, which takes at most about one call timeout.
absl::Duration ConcurrencyRetryAfter(absl::Duration call_timeout) {
  return std::min(call_timeout, absl::Seconds(1));
}

}  // namespace

GateSet::GateSet(const PolicyConfig& policy, absl::Time now,
                 const GateContext* context, absl::string_view key)
    : context_(context), key_(key) {
  Reconfigure(policy, now);
}

void GateSet::Reconfigure(const PolicyConfig& policy, absl::Time now) {
  policy_ = &policy;
  ApplyLimits(now);

  if (policy.breaker) {
    if (breaker_) {
      breaker_->Reconfigure(*policy.breaker, now);
    } else {
      breaker_ = std::make_unique<CircuitBreaker>(*policy.breaker, now, this);
      if (override_ != BreakerOverride::kAuto) {
        breaker_->SetOverride(override_, now, "override carried over");
      }
      if (SharedBreaker()) breaker_->SetProbeLeases(0);
    }
  } else {
    breaker_.reset();
  }

  if (policy.adaptive_concurrency) {
    if (adaptive_) {
      adaptive_->Reconfigure(*policy.adaptive_concurrency, now);
    } else {
      adaptive_ = std::make_unique<AdaptiveLimit>(
          *policy.adaptive_concurrency, now, adaptive_epochs_ + 1);
    }
  } else if (adaptive_) {
    adaptive_epochs_ = adaptive_->epoch();
    adaptive_.reset();
  }
  if (policy.adaptive_throttle) {
    if (throttle_) {
      throttle_->Reconfigure(*policy.adaptive_throttle, now);
    } else {
      throttle_ = std::make_unique<AdaptiveThrottle>(*policy.adaptive_throttle);
    }
  } else {
    throttle_.reset();
    throttling_ = false;
  }
}

int64_t GateSet::ClusterUnits(int r, absl::Time now) const {
  const int64_t limit = share_->limit[r];
  const int64_t live = std::max<uint32_t>(1, cluster_.live_replicas);
  // LOCAL with the store down: the last known replica count splits it.
  if (!cluster_.store_up) return limit / live;
  const bool granted = share_->has_grant && now < share_->grant_until;
  const int64_t base = StaticShare(*policy_, limit, cluster_);
  return granted ? std::max(base, GrantUnits(r)) : base;
}

int64_t GateSet::StaticShare(const PolicyConfig& policy, int64_t limit,
                             const ClusterState& cluster) {
  // A per_key key keeps a static share on every process, which leaves room
  // for one process joining before the others hear of it; a grant for a
  // hot key comes on top. A new process starts with its grants only, and
  // takes static shares once the sync loop says that every grant the store
  // issued before it counted this process has ended.
  if (!policy.per_key || !cluster.enabled || !cluster.store_up ||
      !cluster.static_shares) {
    return 0;
  }
  const int64_t live = std::max<uint32_t>(1, cluster.live_replicas);
  return limit / (live + 1);
}

Units GateSet::ClusterLimit(const PolicyConfig& policy,
                            const ClusterState& cluster) {
  Units limit{};
  if (!cluster.enabled) return limit;
  const RateLimitConfig* rate =
      policy.rate_limit ? &*policy.rate_limit : nullptr;
  if (rate && rate->scope == Scope::kCluster) {
    limit[kRateUnits] = static_cast<int64_t>(std::floor(
        rate->algorithm == RateAlgorithm::kTokenBucket ? rate->burst
                                                       : rate->rate));
  }
  if (policy.concurrency && policy.concurrency->scope == Scope::kCluster) {
    limit[kSlotUnits] = policy.concurrency->max_in_flight;
  }
  return limit;
}

Units GateSet::StaticUnits(const PolicyConfig& policy,
                           const ClusterState& cluster) {
  Units out = ClusterLimit(policy, cluster);
  for (int r = 0; r < kClusterResources; ++r) {
    out[r] = StaticShare(policy, out[r], cluster);
  }
  return out;
}

int64_t GateSet::GrantUnits(int r) const {
  const int64_t units = share_->grant[r];
  const int64_t limit = share_->limit[r];
  const int64_t from = share_->grant_limit[r];
  if (from <= limit || units <= 0) return std::min(units, limit);
  return static_cast<int64_t>(absl::int128(units) * limit / from);
}

void GateSet::ApplyLimits(absl::Time now) {
  const RateLimitConfig* rate = rate_config();
  if (cluster_.enabled && (cluster_rate() || cluster_concurrency())) {
    if (!share_) share_ = std::make_unique<ClusterShare>();
  } else {
    share_.reset();
  }
  const Units cluster_limit = ClusterLimit(*policy_, cluster_);
  if (share_) share_->limit = cluster_limit;

  if (rate && rate->algorithm == RateAlgorithm::kTokenBucket) {
    double refill = rate->rate;
    double burst = rate->burst;
    if (cluster_limit[kRateUnits] > 0) {
      // The refill rate follows the capacity granted, so whole tokens of
      // capacity carry their part of the rate and both sums stay within
      // the policy.
      const int64_t units = ClusterUnits(kRateUnits, now);
      burst = static_cast<double>(units);
      refill = rate->rate * burst / cluster_limit[kRateUnits];
    }
    if (bucket_) {
      bucket_->Reconfigure(refill, rate->per, burst, now);
    } else {
      bucket_.emplace(refill, rate->per, burst, now);
    }
  } else {
    bucket_.reset();
  }
  if (rate && rate->algorithm == RateAlgorithm::kSlidingWindow) {
    const int64_t limit = cluster_limit[kRateUnits] > 0
                              ? ClusterUnits(kRateUnits, now)
                              : std::llround(std::floor(rate->rate));
    if (window_) {
      window_->Reconfigure(limit, rate->per, rate->buckets, now);
    } else {
      window_ = std::make_unique<SlidingWindow>(limit, rate->per,
                                                rate->buckets);
    }
  } else {
    window_.reset();
  }

  if (max_in_flight() > 0) {
    const auto max = static_cast<uint32_t>(
        cluster_limit[kSlotUnits] > 0 ? ClusterUnits(kSlotUnits, now)
                                       : max_in_flight());
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
         policy_->on_store_failure == StoreFailureMode::kFailOpen;
}

bool GateSet::StoreRefuses() const {
  return cluster_.enabled && !cluster_.store_up &&
         policy_->on_store_failure == StoreFailureMode::kFailClosed &&
         (cluster_rate() || cluster_concurrency());
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
  absl::Duration wait = absl::ZeroDuration();
  if (bucket_) wait = bucket_->TimeUntil(permits, now);
  if (window_) wait = window_->TimeUntil(static_cast<int64_t>(permits), now);
  // A cluster grant too small for this call may grow at the next tick.
  if (share_ && share_->limit[kRateUnits] > 0) {
    wait = std::min(wait, absl::Seconds(1));
  }
  return wait;
}

Admission GateSet::Refuse(const PolicyConfig& policy, Reason reason,
                          absl::Duration retry_after, absl::Time now,
                          Decision* out) {
  out->remaining = RemainingRate(now);
  if (policy.shadow) {
    // Counted as a refusal by the owner, but the call goes ahead. It holds no
    // slot or probe, yet its outcome still feeds the breaker.
    out->verdict = Verdict::kAllow;
    out->reason = Reason::kShadow;
    Admission shadow;
    shadow.admitted = true;
    return shadow;
  }
  out->reason = reason;
  out->retry_after = retry_after;
  if (policy.fallback.AppliesTo(reason)) {
    out->verdict = Verdict::kDegrade;
    out->http_status = 0;
    return Admission{};
  }
  out->verdict = Verdict::kReject;
  out->http_status = RefusalHttpStatus(reason);
  return Admission{};
}

void GateSet::StartAllow(const PolicyConfig& policy, Decision* out) {
  out->verdict = Verdict::kAllow;
  out->reason = Reason::kNone;
  out->permit_id = PermitId{};
  out->call_timeout = policy.call_timeout;
  out->retry_after = absl::ZeroDuration();
  out->http_status = 0;
  out->policy_version = policy.version;
  out->breaker_state = BreakerState::kClosed;
  out->remaining = -1;
}

Admission GateSet::Acquire(const PolicyConfig& policy, uint32_t permits,
                           absl::Time now, Decision* out) {
  if (share_ && share_->has_grant && now >= share_->grant_until) {
    // The store has not renewed the grant in time; it may be someone
    // else's by now.
    share_->has_grant = false;
    ApplyLimits(now);
  }
  StartAllow(policy, out);
  out->breaker_state = breaker_ ? breaker_->State(now) : BreakerState::kClosed;
  const double n = permits == 0 ? 1 : permits;

  // 1. Breaker, without side effects: no tokens for calls never made.
  if (breaker_ && !breaker_->Permits(now)) {
    breaker_->NoteCallerWaiting();
    return Refuse(policy, Reason::kCircuitOpen, breaker_->RetryAfter(now),
                  now, out);
  }
  if (StoreRefuses()) {
    return Refuse(policy, Reason::kStoreUnavailable, absl::Seconds(1), now,
                  out);
  }
  if (share_) share_->tick_asked += n;
  // 2. Rate. With the store down and FAIL_OPEN, a cluster-scope limit does
  // not limit.
  const bool rate_open = cluster_rate() && ClusterGatesOpen();
  if (!rate_open && !TakeRate(n, now)) {
    if (share_ && share_->limit[kRateUnits] > 0) RefusedByCluster();
    return Refuse(policy, Reason::kRateLimited, RateRetryAfter(n, now), now,
                  out);
  }
  // 3. Concurrency. An open cluster-scope cap still counts the call.
  bool holds_slot = false;
  if (concurrency_) {
    if (cluster_concurrency() && ClusterGatesOpen()) {
      concurrency_->ForceTake();
    } else if (!concurrency_->TryTake()) {
      if (share_) {
        ++share_->tick_concurrency_refused;
        if (share_->limit[kSlotUnits] > 0) RefusedByCluster();
      }
      if (!rate_open) RefundRate(n, now);
      return Refuse(policy, Reason::kConcurrencyLimited,
                    ConcurrencyRetryAfter(policy.call_timeout), now, out);
    }
    holds_slot = true;
    NotePeakInFlight();
  }
  // Gives back what the gates above took, for a call refused below.
  const auto give_back = [&](uint32_t adaptive_epoch) {
    if (adaptive_epoch != 0) {
      // Not judged (the call never ran), but a window may be due.
      std::string cause;
      const bool moved = adaptive_->Release(adaptive_epoch, false,
                                            absl::ZeroDuration(), now, &cause);
      LimitMoved(moved, cause, now);
    }
    if (holds_slot) concurrency_->Release();
    if (!rate_open) RefundRate(n, now);
  };
  // 4. Adaptive in-flight limit.
  uint32_t adaptive_epoch = 0;
  if (adaptive_) {
    adaptive_epoch = adaptive_->TryTake(now);
    if (adaptive_epoch == 0) {
      give_back(0);
      return Refuse(policy, Reason::kAdaptiveThrottled,
                    ConcurrencyRetryAfter(policy.call_timeout), now, out);
    }
  }
  // 5. Adaptive throttle (a call it refuses counts as a request).
  if (throttle_) {
    double p = 0;
    const bool refuse = throttle_->Refuse(now, &p);
    ThrottleAt(p, now);
    // A shadow policy's refusal goes ahead and counts by its outcome.
    if (refuse && !policy.shadow) throttle_->Refused(now);
    if (refuse) {
      give_back(adaptive_epoch);
      return Refuse(policy, Reason::kAdaptiveThrottled,
                    ConcurrencyRetryAfter(policy.call_timeout), now, out);
    }
  }
  // 6. Probe slot while HALF_OPEN.
  uint64_t probe_round = 0;
  if (out->breaker_state == BreakerState::kHalfOpen) {
    probe_round = breaker_->TryTakeProbe();
    if (probe_round == 0) {
      give_back(adaptive_epoch);
      return Refuse(policy, Reason::kProbeLimit,
                    ConcurrencyRetryAfter(policy.call_timeout), now, out);
    }
  }
  if (share_) share_->admitted_total += static_cast<uint64_t>(n);
  out->remaining = RemainingRate(now);
  Admission admission;
  admission.admitted = true;
  admission.holds_slot = holds_slot;
  admission.probe_round = probe_round;
  admission.adaptive_epoch = adaptive_epoch;
  return admission;
}

absl::Time GateSet::SliceableUntil(absl::Time now, std::string* why) {
  const char* reason = nullptr;
  if (policy_->shadow) {
    reason = "a shadow policy decides each call";
  } else if (window_) {
    reason = "a sliding window decides each call";
  } else if (adaptive_ || throttle_) {
    reason = "the adaptive gates decide each call";
  }
  // A cluster-scope limit lends from this replica's share of it: while
  // the store is up, the grant it holds and for no longer than the grant
  // (the tick counts what is out on loan as in use: ClientLeases::
  // AddUsage); with the store down, the local split of on_store_failure
  // LOCAL. FAIL_OPEN and FAIL_CLOSED decide each call here until the store
  // is back.
  absl::Time share_until = absl::InfiniteFuture();
  if (reason == nullptr && share_ && has_cluster_limit()) {
    if (!cluster_.store_up &&
        policy_->on_store_failure != StoreFailureMode::kLocal) {
      reason = "the cluster store is down: on_store_failure decides each call";
    } else if (cluster_.store_up && share_->has_grant) {
      share_until = share_->grant_until;
    } else if (cluster_.store_up && !policy_->per_key) {
      // Without a grant only a per_key key has a share here: its static one.
      share_until = absl::InfinitePast();
    }
    if (share_until <= now) reason = "no cluster grant is held here";
  }
  absl::Time until = absl::InfinitePast();
  if (reason == nullptr && breaker_ != nullptr) {
    until = override_ == BreakerOverride::kAuto
                ? breaker_->SuccessesCannotTripUntil(now)
                : absl::InfinitePast();
  } else if (reason == nullptr) {
    until = override_ == BreakerOverride::kAuto ? absl::InfiniteFuture()
                                                : absl::InfinitePast();
  }
  until = std::min(until, share_until);
  if (why != nullptr && until <= now) {
    if (reason != nullptr) {
      *why = reason;
    } else if (const BreakerState state = breaker_state(now);
               state != BreakerState::kClosed) {
      *why = absl::StrCat("the breaker is ", BreakerStateName(state));
    } else if (override_ != BreakerOverride::kAuto) {
      *why = "an operator's breaker override is in force";
    } else if (policy_->breaker && policy_->breaker->latency_baseline) {
      *why = "the breaker's latency_baseline rule judges each call";
    } else {
      *why = "the breaker may trip on the next call";
    }
  }
  return until;
}

void GateSet::Lend(double least, double tokens, uint32_t slots,
                   absl::Time now, double* lent_tokens,
                   uint32_t* lent_slots) {
  *lent_tokens = std::numeric_limits<double>::infinity();
  *lent_slots = 0;
  if (bucket_) {
    *lent_tokens = bucket_->Lend(least, tokens, now);
    if (*lent_tokens < least) return;
  }
  if (concurrency_) {
    *lent_slots = concurrency_->TakeUpTo(slots);
    NotePeakInFlight();
  }
}

void GateSet::NotePeakInFlight() {
  if (share_) {
    share_->tick_peak_in_flight =
        std::max(share_->tick_peak_in_flight, concurrency_->in_flight());
  }
}

void GateSet::CountLent(double asked, double admitted) {
  if (!share_) return;
  share_->tick_asked += asked;
  share_->admitted_total += static_cast<uint64_t>(admitted);
}

void GateSet::Repay(double unused_tokens, double spent,
                    uint32_t unused_slots) {
  if (bucket_) bucket_->Repay(unused_tokens, spent);
  if (concurrency_) concurrency_->Release(unused_slots);
}

void GateSet::Settle(const Admission& admission, Outcome outcome,
                     absl::Duration latency, bool reported, absl::Time now) {
  ++context_->counters->outcomes[static_cast<int>(outcome)];
  // The slot flag is from issue time; a cap removed since then holds nothing.
  if (admission.holds_slot && concurrency_) concurrency_->Release();
  if (breaker_) {
    breaker_->Record(outcome, latency, admission.probe_round, now);
  }
  // The epoch is from issue time; an adaptive limit removed since holds
  // nothing (and one added since was not taken).
  if (admission.adaptive_epoch != 0 && adaptive_) {
    std::string cause;
    const bool moved =
        adaptive_->Release(admission.adaptive_epoch,
                           reported && outcome != Outcome::kCancelled, latency,
                           now, &cause);
    LimitMoved(moved, cause, now);
  }
  if (throttle_) throttle_->Record(outcome, now);
}

void GateSet::Sweep(absl::Time now) {
  if (breaker_) breaker_->State(now);
  if (adaptive_) {
    std::string cause;
    const bool moved = adaptive_->Tick(now, &cause);
    LimitMoved(moved, cause, now);
  }
  if (throttle_) ThrottleAt(throttle_->Probability(now), now);
}

absl::Time GateSet::NextSweep() const {
  absl::Time next = absl::InfiniteFuture();
  if (breaker_) next = std::min(next, breaker_->NextMove());
  if (adaptive_) next = std::min(next, adaptive_->NextTick());
  // A throttle with requests in its window (or throttling still) may start
  // or stop as its buckets age out: it is looked at every sweep. An empty
  // window stays empty without calls, and its probability 0.
  if (throttle_ && (throttling_ || !throttle_->empty())) {
    next = absl::InfinitePast();
  }
  return next;
}

void GateSet::LimitMoved(bool moved, const std::string& cause,
                         absl::Time now) {
  if (!moved) return;
  Notify(AdaptiveChange::Kind::kLimit, adaptive_->previous_limit(),
         adaptive_->limit(), cause, now);
}

void GateSet::ThrottleAt(double p, absl::Time now) {
  // Started at the first call judged with p > 0; stopped only once p has
  // stayed 0 for a whole window, so a dependency hovering at 1/k accepts
  // does not flap (each event is a log line and a WatchEvents message).
  if (p > 0) {
    if (throttling_) return;
  } else if (!throttling_ ||
             now - throttle_->last_positive_at() <
                 policy_->adaptive_throttle->window) {
    return;
  }
  throttling_ = p > 0;
  const ThrottleStatus s = throttle_->Status(now);
  if (throttling_) {
    Notify(AdaptiveChange::Kind::kThrottleStarted, 0, p,
           absl::StrFormat("%d accepts of %d requests over %s: below 1/%.2g",
                           s.accepts, s.requests,
                           absl::FormatDuration(policy_->adaptive_throttle->window),
                           policy_->adaptive_throttle->k),
           now);
  } else {
    Notify(AdaptiveChange::Kind::kThrottleStopped,
           throttle_->last_positive(), 0,
           absl::StrFormat("%d accepts of %d requests over %s", s.accepts,
                           s.requests,
                           absl::FormatDuration(policy_->adaptive_throttle->window)),
           now);
  }
}

void GateSet::Notify(AdaptiveChange::Kind kind, double from, double to,
                     std::string cause, absl::Time now) {
  if (context_->sink == nullptr) return;
  AdaptiveChange c;
  c.dependency = context_->dependency;
  c.key = std::string(key_);
  c.kind = kind;
  c.from = from;
  c.to = to;
  c.cause = std::move(cause);
  c.at = now;
  context_->sink->OnAdaptiveChange(c);
}

void GateSet::SetOverride(BreakerOverride override, absl::Time now,
                          const std::string& cause) {
  override_ = override;
  if (breaker_) breaker_->SetOverride(override, now, cause);
}

GateStatus GateSet::Status(absl::Time now) {
  GateStatus s;
  if (bucket_) s.tokens_available = bucket_->Available(now);
  if (window_) {
    s.window_count = window_->Count(now);
    s.tokens_available = static_cast<double>(window_->Available(now));
    s.effective_rate = static_cast<double>(window_->limit());
  }
  if (bucket_) {
    s.effective_rate = bucket_->rate_per_second() *
                       absl::ToDoubleSeconds(rate_config()->per);
  }
  if (cluster_rate() && cluster_.enabled && rate_config()->rate > 0) {
    s.rate_fraction = s.effective_rate / rate_config()->rate;
  }
  s.has_grant = share_ && share_->has_grant && now < share_->grant_until;
  if (s.has_grant) {
    for (int r = 0; r < kClusterResources; ++r) s.granted[r] = GrantUnits(r);
  }
  if (concurrency_) {
    s.in_flight = concurrency_->in_flight();
    s.effective_max_in_flight = concurrency_->max();
  }
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
    if (breaker_->baseline() != nullptr) {
      s.baseline = breaker_->baseline()->Status(now);
    }
  }
  if (adaptive_) s.adaptive_limit = adaptive_->Status();
  if (throttle_) s.throttle = throttle_->Status(now);
  return s;
}

bool GateSet::SharedBreaker() const {
  // Per-key breakers stay local to each replica; only the dependency's
  // breaker is shared, and its probes are leased cluster-wide.
  return cluster_.enabled && cluster_.store_up && !policy_->per_key;
}

void GateSet::SetClusterState(const ClusterState& cluster, absl::Time now) {
  cluster_ = cluster;
  if (breaker_) {
    // Probe leases need the store; without it, probe as a single replica
    // would rather than never.
    if (SharedBreaker()) {
      breaker_->SetProbeLeases(breaker_->probes_in_flight());
    } else {
      breaker_->UseLocalProbes();
    }
  }
  ApplyLimits(now);
}

void GateSet::CollectTick(absl::Duration interval, absl::Time now,
                          KeyTick* out) {
  const uint32_t in_flight = concurrency_ ? concurrency_->in_flight() : 0;
  const double seconds = std::max(absl::ToDoubleSeconds(interval), 1e-3);
  if (!share_) return;
  ClusterShare& share = *share_;
  const double asked_per_second = share.tick_asked / seconds;
  out->key = std::string(key_);
  out->limit = share.limit;
  out->demand = {};
  out->usage = {};
  out->usage_left = {};
  if (share.limit[kRateUnits] > 0) {
    const RateLimitConfig& rate = *rate_config();
    const double per = absl::ToDoubleSeconds(rate.per);
    if (rate.algorithm == RateAlgorithm::kTokenBucket) {
      // Capacity needed for the asked rate: rate follows capacity.
      out->demand[kRateUnits] =
          asked_per_second * per / rate.rate * share.limit[kRateUnits];
    } else {
      out->demand[kRateUnits] = asked_per_second * per;
      out->usage[kRateUnits] = window_->Count(now);
      out->usage_left[kRateUnits] = rate.per;
    }
  }
  if (share.limit[kSlotUnits] > 0) {
    out->demand[kSlotUnits] =
        std::max(share.tick_peak_in_flight, in_flight) +
        static_cast<double>(share.tick_concurrency_refused);
    out->usage[kSlotUnits] = in_flight;
    out->usage_left[kSlotUnits] = permit_expiry();
  }
  out->applied = {};
  out->applied_left = absl::ZeroDuration();
  if (cluster_.store_up && has_cluster_limit()) {
    for (int r = 0; r < kClusterResources; ++r) {
      if (share.limit[r] > 0) out->applied[r] = ClusterUnits(r, now);
    }
    out->applied_left = share.has_grant && now < share.grant_until
                            ? share.grant_until - now
                            : absl::InfiniteDuration();
  }
  out->admitted_total = share.admitted_total;
  share.tick_asked = 0;
  share.tick_peak_in_flight = in_flight;
  share.tick_concurrency_refused = 0;
  share.refused_by_cluster = false;
  share.pushed_demand =
      std::any_of(out->demand.begin(), out->demand.end(),
                  [](double d) { return d > 0; });
}

void GateSet::RefusedByCluster() {
  const bool first = !share_->refused_by_cluster;
  share_->refused_by_cluster = true;
  // A key that pushed demand last tick is known to the store already; one
  // refused again this tick has been signalled already.
  if (!first || share_->pushed_demand || !cluster_.store_up ||
      context_->sink == nullptr || context_->demand_signalled == nullptr ||
      context_->demand_signalled->exchange(true, std::memory_order_relaxed)) {
    return;
  }
  context_->sink->OnClusterDemand(context_->dependency, std::string(key_));
}

void GateSet::ApplyGrant(const KeyGrant& grant, absl::Time now) {
  if (!share_) return;  // the policy lost its cluster scope meanwhile
  // A grant split while the policy had the other per_key setting belongs to
  // gates this one is not (a per-key grant is not the dependency's share).
  share_->has_grant = grant.granted && grant.per_key == policy_->per_key;
  if (share_->has_grant) {
    share_->grant = grant.units;
    share_->grant_limit = grant.limit;
  }
  share_->grant_until = grant.valid_until;
  ApplyLimits(now);
}

void GateSet::CollectBreaker(absl::Time now, DependencyTick* out) {
  if (!breaker_) return;
  out->has_breaker = true;
  out->outcomes = breaker_->totals();
  out->breaker = breaker_->Export(now);
  out->lease_cap = breaker_->config().half_open_probes;
  out->lease_ttl = permit_expiry();
  const uint32_t refused = breaker_->TakeProbeRefusals();
  const BreakerState state = breaker_->State(now);
  if (state == BreakerState::kHalfOpen) {
    out->leases_wanted =
        std::min(out->lease_cap,
                 breaker_->probes_in_flight() + (refused > 0 ? 1u : 0u));
  } else if (state == BreakerState::kOpen && breaker_->callers_waiting()) {
    // Ahead of the open time's end: a lease for the generation now stored
    // is good for its HALF_OPEN round, so the first call after it probes
    // at once instead of being refused until a later tick brings a lease
    // (ticks keep a minimum gap, and one often falls right at the end of
    // the open time). Only a replica whose callers wait asks: a
    // lease held where nobody calls would stall the probes.
    out->leases_wanted = std::min(out->lease_cap, 1u);
  }
}

void GateSet::ApplyBreaker(const DependencyUpdate& update, absl::Time now) {
  if (!breaker_) return;
  if (update.breaker) {
    const BreakerRecord& stored = *update.breaker;
    if (update.mine) {
      breaker_->Published(stored.generation);
    } else if (stored.generation != breaker_->base_generation() ||
               update.rejected) {
      // Another replica moved the shared breaker, or ours lost the
      // compare-and-set: the stored state wins.
      breaker_->Adopt(stored, now);
    }
  }
  breaker_->AddRemoteOutcomes(update.remote_outcomes, now);
  if (SharedBreaker()) breaker_->SetProbeLeases(update.leases_granted);
}

void GateSet::CollectWarm(DependencyTick* out) const {
  out->has_warm =
      adaptive_ != nullptr || (breaker_ && breaker_->baseline() != nullptr);
  // Only what was learned: a limit that judged nothing knows nothing.
  if (adaptive_ && adaptive_->judged()) out->adaptive = adaptive_->Export();
  if (breaker_ && breaker_->baseline() != nullptr &&
      breaker_->baseline()->Export().windows > 0) {
    out->baseline = breaker_->baseline()->Export();
  }
}

void GateSet::ApplyWarm(const DependencyUpdate& update, absl::Time now) {
  if (adaptive_ && !adaptive_->judged() && update.cluster_adaptive) {
    const uint32_t before = adaptive_->limit();
    if (adaptive_->Import(*update.cluster_adaptive, now) &&
        adaptive_->limit() != before) {
      Notify(AdaptiveChange::Kind::kLimit, before, adaptive_->limit(),
             "started from the other replicas' steady limit", now);
    }
  }
  if (breaker_ && breaker_->baseline() != nullptr && update.cluster_baseline &&
      breaker_->baseline()->Export().windows == 0) {
    breaker_->baseline()->Import(*update.cluster_baseline);
  }
}

KeyWarmState GateSet::ExportWarm(absl::Time now) {
  KeyWarmState state;
  state.key = std::string(key_);
  if (adaptive_ && adaptive_->judged()) state.limit = adaptive_->Export();
  if (breaker_) {
    if (breaker_->baseline() != nullptr &&
        breaker_->baseline()->Export().windows > 0) {
      state.baseline = breaker_->baseline()->Export();
    }
    const BreakerState b = breaker_->State(now);
    if (b == BreakerState::kOpen || b == BreakerState::kHalfOpen) {
      // A HALF_OPEN breaker restarts OPEN with its time over, so it goes
      // straight back to probing.
      state.breaker = breaker_->Export(now);
    }
  }
  return state;
}

bool GateSet::ImportWarm(const KeyWarmState& state, absl::Time now) {
  bool valid = true;
  if (adaptive_ && state.limit) {
    const uint32_t before = adaptive_->limit();
    if (!adaptive_->Import(*state.limit, now)) {
      valid = false;
    } else if (adaptive_->limit() != before) {
      Notify(AdaptiveChange::Kind::kLimit, before, adaptive_->limit(),
             "started from the saved steady limit", now);
    }
  }
  if (breaker_ && breaker_->baseline() != nullptr && state.baseline &&
      !breaker_->baseline()->Import(*state.baseline)) {
    valid = false;
  }
  if (breaker_ && state.breaker &&
      state.breaker->state == BreakerState::kOpen &&
      breaker_->override_mode() == BreakerOverride::kAuto) {
    BreakerRecord record = *state.breaker;
    // Keeps the generation moving forward from this breaker's own.
    record.generation = breaker_->generation() + 1;
    // No longer than the policy allows now: a file written under a wrong
    // clock (or by hand) must not hold the breaker open for good.
    const BreakerConfig& config = breaker_->config();
    record.open_duration =
        std::clamp(record.open_duration, config.open_duration,
                   config.max_open_duration);
    record.open_until =
        std::min(record.open_until, now + config.max_open_duration);
    breaker_->Adopt(record, now, "saved before a restart");
  }
  return valid;
}

void GateSet::OnTransition(BreakerState from, BreakerState to,
                           const std::string& cause, absl::Time at,
                           uint64_t generation, absl::Time open_until) {
  if (context_->sink == nullptr) return;
  BreakerTransition t;
  t.dependency = context_->dependency;
  t.key = std::string(key_);
  t.from = from;
  t.to = to;
  t.cause = cause;
  t.at = at;
  t.generation = generation;
  t.open_until = open_until;
  context_->sink->OnBreakerTransition(t);
}

}  // namespace sluice::core
