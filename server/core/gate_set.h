// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_CORE_GATE_SET_H_
#define SLUICE_SERVER_CORE_GATE_SET_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "server/core/adaptive_limit.h"
#include "server/core/adaptive_throttle.h"
#include "server/core/circuit_breaker.h"
#include "server/core/concurrency_limiter.h"
#include "server/core/decision.h"
#include "server/core/events.h"
#include "server/core/permit_ledger.h"
#include "server/core/policy_config.h"
#include "server/core/sliding_window.h"
#include "server/core/tick.h"
#include "server/core/token_bucket.h"
#include "server/core/warm_state.h"

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
  // Of `allowed`: calls clients decided from their leases
  // (ClientLeases), counted when they settle.
  uint64_t leased = 0;
  // [verdict][reason] of every answer given.
  std::array<std::array<uint64_t, kReasonCount>, 4> by_verdict_reason{};
  // Reported outcomes, indexed by Outcome (expired permits count as
  // kTimeout).
  std::array<uint64_t, 5> outcomes{};
  // Reports for permits that were unknown, already settled or expired.
  uint64_t stale_reports = 0;

  // `n` calls admitted without passing here (by a per-core slice, or from
  // a client's lease), counted as the ALLOWs they were.
  void CountAllowed(uint64_t n) {
    acquired += n;
    allowed += n;
    by_verdict_reason[static_cast<int>(Verdict::kAllow)]
                     [static_cast<int>(Reason::kNone)] += n;
  }
};

// How the cluster store looks to the gates. Standalone unless `enabled`.
struct ClusterState {
  bool enabled = false;
  // False until the first successful sync, and while the store is
  // unreachable.
  bool store_up = false;
  // Live replicas at the last successful sync (at least 1).
  uint32_t live_replicas = 1;
  // A per_key key's static share may be applied: the sync loop says so only
  // once every grant issued before the store counted this process has
  // ended (SyncLoop::AcceptMembership). Until then only grants count.
  bool static_shares = false;
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
  // Out on lease with clients that decide in their own process
  // (ClientLeases): how many leases, and the tokens and in-flight slots
  // they hold. The slots count in in_flight too.
  size_t client_leases = 0;
  double leased_tokens = 0;
  uint64_t leased_slots = 0;
  bool has_breaker = false;
  BreakerState breaker_state = BreakerState::kClosed;
  BreakerOverride override_mode = BreakerOverride::kAuto;
  absl::Time open_until = absl::InfinitePast();
  absl::Duration current_open_duration = absl::ZeroDuration();
  std::string trip_cause;
  uint64_t breaker_generation = 0;
  uint32_t probes_in_flight = 0;
  OutcomeWindow window;
  // The adaptive gates and the breaker's baseline rule, when the policy
  // has them.
  std::optional<ThrottleStatus> throttle;
  std::optional<AdaptiveLimitStatus> adaptive_limit;
  std::optional<BaselineStatus> baseline;
};

// What the gate sets of one dependency share, so that a key's gate set
// holds only its own state. Must outlive the gate sets.
struct GateContext {
  // Told about breaker transitions; may be null.
  EventSink* sink = nullptr;
  // Settled outcomes are counted here.
  DecisionCounters* counters = nullptr;
  // Names the dependency in transitions.
  std::string dependency;
  // Extra time before an unreported permit counts as a TIMEOUT (see
  // Engine::Options::permit_grace).
  absl::Duration permit_grace = absl::ZeroDuration();
  // Cluster mode: whether a gate set of the dependency told the sink of
  // new demand (EventSink::OnClusterDemand) since the last tick; the owner
  // clears it when it collects a tick, so the sink hears of it at most once
  // per tick. Null: never tell.
  std::atomic<bool>* demand_signalled = nullptr;
};

// What a call Acquire let through holds until it is settled: the owner
// records it as a permit (see PermitLedger) and hands it back to Settle.
struct Admission {
  bool admitted = false;
  bool holds_slot = false;   // holds a concurrency slot
  uint64_t probe_round = 0;  // breaker round of a HALF_OPEN probe, or 0
  // The adaptive limit's epoch of the slot it holds, or 0 (see
  // AdaptiveLimit::TryTake).
  uint32_t adaptive_epoch = 0;
};

// The gates (rate, concurrency, adaptive, breaker) of one dependency or key,
// applied in this order: breaker peek, rate, concurrency, adaptive limit,
// adaptive throttle, probe slot, giving back what earlier gates took when a
// later gate refuses. The owner keeps the permits
// (one ledger for many gate sets) and settles them here. A gate set points
// at the policy it was built or last reconfigured with, which must outlive
// it until the next Reconfigure.
// Not thread-safe; the owner (LivePolicy) locks.
class GateSet final : public BreakerListener {
 public:
  // `key` names the transitions (with the context's dependency); both must
  // outlive this.
  GateSet(const PolicyConfig& policy, absl::Time now,
          const GateContext* context, absl::string_view key);

  absl::string_view key() const { return key_; }

  // Decides one call under `policy` (the one this set was built or last
  // reconfigured with). Fills every field of `out` but policy and
  // permit_id; an admitted call (ALLOW, or a shadow policy's refusal) needs
  // a permit from the owner, expiring permit_expiry() from now.
  Admission Acquire(const PolicyConfig& policy, uint32_t permits,
                    absl::Time now, Decision* out);

  // Sets `out` to an ALLOW under `policy` that holds nothing yet: where
  // every decision starts, here and in a per-core slice.
  static void StartAllow(const PolicyConfig& policy, Decision* out);

  // Releases what an admitted call holds and feeds its outcome to the
  // breaker and the adaptive gates. `reported`: the caller reported it (a
  // permit that expired has no measured latency, only its age, which the
  // adaptive limit does not judge).
  void Settle(const Admission& admission, Outcome outcome,
              absl::Duration latency, bool reported, absl::Time now);

  // An unreported permit counts as a TIMEOUT after this:
  // 2 x call_timeout + the context's permit_grace.
  absl::Duration permit_expiry() const {
    return 2 * policy_->call_timeout + context_->permit_grace;
  }

  // Per-core slices (CoreSlice): what a slice may borrow and what it hands
  // back. SliceableUntil: until when calls may be decided from a loan, or
  // InfinitePast when they may not: only a policy whose gates are a token
  // bucket, an in-flight cap and a CLOSED breaker that successes cannot
  // trip, not shadow. A cluster-scope gate lends from the grant it holds,
  // until the grant ends (or, with the store down, from the LOCAL split).
  // Everything else is decided here call by call. `why`, when given, says
  // which gate must see each call whenever the answer is not in the
  // future.
  absl::Time SliceableUntil(absl::Time now, std::string* why = nullptr);
  // Lends up to `tokens` whole tokens (none unless at least `least`) and up
  // to `slots` slots. Without a bucket `*lent_tokens` is infinite; without
  // a cap `*lent_slots` is 0 and no slot is needed.
  void Lend(double least, double tokens, uint32_t slots, absl::Time now,
            double* lent_tokens, uint32_t* lent_slots);
  // Takes back `unused_tokens` and `unused_slots`, and learns that `spent`
  // lent tokens were used.
  void Repay(double unused_tokens, double spent, uint32_t unused_slots);
  // Counts calls decided from a loan into the cluster share's books:
  // `asked` permits asked for (the demand the store splits the limit by)
  // and `admitted` admitted. Nothing without a cluster-scope gate.
  void CountLent(double asked, double admitted);
  // Tokens out on loan now (0 without a bucket).
  double lent_tokens() const { return bucket_ ? bucket_->lent() : 0; }
  // The bucket's refill rate per second (0 without one).
  double refill_per_second() const {
    return bucket_ ? bucket_->rate_per_second() : 0;
  }
  double burst() const { return bucket_ ? bucket_->burst() : 0; }
  // Settles `n` successful calls a slice admitted, the last at `at`.
  void SettleSuccesses(uint32_t n, absl::Time at, absl::Time now) {
    if (breaker_) breaker_->RecordSuccesses(n, at, now);
  }
  // Tokens in the bucket now, -1 without one (Decision::remaining).
  int64_t remaining(absl::Time now) { return RemainingRate(now); }
  bool has_bucket() const { return bucket_.has_value(); }
  bool has_cap() const { return concurrency_.has_value(); }
  bool has_breaker() const { return breaker_ != nullptr; }

  // kClosed when there is no breaker.
  BreakerState breaker_state(absl::Time now) {
    return breaker_ ? breaker_->State(now) : BreakerState::kClosed;
  }

  // Lets an OPEN breaker become HALF_OPEN when its time is over, and the
  // adaptive gates move without reports.
  void Sweep(absl::Time now);
  // The earliest time Sweep may change anything (or tell the sink of
  // anything), as long as no other method is called meanwhile; exact, so
  // an owner may skip Sweep before it. Valid right after Sweep.
  absl::Time NextSweep() const;

  // Applies a changed policy, keeping tokens, window counts, in-flight calls
  // and breaker state wherever the new policy still has that gate.
  void Reconfigure(const PolicyConfig& policy, absl::Time now);

  void SetOverride(BreakerOverride override, absl::Time now,
                   const std::string& cause);

  // Every field but live_permits, which the owner knows.
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
    if (!share_ || share_->queued ||
        !(share_->has_grant || share_->refused_by_cluster)) {
      return false;
    }
    share_->queued = true;
    return true;
  }
  void Dequeued() {
    if (share_) share_->queued = false;
  }
  bool has_cluster_limit() const {
    return share_ && (share_->limit[kRateUnits] > 0 ||
                      share_->limit[kSlotUnits] > 0);
  }
  // Breaker side of a tick (no-ops without a breaker).
  void CollectBreaker(absl::Time now, DependencyTick* out);
  void ApplyBreaker(const DependencyUpdate& update, absl::Time now);
  // Warm side of a tick: this gate set's adaptive limit and baseline, and
  // the cluster's, which a fresh gate set (its limit has judged no window,
  // its baseline learned none) starts from.
  void CollectWarm(DependencyTick* out) const;
  void ApplyWarm(const DependencyUpdate& update, absl::Time now);

  // Warm start: what survives a restart (empty optionals for what the
  // policy lacks, and for a breaker that is not OPEN), and taking it back.
  // ImportWarm takes what is sane and returns false if anything was not
  // (see AdaptiveLimit::Import, LatencyBaseline::Import); a saved OPEN
  // breaker stays open no longer than max_open_duration from now.
  KeyWarmState ExportWarm(absl::Time now);
  bool ImportWarm(const KeyWarmState& state, absl::Time now);

  // BreakerListener:
  void OnTransition(BreakerState from, BreakerState to,
                    const std::string& cause, absl::Time at,
                    uint64_t generation, absl::Time open_until) override;

  // What a per_key key of `policy` applies without a grant (its static
  // share of `limit`), and per resource for a key without state; zero when
  // the policy has no per_key cluster limit or `cluster` does not allow
  // static shares. ClusterLimit: the cluster-scope limits as written.
  static int64_t StaticShare(const PolicyConfig& policy, int64_t limit,
                             const ClusterState& cluster);
  static Units ClusterLimit(const PolicyConfig& policy,
                            const ClusterState& cluster);
  static Units StaticUnits(const PolicyConfig& policy,
                           const ClusterState& cluster);

 private:
  // A refusal for `reason`: DEGRADE when the fallback covers it, else REJECT
  // with the suggested HTTP status; a shadow policy allows (reason SHADOW).
  // Returns what a shadow policy admits anyway.
  Admission Refuse(const PolicyConfig& policy, Reason reason,
                   absl::Duration retry_after, absl::Time now, Decision* out);
  bool TakeRate(double permits, absl::Time now);
  void RefundRate(double permits, absl::Time now);
  int64_t RemainingRate(absl::Time now);
  absl::Duration RateRetryAfter(double permits, absl::Time now);
  // Sets the limiters from the policy and, for cluster-scope gates, from
  // this replica's grant.
  void ApplyLimits(absl::Time now);
  // Units of cluster resource `r` this replica may use while the store is
  // up (or, LOCAL, down).
  int64_t ClusterUnits(int r, absl::Time now) const;
  // The grant of resource `r`, scaled down to the policy's limit when the
  // store split it from a higher one: the grants in force add up to at
  // most the old limit, so scaled they add up to at most the new one.
  int64_t GrantUnits(int r) const;
  // The policy's limits as written, before any cluster share.
  const RateLimitConfig* rate_config() const {
    return policy_->rate_limit ? &*policy_->rate_limit : nullptr;
  }
  uint32_t max_in_flight() const {
    return policy_->concurrency ? policy_->concurrency->max_in_flight : 0;
  }
  bool cluster_rate() const {
    return policy_->rate_limit && policy_->rate_limit->scope == Scope::kCluster;
  }
  bool cluster_concurrency() const {
    return policy_->concurrency &&
           policy_->concurrency->scope == Scope::kCluster;
  }
  // Tells the sink about an adaptive gate's move.
  void Notify(AdaptiveChange::Kind kind, double from, double to,
              std::string cause, absl::Time now);
  // Reports a move of the adaptive limit, if it moved.
  void LimitMoved(bool moved, const std::string& cause, absl::Time now);
  // Notices throttling starting or stopping at refusal probability `p`.
  void ThrottleAt(double p, absl::Time now);
  // The cluster share's busiest moment of the tick: calls in flight now,
  // lent slots included. Needs concurrency_.
  void NotePeakInFlight();
  // Notes that a cluster-scope gate refused a call; tells the sink if the
  // store has not heard of this key's demand (EventSink::OnClusterDemand).
  void RefusedByCluster();
  // Whether this breaker is the cluster's shared one (probe leases).
  bool SharedBreaker() const;
  // Whether cluster-scope limits are skipped (store down, FAIL_OPEN).
  bool ClusterGatesOpen() const;
  // Whether calls are refused for want of the store (FAIL_CLOSED).
  bool StoreRefuses() const;

  const GateContext* const context_;
  const absl::string_view key_;

  // The policy this set was built or last reconfigured with.
  const PolicyConfig* policy_ = nullptr;
  // The gates the policy has. The window and the breaker are large and
  // less common, so they live apart and cost a pointer when absent.
  std::optional<TokenBucket> bucket_;
  std::unique_ptr<SlidingWindow> window_;
  std::optional<ConcurrencyLimiter> concurrency_;
  std::unique_ptr<CircuitBreaker> breaker_;
  // The adaptive gates, when the policy has them.
  std::unique_ptr<AdaptiveLimit> adaptive_;
  std::unique_ptr<AdaptiveThrottle> throttle_;
  // Whether the throttle was refusing (p > 0) at its last look.
  bool throttling_ = false;
  // The last epoch of an adaptive limit the policy dropped: a new one
  // starts past it.
  uint32_t adaptive_epochs_ = 0;
  // Held so that a breaker added by a later policy edit starts overridden.
  BreakerOverride override_ = BreakerOverride::kAuto;

  ClusterState cluster_;
  // Cluster mode, for a policy with a cluster-scope gate: this replica's
  // part of it. Absent otherwise, so a key costs nothing for it.
  struct ClusterShare {
    // The policy's cluster-scope limits in whole units (0: not
    // cluster-scope).
    Units limit{};
    // The store's grant; valid until grant_until on this replica's clock.
    bool has_grant = false;
    Units grant{};
    // The limits the grant is a share of (KeyGrant::limit).
    Units grant_limit{};
    absl::Time grant_until = absl::InfinitePast();
    // A cluster-scope gate refused a call since the last tick.
    bool refused_by_cluster = false;
    // The last tick collected carried demand (see RefusedByCluster).
    bool pushed_demand = false;
    // In the dependency's list of keys to push.
    bool queued = false;

    // Demand of the tick in progress.
    double tick_asked = 0;
    uint32_t tick_peak_in_flight = 0;
    uint64_t tick_concurrency_refused = 0;
    uint64_t admitted_total = 0;
  };
  std::unique_ptr<ClusterShare> share_;
};

}  // namespace sluice::core

#endif  // SLUICE_SERVER_CORE_GATE_SET_H_
