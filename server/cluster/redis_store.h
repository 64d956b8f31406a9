// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_CLUSTER_REDIS_STORE_H_
#define SLUICE_SERVER_CLUSTER_REDIS_STORE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/cluster/redis_cluster.h"
#include "server/cluster/redis_connection.h"
#include "server/cluster/redis_sentinel.h"
#include "server/cluster/store.h"

namespace sluice::cluster {

// The Store on one Redis server (hiredis, synchronous), either at a fixed
// address or the master a group of sentinels names (re-asked after every
// connection failure, timeout or READONLY reply, so a failover is followed). A tick is one
// pipelined round trip on the sync loop's connection: the membership
// commands, one EVALSHA of config.lua and one EVALSHA of tick.lua per policy.
// Admin writes use a second connection of their own, so they never wait
// behind a tick. Every connect and every read has a timeout, so a dead or
// paused (SIGSTOPped) Redis costs at most `timeout`; after a failure the next
// connect waits a backoff that doubles up to `max_backoff`. With
// `cluster_seeds` the store runs on a Redis Cluster: the same commands, each
// sent to the master of its key's slot (RedisClusterRouter). Tick is called
// from one thread; the config writes are safe from any thread.
class RedisStore final : public Store {
 public:
  struct Options {
    std::string host = "127.0.0.1";
    int port = 6379;
    // Connect and per-reply timeout.
    absl::Duration timeout = absl::Milliseconds(250);
    // Backoff between reconnects after a failure: doubles from min to max.
    absl::Duration min_backoff = absl::Milliseconds(100);
    absl::Duration max_backoff = absl::Seconds(1);
    // Every key starts with this, then "{<policy>}:" for per-policy keys.
    std::string key_prefix = "sluice:";
    // The sync loop's stale period: a policy an admin write creates gets
    // its epoch at once (no recovery window) only while the config's own
    // epoch is at least this old (config.lua, put).
    absl::Duration stale_after = absl::Seconds(3);
    // ACL user for AUTH; "" uses the password alone (requirepass).
    std::string user;
    // File holding the password, read at every connect; "" sends no AUTH.
    std::string password_file;
    // Database to SELECT; 0 is Redis's default.
    int db = 0;
    // Sentinel: the sentinels to ask for the master named `master_name`;
    // when set, host and port are not used.
    std::vector<RedisAddress> sentinels;
    std::string master_name;
    // Redis Cluster seed nodes; when set, host and port are unused and
    // every command goes to the master of its key's slot.
    std::vector<RedisClusterRouter::Node> cluster_seeds;
  };

  // Parses "host:port" (port defaults to 6379).
  static absl::StatusOr<Options> ParseAddress(const std::string& address);
  // Parses --redis-cluster's "host:port,host:port,..." into cluster_seeds.
  static absl::StatusOr<Options> ParseClusterSeeds(const std::string& seeds);

  explicit RedisStore(Options options);
  ~RedisStore() override;

  absl::StatusOr<TickReply> Tick(const TickRequest& request) override;
  absl::StatusOr<ConfigWrite> PutPolicy(const StoredPolicy& policy,
                                        uint64_t expected_version) override;
  absl::StatusOr<ConfigWrite> DeletePolicy(const std::string& name,
                                           uint64_t expected_version) override;
  absl::StatusOr<ConfigWrite> SetOverride(
      const StoredOverride& override) override;
  std::string Describe() const override;
  StoreStatus status() const override;

 private:
  absl::StatusOr<TickReply> RunTick(const TickRequest& request);
  // Runs one tick's pipeline: every command on the tick connection (or, in
  // Redis Cluster, on the master of its key's slot), replies in command
  // order.
  absl::StatusOr<std::vector<RedisReplyPtr>> Execute(
      const std::vector<RedisCommand>& commands, absl::Time now);
  // Runs config.lua with `args` on the admin connection (in Redis Cluster,
  // the admin router's connection to the config slot's master).
  absl::StatusOr<std::vector<std::string>> RunConfig(
      const std::vector<std::string>& args) ABSL_LOCKS_EXCLUDED(admin_mu_);
  // Creates the epoch of a policy an admin write just created, unless it
  // has one; false when Redis did not answer (the policy's first tick then
  // makes it, with a recovery window).
  bool CreateEpoch(const std::string& policy) ABSL_LOCKS_EXCLUDED(admin_mu_);
  // The key config.lua declares (KEYS[1]); tick.lua declares
  // "<prefix>{<policy>}:epoch" likewise.
  std::string ConfigKey() const {
    return options_.key_prefix + "{config}:epoch";
  }

  const Options options_;
  // Errors and events of every connection below.
  RedisHealth health_;
  // With sentinels: where the master is (null without).
  const std::unique_ptr<SentinelLocator> sentinel_;
  const RedisConnectionOptions connection_options_;
  RedisConnection tick_connection_;
  absl::Mutex admin_mu_;
  RedisConnection admin_connection_ ABSL_GUARDED_BY(admin_mu_);
  // Redis Cluster only (else null): MOVED/ASK/refresh counts, the tick
  // router (sync loop thread only) and the admin writes' own router, so a
  // config write never waits behind a tick nor shares its connections.
  std::unique_ptr<ClusterEvents> cluster_events_;
  std::unique_ptr<RedisClusterRouter> tick_router_;
  std::unique_ptr<RedisClusterRouter> admin_router_ ABSL_GUARDED_BY(admin_mu_);
};

}  // namespace sluice::cluster

#endif  // SLUICE_SERVER_CLUSTER_REDIS_STORE_H_
