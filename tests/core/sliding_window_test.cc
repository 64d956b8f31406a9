// SPDX-License-Identifier: Apache-2.0
#include "server/core/sliding_window.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "tests/testing/fake_clock.h"

namespace sluice::core {
namespace {

using ::sluice::testing::FakeClock;
using Admitted = std::vector<std::pair<absl::Time, int64_t>>;

// Fails the test if any closed span [t, t + window] holds more than `limit`
// admitted permits. The densest span starts at an admitted time, so checking
// those spans checks them all.
void ExpectNoSpanOverLimit(const Admitted& admitted, absl::Duration window,
                           int64_t limit) {
  ASSERT_TRUE(std::is_sorted(
      admitted.begin(), admitted.end(),
      [](const auto& a, const auto& b) { return a.first < b.first; }));
  size_t end = 0;
  int64_t in_span = 0;
  for (size_t begin = 0; begin < admitted.size(); ++begin) {
    while (end < admitted.size() &&
           admitted[end].first <= admitted[begin].first + window) {
      in_span += admitted[end].second;
      ++end;
    }
    ASSERT_LE(in_span, limit)
        << "span starting at " << admitted[begin].first << " (admission #"
        << begin << ")";
    in_span -= admitted[begin].second;
  }
}

int64_t Total(const Admitted& admitted) {
  int64_t total = 0;
  for (const auto& a : admitted) total += a.second;
  return total;
}

TEST(SlidingWindowTest, AdmitsLimitThenRefuses) {
  FakeClock clock;
  SlidingWindow window(10, absl::Seconds(1), 10);
  EXPECT_EQ(window.limit(), 10);
  for (int i = 0; i < 10; ++i) EXPECT_TRUE(window.TryTake(1, clock.Now())) << i;
  EXPECT_FALSE(window.TryTake(1, clock.Now()));
  EXPECT_EQ(window.Count(clock.Now()), 10);
  EXPECT_EQ(window.Available(clock.Now()), 0);
}

TEST(SlidingWindowTest, MultiplePermitsAllOrNothing) {
  FakeClock clock;
  SlidingWindow window(10, absl::Seconds(1), 10);
  ASSERT_TRUE(window.TryTake(8, clock.Now()));
  EXPECT_FALSE(window.TryTake(3, clock.Now()));
  EXPECT_EQ(window.Count(clock.Now()), 8);
  EXPECT_TRUE(window.TryTake(2, clock.Now()));
  EXPECT_FALSE(window.TryTake(11, clock.Now() + absl::Hours(1)));
}

TEST(SlidingWindowTest, ForgetsAfterTheWindowAndOneBucket) {
  FakeClock clock;  // starts on a whole second: buckets start at Now()
  SlidingWindow window(10, absl::Seconds(1), 10);
  const absl::Time t0 = clock.Now();
  ASSERT_TRUE(window.TryTake(10, t0));
  // Never before one window length ...
  EXPECT_FALSE(window.TryTake(1, t0 + absl::Milliseconds(500)));
  EXPECT_FALSE(window.TryTake(1, t0 + absl::Seconds(1)));
  // ... and at most one bucket width after it.
  EXPECT_TRUE(window.TryTake(10, t0 + absl::Milliseconds(1100)));
}

TEST(SlidingWindowTest, RefundGivesRoomBack) {
  FakeClock clock;
  SlidingWindow window(10, absl::Seconds(1), 10);
  ASSERT_TRUE(window.TryTake(10, clock.Now()));
  window.Refund(3, clock.Now());
  EXPECT_EQ(window.Count(clock.Now()), 7);
  EXPECT_EQ(window.Available(clock.Now()), 3);
  EXPECT_TRUE(window.TryTake(3, clock.Now()));
  EXPECT_FALSE(window.TryTake(1, clock.Now()));
}

TEST(SlidingWindowTest, TimeUntil) {
  FakeClock clock;
  SlidingWindow window(10, absl::Seconds(1), 10);
  const absl::Time t0 = clock.Now();
  EXPECT_EQ(window.TimeUntil(1, t0), absl::ZeroDuration());
  EXPECT_EQ(window.TimeUntil(11, t0), absl::InfiniteDuration());
  ASSERT_TRUE(window.TryTake(10, t0));
  const absl::Time t1 = t0 + absl::Milliseconds(250);
  const absl::Duration wait = window.TimeUntil(1, t1);
  // The ten permits taken at t0 hold until t0 + 1s at least.
  EXPECT_GE(t1 + wait, t0 + absl::Seconds(1));
  EXPECT_LE(t1 + wait, t0 + absl::Milliseconds(1100));
  EXPECT_TRUE(window.TryTake(1, t1 + wait));
}

TEST(SlidingWindowTest, TimeUntilWaitsForEnoughRoom) {
  FakeClock clock;
  SlidingWindow window(10, absl::Seconds(1), 10);
  const absl::Time t0 = clock.Now();
  ASSERT_TRUE(window.TryTake(4, t0));
  ASSERT_TRUE(window.TryTake(6, t0 + absl::Milliseconds(500)));
  const absl::Time t1 = t0 + absl::Milliseconds(600);
  // Five more need the six of t0 + 500ms gone, not just the four of t0.
  const absl::Duration wait = window.TimeUntil(5, t1);
  EXPECT_GE(t1 + wait, t0 + absl::Milliseconds(1500));
  EXPECT_TRUE(window.TryTake(5, t1 + wait));
}

TEST(SlidingWindowTest, ReconfigureKeepsCounts) {
  FakeClock clock;
  SlidingWindow window(10, absl::Seconds(1), 10);
  ASSERT_TRUE(window.TryTake(5, clock.Now()));
  window.Reconfigure(6, absl::Seconds(1), 10, clock.Now());
  EXPECT_EQ(window.limit(), 6);
  EXPECT_EQ(window.Count(clock.Now()), 5);
  EXPECT_TRUE(window.TryTake(1, clock.Now()));
  EXPECT_FALSE(window.TryTake(1, clock.Now()));
  // A new shape keeps what was counted too.
  window.Reconfigure(20, absl::Seconds(2), 4, clock.Now());
  EXPECT_EQ(window.Count(clock.Now()), 6);
  EXPECT_EQ(window.Available(clock.Now()), 14);
}

TEST(SlidingWindowTest, SetLimit) {
  FakeClock clock;
  SlidingWindow window(10, absl::Seconds(1), 10);
  ASSERT_TRUE(window.TryTake(5, clock.Now()));
  window.SetLimit(5);
  EXPECT_FALSE(window.TryTake(1, clock.Now()));
  window.SetLimit(7);
  EXPECT_TRUE(window.TryTake(2, clock.Now()));
  EXPECT_FALSE(window.TryTake(1, clock.Now()));
}

// The fixed-window attack: a full limit just before a bucket (and window)
// boundary and another just after it.
TEST(SlidingWindowTest, BurstsAroundEveryBoundaryNeverExceedLimit) {
  FakeClock clock;
  const int64_t limit = 10;
  const absl::Duration window_len = absl::Seconds(1);
  SlidingWindow window(limit, window_len, 10);
  const absl::Duration width = window_len / 10;
  const absl::Time t0 = clock.Now();
  Admitted admitted;
  const int kBoundaries = 300;  // 30 s
  for (int k = 1; k <= kBoundaries; ++k) {
    const absl::Time boundary = t0 + width * k;
    for (absl::Duration offset :
         {-absl::Nanoseconds(2), -absl::Nanoseconds(1), absl::ZeroDuration(),
          absl::Nanoseconds(1)}) {
      for (int i = 0; i < limit + 2; ++i) {
        if (window.TryTake(1, boundary + offset)) {
          admitted.emplace_back(boundary + offset, 1);
        }
      }
    }
  }
  ExpectNoSpanOverLimit(admitted, window_len, limit);
  // Not vacuous: it keeps admitting about `limit` per window length.
  const double windows = absl::FDivDuration(width * kBoundaries, window_len);
  EXPECT_GE(Total(admitted), 0.85 * limit * windows);
}

// A window that does not start on a bucket boundary and requests that land
// a few nanoseconds either side of window-length multiples of earlier ones.
TEST(SlidingWindowTest, RequestsOneWindowApartNeverExceedLimit) {
  FakeClock clock;
  const int64_t limit = 7;
  const absl::Duration window_len = absl::Milliseconds(700);
  SlidingWindow window(limit, window_len, 7);
  absl::Time t = clock.Now() + absl::Microseconds(37);
  Admitted admitted;
  for (int round = 0; round < 2000; ++round) {
    const absl::Time base = t;
    for (absl::Duration offset :
         {absl::ZeroDuration(), window_len - absl::Nanoseconds(1), window_len,
          window_len + absl::Nanoseconds(1)}) {
      const int64_t n = 1 + round % 3;
      if (window.TryTake(n, base + offset)) {
        admitted.emplace_back(base + offset, n);
      }
    }
    t = base + window_len + absl::Nanoseconds(1) +
        absl::Microseconds(round % 11);
  }
  ExpectNoSpanOverLimit(admitted, window_len, limit);
  EXPECT_GT(Total(admitted), 2000);
}

// Random arrival times with a fixed seed, including many right at bucket
// edges.
TEST(SlidingWindowTest, RandomArrivalsNeverExceedLimit) {
  for (uint32_t seed : {1u, 2u, 3u, 42u}) {
    SCOPED_TRACE(seed);
    std::mt19937 rng(seed);
    FakeClock clock;
    const int64_t limit = 25;
    const absl::Duration window_len = absl::Seconds(2);
    const int buckets = 8;
    const absl::Duration width = window_len / buckets;
    SlidingWindow window(limit, window_len, buckets);
    std::uniform_int_distribution<int64_t> gap_us(0, 40000);
    std::uniform_int_distribution<int> pick(0, 9);
    std::uniform_int_distribution<int64_t> permits(1, 4);
    std::uniform_int_distribution<int64_t> edge_ns(-3, 3);
    absl::Time now = clock.Now();
    Admitted admitted;
    for (int i = 0; i < 100000; ++i) {
      absl::Time next = now + absl::Microseconds(gap_us(rng));
      if (pick(rng) < 3) {
        // Snap to the next bucket edge, give or take a few nanoseconds.
        absl::Duration rem;
        const int64_t index =
            absl::IDivDuration(next - absl::UnixEpoch(), width, &rem);
        next = absl::UnixEpoch() + width * (index + 1) +
               absl::Nanoseconds(edge_ns(rng));
      }
      now = std::max(now, next);
      const int64_t n = permits(rng);
      if (window.TryTake(n, now)) admitted.emplace_back(now, n);
    }
    ExpectNoSpanOverLimit(admitted, window_len, limit);
    const double windows = absl::FDivDuration(
        admitted.back().first - admitted.front().first, window_len);
    EXPECT_GE(Total(admitted), 0.8 * limit * windows);
  }
}

}  // namespace
}  // namespace sluice::core
