// SPDX-License-Identifier: Apache-2.0
// Gate order, degradation, shadow mode and per-key state, through the Engine.
#include <cstdint>
#include <string>

#include "gtest/gtest.h"
#include "server/core/engine.h"
#include "tests/core/engine_test_util.h"

namespace sluice::core {
namespace {

constexpr double kEps = 1e-9;

class GatesTest : public EngineTest {
 protected:
  // Opens the breaker with one failed call; the policy's rule must be 1.
  void Trip(absl::string_view dependency, absl::string_view key = "") {
    const Decision d = Acquire(dependency, key);
    ASSERT_EQ(d.verdict, Verdict::kAllow);
    Report(dependency, d, Outcome::kFailure, absl::Milliseconds(5), key);
    ASSERT_EQ(Gates(dependency, key).breaker_state, BreakerState::kOpen);
  }
};

// --- Gate order ---

TEST_F(GatesTest, OpenBreakerSpendsNoTokens) {
  PolicyConfig p = MakePolicy("a");
  WithBucket(p, 1, 10);
  WithBreaker(p, 1);
  engine_.PutPolicy(p);
  Trip("a");
  ASSERT_NEAR(Gates("a").tokens_available, 9, kEps);
  for (int i = 0; i < 5; ++i) {
    const Decision d = Acquire("a");
    EXPECT_EQ(d.verdict, Verdict::kReject);
    EXPECT_EQ(d.reason, Reason::kCircuitOpen);
    EXPECT_EQ(d.breaker_state, BreakerState::kOpen);
  }
  EXPECT_NEAR(Gates("a").tokens_available, 9, kEps);
}

TEST_F(GatesTest, OpenBreakerTakesPrecedenceOverEmptyBucket) {
  PolicyConfig p = MakePolicy("a");
  WithBucket(p, 1, 1, absl::Hours(1));
  WithBreaker(p, 1);
  engine_.PutPolicy(p);
  Trip("a");  // spends the only token
  EXPECT_EQ(Acquire("a").reason, Reason::kCircuitOpen);
}

TEST_F(GatesTest, RateGateBeforeConcurrencyGate) {
  PolicyConfig p = MakePolicy("a");
  WithBucket(p, 1, 1, absl::Hours(1));
  WithConcurrency(p, 1);
  engine_.PutPolicy(p);
  ASSERT_EQ(Acquire("a").verdict, Verdict::kAllow);
  // Both gates would refuse; the rate gate answers.
  EXPECT_EQ(Acquire("a").reason, Reason::kRateLimited);
}

TEST_F(GatesTest, ConcurrencyRefusalRefundsTokens) {
  PolicyConfig p = MakePolicy("a");
  WithBucket(p, 1, 10, absl::Hours(1));
  WithConcurrency(p, 1);
  engine_.PutPolicy(p);
  const Decision held = Acquire("a");
  ASSERT_EQ(held.verdict, Verdict::kAllow);
  for (int i = 0; i < 20; ++i) {
    const Decision d = Acquire("a", "", 2);
    EXPECT_EQ(d.verdict, Verdict::kReject);
    EXPECT_EQ(d.reason, Reason::kConcurrencyLimited);
  }
  const GateStatus g = Gates("a");
  EXPECT_NEAR(g.tokens_available, 9, kEps);
  EXPECT_EQ(g.in_flight, 1u);
  Report("a", held, Outcome::kSuccess);
  EXPECT_EQ(Acquire("a").remaining, 8);
}

TEST_F(GatesTest, ConcurrencyRefusalRefundsSlidingWindow) {
  PolicyConfig p = MakePolicy("a");
  WithWindow(p, 5, absl::Seconds(1));
  WithConcurrency(p, 1);
  engine_.PutPolicy(p);
  const Decision held = Acquire("a");
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(Acquire("a").reason, Reason::kConcurrencyLimited);
  }
  EXPECT_EQ(Gates("a").window_count, 1);
  Report("a", held, Outcome::kSuccess);
  for (int i = 0; i < 4; ++i) {
    const Decision d = Acquire("a");
    EXPECT_EQ(d.verdict, Verdict::kAllow) << i;
    Report("a", d, Outcome::kSuccess);
  }
  EXPECT_EQ(Acquire("a").reason, Reason::kRateLimited);
}

TEST_F(GatesTest, ProbeLimitRefundsTokensAndSlot) {
  PolicyConfig p = MakePolicy("a");
  WithBucket(p, 1, 10, absl::Hours(1));
  WithConcurrency(p, 5);
  WithBreaker(p, 1);
  engine_.PutPolicy(p);
  Trip("a");
  clock_.Advance(absl::Seconds(15));
  const Decision probe = Acquire("a");
  ASSERT_EQ(probe.verdict, Verdict::kAllow);
  EXPECT_EQ(probe.breaker_state, BreakerState::kHalfOpen);
  const GateStatus before = Gates("a");
  EXPECT_NEAR(before.tokens_available, 8, 0.01);  // 15 s at 1/h added a bit
  EXPECT_EQ(before.in_flight, 1u);
  EXPECT_EQ(before.probes_in_flight, 1u);
  for (int i = 0; i < 5; ++i) {
    const Decision d = Acquire("a");
    EXPECT_EQ(d.reason, Reason::kProbeLimit);
    EXPECT_EQ(d.verdict, Verdict::kReject);
    EXPECT_EQ(d.http_status, 503);
  }
  const GateStatus after = Gates("a");
  EXPECT_NEAR(after.tokens_available, before.tokens_available, kEps);
  EXPECT_EQ(after.in_flight, 1u);
  EXPECT_EQ(after.probes_in_flight, 1u);
}

// --- Degradation ---

TEST(FallbackConfigTest, AppliesTo) {
  FallbackConfig none;
  EXPECT_FALSE(none.AppliesTo(Reason::kCircuitOpen));
  EXPECT_FALSE(none.AppliesTo(Reason::kRateLimited));

  FallbackConfig all;
  all.strategy = FallbackStrategy::kStatic;
  all.on_mask = 0;
  for (Reason r : {Reason::kRateLimited, Reason::kConcurrencyLimited,
                   Reason::kCircuitOpen, Reason::kProbeLimit}) {
    EXPECT_TRUE(all.AppliesTo(r)) << ReasonName(r);
  }

  FallbackConfig open_only;
  open_only.strategy = FallbackStrategy::kDefault;
  open_only.on_mask = Bit(Reason::kCircuitOpen);
  EXPECT_TRUE(open_only.AppliesTo(Reason::kCircuitOpen));
  EXPECT_TRUE(open_only.AppliesTo(Reason::kProbeLimit));
  EXPECT_FALSE(open_only.AppliesTo(Reason::kRateLimited));
  EXPECT_FALSE(open_only.AppliesTo(Reason::kConcurrencyLimited));

  FallbackConfig rate_only;
  rate_only.strategy = FallbackStrategy::kCache;
  rate_only.on_mask = Bit(Reason::kRateLimited);
  EXPECT_TRUE(rate_only.AppliesTo(Reason::kRateLimited));
  EXPECT_FALSE(rate_only.AppliesTo(Reason::kConcurrencyLimited));
  EXPECT_FALSE(rate_only.AppliesTo(Reason::kCircuitOpen));
  EXPECT_FALSE(rate_only.AppliesTo(Reason::kProbeLimit));
}

TEST_F(GatesTest, OpenBreakerDegradesWithFallback) {
  PolicyConfig p = MakePolicy("a");
  WithBreaker(p, 1);
  WithFallback(p, Bit(Reason::kCircuitOpen));
  engine_.PutPolicy(p);
  Trip("a");
  clock_.Advance(absl::Seconds(5));
  const Decision d = Acquire("a");
  EXPECT_EQ(d.verdict, Verdict::kDegrade);
  EXPECT_EQ(d.reason, Reason::kCircuitOpen);
  EXPECT_EQ(d.http_status, 0);
  EXPECT_TRUE(d.permit_id.empty());
  EXPECT_GT(d.retry_after, absl::ZeroDuration());
  EXPECT_LE(d.retry_after, absl::Seconds(10));
  ASSERT_NE(d.fallback(), nullptr);
  EXPECT_EQ(d.fallback()->strategy, FallbackStrategy::kStatic);
  EXPECT_EQ(d.fallback()->payload, R"({"degraded":true})");
  EXPECT_EQ(d.fallback()->content_type, "application/json");
  const DecisionCounters c = Inspect("a").counters;
  EXPECT_EQ(c.degraded, 1u);
  EXPECT_EQ(VerdictReason(c, Verdict::kDegrade, Reason::kCircuitOpen), 1u);
  ExpectConserved(c);
}

TEST_F(GatesTest, OpenBreakerWithoutFallbackRejects503) {
  PolicyConfig p = MakePolicy("a");
  WithBreaker(p, 1);
  engine_.PutPolicy(p);
  Trip("a");
  const Decision d = Acquire("a");
  EXPECT_EQ(d.verdict, Verdict::kReject);
  EXPECT_EQ(d.reason, Reason::kCircuitOpen);
  EXPECT_EQ(d.http_status, 503);
  EXPECT_GT(d.retry_after, absl::ZeroDuration());
  EXPECT_LE(d.retry_after, absl::Seconds(15));
  EXPECT_EQ(d.fallback(), nullptr);
}

TEST_F(GatesTest, UncoveredRateLimitRejects429) {
  PolicyConfig p = MakePolicy("a");
  WithBucket(p, 10, 1);
  WithFallback(p, Bit(Reason::kCircuitOpen));
  engine_.PutPolicy(p);
  ASSERT_EQ(Acquire("a").verdict, Verdict::kAllow);
  const Decision d = Acquire("a");
  EXPECT_EQ(d.verdict, Verdict::kReject);
  EXPECT_EQ(d.reason, Reason::kRateLimited);
  EXPECT_EQ(d.http_status, 429);
  EXPECT_EQ(d.fallback(), nullptr);
  EXPECT_EQ(d.remaining, 0);
  // One token at 10/s: 100 ms.
  EXPECT_GT(d.retry_after, absl::Milliseconds(90));
  EXPECT_LE(d.retry_after, absl::Milliseconds(110));
}

TEST_F(GatesTest, SlidingWindowRefusalHasRetryAfter) {
  PolicyConfig p = MakePolicy("a");
  WithWindow(p, 2, absl::Seconds(1));
  engine_.PutPolicy(p);
  Acquire("a");
  Acquire("a");
  const Decision d = Acquire("a");
  EXPECT_EQ(d.reason, Reason::kRateLimited);
  EXPECT_EQ(d.http_status, 429);
  EXPECT_GE(d.retry_after, absl::Seconds(1));
  clock_.Advance(d.retry_after);
  EXPECT_EQ(Acquire("a").verdict, Verdict::kAllow);
}

TEST_F(GatesTest, UncoveredConcurrencyLimitRejects429) {
  PolicyConfig p = MakePolicy("a");
  WithConcurrency(p, 1);
  WithFallback(p, Bit(Reason::kRateLimited));
  engine_.PutPolicy(p);
  ASSERT_EQ(Acquire("a").verdict, Verdict::kAllow);
  const Decision d = Acquire("a");
  EXPECT_EQ(d.verdict, Verdict::kReject);
  EXPECT_EQ(d.reason, Reason::kConcurrencyLimited);
  EXPECT_EQ(d.http_status, 429);
}

TEST_F(GatesTest, FallbackOnAllReasonsDegradesRateAndConcurrency) {
  PolicyConfig p = MakePolicy("a");
  WithBucket(p, 1, 2, absl::Hours(1));
  WithConcurrency(p, 1);
  WithFallback(p, 0);
  engine_.PutPolicy(p);
  const Decision held = Acquire("a");
  ASSERT_EQ(held.verdict, Verdict::kAllow);
  Decision d = Acquire("a");
  EXPECT_EQ(d.verdict, Verdict::kDegrade);
  EXPECT_EQ(d.reason, Reason::kConcurrencyLimited);
  EXPECT_NE(d.fallback(), nullptr);
  Report("a", held, Outcome::kSuccess);
  ASSERT_EQ(Acquire("a").verdict, Verdict::kAllow);  // last token
  d = Acquire("a");
  EXPECT_EQ(d.verdict, Verdict::kDegrade);
  EXPECT_EQ(d.reason, Reason::kRateLimited);
  EXPECT_GT(d.retry_after, absl::ZeroDuration());
  ASSERT_NE(d.fallback(), nullptr);
  EXPECT_EQ(d.fallback()->payload, R"({"degraded":true})");
}

TEST_F(GatesTest, ProbeLimitDegradesUnderCircuitOpenFallback) {
  PolicyConfig p = MakePolicy("a");
  WithBreaker(p, 1);
  WithFallback(p, Bit(Reason::kCircuitOpen));
  engine_.PutPolicy(p);
  Trip("a");
  clock_.Advance(absl::Seconds(15));
  ASSERT_EQ(Acquire("a").verdict, Verdict::kAllow);  // the one probe
  const Decision d = Acquire("a");
  EXPECT_EQ(d.verdict, Verdict::kDegrade);
  EXPECT_EQ(d.reason, Reason::kProbeLimit);
  EXPECT_NE(d.fallback(), nullptr);
}

// --- Shadow ---

TEST_F(GatesTest, ShadowDecidesAndCountsButAlwaysAllows) {
  PolicyConfig p = MakePolicy("a");
  WithBucket(p, 1, 2, absl::Hours(1));
  p.shadow = true;
  engine_.PutPolicy(p);
  for (int i = 0; i < 5; ++i) {
    const Decision d = Acquire("a");
    EXPECT_EQ(d.verdict, Verdict::kAllow) << i;
    EXPECT_EQ(d.http_status, 0);
    if (i >= 2) {
      EXPECT_EQ(d.reason, Reason::kShadow) << i;
    }
  }
  const DecisionCounters c = Inspect("a").counters;
  EXPECT_EQ(c.acquired, 5u);
  EXPECT_EQ(c.allowed, 5u);
  EXPECT_EQ(c.rejected, 0u);
  EXPECT_EQ(c.shadow_refused, 3u);
  EXPECT_EQ(VerdictReason(c, Verdict::kAllow, Reason::kShadow), 3u);
  ExpectConserved(c);
  // The decision was really computed: the bucket is empty.
  EXPECT_NEAR(Gates("a").tokens_available, 0, kEps);
}

TEST_F(GatesTest, ShadowOpenBreakerStillAllows) {
  PolicyConfig p = MakePolicy("a");
  WithBreaker(p, 1);
  WithFallback(p, 0);
  p.shadow = true;
  engine_.PutPolicy(p);
  Trip("a");
  const Decision d = Acquire("a");
  EXPECT_EQ(d.verdict, Verdict::kAllow);
  EXPECT_EQ(d.reason, Reason::kShadow);
  EXPECT_EQ(d.fallback(), nullptr);
  EXPECT_EQ(Inspect("a").counters.shadow_refused, 1u);
}

// --- per_key ---

TEST_F(GatesTest, PerKeyStateIsSeparate) {
  PolicyConfig p = MakePolicy("a");
  WithBucket(p, 1, 2, absl::Hours(1));
  WithBreaker(p, 1);
  p.per_key = true;
  engine_.PutPolicy(p);
  EXPECT_EQ(Acquire("a", "alice").verdict, Verdict::kAllow);
  EXPECT_EQ(Acquire("a", "alice").verdict, Verdict::kAllow);
  EXPECT_EQ(Acquire("a", "alice").reason, Reason::kRateLimited);
  EXPECT_EQ(Acquire("a", "bob").verdict, Verdict::kAllow);
  EXPECT_NEAR(Gates("a", "bob").tokens_available, 1, kEps);
  EXPECT_EQ(Inspect("a").keys, 2u);
  // A breaker trips for one key only, and says which.
  sink_.Clear();
  Trip("a", "bob");
  ASSERT_EQ(sink_.size(), 1u);
  EXPECT_EQ(sink_.transitions()[0].key, "bob");
  EXPECT_EQ(sink_.transitions()[0].dependency, "a");
  EXPECT_EQ(Gates("a", "alice").breaker_state, BreakerState::kClosed);
  EXPECT_EQ(Acquire("a", "carol").verdict, Verdict::kAllow);
}

TEST_F(GatesTest, PerKeyEvictsLeastRecentlyUsed) {
  PolicyConfig p = MakePolicy("a");
  WithBucket(p, 1, 10, absl::Hours(1));
  p.per_key = true;
  p.max_keys = 2;
  engine_.PutPolicy(p);
  Acquire("a", "k1");
  Acquire("a", "k2");
  Acquire("a", "k1");  // k1 is now the most recently used
  Acquire("a", "k3");  // k2 goes
  EXPECT_EQ(Inspect("a").keys, 2u);
  EXPECT_FALSE(Inspect("a", "k2").gates.has_value());
  EXPECT_NEAR(Gates("a", "k1").tokens_available, 8, kEps);
  EXPECT_NEAR(Gates("a", "k3").tokens_available, 9, kEps);
  // k2 comes back fresh and pushes out k1 (k3 was used after it).
  Acquire("a", "k3");
  EXPECT_EQ(Acquire("a", "k2").remaining, 9);
  EXPECT_FALSE(Inspect("a", "k1").gates.has_value());
  EXPECT_TRUE(Inspect("a", "k3").gates.has_value());
  EXPECT_EQ(Inspect("a").keys, 2u);
}

TEST_F(GatesTest, ReportForEvictedKeyIsHarmless) {
  PolicyConfig p = MakePolicy("a");
  WithConcurrency(p, 1);
  WithBreaker(p, 1);
  p.per_key = true;
  p.max_keys = 1;
  engine_.PutPolicy(p);
  const Decision old = Acquire("a", "k1");
  ASSERT_EQ(old.verdict, Verdict::kAllow);
  Acquire("a", "k2");  // evicts k1
  const Decision fresh = Acquire("a", "k1");  // evicts k2, new k1 state
  ASSERT_EQ(fresh.verdict, Verdict::kAllow);
  // The old permit must not release the new slot nor trip the new breaker.
  Report("a", old, Outcome::kFailure, absl::Milliseconds(5), "k1");
  const GateStatus g = Gates("a", "k1");
  EXPECT_EQ(g.in_flight, 1u);
  EXPECT_EQ(g.breaker_state, BreakerState::kClosed);
  EXPECT_EQ(Inspect("a").counters.stale_reports, 1u);
  EXPECT_EQ(Acquire("a", "k1").reason, Reason::kConcurrencyLimited);
  // A report for a key that has no state at all is harmless too.
  engine_.Report("a", "k2", old.permit_id, Outcome::kFailure,
                 absl::ZeroDuration());
  EXPECT_EQ(Gates("a", "k1").in_flight, 1u);
}

TEST_F(GatesTest, PerKeyManyKeysStayBounded) {
  PolicyConfig p = MakePolicy("a");
  WithBucket(p, 1, 1, absl::Hours(1));
  p.per_key = true;
  p.max_keys = 100;
  engine_.PutPolicy(p);
  for (int i = 0; i < 5000; ++i) {
    EXPECT_EQ(Acquire("a", "key" + std::to_string(i)).verdict,
              Verdict::kAllow);
  }
  EXPECT_EQ(Inspect("a").keys, 100u);
  EXPECT_TRUE(Inspect("a", "key4999").gates.has_value());
  EXPECT_FALSE(Inspect("a", "key4899").gates.has_value());
  EXPECT_TRUE(Inspect("a", "key4900").gates.has_value());
}


// --- Sharded per-key state (max_keys >= LivePolicy::kShardedKeys) ---

class ShardedKeysTest : public GatesTest {
 protected:
  static constexpr uint32_t kMaxKeys = LivePolicy::kShardedKeys;

  PolicyConfig Sharded() {
    PolicyConfig p = MakePolicy("a");
    WithBucket(p, 1, 10, absl::Hours(1));
    WithConcurrency(p, 1);
    WithBreaker(p, 1);
    p.per_key = true;
    p.max_keys = kMaxKeys;
    return p;
  }
};

TEST_F(ShardedKeysTest, EachKeyKeepsItsOwnStateAndMaxKeysHolds) {
  ASSERT_EQ(LivePolicy::ShardsFor(Sharded()), 32u);
  engine_.PutPolicy(Sharded());
  for (uint32_t i = 0; i < 3 * kMaxKeys; ++i) {
    const std::string key = "tenant-" + std::to_string(i);
    const Decision d = Acquire("a", key);
    ASSERT_EQ(d.verdict, Verdict::kAllow) << key;
    Report("a", d, Outcome::kSuccess, absl::Milliseconds(1), key);
  }
  // Every shard is full to its share; together exactly max_keys.
  EXPECT_EQ(Inspect("a").keys, kMaxKeys);
  EXPECT_EQ(Inspect("a").counters.acquired, 3u * kMaxKeys);
  EXPECT_EQ(Inspect("a").counters.outcomes[static_cast<int>(
                Outcome::kSuccess)],
            3u * kMaxKeys);
  // The newest key is there with its own bucket (one token spent).
  const std::string last = "tenant-" + std::to_string(3 * kMaxKeys - 1);
  EXPECT_NEAR(Gates("a", last).tokens_available, 9, kEps);
  EXPECT_FALSE(Inspect("a", "tenant-0").gates.has_value());
}

TEST_F(ShardedKeysTest, ShardsGrowWithMaxKeysUpToTheirMost) {
  PolicyConfig p = Sharded();
  p.max_keys = LivePolicy::kShardedKeys - 1;
  EXPECT_EQ(LivePolicy::ShardsFor(p), 1u);  // exactly LRU
  p.max_keys = 100000;                      // the default
  EXPECT_EQ(LivePolicy::ShardsFor(p), 781u);
  p.max_keys = 10000000;  // the most a policy may have
  EXPECT_EQ(LivePolicy::ShardsFor(p), LivePolicy::kMaxShards);
  p.per_key = false;
  EXPECT_EQ(LivePolicy::ShardsFor(p), 1u);
}

TEST_F(ShardedKeysTest, MaxKeysHoldsExactlyOverUnevenShares) {
  // 20,000 keys over 156 shards: shares of 128 and 129.
  PolicyConfig p = Sharded();
  p.max_keys = 20000;
  ASSERT_EQ(LivePolicy::ShardsFor(p), 156u);
  engine_.PutPolicy(p);
  for (uint32_t i = 0; i < 2 * p.max_keys; ++i) {
    const std::string key = "tenant-" + std::to_string(i);
    const Decision d = Acquire("a", key);
    ASSERT_EQ(d.verdict, Verdict::kAllow) << key;
    Report("a", d, Outcome::kSuccess, absl::Milliseconds(1), key);
  }
  EXPECT_EQ(Inspect("a").keys, p.max_keys);
  EXPECT_EQ(Inspect("a").counters.acquired, 2u * p.max_keys);
  // The newest keys are all there: each shard evicted its own oldest.
  for (uint32_t i = 2 * p.max_keys - 100; i < 2 * p.max_keys; ++i) {
    EXPECT_TRUE(Inspect("a", "tenant-" + std::to_string(i)).gates.has_value())
        << i;
  }
}

TEST_F(ShardedKeysTest, PermitSettlesOnlyTheKeyItWasIssuedFor) {
  engine_.PutPolicy(Sharded());
  const Decision alice = Acquire("a", "alice");
  ASSERT_EQ(alice.verdict, Verdict::kAllow);
  const Decision bob = Acquire("a", "bob");
  ASSERT_EQ(bob.verdict, Verdict::kAllow);
  // Alice's permit reported under bob's key frees neither slot and trips
  // no breaker: its seal names alice's key.
  Report("a", alice, Outcome::kFailure, absl::Milliseconds(1), "bob");
  EXPECT_EQ(engine_.PermitReportsRefused().forged, 1u);
  EXPECT_EQ(Inspect("a").counters.stale_reports, 0u);
  EXPECT_EQ(Gates("a", "alice").in_flight, 1u);
  EXPECT_EQ(Gates("a", "bob").in_flight, 1u);
  EXPECT_EQ(Gates("a", "bob").breaker_state, BreakerState::kClosed);
  // Under her own key it settles.
  Report("a", alice, Outcome::kSuccess, absl::Milliseconds(1), "alice");
  EXPECT_EQ(Gates("a", "alice").in_flight, 0u);
  EXPECT_EQ(Gates("a", "alice").live_permits, 0u);
}

TEST_F(ShardedKeysTest, PermitOfAnEvictedKeyExpiresHarmlessly) {
  PolicyConfig p = Sharded();
  engine_.PutPolicy(p);
  const Decision first = Acquire("a", "tenant-0");
  ASSERT_EQ(first.verdict, Verdict::kAllow);
  // Push tenant-0 out while its permit is still out.
  for (uint32_t i = 1; i < 3 * kMaxKeys; ++i) {
    const std::string key = "tenant-" + std::to_string(i);
    Report("a", Acquire("a", key), Outcome::kSuccess, absl::Milliseconds(1),
           key);
  }
  ASSERT_FALSE(Inspect("a", "tenant-0").gates.has_value());
  const uint64_t timeouts_before =
      Inspect("a").counters.outcomes[static_cast<int>(Outcome::kTimeout)];
  // Its expiry settles nothing, and a late report counts as stale.
  clock_.Advance(3 * p.call_timeout);
  engine_.Sweep();
  EXPECT_EQ(Inspect("a").counters.outcomes[static_cast<int>(
                Outcome::kTimeout)],
            timeouts_before);
  Report("a", first, Outcome::kFailure, absl::Milliseconds(1), "tenant-0");
  EXPECT_EQ(Inspect("a").counters.stale_reports, 1u);
  // A new tenant-0 starts fresh.
  EXPECT_EQ(Acquire("a", "tenant-0").remaining, 9);
}

TEST_F(ShardedKeysTest, EditingMaxKeysKeepsTheShardsAndEveryKeysState) {
  engine_.PutPolicy(Sharded());
  ASSERT_EQ(Acquire("a", "alice").verdict, Verdict::kAllow);  // in flight
  // Fewer keys than shards: the shards stay, each holding at least one key,
  // and alice keeps her slot and her spent token.
  PolicyConfig small = Sharded();
  small.max_keys = 10;
  engine_.PutPolicy(small);
  EXPECT_EQ(Gates("a", "alice").in_flight, 1u);
  EXPECT_NEAR(Gates("a", "alice").tokens_available, 9, kEps);
  EXPECT_EQ(Acquire("a", "alice").reason, Reason::kConcurrencyLimited);
  for (int i = 0; i < 1000; ++i) Acquire("a", "k" + std::to_string(i));
  EXPECT_LE(Inspect("a").keys, LivePolicy::ShardsFor(Sharded()));
  EXPECT_EQ(engine_.Policies()[0]->max_keys, 10u);
}

TEST_F(ShardedKeysTest, SwitchingPerKeyKeepsCountersAndOverride) {
  engine_.PutPolicy(Sharded());
  ASSERT_TRUE(engine_.SetOverride("a", BreakerOverride::kForceOpen, "test")
                  .ok());
  EXPECT_EQ(Acquire("a", "alice").reason, Reason::kCircuitOpen);
  // Per-key state does not map onto one set of gates: the dependency is
  // built afresh, keeping its counters and the operator's override.
  PolicyConfig shared = Sharded();
  shared.per_key = false;
  engine_.PutPolicy(shared);
  EXPECT_EQ(Inspect("a").counters.acquired, 1u);
  EXPECT_EQ(Acquire("a").reason, Reason::kCircuitOpen);
  EXPECT_EQ(Inspect("a").counters.acquired, 2u);
}

}  // namespace
}  // namespace sluice::core
