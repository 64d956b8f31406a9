// SPDX-License-Identifier: Apache-2.0
#include "base/percentile.h"

#include <limits>
#include <vector>

#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace sluice::base {
namespace {

TEST(PercentileTest, NearestRank) {
  std::vector<double> v;
  EXPECT_EQ(Percentile(v, 0.99), 0);
  for (int i = 100; i >= 1; --i) v.push_back(i);
  EXPECT_EQ(Percentile(v, 0.50), 50);
  EXPECT_EQ(Percentile(v, 0.99), 99);
  EXPECT_EQ(Percentile(v, 1.0), 100);
  std::vector<double> one = {7};
  EXPECT_EQ(Percentile(one, 0.99), 7);
}

TEST(PercentileTest, RankRoundsUpAndStaysInRange) {
  EXPECT_EQ(NearestRank(10, 0.5), 5u);
  EXPECT_EQ(NearestRank(10, 0.51), 6u);
  EXPECT_EQ(NearestRank(1000, 0.999), 999u);
  EXPECT_EQ(NearestRank(10, 0.0), 1u);
  EXPECT_EQ(NearestRank(10, -1.0), 1u);
  EXPECT_EQ(NearestRank(10, 2.0), 10u);
  EXPECT_EQ(NearestRank(10, std::numeric_limits<double>::quiet_NaN()), 1u);
}

TEST(PercentileTest, Durations) {
  std::vector<absl::Duration> v = {absl::Milliseconds(3), absl::Milliseconds(1),
                                   absl::Milliseconds(2)};
  EXPECT_EQ(Percentile(v, 0.5), absl::Milliseconds(2));
  EXPECT_EQ(Percentile(v, 1.0), absl::Milliseconds(3));
  std::vector<absl::Duration> none;
  EXPECT_EQ(Percentile(none, 0.5), absl::ZeroDuration());
}

}  // namespace
}  // namespace sluice::base
