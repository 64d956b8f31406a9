// SPDX-License-Identifier: Apache-2.0
#include "server/app/mode.h"

#include <algorithm>
#include <utility>

#include "server/app/cluster_mode.h"
#include "server/app/standalone_mode.h"
#include "server/cluster/redis_sentinel.h"
#include "server/cluster/redis_store.h"
#include "server/cluster/sync_loop.h"
#include "server/tree/upstream_store.h"
#include "spdlog/spdlog.h"

namespace sluice::app {
namespace {

std::unique_ptr<cluster::Store> RedisStoreFor(const ServerOptions& options) {
  // A bad address leaves the defaults here: Server::BuildAndStart runs
  // ValidateOptions, which refuses it, before the store is first used.
  absl::StatusOr<cluster::RedisStore::Options> parsed =
      options.redis_cluster.empty()
          ? cluster::RedisStore::ParseAddress(options.redis)
          : cluster::RedisStore::ParseClusterSeeds(options.redis_cluster);
  cluster::RedisStore::Options store_options =
      parsed.ok() ? *std::move(parsed) : cluster::RedisStore::Options();
  store_options.timeout = options.redis_timeout;
  store_options.user = options.redis_user;
  store_options.password_file = options.redis_password_file;
  store_options.db = options.redis_db;
  if (!options.redis_sentinels.empty()) {
    absl::StatusOr<std::vector<cluster::RedisAddress>> sentinels =
        cluster::ParseSentinels(options.redis_sentinels);
    if (sentinels.ok()) store_options.sentinels = *std::move(sentinels);
    store_options.master_name = options.redis_master;
  }
  // A Redis that comes back is reached within a retry or two: the sync
  // loop retries a failed tick every 200 ms.
  store_options.max_backoff =
      std::min(options.sync_interval, absl::Milliseconds(200));
  // The sync loop's stale period (SyncLoop::Options::stale_ticks
  // intervals): how old the config's epoch must be before an admin write
  // may create a new policy's epoch without a recovery window.
  store_options.stale_after =
      options.sync_interval * cluster::SyncLoop::Options().stale_ticks;
  return std::make_unique<cluster::RedisStore>(store_options);
}

// A leaf's store: lease calls to the central replicas of --upstream.
ClusterMode::StoreParts UpstreamStoreFor(const ServerOptions& options) {
  tree::UpstreamStore::Options upstream;
  upstream.target = options.upstream;
  upstream.tls = options.upstream_tls;
  // A tick must not outlast its interval: the next one would queue behind.
  upstream.timeout = std::min(options.upstream_timeout, options.sync_interval);
  ClusterMode::StoreParts parts;
  absl::StatusOr<std::unique_ptr<tree::UpstreamStore>> store =
      tree::UpstreamStore::Create(std::move(upstream));
  if (!store.ok()) {
    parts.error = store.status();
    return parts;
  }
  parts.upstream = store->get();
  parts.store = *std::move(store);
  return parts;
}

}  // namespace

std::unique_ptr<Mode> MakeMode(const ServerOptions& options, core::Clock* clock,
                               StoreFactory store_factory,
                               const std::string& replica_id,
                               bool sync_thread) {
  if (!ClusterModeEnabled(options)) {
    return std::make_unique<StandaloneMode>(options, clock);
  }
  if (!options.state_file.empty()) {
    spdlog::warn(
        "--state-file {} is ignored in cluster mode: warm state is kept in "
        "the cluster store",
        options.state_file);
  }
  ClusterMode::StoreParts store;
  if (store_factory) {
    store.store = store_factory();
  } else if (LeafReplica(options)) {
    store = UpstreamStoreFor(options);
  } else {
    store.store = RedisStoreFor(options);
  }
  return std::make_unique<ClusterMode>(options, std::move(store), clock,
                                       replica_id, sync_thread);
}

}  // namespace sluice::app
