// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_CLUSTER_REDIS_CONNECTION_H_
#define SLUICE_SERVER_CLUSTER_REDIS_CONNECTION_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/backoff.h"

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

// Error and event counts of a store's connections by kind, and the log of
// their failures: the first failure is logged, then a failure of another
// kind, and otherwise at most one line a minute, so a Redis that refuses
// every reconnect does not flood the log. Safe for concurrent use.
class RedisHealth {
 public:
  // Counts an error of `kind` ("connect", "timeout", "auth", ...) and logs
  // `message` unless the log is rate-limited.
  void Error(absl::string_view kind, const std::string& message,
             absl::Time now) ABSL_LOCKS_EXCLUDED(mu_);
  void Event(absl::string_view kind) ABSL_LOCKS_EXCLUDED(mu_);
  // A connection succeeded: the next failure is logged at once. True when
  // one had failed since the last success.
  bool Recovered() ABSL_LOCKS_EXCLUDED(mu_);
  std::map<std::string, uint64_t> errors() const ABSL_LOCKS_EXCLUDED(mu_);
  std::map<std::string, uint64_t> events() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable absl::Mutex mu_;
  std::map<std::string, uint64_t> errors_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, uint64_t> events_ ABSL_GUARDED_BY(mu_);
  std::string last_logged_kind_ ABSL_GUARDED_BY(mu_);
  absl::Time last_logged_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  uint64_t suppressed_ ABSL_GUARDED_BY(mu_) = 0;
};

struct RedisAddress {
  std::string host;
  int port = 6379;
  // "host:port".
  std::string ToString() const;
  bool operator==(const RedisAddress& o) const {
    return host == o.host && port == o.port;
  }
  bool operator!=(const RedisAddress& o) const { return !(*this == o); }
};

// Where a connection goes when the address is not fixed: Sentinel answers
// anew at every connect. Safe for concurrent use.
class RedisLocator {
 public:
  virtual ~RedisLocator() = default;
  // The address to connect to now; an error of kind "sentinel" when none
  // can be found.
  virtual absl::StatusOr<RedisAddress> Locate(absl::Time now) = 0;
  // A connection checked (ROLE) that `address` is the master; returns the
  // generation that includes it.
  virtual uint64_t Confirmed(const RedisAddress& address) = 0;
  // Changes whenever a new master is confirmed, so every connection still on
  // the old one moves at its next use.
  virtual uint64_t generation() const = 0;
};

// How every connection is made: timeouts, backoff and credentials.
struct RedisConnectionOptions {
  // Connect and per-reply timeout.
  absl::Duration timeout = absl::Milliseconds(250);
  // Backoff between reconnects after a failure: doubles from min to max.
  absl::Duration min_backoff = absl::Milliseconds(100);
  absl::Duration max_backoff = absl::Seconds(1);
  // ACL user for AUTH; "" authenticates with the password alone
  // (requirepass, the "default" user).
  std::string user;
  // File holding the password, read at every connect so that a rotated
  // secret is picked up; "" sends no AUTH.
  std::string password_file;
  // Database selected after AUTH; 0 (Redis's default) sends no SELECT.
  int db = 0;
  // Check with ROLE that the server is a master before using it (Sentinel:
  // a sentinel's answer may be stale, and a replica must never be written).
  bool require_master = false;
  // Where failures and events are counted and logged; may be null.
  RedisHealth* health = nullptr;
};

// The kind of an error reply ("WRONGPASS ...", "READONLY ...") as counted in
// StoreStatus::errors: "auth", "readonly", "script", or "protocol".
absl::string_view RedisReplyErrorKind(absl::string_view error);
// The kind of a hiredis context error (REDIS_ERR_*, with errno for I/O):
// "timeout", "connect" or "protocol".
absl::string_view RedisContextErrorKind(int err, int errno_value);
// The password in `path` without trailing whitespace; an error naming the
// file when it cannot be read or is empty.
absl::StatusOr<std::string> ReadPasswordFile(const std::string& path);

// One hiredis connection to one Redis server with both scripts loaded, and
// its own reconnect backoff. Not thread-safe: one user at a time.
class RedisConnection {
 public:
  // `options` must outlive the connection.
  RedisConnection(const RedisConnectionOptions& options, std::string host,
                  int port);
  // A connection to whatever `locator` answers at each connect; `locator`
  // must outlive the connection.
  RedisConnection(const RedisConnectionOptions& options,
                  RedisLocator* locator);
  ~RedisConnection();
  RedisConnection(const RedisConnection&) = delete;
  RedisConnection& operator=(const RedisConnection&) = delete;

  // Connects and loads the scripts unless that is done; UNAVAILABLE while
  // backing off after a failure.
  absl::Status Ensure(absl::Time now);
  // Closes after an error; the next Ensure waits the backoff.
  void Drop(absl::Time now);
  // Whether a connection is open (it may still turn out to be dead).
  bool connected() const { return context_ != nullptr; }
  // Sends `commands` as one pipeline and reads every reply, error replies
  // included; a connection or timeout error drops the connection and fails
  // the whole pipeline, and so does a READONLY reply (the server became a
  // replica: with a locator, the next Ensure finds the new master). Calls
  // Ensure first.
  absl::StatusOr<std::vector<RedisReplyPtr>> Pipeline(
      const std::vector<RedisCommand>& commands, absl::Time now);

  // Where the connection is, or last went (with a locator, "" before the
  // first answer).
  const std::string& host() const { return host_; }
  int port() const { return port_; }
  // "host:port".
  std::string address() const;

 private:
  // The whole set-up of a new connection, in order: locate, connect, AUTH,
  // SELECT, ROLE, SCRIPT LOAD.
  absl::Status Connect(absl::Time now);
  // Sends one command and returns its reply; a null reply means the
  // connection failed (see context_->err).
  RedisReplyPtr Command(const std::vector<std::string>& args);
  // Counts and logs an error of `kind`, drops the connection and returns
  // UNAVAILABLE (DEADLINE_EXCEEDED for a timeout) with `message`.
  absl::Status Fail(absl::string_view kind, const std::string& message,
                    absl::Time now);
  // Closes the connection without a backoff.
  void Close();

  const RedisConnectionOptions& options_;
  RedisLocator* const locator_ = nullptr;
  std::string host_;
  int port_ = 0;
  redisContext* context_ = nullptr;
  std::string tick_sha_;
  std::string config_sha_;
  // The locator's generation when this connection was made.
  uint64_t generation_ = 0;
  base::ExponentialBackoff backoff_;
  absl::Time next_attempt_ = absl::InfinitePast();
};

// The Lua sources (generated from tick.lua and config.lua).
const char* TickScript();
const char* ConfigScript();

}  // namespace sluice::cluster

#endif  // SLUICE_SERVER_CLUSTER_REDIS_CONNECTION_H_
