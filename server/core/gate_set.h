#ifndef SLUICE_SERVER_CORE_GATE_SET_H_
#define SLUICE_SERVER_CORE_GATE_SET_H_

#include <array>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/time/time.h"
#include "server/core/circuit_breaker.h"
#include "server/core/concurrency_limiter.h"
#include "server/core/decision.h"
#include "server/core/events.h"
#include "server/core/permit_ledger.h"
#include "server/core/policy_config.h"
#include "server/core/sliding_window.h"
#include "server/core/tick.h"
#include "server/core/token_bucket.h"

namespace sluice::core {

// Decisions and outcomes counted for one dependency since its policy was
// first installed. acquired == allowed + rejected + degraded always holds.
struct DecisionCounters {
  uint64_t acquired = 0;
  uint64_t allowed = 0;
  uint64_t rejected = 0;
  uint64_t degraded = 0;
  // Calls a shadow policy allowed that it would have refused.
  uint64_t shadow_refused = 0;
  // [verdict][reason] of every answer given.
  std::array<std::array<uint64_t, kReasonCount>, 4> by_verdict_reason{};
  // Reported outcomes, indexed by Outcome (expired permits count as
  // kTimeout).
  std::array<uint64_t, 5> outcomes{};
  // Reports for permits that were unknown, already settled or expired.
  uint64_t stale_reports = 0;
};

// How the cluster store looks to the gates. Standalone unless `enabled`.
struct ClusterState {
  bool enabled = false;
  // False until the first successful sync, and while the store is
  // unreachable.
  bool store_up = false;
  // Live replicas at the last successful sync (at least 1).
  uint32_t live_replicas = 1;
};

// Live state of the gates of one policy: for one key of a per_key policy, or
// for the whole dependency otherwise.
struct GateStatus {
  double tokens_available = -1;  // -1 without a rate limit
  int64_t window_count = 0;      // sliding window only
  // This replica's fraction of a cluster-scope rate limit (1 otherwise).
  double rate_fraction = 1;
  // Cluster mode: whether this key holds a grant from the store, and the
  // units granted (see ClusterResource); a per_key key without one uses its
  // static share.
  bool has_grant = false;
  Units granted{};
  // The refill rate (permits per `per`) or window limit in force here.
  double effective_rate = 0;
  uint32_t effective_max_in_flight = 0;
  uint32_t in_flight = 0;
  size_t live_permits = 0;
  bool has_breaker = false;
  BreakerState breaker_state = BreakerState::kClosed;
  BreakerOverride override_mode = BreakerOverride::kAuto;
  absl::Time open_until = absl::InfinitePast();
  absl::Duration current_open_duration = absl::ZeroDuration();
  std::string trip_cause;
  uint64_t breaker_generation = 0;
  uint32_t probes_in_flight = 0;
  OutcomeWindow window;
};

// The three gates (rate, concurrency, breaker) and the permit ledger of one
// dependency or key, applied in this order: breaker peek,
// rate, concurrency, probe slot, refunding tokens when a later gate refuses.
// Not thread-safe; the owner (Dependency) locks.
class GateSet final : public BreakerListener {
 public:
  // `sink` may be null. `dependency` and `key` name the transitions.
  // Settled outcomes are counted into `counters`, which must outlive this.
  GateSet(const PolicyConfig& policy, absl::Time now,
          PermitLedger::Origin origin,
          EventSink* sink, DecisionCounters* counters, std::string dependency,
          std::string key);

  // Decides one call under `policy` (the one this set was built or last
  // reconfigured with). Fills every field of `out` but policy.
  void Acquire(const PolicyConfig& policy, uint32_t permits, absl::Time now,
               Decision* out);

  // Settles permit `permit_id`. False, changing nothing, for an unknown,
  // repeated or expired permit.
  bool Report(uint64_t permit_id, Outcome outcome, absl::Duration latency,
              absl::Time now);

  // Extra time before an unreported permit counts as a TIMEOUT (see
  // Engine::Options::permit_grace).
  void set_permit_grace(absl::Duration grace) {
    permit_grace_ = grace;
    permit_expiry_ = 2 * call_timeout_ + permit_grace_;
  }

  // kClosed when there is no breaker.
  BreakerState breaker_state(absl::Time now) {
    return breaker_ ? breaker_->State(now) : BreakerState::kClosed;
  }

  // Expires permits past their deadline (as TIMEOUT) and lets an OPEN
  // breaker become HALF_OPEN when its time is over.
  void Sweep(absl::Time now);

  // Applies a changed policy, keeping tokens, window counts, in-flight calls
  // and breaker state wherever the new policy still has that gate.
  void Reconfigure(const PolicyConfig& policy, absl::Time now);

  void SetOverride(BreakerOverride override, absl::Time now,
                   const std::string& cause);

  GateStatus Status(absl::Time now);

  // Cluster mode: the store's state, applied to the cluster-scope gates.
  void SetClusterState(const ClusterState& cluster, absl::Time now);
  // Fills `out` with the demand of the tick that ends now and starts the
  // next one.
  void CollectTick(absl::Duration interval, absl::Time now, KeyTick* out);
  // Takes this replica's grant of the cluster-scope limits.
  void ApplyGrant(const KeyGrant& grant, absl::Time now);
  // A per_key key wants to be pushed with the next tick: it holds a grant,
  // or a cluster-scope gate refused it. True once until Dequeued().
  bool TakeSyncRequest() {
    if (queued_ || !(has_grant_ || refused_by_cluster_)) return false;
    queued_ = true;
    return true;
  }
  void Dequeued() { queued_ = false; }
  bool has_cluster_limit() const {
    return cluster_limit_[kRateUnits] > 0 || cluster_limit_[kSlotUnits] > 0;
  }
  // Breaker side of a tick (no-ops without a breaker).
  void CollectBreaker(absl::Time now, DependencyTick* out);
  void ApplyBreaker(const DependencyUpdate& update, absl::Time now);

  // BreakerListener:
  void OnTransition(BreakerState from, BreakerState to,
                    const std::string& cause, absl::Time at,
                    uint64_t generation, absl::Time open_until) override;

 private:
  // A refusal for `reason`: DEGRADE when the fallback covers it, else REJECT
  // with the suggested HTTP status; a shadow policy allows (reason SHADOW).
  void Refuse(const PolicyConfig& policy, Reason reason,
              absl::Duration retry_after, absl::Time now, Decision* out);
  bool TakeRate(double permits, absl::Time now);
  void RefundRate(double permits, absl::Time now);
  int64_t RemainingRate(absl::Time now);
  absl::Duration RateRetryAfter(double permits, absl::Time now);
  // Releases what a permit holds and feeds its outcome to the breaker.
  void Settle(const PermitLedger::Permit& permit, Outcome outcome,
              absl::Duration latency, absl::Time now);
  void ExpireDue(absl::Time now);
  // Sets the limiters from the policy and, for cluster-scope gates, from
  // this replica's grant.
  void ApplyLimits(absl::Time now);
  // Units of cluster resource `r` this replica may use while the store is
  // up (or, LOCAL, down).
  int64_t ClusterUnits(int r, absl::Time now) const;
  // Whether this breaker is the cluster's shared one (probe leases).
  bool SharedBreaker() const;
  // Whether cluster-scope limits are skipped (store down, FAIL_OPEN).
  bool ClusterGatesOpen() const;
  // Whether calls are refused for want of the store (FAIL_CLOSED).
  bool StoreRefuses() const;

  EventSink* const sink_;
  DecisionCounters* const counters_;
  const std::string dependency_;
  const std::string key_;

  absl::Duration call_timeout_;
  // An unreported permit counts as a TIMEOUT after this:
  // 2 x call_timeout + permit_grace_.
  absl::Duration permit_expiry_;
  absl::Duration permit_grace_ = absl::ZeroDuration();
  std::optional<TokenBucket> bucket_;
  std::optional<SlidingWindow> window_;
  std::optional<ConcurrencyLimiter> concurrency_;
  std::optional<CircuitBreaker> breaker_;
  // Held so that a breaker added by a later policy edit starts overridden.
  BreakerOverride override_ = BreakerOverride::kAuto;
  PermitLedger ledger_;

  // The policy's limits as written, before any cluster share.
  std::optional<RateLimitConfig> rate_config_;
  uint32_t max_in_flight_ = 0;
  bool cluster_rate_ = false;
  bool cluster_concurrency_ = false;
  StoreFailureMode store_failure_ = StoreFailureMode::kFailOpen;
  ClusterState cluster_;
  bool per_key_ = false;
  // The policy's cluster-scope limits in whole units (0: not cluster-scope).
  Units cluster_limit_{};
  // The store's grant; valid until grant_until_ on this replica's clock.
  bool has_grant_ = false;
  Units grant_{};
  absl::Time grant_until_ = absl::InfinitePast();
  // A cluster-scope gate refused a call since the last tick.
  bool refused_by_cluster_ = false;
  // In the dependency's list of keys to push.
  bool queued_ = false;

  // Demand of the tick in progress.
  double tick_asked_ = 0;
  uint32_t tick_peak_in_flight_ = 0;
  uint64_t tick_concurrency_refused_ = 0;
  uint64_t admitted_total_ = 0;
};

}  // namespace sluice::core

#endif  // SLUICE_SERVER_CORE_GATE_SET_H_
