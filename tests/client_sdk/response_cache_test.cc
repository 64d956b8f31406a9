// SPDX-License-Identifier: Apache-2.0
#include "response_cache.h"

#include <string>

#include "gtest/gtest.h"

namespace sluice::client::internal {
namespace {

const absl::Time kStart = absl::FromUnixSeconds(1767225600);  // 2026-01-01

Response Body(std::string body) {
  Response r;
  r.body = std::move(body);
  r.content_type = "text/plain";
  return r;
}

TEST(ResponseCacheTest, ServesWithinTtlOnly) {
  ResponseCache cache(100, 1 << 20);
  cache.Put("search", "tenant-a", Body("a1"), kStart);
  auto hit = cache.Get("search", "tenant-a", absl::Seconds(30),
                       kStart + absl::Seconds(30));
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->body, "a1");
  EXPECT_EQ(hit->content_type, "text/plain");
  EXPECT_FALSE(cache.Get("search", "tenant-a", absl::Seconds(30),
                         kStart + absl::Seconds(31))
                   .has_value());
}

TEST(ResponseCacheTest, KeepsTheLastResponsePerDependencyAndKey) {
  ResponseCache cache(100, 1 << 20);
  cache.Put("search", "a", Body("old"), kStart);
  cache.Put("search", "a", Body("new"), kStart + absl::Seconds(1));
  cache.Put("search", "b", Body("b"), kStart);
  cache.Put("inventory", "a", Body("inv"), kStart);
  const absl::Duration ttl = absl::Minutes(1);
  EXPECT_EQ(cache.Get("search", "a", ttl, kStart)->body, "new");
  EXPECT_EQ(cache.Get("search", "b", ttl, kStart)->body, "b");
  EXPECT_EQ(cache.Get("inventory", "a", ttl, kStart)->body, "inv");
  EXPECT_FALSE(cache.Get("inventory", "b", ttl, kStart).has_value());
  EXPECT_EQ(cache.size(), 3u);
}

TEST(ResponseCacheTest, EvictsLeastRecentlyUsedBeyondEntryBound) {
  // 16 entries over 16 shards: one per shard, so the second key that lands
  // in a shard evicts the first. Count what survives instead of guessing
  // shards.
  ResponseCache cache(16, 1 << 20);
  for (int i = 0; i < 200; ++i) {
    cache.Put("d", std::to_string(i), Body("x"), kStart);
  }
  EXPECT_LE(cache.size(), 16u);
  // The most recent key always survives.
  EXPECT_TRUE(cache.Get("d", "199", absl::Minutes(1), kStart).has_value());
}

TEST(ResponseCacheTest, RespectsByteBound) {
  ResponseCache cache(1000, 16 * 100);  // 100 bytes per shard.
  cache.Put("d", "big", Body(std::string(200, 'x')), kStart);
  EXPECT_FALSE(cache.Get("d", "big", absl::Minutes(1), kStart).has_value());
  for (int i = 0; i < 100; ++i) {
    cache.Put("d", std::to_string(i), Body(std::string(40, 'y')), kStart);
  }
  // At most two 40-byte bodies (plus ids) fit in a 100-byte shard.
  EXPECT_LE(cache.size(), 16u * 2);
}

TEST(ResponseCacheTest, ZeroEntriesDisables) {
  ResponseCache cache(0, 1 << 20);
  cache.Put("d", "k", Body("x"), kStart);
  EXPECT_FALSE(cache.Get("d", "k", absl::Minutes(1), kStart).has_value());
}

}  // namespace
}  // namespace sluice::client::internal
