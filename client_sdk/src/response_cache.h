// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_CLIENT_SRC_RESPONSE_CACHE_H_
#define SLUICE_CLIENT_SRC_RESPONSE_CACHE_H_

#include <array>
#include <cstddef>
#include <list>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "sluice/client/client.h"

namespace sluice::client::internal {

// The last good response per (dependency, key), for CACHE fallbacks. An LRU
// bounded by entries and by body bytes, split into shards so that
// concurrent callers rarely share a lock. The TTL is the reader's (it comes
// from the policy), so entries are stamped with their time and judged on
// Get. Time is passed in. Safe for concurrent use.
class ResponseCache {
 public:
  // max_entries 0 disables the cache.
  ResponseCache(size_t max_entries, size_t max_bytes);

  void Put(absl::string_view dependency, absl::string_view key,
           const Response& response, absl::Time now);
  // The cached response if it is at most `ttl` old.
  std::optional<Response> Get(absl::string_view dependency,
                              absl::string_view key, absl::Duration ttl,
                              absl::Time now);

  size_t size() const;

 private:
  static constexpr size_t kShards = 16;

  struct Entry {
    std::string id;
    Response response;
    absl::Time stored;
  };
  struct Shard {
    absl::Mutex mu;
    // Most recently used first.
    std::list<Entry> lru ABSL_GUARDED_BY(mu);
    absl::flat_hash_map<std::string, std::list<Entry>::iterator> index
        ABSL_GUARDED_BY(mu);
    size_t bytes ABSL_GUARDED_BY(mu) = 0;
  };

  static std::string Id(absl::string_view dependency, absl::string_view key);
  Shard& ShardFor(const std::string& id);
  static size_t Bytes(const Entry& e);
  void Evict(Shard& shard, std::list<Entry>::iterator it)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu);

  const size_t max_entries_per_shard_;
  const size_t max_bytes_per_shard_;
  const bool enabled_;
  mutable std::array<Shard, kShards> shards_;
};

}  // namespace sluice::client::internal

#endif  // SLUICE_CLIENT_SRC_RESPONSE_CACHE_H_
