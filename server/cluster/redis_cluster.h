// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_CLUSTER_REDIS_CLUSTER_H_
#define SLUICE_SERVER_CLUSTER_REDIS_CLUSTER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/cluster/redis_connection.h"

namespace sluice::cluster {

// Redis Cluster hashes every key to one of this many slots.
inline constexpr int kClusterSlots = 16384;

// The slot of `key`: CRC16 (XMODEM) of the key, or of the part between the
// first "{" and the next "}" when that part is not empty (the hash tag that
// keeps "sluice:{p}:epoch" and "sluice:{p}:g:k" on one node), mod 16384.
int KeySlot(absl::string_view key);

// "host:port" split at the last colon (a node may answer an IPv6 host
// without brackets); false when the port is not a number in [1, 65535].
bool SplitNodeAddress(absl::string_view address, std::string* host, int* port);

// Topology events the routers of one store count (StoreStatus::events).
struct ClusterEvents {
  std::atomic<uint64_t> moved{0};
  std::atomic<uint64_t> ask{0};
  std::atomic<uint64_t> slots_refreshed{0};
};

// Runs pipelines of RedisCommands on a Redis Cluster: each command goes to
// the master that owns its key's slot, one pipeline per master, and the
// replies come back in command order. The slot map comes from CLUSTER SLOTS
// (asked of the seeds, then of every known master) at the first use and
// again after a MOVED, a connection error or a slot without a master. A
// MOVED or ASK reply is followed once in the same call (ASK with ASKING
// first, without touching the map); TRYAGAIN, CLUSTERDOWN, a second
// redirection or any connection error fails the whole call as UNAVAILABLE.
// Connections are made lazily, one per master, each loading the scripts,
// and dropped when their node leaves the map. Not thread-safe: one user at
// a time (Describe is safe from any thread).
class RedisClusterRouter {
 public:
  struct Node {
    std::string host;
    int port = 0;
  };

  // `connection_options` and `events` must outlive the router.
  RedisClusterRouter(const RedisConnectionOptions& connection_options,
                     std::vector<Node> seeds, ClusterEvents* events);
  ~RedisClusterRouter();
  RedisClusterRouter(const RedisClusterRouter&) = delete;
  RedisClusterRouter& operator=(const RedisClusterRouter&) = delete;

  absl::StatusOr<std::vector<RedisReplyPtr>> Execute(
      const std::vector<RedisCommand>& commands, absl::Time now);

  // Closes every connection so that the next use reconnects at once and
  // loads the scripts again (after NOSCRIPT: a node restarted or a replica
  // was promoted).
  void Reset();

  // "redis cluster: 3 masters (127.0.0.1:7000, ...)", or the seeds before
  // the first slot map. Safe from any thread.
  std::string Describe() const ABSL_LOCKS_EXCLUDED(describe_mu_);

 private:
  // A reply that is to be sent again elsewhere.
  struct Redirect {
    size_t command = 0;  // index into the caller's commands
    bool ask = false;
    std::string address;
  };

  absl::Status RefreshSlots(absl::Time now);
  // Reads one CLUSTER SLOTS answer of `from` into masters_ and slots_.
  absl::Status LoadSlots(const redisReply* reply, const Node& from);
  // The connection to `address`, made if there is none.
  RedisConnection& ConnectionTo(const std::string& address);
  // Runs `indices` of `commands` on `address` (each preceded by ASKING when
  // `asking`) and files the replies in `replies`; redirections go to
  // `redirects`.
  absl::Status RunOn(const std::string& address,
                     const std::vector<RedisCommand>& commands,
                     const std::vector<size_t>& indices, bool asking,
                     absl::Time now, std::vector<RedisReplyPtr>* replies,
                     std::vector<Redirect>* redirects);

  const RedisConnectionOptions& connection_options_;
  const std::vector<Node> seeds_;
  ClusterEvents* const events_;

  // Masters by "host:port", and the index into masters_ of each slot's
  // owner (-1: none known).
  std::vector<std::string> masters_;
  std::vector<int> slots_;
  bool refresh_wanted_ = true;
  absl::flat_hash_map<std::string, std::unique_ptr<RedisConnection>>
      connections_;

  mutable absl::Mutex describe_mu_;
  std::string description_ ABSL_GUARDED_BY(describe_mu_);
};

}  // namespace sluice::cluster

#endif  // SLUICE_SERVER_CLUSTER_REDIS_CLUSTER_H_
