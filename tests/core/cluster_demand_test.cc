// SPDX-License-Identifier: Apache-2.0
// EventSink::OnClusterDemand: a cluster-scope gate that refuses a key the
// store has heard no demand for tells the sink once, so the sync loop can
// tick at once instead of a whole interval later. And
// Engine::ClusterLimitsNotAdmitting, what a new replica waits for before it
// reports SERVING: a cluster-scope limit that cannot admit a call here.
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "server/core/engine.h"
#include "server/core/events.h"
#include "tests/core/engine_test_util.h"
#include "tests/testing/fake_clock.h"

namespace sluice::core {
namespace {

class DemandSink final : public EventSink {
 public:
  void OnBreakerTransition(const BreakerTransition&) override {}
  void OnClusterDemand(const std::string& dependency,
                       const std::string& key) override {
    absl::MutexLock lock(&mu_);
    seen_.emplace_back(dependency, key);
  }
  std::vector<std::pair<std::string, std::string>> seen() {
    absl::MutexLock lock(&mu_);
    return seen_;
  }

 private:
  absl::Mutex mu_;
  std::vector<std::pair<std::string, std::string>> seen_ ABSL_GUARDED_BY(mu_);
};

PolicyConfig ClusterBucket(const std::string& name, bool per_key) {
  PolicyConfig p = MakePolicy(name);
  WithBucket(p, 1, 1);
  p.rate_limit->scope = Scope::kCluster;
  p.per_key = per_key;
  return p;
}

class ClusterDemandTest : public ::testing::Test {
 protected:
  ClusterDemandTest() : engine_(&clock_, ClusterOptions(), &sink_) {}
  static Engine::Options ClusterOptions() {
    Engine::Options o;
    o.cluster = true;
    return o;
  }
  Reason Call(const std::string& dep, const std::string& key = "") {
    absl::StatusOr<Decision> d = engine_.Acquire(dep, key, 1);
    EXPECT_TRUE(d.ok()) << d.status();
    return d.ok() ? d->reason : Reason::kNone;
  }
  void Tick() {
    clock_.Advance(absl::Seconds(1));
    engine_.CollectTick(absl::Seconds(1));
  }

  testing::FakeClock clock_;
  DemandSink sink_;
  Engine engine_;
};

TEST_F(ClusterDemandTest, FirstRefusalSignalsOnceAndAQuietKeySignalsAgain) {
  engine_.PutPolicy(ClusterBucket("api", false));
  engine_.SetStoreState(true, 2);
  // No grant yet: the cluster-scope bucket holds nothing.
  EXPECT_EQ(Call("api"), Reason::kRateLimited);
  EXPECT_EQ(Call("api"), Reason::kRateLimited);
  ASSERT_EQ(sink_.seen().size(), 1u);
  EXPECT_EQ(sink_.seen()[0].first, "api");
  EXPECT_EQ(sink_.seen()[0].second, "");

  // The tick pushes that demand: refusals after it are the store's to
  // answer at the next regular tick, so a starved key adds no ticks.
  Tick();
  EXPECT_EQ(Call("api"), Reason::kRateLimited);
  Tick();
  EXPECT_EQ(Call("api"), Reason::kRateLimited);
  EXPECT_EQ(sink_.seen().size(), 1u);

  // A quiet tick (no demand pushed): the next refusal is new demand.
  Tick();
  Tick();
  EXPECT_EQ(Call("api"), Reason::kRateLimited);
  EXPECT_EQ(sink_.seen().size(), 2u);
}

TEST_F(ClusterDemandTest, NoSignalWhileTheStoreIsDownOrForALocalLimit) {
  PolicyConfig local = MakePolicy("local");
  WithBucket(local, 1, 1);
  engine_.PutPolicy(local);
  engine_.PutPolicy(ClusterBucket("api", false));
  engine_.SetStoreState(true, 2);
  EXPECT_EQ(Call("local"), Reason::kNone);
  EXPECT_EQ(Call("local"), Reason::kRateLimited);
  EXPECT_TRUE(sink_.seen().empty());

  // Store down (LOCAL): the last known replica count splits the limit and
  // a tick would not reach the store anyway.
  engine_.SetStoreState(false, 2);
  Call("api");
  Call("api");
  EXPECT_TRUE(sink_.seen().empty());
}

TEST_F(ClusterDemandTest, PerKeySignalsAtMostOncePerTick) {
  engine_.PutPolicy(ClusterBucket("users", true));
  engine_.SetStoreState(true, 2);
  // A static share of floor(1 / 3) = 0: every new key is refused.
  EXPECT_EQ(Call("users", "a"), Reason::kRateLimited);
  EXPECT_EQ(Call("users", "b"), Reason::kRateLimited);
  ASSERT_EQ(sink_.seen().size(), 1u);
  EXPECT_EQ(sink_.seen()[0].second, "a");
  // The next tick carries both; a key new after it signals again.
  Tick();
  EXPECT_EQ(Call("users", "a"), Reason::kRateLimited);
  EXPECT_EQ(Call("users", "c"), Reason::kRateLimited);
  ASSERT_EQ(sink_.seen().size(), 2u);
  EXPECT_EQ(sink_.seen()[1].second, "c");
}

// A grant of `units` of the rate limit of `dependency` (of `limit`),
// valid for a stale period.
DependencyUpdate RateGrant(const std::string& dependency, int64_t units,
                           int64_t limit, absl::Time now) {
  KeyGrant grant;
  grant.units[kRateUnits] = units;
  grant.limit[kRateUnits] = limit;
  grant.valid_until = now + absl::Seconds(3);
  DependencyUpdate update;
  update.name = dependency;
  update.grants.push_back(grant);
  return update;
}

TEST_F(ClusterDemandTest, ALimitAdmitsOnceGrantedAndItsBucketHoldsAToken) {
  PolicyConfig api = MakePolicy("api");
  WithBucket(api, 10, 10);
  api.rate_limit->scope = Scope::kCluster;
  engine_.PutPolicy(api);
  PolicyConfig local = MakePolicy("local");
  WithBucket(local, 10, 10);
  engine_.PutPolicy(local);
  engine_.SetStoreState(true, 2);
  EXPECT_EQ(engine_.ClusterLimitsNotAdmitting(),
            std::vector<std::string>{"api: no grant of its rate limit"});

  // A grant that grows fills the bucket at the granted rate: 5 of 10 units
  // refill at 5/s, so the first whole token is 200 ms away.
  engine_.ApplyTick({RateGrant("api", 5, 10, clock_.Now())});
  EXPECT_EQ(engine_.ClusterLimitsNotAdmitting(),
            std::vector<std::string>{"api: its granted bucket is filling"});
  clock_.Advance(absl::Milliseconds(200));
  EXPECT_TRUE(engine_.ClusterLimitsNotAdmitting().empty());
  EXPECT_EQ(Call("api"), Reason::kNone);
}

TEST_F(ClusterDemandTest, EveryCappedResourceNeedsItsGrant) {
  PolicyConfig api = MakePolicy("api");
  WithBucket(api, 10, 10);
  WithConcurrency(api, 4);
  api.rate_limit->scope = Scope::kCluster;
  api.concurrency->scope = Scope::kCluster;
  engine_.PutPolicy(api);
  engine_.SetStoreState(true, 2);
  EXPECT_EQ(engine_.ClusterLimitsNotAdmitting(),
            std::vector<std::string>{
                "api: no grant of its rate limit nor of its in-flight cap"});
  // The rate alone is not enough: a call would find no slot.
  clock_.Advance(absl::Seconds(1));
  engine_.ApplyTick({RateGrant("api", 10, 10, clock_.Now())});
  clock_.Advance(absl::Seconds(1));
  EXPECT_EQ(engine_.ClusterLimitsNotAdmitting(),
            std::vector<std::string>{"api: no grant of its in-flight cap"});
  EXPECT_EQ(Call("api"), Reason::kConcurrencyLimited);
}

TEST_F(ClusterDemandTest, APerKeyPolicyWaitsForItsStaticShares) {
  PolicyConfig users = MakePolicy("users");
  WithBucket(users, 10, 10);
  users.rate_limit->scope = Scope::kCluster;
  users.per_key = true;
  engine_.PutPolicy(users);
  // Held back until every grant issued before the store counted this
  // process has ended (SyncLoop::static_share_wait).
  engine_.SetStoreState(true, 2, /*static_shares=*/false);
  EXPECT_EQ(
      engine_.ClusterLimitsNotAdmitting(),
      std::vector<std::string>{"users: no static share of its rate limit"});
  EXPECT_EQ(Call("users", "a"), Reason::kRateLimited);
  // floor(10 / (2 + 1)) = 3 per key.
  engine_.SetStoreState(true, 2, /*static_shares=*/true);
  EXPECT_TRUE(engine_.ClusterLimitsNotAdmitting().empty());
  EXPECT_EQ(Call("users", "b"), Reason::kNone);
}

TEST_F(ClusterDemandTest, NothingIsWaitedForWithTheStoreDownOrStandalone) {
  engine_.PutPolicy(ClusterBucket("api", false));
  // Before the first good tick and while the store is down, each policy's
  // on_store_failure decides: there is no grant to wait for.
  EXPECT_TRUE(engine_.ClusterLimitsNotAdmitting().empty());
  engine_.SetStoreState(true, 2);
  EXPECT_FALSE(engine_.ClusterLimitsNotAdmitting().empty());
  engine_.SetStoreState(false, 2);
  EXPECT_TRUE(engine_.ClusterLimitsNotAdmitting().empty());

  Engine standalone(&clock_, Engine::Options());
  standalone.PutPolicy(ClusterBucket("api", false));
  EXPECT_TRUE(standalone.ClusterLimitsNotAdmitting().empty());
}

}  // namespace
}  // namespace sluice::core
