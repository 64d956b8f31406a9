// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_CORE_CLIENT_LEASES_H_
#define SLUICE_SERVER_CORE_CLIENT_LEASES_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "server/core/breaker_state.h"
#include "server/core/gate_set.h"
#include "server/core/policy_config.h"
#include "server/core/tick.h"

namespace sluice::core {

// What a client that decides a dependency in its own process (the SDK's
// leases) says once per tick: what it did with its lease, and what it
// wants next. Every count is cumulative over the lease, so a renewal that
// is lost or arrives twice settles nothing twice.
struct LeaseSettlement {
  // Random per client life, never 0.
  uint64_t client = 0;
  // The lease the client decides from; 0 when none. A lease of this
  // client's that it no longer decides from is settled and its unspent
  // tokens come back.
  uint64_t lease = 0;
  uint64_t tokens_spent = 0;
  uint64_t admitted = 0;
  // Tokens of the calls the lease refused (spent, and Sluice's bucket
  // empty): with tokens_spent, the demand a cluster share is split by.
  uint64_t tokens_refused = 0;
  // Calls from the lease that ended, by how they went: a success no slower
  // than the slow-call rule, a slow success, a failure, a timeout, a call
  // the client gave up on.
  uint64_t successes = 0;
  uint64_t slow = 0;
  uint64_t failures = 0;
  uint64_t timeouts = 0;
  uint64_t cancelled = 0;
  // Calls from the lease still in flight.
  uint32_t in_flight = 0;
  // What the client expects to need until its next renewal. Both 0: the
  // client stopped deciding from the lease and gives it back.
  uint32_t want_tokens = 0;
  uint32_t want_slots = 0;
};

// The answer: the lease to decide from until the next renewal, or none.
struct LeaseTerms {
  // 0: no lease; the client asks Acquire for each call (`reason` says why).
  uint64_t lease = 0;
  // The client may spend tokens while its tokens_spent is below this;
  // unlimited without a rate limit.
  uint64_t token_limit = 0;
  bool unlimited_tokens = false;
  // The client may hold this many calls from the lease in flight at once;
  // unlimited without an in-flight cap.
  uint32_t slot_limit = 0;
  bool unlimited_slots = false;
  // Decide from the lease for at most this long, counted from the
  // request.
  absl::Duration valid_for = absl::ZeroDuration();
  absl::Duration call_timeout = absl::ZeroDuration();
  // A success slower than this is a slow call (infinite: no such rule).
  absl::Duration slow_after = absl::InfiniteDuration();
  BreakerState breaker_state = BreakerState::kClosed;
  // The bucket had no more to lend: a spent lease refuses (RATE_LIMITED)
  // until the client's next renewal rather than asking, and the next
  // renewal is due after retry_after.
  bool exhausted = false;
  absl::Duration retry_after = absl::ZeroDuration();
  uint64_t policy_version = 0;
  // The policy is per_key: it is leased key by key.
  bool per_key = false;
  std::string reason;
};

// Tokens and slots out on lease with clients, for the status and metrics.
struct LeaseTotals {
  size_t leases = 0;
  double tokens = 0;
  uint64_t slots = 0;
};

// The leases the clients of one set of gates hold (a dependency without
// keys, or one key of a per_key policy): tokens and in-flight slots lent
// out of those gates (GateSet::Lend, as a per-core slice
// borrows them), so the bucket's bound and the cap hold across every
// caller, in this process and in the clients. A lease ends when its client
// gives it back (want 0, and none of its calls still in flight) or when it
// runs out: at its end plus a permit's life (the longest a call admitted
// just before the end may run), its unused tokens count as spent and its
// slots come back.
// Not thread-safe: the owner (LivePolicy's shard) locks.
class ClientLeases {
 public:
  // Most clients holding a lease on one dependency.
  static constexpr size_t kMaxLeases = 4096;
  // The longest a lease may be decided from without a renewal. It bounds
  // what a client holds when it or this process is gone: a client keeps
  // its limit for this long while this process cannot answer, and
  // decides as today (fail-open by default) after.
  static constexpr absl::Duration kMaxValidFor = absl::Seconds(4);

  // Settles `in` against `gates` and answers the client's next lease: one
  // only while the gates, having judged what `in` settled, allow calls to
  // be decided from a loan (GateSet::SliceableUntil). `lease_ids`: where
  // new lease ids come from.
  void Renew(const LeaseSettlement& in, const PolicyConfig& policy,
             GateSet* gates, uint64_t* lease_ids, DecisionCounters* counters,
             absl::Time now, LeaseTerms* out);
  // Ends the leases that ran out (see the class comment).
  void Expire(GateSet* gates, absl::Time now);
  // When Expire may next have something to do (never later than that).
  absl::Time next_due() const { return next_due_; }
  // Ends every lease at once, handing back nothing: the gates they were
  // lent from are gone or start afresh.
  void Clear() {
    leases_.clear();
    next_due_ = absl::InfiniteFuture();
  }
  LeaseTotals totals() const;
  // Cluster mode: what the leases hold of a cluster-scope gate outlives a
  // smaller grant (tokens a client may still spend, slots of calls still
  // running), so `key` (the dependency's tick) counts the tokens out on
  // lease as in use, and both for as long as the longest lease may still
  // be decided from or its calls run.
  void AddUsage(const GateSet& gates, absl::Time now, KeyTick* key) const;
  bool empty() const { return leases_.empty(); }
  size_t size() const { return leases_.size(); }
  bool holds(uint64_t client) const { return leases_.contains(client); }

 private:
  struct Lease {
    uint64_t id = 0;
    // When it ends for good: the end of the last term granted plus a
    // permit's life.
    absl::Time runs_out = absl::InfinitePast();
    double token_limit = 0;
    bool unlimited_tokens = false;
    uint32_t slots = 0;
    // The settlement last applied.
    LeaseSettlement seen;
  };

  // Hands the counts in `in` that `lease` has not seen to the gates and
  // counters.
  static void Settle(const LeaseSettlement& in, const PolicyConfig& policy,
                     GateSet* gates, DecisionCounters* counters,
                     absl::Time now, Lease* lease);
  // Gives back what `lease` holds: unused tokens as unused (`spent_rest`:
  // counted as spent instead) and every slot but `keep_slots`.
  static void GiveBack(GateSet* gates, bool spent_rest, uint32_t keep_slots,
                       Lease* lease);
  void Recompute();

  absl::flat_hash_map<uint64_t, Lease> leases_;
  absl::Time next_due_ = absl::InfiniteFuture();
};

}  // namespace sluice::core

#endif  // SLUICE_SERVER_CORE_CLIENT_LEASES_H_
