#include "server/cluster/share_allocator.h"

#include <numeric>

#include "gtest/gtest.h"

namespace sluice::cluster {
namespace {

double Sum(const std::vector<double>& v) {
  return std::accumulate(v.begin(), v.end(), 0.0);
}

TEST(AllocateSharesTest, OneReplicaTakesTheWholeLimit) {
  EXPECT_DOUBLE_EQ(AllocateShares({5}, 100)[0], 1.0);
  EXPECT_DOUBLE_EQ(AllocateShares({500}, 100)[0], 1.0);
  EXPECT_DOUBLE_EQ(AllocateShares({0}, 100)[0], 1.0);
}

TEST(AllocateSharesTest, EqualDemandSplitsEvenly) {
  const auto shares = AllocateShares({300, 300, 300}, 100);
  for (double s : shares) EXPECT_NEAR(s, 1.0 / 3, 1e-12);
}

TEST(AllocateSharesTest, FlatOutReplicaDoesNotStarvePacedOnes) {
  // One replica asks 10000/s, two ask 20/s each, against 100/s.
  const auto shares = AllocateShares({10000, 20, 20}, 100);
  EXPECT_NEAR(Sum(shares), 1.0, 1e-12);
  // Paced replicas get their demand with headroom: 20 * 1.05 = 21 of 100.
  EXPECT_NEAR(shares[1], 0.21, 1e-9);
  EXPECT_NEAR(shares[2], 0.21, 1e-9);
  EXPECT_NEAR(shares[0], 0.58, 1e-9);
}

TEST(AllocateSharesTest, IdleReplicasKeepAFloor) {
  ShareOptions options;
  options.floor = 0.06;
  const auto shares = AllocateShares({10000, 0, 0}, 100, options);
  EXPECT_NEAR(shares[1], 0.02, 1e-12);
  EXPECT_NEAR(shares[2], 0.02, 1e-12);
  EXPECT_NEAR(shares[0], 0.96, 1e-12);
}

TEST(AllocateSharesTest, UnusedShareIsHandedOutSoSharesAddUp) {
  // Total demand is below the limit: everybody gets its demand and the rest
  // is spread evenly.
  const auto shares = AllocateShares({10, 20, 0}, 100);
  EXPECT_NEAR(Sum(shares), 1.0, 1e-12);
  EXPECT_GT(shares[0], 0.105);
  EXPECT_GT(shares[1], 0.21);
  EXPECT_LT(shares[0], shares[1]);
  EXPECT_GT(shares[2], 0);
}

TEST(AllocateSharesTest, ManyReplicasAlwaysSumToOne) {
  std::vector<double> demand;
  for (int i = 0; i < 50; ++i) demand.push_back((i * 37) % 23 * 7.5);
  const auto shares = AllocateShares(demand, 333);
  EXPECT_NEAR(Sum(shares), 1.0, 1e-9);
  for (double s : shares) EXPECT_GE(s, 0.05 / 50 - 1e-12);
}

}  // namespace
}  // namespace sluice::cluster
