#ifndef SLUICE_SERVER_CLUSTER_REDIS_STORE_H_
#define SLUICE_SERVER_CLUSTER_REDIS_STORE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/cluster/store.h"

struct redisContext;

namespace sluice::cluster {

// The Store on one Redis server (hiredis, synchronous, on the sync loop's
// thread). A tick is one pipelined round trip: the membership commands and
// one EVALSHA of tick.lua per policy. Every connect and every read has a
// timeout, so a dead or paused (SIGSTOPped) Redis costs at most `timeout`
// per tick; after a failure the next connect waits a backoff that doubles up
// to `max_backoff`. Not thread-safe: one thread calls Tick.
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
  };

  // Parses "host:port" (port defaults to 6379).
  static absl::StatusOr<Options> ParseAddress(const std::string& address);

  explicit RedisStore(Options options);
  ~RedisStore() override;

  absl::StatusOr<TickReply> Tick(const TickRequest& request) override;
  std::string Describe() const override;

  // The Lua source run for each policy (tick.lua).
  static const char* TickScript();

 private:
  absl::Status EnsureConnected(absl::Time now);
  void Disconnect(absl::Time now);
  absl::StatusOr<TickReply> RunTick(const TickRequest& request);

  const Options options_;
  redisContext* context_ = nullptr;
  std::string script_sha_;
  absl::Duration backoff_;
  absl::Time next_attempt_ = absl::InfinitePast();
};

}  // namespace sluice::cluster

#endif  // SLUICE_SERVER_CLUSTER_REDIS_STORE_H_
