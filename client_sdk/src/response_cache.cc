// SPDX-License-Identifier: Apache-2.0
#include "response_cache.h"

#include <algorithm>
#include <utility>

#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"

namespace sluice::client::internal {

ResponseCache::ResponseCache(size_t max_entries, size_t max_bytes)
    : max_entries_per_shard_(std::max<size_t>(1, max_entries / kShards)),
      max_bytes_per_shard_(std::max<size_t>(1, max_bytes / kShards)),
      enabled_(max_entries > 0 && max_bytes > 0) {}

std::string ResponseCache::Id(absl::string_view dependency,
                              absl::string_view key) {
  // Dependency names cannot hold a NUL, so the pair is unambiguous.
  return absl::StrCat(dependency, absl::string_view("\0", 1), key);
}

ResponseCache::Shard& ResponseCache::ShardFor(const std::string& id) {
  return shards_[absl::Hash<std::string>()(id) % kShards];
}

size_t ResponseCache::Bytes(const Entry& e) {
  return e.id.size() + e.response.body.size() + e.response.content_type.size();
}

void ResponseCache::Evict(Shard& shard, std::list<Entry>::iterator it) {
  shard.bytes -= Bytes(*it);
  shard.index.erase(it->id);
  shard.lru.erase(it);
}

void ResponseCache::Put(absl::string_view dependency, absl::string_view key,
                        const Response& response, absl::Time now) {
  if (!enabled_) return;
  Entry entry{Id(dependency, key), response, now};
  const size_t bytes = Bytes(entry);
  if (bytes > max_bytes_per_shard_) return;
  Shard& shard = ShardFor(entry.id);
  absl::MutexLock lock(&shard.mu);
  if (auto found = shard.index.find(entry.id); found != shard.index.end()) {
    Evict(shard, found->second);
  }
  while (!shard.lru.empty() &&
         (shard.lru.size() >= max_entries_per_shard_ ||
          shard.bytes + bytes > max_bytes_per_shard_)) {
    Evict(shard, std::prev(shard.lru.end()));
  }
  shard.lru.push_front(std::move(entry));
  shard.index[shard.lru.front().id] = shard.lru.begin();
  shard.bytes += bytes;
}

std::optional<Response> ResponseCache::Get(absl::string_view dependency,
                                           absl::string_view key,
                                           absl::Duration ttl,
                                           absl::Time now) {
  if (!enabled_) return std::nullopt;
  const std::string id = Id(dependency, key);
  Shard& shard = ShardFor(id);
  absl::MutexLock lock(&shard.mu);
  auto found = shard.index.find(id);
  if (found == shard.index.end()) return std::nullopt;
  auto it = found->second;
  if (now - it->stored > ttl) {
    Evict(shard, it);
    return std::nullopt;
  }
  shard.lru.splice(shard.lru.begin(), shard.lru, it);
  return it->response;
}

size_t ResponseCache::size() const {
  size_t n = 0;
  for (Shard& shard : shards_) {
    absl::MutexLock lock(&shard.mu);
    n += shard.lru.size();
  }
  return n;
}

}  // namespace sluice::client::internal
