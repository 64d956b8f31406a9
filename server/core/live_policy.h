// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_CORE_DEPENDENCY_H_
#define SLUICE_SERVER_CORE_DEPENDENCY_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "server/core/client_leases.h"
#include "server/core/clock.h"
#include "server/core/core_slice.h"
#include "server/core/decision.h"
#include "server/core/events.h"
#include "server/core/gate_set.h"
#include "server/core/permit_ledger.h"
#include "server/core/policy_config.h"
#include "server/core/sweep_alarm.h"
#include "server/core/tick.h"
#include "server/core/warm_state.h"

namespace sluice::core {

struct LivePolicyStatus {
  std::shared_ptr<const PolicyConfig> policy;
  DecisionCounters counters;
  // Keys with state (per_key policies); 1 otherwise.
  size_t keys = 0;
  // The gates of the requested key (or of the dependency); absent when a
  // per_key policy has no state for that key.
  std::optional<GateStatus> gates;
  // What clients hold on lease, over every key.
  LeaseTotals leased;
};

// All state of one policy: its config, its gates (one set, or one per key
// with LRU eviction), its permits and its counters. Safe for concurrent use.
//
// The state sits in shards, each behind its own lock, so different
// dependencies never contend and neither do most keys of one: a per_key
// policy with at least kShardedKeys keys gets a shard per kKeysPerShard
// keys (see ShardsFor), chosen by a hash of the key, each holding up to its
// share of max_keys and evicting its own least recently used key (so
// eviction is LRU within a shard and max_keys holds exactly). Other
// policies have one shard.
//
// Per key it keeps what the key's gates need and no more: the key once, a
// few words per gate, and a breaker window only when the policy has a
// breaker. Permits are kept per shard, not per key.
class LivePolicy {
 public:
  // `previous`, when given, is the dependency this one replaces (see Fits):
  // its counters and breaker override carry over. Every shard publishes
  // when it next has something to sweep to `alarm` (see SweepAlarm), which
  // must outlive the dependency.
  LivePolicy(std::shared_ptr<const PolicyConfig> policy, Clock* clock,
             EventSink* sink, PermitEpochs* epochs, SweepAlarm* alarm,
             const ClusterState& cluster,
             absl::Duration permit_grace = absl::ZeroDuration(),
             const SliceOptions& slices = SliceOptions{},
             const LivePolicy* previous = nullptr);
  ~LivePolicy();
  LivePolicy(const LivePolicy&) = delete;
  LivePolicy& operator=(const LivePolicy&) = delete;

  // Decides one call and fills every field of `out`. INVALID_ARGUMENT when
  // `permits` can never be admitted under the policy. `unreported`: what
  // the permit counts as if it is never reported.
  // `out->permit_id` gets the ledger's serial only; the engine seals it.
  absl::Status Acquire(absl::string_view key, uint32_t permits,
                       Unreported unreported, Decision* out);
  // Settles the permit with ledger serial `permit_id`, whose seal the
  // engine has checked.
  BreakerState Report(absl::string_view key, uint64_t permit_id,
                      Outcome outcome, absl::Duration latency);
  // Expires the permits and moves the gates that are due at `now` (the
  // engine reads the clock once for all dependencies). A shard with nothing
  // due returns at once. Each shard publishes its next due time to the
  // alarm.
  void Sweep(absl::Time now);
  BreakerState PeekBreaker(absl::string_view key);
  // Settles a client's lease and answers its next one (see ClientLeases):
  // a policy without per_key lends from its gates (`key` empty), a per_key
  // one from the gates of `key`.
  void RenewLease(absl::string_view key, const LeaseSettlement& in,
                  LeaseTerms* out);
  // Whether Reconfigure can take `policy`: the same shape of state (per_key
  // or not). If not, the engine builds a new dependency in its place, which
  // keeps the counters and the override but whose gates start afresh.
  bool Fits(const PolicyConfig& policy) const;
  // Installs a changed version of the same policy, keeping live state.
  // Requires Fits(*policy).
  void Reconfigure(std::shared_ptr<const PolicyConfig> policy);
  void SetOverride(BreakerOverride override, const std::string& cause);
  LivePolicyStatus Status(absl::string_view key);

  // Warm start: see Engine::ExportWarmState. Import takes what fits the
  // policy (per_key keys only into a per_key policy) and assumes the
  // caller checked the digest.
  DependencyWarmState ExportWarm(size_t max_keys);
  // Returns the keys whose state was not sane (partly or wholly not taken).
  size_t ImportWarm(const DependencyWarmState& state);

  // Cluster mode: see Engine.
  void SetClusterState(const ClusterState& cluster);
  void CollectTick(absl::Duration interval, DependencyTick* out);
  void ApplyTick(const DependencyUpdate& update);
  std::shared_ptr<const PolicyConfig> policy() const;

  // Upper bounds the engine enforces on request fields.
  static constexpr uint32_t kMaxPermits = 1000000;
  // Per-key cluster limits: most keys pushed per tick (the rest wait for
  // the next one), and keys handled per lock hold while collecting.
  static constexpr size_t kMaxKeysPerTick = 10000;
  static constexpr size_t kKeysPerLock = 256;
  // A per_key policy whose max_keys is at least kShardedKeys when the
  // dependency is built gets one shard per kKeysPerShard keys of max_keys,
  // at most kMaxShards. Below that, one shard keeps eviction exactly
  // least-recently-used. The number stays when max_keys changes later
  // (each shard then holds at least one key).
  //
  // Why so many: two threads deciding their own keys share nothing but the
  // shards their keys hash to, and a shard's lock, LRU list and ledger
  // move between their cores on every call that lands on a shard the other
  // thread used last. With S shards, a thread's k keys meet the other
  // thread's in about k/S of its calls (docs/benchmarks.md, "Distinct
  // keys"). An idle shard costs about 1 KiB (sizeof, and no ring until
  // its first permit), under 4% of the state of the 128 keys it may hold.
  static constexpr uint32_t kShardedKeys = 4096;
  static constexpr uint32_t kKeysPerShard = 128;
  static constexpr size_t kMaxShards = 1024;
  // Most client leases a per_key policy keeps over all its keys (each shard
  // its part, at least 64); a renewal past it gets no lease and asks per
  // call.
  static constexpr size_t kMaxKeyLeases = 65536;

  // Shards for a dependency built with `policy`: 1, or from 32 (max_keys
  // 4,096) to kMaxShards (max_keys 131,072 and more).
  static size_t ShardsFor(const PolicyConfig& policy);

 private:
  class Shard;

  Shard& ShardFor(absl::string_view key);

  Clock* const clock_;
  const std::string name_;
  const bool per_key_;
  // Fixed at construction: Reconfigure never changes their number.
  std::vector<std::unique_ptr<Shard>> shards_;
  // See GateContext::demand_signalled; cleared by CollectTick.
  std::atomic<bool> demand_signalled_{false};
};

}  // namespace sluice::core

#endif  // SLUICE_SERVER_CORE_DEPENDENCY_H_
