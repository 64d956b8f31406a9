// SPDX-License-Identifier: Apache-2.0
#include "server/core/token_bucket.h"

#include <cstdint>

#include "gtest/gtest.h"
#include "tests/testing/fake_clock.h"

namespace sluice::core {
namespace {

using ::sluice::testing::FakeClock;

constexpr double kEps = 1e-6;

TEST(TokenBucketTest, StartsFullAndAdmitsBurst) {
  FakeClock clock;
  TokenBucket bucket(10, absl::Seconds(1), 5, clock.Now());
  EXPECT_NEAR(bucket.Available(clock.Now()), 5, kEps);
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(bucket.TryTake(1, clock.Now())) << i;
  EXPECT_FALSE(bucket.TryTake(1, clock.Now()));
  EXPECT_NEAR(bucket.Available(clock.Now()), 0, kEps);
}

TEST(TokenBucketTest, RateIsPerPeriod) {
  FakeClock clock;
  TokenBucket bucket(60, absl::Minutes(1), 60, clock.Now());
  EXPECT_NEAR(bucket.rate_per_second(), 1.0, kEps);
  EXPECT_NEAR(bucket.burst(), 60, kEps);
  ASSERT_TRUE(bucket.TryTake(60, clock.Now()));
  clock.Advance(absl::Seconds(10));
  EXPECT_NEAR(bucket.Available(clock.Now()), 10, kEps);
}

TEST(TokenBucketTest, RefillsLazilyAndCapsAtBurst) {
  FakeClock clock;
  TokenBucket bucket(10, absl::Seconds(1), 5, clock.Now());
  ASSERT_TRUE(bucket.TryTake(5, clock.Now()));
  clock.Advance(absl::Milliseconds(99));
  EXPECT_FALSE(bucket.TryTake(1, clock.Now()));
  clock.Advance(absl::Milliseconds(1));
  EXPECT_TRUE(bucket.TryTake(1, clock.Now()));
  EXPECT_FALSE(bucket.TryTake(1, clock.Now()));
  clock.Advance(absl::Hours(1));
  EXPECT_NEAR(bucket.Available(clock.Now()), 5, kEps);
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(bucket.TryTake(1, clock.Now()));
  EXPECT_FALSE(bucket.TryTake(1, clock.Now()));
}

TEST(TokenBucketTest, MultiplePermitsAllOrNothing) {
  FakeClock clock;
  TokenBucket bucket(10, absl::Seconds(1), 10, clock.Now());
  ASSERT_TRUE(bucket.TryTake(8, clock.Now()));
  EXPECT_FALSE(bucket.TryTake(3, clock.Now()));
  // The failed take must not have spent the two left.
  EXPECT_NEAR(bucket.Available(clock.Now()), 2, kEps);
  EXPECT_TRUE(bucket.TryTake(2, clock.Now()));
  EXPECT_FALSE(bucket.TryTake(1, clock.Now()));
}

TEST(TokenBucketTest, RefundGivesTokensBack) {
  FakeClock clock;
  TokenBucket bucket(1, absl::Seconds(1), 4, clock.Now());
  ASSERT_TRUE(bucket.TryTake(4, clock.Now()));
  bucket.Refund(3);
  EXPECT_NEAR(bucket.Available(clock.Now()), 3, kEps);
  EXPECT_TRUE(bucket.TryTake(3, clock.Now()));
  EXPECT_FALSE(bucket.TryTake(1, clock.Now()));
}

TEST(TokenBucketTest, TimeUntil) {
  FakeClock clock;
  TokenBucket bucket(10, absl::Seconds(1), 5, clock.Now());
  EXPECT_EQ(bucket.TimeUntil(1, clock.Now()), absl::ZeroDuration());
  EXPECT_EQ(bucket.TimeUntil(6, clock.Now()), absl::InfiniteDuration());
  ASSERT_TRUE(bucket.TryTake(5, clock.Now()));
  const absl::Duration one = bucket.TimeUntil(1, clock.Now());
  EXPECT_GE(one, absl::Milliseconds(99));
  EXPECT_LE(one, absl::Milliseconds(101));
  const absl::Duration three = bucket.TimeUntil(3, clock.Now());
  EXPECT_GE(three, absl::Milliseconds(299));
  EXPECT_LE(three, absl::Milliseconds(301));
  // Waiting that long is enough.
  clock.Advance(three);
  EXPECT_TRUE(bucket.TryTake(3, clock.Now()));
}

TEST(TokenBucketTest, ReconfigureCapsTokensAtNewBurst) {
  FakeClock clock;
  TokenBucket bucket(100, absl::Seconds(1), 100, clock.Now());
  bucket.Reconfigure(1, absl::Seconds(1), 10, clock.Now());
  EXPECT_NEAR(bucket.burst(), 10, kEps);
  EXPECT_NEAR(bucket.Available(clock.Now()), 10, kEps);
  for (int i = 0; i < 10; ++i) EXPECT_TRUE(bucket.TryTake(1, clock.Now()));
  EXPECT_FALSE(bucket.TryTake(1, clock.Now()));
}

// A cluster share moves one token of capacity at a time: a bucket that
// gives its last token of capacity up keeps its progress toward the next
// token and goes on from there when it gets capacity back, so a sub-unit
// share handed round the replicas loses no rate.
TEST(TokenBucketTest, ShrinkingKeepsTheProgressTowardTheNextToken) {
  FakeClock clock;
  TokenBucket bucket(1, absl::Seconds(1), 1, clock.Now());
  ASSERT_TRUE(bucket.TryTake(1, clock.Now()));
  clock.Advance(absl::Milliseconds(600));
  bucket.Reconfigure(0, absl::Seconds(1), 0, clock.Now());  // given up
  EXPECT_NEAR(bucket.Available(clock.Now()), 0.6, kEps);
  EXPECT_FALSE(bucket.TryTake(1, clock.Now()));
  // Without capacity it neither grows nor admits.
  clock.Advance(absl::Seconds(5));
  EXPECT_NEAR(bucket.Available(clock.Now()), 0.6, kEps);
  bucket.Reconfigure(1, absl::Seconds(1), 1, clock.Now());  // back
  clock.Advance(absl::Milliseconds(398));
  EXPECT_FALSE(bucket.TryTake(1, clock.Now()));
  clock.Advance(absl::Milliseconds(3));
  EXPECT_TRUE(bucket.TryTake(1, clock.Now()));
}

// The part of a token kept never makes a whole one: a bucket never holds
// more whole tokens than its burst, whole or fractional.
TEST(TokenBucketTest, ShrinkingNeverLeavesMoreWholeTokensThanTheBurst) {
  FakeClock clock;
  TokenBucket bucket(10, absl::Seconds(1), 14, clock.Now());
  ASSERT_TRUE(bucket.TryTake(0.1, clock.Now()));  // 13.9 left
  bucket.Reconfigure(10, absl::Seconds(1), 13, clock.Now());
  EXPECT_NEAR(bucket.Available(clock.Now()), 13.9, kEps);
  for (int i = 0; i < 13; ++i) EXPECT_TRUE(bucket.TryTake(1, clock.Now()));
  EXPECT_FALSE(bucket.TryTake(1, clock.Now()));
  bucket.Refund(13);
  EXPECT_NEAR(bucket.Available(clock.Now()), 13.9, kEps);
  // A fractional burst: 2.5 allows two whole tokens, never three.
  TokenBucket frac(1, absl::Seconds(1), 10, clock.Now());
  ASSERT_TRUE(frac.TryTake(0.1, clock.Now()));  // 9.9
  frac.Reconfigure(1, absl::Seconds(1), 2.5, clock.Now());
  EXPECT_LT(frac.Available(clock.Now()), 3.0);
  EXPECT_TRUE(frac.TryTake(2, clock.Now()));
  EXPECT_FALSE(frac.TryTake(1, clock.Now()));
  // Time does not grow what is above the burst.
  clock.Advance(absl::Seconds(10));
  EXPECT_LE(frac.Available(clock.Now()), 2.5 + kEps);
}

TEST(TokenBucketTest, ReconfigureKeepsTokensAndAppliesNewRate) {
  FakeClock clock;
  TokenBucket bucket(1, absl::Seconds(1), 10, clock.Now());
  ASSERT_TRUE(bucket.TryTake(8, clock.Now()));
  // A bigger burst does not fill the bucket.
  bucket.Reconfigure(100, absl::Seconds(1), 1000, clock.Now());
  EXPECT_NEAR(bucket.Available(clock.Now()), 2, kEps);
  EXPECT_NEAR(bucket.rate_per_second(), 100, kEps);
  clock.Advance(absl::Milliseconds(100));
  EXPECT_NEAR(bucket.Available(clock.Now()), 12, kEps);
}

TEST(TokenBucketTest, ReconfigureCreditsElapsedTimeAtOldRate) {
  FakeClock clock;
  TokenBucket bucket(10, absl::Seconds(1), 100, clock.Now());
  ASSERT_TRUE(bucket.TryTake(100, clock.Now()));
  clock.Advance(absl::Seconds(1));  // +10 at the old rate
  bucket.Reconfigure(1000, absl::Seconds(1), 100, clock.Now());
  EXPECT_NEAR(bucket.Available(clock.Now()), 10, kEps);
}

TEST(TokenBucketTest, SetRateKeepsTokens) {
  FakeClock clock;
  TokenBucket bucket(10, absl::Seconds(1), 10, clock.Now());
  ASSERT_TRUE(bucket.TryTake(10, clock.Now()));
  clock.Advance(absl::Milliseconds(500));  // +5 at the old rate
  bucket.SetRate(2, clock.Now());
  EXPECT_NEAR(bucket.Available(clock.Now()), 5, kEps);
  EXPECT_NEAR(bucket.rate_per_second(), 2, kEps);
  clock.Advance(absl::Seconds(1));
  EXPECT_NEAR(bucket.Available(clock.Now()), 7, kEps);
}

// Over an hour of simulated time with demand well above the rate, the bucket
// admits burst + rate * t, within 1%, and never more.
TEST(TokenBucketTest, LongRunAdmitsBurstPlusRateTimesTime) {
  FakeClock clock;
  const double rate = 100, burst = 50;
  TokenBucket bucket(rate, absl::Seconds(1), burst, clock.Now());
  const absl::Time start = clock.Now();
  const absl::Duration step = absl::Milliseconds(3);
  const absl::Duration total = absl::Hours(1);
  int64_t admitted = 0;
  for (absl::Duration t; t <= total; t += step) {
    clock.SetTime(start + t);
    if (bucket.TryTake(1, clock.Now())) ++admitted;
  }
  const double expected = burst + rate * absl::ToDoubleSeconds(total);
  EXPECT_NEAR(admitted, expected, expected * 0.01);
  EXPECT_LE(admitted, expected + 1);
}

// Several permits per call and irregular steps: still burst + rate * t.
TEST(TokenBucketTest, LongRunWithMultiPermitRequests) {
  FakeClock clock;
  const double rate = 1000, burst = 200;
  TokenBucket bucket(rate, absl::Minutes(1), burst, clock.Now());
  const absl::Time start = clock.Now();
  const absl::Duration total = absl::Hours(1);
  int64_t admitted = 0;
  int i = 0;
  for (absl::Duration t; t <= total; t += absl::Milliseconds(1 + i % 7), ++i) {
    clock.SetTime(start + t);
    const int n = 1 + i % 3;
    if (bucket.TryTake(n, clock.Now())) admitted += n;
  }
  const double expected = burst + rate * 60;
  EXPECT_NEAR(admitted, expected, expected * 0.01);
  EXPECT_LE(admitted, expected + 1);
}

// Tokens lent to a per-core slice keep their room in the burst until they
// come back, so bucket and borrowers never hold more than the burst.
TEST(TokenBucketTest, LentTokensKeepTheirRoomUntilRepaid) {
  FakeClock clock;
  TokenBucket bucket(10, absl::Seconds(1), 10, clock.Now());
  EXPECT_EQ(bucket.Lend(5, 6, clock.Now()), 6);
  EXPECT_EQ(bucket.Lend(5, 6, clock.Now()), 0);  // 4 left, 5 asked at least
  EXPECT_EQ(bucket.lent(), 6);
  clock.Advance(absl::Seconds(10));
  EXPECT_DOUBLE_EQ(bucket.Available(clock.Now()), 4);  // refills to 10 - 6
  bucket.Repay(2, 4);  // 4 used, 2 handed back
  EXPECT_EQ(bucket.lent(), 0);
  EXPECT_DOUBLE_EQ(bucket.Available(clock.Now()), 6);
  clock.Advance(absl::Seconds(1));
  EXPECT_DOUBLE_EQ(bucket.Available(clock.Now()), 10);
}

// A burst made smaller while tokens are out on loan (a cluster grant that
// shrank, a policy change): bucket and borrowers together stay within the
// new burst, and what comes back fills only the room left.
TEST(TokenBucketTest, ASmallerBurstCountsTheTokensOutOnLoan) {
  FakeClock clock;
  TokenBucket bucket(10, absl::Seconds(1), 10, clock.Now());
  EXPECT_EQ(bucket.Lend(1, 6, clock.Now()), 6);
  bucket.Reconfigure(8, absl::Seconds(1), 8, clock.Now());
  EXPECT_DOUBLE_EQ(bucket.Available(clock.Now()), 2);  // 8 - 6 lent
  bucket.Reconfigure(4, absl::Seconds(1), 4, clock.Now());
  EXPECT_DOUBLE_EQ(bucket.Available(clock.Now()), 0);
  // No refill while the loans alone fill the burst.
  clock.Advance(absl::Seconds(5));
  EXPECT_DOUBLE_EQ(bucket.Available(clock.Now()), 0);
  // 3 handed back unused, 1 spent: 2 still out, so 2 of room.
  bucket.Repay(3, 1);
  EXPECT_EQ(bucket.lent(), 2);
  EXPECT_DOUBLE_EQ(bucket.Available(clock.Now()), 2);
  bucket.Repay(2, 0);
  EXPECT_DOUBLE_EQ(bucket.Available(clock.Now()), 4);
}

}  // namespace
}  // namespace sluice::core
