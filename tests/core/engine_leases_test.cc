// SPDX-License-Identifier: Apache-2.0
// Client leases (ClientLeases): tokens and slots a dependency lends to a
// client that decides in its own process, on a fake clock. Whatever the
// clients hold, the dependency's limits must hold across every caller, and
// the breaker must judge the clients' calls as it judges the others.
#include <cstdint>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/core/engine.h"
#include "tests/core/engine_test_util.h"

namespace sluice::core {
namespace {

class EngineLeasesTest : public EngineTest {
 protected:
  // A renewal from `client` that settles `s` and wants `tokens` and
  // `slots` next.
  LeaseTerms Renew(LeaseSettlement s, uint32_t tokens, uint32_t slots,
                   uint64_t client = 7) {
    s.client = client;
    s.want_tokens = tokens;
    s.want_slots = slots;
    return engine_.RenewLease("dep", s);
  }

  // What a client says after `n` calls from `lease`, a token each and
  // every one a fast success.
  static LeaseSettlement Succeeded(uint64_t lease, uint64_t n) {
    LeaseSettlement s;
    s.lease = lease;
    s.tokens_spent = n;
    s.admitted = n;
    s.successes = n;
    return s;
  }

  // A per_key "dep" with `max_keys` keys, each a bucket of 10 that refills
  // in a day.
  void PutKeyed(uint32_t max_keys) {
    PolicyConfig p = MakePolicy("dep");
    WithBucket(p, 1, 10, absl::Hours(24));
    p.per_key = true;
    p.max_keys = max_keys;
    engine_.PutPolicy(p);
  }
  // A first renewal from client 7 that wants `tokens` and a slot.
  static LeaseSettlement Wanting(uint32_t tokens) {
    LeaseSettlement s;
    s.client = 7;
    s.want_tokens = tokens;
    s.want_slots = 1;
    return s;
  }

  // Admits calls through the engine until the first refusal; how many.
  int AdmitAll(Reason* refused_for = nullptr) {
    for (int n = 0; n < 100000; ++n) {
      Decision d = Acquire("dep");
      if (d.verdict != Verdict::kAllow) {
        if (refused_for != nullptr) *refused_for = d.reason;
        return n;
      }
    }
    return -1;
  }
};

// Lent tokens leave the bucket: the engine's own callers get only what the
// lease left, and what the client gives back unused returns to them.
TEST_F(EngineLeasesTest, LentTokensLeaveTheBucketUntilGivenBack) {
  PolicyConfig p = MakePolicy("dep");
  WithBucket(p, 1, 100, absl::Hours(24));
  engine_.PutPolicy(p);

  const LeaseTerms lease = Renew({}, 30, 1);
  ASSERT_NE(lease.lease, 0u) << lease.reason;
  EXPECT_EQ(lease.token_limit, 30u);
  EXPECT_FALSE(lease.unlimited_tokens);
  EXPECT_TRUE(lease.unlimited_slots);
  EXPECT_EQ(lease.valid_for, ClientLeases::kMaxValidFor);
  EXPECT_EQ(lease.call_timeout, absl::Seconds(1));
  EXPECT_FALSE(lease.exhausted);

  GateStatus g = Gates("dep");
  EXPECT_EQ(g.client_leases, 1u);
  EXPECT_DOUBLE_EQ(g.leased_tokens, 30);
  EXPECT_EQ(AdmitAll(), 70);

  // The client used 20 and gives the lease back: 10 return.
  const LeaseSettlement s = Succeeded(lease.lease, 20);
  const LeaseTerms back = Renew(s, 0, 0);
  EXPECT_EQ(back.lease, 0u);
  g = Gates("dep");
  EXPECT_EQ(g.client_leases, 0u);
  EXPECT_DOUBLE_EQ(g.leased_tokens, 0);
  EXPECT_EQ(AdmitAll(), 10);

  // 100 admitted in all, the burst: the leased calls count as ALLOWs.
  const DecisionCounters c = Inspect("dep").counters;
  EXPECT_EQ(c.allowed, 100u);
  EXPECT_EQ(c.leased, 20u);
  EXPECT_EQ(Outcomes(c, Outcome::kSuccess), 20u);
  ExpectConserved(c);
}

// A renewal adds only what the client lacks, its counts are cumulative,
// and a renewal that arrives twice settles nothing twice.
TEST_F(EngineLeasesTest, RenewalsAreCumulativeAndIdempotent) {
  PolicyConfig p = MakePolicy("dep");
  WithBucket(p, 1, 100, absl::Hours(24));
  engine_.PutPolicy(p);

  const LeaseTerms first = Renew({}, 10, 1);
  ASSERT_NE(first.lease, 0u);
  EXPECT_EQ(first.token_limit, 10u);

  const LeaseSettlement s = Succeeded(first.lease, 4);
  const LeaseTerms second = Renew(s, 10, 1);
  EXPECT_EQ(second.lease, first.lease);
  // 6 still held, 4 more lent: the client may spend up to 14 in all.
  EXPECT_EQ(second.token_limit, 14u);
  const LeaseTerms again = Renew(s, 10, 1);
  EXPECT_EQ(again.token_limit, 14u);

  const DecisionCounters c = Inspect("dep").counters;
  EXPECT_EQ(c.leased, 4u);
  EXPECT_EQ(Outcomes(c, Outcome::kSuccess), 4u);
  // 100 - 14 lent in all.
  EXPECT_EQ(AdmitAll(), 86);
}

// A client that vanishes never hands its tokens back: when its lease runs
// out they count as spent, never as unused, so the bucket cannot admit
// them a second time.
TEST_F(EngineLeasesTest, AnAbandonedLeaseCountsItsTokensSpent) {
  PolicyConfig p = MakePolicy("dep");
  WithBucket(p, 1, 50, absl::Hours(24));
  engine_.PutPolicy(p);

  const LeaseTerms lease = Renew({}, 50, 1);
  ASSERT_EQ(lease.token_limit, 50u);
  EXPECT_TRUE(lease.exhausted);
  EXPECT_EQ(Acquire("dep").reason, Reason::kRateLimited);
  clock_.Advance(absl::Seconds(5));
  EXPECT_EQ(Gates("dep").client_leases, 1u);

  // The lease ran out (4 s, then a permit's life of 2 s): it is gone and
  // its 50 tokens are spent, not back in the bucket.
  clock_.Advance(absl::Seconds(1));
  engine_.Sweep();
  const GateStatus g = Gates("dep");
  EXPECT_EQ(g.client_leases, 0u);
  EXPECT_DOUBLE_EQ(g.leased_tokens, 0);
  EXPECT_EQ(AdmitAll(), 0);
  EXPECT_EQ(Inspect("dep").counters.leased, 0u);
}

// An empty bucket says so, and when asking again is worth it.
TEST_F(EngineLeasesTest, AnEmptyBucketSaysWhenToRenew) {
  PolicyConfig p = MakePolicy("dep");
  WithBucket(p, 10, 10);
  engine_.PutPolicy(p);

  const LeaseTerms lease = Renew({}, 13, 1);
  EXPECT_EQ(lease.token_limit, 10u);
  EXPECT_TRUE(lease.exhausted);
  // 3 tokens short at 10 per second.
  EXPECT_EQ(lease.retry_after, absl::Milliseconds(300));

  // Far short: no later than half the burst refills, so the bucket never
  // sits full while the client waits.
  const LeaseSettlement s = Succeeded(lease.lease, 10);
  const LeaseTerms more = Renew(s, 1000, 1);
  EXPECT_TRUE(more.exhausted);
  EXPECT_EQ(more.retry_after, absl::Milliseconds(500));
}

// Lent slots count against the cap; a client giving its lease back keeps
// the slots of its calls still in flight until they end.
TEST_F(EngineLeasesTest, LentSlotsCountAgainstTheCap) {
  PolicyConfig p = MakePolicy("dep");
  WithConcurrency(p, 4);
  engine_.PutPolicy(p);

  const LeaseTerms lease = Renew({}, 1, 3);
  ASSERT_NE(lease.lease, 0u);
  EXPECT_TRUE(lease.unlimited_tokens);
  EXPECT_FALSE(lease.unlimited_slots);
  EXPECT_EQ(lease.slot_limit, 3u);
  EXPECT_EQ(Gates("dep").leased_slots, 3u);

  Decision held = Acquire("dep");
  ASSERT_EQ(held.verdict, Verdict::kAllow);
  Reason why = Reason::kNone;
  EXPECT_EQ(AdmitAll(&why), 0);
  EXPECT_EQ(why, Reason::kConcurrencyLimited);

  // One leased call still runs: its slot stays lent.
  LeaseSettlement s;
  s.lease = lease.lease;
  s.admitted = 3;
  s.successes = 2;
  s.in_flight = 1;
  EXPECT_EQ(Renew(s, 0, 0).lease, 0u);
  EXPECT_EQ(Gates("dep").leased_slots, 1u);
  EXPECT_EQ(Gates("dep").client_leases, 1u);
  std::vector<Decision> more;
  for (int i = 0; i < 2; ++i) more.push_back(Acquire("dep"));
  for (const Decision& d : more) EXPECT_EQ(d.verdict, Verdict::kAllow);
  EXPECT_EQ(Acquire("dep").reason, Reason::kConcurrencyLimited);

  // It ended: the slot is back, the lease gone.
  s.successes = 3;
  s.in_flight = 0;
  Renew(s, 0, 0);
  EXPECT_EQ(Gates("dep").client_leases, 0u);
  EXPECT_EQ(Gates("dep").leased_slots, 0u);
  EXPECT_EQ(Acquire("dep").verdict, Verdict::kAllow);
}

// Slots only grow while a lease lasts: the client may be filling the ones
// it holds when it asks for fewer.
TEST_F(EngineLeasesTest, SlotsDoNotShrinkUnderAClient) {
  PolicyConfig p = MakePolicy("dep");
  WithConcurrency(p, 10);
  engine_.PutPolicy(p);
  const LeaseTerms lease = Renew({}, 1, 6);
  ASSERT_EQ(lease.slot_limit, 6u);
  LeaseSettlement s;
  s.lease = lease.lease;
  EXPECT_EQ(Renew(s, 1, 2).slot_limit, 6u);
  // No more than the cap, whatever it asks.
  EXPECT_EQ(Renew(s, 1, 50).slot_limit, 10u);
}

// The breaker judges leased calls: failures a client settles trip it, and
// then no lease is given until it closes.
TEST_F(EngineLeasesTest, LeasedFailuresTripTheBreaker) {
  PolicyConfig p = MakePolicy("dep");
  WithBucket(p, 100, 100);
  WithBreaker(p, 3);
  engine_.PutPolicy(p);

  const LeaseTerms lease = Renew({}, 10, 1);
  ASSERT_NE(lease.lease, 0u) << lease.reason;
  LeaseSettlement s;
  s.lease = lease.lease;
  s.tokens_spent = 3;
  s.admitted = 3;
  s.failures = 3;
  const LeaseTerms after = Renew(s, 10, 1);
  EXPECT_EQ(after.lease, 0u);
  EXPECT_EQ(after.breaker_state, BreakerState::kOpen);
  EXPECT_EQ(after.reason, "the breaker is OPEN");
  EXPECT_EQ(Acquire("dep").reason, Reason::kCircuitOpen);
  EXPECT_EQ(Outcomes(Inspect("dep").counters, Outcome::kFailure), 3u);
  ASSERT_EQ(sink_.transitions().size(), 1u);
}

// A renewal's successes came before its failures (the client renews as
// soon as a call fails), so they reset the consecutive count first.
TEST_F(EngineLeasesTest, SuccessesSettleBeforeFailures) {
  PolicyConfig p = MakePolicy("dep");
  WithBreaker(p, 3);
  engine_.PutPolicy(p);

  for (int i = 0; i < 2; ++i) {
    Report("dep", Acquire("dep"), Outcome::kFailure);
  }
  const LeaseTerms lease = Renew({}, 10, 1);
  ASSERT_NE(lease.lease, 0u) << lease.reason;
  LeaseSettlement s;
  s.lease = lease.lease;
  s.admitted = 2;
  s.successes = 1;
  s.failures = 1;
  EXPECT_EQ(Renew(s, 10, 1).breaker_state, BreakerState::kClosed);
}

// A slow success counts as a slow call, and the lease says what is slow.
TEST_F(EngineLeasesTest, SlowLeasedCallsFeedTheSlowRule) {
  PolicyConfig p = MakePolicy("dep");
  BreakerConfig b;
  b.slow_call_rate_threshold = 0.5;
  b.slow_call_duration = absl::Milliseconds(100);
  b.minimum_calls = 4;
  p.breaker = b;
  engine_.PutPolicy(p);

  const LeaseTerms lease = Renew({}, 10, 1);
  ASSERT_NE(lease.lease, 0u) << lease.reason;
  EXPECT_EQ(lease.slow_after, absl::Milliseconds(100));
  LeaseSettlement s;
  s.lease = lease.lease;
  s.admitted = 4;
  s.slow = 4;
  EXPECT_EQ(Renew(s, 10, 1).breaker_state, BreakerState::kOpen);
}

// An operator's override ends leases; the tokens stay lent until the
// client, which may still be deciding from them, gives them back.
TEST_F(EngineLeasesTest, AnOverrideEndsTheLeaseButKeepsItsTokensLent) {
  PolicyConfig p = MakePolicy("dep");
  WithBucket(p, 1, 100, absl::Hours(24));
  WithBreaker(p, 5);
  engine_.PutPolicy(p);
  const LeaseTerms lease = Renew({}, 40, 1);
  ASSERT_NE(lease.lease, 0u);
  ASSERT_TRUE(
      engine_.SetOverride("dep", BreakerOverride::kForceOpen, "drill").ok());

  const LeaseTerms ended = Renew(Succeeded(lease.lease, 5), 40, 1);
  EXPECT_EQ(ended.lease, 0u);
  EXPECT_EQ(ended.breaker_state, BreakerState::kForcedOpen);
  EXPECT_DOUBLE_EQ(Gates("dep").leased_tokens, 35);

  Renew(Succeeded(lease.lease, 8), 0, 0);
  EXPECT_DOUBLE_EQ(Gates("dep").leased_tokens, 0);
  EXPECT_EQ(Gates("dep").client_leases, 0u);
  ASSERT_TRUE(engine_.SetOverride("dep", BreakerOverride::kAuto, "").ok());
  EXPECT_EQ(AdmitAll(), 92);
}

// A client that stopped deciding from its lease (it heard the lease had
// ended) says so with lease 0: what it did not spend comes back before it
// is lent anything new.
TEST_F(EngineLeasesTest, ALeaseTheClientNoLongerDecidesFromIsRepaid) {
  PolicyConfig p = MakePolicy("dep");
  WithBucket(p, 1, 100, absl::Hours(24));
  engine_.PutPolicy(p);
  const LeaseTerms lease = Renew({}, 40, 1);
  ASSERT_EQ(lease.token_limit, 40u);

  const LeaseSettlement s = Succeeded(0, 5);
  const LeaseTerms next = Renew(s, 10, 1);
  ASSERT_NE(next.lease, 0u);
  // 5 spent, 35 back, 10 lent anew on top of the 5 spent.
  EXPECT_EQ(next.token_limit, 15u);
  EXPECT_DOUBLE_EQ(Gates("dep").leased_tokens, 10);
  EXPECT_EQ(AdmitAll(), 85);
}

// Gates that must see each call never lend.
TEST_F(EngineLeasesTest, OnlyLeasableGatesLend) {
  EXPECT_EQ(engine_.RenewLease("nope", {7}).lease, 0u);
  EXPECT_EQ(engine_.RenewLease("nope", {7}).reason, "no policy has this name");

  PolicyConfig keyed = MakePolicy("keyed");
  WithBucket(keyed, 10, 10);
  keyed.per_key = true;
  keyed.max_keys = 100;
  PolicyConfig window = MakePolicy("window");
  WithWindow(window, 10, absl::Seconds(1));
  PolicyConfig shadow = MakePolicy("shadow");
  WithBucket(shadow, 10, 10);
  shadow.shadow = true;
  PolicyConfig adaptive = MakePolicy("adaptive");
  WithBucket(adaptive, 10, 10);
  AdaptiveConcurrencyConfig limit;
  limit.initial_limit = 100;
  limit.max_limit = 100;
  adaptive.adaptive_concurrency = limit;
  PolicyConfig baseline = MakePolicy("baseline");
  WithBucket(baseline, 10, 10);
  BreakerConfig breaker;
  breaker.consecutive_failures = 5;
  LatencyBaselineConfig rule;
  rule.factor = 2;
  breaker.latency_baseline = rule;
  baseline.breaker = breaker;
  const std::pair<PolicyConfig, std::string> cases[] = {
      {keyed, "a per_key policy is leased key by key"},
      {window, "a sliding window decides each call"},
      {shadow, "a shadow policy decides each call"},
      {adaptive, "the adaptive gates decide each call"},
      {baseline, "the breaker's latency_baseline rule judges each call"},
  };
  for (const auto& [policy, reason] : cases) {
    engine_.PutPolicy(policy);
    LeaseSettlement s;
    s.client = 7;
    s.want_tokens = 5;
    s.want_slots = 1;
    const LeaseTerms t = engine_.RenewLease(policy.name, s);
    EXPECT_EQ(t.lease, 0u) << policy.name;
    EXPECT_EQ(t.reason, reason) << policy.name;
  }
}

// Each client holds its own lease, up to kMaxLeases of them.
TEST_F(EngineLeasesTest, LeasesAreBoundedPerDependency) {
  PolicyConfig p = MakePolicy("dep");
  WithConcurrency(p, 100000);
  engine_.PutPolicy(p);
  for (uint64_t client = 1; client <= ClientLeases::kMaxLeases; ++client) {
    ASSERT_NE(Renew({}, 1, 1, client).lease, 0u) << client;
  }
  const LeaseTerms refused = Renew({}, 1, 1, ClientLeases::kMaxLeases + 1);
  EXPECT_EQ(refused.lease, 0u);
  EXPECT_EQ(Gates("dep").client_leases, ClientLeases::kMaxLeases);
  // Another client's renewal is still answered.
  EXPECT_NE(Renew({}, 1, 1, 1).lease, 0u);
}

// A per_key policy is leased key by key: each key's lease comes out of that
// key's own gates, and a renewal names its key.
TEST_F(EngineLeasesTest, APerKeyPolicyLendsEachKeyFromItsOwnGates) {
  PutKeyed(100);
  const LeaseSettlement s = Wanting(6);
  const LeaseTerms a = engine_.RenewLease("dep", s, "a");
  ASSERT_NE(a.lease, 0u) << a.reason;
  EXPECT_EQ(a.token_limit, 6u);
  EXPECT_TRUE(a.per_key);
  // Key a's bucket keeps 4; key b's is untouched.
  int admitted_a = 0;
  while (Acquire("dep", "a").verdict == Verdict::kAllow) ++admitted_a;
  EXPECT_EQ(admitted_a, 4);
  int admitted_b = 0;
  while (Acquire("dep", "b").verdict == Verdict::kAllow) ++admitted_b;
  EXPECT_EQ(admitted_b, 10);
  // The same client's lease of another key is a lease of its own.
  const LeaseTerms b = engine_.RenewLease("dep", s, "b");
  EXPECT_NE(b.lease, a.lease);
  EXPECT_EQ(b.token_limit, 0u);  // b's bucket is empty
  EXPECT_TRUE(b.exhausted);
  EXPECT_EQ(engine_.RenewLease("dep", s, "c").token_limit, 6u);
  EXPECT_EQ(Gates("dep", "a").client_leases, 1u);
  EXPECT_DOUBLE_EQ(Gates("dep", "a").leased_tokens, 6);
  const LivePolicyStatus all = Inspect("dep");
  EXPECT_EQ(all.leased.leases, 3u);
  EXPECT_DOUBLE_EQ(all.leased.tokens, 12);

  // A renewal without a key, or with one for a policy without per_key,
  // says how the policy is leased.
  const LeaseTerms keyless = engine_.RenewLease("dep", s);
  EXPECT_EQ(keyless.lease, 0u);
  EXPECT_EQ(keyless.reason, "a per_key policy is leased key by key");
  EXPECT_TRUE(keyless.per_key);
  PolicyConfig plain = MakePolicy("plain");
  WithBucket(plain, 10, 10);
  plain.version = 3;
  engine_.PutPolicy(plain);
  // The client tells "leased without a key" from "no such policy" by the
  // version (a stored policy's is never 0).
  const LeaseTerms keyed = engine_.RenewLease("plain", s, "a");
  EXPECT_EQ(keyed.lease, 0u);
  EXPECT_FALSE(keyed.per_key);
  EXPECT_EQ(keyed.policy_version, 3u);
  EXPECT_EQ(engine_.RenewLease("nope", s, "a").policy_version, 0u);
}

// A key's leases run out as a dependency's do, and end with the key's
// gates when the key is evicted.
TEST_F(EngineLeasesTest, AKeysLeasesRunOutAndEndWithItsGates) {
  PutKeyed(2);
  const LeaseSettlement s = Wanting(5);
  ASSERT_NE(engine_.RenewLease("dep", s, "a").lease, 0u);
  ASSERT_NE(engine_.RenewLease("dep", s, "b").lease, 0u);
  EXPECT_EQ(Inspect("dep").leased.leases, 2u);
  // Unsettled, both run out after 4 s and a permit's life: their tokens
  // count as spent.
  clock_.Advance(ClientLeases::kMaxValidFor + absl::Seconds(2));
  engine_.Sweep();
  EXPECT_EQ(Inspect("dep").leased.leases, 0u);
  int admitted = 0;
  while (Acquire("dep", "a").verdict == Verdict::kAllow) ++admitted;
  EXPECT_EQ(admitted, 5);

  // A new lease of b, then a third key evicts the least recently used one
  // (a, just used): b's lease stays, until b goes too.
  ASSERT_NE(engine_.RenewLease("dep", s, "b").lease, 0u);
  Acquire("dep", "c");
  EXPECT_EQ(Inspect("dep").leased.leases, 1u);
  Acquire("dep", "d");  // evicts b
  EXPECT_EQ(Inspect("dep").leased.leases, 0u);
}

// Clients that keep changing their id cannot grow a per_key policy's
// leases without bound: past kMaxKeyLeases (per shard, its part) a new
// lease is refused, while the clients that hold one still renew it.
TEST_F(EngineLeasesTest, APerKeyPolicysLeasesAreBounded) {
  PolicyConfig p = MakePolicy("dep");
  WithConcurrency(p, 100000);
  p.per_key = true;
  p.max_keys = 100;  // one shard
  engine_.PutPolicy(p);
  LeaseSettlement s;
  s.want_slots = 1;
  uint64_t granted = 0;
  for (uint64_t client = 1; client <= LivePolicy::kMaxKeyLeases + 10;
       ++client) {
    s.client = client;
    if (engine_.RenewLease("dep", s, absl::StrCat("k", client % 50)).lease !=
        0) {
      ++granted;
    }
  }
  EXPECT_EQ(granted, LivePolicy::kMaxKeyLeases);
  s.client = LivePolicy::kMaxKeyLeases + 11;
  const LeaseTerms refused = engine_.RenewLease("dep", s, "k1");
  EXPECT_EQ(refused.lease, 0u);
  EXPECT_EQ(refused.reason, "too many client leases on this policy's keys");
  s.client = 1;
  EXPECT_NE(engine_.RenewLease("dep", s, "k1").lease, 0u);
  EXPECT_EQ(Inspect("dep").leased.leases, LivePolicy::kMaxKeyLeases);
}

}  // namespace
}  // namespace sluice::core
