// SPDX-License-Identifier: Apache-2.0
#include "server/core/circuit_breaker.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/fake_clock.h"

namespace sluice::core {
namespace {

using ::sluice::testing::FakeClock;
using ::testing::HasSubstr;

struct Transition {
  BreakerState from;
  BreakerState to;
  std::string cause;
  absl::Time at;
  uint64_t generation;
  absl::Time open_until;
};

class RecordingListener : public BreakerListener {
 public:
  void OnTransition(BreakerState from, BreakerState to,
                    const std::string& cause, absl::Time at,
                    uint64_t generation, absl::Time open_until) override {
    transitions.push_back({from, to, cause, at, generation, open_until});
  }
  std::vector<Transition> transitions;
};

constexpr absl::Duration kNoLatency = absl::Milliseconds(10);

class CircuitBreakerTest : public ::testing::Test {
 protected:
  CircuitBreakerTest() {
    config_.consecutive_failures = 0;
    config_.failure_rate_threshold = 0;
    config_.window = absl::Seconds(10);
    config_.minimum_calls = 10;
    config_.open_duration = absl::Seconds(15);
    config_.max_open_duration = absl::Seconds(300);
    config_.half_open_probes = 1;
    config_.successes_to_close = 1;
  }

  CircuitBreaker Make() { return CircuitBreaker(config_, clock_.Now(), &listener_); }

  void Feed(CircuitBreaker& b, Outcome o, int times = 1,
            absl::Duration latency = kNoLatency) {
    for (int i = 0; i < times; ++i) b.Record(o, latency, 0, clock_.Now());
  }

  // Trips `b` through its consecutive-failures rule (which must be on).
  void Trip(CircuitBreaker& b) {
    Feed(b, Outcome::kFailure, config_.consecutive_failures);
    ASSERT_EQ(b.State(clock_.Now()), BreakerState::kOpen);
  }

  // Waits out the open time and fails one probe.
  void FailProbeRound(CircuitBreaker& b, Outcome failure = Outcome::kFailure) {
    clock_.SetTime(b.open_until());
    ASSERT_EQ(b.State(clock_.Now()), BreakerState::kHalfOpen);
    clock_.Advance(absl::Milliseconds(250));
    const uint64_t round = b.TryTakeProbe();
    ASSERT_NE(round, 0u);
    b.Record(failure, kNoLatency, round, clock_.Now());
    ASSERT_EQ(b.State(clock_.Now()), BreakerState::kOpen);
  }

  FakeClock clock_;
  RecordingListener listener_;
  BreakerConfig config_;
};

TEST_F(CircuitBreakerTest, StartsClosed) {
  config_.consecutive_failures = 3;
  CircuitBreaker b = Make();
  EXPECT_EQ(b.State(clock_.Now()), BreakerState::kClosed);
  EXPECT_TRUE(b.Permits(clock_.Now()));
  EXPECT_EQ(b.RetryAfter(clock_.Now()), absl::ZeroDuration());
  EXPECT_TRUE(listener_.transitions.empty());
}

TEST_F(CircuitBreakerTest, ConsecutiveFailuresTripAndSuccessResetsStreak) {
  config_.consecutive_failures = 3;
  CircuitBreaker b = Make();
  Feed(b, Outcome::kFailure, 2);
  Feed(b, Outcome::kSuccess);
  EXPECT_EQ(b.consecutive_failures(), 0u);
  Feed(b, Outcome::kFailure, 2);
  EXPECT_EQ(b.State(clock_.Now()), BreakerState::kClosed);
  EXPECT_EQ(b.consecutive_failures(), 2u);
  Feed(b, Outcome::kFailure);
  EXPECT_EQ(b.State(clock_.Now()), BreakerState::kOpen);
  EXPECT_FALSE(b.Permits(clock_.Now()));
  EXPECT_EQ(b.open_until(), clock_.Now() + absl::Seconds(15));
  EXPECT_THAT(b.trip_cause(), HasSubstr("consecutive failures"));
  ASSERT_EQ(listener_.transitions.size(), 1u);
  const Transition& t = listener_.transitions[0];
  EXPECT_EQ(t.from, BreakerState::kClosed);
  EXPECT_EQ(t.to, BreakerState::kOpen);
  EXPECT_THAT(t.cause, HasSubstr("consecutive failures"));
  EXPECT_EQ(t.at, clock_.Now());
  EXPECT_GE(t.generation, 1u);
  EXPECT_EQ(t.generation, b.generation());
  EXPECT_EQ(t.open_until, clock_.Now() + absl::Seconds(15));
}

TEST_F(CircuitBreakerTest, TimeoutCountsAsFailure) {
  config_.consecutive_failures = 3;
  CircuitBreaker b = Make();
  Feed(b, Outcome::kTimeout, 2);
  EXPECT_EQ(b.consecutive_failures(), 2u);
  const OutcomeWindow w = b.WindowCounts(clock_.Now());
  EXPECT_EQ(w.calls, 2);
  EXPECT_EQ(w.failures, 2);
  EXPECT_EQ(w.timeouts, 2);
  Feed(b, Outcome::kTimeout);
  EXPECT_EQ(b.State(clock_.Now()), BreakerState::kOpen);
}

TEST_F(CircuitBreakerTest, CancelledCountsAsNothing) {
  config_.consecutive_failures = 2;
  config_.failure_rate_threshold = 0.5;
  config_.minimum_calls = 3;
  CircuitBreaker b = Make();
  Feed(b, Outcome::kCancelled, 100);
  EXPECT_EQ(b.State(clock_.Now()), BreakerState::kClosed);
  EXPECT_EQ(b.WindowCounts(clock_.Now()).calls, 0);
  // Neither a failure nor a success: it does not break a failure streak.
  Feed(b, Outcome::kFailure);
  Feed(b, Outcome::kCancelled);
  EXPECT_EQ(b.consecutive_failures(), 1u);
  Feed(b, Outcome::kFailure);
  EXPECT_EQ(b.State(clock_.Now()), BreakerState::kOpen);
}

TEST_F(CircuitBreakerTest, FailureRateWaitsForMinimumCalls) {
  config_.failure_rate_threshold = 0.5;
  config_.minimum_calls = 10;
  CircuitBreaker b = Make();
  Feed(b, Outcome::kFailure, 9);
  EXPECT_EQ(b.State(clock_.Now()), BreakerState::kClosed);
  Feed(b, Outcome::kSuccess);  // 9 of 10 failed
  EXPECT_EQ(b.State(clock_.Now()), BreakerState::kOpen);
  EXPECT_THAT(b.trip_cause(), HasSubstr("failure rate"));
  ASSERT_EQ(listener_.transitions.size(), 1u);
  EXPECT_THAT(listener_.transitions[0].cause, HasSubstr("failure rate"));
}

// Batched successes (per-core slices) may go without a judgement only
// while no success could trip a rate rule: below minimum_calls, one that
// brings the window up to it is judged.
TEST_F(CircuitBreakerTest, SuccessesCannotTripUntilTheWindowThinsOut) {
  config_.failure_rate_threshold = 0.5;
  config_.minimum_calls = 10;
  CircuitBreaker b = Make();
  // No failures: no success can trip, ever.
  EXPECT_EQ(b.SuccessesCannotTripUntil(clock_.Now()), absl::InfiniteFuture());
  Feed(b, Outcome::kFailure, 4);  // 4 failures < 0.5 x 10
  EXPECT_EQ(b.SuccessesCannotTripUntil(clock_.Now()), absl::InfiniteFuture());
  Feed(b, Outcome::kFailure);  // 5 of 5: the 10th call may trip
  EXPECT_EQ(b.SuccessesCannotTripUntil(clock_.Now()), absl::InfinitePast());

  CircuitBreaker busy = Make();
  Feed(busy, Outcome::kSuccess, 30);
  clock_.Advance(absl::Seconds(5));
  Feed(busy, Outcome::kFailure, 6);
  Feed(busy, Outcome::kSuccess, 10);
  // 6 failures need more than 12 calls. When the 30 older successes leave
  // the 10 s window (about 5 s from now) 16 calls stay; when the 16 recent
  // ones leave (about 10 s from now) none do.
  const absl::Time until = busy.SuccessesCannotTripUntil(clock_.Now());
  EXPECT_GT(until, clock_.Now() + absl::Seconds(10));
  EXPECT_LE(until, clock_.Now() + absl::Seconds(11));
  // An override or a trip ends it.
  busy.SetOverride(BreakerOverride::kForceClosed, clock_.Now(), "test");
  EXPECT_EQ(busy.SuccessesCannotTripUntil(clock_.Now()), absl::InfinitePast());
}

TEST_F(CircuitBreakerTest, BatchedSuccessesLandInTheirBucket) {
  config_.consecutive_failures = 3;
  config_.failure_rate_threshold = 0.5;
  config_.minimum_calls = 4;
  CircuitBreaker b = Make();
  Feed(b, Outcome::kFailure, 2);
  const absl::Time at = clock_.Now();
  clock_.Advance(absl::Seconds(4));
  b.RecordSuccesses(6, at, clock_.Now());
  EXPECT_EQ(b.WindowCounts(clock_.Now()).calls, 8);
  EXPECT_EQ(b.totals().calls, 8u);
  // The run of failures was broken.
  Feed(b, Outcome::kFailure, 2);
  EXPECT_EQ(b.State(clock_.Now()), BreakerState::kClosed);
  // They leave the window with the bucket they happened in.
  clock_.Advance(absl::Seconds(7));
  EXPECT_EQ(b.WindowCounts(clock_.Now()).calls, 2);
  // Successes older than the window count in the totals only.
  b.RecordSuccesses(3, at, clock_.Now());
  EXPECT_EQ(b.WindowCounts(clock_.Now()).calls, 2);
}

TEST_F(CircuitBreakerTest, FailureRateTripsAtThreshold) {
  config_.failure_rate_threshold = 0.5;
  config_.minimum_calls = 10;
  CircuitBreaker b = Make();
  Feed(b, Outcome::kSuccess, 6);
  Feed(b, Outcome::kFailure, 4);  // 40%
  EXPECT_EQ(b.State(clock_.Now()), BreakerState::kClosed);
  Feed(b, Outcome::kFailure);  // 5 / 11
  EXPECT_EQ(b.State(clock_.Now()), BreakerState::kClosed);
  Feed(b, Outcome::kFailure);  // 6 / 12 = 50%
  EXPECT_EQ(b.State(clock_.Now()), BreakerState::kOpen);
}

TEST_F(CircuitBreakerTest, FailureRateOnlyCountsTheWindow) {
  config_.failure_rate_threshold = 0.5;
  config_.minimum_calls = 10;
  CircuitBreaker b = Make();
  Feed(b, Outcome::kFailure, 6);
  // Window plus one bucket later those six are gone.
  clock_.Advance(absl::Seconds(12));
  EXPECT_EQ(b.WindowCounts(clock_.Now()).calls, 0);
  Feed(b, Outcome::kSuccess, 10);
  Feed(b, Outcome::kFailure, 4);  // 4 / 14 here; 10 / 20 if the six counted
  EXPECT_EQ(b.State(clock_.Now()), BreakerState::kClosed);
  const OutcomeWindow w = b.WindowCounts(clock_.Now());
  EXPECT_EQ(w.calls, 14);
  EXPECT_EQ(w.failures, 4);
}

TEST_F(CircuitBreakerTest, SlowCallRateTrips) {
  config_.slow_call_duration = absl::Seconds(1);
  config_.slow_call_rate_threshold = 0.5;
  config_.minimum_calls = 4;
  CircuitBreaker b = Make();
  // Exactly the slow-call duration is not slow.
  Feed(b, Outcome::kSuccess, 4, absl::Seconds(1));
  EXPECT_EQ(b.State(clock_.Now()), BreakerState::kClosed);
  EXPECT_EQ(b.WindowCounts(clock_.Now()).slow, 0);
  Feed(b, Outcome::kSuccess, 3, absl::Milliseconds(1001));  // 3 / 7
  EXPECT_EQ(b.State(clock_.Now()), BreakerState::kClosed);
  EXPECT_EQ(b.WindowCounts(clock_.Now()).slow, 3);
  Feed(b, Outcome::kSuccess, 1, absl::Seconds(5));  // 4 / 8
  EXPECT_EQ(b.State(clock_.Now()), BreakerState::kOpen);
  EXPECT_THAT(b.trip_cause(), HasSubstr("slow"));
  ASSERT_EQ(listener_.transitions.size(), 1u);
  EXPECT_THAT(listener_.transitions[0].cause, HasSubstr("slow"));
}

TEST_F(CircuitBreakerTest, NoRuleNoTrip) {
  CircuitBreaker b = Make();
  Feed(b, Outcome::kFailure, 1000);
  Feed(b, Outcome::kSuccess, 10, absl::Hours(1));
  EXPECT_EQ(b.State(clock_.Now()), BreakerState::kClosed);
}

TEST_F(CircuitBreakerTest, OpenBecomesHalfOpenAfterOpenDuration) {
  config_.consecutive_failures = 1;
  CircuitBreaker b = Make();
  Trip(b);
  const absl::Time tripped = clock_.Now();
  clock_.Advance(absl::Seconds(5));
  EXPECT_EQ(b.RetryAfter(clock_.Now()), absl::Seconds(10));
  clock_.SetTime(tripped + absl::Seconds(15) - absl::Nanoseconds(1));
  EXPECT_EQ(b.State(clock_.Now()), BreakerState::kOpen);
  clock_.SetTime(tripped + absl::Seconds(15));
  EXPECT_EQ(b.State(clock_.Now()), BreakerState::kHalfOpen);
  EXPECT_TRUE(b.Permits(clock_.Now()));
  ASSERT_EQ(listener_.transitions.size(), 2u);
  EXPECT_EQ(listener_.transitions[1].from, BreakerState::kOpen);
  EXPECT_EQ(listener_.transitions[1].to, BreakerState::kHalfOpen);
}

TEST_F(CircuitBreakerTest, HalfOpenAdmitsExactlyProbeLimitAndClosesAfterSuccesses) {
  config_.consecutive_failures = 1;
  config_.half_open_probes = 2;
  config_.successes_to_close = 3;
  CircuitBreaker b = Make();
  Trip(b);
  clock_.Advance(absl::Seconds(15));
  ASSERT_EQ(b.State(clock_.Now()), BreakerState::kHalfOpen);
  const uint64_t p1 = b.TryTakeProbe();
  const uint64_t p2 = b.TryTakeProbe();
  EXPECT_NE(p1, 0u);
  EXPECT_NE(p2, 0u);
  EXPECT_EQ(b.TryTakeProbe(), 0u);
  EXPECT_EQ(b.probes_in_flight(), 2u);

  b.Record(Outcome::kSuccess, kNoLatency, p1, clock_.Now());
  EXPECT_EQ(b.probes_in_flight(), 1u);
  b.Record(Outcome::kSuccess, kNoLatency, p2, clock_.Now());
  EXPECT_EQ(b.State(clock_.Now()), BreakerState::kHalfOpen);
  const uint64_t p3 = b.TryTakeProbe();
  ASSERT_NE(p3, 0u);
  b.Record(Outcome::kSuccess, kNoLatency, p3, clock_.Now());
  EXPECT_EQ(b.State(clock_.Now()), BreakerState::kClosed);
  EXPECT_EQ(listener_.transitions.back().from, BreakerState::kHalfOpen);
  EXPECT_EQ(listener_.transitions.back().to, BreakerState::kClosed);
  // Closing starts a fresh failure streak.
  EXPECT_EQ(b.consecutive_failures(), 0u);
}

TEST_F(CircuitBreakerTest, FailedProbesDoubleOpenTimeUpToMax) {
  config_.consecutive_failures = 2;
  CircuitBreaker b = Make();
  Trip(b);
  EXPECT_EQ(b.open_until(), clock_.Now() + absl::Seconds(15));
  uint64_t generation = b.generation();
  for (int seconds : {30, 60, 120, 240, 300, 300}) {
    SCOPED_TRACE(seconds);
    FailProbeRound(b);
    EXPECT_EQ(b.open_until(), clock_.Now() + absl::Seconds(seconds));
    EXPECT_EQ(listener_.transitions.back().from, BreakerState::kHalfOpen);
    EXPECT_EQ(listener_.transitions.back().to, BreakerState::kOpen);
    EXPECT_EQ(listener_.transitions.back().open_until, b.open_until());
    EXPECT_GT(b.generation(), generation);
    generation = b.generation();
  }
}

TEST_F(CircuitBreakerTest, TimedOutProbeReopens) {
  config_.consecutive_failures = 1;
  CircuitBreaker b = Make();
  Trip(b);
  FailProbeRound(b, Outcome::kTimeout);
  EXPECT_EQ(b.open_until(), clock_.Now() + absl::Seconds(30));
}

TEST_F(CircuitBreakerTest, SuccessfulRoundResetsOpenTime) {
  config_.consecutive_failures = 1;
  CircuitBreaker b = Make();
  Trip(b);
  FailProbeRound(b);
  FailProbeRound(b);  // next open time would be 120s
  clock_.SetTime(b.open_until());
  ASSERT_EQ(b.State(clock_.Now()), BreakerState::kHalfOpen);
  const uint64_t round = b.TryTakeProbe();
  b.Record(Outcome::kSuccess, kNoLatency, round, clock_.Now());
  ASSERT_EQ(b.State(clock_.Now()), BreakerState::kClosed);
  clock_.Advance(absl::Minutes(1));
  Feed(b, Outcome::kFailure);
  ASSERT_EQ(b.State(clock_.Now()), BreakerState::kOpen);
  EXPECT_EQ(b.open_until(), clock_.Now() + absl::Seconds(15));
}

TEST_F(CircuitBreakerTest, AnyFailedProbeReopens) {
  config_.consecutive_failures = 1;
  config_.half_open_probes = 2;
  config_.successes_to_close = 2;
  CircuitBreaker b = Make();
  Trip(b);
  clock_.Advance(absl::Seconds(15));
  ASSERT_EQ(b.State(clock_.Now()), BreakerState::kHalfOpen);
  const uint64_t p1 = b.TryTakeProbe();
  const uint64_t p2 = b.TryTakeProbe();
  b.Record(Outcome::kSuccess, kNoLatency, p1, clock_.Now());
  b.Record(Outcome::kFailure, kNoLatency, p2, clock_.Now());
  EXPECT_EQ(b.State(clock_.Now()), BreakerState::kOpen);
  EXPECT_EQ(b.open_until(), clock_.Now() + absl::Seconds(30));
}

TEST_F(CircuitBreakerTest, CancelledProbeFreesItsSlot) {
  config_.consecutive_failures = 1;
  CircuitBreaker b = Make();
  Trip(b);
  clock_.Advance(absl::Seconds(15));
  ASSERT_EQ(b.State(clock_.Now()), BreakerState::kHalfOpen);
  const uint64_t p1 = b.TryTakeProbe();
  ASSERT_NE(p1, 0u);
  EXPECT_EQ(b.TryTakeProbe(), 0u);
  b.Record(Outcome::kCancelled, kNoLatency, p1, clock_.Now());
  EXPECT_EQ(b.State(clock_.Now()), BreakerState::kHalfOpen);
  EXPECT_EQ(b.probes_in_flight(), 0u);
  const uint64_t p2 = b.TryTakeProbe();
  ASSERT_NE(p2, 0u);
  b.Record(Outcome::kSuccess, kNoLatency, p2, clock_.Now());
  EXPECT_EQ(b.State(clock_.Now()), BreakerState::kClosed);
}

TEST_F(CircuitBreakerTest, LateReportsWhileOpenChangeNothing) {
  config_.consecutive_failures = 2;
  config_.failure_rate_threshold = 0.5;
  config_.minimum_calls = 2;
  CircuitBreaker b = Make();
  Trip(b);
  const absl::Time open_until = b.open_until();
  const uint64_t generation = b.generation();
  const size_t transitions = listener_.transitions.size();
  clock_.Advance(absl::Seconds(1));
  Feed(b, Outcome::kFailure, 10);
  Feed(b, Outcome::kTimeout, 10);
  Feed(b, Outcome::kSuccess, 10);
  EXPECT_EQ(b.State(clock_.Now()), BreakerState::kOpen);
  EXPECT_EQ(b.open_until(), open_until);
  EXPECT_EQ(b.generation(), generation);
  EXPECT_EQ(listener_.transitions.size(), transitions);
}

TEST_F(CircuitBreakerTest, LateReportsWhileHalfOpenChangeNothing) {
  config_.consecutive_failures = 1;
  CircuitBreaker b = Make();
  Trip(b);
  clock_.Advance(absl::Seconds(15));
  ASSERT_EQ(b.State(clock_.Now()), BreakerState::kHalfOpen);
  Feed(b, Outcome::kSuccess, 5);  // pre-trip calls: not probes
  EXPECT_EQ(b.State(clock_.Now()), BreakerState::kHalfOpen);
  Feed(b, Outcome::kFailure, 5);
  EXPECT_EQ(b.State(clock_.Now()), BreakerState::kHalfOpen);
  EXPECT_NE(b.TryTakeProbe(), 0u);  // the slot is still free
}

TEST_F(CircuitBreakerTest, ProbeOfAnEarlierRoundIsLate) {
  config_.consecutive_failures = 1;
  config_.half_open_probes = 2;
  CircuitBreaker b = Make();
  Trip(b);
  clock_.Advance(absl::Seconds(15));
  ASSERT_EQ(b.State(clock_.Now()), BreakerState::kHalfOpen);
  const uint64_t p1 = b.TryTakeProbe();
  const uint64_t p2 = b.TryTakeProbe();
  b.Record(Outcome::kFailure, kNoLatency, p1, clock_.Now());
  ASSERT_EQ(b.State(clock_.Now()), BreakerState::kOpen);
  const absl::Time open_until = b.open_until();
  // p2 fails late: the breaker is already open for this; no second doubling.
  clock_.Advance(absl::Seconds(1));
  b.Record(Outcome::kFailure, kNoLatency, p2, clock_.Now());
  EXPECT_EQ(b.open_until(), open_until);

  clock_.SetTime(open_until);
  ASSERT_EQ(b.State(clock_.Now()), BreakerState::kHalfOpen);
  // The new round has all its slots, and a stale success cannot close it.
  const uint64_t p3 = b.TryTakeProbe();
  const uint64_t p4 = b.TryTakeProbe();
  EXPECT_NE(p3, 0u);
  EXPECT_NE(p4, 0u);
  EXPECT_NE(p3, p1);
  b.Record(Outcome::kSuccess, kNoLatency, p1, clock_.Now());
  EXPECT_EQ(b.State(clock_.Now()), BreakerState::kHalfOpen);
  b.Record(Outcome::kSuccess, kNoLatency, p3, clock_.Now());
  EXPECT_EQ(b.State(clock_.Now()), BreakerState::kClosed);
}

TEST_F(CircuitBreakerTest, ForcedOpenHoldsUntilAuto) {
  config_.consecutive_failures = 3;
  CircuitBreaker b = Make();
  b.SetOverride(BreakerOverride::kForceOpen, clock_.Now(), "maintenance");
  EXPECT_EQ(b.State(clock_.Now()), BreakerState::kForcedOpen);
  EXPECT_FALSE(b.Permits(clock_.Now()));
  EXPECT_EQ(b.override_mode(), BreakerOverride::kForceOpen);
  ASSERT_FALSE(listener_.transitions.empty());
  EXPECT_EQ(listener_.transitions.back().to, BreakerState::kForcedOpen);
  clock_.Advance(absl::Hours(2));
  EXPECT_EQ(b.State(clock_.Now()), BreakerState::kForcedOpen);
  EXPECT_FALSE(b.Permits(clock_.Now()));
  b.SetOverride(BreakerOverride::kAuto, clock_.Now(), "done");
  EXPECT_EQ(b.State(clock_.Now()), BreakerState::kClosed);
  EXPECT_TRUE(b.Permits(clock_.Now()));
  EXPECT_EQ(b.override_mode(), BreakerOverride::kAuto);
}

TEST_F(CircuitBreakerTest, ForcedClosedIgnoresFailuresAndAutoStartsFresh) {
  config_.consecutive_failures = 3;
  config_.failure_rate_threshold = 0.5;
  config_.minimum_calls = 5;
  CircuitBreaker b = Make();
  b.SetOverride(BreakerOverride::kForceClosed, clock_.Now(), "ops");
  EXPECT_EQ(b.State(clock_.Now()), BreakerState::kForcedClosed);
  Feed(b, Outcome::kFailure, 50);
  EXPECT_EQ(b.State(clock_.Now()), BreakerState::kForcedClosed);
  EXPECT_TRUE(b.Permits(clock_.Now()));
  b.SetOverride(BreakerOverride::kAuto, clock_.Now(), "ops");
  EXPECT_EQ(b.State(clock_.Now()), BreakerState::kClosed);
  EXPECT_EQ(b.consecutive_failures(), 0u);
  EXPECT_EQ(b.WindowCounts(clock_.Now()).calls, 0);
  Feed(b, Outcome::kFailure, 2);
  EXPECT_EQ(b.State(clock_.Now()), BreakerState::kClosed);
}

TEST_F(CircuitBreakerTest, AutoAfterForcingATrippedBreakerReturnsToClosed) {
  config_.consecutive_failures = 1;
  CircuitBreaker b = Make();
  Trip(b);
  b.SetOverride(BreakerOverride::kForceOpen, clock_.Now(), "ops");
  EXPECT_EQ(b.State(clock_.Now()), BreakerState::kForcedOpen);
  b.SetOverride(BreakerOverride::kAuto, clock_.Now(), "ops");
  EXPECT_EQ(b.State(clock_.Now()), BreakerState::kClosed);
  EXPECT_TRUE(b.Permits(clock_.Now()));
}

TEST_F(CircuitBreakerTest, ReconfigureKeepsStateAndCounts) {
  config_.consecutive_failures = 0;
  config_.failure_rate_threshold = 0.9;
  config_.minimum_calls = 100;
  CircuitBreaker b = Make();
  Feed(b, Outcome::kFailure, 5);
  BreakerConfig next = config_;
  next.minimum_calls = 6;
  b.Reconfigure(next, clock_.Now());
  EXPECT_EQ(b.WindowCounts(clock_.Now()).calls, 5);
  Feed(b, Outcome::kFailure);  // 6 / 6 under the new rule
  ASSERT_EQ(b.State(clock_.Now()), BreakerState::kOpen);
  const absl::Time open_until = b.open_until();
  next.open_duration = absl::Seconds(60);
  b.Reconfigure(next, clock_.Now());
  EXPECT_EQ(b.State(clock_.Now()), BreakerState::kOpen);
  EXPECT_EQ(b.open_until(), open_until);
}

}  // namespace
}  // namespace sluice::core
