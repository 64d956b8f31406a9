// SPDX-License-Identifier: Apache-2.0
#include "tests/cluster/cluster_scenarios.h"

#include <fcntl.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/time/clock.h"
#include "server/cluster/redis_store.h"

namespace sluice::cluster {

std::string* ClusterScenarioTest::redis_address = nullptr;
std::string* ClusterScenarioTest::redis_cluster_seeds = nullptr;
std::string* ClusterScenarioTest::redis_clock_file = nullptr;

void ClusterScenarioTest::SyncStoreClock() {
  if (GetParam() == "fake" || redis_clock_file == nullptr) return;
  const int fd = open(redis_clock_file->c_str(), O_WRONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0) << *redis_clock_file;
  const int64_t us = absl::ToUnixMicros(clock_.Now());
  const ssize_t written = pwrite(fd, &us, sizeof(us), 0);
  close(fd);
  ASSERT_EQ(written, static_cast<ssize_t>(sizeof(us)));
}

void ClusterScenarioTest::SetUp() {
  if (GetParam() == "redis") {
    ASSERT_NE(redis_address, nullptr) << "no redis-server for this binary";
  }
  if (GetParam() == "redis-cluster") {
    ASSERT_NE(redis_cluster_seeds, nullptr) << "no redis cluster for this binary";
  }
}

Store* ClusterScenarioTest::StoreFor(const std::string& replica) {
  if (GetParam() == "fake") return &fake_;
  absl::StatusOr<RedisStore::Options> options =
      GetParam() == "redis-cluster"
          ? RedisStore::ParseClusterSeeds(*redis_cluster_seeds)
          : RedisStore::ParseAddress(*redis_address);
  EXPECT_TRUE(options.ok());
  // Each test gets its own key space, so leftovers of another test (and
  // their TTLs) never meet this one.
  options->key_prefix = std::string("sluice-test:") +
                        ::testing::UnitTest::GetInstance()
                            ->current_test_info()
                            ->name() +
                        ":";
  redis_stores_.push_back(std::make_unique<RedisStore>(*options));
  return redis_stores_.back().get();
}

void ClusterScenarioTest::EvictGrants(const std::string& policy) {
  if (GetParam() == "fake") {
    fake_.EvictGrants(policy, "");
    return;
  }
  RedisDel("{" + policy + "}:g:");
}

void ClusterScenarioTest::WipeMembership() {
  if (GetParam() == "fake") {
    fake_.WipeMembership();
    return;
  }
  RedisDel("{config}:replicas");
  RedisDel("{config}:lives");
}

void ClusterScenarioTest::WipeStore(const std::string& policy) {
  if (GetParam() == "fake") {
    fake_.WipeAll();
    return;
  }
  // Key by key (tick.lua's and config.lua's keys): in a Redis Cluster they
  // live on different nodes, and DEL through redis-cli -c follows MOVED.
  for (const char* key : {"epoch", "recovering", "lives", "g:", "a:",
                          "outcomes", "breaker", "probes", "warm"}) {
    RedisDel("{" + policy + "}:" + key);
  }
  for (const char* key : {"epoch", "version", "policies", "pversions",
                          "deleted", "overrides", "replicas", "lives"}) {
    RedisDel(std::string("{config}:") + key);
  }
}

void ClusterScenarioTest::RedisDel(const std::string& suffix) {
  // The first seed of a cluster will do: redis-cli -c follows MOVED.
  std::string address = GetParam() == "redis-cluster"
                            ? *redis_cluster_seeds
                            : *redis_address;
  address = address.substr(0, address.find(','));
  const size_t colon = address.rfind(':');
  const std::string key = std::string("sluice-test:") +
                          ::testing::UnitTest::GetInstance()
                              ->current_test_info()
                              ->name() +
                          ":" + suffix;
  const std::string command =
      "redis-cli -c -h " + address.substr(0, colon) + " -p " +
      address.substr(colon + 1) + " DEL '" + key + "' > /dev/null";
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
}

namespace {

TEST_P(ClusterScenarioTest, SkewedLoadHoldsTheClusterLimit) {
  AddReplicas(3);
  Install(ClusterBucket("inv", 100, 10));
  // Replica 0 is offered 1000/s, replicas 1 and 2 are paced at 20/s each.
  // Time moves in 1 ms steps; every replica ticks once per second, at
  // different offsets, as real replicas do.
  std::vector<int64_t> admitted(3, 0);
  std::vector<int64_t> asked(3, 0);
  int64_t total_measured = 0;
  int64_t worst_second = 0;
  for (int ms = 0; ms < 15000; ++ms) {
    clock_.Advance(absl::Milliseconds(1));
    int64_t this_ms = 0;
    for (int r = 0; r < 3; ++r) {
      const bool offered = r == 0 ? true : ms % 50 == r * 7;
      if (!offered) continue;
      const bool allowed = R(r).Acquire("inv").verdict == Verdict::kAllow;
      if (ms >= 5000) {
        ++asked[r];
        if (allowed) {
          ++admitted[r];
          ++this_ms;
        }
      }
    }
    total_measured += this_ms;
    for (int r = 0; r < 3; ++r) {
      if (ms % 1000 == r * 300) R(r).loop.TickOnce().IgnoreError();
    }
    if (ms >= 5000 && ms % 1000 == 999) {
      worst_second = std::max(worst_second, total_measured);
      total_measured = 0;
    }
  }
  const int64_t total = admitted[0] + admitted[1] + admitted[2];
  RecordProperty("admitted_total", static_cast<int>(total));
  std::printf("admitted %lld %lld %lld of asked %lld %lld %lld, worst 1s %lld\n", (long long)admitted[0], (long long)admitted[1], (long long)admitted[2], (long long)asked[0], (long long)asked[1], (long long)asked[2], (long long)worst_second);
  // 10 s at 100/s after 5 s of warm-up: within 5% of 1000.
  EXPECT_NEAR(total, 1000, 50);
  EXPECT_LE(worst_second, 110);
  // The paced replicas get most of their calls through.
  EXPECT_GT(admitted[1], asked[1] * 8 / 10);
  EXPECT_GT(admitted[2], asked[2] * 8 / 10);
}

TEST_P(ClusterScenarioTest, TripOnOneReplicaOpensTheOthersOnTheirNextTick) {
  AddReplicas(3);
  Install(WithBreaker(ClusterBucket("pay", 1000, 1000)));
  Converge();
  FailCalls(0, "pay", 3);
  EXPECT_EQ(R(0).Acquire("pay").reason, Reason::kCircuitOpen);
  EXPECT_EQ(R(1).Acquire("pay").verdict, Verdict::kAllow);
  clock_.Advance(absl::Milliseconds(10));
  R(0).loop.TickOnce().IgnoreError();
  R(1).loop.TickOnce().IgnoreError();
  R(2).loop.TickOnce().IgnoreError();
  EXPECT_EQ(R(1).Acquire("pay").reason, Reason::kCircuitOpen);
  EXPECT_EQ(R(2).Acquire("pay").reason, Reason::kCircuitOpen);
  auto status = R(1).engine.Inspect("pay");
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->gates->breaker_state, BreakerState::kOpen);
  EXPECT_NE(status->gates->trip_cause.find("consecutive"), std::string::npos);
}

TEST_P(ClusterScenarioTest, HalfOpenProbesAreLeasedAcrossTheCluster) {
  AddReplicas(3);
  PolicyConfig p = WithBreaker(ClusterBucket("pay", 1000, 1000));
  p.breaker->half_open_probes = 2;
  p.breaker->successes_to_close = 3;
  Install(p);
  Converge();
  FailCalls(0, "pay", 3);
  for (int s = 0; s < 6; ++s) {  // open 5 s; ticks go on meanwhile
    TickAll();
    clock_.Advance(absl::Seconds(1));
  }
  // Every replica is HALF_OPEN and wants probes; before leases arrive none
  // may probe.
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(R(r).Acquire("pay").reason, Reason::kProbeLimit);
  }
  int max_in_flight = 0;
  std::vector<core::Decision> probes;
  for (int round = 0; round < 4; ++round) {
    TickAll();
    for (int r = 0; r < 3; ++r) {
      for (int k = 0; k < 3; ++k) {
        core::Decision d = R(r).Acquire("pay");
        if (d.verdict == Verdict::kAllow) probes.push_back(d);
      }
    }
    max_in_flight = std::max<int>(max_in_flight, probes.size());
  }
  EXPECT_EQ(max_in_flight, 2);
}

// A tick often falls right where the open time ends (the trip's own tick
// sets the rhythm, and open times are whole seconds). The replica whose
// callers waited through the open time holds its probe lease by then, so
// its first call after the open time probes at once instead of being
// refused until another tick brings a lease. A replica nobody called holds
// none.
TEST_P(ClusterScenarioTest,
       AReplicaWhoseCallersWaitProbesAsSoonAsTheOpenTimeEnds) {
  TripWithACallerWaitingOnReplica0();
  EXPECT_EQ(R(1).Acquire("pay").reason, Reason::kProbeLimit);
  const core::Decision probe = R(0).Acquire("pay");
  ASSERT_EQ(probe.verdict, Verdict::kAllow);
  EXPECT_EQ(R(0).Acquire("pay").reason, Reason::kProbeLimit);
  TickAll();
  EXPECT_EQ(R(1).Acquire("pay").reason, Reason::kProbeLimit);
  R(0).engine.Report("pay", "", probe.permit_id, Outcome::kSuccess,
                     absl::Milliseconds(5));
  EXPECT_EQ(R(0).Acquire("pay").verdict, Verdict::kAllow);
}

// The same when the tick at the end of the open time is the first to find
// the breaker HALF_OPEN: it keeps the lease for the callers that waited,
// though none has asked for a probe yet.
TEST_P(ClusterScenarioTest,
       TheTickThatFindsTheBreakerHalfOpenKeepsTheWaitersLease) {
  TripWithACallerWaitingOnReplica0();
  TickAll();
  EXPECT_EQ(R(0).Acquire("pay").verdict, Verdict::kAllow);
  EXPECT_EQ(R(1).Acquire("pay").reason, Reason::kProbeLimit);
}

TEST_P(ClusterScenarioTest, RatioRulesAreJudgedOnTheClusterWindow) {
  AddReplicas(2);
  PolicyConfig p = ClusterBucket("inv", 1000, 1000);
  core::BreakerConfig b;
  b.failure_rate_threshold = 0.5;
  b.minimum_calls = 16;
  p.breaker = b;
  Install(p);
  Converge();
  // Each replica alone sees 10 calls, 6 failed: below minimum_calls.
  for (int r = 0; r < 2; ++r) {
    for (int i = 0; i < 10; ++i) {
      const core::Decision d = R(r).Acquire("inv");
      R(r).engine.Report("inv", "", d.permit_id,
                         i < 6 ? Outcome::kFailure : Outcome::kSuccess,
                         absl::Milliseconds(5));
    }
  }
  EXPECT_EQ(R(0).Acquire("inv").verdict, Verdict::kAllow);
  clock_.Advance(absl::Milliseconds(100));
  TickAll();
  TickAll();
  // Together: 20 calls, 60% failed.
  EXPECT_EQ(R(0).Acquire("inv").reason, Reason::kCircuitOpen);
  EXPECT_EQ(R(1).Acquire("inv").reason, Reason::kCircuitOpen);
}

TEST_P(ClusterScenarioTest, ACutOffReplicaAdoptsTheStoredBreakerFirst) {
  AddReplicas(2);
  PolicyConfig p = WithBreaker(ClusterBucket("pay", 1000, 1000));
  p.breaker->open_duration = absl::Seconds(30);
  Install(p);
  Converge();
  // Replica 0 is cut off from the store long enough to count it as down.
  // Meanwhile replica 1 trips the shared breaker, and replica 0 trips and
  // closes on its own (its generation runs ahead of the stored one).
  FailCalls(1, "pay", 3);
  R(1).loop.TickOnce().IgnoreError();
  for (int s = 0; s < 4; ++s) {
    clock_.Advance(absl::Seconds(1));
    Cut(0, true);
    R(0).loop.TickOnce().IgnoreError();
    R(1).loop.TickOnce().IgnoreError();
  }
  EXPECT_FALSE(R(0).loop.stats().store_up);
  PolicyConfig quick = p;
  quick.breaker->open_duration = absl::Milliseconds(100);
  R(0).engine.PutPolicy(quick);
  FailCalls(0, "pay", 3);
  clock_.Advance(absl::Milliseconds(200));
  const core::Decision probe = R(0).Acquire("pay");
  ASSERT_EQ(probe.verdict, Verdict::kAllow);
  R(0).engine.Report("pay", "", probe.permit_id, Outcome::kSuccess,
                     absl::Milliseconds(1));
  R(0).engine.PutPolicy(p);
  EXPECT_EQ(R(0).Acquire("pay").verdict, Verdict::kAllow);
  // Back in touch: replica 0 adopts the stored OPEN instead of publishing
  // its own CLOSED, which came later by its own count.
  Cut(0, false);
  R(0).loop.TickOnce().IgnoreError();
  R(1).loop.TickOnce().IgnoreError();
  EXPECT_EQ(R(0).Acquire("pay").reason, Reason::kCircuitOpen);
  EXPECT_EQ(R(1).Acquire("pay").reason, Reason::kCircuitOpen);
}

TEST_P(ClusterScenarioTest, ATransitionFromAStaleGenerationLosesTheRace) {
  AddReplicas(2);
  Install(WithBreaker(ClusterBucket("pay", 1000, 1000)));
  Converge();
  // Both replicas trip from the same stored generation before either
  // ticks: the first to reach the store wins, the other adopts it.
  FailCalls(0, "pay", 3);
  FailCalls(1, "pay", 3);
  R(1).loop.TickOnce().IgnoreError();
  R(0).loop.TickOnce().IgnoreError();
  auto s0 = R(0).engine.Inspect("pay");
  auto s1 = R(1).engine.Inspect("pay");
  ASSERT_TRUE(s0.ok() && s1.ok());
  EXPECT_EQ(s0->gates->breaker_generation, s1->gates->breaker_generation);
  EXPECT_EQ(s0->gates->breaker_state, BreakerState::kOpen);
  EXPECT_EQ(s1->gates->breaker_state, BreakerState::kOpen);
  if (GetParam() == "fake") {
    // The same instant. (A real Redis keeps real time while this test moves
    // its fake clock by seconds, so the offsets the replicas measure to
    // Redis's clock differ by what the test moved between their ticks.)
    EXPECT_EQ(s0->gates->open_until, s1->gates->open_until);
  }
}

TEST_P(ClusterScenarioTest, PerKeyBreakersProbeAndCloseOnEachReplica) {
  AddReplicas(2);
  PolicyConfig p = WithBreaker(ClusterBucket("tenant", 1000, 1000));
  p.per_key = true;
  p.rate_limit.reset();
  Install(p);
  Converge();
  for (int i = 0; i < 3; ++i) {
    const core::Decision d = *R(0).engine.Acquire("tenant", "k", 1);
    R(0).engine.Report("tenant", "k", d.permit_id, Outcome::kFailure,
                       absl::Milliseconds(1));
  }
  EXPECT_EQ(R(0).engine.Acquire("tenant", "k", 1)->reason,
            Reason::kCircuitOpen);
  EXPECT_EQ(R(1).engine.Acquire("tenant", "k", 1)->verdict, Verdict::kAllow);
  for (int s = 0; s < 6; ++s) {
    TickAll();
    clock_.Advance(absl::Seconds(1));
  }
  const core::Decision probe = *R(0).engine.Acquire("tenant", "k", 1);
  ASSERT_EQ(probe.verdict, Verdict::kAllow) << static_cast<int>(probe.reason);
  EXPECT_EQ(R(0).engine.Report("tenant", "k", probe.permit_id,
                               Outcome::kSuccess, absl::Milliseconds(1)),
            BreakerState::kClosed);
}

TEST_P(ClusterScenarioTest, AHotPerKeyKeyIsSharedAndGoesBackWhenQuiet) {
  AddReplicas(2);
  PolicyConfig p = ClusterBucket("tenant", 10, 10);
  p.per_key = true;
  Install(p);
  Converge();
  SettleStaticShares("tenant");
  // Each replica may admit floor(10 / 3) = 3 of a key on its own.
  int cold = 0;
  for (int i = 0; i < 10; ++i) {
    cold += R(0).engine.Acquire("tenant", "k", 1)->verdict == Verdict::kAllow;
  }
  EXPECT_EQ(cold, 3);
  // Refused, so the key is hot: from the next ticks on replica 0 holds a
  // grant of what replica 1's static share leaves (10 - floor(10 / 2)).
  int admitted = 0;
  for (int s = 0; s < 5; ++s) {
    TickAll();
    clock_.Advance(absl::Seconds(1));
    for (int i = 0; i < 20; ++i) {
      admitted +=
          R(0).engine.Acquire("tenant", "k", 1)->verdict == Verdict::kAllow;
    }
  }
  auto status = R(0).engine.Inspect("tenant", "k");
  ASSERT_TRUE(status.ok() && status->gates);
  EXPECT_TRUE(status->gates->has_grant);
  EXPECT_EQ(status->gates->granted[core::kRateUnits], 5);
  EXPECT_GT(admitted, 15);
  // Quiet again: back to the static share, nothing held in the store.
  for (int s = 0; s < 4; ++s) {
    TickAll();
    clock_.Advance(absl::Seconds(1));
  }
  status = R(0).engine.Inspect("tenant", "k");
  EXPECT_FALSE(status->gates->has_grant);
}

TEST_P(ClusterScenarioTest, RestartedReplicaAdoptsAnOpenBreaker) {
  AddReplicas(2);
  Install(WithBreaker(ClusterBucket("pay", 1000, 1000)));
  Converge();
  FailCalls(0, "pay", 3);
  TickAll();
  // Replica 1 restarts: a fresh engine under a new id.
  Restart(1, "r1-restarted");
  replicas_[1]->engine.PutPolicy(WithBreaker(ClusterBucket("pay", 1000, 1000)));
  clock_.Advance(absl::Milliseconds(500));
  R(1).loop.TickOnce().IgnoreError();
  EXPECT_EQ(R(1).Acquire("pay").reason, Reason::kCircuitOpen);
}

TEST_P(ClusterScenarioTest, ClosingAfterProbesReachesEveryReplica) {
  AddReplicas(2);
  Install(WithBreaker(ClusterBucket("pay", 1000, 1000)));
  Converge();
  FailCalls(0, "pay", 3);
  for (int s = 0; s < 6; ++s) {  // open 5 s; ticks go on meanwhile
    TickAll();
    clock_.Advance(absl::Seconds(1));
  }
  EXPECT_EQ(R(1).Acquire("pay").reason, Reason::kProbeLimit);
  TickAll();  // replica 1 asked, so it gets the one lease
  const core::Decision probe = R(1).Acquire("pay");
  ASSERT_EQ(probe.verdict, Verdict::kAllow);
  EXPECT_EQ(R(1).engine.Report("pay", "", probe.permit_id, Outcome::kSuccess,
                               absl::Milliseconds(5)),
            BreakerState::kClosed);
  Converge();
  EXPECT_EQ(R(0).Acquire("pay").verdict, Verdict::kAllow);
  auto status = R(0).engine.Inspect("pay");
  EXPECT_EQ(status->gates->breaker_state, BreakerState::kClosed);
}

TEST_P(ClusterScenarioTest, AReportThatReachedAnotherReplicaSettlesAtItsIssuer) {
  AddReplicas(2);
  PolicyConfig p = WithBreaker(ClusterBucket("pay", 1000, 1000));
  core::ConcurrencyConfig c;
  c.max_in_flight = 10;
  p.concurrency = c;
  Install(p);
  Converge();
  // Replica 0 admits three calls; their failures are reported to replica 1.
  for (int i = 0; i < 3; ++i) {
    const core::Decision d = R(0).Acquire("pay");
    ASSERT_EQ(d.verdict, Verdict::kAllow);
    core::ForwardedReport f;
    f.issuer = "r0";
    f.dependency = "pay";
    f.permit_id = d.permit_id;
    f.outcome = Outcome::kFailure;
    f.latency = absl::Milliseconds(5);
    EXPECT_TRUE(R(1).loop.Forward(f));
  }
  // A fourth permit, reported to replica 1 with a MAC one bit off: passed
  // on like the others, and refused by the issuer, which alone can check it.
  const core::Decision held = R(0).Acquire("pay");
  ASSERT_EQ(held.verdict, Verdict::kAllow);
  core::ForwardedReport forged;
  forged.issuer = "r0";
  forged.dependency = "pay";
  forged.permit_id = {held.permit_id.serial, held.permit_id.mac ^ 1};
  forged.outcome = Outcome::kFailure;
  EXPECT_TRUE(R(1).loop.Forward(forged));
  EXPECT_EQ(R(0).engine.Inspect("pay")->gates->in_flight, 4u);
  // An issuer that is not a live replica gets nothing queued.
  core::ForwardedReport stray;
  stray.issuer = "nobody";
  stray.dependency = "pay";
  EXPECT_FALSE(R(1).loop.Forward(stray));

  clock_.Advance(absl::Milliseconds(100));
  R(1).loop.TickOnce().IgnoreError();  // passes them on
  R(0).loop.TickOnce().IgnoreError();  // settles them
  auto status = R(0).engine.Inspect("pay");
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->gates->in_flight, 1u);  // the forged report's permit
  EXPECT_EQ(status->counters.outcomes[static_cast<int>(Outcome::kFailure)], 3u);
  EXPECT_EQ(status->counters.outcomes[static_cast<int>(Outcome::kTimeout)], 0u);
  EXPECT_EQ(status->gates->breaker_state, BreakerState::kOpen);
  EXPECT_EQ(R(0).engine.PermitReportsRefused().forged, 1u);
  EXPECT_EQ(R(1).loop.stats().reports_forwarded, 4u);
  EXPECT_EQ(R(0).loop.stats().reports_received, 4u);
}

// Sidecars (issue 14): one replica per gateway pod, so the replica count
// follows the gateway's autoscaler and the gateway's traffic is split over
// them. The schedule is bench/cluster_transients's, with one scale step per
// 5 s instead of the HPA's 15 s. On the fake store five of the pods removed
// are killed without their final tick; on Redis every pod stops gracefully,
// because a killed pod's grant expires on Redis's own clock, which the
// test's FakeClock does not move.
TEST_P(ClusterScenarioTest, ScalingFrom5To50AndBackUnderLoadHoldsTheLimit) {
  const PolicyConfig p = ClusterBucket("inv", 100, 10);
  constexpr int64_t kLoad = 2000;      // calls/s over the whole gateway
  constexpr int64_t kMostInASecond = 121;  // 1.10 × (limit + burst)
  constexpr int kBackAt5 = 35;         // s from the start
  const bool kill = GetParam() == "fake";
  for (int i = 0; i < 5; ++i) Pod("pod-a" + std::to_string(i), p);
  int killed = 0;
  const std::vector<int64_t> s =
      RunSplitLoad("inv", 50, kLoad, [&](int64_t ms) {
        // 5 → 10 → 20 → 40 → 50, one step every 5 s from 10 s on; each
        // step's pods become ready over a second.
        static constexpr int kSteps[][2] = {
            {10, 10}, {15, 20}, {20, 40}, {25, 50}};
        for (const auto& [at_s, pods] : kSteps) {
          const int64_t k = ms - at_s * 1000;
          if (k >= 0 && k % 97 == 0 && RunningCount() < pods &&
              k < 1000) {
            Pod("pod-b" + std::to_string(replicas_.size()), p);
          }
          if (k == 999) {
            while (RunningCount() < pods) {
              Pod("pod-b" + std::to_string(replicas_.size()), p);
            }
          }
        }
        if (ms == kBackAt5 * 1000) {
          for (int r = 5; r < static_cast<int>(replicas_.size()); ++r) {
            if (kill && r % 9 == 0) {
              Kill(r);
              ++killed;
            } else {
              Stop(r);
            }
          }
        }
      });
  EXPECT_EQ(RunningCount(), 5);
  EXPECT_EQ(killed, kill ? 5 : 0);
  EXPECT_EQ(replicas_.size(), 50u);
  std::string seconds;
  for (int64_t a : s) seconds += std::to_string(a) + " ";
  std::printf("admitted each second: %s\n", seconds.c_str());
  for (size_t i = 0; i < s.size(); ++i) {
    EXPECT_LE(s[i], kMostInASecond) << "second " << i << ": " << seconds;
  }
  // Back at 5: the pods that stopped gave their grants back at once; a
  // killed pod's grant is freed after the stale period (3 ticks). Within 4
  // ticks of the scale-down (the stale period and one tick to take what was
  // freed), the 5 admit at least 90% of the limit, every second from then
  // on. (Measured: 3 on the fake store, at once on Redis.)
  for (size_t i = kBackAt5 + 4; i < s.size(); ++i) {
    EXPECT_GE(s[i], 90) << "second " << i << ": " << seconds;
  }
}

// A cluster limit whose share per replica is below one unit: 20/s across
// 50 replicas. The grants are whole tokens of capacity, so at most `burst`
// replicas hold one at a time; the cluster still admits about its limit and
// never more.
TEST_P(ClusterScenarioTest, AShareBelowOneUnitStillAdmitsTheLimitAndNoMore) {
  struct Case {
    double burst;
    int loaded;  // replicas offered calls; the others only tick
  };
  for (const Case& c : {Case{20, 50}, Case{10, 50}, Case{20, 5}}) {
    SCOPED_TRACE("burst " + std::to_string(static_cast<int>(c.burst)) +
                 ", " + std::to_string(c.loaded) + " of 50 loaded");
    const PolicyConfig p =
        ClusterBucket("small" + std::to_string(static_cast<int>(c.burst)) +
                          "x" + std::to_string(c.loaded),
                      20, c.burst);
    replicas_.clear();
    paths_.clear();
    tick_at_.clear();
    loaded_.clear();
    admitted_by_.clear();
    for (int i = 0; i < 50; ++i) Pod("pod-" + std::to_string(i), p);
    for (int i = c.loaded; i < 50; ++i) loaded_[i] = false;
    RunSplitLoad(p.name, 5, 2000);  // warm-up
    std::fill(admitted_by_.begin(), admitted_by_.end(), 0);
    const std::vector<int64_t> s = RunSplitLoad(p.name, 20, 2000);
    std::string seconds;
    int64_t total = 0;
    for (int64_t a : s) {
      seconds += std::to_string(a) + " ";
      total += a;
    }
    int admitting = 0;
    for (int i = 0; i < c.loaded; ++i) admitting += admitted_by_[i] > 0;
    std::printf("admitted each second: %s(%d of %d loaded replicas admitted)\n",
                seconds.c_str(), admitting, c.loaded);
    // Not stuck at zero: at least 90% of the limit over the 20 s ...
    EXPECT_GE(total, 20 * 20 * 9 / 10) << seconds;
    // ... and never over it: no second above the limit (the buckets are
    // drained by the load, so no burst is left to spend).
    for (size_t i = 0; i < s.size(); ++i) {
      EXPECT_LE(s[i], 20) << "second " << i << ": " << seconds;
    }
    // Every loaded replica admits when the limit covers one unit each.
    // Otherwise the units move round: equal shares go by name in an order
    // that turns every 10 s (of the store's clock, which only the fake
    // store's test moves), one place a turn.
    if (c.loaded <= c.burst) {
      EXPECT_EQ(admitting, c.loaded);
    } else if (GetParam() == "fake") {
      EXPECT_GT(admitting, c.burst);
    }
    for (int i = 0; i < 50; ++i) Stop(i);
  }
}

// --- Warm state: adaptive limits through the store ------------------------

TEST_P(ClusterScenarioTest, AFreshReplicaStartsFromTheOthersSteadyLimit) {
  AddReplicas(2);
  Install(Adaptive("search"));
  TickAll();
  const uint32_t learned = LearnLimit(0, "search", 6);
  ASSERT_GT(learned, 5u) << "the limit did not grow; nothing to share";
  TickAll();  // r0 stores its entry; r1 (no traffic yet) takes it
  EXPECT_EQ(AdaptiveLimitOf(1, "search"), learned);

  // A replica that joins now starts there too, on its first tick, before
  // it has seen a call.
  AddReplicas(1);
  R(2).engine.PutPolicy(Adaptive("search"));
  EXPECT_EQ(AdaptiveLimitOf(2, "search"), 5u);
  R(2).loop.TickOnce().IgnoreError();
  EXPECT_EQ(AdaptiveLimitOf(2, "search"), learned);
}

TEST_P(ClusterScenarioTest, TheMeanOfTheOthersAndOnlyUnderTheSameDigest) {
  AddReplicas(2);
  Install(Adaptive("search"));
  TickAll();
  const uint32_t a = LearnLimit(0, "search", 4);
  const uint32_t b = LearnLimit(1, "search", 8);
  ASSERT_NE(a, b);
  TickAll();
  TickAll();
  // Each keeps its own judged limit.
  EXPECT_EQ(AdaptiveLimitOf(0, "search"), a);
  EXPECT_EQ(AdaptiveLimitOf(1, "search"), b);

  AddReplicas(2);
  R(2).engine.PutPolicy(Adaptive("search"));
  R(3).engine.PutPolicy(Adaptive("search", /*digest=*/8));  // edited
  R(2).loop.TickOnce().IgnoreError();
  R(3).loop.TickOnce().IgnoreError();
  EXPECT_EQ(AdaptiveLimitOf(2, "search"),
            static_cast<uint32_t>(std::lround((a + b) / 2.0)));
  EXPECT_EQ(AdaptiveLimitOf(3, "search"), 5u);
}

TEST_P(ClusterScenarioTest, AfterARolloutTheNewReplicasStartFromTheOldOnes) {
  AddReplicas(2);
  Install(Adaptive("search"));
  TickAll();
  const uint32_t learned = LearnLimit(0, "search", 6);
  ASSERT_GT(learned, 5u);
  TickAll();
  // Every old pod goes (SIGTERM), then new ones come under new names.
  Stop(0);
  Stop(1);
  clock_.Advance(absl::Seconds(30));
  Restart(0, "r0-new");
  R(0).engine.PutPolicy(Adaptive("search"));
  R(0).loop.TickOnce().IgnoreError();
  EXPECT_EQ(AdaptiveLimitOf(0, "search"), learned);
}

TEST_P(ClusterScenarioTest, AReplicaRestartedUnderItsNameTakesBackItsOwn) {
  AddReplicas(1);
  Install(Adaptive("search"));
  TickAll();
  const uint32_t learned = LearnLimit(0, "search", 6);
  ASSERT_GT(learned, 5u);
  TickAll();
  Kill(0);  // no final tick: the entry of its last good tick stays
  Restart(0, "r0");
  R(0).engine.PutPolicy(Adaptive("search"));
  R(0).loop.TickOnce().IgnoreError();
  EXPECT_EQ(AdaptiveLimitOf(0, "search"), learned);
  // Its fresh first push did not overwrite what it had learned: a second
  // restart finds the same.
  Kill(0);
  Restart(0, "r0");
  R(0).engine.PutPolicy(Adaptive("search"));
  R(0).loop.TickOnce().IgnoreError();
  EXPECT_EQ(AdaptiveLimitOf(0, "search"), learned);
}

// Issue 24, hole 7: a tick request delivered after a newer one of the same
// process is ignored; it would put back the older, smaller grant it
// carried, and the store would hand the difference to another replica.
TEST_P(ClusterScenarioTest, ADelayedTickRequestDeliveredAfterANewerOneIsIgnored) {
  AddReplicas(2);
  Install(ClusterBucket("inv", 100, 100));
  Converge();
  ASSERT_EQ(InForce("inv"), 100);
  paths_[0]->HoldNext();
  R(0).loop.TickOnce().IgnoreError();  // held back: it carries 50 applied
  std::optional<TickRequest> late = paths_[0]->TakeHeld();
  ASSERT_TRUE(late.has_value());
  Stop(1);
  clock_.Advance(absl::Milliseconds(100));
  R(0).loop.TickOnce().IgnoreError();  // alone: the whole 100
  EXPECT_EQ(InForce("inv"), 100);
  AddReplicas(1);  // r2 finds r0 holding everything
  Install(ClusterBucket("inv", 100, 100));
  R(2).loop.TickOnce().IgnoreError();
  clock_.Advance(absl::Milliseconds(100));
  paths_[0]->Deliver(*late);
  R(2).loop.TickOnce().IgnoreError();
  EXPECT_LE(InForce("inv"), 100);
}

// Issue 24, hole 7: a leave that arrives late, after the process restarted
// under the same name, must not remove the new process's entry (nor its
// membership): the others would take what it still applies.
TEST_P(ClusterScenarioTest, ALateLeaveDoesNotRemoveARestartedProcessEntry) {
  AddReplicas(2);
  Install(ClusterBucket("inv", 100, 100));
  Converge();
  paths_[0]->HoldNext();
  Stop(0);  // its leave is held back
  std::optional<TickRequest> leave = paths_[0]->TakeHeld();
  ASSERT_TRUE(leave.has_value());
  ASSERT_TRUE(leave->leaving);
  clock_.Advance(absl::Seconds(4));  // the old entry has expired
  if (GetParam() != "fake") {
    // A real Redis keeps real time: the old entry ends a stale period (3 s)
    // after its last tick. Until then it holds r0's share (and takes none
    // of r1's), so the new r0 would be granted nothing yet.
    absl::SleepFor(absl::Milliseconds(3100));
  }
  Restart(0, "r0");
  R(0).engine.PutPolicy(ClusterBucket("inv", 100, 100));
  Converge();
  ASSERT_GT(R(0).engine.Inspect("inv")->gates->granted[0], 0);
  paths_[0]->Deliver(*leave);
  clock_.Advance(absl::Milliseconds(100));
  R(1).loop.TickOnce().IgnoreError();
  EXPECT_LE(InForce("inv"), 100);
  EXPECT_EQ(R(1).loop.stats().live_replicas, 2u);
}

// Issue 24, hole 1: an operator lowers a cluster limit 10x under load. A
// replica installs the new policy within a tick whose grant the store split
// from the old limit; applied as it came, that grant would refill at the
// new rate x old units / new limit (10x) until the next tick.
TEST_P(ClusterScenarioTest, ALoweredLimitHoldsFromTheNextTick) {
  Pod("r0", ClusterBucket("inv", 1000, 1000));
  Pod("r1", ClusterBucket("inv", 1000, 1000));
  RunSplitLoad("inv", 5, 4000);
  // Both tick at the first ms of every second: the write at 0.5 s reaches
  // them at 1.001 s.
  const std::vector<int64_t> seconds =
      RunSplitLoad("inv", 6, 4000, [&](int64_t ms) {
        if (ms == 500) AdminWrite(ClusterBucket("inv", 100, 100));
      });
  // From the second that starts 0.5 s after the write (every replica has
  // had its tick by 1.001 s).
  const int64_t worst = *std::max_element(seconds.begin() + 1, seconds.end());
  std::printf("lowered 1000/s -> 100/s: admitted per second after the write:");
  for (int64_t n : seconds) std::printf(" %lld", static_cast<long long>(n));
  std::printf("\n");
  EXPECT_LE(worst, 220);  // 1.10 x (new limit + new burst)
  EXPECT_GE(seconds.back(), 80);
}

// Issue 24, hole 1: per_key switched off. The tick that brings the new
// policy carries grants of per-key keys, each a share of its own key's
// limit; none of them is the dependency's share.
// Each replica hammers a key of its own: its grant there is the limit less
// the others' static shares, 34 of 100 with three replicas.
TEST_P(ClusterScenarioTest, SwitchingPerKeyOffAppliesNoPerKeyGrant) {
  AddReplicas(3);
  PolicyConfig keyed = ClusterBucket("inv", 100, 100);
  keyed.per_key = true;
  Install(keyed);
  const std::string keys[] = {"a", "b", "c"};
  // Past the new epoch's recovery window and the static shares' wait.
  for (int s = 0; s < 8; ++s) {
    for (int i = 0; i < 200; ++i) {
      for (int r = 0; r < 3; ++r) {
        R(r).engine.Acquire("inv", keys[r], 1).IgnoreError();
      }
    }
    TickAll();
    clock_.Advance(absl::Seconds(1));
  }
  ASSERT_EQ(R(0).engine.Inspect("inv", "a")->gates->granted[0], 34);
  for (int i = 0; i < 200; ++i) {
    for (int r = 0; r < 3; ++r) {
      R(r).engine.Acquire("inv", keys[r], 1).IgnoreError();
    }
  }
  AdminWrite(ClusterBucket("inv", 100, 100));
  TickAll();  // each installs the policy within this tick
  EXPECT_LE(InForce("inv"), 100);
}

// Issue 24, hole 5: window counts outlive their replica's entry. A 3/s
// window on four replicas; r0 holds the three units, admits 3 and leaves
// (SIGTERM) at once. Its 3 stay in the window for a second, so the others,
// flat out and ticking at once, admit nothing more within it.
TEST_P(ClusterScenarioTest, AWindowCountOutlivesAGracefulLeave) {
  const int admitted = FillWindowOnFirstOfFour("inv");
  ASSERT_EQ(admitted, 3);
  Stop(0);
  EXPECT_EQ(admitted + WindowAdmitsWithinASecond("inv"), 3)
      << "admitted within one second";
}

// The same window count when the replica restarts under its name (a new
// process life) instead: the old life's count stays held.
TEST_P(ClusterScenarioTest, AWindowCountOutlivesARestartUnderTheSameName) {
  const int admitted = FillWindowOnFirstOfFour("inv");
  ASSERT_EQ(admitted, 3);
  R(0).loop.TickOnce().IgnoreError();  // its count reaches the store
  Kill(0);
  Restart(0, "r0");
  R(0).engine.PutPolicy(ClusterWindow("inv", 3));
  EXPECT_EQ(admitted + WindowAdmitsWithinASecond("inv"), 3)
      << "admitted within one second";
}

// Calls in flight outlive a killed replica's entry: it expires after the
// stale period (3 s), but its calls may run until their timeout.
TEST_P(ClusterScenarioTest, CallsInFlightOutliveAKilledReplicasEntry) {
  AddReplicas(2);
  PolicyConfig p;
  p.name = "pool";
  p.call_timeout = absl::Seconds(30);
  core::ConcurrencyConfig c;
  c.max_in_flight = 4;
  c.scope = core::Scope::kCluster;
  p.concurrency = c;
  Install(p);
  TickAll();
  std::vector<core::Decision> held;
  // Past the new policy's first stale period (it grants nothing), then r0
  // alone takes calls until it holds the 4 slots.
  for (int s = 0; s < 6; ++s) {
    for (int i = 0; i < 10; ++i) {
      core::Decision d = R(0).Acquire("pool");
      // Never reported: in flight until they time out.
      if (d.verdict == Verdict::kAllow) held.push_back(d);
    }
    TickAll();
    clock_.Advance(absl::Seconds(1));
  }
  ASSERT_EQ(held.size(), 4u);
  R(0).loop.TickOnce().IgnoreError();
  Kill(0);
  clock_.Advance(absl::Seconds(5));  // its entry is past the stale period
  int in_flight = 0;
  for (int s = 0; s < 3; ++s) {
    R(1).loop.TickOnce().IgnoreError();
    for (int i = 0; i < 10; ++i) {
      in_flight += R(1).Acquire("pool").verdict == Verdict::kAllow;
    }
    clock_.Advance(absl::Seconds(1));
  }
  EXPECT_EQ(in_flight, 0) << "r0's 4 calls may still run";
}

// Issue 24, hole 6: a per_key key sent back to its static share still has
// its grant applied until the reply arrives, or until the grant ends if the
// reply is lost. The grant was split while two replicas were live (50 of
// 100); with three, a replica on its static share counts as 33.
TEST_P(ClusterScenarioTest, AKeyBackOnItsStaticShareIsHeldUntilItsGrantEnds) {
  AddReplicas(2);
  PolicyConfig keyed = ClusterBucket("inv", 100, 100);
  keyed.per_key = true;
  Install(keyed);
  auto hot = [&](int r) {
    for (int i = 0; i < 200; ++i) R(r).engine.Acquire("inv", "k", 1).IgnoreError();
  };
  TickAll();
  // Past the new epoch's recovery window and the static shares' wait.
  for (int s = 0; s < 8; ++s) {
    hot(0);
    TickAll();
    clock_.Advance(absl::Seconds(1));
  }
  AddReplicas(1);
  R(2).engine.PutPolicy(keyed);
  hot(0);
  TickAll();
  clock_.Advance(absl::Milliseconds(100));
  ASSERT_EQ(R(0).engine.Inspect("inv", "k")->gates->effective_rate, 50);
  // r0 goes quiet: its next tick sends the key back, and the reply is lost.
  clock_.Advance(absl::Milliseconds(900));
  paths_[0]->LoseNextReply();
  R(0).loop.TickOnce().IgnoreError();
  R(1).loop.TickOnce().IgnoreError();
  R(2).loop.TickOnce().IgnoreError();
  for (int s = 0; s < 2; ++s) {
    hot(1);
    clock_.Advance(absl::Milliseconds(100));
    R(1).loop.TickOnce().IgnoreError();
  }
  R(2).engine.Acquire("inv", "k", 1).IgnoreError();  // on its static share
  EXPECT_LE(RateInForce("inv", "k"), 100);
}

// Issue 24, hole 8: a replica stops applying a grant at least 50 ms before
// the store frees it (the store keeps whole milliseconds, and its clock is
// not this replica's).
TEST_P(ClusterScenarioTest, AGrantEndsBeforeTheStoreFreesIt) {
  AddReplicas(2);
  Install(ClusterBucket("inv", 100, 100));
  Converge();
  R(0).loop.TickOnce().IgnoreError();
  ASSERT_TRUE(R(0).engine.Inspect("inv")->gates->has_grant);
  Cut(0, true);  // no tick of r0 gets through from here on
  clock_.Advance(absl::Seconds(3) - absl::Milliseconds(49));
  EXPECT_FALSE(R(0).engine.Inspect("inv")->gates->has_grant);
}

// Issue 24, hole 2: the store loses grant entries without an epoch change
// (an evicted key, a restore from an older snapshot, a failover to a
// lagging replica, its clock stepped forward). The first replica to tick
// finds its own entry missing while it applies a grant: nobody is granted
// more than it applies until every replica has rebuilt its entry.
TEST_P(ClusterScenarioTest, GrantEntriesLostWithoutAnEpochChangeHoldTheLimit) {
  AddReplicas(2);
  Install(ClusterBucket("inv", 100, 100));
  Converge();
  ASSERT_EQ(InForce("inv"), 100);
  EvictGrants("inv");
  clock_.Advance(absl::Milliseconds(100));
  R(1).loop.TickOnce().IgnoreError();  // finds nothing of r0's
  EXPECT_LE(InForce("inv"), 100);
  for (int s = 0; s < 5; ++s) {
    TickAll();
    EXPECT_LE(InForce("inv"), 100);
    clock_.Advance(absl::Seconds(1));
  }
  EXPECT_EQ(InForce("inv"), 100);  // and back to the whole limit
}

// Issue 24, hole 4: per_key static shares after the store lost its
// membership. Ten replicas come back one a tick; the k-th would count k
// live and take limit / (k + 1) of every cold key while the others still
// apply theirs (2.0x the limit in all).
TEST_P(ClusterScenarioTest, StaticSharesHoldWhenTheMembershipIsWiped) {
  AddReplicas(10);
  PolicyConfig keyed = ClusterBucket("inv", 100, 100);
  keyed.per_key = true;
  Install(keyed);
  Converge();
  SettleStaticShares("inv");
  for (int r = 0; r < 10; ++r) R(r).engine.Acquire("inv", "cold", 1).IgnoreError();
  ASSERT_LE(RateInForce("inv", "cold"), 100);
  ASSERT_GT(RateInForce("inv", "cold"), 0);
  WipeMembership();
  double worst = 0;
  for (int r = 0; r < 10; ++r) {
    clock_.Advance(absl::Milliseconds(50));
    R(r).loop.TickOnce().IgnoreError();
    worst = std::max(worst, RateInForce("inv", "cold"));
  }
  std::printf("per_key cold key after a membership wipe at 10 replicas: "
              "%.0f of 100 in force at worst\n", worst);
  EXPECT_LE(worst, 110);
}

// Issue 24, hole 3: the store loses everything (a Redis restarted without
// persistence) and the first to tick after it is a replica with no memory
// of the policy's epoch (a new pod). Two replicas run flat out on a
// 100/s bucket (burst 100) and apply 50 units each; the new one must not
// be handed the pool they still apply until their next reply (200 in
// force): every new epoch opens a recovery window of one stale period.
TEST_P(ClusterScenarioTest, ANewReplicaFirstAfterAWipeGetsNoPoolOthersHold) {
  const PolicyConfig p = ClusterBucket("inv", 100, 100);
  Pod("r0", p);
  Pod("r1", p);
  // Flat out (1000 calls/s against 100/s), past the new epoch's window.
  RunSplitLoad("inv", 6, 1000);
  ASSERT_EQ(InForce("inv"), 100);
  WipeStore("inv");
  clock_.Advance(absl::Milliseconds(300));
  ms_ += 300;
  Pod("r2", p);  // its first tick: epoch_seen "", the store empty
  int64_t most = InForce("inv");
  const std::vector<int64_t> per_second =
      RunSplitLoad("inv", 8, 1000, [&](int64_t) {
        most = std::max(most, InForce("inv"));
      });
  const int64_t worst = *std::max_element(per_second.begin(), per_second.end());
  std::printf("hole 3 (%s): at most %lld units in force of 100; admitted per "
              "second after the wipe:",
              GetParam().c_str(), static_cast<long long>(most));
  for (int64_t n : per_second) std::printf(" %lld", static_cast<long long>(n));
  std::printf("\n");
  EXPECT_LE(most, 100);
  EXPECT_LE(worst, 220);  // 1.10 x (limit + burst)
  // And the three share the whole limit again once the window is over.
  EXPECT_EQ(InForce("inv"), 100);
  EXPECT_GE(per_second.back(), 90);
}

// The cost of that window: a brand-new policy (or a fresh Redis) grants
// nothing beyond what replicas apply for its first stale period (3 s), and
// the whole limit from the next tick after it. Two replicas flat out.
TEST_P(ClusterScenarioTest, ANewPolicyGrantsNothingForItsFirstStalePeriod) {
  const PolicyConfig p = ClusterBucket("inv", 100, 100);
  Pod("r0", p);
  Pod("r1", p);
  const std::vector<int64_t> per_second = RunSplitLoad("inv", 6, 1000);
  std::printf("a new policy (%s), admitted per second from its first tick:",
              GetParam().c_str());
  for (int64_t n : per_second) std::printf(" %lld", static_cast<long long>(n));
  std::printf("\n");
  EXPECT_EQ(per_second[0] + per_second[1] + per_second[2], 0);
  EXPECT_GE(per_second[5], 90);
  EXPECT_EQ(InForce("inv"), 100);
}

// An operator creates a policy through the admin API while two replicas
// run: no replica can hold a grant of a name the config never had, so the
// write creates its epoch at once and the replicas admit from the tick
// that first pushes it (the one after the tick that installs it), with no
// recovery window.
TEST_P(ClusterScenarioTest, AnAdminCreatedPolicyAdmitsFromItsFirstPush) {
  Pod("r0", ClusterBucket("other", 100, 100));
  Pod("r1", ClusterBucket("other", 100, 100));
  RunSplitLoad("other", 5, 100);  // the config's epoch is 5 s old
  // Both tick at the first ms of every second: the write at 0.5 s is
  // installed at 1.001 s and first pushed at 2.001 s. Second 0 admits
  // everything (a dependency without a policy is not limited).
  int64_t worst = 0;
  const std::vector<int64_t> per_second =
      RunSplitLoad("inv", 5, 1000, [&](int64_t ms) {
        if (ms == 500) AdminWrite(ClusterBucket("inv", 100, 100));
        worst = std::max(worst, InForce("inv"));
      });
  std::printf("an admin-created policy (%s), admitted per second from the "
              "write:",
              GetParam().c_str());
  for (int64_t n : per_second) std::printf(" %lld", static_cast<long long>(n));
  std::printf("\n");
  EXPECT_EQ(per_second[1], 0);  // installed, not pushed yet
  // The first push is granted the pool at once (the first replica to tick
  // takes it whole; the split evens out as it confirms its smaller grant).
  EXPECT_GE(per_second[2], 90);
  EXPECT_GE(per_second[2] + per_second[3] + per_second[4], 200);
  EXPECT_LE(worst, 100);
  EXPECT_EQ(InForce("inv"), 100);
}

// The guard: an admin write of a new name while the config's epoch is
// younger than a stale period may be one of a config Redis lost while
// replicas still apply grants of a policy of that name, so the policy's
// first push still opens the recovery window.
TEST_P(ClusterScenarioTest, AnAdminCreateOnAFreshConfigWaitsItsWindow) {
  Pod("r0", ClusterBucket("other", 100, 100));
  Pod("r1", ClusterBucket("other", 100, 100));
  // The config's epoch was made at the pods' first tick, 0.5 s before.
  const std::vector<int64_t> per_second =
      RunSplitLoad("inv", 8, 1000, [&](int64_t ms) {
        if (ms == 500) AdminWrite(ClusterBucket("inv", 100, 100));
      });
  std::printf("an admin-created policy on a fresh config (%s), admitted per "
              "second from the write:",
              GetParam().c_str());
  for (int64_t n : per_second) std::printf(" %lld", static_cast<long long>(n));
  std::printf("\n");
  // First pushed at 2.001 s: nothing until its window has passed.
  EXPECT_EQ(per_second[2] + per_second[3] + per_second[4], 0);
  EXPECT_GE(per_second.back(), 90);
  EXPECT_EQ(InForce("inv"), 100);
}

// What the guard is for: Redis loses everything while two replicas apply
// grants of "inv" (50 each) and cannot reach it for a while (their grants
// hold for a stale period), a new pod's tick makes a new config, and an
// operator then writes "inv", a name that config never had. Made without a
// window, its epoch would let the new pod, which knows no older one, be
// granted the pool beside the others' grants.
TEST_P(ClusterScenarioTest, AnAdminCreateRightAfterAWipeHoldsTheLimit) {
  const PolicyConfig p = ClusterBucket("inv", 100, 100);
  Pod("r0", p);
  RunSplitLoad("inv", 1, 1000, [&](int64_t ms) {
    if (ms == 500) Pod("r1", p);  // ticks half a second after r0
  });
  RunSplitLoad("inv", 6, 1000);
  ASSERT_EQ(InForce("inv"), 100);
  int64_t worst = 0;
  RunSplitLoad("inv", 8, 1000, [&](int64_t ms) {
    if (ms == 100) {
      Cut(0, true);
      Cut(1, true);
      WipeStore("inv");
      Pod("r2", ClusterBucket("other", 100, 100));
      AdminWrite(p);  // r2 installs it at 1.101 s, pushes it at 2.101 s
    }
    if (ms == 4000) {
      Cut(0, false);
      Cut(1, false);
    }
    worst = std::max(worst, InForce("inv"));
  });
  std::printf("an admin write of a policy right after a wipe (%s): at most "
              "%lld in force\n",
              GetParam().c_str(), static_cast<long long>(worst));
  EXPECT_LE(worst, 100);
  EXPECT_GE(InForce("inv"), 90);  // back to (nearly) the whole limit
}

// A policy seeded from a policies file reaches the store in a tick, like
// one a replica has after a Redis was wiped: it keeps its recovery window,
// however old the config is.
TEST_P(ClusterScenarioTest, ASeededPolicyWaitsItsWindowOnAnOldConfig) {
  Pod("r0", ClusterBucket("other", 100, 100));
  Pod("r1", ClusterBucket("other", 100, 100));
  RunSplitLoad("other", 5, 100);  // the config's epoch is 5 s old
  StoredPolicy seed;
  seed.name = "inv";
  seed.blob = "seeded";
  R(0).loop.SetSeed({seed});
  Install(ClusterBucket("inv", 100, 100));
  const std::vector<int64_t> per_second = RunSplitLoad("inv", 6, 1000);
  std::printf("a seeded policy (%s), admitted per second from its first "
              "tick:",
              GetParam().c_str());
  for (int64_t n : per_second) std::printf(" %lld", static_cast<long long>(n));
  std::printf("\n");
  EXPECT_EQ(per_second[0] + per_second[1] + per_second[2], 0);
  EXPECT_GE(per_second.back(), 90);
  EXPECT_EQ(InForce("inv"), 100);
}

}  // namespace
}  // namespace sluice::cluster
