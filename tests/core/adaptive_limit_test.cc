// SPDX-License-Identifier: Apache-2.0
#include "server/core/adaptive_limit.h"

#include <algorithm>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/core/capacity_sim.h"
#include "tests/core/engine_test_util.h"

namespace sluice::core {
namespace {

const absl::Time kStart = testing::FakeClock::DefaultStart();

AdaptiveConcurrencyConfig Config(uint32_t initial = 10) {
  AdaptiveConcurrencyConfig a;
  a.min_limit = 1;
  a.max_limit = 1000;
  a.initial_limit = initial;
  return a;  // tolerance 1.3, window 1s, minimum_samples 10
}

PolicyConfig AdaptivePolicy(uint32_t initial = 10) {
  PolicyConfig p = MakePolicy("backend");
  p.call_timeout = absl::Seconds(2);
  p.adaptive_concurrency = Config(initial);
  return p;
}

// --- The limit on its own --------------------------------------------------

TEST(AdaptiveLimitTest, RefusesAtTheLimitAndFreesOnRelease) {
  const AdaptiveConcurrencyConfig config = Config(2);
  AdaptiveLimit limit(config, kStart);
  const uint32_t a = limit.TryTake(kStart);
  const uint32_t b = limit.TryTake(kStart);
  EXPECT_NE(a, 0u);
  EXPECT_NE(b, 0u);
  EXPECT_EQ(limit.TryTake(kStart), 0u);
  EXPECT_EQ(limit.Status().refused, 1u);
  limit.Release(a, true, absl::Milliseconds(10), kStart, nullptr);
  EXPECT_EQ(limit.in_flight(), 1u);
  EXPECT_NE(limit.TryTake(kStart), 0u);
}

// Feeds `n` calls of `latency` through the limit, all admitted at `at`
// (holding at most the limit at once), and returns whether it moved.
bool Feed(AdaptiveLimit* limit, int n, absl::Duration latency, absl::Time at,
          std::string* cause = nullptr) {
  bool moved = false;
  for (int i = 0; i < n; ++i) {
    const uint32_t epoch = limit->TryTake(at);
    if (epoch == 0) continue;
    moved |= limit->Release(epoch, true, latency, at, cause);
  }
  return moved;
}

TEST(AdaptiveLimitTest, WaitsForAWindowAndEnoughSamples) {
  const AdaptiveConcurrencyConfig config = Config(10);
  AdaptiveLimit limit(config, kStart);
  // Within the window: never judged, whatever the reports say.
  Feed(&limit, 100, absl::Milliseconds(10), kStart + absl::Milliseconds(500));
  EXPECT_FALSE(limit.judged());
  // A window later but only 9 reports (minimum_samples is 10) in it.
  AdaptiveLimit sparse(config, kStart);
  EXPECT_FALSE(Feed(&sparse, 9, absl::Milliseconds(10),
                    kStart + absl::Seconds(2)));
  EXPECT_FALSE(sparse.judged());
  EXPECT_EQ(sparse.limit(), 10u);
  // The tenth report judges it.
  Feed(&sparse, 1, absl::Milliseconds(10), kStart + absl::Seconds(2));
  EXPECT_TRUE(sparse.judged());
  EXPECT_EQ(sparse.Status().baseline, absl::Milliseconds(10));
}

TEST(AdaptiveLimitTest, StepsDownToWhatLittlesLawExplainsAtMostHalving) {
  const AdaptiveConcurrencyConfig config = Config(20);
  AdaptiveLimit limit(config, kStart);
  // Window 1 learns a 10 ms baseline; the limit was not reached, so it
  // stays.
  absl::Time t = kStart + absl::Seconds(1);
  Feed(&limit, 10, absl::Milliseconds(10), t);
  ASSERT_EQ(limit.limit(), 20u);
  // Window 2: 16 calls held in flight for the whole second, each taking
  // 20 ms (twice the baseline): 16 x 10 / 20 = 8 would be the capacity,
  // but one step is at most a halving, so 10.
  std::vector<uint32_t> held;
  for (int i = 0; i < 16; ++i) held.push_back(limit.TryTake(t));
  t += absl::Seconds(1);
  std::string cause;
  bool moved = false;
  for (uint32_t epoch : held) {
    moved |= limit.Release(epoch, true, absl::Milliseconds(20), t, &cause);
  }
  EXPECT_TRUE(moved);
  EXPECT_EQ(limit.limit(), 10u);
  EXPECT_EQ(limit.previous_limit(), 20u);
  EXPECT_NE(cause.find("mean latency 20.0ms > 1.3 x baseline 10.0ms"),
            std::string::npos)
      << cause;
  EXPECT_EQ(limit.Export().steady_limit, 10u);
}

TEST(AdaptiveLimitTest, OutcomesOfCallsAdmittedUnderAnOldLimitAreNotJudged) {
  const AdaptiveConcurrencyConfig config = Config(20);
  AdaptiveLimit limit(config, kStart);
  absl::Time t = kStart + absl::Seconds(1);
  Feed(&limit, 10, absl::Milliseconds(10), t);
  std::vector<uint32_t> old;
  for (int i = 0; i < 20; ++i) old.push_back(limit.TryTake(t));
  t += absl::Seconds(1);
  // The first 10 reports step the limit down; the other 10 were admitted
  // under the old limit and queued because of it: they do not count
  // towards the next window (which would otherwise step down again).
  for (uint32_t epoch : old) {
    limit.Release(epoch, true, absl::Milliseconds(40), t, nullptr);
  }
  ASSERT_EQ(limit.limit(), 10u);
  t += absl::Seconds(2);
  EXPECT_FALSE(limit.Tick(t, nullptr));
  EXPECT_EQ(limit.limit(), 10u);
}

TEST(AdaptiveLimitTest, GrowsOnlyWhenTheLimitWasReached) {
  const AdaptiveConcurrencyConfig config = Config(20);
  AdaptiveLimit limit(config, kStart);
  // 10 calls one after the other: never more than 1 in flight.
  Feed(&limit, 10, absl::Milliseconds(10), kStart + absl::Seconds(1));
  EXPECT_TRUE(limit.judged());
  EXPECT_EQ(limit.limit(), 20u);
  // All 20 slots taken at once, latency at the baseline: + max(1, 20/10).
  absl::Time t = kStart + absl::Seconds(2);
  std::vector<uint32_t> held;
  for (int i = 0; i < 20; ++i) held.push_back(limit.TryTake(t));
  t += absl::Seconds(1);
  std::string cause;
  for (uint32_t epoch : held) {
    limit.Release(epoch, true, absl::Milliseconds(10), t, &cause);
  }
  EXPECT_EQ(limit.limit(), 22u);
  EXPECT_NE(cause.find("limit reached"), std::string::npos) << cause;
}

TEST(AdaptiveLimitTest, StaysWithinItsBounds) {
  AdaptiveConcurrencyConfig config = Config(5);
  config.min_limit = 4;
  config.max_limit = 6;
  AdaptiveLimit limit(config, kStart);
  absl::Time t = kStart;
  for (int w = 0; w < 5; ++w) {
    t += absl::Seconds(1);
    std::vector<uint32_t> held;
    for (int i = 0; i < 10; ++i) held.push_back(limit.TryTake(t));
    for (uint32_t epoch : held) {
      if (epoch != 0) {
        limit.Release(epoch, true, absl::Milliseconds(10), t, nullptr);
      }
    }
    Feed(&limit, 10, absl::Milliseconds(10), t);
  }
  EXPECT_EQ(limit.limit(), 6u);
  // Latency ten times the baseline, again and again: down to min_limit.
  for (int w = 0; w < 5; ++w) {
    t += absl::Seconds(1);
    Feed(&limit, 10, absl::Milliseconds(100), t);
  }
  EXPECT_EQ(limit.limit(), 4u);
}

TEST(AdaptiveLimitTest, ExportAndImportCarryTheSteadyLimitAndBaseline) {
  const AdaptiveConcurrencyConfig config = Config(20);
  AdaptiveLimit learned(config, kStart);
  absl::Time t = kStart + absl::Seconds(1);
  Feed(&learned, 10, absl::Milliseconds(10), t);
  std::vector<uint32_t> held;
  for (int i = 0; i < 16; ++i) held.push_back(learned.TryTake(t));
  t += absl::Seconds(1);
  for (uint32_t epoch : held) {
    learned.Release(epoch, true, absl::Milliseconds(20), t, nullptr);
  }
  const AdaptiveLimitState saved = learned.Export();
  EXPECT_EQ(saved.steady_limit, 10u);
  EXPECT_EQ(saved.baseline, absl::Milliseconds(10));

  AdaptiveLimit fresh(config, t);
  EXPECT_EQ(fresh.limit(), 20u);
  fresh.Import(saved, t);
  EXPECT_EQ(fresh.limit(), 10u);
  EXPECT_EQ(fresh.Status().baseline, absl::Milliseconds(10));
  EXPECT_EQ(fresh.Export().steady_limit, 10u);
}

// --- Against a dependency with a known capacity ----------------------------

class AdaptiveCapacityTest : public EngineTest {
 protected:
  // 8 workers x 20 ms: 400 calls per second, 8 in flight without a queue.
  static constexpr int kWorkers = 8;
  static constexpr double kServiceMs = 20;

  // The first second at or after `from` (and before `to`) from which every
  // second up to `to` has goodput >= 80% of the capacity (a step down goes
  // to 90% of it, 7 of 8 workers here, for the second it takes) and a mean
  // latency <= 1.8 x the service time (the top of the band with 4 workers,
  // where one step is a quarter of the capacity); -1 if there is none.
  static int SettledFrom(const std::vector<CapacitySim::Second>& rows,
                         int from, int to) {
    for (int s = from; s < to; ++s) {
      bool good = true;
      for (int u = s; u < to && good; ++u) {
        good = rows[u].served >= 0.8 * std::min(rows[u].capacity,
                                                rows[u].offered) &&
               absl::ToDoubleMilliseconds(rows[u].mean_latency) <=
                   1.8 * kServiceMs;
      }
      if (good) return s;
    }
    return -1;
  }
};

TEST_F(AdaptiveCapacityTest, ConvergesToTheCapacityAndHoldsABand) {
  engine_.PutPolicy(AdaptivePolicy());
  CapacitySim sim(&clock_, &engine_, "backend", kWorkers,
                  absl::Milliseconds(kServiceMs));
  // From half the capacity to three times it over 20 s, then held.
  sim.Run(20, [](double t) { return 200 + t * 50; });
  sim.Run(40, [](double) { return 1200; });
  const auto& rows = sim.seconds();
  // Converged once the load passes the capacity (t = 4), and it stays so.
  EXPECT_LE(SettledFrom(rows, 0, 60), 6);
  EXPECT_GE(SettledFrom(rows, 0, 60), 0);
  // The band: the limit steps down to 90% of the capacity (7 of 8) and
  // climbs back to where the latency passes tolerance x baseline (1.3 x 8
  // = 10.4), one step over at most; never below 0.85 x or above 1.5 x the
  // capacity.
  double served = 0;
  for (int s = 8; s < 60; ++s) {
    served += rows[s].served;
    EXPECT_GE(rows[s].limit, 0.85 * kWorkers) << "t=" << s;
    EXPECT_LE(rows[s].limit, 1.5 * kWorkers) << "t=" << s;
    EXPECT_LE(absl::ToDoubleMilliseconds(rows[s].max_latency),
              2.1 * kServiceMs)
        << "t=" << s;
  }
  // Over the whole run, goodput is at least 93% of the capacity (a step
  // below it about every fifth window).
  EXPECT_GE(served / 52, 0.93 * 400);
  // And it keeps cycling below the capacity, which renews the baseline.
  int drained = 0;
  for (int s = 30; s < 60; ++s) drained += rows[s].limit < kWorkers;
  EXPECT_GE(drained, 3);
}

TEST_F(AdaptiveCapacityTest, ReconvergesAfterTheCapacityHalvesAndReturns) {
  engine_.PutPolicy(AdaptivePolicy());
  CapacitySim sim(&clock_, &engine_, "backend", kWorkers,
                  absl::Milliseconds(kServiceMs));
  sim.Run(30, [](double) { return 1200; });
  sim.set_workers(kWorkers / 2);
  sim.Run(30, [](double) { return 1200; });
  sim.set_workers(kWorkers);
  sim.Run(30, [](double) { return 1200; });
  const auto& rows = sim.seconds();
  // Capacity halved at t = 30: settled again within 3 s.
  // (The baseline was learned at the start under a queue, 3x the
  // capacity against a limit of 10: the steps below the capacity correct
  // it, so this holds too.)
  const int after_drop = SettledFrom(rows, 30, 60);
  EXPECT_GE(after_drop, 30);
  EXPECT_LE(after_drop, 33);
  // The capacity is back at t = 60: the limit climbs one step a window
  // (from 4 to 8), so the goodput is back above 90% within 10 s.
  const int after_return = SettledFrom(rows, 60, 90);
  EXPECT_GE(after_return, 60);
  EXPECT_LE(after_return, 70);
  // Each phase, from 3 s after its change on: >= 93% of the capacity.
  const auto goodput = [&](int from, int to) {
    double served = 0, capacity = 0;
    for (int s = from; s < to; ++s) {
      served += rows[s].served;
      capacity += rows[s].capacity;
    }
    return served / capacity;
  };
  EXPECT_GE(goodput(3, 30), 0.93);
  EXPECT_GE(goodput(33, 60), 0.93);
  EXPECT_GE(goodput(63, 90), 0.93);
}

TEST_F(AdaptiveCapacityTest, DemandBelowTheCapacityLeavesTheLimitAlone) {
  engine_.PutPolicy(AdaptivePolicy(10));
  CapacitySim sim(&clock_, &engine_, "backend", kWorkers,
                  absl::Milliseconds(kServiceMs));
  sim.Run(30, [](double) { return 200; });  // 4 in flight on average
  for (const CapacitySim::Second& row : sim.seconds()) {
    EXPECT_EQ(row.limit, 10u);
    EXPECT_EQ(row.refused, 0);
  }
  EXPECT_EQ(Gates("backend").adaptive_limit->refused, 0u);
}

TEST_F(AdaptiveCapacityTest, NoisyLatencyStaysInTheBand) {
  engine_.PutPolicy(AdaptivePolicy());
  // Service times uniformly within +-50% of 20 ms.
  CapacitySim sim(&clock_, &engine_, "backend", kWorkers,
                  absl::Milliseconds(kServiceMs), 0.5);
  sim.Run(60, [](double) { return 1200; });
  const auto& rows = sim.seconds();
  for (int s = 10; s < 60; ++s) {
    EXPECT_GE(rows[s].limit, 0.75 * kWorkers) << "t=" << s;
    EXPECT_LE(rows[s].limit, 1.8 * kWorkers) << "t=" << s;
    EXPECT_GE(rows[s].served, 0.8 * rows[s].capacity) << "t=" << s;
  }
}

TEST_F(AdaptiveCapacityTest, WarmStartBeginsAtTheSteadyLimit) {
  engine_.PutPolicy(AdaptivePolicy(2));
  CapacitySim sim(&clock_, &engine_, "backend", kWorkers,
                  absl::Milliseconds(kServiceMs));
  sim.Run(30, [](double) { return 1200; });
  const std::vector<DependencyWarmState> saved = engine_.ExportWarmState();
  ASSERT_EQ(saved.size(), 1u);
  ASSERT_EQ(saved[0].keys.size(), 1u);
  ASSERT_TRUE(saved[0].keys[0].limit.has_value());
  const uint32_t steady = saved[0].keys[0].limit->steady_limit;
  EXPECT_GE(steady, 0.85 * kWorkers);
  EXPECT_LE(steady, 1.2 * kWorkers);

  // A restarted engine with the same policy starts there, not at 2.
  testing::FakeClock clock2(clock_.Now());
  Engine restarted(&clock2, SeededOptions(7));
  restarted.PutPolicy(AdaptivePolicy(2));
  const WarmImport result = restarted.ImportWarmState(saved);
  EXPECT_EQ(result.dependencies, 1u);
  absl::StatusOr<LivePolicyStatus> st = restarted.Inspect("backend");
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->gates->adaptive_limit->limit, steady);
  CapacitySim warm(&clock2, &restarted, "backend", kWorkers,
                   absl::Milliseconds(kServiceMs));
  warm.Run(2, [](double) { return 1200; });
  EXPECT_GE(warm.seconds()[0].served, 0.8 * 400);
}

TEST_F(AdaptiveCapacityTest, ChangesAreEvents) {
  engine_.PutPolicy(AdaptivePolicy());
  CapacitySim sim(&clock_, &engine_, "backend", kWorkers,
                  absl::Milliseconds(kServiceMs));
  sim.Run(15, [](double) { return 1200; });
  const std::vector<AdaptiveChange> changes = sink_.changes();
  ASSERT_FALSE(changes.empty());
  bool down = false;
  for (const AdaptiveChange& c : changes) {
    EXPECT_EQ(c.dependency, "backend");
    EXPECT_EQ(c.kind, AdaptiveChange::Kind::kLimit);
    EXPECT_NE(c.from, c.to);
    EXPECT_FALSE(c.cause.empty());
    down |= c.to < c.from;
  }
  EXPECT_TRUE(down);
  // Every event matches the limit it left behind.
  EXPECT_EQ(changes.back().to, Gates("backend").adaptive_limit->limit);
}

TEST_F(AdaptiveCapacityTest, EveryMoveHasACauseWithTheThrottleToo) {
  // With the throttle after the limit, a call the throttle refuses gives
  // its adaptive slot back, which may judge a window: that move is
  // explained as well.
  PolicyConfig p = AdaptivePolicy();
  p.adaptive_throttle = AdaptiveThrottleConfig{};
  engine_.PutPolicy(p);
  CapacitySim sim(&clock_, &engine_, "backend", kWorkers,
                  absl::Milliseconds(kServiceMs));
  sim.Run(20, [](double) { return 1200; });
  ASSERT_FALSE(sink_.changes().empty());
  for (const AdaptiveChange& c : sink_.changes()) {
    EXPECT_FALSE(c.cause.empty()) << c.from << " -> " << c.to;
  }
}

TEST(AdaptiveLimitStaleTest, AWindowThatCannotBeJudgedStartsOver) {
  const AdaptiveConcurrencyConfig config = Config(2);
  AdaptiveLimit limit(config, kStart);
  // The limit is reached once, with too few reports to judge.
  const uint32_t a = limit.TryTake(kStart);
  const uint32_t b = limit.TryTake(kStart);
  limit.Release(a, true, absl::Milliseconds(10), kStart, nullptr);
  limit.Release(b, true, absl::Milliseconds(10), kStart, nullptr);
  // 20 s later (past 10 windows) the old window is dropped: the reports
  // that follow, one at a time, do not raise the limit on that old
  // "reached".
  const absl::Time later = kStart + absl::Seconds(20);
  EXPECT_FALSE(limit.Tick(later, nullptr));
  Feed(&limit, 10, absl::Milliseconds(10), later + absl::Seconds(1));
  EXPECT_TRUE(limit.judged());
  EXPECT_EQ(limit.limit(), 2u);
}

TEST(AdaptiveLimitStaleTest, ImportRefusesWhatCouldNotHaveBeenLearned) {
  const AdaptiveConcurrencyConfig config = Config(10);
  AdaptiveLimit limit(config, kStart);
  EXPECT_FALSE(limit.Import({0, absl::Milliseconds(5)}, kStart));
  EXPECT_FALSE(limit.Import({5, -absl::Milliseconds(5)}, kStart));
  EXPECT_FALSE(limit.Import({5, absl::InfiniteDuration()}, kStart));
  EXPECT_EQ(limit.limit(), 10u);
  EXPECT_FALSE(limit.judged());
  EXPECT_TRUE(limit.Import({5, absl::Milliseconds(5)}, kStart));
  EXPECT_EQ(limit.limit(), 5u);
}

TEST_F(AdaptiveCapacityTest, PerKeyStateComesBackInTheSameLruOrder) {
  PolicyConfig p = AdaptivePolicy(4);
  p.per_key = true;
  p.max_keys = 3;
  p.digest = 5;
  engine_.PutPolicy(p);
  // Keys a, b, c each judge a window; c is the most recently used.
  for (const char* key : {"a", "b", "c"}) {
    for (int i = 0; i < 10; ++i) {
      absl::StatusOr<Decision> d = engine_.Acquire("backend", key, 1);
      ASSERT_TRUE(d.ok());
      engine_.Report("backend", key, d->permit_id, Outcome::kSuccess,
                     absl::Milliseconds(10));
    }
    clock_.Advance(absl::Seconds(1));
    absl::StatusOr<Decision> d = engine_.Acquire("backend", key, 1);
    engine_.Report("backend", key, d->permit_id, Outcome::kSuccess,
                   absl::Milliseconds(10));
  }
  const std::vector<DependencyWarmState> saved = engine_.ExportWarmState();
  ASSERT_EQ(saved.size(), 1u);
  ASSERT_EQ(saved[0].keys.size(), 3u);
  EXPECT_EQ(saved[0].keys[0].key, "c");

  Engine restarted(&clock_, SeededOptions(3));
  restarted.PutPolicy(p);
  EXPECT_EQ(restarted.ImportWarmState(saved).keys, 3u);
  // A new key evicts the least recently used, "a", not the hottest, "c".
  ASSERT_TRUE(restarted.Acquire("backend", "d", 1).ok());
  EXPECT_FALSE(restarted.Inspect("backend", "a")->gates.has_value());
  EXPECT_TRUE(restarted.Inspect("backend", "c")->gates.has_value());
}

TEST_F(AdaptiveCapacityTest, RefusalsAreAdaptiveThrottledAndFollowTheFallback) {
  PolicyConfig p = AdaptivePolicy(1);
  engine_.PutPolicy(p);
  const Decision first = Acquire("backend");
  EXPECT_EQ(first.verdict, Verdict::kAllow);
  Decision second = Acquire("backend");
  EXPECT_EQ(second.verdict, Verdict::kReject);
  EXPECT_EQ(second.reason, Reason::kAdaptiveThrottled);
  EXPECT_EQ(second.http_status, 503);
  WithFallback(p, Bit(Reason::kAdaptiveThrottled));
  engine_.PutPolicy(p);
  second = Acquire("backend");
  EXPECT_EQ(second.verdict, Verdict::kDegrade);
  EXPECT_EQ(second.reason, Reason::kAdaptiveThrottled);
  ExpectConserved(Inspect("backend").counters);
}

TEST_F(AdaptiveCapacityTest, TheTighterOfTheStaticAndAdaptiveCapsDecides) {
  PolicyConfig p = AdaptivePolicy(5);
  WithConcurrency(p, 3);
  engine_.PutPolicy(p);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(Acquire("backend").verdict, Verdict::kAllow);
  Decision d = Acquire("backend");
  EXPECT_EQ(d.reason, Reason::kConcurrencyLimited);
  // The static cap refused first: the adaptive limit holds only 3.
  EXPECT_EQ(Gates("backend").adaptive_limit->in_flight, 3u);

  p.concurrency->max_in_flight = 10;
  engine_.PutPolicy(p);
  for (int i = 0; i < 2; ++i) EXPECT_EQ(Acquire("backend").verdict, Verdict::kAllow);
  d = Acquire("backend");
  EXPECT_EQ(d.reason, Reason::kAdaptiveThrottled);
  // The adaptive refusal gave the static slot back.
  EXPECT_EQ(Gates("backend").in_flight, 5u);
}

TEST_F(AdaptiveCapacityTest, ReportsOfALimitThePolicyDroppedFreeNothingNew) {
  PolicyConfig p = AdaptivePolicy(1);
  engine_.PutPolicy(p);
  const Decision old = Acquire("backend");
  ASSERT_EQ(old.verdict, Verdict::kAllow);
  // The block goes and comes back: a new limit of 1, taken by a new call.
  PolicyConfig without = p;
  without.adaptive_concurrency.reset();
  engine_.PutPolicy(without);
  engine_.PutPolicy(p);
  const Decision fresh = Acquire("backend");
  ASSERT_EQ(fresh.verdict, Verdict::kAllow);
  // The old call's report does not free the new call's slot.
  Report("backend", old, Outcome::kSuccess);
  EXPECT_EQ(Gates("backend").adaptive_limit->in_flight, 1u);
  EXPECT_EQ(Acquire("backend").reason, Reason::kAdaptiveThrottled);
  Report("backend", fresh, Outcome::kSuccess);
  EXPECT_EQ(Gates("backend").adaptive_limit->in_flight, 0u);
}

TEST_F(AdaptiveCapacityTest, ExpiredPermitsTeachNoLatency) {
  // A caller that never reports: its permits expire after 2 x call_timeout
  // (4 s), as TIMEOUTs. Their age is no latency anyone measured, so the
  // limit neither learns a baseline from them nor moves.
  engine_.PutPolicy(AdaptivePolicy(20));
  for (int round = 0; round < 5; ++round) {
    for (int i = 0; i < 20; ++i) {
      EXPECT_EQ(Acquire("backend").verdict, Verdict::kAllow);
    }
    clock_.Advance(absl::Seconds(5));
    engine_.Sweep();
  }
  const AdaptiveLimitStatus s = *Gates("backend").adaptive_limit;
  EXPECT_EQ(s.in_flight, 0u);
  EXPECT_EQ(s.limit, 20u);
  EXPECT_EQ(s.baseline, absl::ZeroDuration());
  EXPECT_EQ(Outcomes(Inspect("backend").counters, Outcome::kTimeout), 100u);
}

TEST_F(AdaptiveCapacityTest, UnreportedPermitsFreeTheirSlotWhenTheyExpire) {
  engine_.PutPolicy(AdaptivePolicy(1));
  EXPECT_EQ(Acquire("backend").verdict, Verdict::kAllow);
  EXPECT_EQ(Acquire("backend").reason, Reason::kAdaptiveThrottled);
  clock_.Advance(absl::Seconds(5));  // past 2 x call_timeout
  engine_.Sweep();
  EXPECT_EQ(Gates("backend").adaptive_limit->in_flight, 0u);
  EXPECT_EQ(Acquire("backend").verdict, Verdict::kAllow);
}

TEST_F(AdaptiveCapacityTest, TicksCarryWarmStateAndAFreshReplicaStartsFromIt) {
  Engine::Options options = SeededOptions();
  options.cluster = true;
  Engine learned(&clock_, options);
  PolicyConfig p = AdaptivePolicy(2);
  p.digest = 77;
  learned.PutPolicy(p);
  CapacitySim sim(&clock_, &learned, "backend", kWorkers,
                  absl::Milliseconds(kServiceMs));
  sim.Run(20, [](double) { return 1200; });
  std::vector<DependencyTick> ticks = learned.CollectTick(absl::Seconds(1));
  ASSERT_EQ(ticks.size(), 1u);
  EXPECT_EQ(ticks[0].policy_digest, 77u);
  ASSERT_TRUE(ticks[0].adaptive.has_value());
  const AdaptiveLimitState steady = *ticks[0].adaptive;
  EXPECT_GE(steady.steady_limit, 0.85 * kWorkers);
  EXPECT_NEAR(absl::ToDoubleMilliseconds(steady.baseline), kServiceMs, 2);
  EXPECT_FALSE(ticks[0].baseline.has_value());  // no breaker

  // The store hands the others' view to a replica that just started: it
  // takes it. One that has judged a window keeps its own.
  Engine fresh(&clock_, options, &sink_);
  fresh.PutPolicy(p);
  DependencyUpdate update;
  update.name = "backend";
  update.cluster_adaptive = steady;
  fresh.ApplyTick({update});
  absl::StatusOr<LivePolicyStatus> st = fresh.Inspect("backend");
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->gates->adaptive_limit->limit, steady.steady_limit);
  ASSERT_FALSE(sink_.changes().empty());
  EXPECT_EQ(sink_.changes().back().cause,
            "started from the other replicas' steady limit");
  // Only once: the next ticks' views leave it to its own judgement.
  AdaptiveLimitState later = steady;
  later.steady_limit = steady.steady_limit + 5;
  update.cluster_adaptive = later;
  fresh.ApplyTick({update});
  st = fresh.Inspect("backend");
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->gates->adaptive_limit->limit, steady.steady_limit);

  AdaptiveLimitState other = steady;
  other.steady_limit = 50;
  update.cluster_adaptive = other;
  learned.ApplyTick({update});
  st = learned.Inspect("backend");
  ASSERT_TRUE(st.ok());
  EXPECT_NE(st->gates->adaptive_limit->limit, 50u);
}

}  // namespace
}  // namespace sluice::core
