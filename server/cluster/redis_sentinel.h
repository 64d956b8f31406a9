// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_CLUSTER_REDIS_SENTINEL_H_
#define SLUICE_SERVER_CLUSTER_REDIS_SENTINEL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/cluster/redis_connection.h"

namespace sluice::cluster {

// "host:port,host:port,..." (--redis-sentinels; the port defaults to 26379,
// Sentinel's). INVALID_ARGUMENT naming the flag and the bad entry.
absl::StatusOr<std::vector<RedisAddress>> ParseSentinels(
    const std::string& list);

struct SentinelOptions {
  // The sentinels to ask, in this order (the last one that answered first).
  std::vector<RedisAddress> sentinels;
  // The master's name in the sentinels' config (`sentinel monitor NAME`).
  std::string master_name;
  // Connect and reply timeout of each sentinel asked.
  absl::Duration timeout = absl::Milliseconds(250);
};

// Finds the master the sentinels monitor under `master_name`: asks them in
// turn with SENTINEL get-master-addr-by-name and takes the first answer.
// The connections check the answer with ROLE (a sentinel may be stale) and
// report the master they confirmed, which is what counts as a move
// ("master_changed" in `health`, and a log line). Safe for concurrent use.
class SentinelLocator final : public RedisLocator {
 public:
  // `health` may be null and must outlive the locator.
  SentinelLocator(SentinelOptions options, RedisHealth* health);

  absl::StatusOr<RedisAddress> Locate(absl::Time now) override
      ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t Confirmed(const RedisAddress& address) override
      ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t generation() const override ABSL_LOCKS_EXCLUDED(mu_);

  // `sentinel master "mymaster" at 127.0.0.1:7001` ("not found yet" before
  // the first confirmed master).
  std::string Describe() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // One sentinel's answer.
  absl::StatusOr<RedisAddress> Ask(const RedisAddress& sentinel) const;

  const SentinelOptions options_;
  RedisHealth* const health_;
  mutable absl::Mutex mu_;
  // The sentinel to ask first: the one that answered last.
  size_t first_ ABSL_GUARDED_BY(mu_) = 0;
  RedisAddress master_ ABSL_GUARDED_BY(mu_);
  bool found_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace sluice::cluster

#endif  // SLUICE_SERVER_CLUSTER_REDIS_SENTINEL_H_
