// SPDX-License-Identifier: Apache-2.0
// The housekeeping sweep: a shard with nothing due returns at once, and what
// is due (permit expiry, OPEN to HALF_OPEN, adaptive windows, the
// throttle's stop) still happens at the first sweep at or past its time.
// Between the sweeps these tests read nothing (Inspect would itself make
// the next sweep a full one), only what reaches the sink.
#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "server/core/engine.h"
#include "server/core/sweep_alarm.h"
#include "tests/core/engine_test_util.h"

namespace sluice::core {
namespace {

constexpr absl::Duration kSweep = absl::Milliseconds(100);

class EngineSweepTest : public EngineTest {
 protected:
  // Sweeps every kSweep for `d`, reading nothing in between.
  void SweepFor(absl::Duration d) {
    for (absl::Duration t = absl::ZeroDuration(); t < d; t += kSweep) {
      clock_.Advance(kSweep);
      engine_.Sweep();
    }
  }
};

TEST_F(EngineSweepTest, AnUnreportedPermitExpiresAtTheFirstSweepPastItsTime) {
  PolicyConfig p = MakePolicy("a");  // call_timeout 1 s: expires after 2 s
  WithBreaker(p, 1);
  engine_.PutPolicy(p);
  SweepFor(absl::Seconds(1));  // idle sweeps before the call
  const absl::Time issued = clock_.Now();
  ASSERT_EQ(Acquire("a").verdict, Verdict::kAllow);  // never reported
  SweepFor(absl::Seconds(5));
  // Its TIMEOUT tripped the breaker at the sweep at issued + 2 s.
  const std::vector<BreakerTransition> t = sink_.transitions();
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].to, BreakerState::kOpen);
  EXPECT_EQ(t[0].at, issued + absl::Seconds(2));
  EXPECT_EQ(Outcomes(Inspect("a").counters, Outcome::kTimeout), 1u);
}

TEST_F(EngineSweepTest, AnOpenBreakerProbesAtTheFirstSweepPastOpenUntil) {
  PolicyConfig p = MakePolicy("a");
  WithBreaker(p, 1);
  engine_.PutPolicy(p);
  // Another dependency with a permit out keeps the sweeps busy meanwhile.
  engine_.PutPolicy(MakePolicy("b"));
  SweepFor(absl::Milliseconds(300));
  const absl::Time tripped = clock_.Now();
  Report("a", Acquire("a"), Outcome::kFailure);
  ASSERT_EQ(Acquire("b").verdict, Verdict::kAllow);
  SweepFor(absl::Seconds(20));
  const std::vector<BreakerTransition> t = sink_.transitions();
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].to, BreakerState::kOpen);
  EXPECT_EQ(t[0].at, tripped);
  EXPECT_EQ(t[1].from, BreakerState::kOpen);
  EXPECT_EQ(t[1].to, BreakerState::kHalfOpen);
  EXPECT_EQ(t[1].at, tripped + absl::Seconds(15));
}

TEST_F(EngineSweepTest, AnAdaptiveLimitJudgesAnIdleWindowOnTime) {
  PolicyConfig p = MakePolicy("backend");
  AdaptiveConcurrencyConfig a;
  a.initial_limit = 2;  // window 1 s, 10 samples
  p.adaptive_concurrency = a;
  const absl::Time start = clock_.Now();
  engine_.PutPolicy(p);
  // Ten calls, two at a time: the limit was reached, the latency steady.
  for (int i = 0; i < 5; ++i) {
    const Decision x = Acquire("backend");
    const Decision y = Acquire("backend");
    ASSERT_EQ(x.verdict, Verdict::kAllow);
    ASSERT_EQ(y.verdict, Verdict::kAllow);
    Report("backend", x, Outcome::kSuccess, absl::Milliseconds(10));
    Report("backend", y, Outcome::kSuccess, absl::Milliseconds(10));
  }
  SweepFor(absl::Seconds(3));
  // Judged by the sweep that ended its first window, with no report since.
  const std::vector<AdaptiveChange> c = sink_.changes();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].kind, AdaptiveChange::Kind::kLimit);
  EXPECT_EQ(c[0].from, 2);
  EXPECT_EQ(c[0].to, 3);
  EXPECT_EQ(c[0].at, start + absl::Seconds(1));
}

TEST_F(EngineSweepTest, AThrottleStopsOnTimeWhenCallsStop) {
  PolicyConfig p = MakePolicy("flaky");
  p.adaptive_throttle = AdaptiveThrottleConfig{};  // 10 s window, k 2
  engine_.PutPolicy(p);
  for (int i = 0; i < 20; ++i) {
    const Decision d = Acquire("flaky");
    ASSERT_EQ(d.verdict, Verdict::kAllow) << i;
    Report("flaky", d, Outcome::kFailure);
  }
  const absl::Time last = clock_.Now();
  SweepFor(absl::Seconds(30));
  const std::vector<AdaptiveChange> c = sink_.changes();
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].kind, AdaptiveChange::Kind::kThrottleStarted);
  EXPECT_EQ(c[1].kind, AdaptiveChange::Kind::kThrottleStopped);
  // The failures' bucket leaves the window at 11 s (10 buckets of 1 s and
  // the one filling), so the sweep at 10.9 s last saw a probability above
  // 0; it must then stay 0 for a whole window.
  EXPECT_EQ(c[1].at, last + absl::Milliseconds(20900));
}

// The same calls through two engines: one sweeps as the server does, the
// other is made to sweep every shard in full each time (PeekBreaker takes
// the lock that marks a shard changed), as every sweep did before shards
// could skip. What reaches the sink, and when, must not differ.
class SweepSkipEquivalenceTest : public ::testing::Test {
 protected:
  struct Pending {
    absl::Time report_at;
    std::string dependency;
    std::string key;
    Decision decision;
    Outcome outcome;
    absl::Duration latency;
  };
  struct Side {
    explicit Side(testing::FakeClock* clock)
        : engine(clock, SeededOptions(), &sink) {}
    testing::RecordingEventSink sink;
    Engine engine;
    std::vector<Pending> pending;
  };

  static std::vector<PolicyConfig> Policies() {
    std::vector<PolicyConfig> out;
    PolicyConfig breaker = MakePolicy("breaker");
    breaker.call_timeout = absl::Milliseconds(300);
    WithBreaker(breaker, 3);
    breaker.breaker->open_duration = absl::Seconds(2);
    out.push_back(breaker);
    PolicyConfig keyed = MakePolicy("keyed");
    keyed.per_key = true;
    keyed.max_keys = 8;
    keyed.call_timeout = absl::Milliseconds(250);
    WithBreaker(keyed, 2);
    keyed.breaker->open_duration = absl::Milliseconds(1500);
    out.push_back(keyed);
    PolicyConfig adaptive = MakePolicy("adaptive");
    adaptive.call_timeout = absl::Milliseconds(500);
    AdaptiveConcurrencyConfig a;
    a.initial_limit = 4;
    a.window = absl::Milliseconds(700);
    a.minimum_samples = 5;
    adaptive.adaptive_concurrency = a;
    out.push_back(adaptive);
    PolicyConfig throttle = MakePolicy("throttle");
    throttle.call_timeout = absl::Milliseconds(400);
    AdaptiveThrottleConfig t;
    t.window = absl::Seconds(3);
    t.minimum_requests = 10;
    throttle.adaptive_throttle = t;
    out.push_back(throttle);
    PolicyConfig limited = MakePolicy("limited");
    WithBucket(limited, 50, 10);
    WithConcurrency(limited, 3);
    out.push_back(limited);
    return out;
  }

  testing::FakeClock clock_;
};

TEST_F(SweepSkipEquivalenceTest, SkippingShardsWithNothingDueChangesNothing) {
  Side skipping(&clock_), full(&clock_);
  const std::vector<PolicyConfig> policies = Policies();
  for (Side* side : {&skipping, &full}) {
    for (const PolicyConfig& p : policies) side->engine.PutPolicy(p);
  }
  std::mt19937 rng(24);
  const absl::Time start = clock_.Now();
  constexpr absl::Duration kStep = absl::Milliseconds(10);
  // Bursts of calls with long idle stretches between them.
  const auto busy = [&](absl::Duration t) {
    return t < absl::Seconds(6) ||
           (t >= absl::Seconds(20) && t < absl::Seconds(23)) ||
           (t >= absl::Seconds(41) && t < absl::Seconds(41.5));
  };
  for (absl::Duration t = absl::ZeroDuration(); t < absl::Seconds(70);
       t += kStep) {
    clock_.Advance(kStep);
    const absl::Time now = clock_.Now();
    if (busy(t)) {
      // One call a step on a random dependency, judged the same way on
      // both sides.
      const PolicyConfig& p = policies[rng() % policies.size()];
      const std::string key = p.per_key ? absl::StrCat("k", rng() % 3) : "";
      const uint32_t roll = rng() % 100;
      const Outcome outcome = roll < 45   ? Outcome::kFailure
                              : roll < 55 ? Outcome::kCancelled
                                          : Outcome::kSuccess;
      // One call in five is never reported.
      const bool lost = rng() % 5 == 0;
      const absl::Duration latency = absl::Milliseconds(5 + rng() % 200);
      for (Side* side : {&skipping, &full}) {
        absl::StatusOr<Decision> d = side->engine.Acquire(p.name, key, 1);
        ASSERT_TRUE(d.ok()) << d.status();
        if (d->permit_id.empty() || lost) continue;
        side->pending.push_back(
            {now + latency, p.name, key, *d, outcome, latency});
      }
    }
    for (Side* side : {&skipping, &full}) {
      std::vector<Pending> later;
      for (const Pending& c : side->pending) {
        if (c.report_at > now) {
          later.push_back(c);
          continue;
        }
        side->engine.Report(c.dependency, c.key, c.decision.permit_id,
                            c.outcome, c.latency);
      }
      side->pending.swap(later);
    }
    if ((now - start) % kSweep == absl::ZeroDuration()) {
      for (const PolicyConfig& p : policies) full.engine.PeekBreaker(p.name);
      full.engine.Sweep();
      skipping.engine.Sweep();
    }
  }
  // Events of one dependency keep their order; between dependencies the
  // forced side moves some breakers in PeekBreaker, before the sweep.
  const auto transitions = [](const Side& side) {
    std::vector<std::tuple<std::string, std::string, int, int, absl::Time,
                           std::string, uint64_t>>
        out;
    for (const BreakerTransition& t : side.sink.transitions()) {
      out.emplace_back(t.dependency, t.key, static_cast<int>(t.from),
                       static_cast<int>(t.to), t.at, t.cause, t.generation);
    }
    std::stable_sort(out.begin(), out.end(), [](const auto& x, const auto& y) {
      return std::tie(std::get<0>(x), std::get<1>(x)) <
             std::tie(std::get<0>(y), std::get<1>(y));
    });
    return out;
  };
  const auto changes = [](const Side& side) {
    std::vector<std::tuple<std::string, std::string, int, double, double,
                           absl::Time, std::string>>
        out;
    for (const AdaptiveChange& c : side.sink.changes()) {
      out.emplace_back(c.dependency, c.key, static_cast<int>(c.kind), c.from,
                       c.to, c.at, c.cause);
    }
    std::stable_sort(out.begin(), out.end(), [](const auto& x, const auto& y) {
      return std::tie(std::get<0>(x), std::get<1>(x)) <
             std::tie(std::get<0>(y), std::get<1>(y));
    });
    return out;
  };
  const auto skipped_transitions = transitions(skipping);
  const auto skipped_changes = changes(skipping);
  EXPECT_EQ(skipped_transitions, transitions(full));
  EXPECT_EQ(skipped_changes, changes(full));
  // The run saw each kind of timed move, or it proves little.
  const auto saw = [&](BreakerState to) {
    for (const auto& t : skipped_transitions) {
      if (std::get<3>(t) == static_cast<int>(to)) return true;
    }
    return false;
  };
  EXPECT_TRUE(saw(BreakerState::kOpen));
  EXPECT_TRUE(saw(BreakerState::kHalfOpen));
  const auto saw_change = [&](AdaptiveChange::Kind kind) {
    for (const auto& c : skipped_changes) {
      if (std::get<2>(c) == static_cast<int>(kind)) return true;
    }
    return false;
  };
  EXPECT_TRUE(saw_change(AdaptiveChange::Kind::kLimit));
  EXPECT_TRUE(saw_change(AdaptiveChange::Kind::kThrottleStarted));
  EXPECT_TRUE(saw_change(AdaptiveChange::Kind::kThrottleStopped));
  for (const PolicyConfig& p : policies) {
    const absl::StatusOr<LivePolicyStatus> a =
        skipping.engine.Inspect(p.name, "");
    const absl::StatusOr<LivePolicyStatus> b = full.engine.Inspect(p.name, "");
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(a->counters.outcomes, b->counters.outcomes) << p.name;
    EXPECT_EQ(a->counters.by_verdict_reason, b->counters.by_verdict_reason)
        << p.name;
    EXPECT_GT(Outcomes(a->counters, Outcome::kTimeout), 0u) << p.name;
  }
}

// The engine's due time (Engine::sweep_alarm), which the housekeeping
// thread sleeps until: right after a sweep it is the earliest thing due,
// and any change brings it to InfinitePast (sweep soon) at once.
TEST_F(EngineSweepTest, NothingDueAfterASweepOfIdleDependencies) {
  PolicyConfig p = MakePolicy("a");
  WithBreaker(p, 1);
  engine_.PutPolicy(p);
  engine_.PutPolicy(MakePolicy("b"));
  EXPECT_EQ(engine_.sweep_alarm().due(), absl::InfinitePast());  // new map
  engine_.Sweep();
  EXPECT_EQ(engine_.sweep_alarm().due(), absl::InfiniteFuture());
  // A second sweep with nothing done publishes the same.
  clock_.Advance(absl::Seconds(5));
  engine_.Sweep();
  EXPECT_EQ(engine_.sweep_alarm().due(), absl::InfiniteFuture());
}

TEST_F(EngineSweepTest, ANewPermitLowersTheDueTimeAndItsExpiryRaisesIt) {
  engine_.PutPolicy(MakePolicy("a"));  // call_timeout 1 s: expires after 2 s
  engine_.Sweep();
  ASSERT_EQ(engine_.sweep_alarm().due(), absl::InfiniteFuture());
  const absl::Time issued = clock_.Now();
  ASSERT_EQ(Acquire("a").verdict, Verdict::kAllow);
  // The change itself asks for a sweep; the sweep finds the deadline.
  EXPECT_EQ(engine_.sweep_alarm().due(), absl::InfinitePast());
  engine_.Sweep();
  EXPECT_EQ(engine_.sweep_alarm().due(), issued + absl::Seconds(2));
  // A sweep before the deadline leaves it.
  clock_.Advance(absl::Seconds(1));
  engine_.Sweep();
  EXPECT_EQ(engine_.sweep_alarm().due(), issued + absl::Seconds(2));
  // An earlier deadline (another dependency's permit) comes first.
  engine_.PutPolicy(MakePolicy("b"));
  const absl::Time second = clock_.Now();
  ASSERT_EQ(Acquire("b").verdict, Verdict::kAllow);
  engine_.Sweep();
  EXPECT_EQ(engine_.sweep_alarm().due(), issued + absl::Seconds(2));
  // The first permit swept: the second one's deadline is next.
  clock_.Advance(absl::Seconds(1));
  engine_.Sweep();
  EXPECT_EQ(engine_.sweep_alarm().due(), second + absl::Seconds(2));
  // Both swept: nothing is due.
  clock_.Advance(absl::Seconds(1));
  engine_.Sweep();
  EXPECT_EQ(engine_.sweep_alarm().due(), absl::InfiniteFuture());
  EXPECT_EQ(Outcomes(Inspect("a").counters, Outcome::kTimeout), 1u);
}

TEST_F(EngineSweepTest, ABreakerOpeningMakesItsOpenUntilDue) {
  PolicyConfig p = MakePolicy("a");
  WithBreaker(p, 1);  // 15 s open
  engine_.PutPolicy(p);
  engine_.Sweep();
  const absl::Time tripped = clock_.Now();
  Report("a", Acquire("a"), Outcome::kFailure);
  EXPECT_EQ(engine_.sweep_alarm().due(), absl::InfinitePast());
  engine_.Sweep();
  EXPECT_EQ(engine_.sweep_alarm().due(), tripped + absl::Seconds(15));
  // At open_until the sweep moves it to HALF_OPEN, which waits for a
  // probe, not for time.
  clock_.Advance(absl::Seconds(15));
  engine_.Sweep();
  ASSERT_EQ(sink_.transitions().size(), 2u);
  EXPECT_EQ(sink_.transitions()[1].to, BreakerState::kHalfOpen);
  EXPECT_EQ(engine_.sweep_alarm().due(), absl::InfiniteFuture());
}

TEST_F(EngineSweepTest, AChangeAfterASweepWakesASleeperPlannedBeforeIt) {
  engine_.PutPolicy(MakePolicy("a"));
  engine_.Sweep();
  SweepAlarm& alarm = engine_.sweep_alarm();
  // The housekeeping thread's plan: nothing due, so the longest gap.
  const absl::Time now = clock_.Now();
  const SweepPlan plan = PlanSweep(alarm.due(), now + absl::Milliseconds(100),
                                   now + absl::Seconds(1));
  ASSERT_EQ(plan.wake, now + absl::Seconds(1));
  // A call lands between the plan and the wait: the wait does not sleep
  // (its deadline is an hour of real time away).
  ASSERT_EQ(Acquire("a").verdict, Verdict::kAllow);
  EXPECT_EQ(alarm.Wait(plan.wake_if_below, absl::Now() + absl::Hours(1)),
            SweepAlarm::Wake::kLowered);
}

TEST_F(EngineSweepTest, AChangeWakesASleeperWaitingOnAnotherThread) {
  engine_.PutPolicy(MakePolicy("a"));
  engine_.Sweep();
  SweepAlarm& alarm = engine_.sweep_alarm();
  const absl::Time now = clock_.Now();
  const SweepPlan plan = PlanSweep(alarm.due(), now + absl::Milliseconds(100),
                                   now + absl::Seconds(1));
  SweepAlarm::Wake wake = SweepAlarm::Wake::kDeadline;
  // Whether it waits already or not yet, only the change can end its wait.
  std::thread sleeper([&] {
    wake = alarm.Wait(plan.wake_if_below, absl::InfiniteFuture());
  });
  ASSERT_EQ(Acquire("a").verdict, Verdict::kAllow);
  sleeper.join();
  EXPECT_EQ(wake, SweepAlarm::Wake::kLowered);
}

// Cluster mode: the sync loop's tick changes every dependency once a
// second. For a dependency without keys the tick sweeps it itself, so the
// alarm hears its real next due time and an idle server's housekeeping
// thread sleeps through the tick.
class EngineSweepTickTest : public ::testing::Test {
 protected:
  EngineSweepTickTest() : engine_(&clock_, ClusterOptions(), &sink_) {}
  static Engine::Options ClusterOptions() {
    Engine::Options o = SeededOptions();
    o.cluster = true;
    return o;
  }
  void Tick() {
    clock_.Advance(absl::Seconds(1));
    const std::vector<DependencyTick> ticks =
        engine_.CollectTick(absl::Seconds(1));
    std::vector<DependencyUpdate> updates;
    for (const DependencyTick& t : ticks) {
      updates.emplace_back();
      updates.back().name = t.name;
    }
    engine_.ApplyTick(updates);
  }

  testing::FakeClock clock_;
  testing::RecordingEventSink sink_;
  Engine engine_;
};

TEST_F(EngineSweepTickTest, ATickOfIdleDependenciesLeavesNothingDue) {
  PolicyConfig cluster = MakePolicy("cluster");
  WithBucket(cluster, 10, 10);
  cluster.rate_limit->scope = Scope::kCluster;
  WithBreaker(cluster, 5);
  engine_.PutPolicy(cluster);
  engine_.PutPolicy(MakePolicy("plain"));
  engine_.SetStoreState(true, 1);
  engine_.Sweep();
  ASSERT_EQ(engine_.sweep_alarm().due(), absl::InfiniteFuture());
  for (int i = 0; i < 3; ++i) {
    Tick();
    EXPECT_EQ(engine_.sweep_alarm().due(), absl::InfiniteFuture()) << i;
  }
}

TEST_F(EngineSweepTickTest, ATickPublishesAPermitsDeadlineAndExpiresItOnTime) {
  engine_.PutPolicy(MakePolicy("plain"));  // call_timeout 1 s
  engine_.SetStoreState(true, 1);
  const absl::Time issued = clock_.Now();
  ASSERT_TRUE(engine_.Acquire("plain", "", 1).ok());
  engine_.sweep_alarm().Reset();  // as a sweep pass begins
  Tick();
  EXPECT_EQ(engine_.sweep_alarm().due(), issued + absl::Seconds(2));
  // The tick at the deadline settles the permit itself.
  Tick();
  const absl::StatusOr<LivePolicyStatus> s = engine_.Inspect("plain", "");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(Outcomes(s->counters, Outcome::kTimeout), 1u);
}

}  // namespace
}  // namespace sluice::core
