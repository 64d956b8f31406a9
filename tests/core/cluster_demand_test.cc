// SPDX-License-Identifier: Apache-2.0
// EventSink::OnClusterDemand: a cluster-scope gate that refuses a key the
// store has heard no demand for tells the sink once, so the sync loop can
// tick at once instead of a whole interval later.
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

}  // namespace
}  // namespace sluice::core
