// SPDX-License-Identifier: Apache-2.0
// The in-flight cap and permit expiry, through the Engine.
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "server/core/engine.h"
#include "tests/core/engine_test_util.h"

namespace sluice::core {
namespace {

class ConcurrencyTest : public EngineTest {
 protected:
  void Install(uint32_t max_in_flight, uint32_t consecutive_failures = 0) {
    PolicyConfig p = MakePolicy("a");
    p.call_timeout = absl::Seconds(1);
    WithConcurrency(p, max_in_flight);
    if (consecutive_failures > 0) WithBreaker(p, consecutive_failures);
    engine_.PutPolicy(p);
  }
};

TEST_F(ConcurrencyTest, CapsInFlightAndReportReleases) {
  Install(3);
  std::vector<Decision> held;
  for (int i = 0; i < 3; ++i) {
    held.push_back(Acquire("a"));
    ASSERT_EQ(held.back().verdict, Verdict::kAllow);
    EXPECT_FALSE(held.back().permit_id.empty());
  }
  const Decision refused = Acquire("a");
  EXPECT_EQ(refused.verdict, Verdict::kReject);
  EXPECT_EQ(refused.reason, Reason::kConcurrencyLimited);
  EXPECT_EQ(refused.http_status, 429);
  EXPECT_TRUE(refused.permit_id.empty());
  EXPECT_EQ(Gates("a").in_flight, 3u);
  EXPECT_EQ(Gates("a").live_permits, 3u);
  // Every outcome frees the slot, CANCELLED included.
  Report("a", held[0], Outcome::kSuccess);
  Report("a", held[1], Outcome::kCancelled);
  EXPECT_EQ(Gates("a").in_flight, 1u);
  EXPECT_EQ(Acquire("a").verdict, Verdict::kAllow);
  EXPECT_EQ(Acquire("a").verdict, Verdict::kAllow);
  EXPECT_EQ(Acquire("a").reason, Reason::kConcurrencyLimited);
}

TEST_F(ConcurrencyTest, UnreportedPermitExpiresOnNextAcquire) {
  Install(1, /*consecutive_failures=*/5);
  const Decision lost = Acquire("a");
  ASSERT_EQ(lost.verdict, Verdict::kAllow);
  clock_.Advance(absl::Seconds(2) - absl::Milliseconds(1));
  EXPECT_EQ(Acquire("a").reason, Reason::kConcurrencyLimited);
  clock_.Advance(absl::Milliseconds(1));  // 2 x call_timeout
  const Decision next = Acquire("a");
  EXPECT_EQ(next.verdict, Verdict::kAllow);
  const LivePolicyStatus s = Inspect("a");
  EXPECT_EQ(Outcomes(s.counters, Outcome::kTimeout), 1u);
  ASSERT_TRUE(s.gates.has_value());
  EXPECT_EQ(s.gates->in_flight, 1u);  // `next` only
  EXPECT_EQ(s.gates->window.timeouts, 1);
  EXPECT_EQ(s.gates->window.failures, 1);
  EXPECT_EQ(s.gates->window.calls, 1);

  // The late report of the expired permit is stale: it must not free the
  // slot `next` holds nor count a second outcome.
  Report("a", lost, Outcome::kSuccess);
  const LivePolicyStatus after = Inspect("a");
  EXPECT_EQ(after.counters.stale_reports, 1u);
  EXPECT_EQ(Outcomes(after.counters, Outcome::kSuccess), 0u);
  EXPECT_EQ(after.gates->in_flight, 1u);
  EXPECT_EQ(Acquire("a").reason, Reason::kConcurrencyLimited);
}

TEST_F(ConcurrencyTest, UnreportedPermitsExpireOnSweep) {
  Install(4, /*consecutive_failures=*/3);
  for (int i = 0; i < 4; ++i) ASSERT_EQ(Acquire("a").verdict, Verdict::kAllow);
  clock_.Advance(absl::Milliseconds(1999));
  engine_.Sweep();
  EXPECT_EQ(Gates("a").in_flight, 4u);
  clock_.Advance(absl::Milliseconds(1));
  engine_.Sweep();
  const LivePolicyStatus s = Inspect("a");
  ASSERT_TRUE(s.gates.has_value());
  EXPECT_EQ(s.gates->in_flight, 0u);
  EXPECT_EQ(s.gates->live_permits, 0u);
  EXPECT_EQ(Outcomes(s.counters, Outcome::kTimeout), 4u);
  // Timeouts are failures: three in a row trip the breaker.
  EXPECT_EQ(s.gates->breaker_state, BreakerState::kOpen);
}

TEST_F(ConcurrencyTest, PermitsOfCallersThatMayNotReportExpireAsReleases) {
  // Envoy's rate-limit protocol has no report: its permits free their slot
  // on expiry but must not count as timeouts, or the breaker would trip on
  // every call that went well.
  Install(4, /*consecutive_failures=*/3);
  for (int i = 0; i < 4; ++i) {
    absl::StatusOr<Decision> d =
        engine_.Acquire("a", "", 1, Unreported::kRelease);
    ASSERT_TRUE(d.ok());
    ASSERT_EQ(d->verdict, Verdict::kAllow);
  }
  EXPECT_EQ(Acquire("a").reason, Reason::kConcurrencyLimited);
  clock_.Advance(absl::Seconds(2));
  engine_.Sweep();
  const LivePolicyStatus s = Inspect("a");
  ASSERT_TRUE(s.gates.has_value());
  EXPECT_EQ(s.gates->in_flight, 0u);
  EXPECT_EQ(Outcomes(s.counters, Outcome::kTimeout), 0u);
  EXPECT_EQ(Outcomes(s.counters, Outcome::kCancelled), 4u);
  EXPECT_EQ(s.gates->breaker_state, BreakerState::kClosed);
  EXPECT_EQ(s.gates->window.failures, 0);
}

TEST_F(ConcurrencyTest, CallersThatMayNotReportGetNoPermitWhereNoneServes) {
  // A rate limit alone has nothing to give back or judge: no permit, so an
  // unreported stream of them never fills the ledger.
  PolicyConfig p = MakePolicy("rate-only");
  WithBucket(p, 100, 100);
  engine_.PutPolicy(p);
  absl::StatusOr<Decision> d =
      engine_.Acquire("rate-only", "", 1, Unreported::kRelease);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->verdict, Verdict::kAllow);
  EXPECT_TRUE(d->permit_id.empty());
  EXPECT_EQ(Gates("rate-only").live_permits, 0u);
  // Callers that report still get one, for the outcome counters.
  EXPECT_FALSE(Acquire("rate-only").permit_id.empty());
}

TEST_F(ConcurrencyTest, ExpiryFollowsCallTimeout) {
  PolicyConfig p = MakePolicy("a");
  p.call_timeout = absl::Milliseconds(250);
  WithConcurrency(p, 1);
  engine_.PutPolicy(p);
  const Decision d = Acquire("a");
  EXPECT_EQ(d.call_timeout, absl::Milliseconds(250));
  clock_.Advance(absl::Milliseconds(499));
  engine_.Sweep();
  EXPECT_EQ(Gates("a").in_flight, 1u);
  clock_.Advance(absl::Milliseconds(1));
  engine_.Sweep();
  EXPECT_EQ(Gates("a").in_flight, 0u);
}

TEST_F(ConcurrencyTest, LoweringTheCapKeepsCallsInFlight) {
  Install(4);
  std::vector<Decision> held;
  for (int i = 0; i < 4; ++i) held.push_back(Acquire("a"));
  Install(2);
  EXPECT_EQ(Gates("a").in_flight, 4u);
  EXPECT_EQ(Acquire("a").reason, Reason::kConcurrencyLimited);
  Report("a", held[0], Outcome::kSuccess);
  Report("a", held[1], Outcome::kSuccess);
  EXPECT_EQ(Acquire("a").reason, Reason::kConcurrencyLimited);
  Report("a", held[2], Outcome::kSuccess);
  EXPECT_EQ(Acquire("a").verdict, Verdict::kAllow);
}

}  // namespace
}  // namespace sluice::core
