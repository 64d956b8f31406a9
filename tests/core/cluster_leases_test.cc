// SPDX-License-Identifier: Apache-2.0
// Leases of a cluster-scope limit, on a fake clock: a replica lends only
// from the grant it holds and for no longer than that grant, the tick tells
// the store what is out on loan (so a smaller grant cannot free it for
// another replica while a client may still spend it) and what the leased
// calls asked for, and a grant that shrinks leaves the bucket only what the
// loans do not hold.
#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "server/core/engine.h"
#include "tests/core/engine_test_util.h"
#include "tests/testing/fake_clock.h"

namespace sluice::core {
namespace {

class ClusterLeasesTest : public ::testing::Test {
 protected:
  ClusterLeasesTest() : engine_(&clock_, ClusterOptions()) {
    PolicyConfig api = MakePolicy("api");
    WithBucket(api, 10, 10);
    api.rate_limit->scope = Scope::kCluster;
    engine_.PutPolicy(api);
    engine_.SetStoreState(true, 2);
  }
  static Engine::Options ClusterOptions() {
    Engine::Options o;
    o.cluster = true;
    return o;
  }
  // A grant of `units` of api's 10 tokens, valid for 3 s from now.
  void Grant(int64_t units) {
    KeyGrant grant;
    grant.units[kRateUnits] = units;
    grant.limit[kRateUnits] = 10;
    grant.valid_until = clock_.Now() + absl::Seconds(3);
    DependencyUpdate update;
    update.name = "api";
    update.grants.push_back(grant);
    engine_.ApplyTick({update});
  }
  // A renewal that wants `tokens` next; 0: it gives the lease back.
  LeaseTerms Renew(LeaseSettlement s, uint32_t tokens) {
    s.client = 7;
    s.want_tokens = tokens;
    s.want_slots = tokens > 0 ? 1 : 0;
    return engine_.RenewLease("api", s);
  }
  // The tick of api's one key.
  KeyTick Tick() {
    for (const DependencyTick& d : engine_.CollectTick(absl::Seconds(1))) {
      if (d.name == "api" && d.keys.size() == 1) return d.keys[0];
    }
    ADD_FAILURE() << "no tick of api";
    return KeyTick();
  }
  int AdmitAll() {
    int n = 0;
    while (n < 1000 &&
           engine_.Acquire("api", "", 1)->verdict == Verdict::kAllow) {
      ++n;
    }
    return n;
  }

  testing::FakeClock clock_;
  Engine engine_;
};

TEST_F(ClusterLeasesTest, NothingIsLentWithoutAGrant) {
  const LeaseTerms none = Renew({}, 5);
  EXPECT_EQ(none.lease, 0u);
  EXPECT_EQ(none.reason, "no cluster grant is held here");
  Grant(10);
  clock_.Advance(absl::Seconds(1));  // the granted bucket fills
  EXPECT_NE(Renew({}, 5).lease, 0u);
}

TEST_F(ClusterLeasesTest, ALeaseEndsNoLaterThanTheGrant) {
  Grant(10);
  clock_.Advance(absl::Seconds(2));
  const LeaseTerms lease = Renew({}, 6);
  ASSERT_NE(lease.lease, 0u);
  EXPECT_EQ(lease.token_limit, 6u);
  // Granted until 3 s after it came, 2 s ago.
  EXPECT_EQ(lease.valid_for, absl::Seconds(1));
  // Past the grant's end (no tick renewed it) nothing more is lent.
  clock_.Advance(absl::Seconds(1));
  LeaseSettlement s;
  s.lease = lease.lease;
  const LeaseTerms after = Renew(s, 6);
  EXPECT_EQ(after.lease, 0u);
  EXPECT_EQ(after.reason, "no cluster grant is held here");
}

TEST_F(ClusterLeasesTest, TheTickCountsWhatIsOutOnLeaseAndWhatItWasAsked) {
  Grant(10);
  clock_.Advance(absl::Seconds(1));
  const LeaseTerms lease = Renew({}, 6);
  ASSERT_EQ(lease.token_limit, 6u);
  KeyTick tick = Tick();
  EXPECT_EQ(tick.usage[kRateUnits], 6);
  // Until the lease may no longer be decided from, and its calls have run.
  EXPECT_GE(tick.usage_left[kRateUnits], lease.valid_for);

  // The client took 4 tokens and its spent lease refused 3 more: 7 asked
  // in a tick of 1 s, at 10/s per 10 tokens of capacity, is 7 units.
  LeaseSettlement s;
  s.lease = lease.lease;
  s.tokens_spent = 4;
  s.admitted = 4;
  s.successes = 4;
  s.tokens_refused = 3;
  clock_.Advance(absl::Seconds(1));
  Grant(10);
  const uint64_t before = tick.admitted_total;
  Renew(s, 0);  // and gives the rest back
  tick = Tick();
  EXPECT_DOUBLE_EQ(tick.demand[kRateUnits], 7);
  EXPECT_EQ(tick.admitted_total, before + 4);
  EXPECT_EQ(tick.usage[kRateUnits], 0);
}

TEST_F(ClusterLeasesTest, AGrantThatShrinksLeavesTheLoansTheirRoom) {
  Grant(10);
  clock_.Advance(absl::Seconds(1));
  ASSERT_EQ(Renew({}, 8).token_limit, 8u);
  EXPECT_EQ(AdmitAll(), 2);  // 10 - 8 lent
  // A grant of 4: the 8 on lease fill it, so nothing here until they
  // come back, however long the bucket has to refill.
  Grant(4);
  clock_.Advance(absl::Seconds(2));
  Grant(4);
  EXPECT_EQ(AdmitAll(), 0);
  // And the store still counts all 8 as in use here.
  EXPECT_EQ(Tick().usage[kRateUnits], 8);
}

TEST_F(ClusterLeasesTest, WithTheStoreDownOnlyALocalSplitIsLent) {
  Grant(10);
  clock_.Advance(absl::Seconds(1));
  engine_.SetStoreState(false, 2);
  // FAIL_OPEN (the default): the limit does not hold, each call is asked.
  const LeaseTerms open = Renew({}, 3);
  EXPECT_EQ(open.lease, 0u);
  EXPECT_EQ(open.reason,
            "the cluster store is down: on_store_failure decides each call");

  PolicyConfig local = MakePolicy("api");
  WithBucket(local, 10, 10);
  local.rate_limit->scope = Scope::kCluster;
  local.on_store_failure = StoreFailureMode::kLocal;
  engine_.PutPolicy(local);
  clock_.Advance(absl::Seconds(1));
  // 10 over the last 2 replicas known: 5, with no grant to end.
  const LeaseTerms split = Renew({}, 8);
  ASSERT_NE(split.lease, 0u);
  EXPECT_EQ(split.token_limit, 5u);
  EXPECT_EQ(split.valid_for, ClientLeases::kMaxValidFor);
}

}  // namespace
}  // namespace sluice::core
