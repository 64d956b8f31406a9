// SPDX-License-Identifier: Apache-2.0
// The circuit breaker as the Engine drives it.
#include <cstdint>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/core/engine.h"
#include "tests/core/engine_test_util.h"

namespace sluice::core {
namespace {

using ::testing::HasSubstr;

class EngineBreakerTest : public EngineTest {
 protected:
  // Admits `n` calls and fails them all.
  void FailCalls(absl::string_view dependency, int n) {
    for (int i = 0; i < n; ++i) {
      const Decision d = Acquire(dependency);
      ASSERT_EQ(d.verdict, Verdict::kAllow) << i;
      Report(dependency, d, Outcome::kFailure);
    }
  }
};

TEST_F(EngineBreakerTest, ConsecutiveFailuresTripAndReachTheSink) {
  PolicyConfig p = MakePolicy("inventory");
  WithBreaker(p, 5);
  engine_.PutPolicy(p);
  FailCalls("inventory", 4);
  Report("inventory", Acquire("inventory"), Outcome::kSuccess);
  FailCalls("inventory", 4);
  EXPECT_EQ(sink_.size(), 0u);
  FailCalls("inventory", 1);
  const GateStatus g = Gates("inventory");
  EXPECT_EQ(g.breaker_state, BreakerState::kOpen);
  EXPECT_EQ(g.open_until, clock_.Now() + absl::Seconds(15));
  EXPECT_THAT(g.trip_cause, HasSubstr("consecutive failures"));
  ASSERT_EQ(sink_.size(), 1u);
  const BreakerTransition t = sink_.transitions()[0];
  EXPECT_EQ(t.dependency, "inventory");
  EXPECT_EQ(t.key, "");
  EXPECT_EQ(t.from, BreakerState::kClosed);
  EXPECT_EQ(t.to, BreakerState::kOpen);
  EXPECT_THAT(t.cause, HasSubstr("consecutive failures"));
  EXPECT_EQ(t.at, clock_.Now());
  EXPECT_GE(t.generation, 1u);
  EXPECT_EQ(t.open_until, clock_.Now() + absl::Seconds(15));
}

TEST_F(EngineBreakerTest, FailureRateTripReachesTheSink) {
  PolicyConfig p = MakePolicy("a");
  WithBreaker(p, 0);
  p.breaker->failure_rate_threshold = 0.5;
  p.breaker->minimum_calls = 4;
  engine_.PutPolicy(p);
  Report("a", Acquire("a"), Outcome::kSuccess);
  Report("a", Acquire("a"), Outcome::kFailure);
  Report("a", Acquire("a"), Outcome::kSuccess);
  EXPECT_EQ(sink_.size(), 0u);
  Report("a", Acquire("a"), Outcome::kFailure);  // 2 of 4
  ASSERT_EQ(sink_.size(), 1u);
  EXPECT_THAT(sink_.transitions()[0].cause, HasSubstr("failure rate"));
  EXPECT_EQ(Acquire("a").reason, Reason::kCircuitOpen);
}

TEST_F(EngineBreakerTest, SlowCallsTrip) {
  PolicyConfig p = MakePolicy("a");
  WithBreaker(p, 0);
  p.breaker->slow_call_duration = absl::Seconds(1);
  p.breaker->slow_call_rate_threshold = 0.5;
  p.breaker->minimum_calls = 2;
  engine_.PutPolicy(p);
  Report("a", Acquire("a"), Outcome::kSuccess, absl::Milliseconds(1000));
  Report("a", Acquire("a"), Outcome::kSuccess, absl::Milliseconds(1000));
  EXPECT_EQ(Gates("a").breaker_state, BreakerState::kClosed);
  Report("a", Acquire("a"), Outcome::kSuccess, absl::Milliseconds(1500));
  Report("a", Acquire("a"), Outcome::kSuccess, absl::Milliseconds(1500));
  EXPECT_EQ(Gates("a").breaker_state, BreakerState::kOpen);
  ASSERT_EQ(sink_.size(), 1u);
  EXPECT_THAT(sink_.transitions()[0].cause, HasSubstr("slow"));
}

TEST_F(EngineBreakerTest, HalfOpenAdmitsExactlyProbeLimitThenCloses) {
  PolicyConfig p = MakePolicy("a");
  WithBreaker(p, 1);
  p.breaker->half_open_probes = 3;
  p.breaker->successes_to_close = 3;
  engine_.PutPolicy(p);
  FailCalls("a", 1);
  clock_.Advance(absl::Seconds(15));
  std::vector<Decision> probes;
  for (int i = 0; i < 3; ++i) {
    probes.push_back(Acquire("a"));
    EXPECT_EQ(probes.back().verdict, Verdict::kAllow) << i;
    EXPECT_EQ(probes.back().breaker_state, BreakerState::kHalfOpen);
  }
  EXPECT_EQ(Gates("a").probes_in_flight, 3u);
  const Decision refused = Acquire("a");
  EXPECT_EQ(refused.verdict, Verdict::kReject);
  EXPECT_EQ(refused.reason, Reason::kProbeLimit);
  EXPECT_EQ(Report("a", probes[0], Outcome::kSuccess),
            BreakerState::kHalfOpen);
  EXPECT_EQ(Report("a", probes[1], Outcome::kSuccess),
            BreakerState::kHalfOpen);
  EXPECT_EQ(Report("a", probes[2], Outcome::kSuccess), BreakerState::kClosed);
  EXPECT_EQ(Acquire("a").breaker_state, BreakerState::kClosed);
  // OPEN -> HALF_OPEN -> CLOSED reached the sink after the trip.
  const std::vector<BreakerTransition> t = sink_.transitions();
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t[1].from, BreakerState::kOpen);
  EXPECT_EQ(t[1].to, BreakerState::kHalfOpen);
  EXPECT_EQ(t[2].from, BreakerState::kHalfOpen);
  EXPECT_EQ(t[2].to, BreakerState::kClosed);
}

TEST_F(EngineBreakerTest, FailedProbesDoubleOpenTimeUpToMax) {
  PolicyConfig p = MakePolicy("a");
  WithBreaker(p, 1);
  p.breaker->max_open_duration = absl::Seconds(100);
  engine_.PutPolicy(p);
  FailCalls("a", 1);
  EXPECT_EQ(Gates("a").open_until, clock_.Now() + absl::Seconds(15));
  for (int seconds : {30, 60, 100, 100}) {
    SCOPED_TRACE(seconds);
    clock_.SetTime(Gates("a").open_until);
    const Decision probe = Acquire("a");
    ASSERT_EQ(probe.verdict, Verdict::kAllow);
    clock_.Advance(absl::Milliseconds(200));
    EXPECT_EQ(Report("a", probe, Outcome::kFailure), BreakerState::kOpen);
    const GateStatus g = Gates("a");
    EXPECT_EQ(g.open_until, clock_.Now() + absl::Seconds(seconds));
    EXPECT_EQ(sink_.transitions().back().open_until, g.open_until);
    EXPECT_THAT(sink_.transitions().back().cause, HasSubstr("probe"));
  }
  // A successful round resets the open time.
  clock_.SetTime(Gates("a").open_until);
  Report("a", Acquire("a"), Outcome::kSuccess);
  ASSERT_EQ(Gates("a").breaker_state, BreakerState::kClosed);
  FailCalls("a", 1);
  EXPECT_EQ(Gates("a").open_until, clock_.Now() + absl::Seconds(15));
}

TEST_F(EngineBreakerTest, CancelledProbeFreesItsSlot) {
  PolicyConfig p = MakePolicy("a");
  WithBreaker(p, 1);
  engine_.PutPolicy(p);
  FailCalls("a", 1);
  clock_.Advance(absl::Seconds(15));
  const Decision probe = Acquire("a");
  ASSERT_EQ(probe.verdict, Verdict::kAllow);
  EXPECT_EQ(Acquire("a").reason, Reason::kProbeLimit);
  EXPECT_EQ(Report("a", probe, Outcome::kCancelled), BreakerState::kHalfOpen);
  const Decision second = Acquire("a");
  EXPECT_EQ(second.verdict, Verdict::kAllow);
  EXPECT_EQ(Report("a", second, Outcome::kSuccess), BreakerState::kClosed);
}

TEST_F(EngineBreakerTest, LostProbeExpiresAsTimeoutAndReopens) {
  PolicyConfig p = MakePolicy("a");
  p.call_timeout = absl::Seconds(2);
  WithBreaker(p, 1);
  engine_.PutPolicy(p);
  FailCalls("a", 1);
  clock_.Advance(absl::Seconds(15));
  ASSERT_EQ(Acquire("a").verdict, Verdict::kAllow);  // never reported
  clock_.Advance(absl::Seconds(4) - absl::Milliseconds(1));
  engine_.Sweep();
  EXPECT_EQ(Gates("a").breaker_state, BreakerState::kHalfOpen);
  clock_.Advance(absl::Milliseconds(1));
  engine_.Sweep();
  const GateStatus g = Gates("a");
  EXPECT_EQ(g.breaker_state, BreakerState::kOpen);
  EXPECT_EQ(g.probes_in_flight, 0u);
  EXPECT_EQ(g.open_until, clock_.Now() + absl::Seconds(30));
  EXPECT_EQ(Outcomes(Inspect("a").counters, Outcome::kTimeout), 1u);
}

TEST_F(EngineBreakerTest, UnreportedProbeOfACallerThatMayNotReportFails) {
  // Otherwise probes taken by Envoy's rate-limit calls, which nobody
  // reports, would free their slot on expiry and hold HALF_OPEN for good.
  PolicyConfig p = MakePolicy("a");
  WithBreaker(p, 1);
  engine_.PutPolicy(p);
  FailCalls("a", 1);
  clock_.Advance(absl::Seconds(15));
  absl::StatusOr<Decision> probe =
      engine_.Acquire("a", "", 1, Unreported::kRelease);
  ASSERT_TRUE(probe.ok());
  ASSERT_EQ(probe->verdict, Verdict::kAllow);
  ASSERT_FALSE(probe->permit_id.empty());
  clock_.Advance(absl::Seconds(2));
  engine_.Sweep();
  const GateStatus g = Gates("a");
  EXPECT_EQ(g.breaker_state, BreakerState::kOpen);
  EXPECT_EQ(g.probes_in_flight, 0u);
  EXPECT_EQ(g.open_until, clock_.Now() + absl::Seconds(30));
}

TEST_F(EngineBreakerTest, OwnRefusalsNeverFeedTheBreaker) {
  PolicyConfig p = MakePolicy("a");
  WithBucket(p, 1, 2, absl::Hours(1));
  WithConcurrency(p, 1);
  WithBreaker(p, 1);
  p.breaker->failure_rate_threshold = 0.1;
  p.breaker->minimum_calls = 1;
  engine_.PutPolicy(p);
  const Decision held = Acquire("a");
  ASSERT_EQ(held.verdict, Verdict::kAllow);
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(Acquire("a").reason, Reason::kConcurrencyLimited);
  }
  Report("a", held, Outcome::kSuccess);
  Report("a", Acquire("a"), Outcome::kSuccess);
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(Acquire("a").reason, Reason::kRateLimited);
  }
  const GateStatus g = Gates("a");
  EXPECT_EQ(g.breaker_state, BreakerState::kClosed);
  EXPECT_EQ(g.window.calls, 2);
  EXPECT_EQ(g.window.failures, 0);
  EXPECT_EQ(sink_.size(), 0u);
}

TEST_F(EngineBreakerTest, LateReportsOfPreTripCallsChangeNothing) {
  PolicyConfig p = MakePolicy("a");
  p.call_timeout = absl::Minutes(1);  // no permit expires in this test
  WithConcurrency(p, 10);
  WithBreaker(p, 2);
  engine_.PutPolicy(p);
  std::vector<Decision> calls;
  for (int i = 0; i < 6; ++i) calls.push_back(Acquire("a"));
  Report("a", calls[0], Outcome::kFailure);
  Report("a", calls[1], Outcome::kFailure);
  const GateStatus tripped = Gates("a");
  ASSERT_EQ(tripped.breaker_state, BreakerState::kOpen);
  clock_.Advance(absl::Seconds(1));
  EXPECT_EQ(Report("a", calls[2], Outcome::kFailure), BreakerState::kOpen);
  EXPECT_EQ(Report("a", calls[3], Outcome::kTimeout), BreakerState::kOpen);
  GateStatus g = Gates("a");
  EXPECT_EQ(g.open_until, tripped.open_until);
  EXPECT_EQ(g.breaker_generation, tripped.breaker_generation);
  EXPECT_EQ(sink_.size(), 1u);
  // Successes of pre-trip calls do not close a HALF_OPEN breaker either.
  clock_.SetTime(tripped.open_until);
  EXPECT_EQ(Report("a", calls[4], Outcome::kSuccess), BreakerState::kHalfOpen);
  EXPECT_EQ(Report("a", calls[5], Outcome::kSuccess), BreakerState::kHalfOpen);
  g = Gates("a");
  EXPECT_EQ(g.in_flight, 0u);  // the slots came back all the same
  EXPECT_EQ(Acquire("a").verdict, Verdict::kAllow);  // the probe slot is free
  // They are real outcomes, not stale reports.
  const DecisionCounters c = Inspect("a").counters;
  EXPECT_EQ(c.stale_reports, 0u);
  EXPECT_EQ(Outcomes(c, Outcome::kFailure), 3u);
  EXPECT_EQ(Outcomes(c, Outcome::kSuccess), 2u);
}

TEST_F(EngineBreakerTest, ForceOpenRefusesUntilAuto) {
  PolicyConfig p = MakePolicy("a");
  WithBreaker(p, 3);
  engine_.PutPolicy(p);
  ASSERT_TRUE(
      engine_.SetOverride("a", BreakerOverride::kForceOpen, "maintenance")
          .ok());
  Decision d = Acquire("a");
  EXPECT_EQ(d.verdict, Verdict::kReject);
  EXPECT_EQ(d.reason, Reason::kCircuitOpen);
  EXPECT_EQ(d.http_status, 503);
  EXPECT_EQ(d.breaker_state, BreakerState::kForcedOpen);
  clock_.Advance(absl::Hours(1));
  EXPECT_EQ(Acquire("a").verdict, Verdict::kReject);
  ASSERT_FALSE(sink_.transitions().empty());
  EXPECT_EQ(sink_.transitions().back().to, BreakerState::kForcedOpen);
  EXPECT_EQ(Gates("a").override_mode, BreakerOverride::kForceOpen);

  ASSERT_TRUE(engine_.SetOverride("a", BreakerOverride::kAuto, "done").ok());
  d = Acquire("a");
  EXPECT_EQ(d.verdict, Verdict::kAllow);
  EXPECT_EQ(d.breaker_state, BreakerState::kClosed);
  EXPECT_EQ(sink_.transitions().back().to, BreakerState::kClosed);
}

TEST_F(EngineBreakerTest, ForceClosedAdmitsDespiteFailures) {
  PolicyConfig p = MakePolicy("a");
  WithBreaker(p, 1);
  engine_.PutPolicy(p);
  ASSERT_TRUE(
      engine_.SetOverride("a", BreakerOverride::kForceClosed, "ops").ok());
  for (int i = 0; i < 20; ++i) {
    const Decision d = Acquire("a");
    ASSERT_EQ(d.verdict, Verdict::kAllow) << i;
    EXPECT_EQ(d.breaker_state, BreakerState::kForcedClosed);
    EXPECT_EQ(Report("a", d, Outcome::kFailure), BreakerState::kForcedClosed);
  }
  ASSERT_TRUE(engine_.SetOverride("a", BreakerOverride::kAuto, "ops").ok());
  EXPECT_EQ(Gates("a").breaker_state, BreakerState::kClosed);
  FailCalls("a", 1);
  EXPECT_EQ(Gates("a").breaker_state, BreakerState::kOpen);
}

TEST_F(EngineBreakerTest, OverrideErrors) {
  engine_.PutPolicy(MakePolicy("nobreaker"));
  EXPECT_EQ(
      engine_.SetOverride("missing", BreakerOverride::kForceOpen, "").code(),
      absl::StatusCode::kNotFound);
  EXPECT_EQ(
      engine_.SetOverride("nobreaker", BreakerOverride::kForceOpen, "").code(),
      absl::StatusCode::kFailedPrecondition);
}

TEST_F(EngineBreakerTest, OverrideCoversEveryKeyIncludingNewOnes) {
  PolicyConfig p = MakePolicy("a");
  WithBreaker(p, 1);
  p.per_key = true;
  engine_.PutPolicy(p);
  Acquire("a", "k1");
  ASSERT_TRUE(engine_.SetOverride("a", BreakerOverride::kForceOpen, "").ok());
  EXPECT_EQ(Acquire("a", "k1").reason, Reason::kCircuitOpen);
  EXPECT_EQ(Acquire("a", "k2").reason, Reason::kCircuitOpen);
  ASSERT_TRUE(engine_.SetOverride("a", BreakerOverride::kAuto, "").ok());
  EXPECT_EQ(Acquire("a", "k1").verdict, Verdict::kAllow);
  EXPECT_EQ(Acquire("a", "k2").verdict, Verdict::kAllow);
}

TEST_F(EngineBreakerTest, OverrideSurvivesPolicyEdit) {
  PolicyConfig p = MakePolicy("a");
  WithBreaker(p, 1);
  engine_.PutPolicy(p);
  ASSERT_TRUE(engine_.SetOverride("a", BreakerOverride::kForceOpen, "").ok());
  p.version = 2;
  p.breaker->consecutive_failures = 3;
  engine_.PutPolicy(p);
  EXPECT_EQ(Acquire("a").reason, Reason::kCircuitOpen);
}

TEST_F(EngineBreakerTest, OpenBreakerMovesToHalfOpenOnSweep) {
  PolicyConfig p = MakePolicy("a");
  WithBreaker(p, 1);
  engine_.PutPolicy(p);
  FailCalls("a", 1);
  sink_.Clear();
  clock_.Advance(absl::Seconds(15));
  engine_.Sweep();
  ASSERT_EQ(sink_.size(), 1u);
  EXPECT_EQ(sink_.transitions()[0].to, BreakerState::kHalfOpen);
}

}  // namespace
}  // namespace sluice::core
