#ifndef SLUICE_SERVER_CLUSTER_REDIS_CONNECTION_H_
#define SLUICE_SERVER_CLUSTER_REDIS_CONNECTION_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

struct redisContext;
struct redisReply;

namespace sluice::cluster {

struct RedisReplyDeleter {
  void operator()(redisReply* r) const;
};
using RedisReplyPtr = std::unique_ptr<redisReply, RedisReplyDeleter>;

// The Lua scripts a connection loads; a RedisCommand names one of them
// instead of spelling "EVALSHA <sha>", because the sha is the connection's.
enum class RedisScript { kNone, kTick, kConfig };

// One command of a pipeline. `key` is the key the command touches (the
// first KEYS entry of a script): it decides the node in Redis Cluster.
struct RedisCommand {
  RedisScript script = RedisScript::kNone;
  std::string key;
  // Without a script: the whole command ({"LPOP", key, "10"}). With one:
  // what follows "EVALSHA <sha>" ({"1", key, args...}).
  std::vector<std::string> args;
};

// How every connection is made: timeouts, backoff and credentials.
struct RedisConnectionOptions {
  // Connect and per-reply timeout.
  absl::Duration timeout = absl::Milliseconds(250);
  // Backoff between reconnects after a failure: doubles from min to max.
  absl::Duration min_backoff = absl::Milliseconds(100);
  absl::Duration max_backoff = absl::Seconds(1);
};

// One hiredis connection to one Redis server with both scripts loaded, and
// its own reconnect backoff. Not thread-safe: one user at a time.
class RedisConnection {
 public:
  // `options` must outlive the connection.
  RedisConnection(const RedisConnectionOptions& options, std::string host,
                  int port);
  ~RedisConnection();
  RedisConnection(const RedisConnection&) = delete;
  RedisConnection& operator=(const RedisConnection&) = delete;

  // Connects and loads the scripts unless that is done; UNAVAILABLE while
  // backing off after a failure.
  absl::Status Ensure(absl::Time now);
  // Closes after an error; the next Ensure waits the backoff.
  void Drop(absl::Time now);
  // Sends `commands` as one pipeline and reads every reply, error replies
  // included; a connection or timeout error drops the connection and fails
  // the whole pipeline. Calls Ensure first.
  absl::StatusOr<std::vector<RedisReplyPtr>> Pipeline(
      const std::vector<RedisCommand>& commands, absl::Time now);

  const std::string& host() const { return host_; }
  int port() const { return port_; }
  // "host:port".
  std::string address() const;

 private:
  const RedisConnectionOptions& options_;
  const std::string host_;
  const int port_;
  redisContext* context_ = nullptr;
  std::string tick_sha_;
  std::string config_sha_;
  absl::Duration backoff_;
  absl::Time next_attempt_ = absl::InfinitePast();
};

// The Lua sources (generated from tick.lua and config.lua).
const char* TickScript();
const char* ConfigScript();

}  // namespace sluice::cluster

#endif  // SLUICE_SERVER_CLUSTER_REDIS_CONNECTION_H_
