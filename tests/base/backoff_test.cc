// SPDX-License-Identifier: Apache-2.0
#include "base/backoff.h"

#include <vector>

#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace sluice::base {
namespace {

TEST(ExponentialBackoffTest, DoublesFromInitialToMaxAndResets) {
  ExponentialBackoff::Options options;
  options.initial = absl::Milliseconds(100);
  options.max = absl::Milliseconds(700);
  ExponentialBackoff b(options);
  EXPECT_EQ(b.current(), absl::ZeroDuration());
  EXPECT_EQ(b.Next(), absl::Milliseconds(100));
  EXPECT_EQ(b.Next(), absl::Milliseconds(200));
  EXPECT_EQ(b.Next(), absl::Milliseconds(400));
  EXPECT_EQ(b.Next(), absl::Milliseconds(700));
  EXPECT_EQ(b.Next(), absl::Milliseconds(700));
  EXPECT_EQ(b.current(), absl::Milliseconds(700));
  b.Reset();
  EXPECT_EQ(b.current(), absl::ZeroDuration());
  EXPECT_EQ(b.Next(), absl::Milliseconds(100));
}

TEST(ExponentialBackoffTest, JitterStaysInItsBandAndRepeatsWithTheSeed) {
  ExponentialBackoff::Options options;
  options.initial = absl::Seconds(1);
  options.max = absl::Seconds(1);
  options.jitter = 0.2;
  options.seed = 7;
  ExponentialBackoff a(options), b(options);
  bool varied = false;
  absl::Duration first = a.Next();
  EXPECT_EQ(b.Next(), first);
  for (int i = 0; i < 100; ++i) {
    const absl::Duration d = a.Next();
    EXPECT_EQ(b.Next(), d);
    EXPECT_GE(d, absl::Milliseconds(800));
    EXPECT_LE(d, absl::Milliseconds(1200));
    EXPECT_EQ(a.current(), absl::Seconds(1));  // the period has no jitter
    varied |= d != first;
  }
  EXPECT_TRUE(varied);
}

}  // namespace
}  // namespace sluice::base
