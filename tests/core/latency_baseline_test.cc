// SPDX-License-Identifier: Apache-2.0
#include "server/core/latency_baseline.h"

#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/core/circuit_breaker.h"
#include "tests/core/engine_test_util.h"

namespace sluice::core {
namespace {

using ::testing::HasSubstr;

// A breaker whose only rule is the latency baseline: 10 s windows of 20
// calls at least, 3 windows to learn.
BreakerConfig BaselineOnly(double factor, double deviations = 0,
                           double success_drop = 0) {
  BreakerConfig b;
  b.consecutive_failures = 0;
  b.window = absl::Seconds(10);
  b.minimum_calls = 20;
  b.open_duration = absl::Seconds(5);
  LatencyBaselineConfig l;
  l.factor = factor;
  l.deviations = deviations;
  l.success_rate_drop = success_drop;
  l.warmup_windows = 3;
  l.history_windows = 30;
  b.latency_baseline = l;
  return b;
}

class Listener : public BreakerListener {
 public:
  void OnTransition(BreakerState, BreakerState to, const std::string& cause,
                    absl::Time at, uint64_t, absl::Time) override {
    if (to == BreakerState::kOpen) trips.push_back({cause, at});
  }
  struct Trip {
    std::string cause;
    absl::Time at;
  };
  std::vector<Trip> trips;
};

class LatencyBaselineTest : public ::testing::Test {
 protected:
  // `seconds` of 50 calls a second, each taking latency(i) and succeeding
  // unless fail(i).
  template <typename Latency>
  void Drive(CircuitBreaker* breaker, int seconds, Latency latency,
             double failure_share = 0) {
    for (int s = 0; s < seconds; ++s) {
      for (int i = 0; i < 50; ++i) {
        now_ += absl::Milliseconds(20);
        const bool fail = failure_share > 0 &&
                          std::uniform_real_distribution<double>(0, 1)(rng_) <
                              failure_share;
        breaker->Record(fail ? Outcome::kFailure : Outcome::kSuccess,
                        latency(), 0, now_);
      }
    }
  }
  // 20 ms, uniformly +-`spread`.
  auto Around(double ms, double spread) {
    return [this, ms, spread] {
      return absl::Microseconds(
          1000 * (ms + std::uniform_real_distribution<double>(-spread,
                                                              spread)(rng_)));
    };
  }

  absl::Time now_ = testing::FakeClock::DefaultStart();
  std::mt19937_64 rng_{7};
  Listener listener_;
};

TEST_F(LatencyBaselineTest, LearnsThenTripsWhenTheLatencyShifts) {
  const BreakerConfig config = BaselineOnly(2.0);
  CircuitBreaker breaker(config, now_, &listener_);
  Drive(&breaker, 60, Around(20, 5));
  ASSERT_TRUE(listener_.trips.empty());
  BaselineStatus s = breaker.baseline()->Status(now_);
  EXPECT_TRUE(s.ready);
  EXPECT_GE(s.learned.windows, 5u);
  EXPECT_NEAR(absl::ToDoubleMilliseconds(s.mean), 20, 0.5);
  EXPECT_NEAR(s.learned.success, 1, 1e-9);
  // The dependency slows to 60 ms: the live window's mean passes 2 x 20 ms
  // once half of it is slow.
  const absl::Time shift = now_;
  Drive(&breaker, 10, Around(60, 5));
  ASSERT_EQ(listener_.trips.size(), 1u);
  EXPECT_LE(listener_.trips[0].at - shift, absl::Seconds(6));
  EXPECT_THAT(listener_.trips[0].cause, HasSubstr("x the baseline 19."));
  EXPECT_THAT(listener_.trips[0].cause, HasSubstr("over 10s"));
  EXPECT_NE(breaker.State(now_), BreakerState::kClosed);
  EXPECT_EQ(breaker.trip_cause(), listener_.trips[0].cause);
}

TEST_F(LatencyBaselineTest, DoesNotTripOnNoise) {
  // +-50% jitter for ten minutes, against 1.5 x and 3 deviations.
  const BreakerConfig config = BaselineOnly(1.5, 3);
  CircuitBreaker breaker(config, now_, &listener_);
  Drive(&breaker, 600, Around(20, 10));
  EXPECT_TRUE(listener_.trips.empty());
  EXPECT_GE(breaker.baseline()->Status(now_).learned.windows, 55u);
}

TEST_F(LatencyBaselineTest, DoesNotTripBeforeItHasLearned) {
  const BreakerConfig config = BaselineOnly(2.0);
  CircuitBreaker breaker(config, now_, &listener_);
  Drive(&breaker, 25, Around(20, 1));  // 2 windows learned of 3
  EXPECT_FALSE(breaker.baseline()->Status(now_).ready);
  Drive(&breaker, 4, Around(100, 1));
  EXPECT_TRUE(listener_.trips.empty());
}

TEST_F(LatencyBaselineTest, NeverLearnsAWindowInWhichItTripped) {
  const BreakerConfig config = BaselineOnly(2.0);
  CircuitBreaker breaker(config, now_, &listener_);
  Drive(&breaker, 60, Around(20, 2));
  const BaselineState before = breaker.baseline()->Export();
  Drive(&breaker, 10, Around(80, 2));
  ASSERT_EQ(listener_.trips.size(), 1u);
  // Open, then HALF_OPEN: one good probe closes it.
  now_ += absl::Seconds(6);
  ASSERT_EQ(breaker.State(now_), BreakerState::kHalfOpen);
  const uint64_t round = breaker.TryTakeProbe();
  breaker.Record(Outcome::kSuccess, absl::Milliseconds(20), round, now_);
  ASSERT_EQ(breaker.State(now_), BreakerState::kClosed);
  // What was learned is what it was before the slow calls.
  const BaselineState after = breaker.baseline()->Export();
  EXPECT_EQ(after.windows, before.windows);
  EXPECT_DOUBLE_EQ(after.mean_us, before.mean_us);
  // Still slow after closing: it trips again, the baseline untouched.
  Drive(&breaker, 10, Around(80, 2));
  ASSERT_EQ(listener_.trips.size(), 2u);
  EXPECT_DOUBLE_EQ(breaker.baseline()->Export().mean_us, before.mean_us);
}

TEST_F(LatencyBaselineTest, DeviationsAloneHaveAFloorOfFivePercent) {
  // Perfectly steady 20 ms: the standard deviation is 0, counted as 1 ms.
  const BreakerConfig config = BaselineOnly(0, 3);
  CircuitBreaker breaker(config, now_, &listener_);
  const auto fixed = [](double ms) {
    return [ms] { return absl::Microseconds(1000 * ms); };
  };
  Drive(&breaker, 60, fixed(20));
  Drive(&breaker, 20, fixed(22.5));  // +2.5 sd: not beyond 3
  EXPECT_TRUE(listener_.trips.empty());
  Drive(&breaker, 20, fixed(24));  // +4 sd
  ASSERT_EQ(listener_.trips.size(), 1u);
  EXPECT_THAT(listener_.trips[0].cause, HasSubstr("sd)"));
}

TEST_F(LatencyBaselineTest, FactorAndDeviationsMustBothHold) {
  // 25 ms is many deviations of the window means above 20 ms, but not 2 x.
  const BreakerConfig config = BaselineOnly(2.0, 3);
  CircuitBreaker breaker(config, now_, &listener_);
  Drive(&breaker, 120, Around(20, 10));
  Drive(&breaker, 30, Around(25, 10));
  EXPECT_TRUE(listener_.trips.empty());
  Drive(&breaker, 30, Around(45, 10));
  EXPECT_EQ(listener_.trips.size(), 1u);
}

TEST_F(LatencyBaselineTest, TripsWhenTheSuccessRateDrops) {
  const BreakerConfig config = BaselineOnly(0, 0, 0.2);
  CircuitBreaker breaker(config, now_, &listener_);
  Drive(&breaker, 60, Around(20, 2), 0.02);
  EXPECT_TRUE(listener_.trips.empty());
  Drive(&breaker, 10, Around(20, 2), 0.4);
  ASSERT_EQ(listener_.trips.size(), 1u);
  EXPECT_THAT(listener_.trips[0].cause, HasSubstr("points below the baseline"));
}

TEST_F(LatencyBaselineTest, ExportImportAndReconfigure) {
  BreakerConfig config = BaselineOnly(2.0);
  CircuitBreaker learned(config, now_, &listener_);
  Drive(&learned, 60, Around(20, 2));
  const BaselineState state = learned.baseline()->Export();
  ASSERT_GE(state.windows, 5u);

  // A breaker that imports it judges from the first window on.
  CircuitBreaker fresh(config, now_, &listener_);
  fresh.baseline()->Import(state);
  EXPECT_TRUE(fresh.baseline()->Status(now_).ready);
  Drive(&fresh, 10, Around(80, 2));
  EXPECT_EQ(listener_.trips.size(), 1u);

  // A policy edit without the rule removes it; one with it adds it back.
  BreakerConfig without = config;
  without.latency_baseline.reset();
  learned.Reconfigure(without, now_);
  EXPECT_EQ(learned.baseline(), nullptr);
  learned.Reconfigure(config, now_);
  ASSERT_NE(learned.baseline(), nullptr);
  EXPECT_EQ(learned.baseline()->Export().windows, 0u);
}

TEST_F(LatencyBaselineTest, AShiftLateInAWindowIsNotLearned) {
  const BreakerConfig config = BaselineOnly(2.0);
  CircuitBreaker breaker(config, now_, &listener_);
  Drive(&breaker, 60, Around(20, 1));
  const BaselineState before = breaker.baseline()->Export();
  // 3 s at 20 ms then 7 s at 80 ms; the trip comes in the next window, but
  // the window in which the shift began departs when it ends, so it is not
  // learned either.
  Drive(&breaker, 3, Around(20, 1));
  Drive(&breaker, 7, Around(80, 1));
  Drive(&breaker, 3, Around(80, 1));
  EXPECT_EQ(listener_.trips.size(), 1u);
  EXPECT_EQ(breaker.baseline()->Export().windows, before.windows);
  EXPECT_NEAR(breaker.baseline()->Export().mean_us, before.mean_us, 100);
}

TEST_F(LatencyBaselineTest, ImportRefusesWhatCouldNotHaveBeenLearned) {
  const BreakerConfig config = BaselineOnly(2.0, 3);
  CircuitBreaker breaker(config, now_, &listener_);
  BaselineState nan_var{10, 20000, std::nan(""), 1};
  BaselineState negative{10, -1, 0, 1};
  BaselineState success{10, 20000, 0, 1.5};
  EXPECT_FALSE(breaker.baseline()->Import(nan_var));
  EXPECT_FALSE(breaker.baseline()->Import(negative));
  EXPECT_FALSE(breaker.baseline()->Import(success));
  EXPECT_FALSE(breaker.baseline()->Status(now_).ready);
  EXPECT_TRUE(breaker.baseline()->Import({10, 20000, 4e6, 0.99}));
  EXPECT_TRUE(breaker.baseline()->Status(now_).ready);
}

TEST_F(EngineTest, ASavedOpenBreakerStaysOpenNoLongerThanThePolicyAllows) {
  PolicyConfig p = MakePolicy("search");
  p.breaker = BaselineOnly(2.0);
  p.breaker->max_open_duration = absl::Minutes(5);
  engine_.PutPolicy(p);
  DependencyWarmState saved{"search", 0, {}};
  KeyWarmState key;
  BreakerRecord record;
  record.state = BreakerState::kOpen;
  record.open_until = clock_.Now() + absl::Hours(24 * 10);
  record.open_duration = absl::Hours(24 * 10);
  record.cause = "written under a wrong clock";
  key.breaker = record;
  BaselineState bad{10, 20000, -5, 1};
  key.baseline = bad;
  saved.keys.push_back(key);
  const WarmImport result = engine_.ImportWarmState({saved});
  EXPECT_EQ(result.invalid_keys, 1u);
  const GateStatus g = Gates("search");
  EXPECT_EQ(g.breaker_state, BreakerState::kOpen);
  EXPECT_EQ(g.open_until, clock_.Now() + absl::Minutes(5));
  EXPECT_EQ(g.current_open_duration, absl::Minutes(5));
  EXPECT_FALSE(g.baseline->ready);
}

TEST_F(EngineTest, LatencyBaselineStateAndWarmStartThroughTheEngine) {
  PolicyConfig p = MakePolicy("search");
  p.breaker = BaselineOnly(2.0);
  p.digest = 42;
  engine_.PutPolicy(p);
  for (int i = 0; i < 3000; ++i) {
    const Decision d = Acquire("search");
    Report("search", d, Outcome::kSuccess, absl::Milliseconds(20));
    clock_.Advance(absl::Milliseconds(20));
  }
  GateStatus g = Gates("search");
  ASSERT_TRUE(g.baseline.has_value());
  EXPECT_TRUE(g.baseline->ready);
  EXPECT_EQ(g.baseline->mean, absl::Milliseconds(20));
  // Trip it, then hand its state to a new engine: the breaker is still
  // OPEN there until the same time, and the baseline is learned.
  for (int i = 0; i < 300; ++i) {
    const Decision d = Acquire("search");
    if (d.verdict != Verdict::kAllow) break;
    Report("search", d, Outcome::kSuccess, absl::Milliseconds(100));
    clock_.Advance(absl::Milliseconds(20));
  }
  g = Gates("search");
  ASSERT_EQ(g.breaker_state, BreakerState::kOpen);
  const std::vector<DependencyWarmState> saved = engine_.ExportWarmState();
  ASSERT_EQ(saved.size(), 1u);
  EXPECT_EQ(saved[0].digest, 42u);
  ASSERT_EQ(saved[0].keys.size(), 1u);
  ASSERT_TRUE(saved[0].keys[0].breaker.has_value());
  ASSERT_TRUE(saved[0].keys[0].baseline.has_value());

  testing::FakeClock clock2(clock_.Now() + absl::Seconds(1));
  testing::RecordingEventSink sink2;
  Engine restarted(&clock2, SeededOptions(9), &sink2);
  restarted.PutPolicy(p);
  const WarmImport result = restarted.ImportWarmState(saved);
  EXPECT_EQ(result.dependencies, 1u);
  absl::StatusOr<LivePolicyStatus> st = restarted.Inspect("search");
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->gates->breaker_state, BreakerState::kOpen);
  EXPECT_EQ(st->gates->open_until, g.open_until);
  EXPECT_TRUE(st->gates->baseline->ready);
  ASSERT_EQ(sink2.transitions().size(), 1u);
  EXPECT_THAT(sink2.transitions()[0].cause,
              HasSubstr("(saved before a restart)"));
  // Its open time over, it probes as usual.
  clock2.Advance(absl::Seconds(20));
  absl::StatusOr<Decision> probe = restarted.Acquire("search", "", 1);
  ASSERT_TRUE(probe.ok());
  EXPECT_EQ(probe->breaker_state, BreakerState::kHalfOpen);
  EXPECT_EQ(probe->verdict, Verdict::kAllow);

  // Another digest (the policy changed meanwhile), or no such policy: the
  // state is reported and not taken.
  Engine other(&clock2, SeededOptions(10));
  PolicyConfig changed = p;
  changed.digest = 43;
  other.PutPolicy(changed);
  std::vector<DependencyWarmState> with_unknown = saved;
  with_unknown.push_back(DependencyWarmState{"gone", 1, {}});
  const WarmImport skipped = other.ImportWarmState(with_unknown);
  EXPECT_EQ(skipped.dependencies, 0u);
  EXPECT_EQ(skipped.changed, std::vector<std::string>{"search"});
  EXPECT_EQ(skipped.unknown, std::vector<std::string>{"gone"});
  absl::StatusOr<LivePolicyStatus> other_state = other.Inspect("search");
  ASSERT_TRUE(other_state.ok());
  EXPECT_EQ(other_state->gates->breaker_state, BreakerState::kClosed);
}

}  // namespace
}  // namespace sluice::core
