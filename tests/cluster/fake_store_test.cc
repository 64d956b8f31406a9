// SPDX-License-Identifier: Apache-2.0
#include <algorithm>
#include <cstdio>
#include <deque>
#include <random>

#include "tests/cluster/cluster_scenarios.h"
#include "tests/cluster/membership_cases.h"
#include "tests/testing/manual_env.h"
#include "tests/testing/stats_recorder.h"

namespace sluice::cluster {
namespace {

INSTANTIATE_TEST_SUITE_P(Fake, ClusterScenarioTest, ::testing::Values("fake"));
INSTANTIATE_TEST_SUITE_P(Fake, FakeStoreTest, ::testing::Values("fake"));

// A store that answers a leave with no policies, as a central replica's
// lease ledger does.
class EmptyLeaveStore final : public testing::ForwardingStore {
 public:
  using ForwardingStore::ForwardingStore;
  absl::StatusOr<TickReply> Tick(const TickRequest& request) override {
    absl::StatusOr<TickReply> reply = inner()->Tick(request);
    if (reply.ok() && request.leaving) reply->policies.clear();
    return reply;
  }
};

// A store with a status to show, as RedisStore and UpstreamStore have.
class StatusStore final : public testing::ForwardingStore {
 public:
  using ForwardingStore::ForwardingStore;
  StoreStatus status() const override {
    StoreStatus s;
    s.endpoint = "10.0.0.7:6379";
    s.errors = {{"auth", 4}, {"readonly", 1}};
    s.events = {{"master_changed", 2}};
    return s;
  }
};

// The sync loop's metrics are its stats(), and a store's are its status().
TEST(SyncLoopStatsTest, TheLoopAndItsStoreWriteTheirMetrics) {
  testing::FakeClock clock;
  testing::FakeStore store(&clock);
  StatusStore path(&store);
  Replica r("r0", &clock, &path);
  ASSERT_TRUE(r.loop.TickOnce().ok());
  clock.Advance(absl::Seconds(1));
  ASSERT_TRUE(r.loop.TickOnce().ok());
  store.SetDown(true);
  clock.Advance(absl::Seconds(1));
  EXPECT_FALSE(r.loop.TickOnce().ok());

  using sluice::testing::StatsRecorder;
  const SyncStats stats = r.loop.stats();
  StatsRecorder loop(r.loop);
  EXPECT_EQ(loop.Sum("sluice_store_up"), stats.store_up ? 1 : 0);
  EXPECT_EQ(loop.Sum("sluice_sync_ticks_total"), 3);
  EXPECT_EQ(loop.Sum("sluice_sync_errors_total"), 1);
  EXPECT_EQ(loop.Sum("sluice_live_replicas"), 1);
  EXPECT_DOUBLE_EQ(loop.Sum("sluice_sync_tick_duration_seconds"),
                   absl::ToDoubleSeconds(stats.last_tick_duration));
  EXPECT_EQ(loop.Find("sluice_forwarded_reports_total").size(), 3u);
  for (const char* direction : {"out", "in", "dropped"}) {
    EXPECT_EQ(loop.Sum("sluice_forwarded_reports_total",
                       {{"direction", direction}}),
              0);
  }
  EXPECT_EQ(loop.Find("sluice_store_clock_offset_seconds").size(), 1u);
  EXPECT_EQ(loop.Sum("sluice_store_resets_total"), 0);
  EXPECT_EQ(loop.Sum("sluice_sync_quiet_policies"), 0);

  StatsRecorder status(path);
  EXPECT_EQ(status.Sum("sluice_store_errors_total", {{"kind", "auth"}}), 4);
  EXPECT_EQ(status.Sum("sluice_store_errors_total", {{"kind", "readonly"}}),
            1);
  EXPECT_EQ(
      status.Sum("sluice_store_events_total", {{"kind", "master_changed"}}),
      2);
  EXPECT_EQ(status.Sum("sluice_store_endpoint_info",
                       {{"endpoint", "10.0.0.7:6379"}}),
            1);
  // A store with nothing to show (the fake) writes nothing.
  EXPECT_TRUE(StatsRecorder(store).series().empty());
}

TEST(SyncLoopLeaveTest, ALeaveAnsweredWithNoPoliciesSucceeds) {
  testing::FakeClock clock;
  testing::FakeStore store(&clock);
  EmptyLeaveStore path(&store);
  Replica r("r0", &clock, &path);
  PolicyConfig p;
  p.name = "inv";
  core::RateLimitConfig rl;
  rl.rate = 100;
  rl.burst = 100;
  rl.scope = core::Scope::kCluster;
  p.rate_limit = rl;
  r.engine.PutPolicy(p);
  r.Acquire("inv");
  ASSERT_TRUE(r.loop.TickOnce().ok());
  const absl::Status s = r.loop.Leave();
  EXPECT_TRUE(s.ok()) << s;
}

// The loop's ticks run as a periodic task of its Env: at once on Start, an
// interval after a good tick, `retry` after a failed one, kMinGap after a
// nudge, and never after Stop (which leaves on the caller's thread).
TEST(SyncLoopScheduleTest, TicksFollowTheIntervalTheRetryAndNudges) {
  testing::FakeClock clock;
  testing::ManualEnv env(&clock);
  testing::FakeStore store(&clock);
  core::Engine engine(&clock, Replica::EngineOptions());
  SyncLoop::Options options;
  options.replica_id = "r0";
  options.env = &env;
  SyncLoop loop(&engine, &store, &clock, options);
  loop.Nudge();  // before Start: the first tick answers it
  EXPECT_EQ(env.running(), 0);
  loop.Start();
  EXPECT_EQ(env.RunDue(), 1);
  EXPECT_EQ(loop.stats().ticks, 1u);
  EXPECT_EQ(env.next_due(), clock.Now() + options.interval);
  clock.Advance(options.interval - absl::Milliseconds(1));
  EXPECT_EQ(env.RunDue(), 0);
  clock.Advance(absl::Milliseconds(1));
  store.FailNextTicks(1);
  EXPECT_EQ(env.RunDue(), 1);
  EXPECT_EQ(loop.stats().failures, 1u);
  EXPECT_EQ(env.next_due(), clock.Now() + options.retry);
  clock.Advance(options.retry);
  EXPECT_EQ(env.RunDue(), 1);
  EXPECT_EQ(env.next_due(), clock.Now() + options.interval);
  loop.Nudge();
  loop.Nudge();
  EXPECT_EQ(env.next_due(), clock.Now() + SyncLoop::kMinGap);
  clock.Advance(SyncLoop::kMinGap);
  EXPECT_EQ(env.RunDue(), 1);
  EXPECT_EQ(loop.stats().ticks, 4u);
  EXPECT_EQ(env.next_due(), clock.Now() + options.interval);
  const uint64_t applied = store.ticks_applied();
  loop.Stop();
  EXPECT_EQ(store.ticks_applied(), applied + 1);  // the leave
  EXPECT_EQ(env.running(), 0);
  loop.Nudge();
  EXPECT_EQ(env.RunAll(), 0);
}

TEST_P(FakeStoreTest, AdmittedCountsReachTheStoreOnceEach) {
  AddReplicas(2);
  Install(ClusterBucket("inv", 1000, 1000));
  int64_t allowed0 = 0;
  for (int t = 0; t < 5; ++t) {
    for (int i = 0; i < 30; ++i) {
      allowed0 += R(0).Acquire("inv").verdict == Verdict::kAllow;
    }
    // A reply lost after the store applied the tick must not count twice.
    if (t == 2) store_.LoseNextReplies(1);
    clock_.Advance(absl::Seconds(1));
    TickAll();
  }
  EXPECT_EQ(static_cast<int64_t>(store_.Admitted("inv", "r0")), allowed0);
  EXPECT_EQ(store_.Admitted("inv", "r1"), 0u);
}


// Store-side expiry runs on the store's clock, which only the fake store
// lets a test move.
TEST_P(FakeStoreTest, ADeadReplicasProbeLeaseEndsWithItsMembership) {
  AddReplicas(2);
  PolicyConfig p = WithBreaker(ClusterBucket("pay", 1000, 1000));
  p.call_timeout = absl::Seconds(30);  // a lease could outlive it by far
  Install(p);
  Converge();
  FailCalls(0, "pay", 3);
  for (int s = 0; s < 6; ++s) {
    TickAll();
    clock_.Advance(absl::Seconds(1));
  }
  EXPECT_EQ(R(0).Acquire("pay").reason, Reason::kProbeLimit);
  R(0).loop.TickOnce().IgnoreError();  // replica 0 gets the one lease
  ASSERT_EQ(R(0).Acquire("pay").verdict, Verdict::kAllow);
  // Replica 0 dies with its probe in flight. Replica 1 gets the lease once
  // replica 0 has been silent for the stale period, not 2 x call_timeout.
  int waited = 0;
  bool probed = false;
  while (!probed && waited < 10) {
    clock_.Advance(absl::Seconds(1));
    ++waited;
    R(1).Acquire("pay");  // asks for a lease
    R(1).loop.TickOnce().IgnoreError();
    probed = R(1).Acquire("pay").verdict == Verdict::kAllow;
  }
  EXPECT_TRUE(probed);
  EXPECT_LE(waited, 4);
}

// The guarantee of grants, under a seeded random schedule: ticks at
// drifting offsets, replies lost after the store applied them, ticks that
// fail, short store outages, replicas that stop gracefully or are killed and
// come back under the same id. At no instant may the cluster hold more calls
// in flight than the cap, and no one-second span may admit more than a
// bucket's rate plus its burst.
TEST_P(FakeStoreTest, GrantsNeverAddUpToMoreThanTheLimitWhateverTheTiming) {
  constexpr int kReplicas = 4;
  AddReplicas(kReplicas);
  PolicyConfig slots;
  slots.name = "slots";
  core::ConcurrencyConfig c;
  c.max_in_flight = 3;
  c.scope = core::Scope::kCluster;
  slots.concurrency = c;
  PolicyConfig bucket = ClusterBucket("bucket", 10, 10);
  // A replica that counts the store as down refuses, rather than failing
  // open, so that the guarantee must hold at every instant.
  slots.on_store_failure = core::StoreFailureMode::kFailClosed;
  bucket.on_store_failure = core::StoreFailureMode::kFailClosed;
  auto install = [&](int r) {
    R(r).engine.PutPolicy(slots);
    R(r).engine.PutPolicy(bucket);
  };
  for (int r = 0; r < kReplicas; ++r) install(r);
  // sluiced ticks once before it serves.
  TickAll();

  std::mt19937 random(20261201);
  auto chance = [&](double p) {
    return std::uniform_real_distribution<double>(0, 1)(random) < p;
  };
  struct Held {
    int replica;
    core::PermitId permit;
    int until_step;
  };
  std::vector<Held> held;
  std::vector<int> next_tick(kReplicas);
  for (int r = 0; r < kReplicas; ++r) next_tick[r] = r * 5;
  std::deque<int> admitted_last_second;  // bucket admissions per 50 ms step
  int64_t window_sum = 0;
  int most_in_flight = 0;
  int64_t most_in_a_second = 0;
  int64_t slots_admitted = 0;
  int64_t bucket_admitted = 0;
  int store_down_until = -1;
  constexpr int kSteps = 2400;  // 50 ms each: two simulated minutes
  for (int step = 0; step < kSteps; ++step) {
    clock_.Advance(absl::Milliseconds(50));
    store_.SetDown(step < store_down_until);
    if (store_down_until < step && chance(0.004)) {
      store_down_until = step + 1 + static_cast<int>(random() % 40);  // < 2 s
    }
    // Reports of calls that are done.
    for (auto it = held.begin(); it != held.end();) {
      if (it->until_step <= step) {
        R(it->replica).engine.Report("slots", "", it->permit,
                                     Outcome::kSuccess, absl::Milliseconds(5));
        it = held.erase(it);
      } else {
        ++it;
      }
    }
    int admitted_now = 0;
    for (int r = 0; r < kReplicas; ++r) {
      for (int k = 0; k < 3; ++k) {
        const core::Decision d = R(r).Acquire("slots");
        if (d.verdict == Verdict::kAllow) {
          ++slots_admitted;
          held.push_back({r, d.permit_id,
                          step + 1 + static_cast<int>(random() % 10)});
        }
        admitted_now += R(r).Acquire("bucket").verdict == Verdict::kAllow;
      }
    }
    bucket_admitted += admitted_now;
    admitted_last_second.push_back(admitted_now);
    window_sum += admitted_now;
    if (admitted_last_second.size() > 20) {
      window_sum -= admitted_last_second.front();
      admitted_last_second.pop_front();
    }
    most_in_a_second = std::max(most_in_a_second, window_sum);
    most_in_flight = std::max<int>(most_in_flight, held.size());
    ASSERT_LE(held.size(), 3u) << "step " << step;
    ASSERT_LE(window_sum, 20) << "step " << step;
    // What the replicas may use right now adds up to at most the limit.
    int64_t slot_grants = 0, token_grants = 0;
    for (int r = 0; r < kReplicas; ++r) {
      const auto s = R(r).engine.Inspect("slots");
      const auto b = R(r).engine.Inspect("bucket");
      if (s->gates->has_grant) slot_grants += s->gates->granted[1];
      if (b->gates->has_grant) token_grants += b->gates->granted[0];
    }
    ASSERT_LE(slot_grants, 3) << "step " << step;
    ASSERT_LE(token_grants, 10) << "step " << step;

    for (int r = 0; r < kReplicas; ++r) {
      if (step < next_tick[r]) continue;
      next_tick[r] = step + 18 + static_cast<int>(random() % 5);  // ~1 s
      if (chance(0.15)) store_.LoseNextReplies(1);
      if (chance(0.05)) store_.FailNextTicks(1);
      R(r).loop.TickOnce().IgnoreError();
      if (chance(0.02)) {
        // Stops (gracefully or not) and comes back under the same id; its
        // calls in flight die with it.
        if (chance(0.5)) R(r).loop.Leave().IgnoreError();
        held.erase(std::remove_if(held.begin(), held.end(),
                                  [r](const Held& h) { return h.replica == r; }),
                   held.end());
        Restart(r, "r" + std::to_string(r));
        install(r);
        R(r).loop.TickOnce().IgnoreError();
      }
    }
  }
  std::printf("most in flight %d (cap 3), most in 1 s %lld (rate 10 + burst "
              "10), admitted %lld calls and %lld permits\n",
              most_in_flight, static_cast<long long>(most_in_a_second),
              static_cast<long long>(slots_admitted),
              static_cast<long long>(bucket_admitted));
  // And the cluster did admit: the schedule is not one that refuses all.
  EXPECT_GT(slots_admitted, 500);
  EXPECT_GT(bucket_admitted, 600);
}

TEST_P(FakeStoreTest, StoreFailureModes) {
  AddReplicas(1);
  PolicyConfig open = ClusterBucket("open", 2, 2);
  PolicyConfig local = ClusterBucket("local", 2, 2);
  local.on_store_failure = core::StoreFailureMode::kLocal;
  PolicyConfig closed = ClusterBucket("closed", 2, 2);
  closed.on_store_failure = core::StoreFailureMode::kFailClosed;
  PolicyConfig local_only;
  local_only.name = "plain";
  core::RateLimitConfig rl;
  rl.rate = 2;
  rl.burst = 2;
  local_only.rate_limit = rl;
  for (const auto& p : {open, local, closed, local_only}) Install(p);
  Converge();
  store_.SetDown(true);
  clock_.Advance(absl::Seconds(1));
  // A store silent for less than the stale period is not an outage: the
  // replica keeps its grants.
  EXPECT_FALSE(R(0).loop.TickOnce().ok());
  EXPECT_TRUE(R(0).loop.stats().store_up);
  clock_.Advance(absl::Seconds(2));
  EXPECT_FALSE(R(0).loop.TickOnce().ok());
  EXPECT_FALSE(R(0).loop.stats().store_up);

  auto count = [&](const std::string& dep, Reason* last) {
    int allowed = 0;
    for (int i = 0; i < 10; ++i) {
      const core::Decision d = R(0).Acquire(dep);
      if (d.verdict == Verdict::kAllow) ++allowed;
      *last = d.reason;
    }
    return allowed;
  };
  Reason last;
  EXPECT_EQ(count("open", &last), 10);  // cluster limit lifted
  EXPECT_EQ(count("local", &last), 2);  // last share kept
  EXPECT_EQ(last, Reason::kRateLimited);
  EXPECT_EQ(count("closed", &last), 0);
  EXPECT_EQ(last, Reason::kStoreUnavailable);
  EXPECT_EQ(count("plain", &last), 2);  // local limits keep working

  store_.SetDown(false);
  clock_.Advance(absl::Seconds(1));
  ASSERT_TRUE(R(0).loop.TickOnce().ok());
  EXPECT_TRUE(R(0).loop.stats().store_up);
  // Enforced again, with a grant that starts empty and refills at its rate.
  clock_.Advance(absl::Seconds(1));
  EXPECT_EQ(count("open", &last), 2);
  EXPECT_EQ(last, Reason::kRateLimited);
  clock_.Advance(absl::Seconds(1));
  EXPECT_EQ(count("closed", &last), 2);
}


// The departed replicas' warm entries last key_ttl (10 minutes by default)
// after their last tick, then a new replica starts cold. Fake store only:
// Redis's own clock cannot be moved on.
TEST_P(FakeStoreTest, WarmEntriesOfDepartedReplicasExpireAfterTheKeyTtl) {
  AddReplicas(1);
  Install(Adaptive("search"));
  TickAll();
  const uint32_t learned = LearnLimit(0, "search", 6);
  ASSERT_GT(learned, 5u);
  TickAll();
  Stop(0);
  clock_.Advance(absl::Minutes(9));
  Restart(0, "within-ttl");
  R(0).engine.PutPolicy(Adaptive("search"));
  R(0).loop.TickOnce().IgnoreError();
  EXPECT_EQ(AdaptiveLimitOf(0, "search"), learned);
  Kill(0);

  clock_.Advance(absl::Minutes(2));  // 11 minutes after the last entry
  Restart(0, "after-ttl");
  R(0).engine.PutPolicy(Adaptive("search"));
  R(0).loop.TickOnce().IgnoreError();
  EXPECT_EQ(AdaptiveLimitOf(0, "search"), 5u);
}

}  // namespace
}  // namespace sluice::cluster

namespace sluice::cluster {
namespace {

// Issue 24: a tick reply lists the replicas only when the membership
// changed since the one the replica applied.
TEST(FakeStoreMembershipTest, ListsTheReplicasOnlyWhenTheMembershipChanged) {
  testing::FakeClock clock;
  testing::FakeStore store(&clock);
  testing_members::CheckMembershipVersions(
      &store, [&](absl::Duration d) { clock.Advance(d); },
      [&] { store.WipeAll(); });
}

// The membership's epoch and version lost alone (the key evicted): a new
// epoch, so the pair a replica saw does not come back.
TEST(FakeStoreMembershipTest, ANewEpochWhenTheVersionIsLostAlone) {
  testing::FakeClock clock;
  testing::FakeStore store(&clock);
  testing_members::MemberClient a(&store, "a", absl::Seconds(3));
  ASSERT_TRUE(a.Tick());
  ASSERT_TRUE(a.Tick());
  ASSERT_TRUE(a.last.members_unchanged);
  const auto seen = a.seen();
  store.WipeMembershipVersion();
  ASSERT_TRUE(a.Tick());
  EXPECT_FALSE(a.last.members_unchanged);
  EXPECT_EQ(a.list, std::vector<std::string>({"a"}));
  EXPECT_NE(a.seen().first, seen.first);
}

// SyncLoop keeps the last list it got: its live count, static shares and
// the replicas it forwards reports to stay as they were while the store
// leaves the list out, and follow the store when it lists again.
TEST_P(FakeStoreTest, SyncLoopKeepsItsMembershipWhileTheStoreLeavesItOut) {
  AddReplicas(3);
  PolicyConfig keyed = ClusterBucket("inv", 90, 90);
  keyed.per_key = true;
  Install(keyed);
  Converge();
  const uint64_t listed = store_.membership_listed();
  const uint64_t kept = store_.membership_kept();
  for (int t = 0; t < 3; ++t) {
    TickAll();
    clock_.Advance(absl::Seconds(1));
  }
  EXPECT_EQ(store_.membership_listed(), listed);
  EXPECT_EQ(store_.membership_kept(), kept + 9);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(R(r).loop.stats().live_replicas, 3u) << "r" << r;
  }
  // Static shares still count 3 live replicas (limit / (3 + 1) each).
  for (int r = 0; r < 3; ++r) {
    R(r).engine.Acquire("inv", "cold", 1).IgnoreError();
  }
  EXPECT_LE(RateInForce("inv", "cold"), 90);
  EXPECT_GT(RateInForce("inv", "cold"), 0);
  // Reports still go to replicas of the kept list, and not elsewhere.
  core::ForwardedReport f;
  f.issuer = "r0";
  f.dependency = "inv";
  EXPECT_TRUE(R(1).loop.Forward(f));
  f.issuer = "nobody";
  EXPECT_FALSE(R(1).loop.Forward(f));

  // A leave is listed again, once, to every replica.
  Stop(2);
  TickAll();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(R(r).loop.stats().live_replicas, 2u) << "r" << r;
  }
  f.issuer = "r2";
  EXPECT_FALSE(R(1).loop.Forward(f));
  f.issuer = "r0";
  EXPECT_TRUE(R(1).loop.Forward(f));
  const uint64_t listed_after = store_.membership_listed();
  clock_.Advance(absl::Seconds(1));
  TickAll();
  EXPECT_EQ(store_.membership_listed(), listed_after);
}

// per_key static shares wait until every grant the store issued before it
// counted the process has ended (SyncLoop::static_share_wait(): the stale
// period and an interval after the first good tick).
class StaticShareWaitTest : public FakeStoreTest {
 protected:
  static constexpr int64_t kLimit = 90;
  void SetUp() override {
    FakeStoreTest::SetUp();
    keyed_ = ClusterBucket("inv", kLimit, kLimit);
    keyed_.per_key = true;
  }
  // A second of load: 200 calls for "hot" on each of the first `hot`
  // replicas, then every running replica ticks.
  void Second(int hot) {
    for (int r = 0; r < hot; ++r) {
      if (!Running(r)) continue;
      for (int i = 0; i < 200; ++i) {
        R(r).engine.Acquire("inv", "hot", 1).IgnoreError();
      }
    }
    TickAll();
    clock_.Advance(absl::Seconds(1));
  }
  // Units of "hot" in force across the replicas: each one's grant while
  // it holds one, and its static share in any case (the engine's own).
  int64_t HotInForce() {
    int64_t sum = 0;
    for (size_t r = 0; r < replicas_.size(); ++r) {
      if (!Running(static_cast<int>(r))) continue;
      Replica& rep = R(static_cast<int>(r));
      int64_t units = rep.engine.StaticUnits("inv")[core::kRateUnits];
      absl::StatusOr<core::LivePolicyStatus> s = rep.engine.Inspect("inv", "hot");
      if (s.ok() && s->gates && s->gates->has_grant) {
        units = std::max(units, s->gates->granted[core::kRateUnits]);
      }
      sum += units;
    }
    return sum;
  }
  int64_t StaticOf(int r) {
    return R(r).engine.StaticUnits("inv")[core::kRateUnits];
  }
  PolicyConfig keyed_;
};

TEST_P(StaticShareWaitTest, AJoinerTakesNoStaticShareBeforeTheGrantsThatMissedItEnd) {
  AddReplicas(2);
  Install(keyed_);
  for (int t = 0; t < 8; ++t) Second(2);
  // Both replicas hot: the store hands out the whole pool.
  EXPECT_EQ(HotInForce(), kLimit);
  EXPECT_EQ(StaticOf(0), kLimit / 3);

  AddReplicas(1);
  R(2).engine.PutPolicy(keyed_);
  const absl::Time joined = clock_.Now();
  int64_t worst = 0;
  absl::Duration waited = absl::InfiniteDuration();
  for (int t = 0; t < 8; ++t) {
    Second(2);
    worst = std::max(worst, HotInForce());
    if (StaticOf(2) > 0 && waited == absl::InfiniteDuration()) {
      waited = clock_.Now() - absl::Seconds(1) - joined;
    }
  }
  EXPECT_LE(worst, kLimit);
  // Its first good tick at +0, the stale period (3 s) and an interval (1 s)
  // later its static share; no earlier.
  EXPECT_EQ(waited, R(2).loop.static_share_wait());
  EXPECT_EQ(waited, absl::Seconds(4));
  EXPECT_EQ(StaticOf(2), kLimit / 4);
}

// The cost: a new replica has no static share for a cold key, and the
// store grants none for a key whose demand its static share covers; the
// replica serves it once its wait is over, from the tick that ends it.
TEST_P(StaticShareWaitTest, ANewReplicaServesAColdKeyOnlyAfterItsWait) {
  AddReplicas(1);
  Install(keyed_);
  const absl::Time first_tick = clock_.Now();
  absl::Duration served = absl::InfiniteDuration();
  for (int ms = 0; ms < 10000 && served == absl::InfiniteDuration(); ++ms) {
    if (ms % 1000 == 0) R(0).loop.TickOnce().IgnoreError();
    if (ms % 100 == 0) {
      absl::StatusOr<core::Decision> d = R(0).engine.Acquire("inv", "k", 1);
      ASSERT_TRUE(d.ok());
      if (d->verdict == core::Verdict::kAllow) served = clock_.Now() - first_tick;
    }
    clock_.Advance(absl::Milliseconds(1));
  }
  // Its bucket starts empty at the static share and fills at the rate.
  EXPECT_GE(served, R(0).loop.static_share_wait());
  EXPECT_LE(served, R(0).loop.static_share_wait() + absl::Milliseconds(100));
  std::printf("cold per_key key on a new replica: first call allowed %s "
              "after its first tick\n",
              absl::FormatDuration(served).c_str());
}

// After the store was out of reach for a stale period it has forgotten the
// replica, and the grants it issued meanwhile did not count it: the wait
// starts again at the first good tick.
TEST_P(StaticShareWaitTest, TheWaitStartsAgainAfterTheStoreWasDown) {
  AddReplicas(2);
  Install(keyed_);
  for (int t = 0; t < 6; ++t) Second(0);
  ASSERT_EQ(StaticOf(1), kLimit / 3);
  paths_[1]->set_cut(true);
  for (int t = 0; t < 4; ++t) Second(0);
  paths_[1]->set_cut(false);
  Second(0);
  EXPECT_EQ(StaticOf(1), 0);
  EXPECT_EQ(StaticOf(0), kLimit / 3);
  for (int t = 0; t < 3; ++t) Second(0);
  EXPECT_EQ(StaticOf(1), 0);
  Second(0);
  EXPECT_EQ(StaticOf(1), kLimit / 3);
  // A failed tick within the stale period is no restart.
  paths_[1]->set_cut(true);
  Second(0);
  paths_[1]->set_cut(false);
  Second(0);
  EXPECT_EQ(StaticOf(1), kLimit / 3);
}

// A store that lost its membership (a new epoch) counts every replica anew.
TEST_P(StaticShareWaitTest, TheWaitStartsAgainWhenTheStoreLostItsMembership) {
  AddReplicas(2);
  Install(keyed_);
  for (int t = 0; t < 6; ++t) Second(0);
  ASSERT_EQ(StaticOf(0), kLimit / 3);
  store_.WipeMembershipVersion();
  Second(0);
  EXPECT_EQ(StaticOf(0), 0);
  EXPECT_EQ(StaticOf(1), 0);
  for (int t = 0; t < 4; ++t) Second(0);
  EXPECT_EQ(StaticOf(0), kLimit / 3);
  EXPECT_EQ(StaticOf(1), kLimit / 3);
}

INSTANTIATE_TEST_SUITE_P(Fake, StaticShareWaitTest, ::testing::Values("fake"));

}  // namespace
}  // namespace sluice::cluster
