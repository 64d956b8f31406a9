// SPDX-License-Identifier: Apache-2.0
// Per-core slices (CoreSlice) of a dependency without keys: calls decided on
// different cores, one thread standing for each core in turn (the engine is
// told which slice the caller is on), on a fake clock. Whatever the slices
// hold, the engine must answer as one set of gates would.
#include <cstddef>
#include <cstdint>

#include "gtest/gtest.h"
#include "server/core/engine.h"
#include "tests/core/engine_test_util.h"

namespace sluice::core {
namespace {

// The slice ("core") the test's calls come from.
size_t current_core = 0;
size_t CurrentCore() { return current_core; }

class EngineSlicesTest : public ::testing::Test {
 protected:
  EngineSlicesTest() : engine_(&clock_, Options(), &sink_) {
    current_core = 0;
  }

  static Engine::Options Options() {
    Engine::Options options = SeededOptions();
    options.slices.count = 2;
    options.slices.index = &CurrentCore;
    return options;
  }

  Decision AcquireOn(size_t core, uint32_t permits = 1) {
    current_core = core;
    absl::StatusOr<Decision> d = engine_.Acquire("dep", "", permits);
    EXPECT_TRUE(d.ok()) << d.status();
    return d.ok() ? *d : Decision{};
  }

  BreakerState ReportOn(size_t core, const Decision& d, Outcome outcome,
                        absl::Duration latency = absl::Milliseconds(5)) {
    current_core = core;
    return engine_.Report("dep", "", d.permit_id, outcome, latency);
  }

  // "dep" with only a failure-rate rule.
  void PutFailureRateBreaker(double threshold, uint32_t minimum_calls) {
    PolicyConfig p = MakePolicy("dep");
    BreakerConfig b;
    b.failure_rate_threshold = threshold;
    b.minimum_calls = minimum_calls;
    p.breaker = b;
    engine_.PutPolicy(p);
  }

  LivePolicyStatus Inspect() {
    absl::StatusOr<LivePolicyStatus> s = engine_.Inspect("dep", "");
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *s : LivePolicyStatus{};
  }

  testing::FakeClock clock_;
  testing::RecordingEventSink sink_;
  Engine engine_;
};

// A slice borrows tokens in batches; a call the other slice cannot serve
// takes them back before anything is refused, so the dependency admits
// exactly its burst, whichever cores the calls come from.
TEST_F(EngineSlicesTest, TwoCoresAdmitExactlyTheBurst) {
  PolicyConfig p = MakePolicy("dep");
  WithBucket(p, 1, 100, absl::Hours(24));
  engine_.PutPolicy(p);

  // Core 0 borrows a batch and keeps what it did not use.
  ASSERT_EQ(AcquireOn(0).verdict, Verdict::kAllow);
  int admitted = 1;
  Decision last;
  for (int i = 0; i < 200; ++i) {
    last = AcquireOn(1);
    if (last.verdict != Verdict::kAllow) break;
    ++admitted;
  }
  EXPECT_EQ(admitted, 100);
  EXPECT_EQ(last.reason, Reason::kRateLimited);
  EXPECT_GT(last.retry_after, absl::ZeroDuration());
  EXPECT_EQ(AcquireOn(0).reason, Reason::kRateLimited);
  const LivePolicyStatus s = Inspect();
  EXPECT_EQ(s.counters.allowed, 100u);
  EXPECT_EQ(s.counters.rejected, 2u);
  ExpectConserved(s.counters);
}

// Tokens out on loan count against the burst: the bucket does not refill
// into the room they took, so no moment offers more than the burst.
TEST_F(EngineSlicesTest, LentTokensCountAgainstTheBurst) {
  PolicyConfig p = MakePolicy("dep");
  WithBucket(p, 100, 100);
  engine_.PutPolicy(p);

  ASSERT_EQ(AcquireOn(0).verdict, Verdict::kAllow);  // core 0 holds a batch
  clock_.Advance(absl::Seconds(10));                 // the bucket refills
  int admitted = 0;
  for (int i = 0; i < 300; ++i) {
    if (AcquireOn(i % 2).verdict == Verdict::kAllow) ++admitted;
  }
  EXPECT_EQ(admitted, 100);
}

// The cap holds across slices, and a slot freed on one core serves the
// other.
TEST_F(EngineSlicesTest, TheCapHoldsAcrossCores) {
  PolicyConfig p = MakePolicy("dep");
  WithConcurrency(p, 3);
  engine_.PutPolicy(p);

  const Decision a = AcquireOn(0);
  const Decision b = AcquireOn(1);
  const Decision c = AcquireOn(0);
  ASSERT_EQ(a.verdict, Verdict::kAllow);
  ASSERT_EQ(b.verdict, Verdict::kAllow);
  ASSERT_EQ(c.verdict, Verdict::kAllow);
  EXPECT_EQ(AcquireOn(1).reason, Reason::kConcurrencyLimited);
  EXPECT_EQ(AcquireOn(0).reason, Reason::kConcurrencyLimited);
  EXPECT_EQ(Inspect().gates->in_flight, 3u);

  // Reported from the other core: the permit is still found and settled.
  ReportOn(1, a, Outcome::kSuccess);
  EXPECT_EQ(AcquireOn(1).verdict, Verdict::kAllow);
  EXPECT_EQ(AcquireOn(0).reason, Reason::kConcurrencyLimited);
  const LivePolicyStatus s = Inspect();
  EXPECT_EQ(s.gates->in_flight, 3u);
  EXPECT_EQ(s.gates->live_permits, 3u);
  EXPECT_EQ(s.counters.stale_reports, 0u);
  EXPECT_EQ(Outcomes(s.counters, Outcome::kSuccess), 1u);
}

// A success a slice settled before a failure elsewhere reaches the breaker
// before that failure: the consecutive rule sees the calls in order.
TEST_F(EngineSlicesTest, SuccessesReachTheBreakerBeforeLaterFailures) {
  PolicyConfig p = MakePolicy("dep");
  WithBreaker(p, 3);
  engine_.PutPolicy(p);

  const Decision f1 = AcquireOn(1);
  const Decision f2 = AcquireOn(1);
  const Decision ok = AcquireOn(0);
  const Decision f3 = AcquireOn(1);
  const Decision f4 = AcquireOn(1);
  const Decision f5 = AcquireOn(1);
  ReportOn(1, f1, Outcome::kFailure);
  ReportOn(1, f2, Outcome::kFailure);
  ReportOn(0, ok, Outcome::kSuccess);  // breaks the run of failures
  EXPECT_EQ(ReportOn(1, f3, Outcome::kFailure), BreakerState::kClosed);
  EXPECT_EQ(ReportOn(1, f4, Outcome::kFailure), BreakerState::kClosed);
  EXPECT_EQ(ReportOn(1, f5, Outcome::kFailure), BreakerState::kOpen);
  EXPECT_EQ(AcquireOn(0).reason, Reason::kCircuitOpen);
  EXPECT_EQ(AcquireOn(1).reason, Reason::kCircuitOpen);
}

// Successes a slice settled count in the window the next failure is judged
// over.
TEST_F(EngineSlicesTest, SuccessesHeldInSlicesCountWhenAFailureIsJudged) {
  PutFailureRateBreaker(0.5, 4);

  // Two successes on core 0 first: slices may hold those.
  ReportOn(0, AcquireOn(0), Outcome::kSuccess);
  ReportOn(0, AcquireOn(0), Outcome::kSuccess);
  ReportOn(1, AcquireOn(1), Outcome::kFailure);
  ASSERT_EQ(Inspect().gates->breaker_state, BreakerState::kClosed);
  // 1 failure in 3 calls; the 4th call is judged: 2 of 4 failed.
  ReportOn(1, AcquireOn(1), Outcome::kFailure);
  EXPECT_EQ(Inspect().gates->breaker_state, BreakerState::kOpen);
}

// A success can trip a rate rule when it brings the window up to
// minimum_calls. Slices never hold such a success back: the breaker judges
// it as it would without slices.
TEST_F(EngineSlicesTest, SuccessBringingTheWindowToMinimumCallsTrips) {
  PutFailureRateBreaker(0.5, 4);

  ReportOn(1, AcquireOn(1), Outcome::kFailure);
  ReportOn(1, AcquireOn(1), Outcome::kFailure);
  ReportOn(0, AcquireOn(0), Outcome::kSuccess);
  EXPECT_EQ(Inspect().gates->breaker_state, BreakerState::kClosed);
  // The 4th call, a success: 2 of 4 failed, at the threshold.
  ReportOn(0, AcquireOn(0), Outcome::kSuccess);
  EXPECT_EQ(Inspect().gates->breaker_state, BreakerState::kOpen);
}

// A slow success is the breaker's to judge at once.
TEST_F(EngineSlicesTest, SlowCallsAreJudgedAtOnce) {
  PolicyConfig p = MakePolicy("dep");
  BreakerConfig b;
  b.slow_call_duration = absl::Milliseconds(100);
  b.slow_call_rate_threshold = 0.5;
  b.minimum_calls = 2;
  p.breaker = b;
  engine_.PutPolicy(p);

  ReportOn(0, AcquireOn(0), Outcome::kSuccess, absl::Milliseconds(10));
  ReportOn(1, AcquireOn(1), Outcome::kSuccess, absl::Milliseconds(500));
  EXPECT_EQ(Inspect().gates->breaker_state, BreakerState::kOpen);
}

// A permit a slice issued and nobody reported expires as a TIMEOUT, frees
// its slot and feeds the breaker, as any permit does.
TEST_F(EngineSlicesTest, AnUnreportedSlicePermitTimesOut) {
  PolicyConfig p = MakePolicy("dep");
  WithConcurrency(p, 2);
  WithBreaker(p, 1);
  engine_.PutPolicy(p);

  ASSERT_EQ(AcquireOn(0).verdict, Verdict::kAllow);
  ASSERT_EQ(AcquireOn(0).verdict, Verdict::kAllow);  // from the slice
  clock_.Advance(3 * p.call_timeout);
  engine_.Sweep();
  const LivePolicyStatus s = Inspect();
  EXPECT_EQ(Outcomes(s.counters, Outcome::kTimeout), 2u);
  EXPECT_EQ(s.gates->in_flight, 0u);
  EXPECT_EQ(s.gates->live_permits, 0u);
  EXPECT_EQ(s.gates->breaker_state, BreakerState::kOpen);
}

// What slices decided shows in the counters and the gates' status at once.
TEST_F(EngineSlicesTest, StatusShowsWhatSlicesDecided) {
  PolicyConfig p = MakePolicy("dep");
  WithBucket(p, 1, 50, absl::Hours(24));
  WithConcurrency(p, 100);
  engine_.PutPolicy(p);

  Decision held;
  for (int i = 0; i < 10; ++i) {
    const Decision d = AcquireOn(i % 2);
    ASSERT_EQ(d.verdict, Verdict::kAllow);
    if (i == 9) {
      held = d;
    } else {
      ReportOn(i % 2, d, Outcome::kSuccess);
    }
  }
  const LivePolicyStatus s = Inspect();
  EXPECT_EQ(s.counters.acquired, 10u);
  EXPECT_EQ(s.counters.allowed, 10u);
  EXPECT_EQ(Outcomes(s.counters, Outcome::kSuccess), 9u);
  ExpectConserved(s.counters);
  EXPECT_DOUBLE_EQ(s.gates->tokens_available, 40);
  EXPECT_EQ(s.gates->in_flight, 1u);
  EXPECT_EQ(s.gates->live_permits, 1u);
  ReportOn(0, held, Outcome::kSuccess);
  EXPECT_EQ(Inspect().gates->in_flight, 0u);
}

// One core alone sees the bucket count down exactly.
TEST_F(EngineSlicesTest, OneCoreSeesRemainingCountDown) {
  PolicyConfig p = MakePolicy("dep");
  WithBucket(p, 1, 40, absl::Hours(24));
  engine_.PutPolicy(p);
  for (int left = 39; left >= 0; --left) {
    EXPECT_EQ(AcquireOn(0).remaining, left);
  }
  EXPECT_EQ(AcquireOn(0).reason, Reason::kRateLimited);
}

// A policy edit or an override takes effect on the next call from every
// core, with nothing left on loan.
TEST_F(EngineSlicesTest, EditsReachEveryCoreAtOnce) {
  PolicyConfig p = MakePolicy("dep");
  WithBucket(p, 1, 100, absl::Hours(24));
  WithBreaker(p, 5);
  engine_.PutPolicy(p);
  ASSERT_EQ(AcquireOn(0).verdict, Verdict::kAllow);
  ASSERT_EQ(AcquireOn(1).verdict, Verdict::kAllow);

  ASSERT_TRUE(engine_.SetOverride("dep", BreakerOverride::kForceOpen, "test")
                  .ok());
  EXPECT_EQ(AcquireOn(0).reason, Reason::kCircuitOpen);
  EXPECT_EQ(AcquireOn(1).reason, Reason::kCircuitOpen);
  ASSERT_TRUE(
      engine_.SetOverride("dep", BreakerOverride::kAuto, "test").ok());

  WithBucket(p, 1, 3, absl::Hours(24));
  engine_.PutPolicy(p);
  // The tokens left are cut to the new burst, loans included.
  int admitted = 0;
  for (int i = 0; i < 10; ++i) {
    if (AcquireOn(i % 2).verdict == Verdict::kAllow) ++admitted;
  }
  EXPECT_EQ(admitted, 3);
  EXPECT_DOUBLE_EQ(Inspect().gates->tokens_available, 0);
}

}  // namespace
}  // namespace sluice::core
