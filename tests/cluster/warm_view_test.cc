// SPDX-License-Identifier: Apache-2.0
// CombineWarm: which stored warm entries a replica starts from.

#include "server/cluster/warm_view.h"

#include "gtest/gtest.h"

namespace sluice::cluster {
namespace {

ReplicaWarm Limit(const std::string& replica, uint32_t steady, int baseline_ms,
                  uint64_t digest = 1) {
  ReplicaWarm w;
  w.replica = replica;
  w.digest = digest;
  w.adaptive.steady_limit = steady;
  w.adaptive.baseline = absl::Milliseconds(baseline_ms);
  return w;
}

ReplicaWarm Baseline(const std::string& replica, uint32_t windows,
                     double mean_us, uint64_t digest = 1) {
  ReplicaWarm w;
  w.replica = replica;
  w.digest = digest;
  w.baseline.windows = windows;
  w.baseline.mean_us = mean_us;
  return w;
}

TEST(CombineWarmTest, MeanOfTheOtherLiveSteadyLimitsAndTheLowestBaseline) {
  const WarmView v = CombineWarm(
      {Limit("a", 10, 8), Limit("b", 21, 5), Limit("me", 90, 1)}, 1, "me",
      {"a", "b", "me"});
  ASSERT_TRUE(v.adaptive.has_value());
  EXPECT_EQ(v.adaptive->steady_limit, 16u);  // (10 + 21) / 2, rounded
  EXPECT_EQ(v.adaptive->baseline, absl::Milliseconds(5));
  EXPECT_FALSE(v.baseline.has_value());
}

TEST(CombineWarmTest, OnlyTheSameDigestCounts) {
  const WarmView v = CombineWarm(
      {Limit("a", 10, 8, /*digest=*/1), Limit("b", 40, 2, /*digest=*/2),
       Baseline("b", 9, 3000, /*digest=*/2)},
      1, "me", {"a", "b"});
  ASSERT_TRUE(v.adaptive.has_value());
  EXPECT_EQ(v.adaptive->steady_limit, 10u);
  EXPECT_EQ(v.adaptive->baseline, absl::Milliseconds(8));
  EXPECT_FALSE(v.baseline.has_value());
  EXPECT_FALSE(CombineWarm({Limit("a", 10, 8)}, 3, "me", {"a"}).adaptive);
}

TEST(CombineWarmTest, LiveReplicasWinOverDepartedOnes) {
  const WarmView v = CombineWarm(
      {Limit("gone", 50, 1), Limit("a", 10, 8), Baseline("gone", 30, 900),
       Baseline("a", 3, 1000)},
      1, "me", {"a", "me"});
  EXPECT_EQ(v.adaptive->steady_limit, 10u);
  EXPECT_EQ(v.baseline->windows, 3u);
  EXPECT_DOUBLE_EQ(v.baseline->mean_us, 1000);
}

TEST(CombineWarmTest, DepartedOnesAndMyPreviousLifeWhenNoLiveOneHasIt) {
  // A rollout: no live replica has learned anything yet.
  const WarmView v = CombineWarm(
      {Limit("old-1", 12, 6), Limit("me", 20, 4), Baseline("old-1", 7, 800),
       Baseline("old-2", 11, 850), Limit("fresh", 0, 0)},
      1, "me", {"me", "fresh"});
  ASSERT_TRUE(v.adaptive.has_value());
  EXPECT_EQ(v.adaptive->steady_limit, 16u);
  EXPECT_EQ(v.adaptive->baseline, absl::Milliseconds(4));
  ASSERT_TRUE(v.baseline.has_value());
  EXPECT_EQ(v.baseline->windows, 11u);
}

TEST(CombineWarmTest, WhatLearnedNothingIsNoStart) {
  // A steady limit without a baseline latency was never measured.
  const WarmView v = CombineWarm({Limit("a", 5, 0), Baseline("b", 0, 0)}, 1,
                                 "me", {"a", "b"});
  EXPECT_FALSE(v.adaptive.has_value());
  EXPECT_FALSE(v.baseline.has_value());
  EXPECT_FALSE(CombineWarm({}, 1, "me", {}).adaptive.has_value());
}

}  // namespace
}  // namespace sluice::cluster
