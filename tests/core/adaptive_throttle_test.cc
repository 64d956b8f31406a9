// SPDX-License-Identifier: Apache-2.0
#include "server/core/adaptive_throttle.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/core/engine_test_util.h"

namespace sluice::core {
namespace {

const absl::Time kStart = testing::FakeClock::DefaultStart();

AdaptiveThrottleConfig Config(double k = 2, uint32_t minimum = 20) {
  AdaptiveThrottleConfig c;
  c.window = absl::Seconds(10);
  c.k = k;
  c.minimum_requests = minimum;
  return c;
}

TEST(AdaptiveThrottleTest, NothingIsRefusedWhileTheDependencyAccepts) {
  const AdaptiveThrottleConfig config = Config();
  AdaptiveThrottle throttle(config);
  absl::Time t = kStart;
  double p = 0;
  for (int i = 0; i < 1000; ++i) {
    EXPECT_FALSE(throttle.Refuse(t, &p));
    throttle.Record(Outcome::kSuccess, t);
    t += absl::Milliseconds(5);
  }
  EXPECT_EQ(throttle.Probability(t), 0);
}

TEST(AdaptiveThrottleTest, ProbabilityFollowsTheSreFormula) {
  const AdaptiveThrottleConfig config = Config(2, 20);
  AdaptiveThrottle throttle(config);
  // 100 requests, 20 accepted: (100 - 2 x 20) / (100 + 1).
  for (int i = 0; i < 100; ++i) {
    throttle.Record(i < 20 ? Outcome::kSuccess : Outcome::kFailure, kStart);
  }
  EXPECT_DOUBLE_EQ(throttle.Probability(kStart), 60.0 / 101.0);
  const ThrottleStatus s = throttle.Status(kStart);
  EXPECT_EQ(s.requests, 100);
  EXPECT_EQ(s.accepts, 20);
  // Exactly at 1/k accepted: (100 - 2 x 50) <= 0, nothing refused.
  AdaptiveThrottle half(config);
  for (int i = 0; i < 100; ++i) {
    half.Record(i % 2 == 0 ? Outcome::kSuccess : Outcome::kTimeout, kStart);
  }
  EXPECT_EQ(half.Probability(kStart), 0);
  // k = 1 throttles as soon as anything fails.
  const AdaptiveThrottleConfig strict_config = Config(1, 20);
  AdaptiveThrottle strict(strict_config);
  for (int i = 0; i < 100; ++i) {
    strict.Record(i < 90 ? Outcome::kSuccess : Outcome::kFailure, kStart);
  }
  // CANCELLED outcomes count neither way.
  for (int i = 0; i < 1000; ++i) strict.Record(Outcome::kCancelled, kStart);
  EXPECT_DOUBLE_EQ(strict.Probability(kStart), 10.0 / 101.0);
}

TEST(AdaptiveThrottleTest, BelowTheMinimumRequestsNothingIsRefused) {
  const AdaptiveThrottleConfig config = Config(2, 50);
  AdaptiveThrottle throttle(config);
  double p = 0;
  for (int i = 0; i < 49; ++i) {
    EXPECT_FALSE(throttle.Refuse(kStart, &p));
    throttle.Record(Outcome::kFailure, kStart);
  }
  EXPECT_EQ(throttle.Probability(kStart), 0);
  throttle.Record(Outcome::kFailure, kStart);
  EXPECT_GT(throttle.Probability(kStart), 0.9);
}

TEST(AdaptiveThrottleTest, RefusalsAreSpreadEvenly) {
  const AdaptiveThrottleConfig config = Config(2, 20);
  AdaptiveThrottle throttle(config);
  double p = 0;
  // 300 requests with 50 accepts: p = 200 / 301, about 0.66.
  for (int i = 0; i < 300; ++i) {
    throttle.Record(i < 50 ? Outcome::kSuccess : Outcome::kFailure, kStart);
  }
  // The next calls (the admitted ones unanswered yet, the refused ones
  // counted, so p creeps up) are refused in the share p says, to within
  // one call in every run of calls.
  const uint64_t refused_before = throttle.Status(kStart).refused;
  int refused = 0;
  double expected = 0;
  for (int i = 0; i < 100; ++i) {
    const bool r = throttle.Refuse(kStart, &p);
    refused += r ? 1 : 0;
    expected += p;
    EXPECT_LE(std::abs(refused - expected), 1.0) << "call " << i;
  }
  EXPECT_GE(refused, 66);
  EXPECT_EQ(throttle.Status(kStart).refused - refused_before,
            static_cast<uint64_t>(refused));
}

TEST(AdaptiveThrottleTest, ForgetsWhatLeftTheWindow) {
  const AdaptiveThrottleConfig config = Config(2, 20);
  AdaptiveThrottle throttle(config);
  for (int i = 0; i < 100; ++i) throttle.Record(Outcome::kFailure, kStart);
  EXPECT_GT(throttle.Probability(kStart), 0.9);
  EXPECT_GT(throttle.Probability(kStart + absl::Seconds(9)), 0.9);
  // A window and a bucket later, none of it counts.
  EXPECT_EQ(throttle.Probability(kStart + absl::Seconds(11)), 0);
}

// --- Through the engine -----------------------------------------------------

PolicyConfig ThrottledPolicy() {
  PolicyConfig p = MakePolicy("flaky");
  p.adaptive_throttle = Config(2, 20);
  return p;
}

class ThrottleEngineTest : public EngineTest {};

TEST_F(ThrottleEngineTest, CallsGoingThroughStayNearKTimesTheAccepts) {
  engine_.PutPolicy(ThrottledPolicy());
  // 1000 calls a second are asked for; the dependency accepts 100 a second
  // and fails the rest at once. Once the window is full, the calls let
  // through settle at about k x accepts = 200 a second.
  std::vector<int> admitted_per_second;
  int accepted_this_second = 0;
  for (int s = 0; s < 30; ++s) {
    int admitted = 0;
    accepted_this_second = 0;
    for (int i = 0; i < 1000; ++i) {
      const Decision d = Acquire("flaky");
      if (d.verdict == Verdict::kAllow) {
        ++admitted;
        const bool accept = accepted_this_second < 100;
        if (accept) ++accepted_this_second;
        Report("flaky", d, accept ? Outcome::kSuccess : Outcome::kFailure);
      } else {
        EXPECT_EQ(d.reason, Reason::kAdaptiveThrottled);
        EXPECT_EQ(d.http_status, 503);
      }
      clock_.Advance(absl::Milliseconds(1));
    }
    admitted_per_second.push_back(admitted);
  }
  for (int s = 12; s < 30; ++s) {
    EXPECT_GE(admitted_per_second[s], 180) << "t=" << s;
    EXPECT_LE(admitted_per_second[s], 220) << "t=" << s;
  }
  const GateStatus g = Gates("flaky");
  ASSERT_TRUE(g.throttle.has_value());
  EXPECT_GT(g.throttle->probability, 0.7);
  EXPECT_LT(g.throttle->probability, 0.9);
  ExpectConserved(Inspect("flaky").counters);
}

TEST_F(ThrottleEngineTest, StartAndStopAreEventsAndRefusalsFollowTheFallback) {
  PolicyConfig p = ThrottledPolicy();
  WithFallback(p, Bit(Reason::kAdaptiveThrottled));
  engine_.PutPolicy(p);
  int degraded = 0;
  for (int i = 0; i < 200; ++i) {
    const Decision d = Acquire("flaky");
    if (d.verdict == Verdict::kAllow) {
      Report("flaky", d, Outcome::kFailure);
    } else {
      EXPECT_EQ(d.verdict, Verdict::kDegrade);
      EXPECT_EQ(d.reason, Reason::kAdaptiveThrottled);
      ASSERT_NE(d.fallback(), nullptr);
      ++degraded;
    }
  }
  EXPECT_GT(degraded, 150);
  std::vector<AdaptiveChange> changes = sink_.changes();
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].kind, AdaptiveChange::Kind::kThrottleStarted);
  EXPECT_EQ(changes[0].dependency, "flaky");
  EXPECT_GT(changes[0].to, 0);
  EXPECT_EQ(changes[0].cause, "0 accepts of 20 requests over 10s: below 1/2");
  // The window passes with nothing asked: the sweep notices it stopped.
  clock_.Advance(absl::Seconds(12));
  engine_.Sweep();
  changes = sink_.changes();
  ASSERT_EQ(changes.size(), 2u);
  EXPECT_EQ(changes[1].kind, AdaptiveChange::Kind::kThrottleStopped);
  EXPECT_GT(changes[1].from, 0.5);  // the last probability refused by
  EXPECT_EQ(changes[1].to, 0);
}

TEST_F(ThrottleEngineTest, PerKeyThrottlesEachKeyOnItsOwn) {
  PolicyConfig p = ThrottledPolicy();
  p.per_key = true;
  engine_.PutPolicy(p);
  for (int i = 0; i < 100; ++i) {
    const Decision bad = Acquire("flaky", "bad");
    if (bad.verdict == Verdict::kAllow) {
      Report("flaky", bad, Outcome::kFailure, absl::Milliseconds(5), "bad");
    }
    const Decision good = Acquire("flaky", "good");
    EXPECT_EQ(good.verdict, Verdict::kAllow);
    Report("flaky", good, Outcome::kSuccess, absl::Milliseconds(5), "good");
  }
  EXPECT_GT(Gates("flaky", "bad").throttle->probability, 0.9);
  EXPECT_EQ(Gates("flaky", "good").throttle->probability, 0);
}

TEST_F(ThrottleEngineTest, ACallerThatNeverReportsIsNeverThrottled) {
  // Envoy's rate-limit filter without the reporting filter: permits expire
  // unreported, which judges nothing.
  engine_.PutPolicy(ThrottledPolicy());
  for (int i = 0; i < 2000; ++i) {
    absl::StatusOr<Decision> d =
        engine_.Acquire("flaky", "", 1, Unreported::kRelease);
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(d->verdict, Verdict::kAllow);
    clock_.Advance(absl::Milliseconds(10));
  }
  EXPECT_EQ(Gates("flaky").throttle->requests, 0);
}

TEST_F(ThrottleEngineTest, ShadowCountsButAllows) {
  PolicyConfig p = ThrottledPolicy();
  p.shadow = true;
  engine_.PutPolicy(p);
  for (int i = 0; i < 200; ++i) {
    const Decision d = Acquire("flaky");
    EXPECT_EQ(d.verdict, Verdict::kAllow);
    Report("flaky", d, Outcome::kFailure);
  }
  const LivePolicyStatus s = Inspect("flaky");
  EXPECT_GT(s.counters.shadow_refused, 150u);
  // Each call counts once, by its outcome, refused or not.
  EXPECT_EQ(Gates("flaky").throttle->requests, 200);
}

TEST_F(ThrottleEngineTest, HoveringAtOneInKAcceptsDoesNotFlap) {
  // Half the calls succeed, k = 2: the probability hovers around 0. One
  // start, and no stop while it keeps coming back within a window.
  engine_.PutPolicy(ThrottledPolicy());
  int i = 0;
  for (int ms = 0; ms < 10000; ++ms) {
    const Decision d = Acquire("flaky");
    if (d.verdict == Verdict::kAllow) {
      Report("flaky", d,
             (i++ % 2 == 1) ? Outcome::kSuccess : Outcome::kFailure);
    }
    clock_.Advance(absl::Milliseconds(1));
    if (ms % 100 == 0) engine_.Sweep();
  }
  const std::vector<AdaptiveChange> changes = sink_.changes();
  ASSERT_GE(changes.size(), 1u);
  EXPECT_LE(changes.size(), 2u);
  EXPECT_EQ(changes[0].kind, AdaptiveChange::Kind::kThrottleStarted);
}

}  // namespace
}  // namespace sluice::core
