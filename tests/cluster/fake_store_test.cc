#include "tests/cluster/cluster_scenarios.h"

namespace sluice::cluster {
namespace {

INSTANTIATE_TEST_SUITE_P(Fake, ClusterScenarioTest, ::testing::Values("fake"));
INSTANTIATE_TEST_SUITE_P(Fake, FakeStoreTest, ::testing::Values("fake"));

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


}  // namespace
}  // namespace sluice::cluster
