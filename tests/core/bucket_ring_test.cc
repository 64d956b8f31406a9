// SPDX-License-Identifier: Apache-2.0
#include "server/core/bucket_ring.h"

#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "tests/testing/fake_clock.h"

namespace sluice::core {
namespace {

struct Hits {
  int64_t n = 0;
  Hits& operator+=(const Hits& o) {
    n += o.n;
    return *this;
  }
  Hits& operator-=(const Hits& o) {
    n -= o.n;
    return *this;
  }
};

// Starts on a whole second, so 1 s buckets begin exactly at `start`.
const absl::Time kStart = testing::FakeClock::DefaultStart();

TEST(BucketRingTest, Shape) {
  BucketRing<Hits> ring(absl::Seconds(10), 10);
  EXPECT_EQ(ring.bucket_width(), absl::Seconds(1));
  EXPECT_EQ(ring.buckets(), 10);
}

TEST(BucketRingTest, CountsInCurrentBucketAndSums) {
  BucketRing<Hits> ring(absl::Seconds(10), 10);
  ring.Advance(kStart);
  EXPECT_EQ(ring.Sum().n, 0);
  ring.Add(Hits{2});
  ring.Advance(kStart + absl::Milliseconds(999));
  ring.Add(Hits{1});
  EXPECT_EQ(ring.Sum().n, 3);
  ring.Advance(kStart + absl::Seconds(3));
  ring.Add(Hits{4});
  EXPECT_EQ(ring.Current().n, 4);
  EXPECT_EQ(ring.Sum().n, 7);
}

TEST(BucketRingTest, ForgetsBucketOnlyAfterItLeavesTheWindow) {
  BucketRing<Hits> ring(absl::Seconds(10), 10);
  ring.Advance(kStart);
  ring.Add(Hits{5});
  // Still overlaps [now - 10s, now] until the 11th bucket starts.
  ring.Advance(kStart + absl::Seconds(10));
  EXPECT_EQ(ring.Sum().n, 5);
  ring.Advance(kStart + absl::Seconds(11) - absl::Nanoseconds(1));
  EXPECT_EQ(ring.Sum().n, 5);
  ring.Advance(kStart + absl::Seconds(11));
  EXPECT_EQ(ring.Sum().n, 0);
}

TEST(BucketRingTest, LongGapClearsEverything) {
  BucketRing<Hits> ring(absl::Seconds(10), 10);
  ring.Advance(kStart);
  for (int i = 0; i < 10; ++i) {
    ring.Advance(kStart + absl::Seconds(i));
    ring.Add(Hits{1});
  }
  EXPECT_EQ(ring.Sum().n, 10);
  ring.Advance(kStart + absl::Hours(1));
  EXPECT_EQ(ring.Sum().n, 0);
  EXPECT_EQ(ring.Current().n, 0);
}

TEST(BucketRingTest, AdvanceBackwardsIsIgnored) {
  BucketRing<Hits> ring(absl::Seconds(10), 10);
  ring.Advance(kStart + absl::Seconds(5));
  ring.Add(Hits{1});
  ring.Advance(kStart);  // a clock step back must not wipe counts
  EXPECT_EQ(ring.Sum().n, 1);
  EXPECT_EQ(ring.Current().n, 1);
}

TEST(BucketRingTest, OldestAndExpiries) {
  BucketRing<Hits> ring(absl::Seconds(4), 4);
  for (int i = 0; i <= 4; ++i) {
    ring.Advance(kStart + absl::Seconds(i));
    ring.Add(Hits{i + 1});  // bucket i holds i + 1
  }
  EXPECT_EQ(ring.Oldest().n, 1);
  EXPECT_EQ(ring.OldestExpiry(), kStart + absl::Seconds(5));
  std::vector<int64_t> counts;
  std::vector<absl::Time> expiries;
  ring.ForEachOldestFirst([&](const Hits& h, absl::Time expiry) {
    counts.push_back(h.n);
    expiries.push_back(expiry);
  });
  EXPECT_EQ(counts, (std::vector<int64_t>{1, 2, 3, 4, 5}));
  ASSERT_EQ(expiries.size(), 5u);
  // Bucket i ([i, i+1) s) leaves the window once bucket i + 5 begins.
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(expiries[i], kStart + absl::Seconds(i + 5));
  }
}

TEST(BucketRingTest, Clear) {
  BucketRing<Hits> ring(absl::Seconds(10), 10);
  ring.Advance(kStart);
  ring.Add(Hits{3});
  ring.Clear();
  EXPECT_EQ(ring.Sum().n, 0);
}

// The contract the limiters rely on: an event of the last window length is
// never missed, and nothing older than window + one bucket is counted.
TEST(BucketRingTest, NeverMissesAnEventOfTheLastWindow) {
  const absl::Duration window = absl::Seconds(1);
  BucketRing<Hits> ring(window, 8);
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int64_t> gap_us(0, 60000);
  std::vector<absl::Time> events;
  absl::Time now = kStart + absl::Microseconds(123);
  for (int i = 0; i < 20000; ++i) {
    now += absl::Microseconds(gap_us(rng));
    ring.Advance(now);
    if (i % 3 != 0) {
      ring.Add(Hits{1});
      events.push_back(now);
    }
    int64_t at_least = 0, at_most = 0;
    for (absl::Time e : events) {
      if (e >= now - window) ++at_least;
      if (e > now - window - ring.bucket_width()) ++at_most;
    }
    if (events.size() > 200) events.erase(events.begin(), events.begin() + 100);
    const int64_t sum = ring.Sum().n;
    ASSERT_GE(sum, at_least) << "at step " << i;
    ASSERT_LE(sum, at_most) << "at step " << i;
  }
}

TEST(BucketRingTest, ReshapeKeepsTotal) {
  BucketRing<Hits> ring(absl::Seconds(10), 10);
  ring.Advance(kStart);
  ring.Add(Hits{4});
  ring.Advance(kStart + absl::Seconds(3));
  ring.Add(Hits{2});
  ring.Reshape(absl::Seconds(20), 4, kStart + absl::Seconds(3));
  EXPECT_EQ(ring.bucket_width(), absl::Seconds(5));
  EXPECT_EQ(ring.buckets(), 4);
  EXPECT_EQ(ring.Sum().n, 6);
  // Remembered up to one new window length, then forgotten.
  ring.Advance(kStart + absl::Seconds(19));
  EXPECT_EQ(ring.Sum().n, 6);
  ring.Advance(kStart + absl::Seconds(60));
  EXPECT_EQ(ring.Sum().n, 0);
}

}  // namespace
}  // namespace sluice::core
