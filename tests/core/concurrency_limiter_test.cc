// SPDX-License-Identifier: Apache-2.0
#include "server/core/concurrency_limiter.h"

#include "gtest/gtest.h"

namespace sluice::core {
namespace {

TEST(ConcurrencyLimiterTest, CapsInFlightAndReleases) {
  ConcurrencyLimiter limiter(3);
  EXPECT_TRUE(limiter.TryTake());
  EXPECT_TRUE(limiter.TryTake());
  EXPECT_TRUE(limiter.TryTake());
  EXPECT_FALSE(limiter.TryTake());
  EXPECT_EQ(limiter.in_flight(), 3u);
  limiter.Release();
  EXPECT_EQ(limiter.in_flight(), 2u);
  EXPECT_TRUE(limiter.TryTake());
  EXPECT_FALSE(limiter.TryTake());
}

TEST(ConcurrencyLimiterTest, ReleaseNeverUnderflows) {
  ConcurrencyLimiter limiter(1);
  limiter.Release();
  EXPECT_EQ(limiter.in_flight(), 0u);
  EXPECT_TRUE(limiter.TryTake());
  EXPECT_FALSE(limiter.TryTake());
}

TEST(ConcurrencyLimiterTest, LoweringMaxKeepsCallsInFlight) {
  ConcurrencyLimiter limiter(4);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(limiter.TryTake());
  limiter.SetMax(2);
  EXPECT_EQ(limiter.max(), 2u);
  EXPECT_EQ(limiter.in_flight(), 4u);
  limiter.Release();
  limiter.Release();
  EXPECT_FALSE(limiter.TryTake());  // 2 in flight, max 2
  limiter.Release();
  EXPECT_TRUE(limiter.TryTake());
}

}  // namespace
}  // namespace sluice::core
