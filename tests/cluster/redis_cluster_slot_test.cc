// SPDX-License-Identifier: Apache-2.0
// Key slots and node addresses of Redis Cluster routing (no Redis needed).
#include "gtest/gtest.h"
#include "server/cluster/redis_cluster.h"

namespace sluice::cluster {
namespace {

TEST(KeySlotTest, MatchesRedisForPlainKeys) {
  // Reference values from `redis-cli cluster keyslot` (Redis 7.0); the
  // integration test checks many more against a live cluster.
  EXPECT_EQ(KeySlot("foo"), 12182);
  EXPECT_EQ(KeySlot("bar"), 5061);
  EXPECT_EQ(KeySlot("hello"), 866);
  EXPECT_EQ(KeySlot("123456789"), 0x31C3 % kClusterSlots);  // XMODEM check
  EXPECT_EQ(KeySlot(""), 0);
}

TEST(KeySlotTest, HashTagsKeepKeysTogether) {
  EXPECT_EQ(KeySlot("{user1000}.following"), KeySlot("{user1000}.followers"));
  EXPECT_EQ(KeySlot("{user1000}.following"), KeySlot("user1000"));
  // Only the first "{...}" counts, and only when it is not empty.
  EXPECT_EQ(KeySlot("foo{bar}{zap}"), KeySlot("bar"));
  EXPECT_EQ(KeySlot("foo{{bar}}zap"), KeySlot("{bar"));
  EXPECT_EQ(KeySlot("foo{}{bar}"), 8363);  // the whole key
  EXPECT_NE(KeySlot("foo{}{bar}"), KeySlot("bar"));
  EXPECT_EQ(KeySlot("foo{bar"), KeySlot(std::string("foo{bar")));
  // A policy's keys: one slot for all of them, another for the config.
  EXPECT_EQ(KeySlot("sluice:{inventory}:epoch"),
            KeySlot("sluice:{inventory}:g:user-42"));
  EXPECT_EQ(KeySlot("sluice:{config}:epoch"), KeySlot("config"));
}

TEST(SplitNodeAddressTest, SplitsAtTheLastColon) {
  std::string host;
  int port = 0;
  ASSERT_TRUE(SplitNodeAddress("10.0.0.5:7001", &host, &port));
  EXPECT_EQ(host, "10.0.0.5");
  EXPECT_EQ(port, 7001);
  ASSERT_TRUE(SplitNodeAddress("::1:7002", &host, &port));
  EXPECT_EQ(host, "::1");
  EXPECT_EQ(port, 7002);
  ASSERT_TRUE(SplitNodeAddress("[fe80::1]:7003", &host, &port));
  EXPECT_EQ(host, "fe80::1");
  EXPECT_FALSE(SplitNodeAddress("redis", &host, &port));
  EXPECT_FALSE(SplitNodeAddress("redis:0", &host, &port));
  EXPECT_FALSE(SplitNodeAddress("redis:http", &host, &port));
  EXPECT_FALSE(SplitNodeAddress(":7000", &host, &port));
}

}  // namespace
}  // namespace sluice::cluster
