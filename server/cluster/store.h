// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_CLUSTER_STORE_H_
#define SLUICE_SERVER_CLUSTER_STORE_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/stats.h"
#include "server/core/tick.h"

namespace sluice::cluster {

// What one replica pushes for one policy in a tick. Times are on the store's
// clock (the sync loop converts).
struct PolicyPush {
  std::string policy;
  bool per_key = false;
  // The policy's store epoch this replica knows ("" before the first tick).
  std::string epoch_seen;
  // Keys with a cluster-scope limit to share (see core::DependencyTick).
  std::vector<core::KeyTick> keys;
  bool has_breaker = false;
  core::OutcomeTotals outcomes;
  // This replica's breaker state and the stored generation it derives from.
  core::BreakerRecord breaker;
  // Whether a transition in `breaker` may be stored. False on the first tick
  // after the store was unreachable: the replica adopts the stored state
  // before it publishes its own.
  bool publish = true;
  uint32_t leases_wanted = 0;
  uint32_t lease_cap = 0;
  absl::Duration lease_ttl = absl::ZeroDuration();
  // The policy's warm state (adaptive limit, latency baseline), when it has
  // either; stored only once it has learned something (a steady limit with
  // a baseline latency, or a learned baseline window).
  bool has_warm = false;
  uint64_t digest = 0;
  core::AdaptiveLimitState adaptive;
  core::BaselineState baseline;
};

struct ReplicaOutcomes {
  std::string replica;
  core::OutcomeTotals totals;
};

// One replica's stored warm state for a policy (its last tick's).
struct ReplicaWarm {
  std::string replica;
  uint64_t digest = 0;
  core::AdaptiveLimitState adaptive;
  core::BaselineState baseline;
  // When the replica stored it (store clock).
  absl::Time updated = absl::InfinitePast();
};

// This replica's grant for one pushed key.
struct StoreGrant {
  // False for a per_key key sent back to its static share.
  bool granted = true;
  core::Units units{};
  // How long the grant may be applied, counted from the start of the tick
  // that asked for it (the caller's clock). A Redis grant lasts the stale
  // period; a lease from a central replica (see LeaseLedger) ends before
  // that replica's own grant does, so it may be shorter.
  absl::Duration valid_for = absl::InfiniteDuration();
};

// What the store answers for one policy.
struct PolicyPull {
  // The policy's store epoch, and whether it differs from the one pushed
  // (the store lost this policy's data).
  std::string epoch;
  bool lost = false;
  // One entry per pushed key, in push order.
  std::vector<StoreGrant> grants;
  // Cumulative outcome totals of every live replica.
  std::vector<ReplicaOutcomes> outcomes;
  // The stored breaker record (store clock), if any replica stored one.
  std::optional<core::BreakerRecord> breaker;
  // Probe leases granted to this replica for the stored generation.
  uint32_t leases_granted = 0;
  // With has_warm: every replica's warm entry stored before this tick (this
  // replica's previous one included) and younger than key_ttl.
  std::vector<ReplicaWarm> warm;
};

// A policy as the store keeps it: the serialized sluice.v1.Policy with every
// default written out and version 0, so equal content means equal bytes.
struct StoredPolicy {
  std::string name;
  std::string blob;
  // The config version that last wrote it (set by the store).
  uint64_t version = 0;
};

// An operator's breaker override for one dependency (FORCE_OPEN or
// FORCE_CLOSED; AUTO is the absence of one).
struct StoredOverride {
  std::string dependency;
  core::BreakerOverride mode = core::BreakerOverride::kAuto;
  std::string note;
};

// The operator config every replica shares: all policies and overrides at
// one config version. The version increases with every change.
struct ConfigSnapshot {
  uint64_t version = 0;
  std::vector<StoredPolicy> policies;
  std::vector<StoredOverride> overrides;
  // Deleted policy names and the config version of their deletion (so
  // seeding skips them).
  std::vector<std::pair<std::string, uint64_t>> deleted;
};

// The result of an admin write.
struct ConfigWrite {
  uint64_t old_version = 0;  // the policy's version before; 0 when new
  uint64_t new_version = 0;  // after; 0 when deleted; == old when unchanged
  uint64_t config_version = 0;
};

struct TickRequest {
  std::string replica_id;
  // Identifies this process's life (random at start) and orders its ticks:
  // a request older than one the store already applied for the same
  // incarnation is ignored, so a delayed or retried tick cannot overwrite a
  // newer entry, and a late leave cannot remove a restarted process's one.
  uint64_t incarnation = 0;
  uint64_t sequence = 0;
  // How many sluiced processes this entry stands for: 1, or for a central
  // replica 1 + the leaves it serves (their share of static shares and of
  // fair splits).
  uint32_t weight = 1;
  // A replica (and its grants, outcomes and leases) not heard from for this
  // long is gone. Also how long grants last.
  absl::Duration stale_after = absl::Seconds(3);
  // Lifetime of the state keys; refreshed on every tick. Also how long a
  // replica's warm entry outlives its last tick.
  absl::Duration key_ttl = absl::Minutes(10);
  // Live replicas this replica knows of (static shares of per_key keys).
  uint32_t live_replicas = 1;
  // The last tick of a replica that stops: it gives its grants, leases and
  // membership back.
  bool leaving = false;
  std::vector<PolicyPush> policies;
  // The config version this replica has applied; the reply carries the
  // config only when the store's differs.
  uint64_t config_seen = 0;
  // The config epoch this replica knows ("" before the first tick).
  std::string config_epoch_seen;
  // Policies to store where the store has none of that name (the policies
  // file seeds the cluster; a policy deleted by an operator stays deleted).
  std::vector<StoredPolicy> seed;
  // The config to rebuild in a store that lost it (applied before the read).
  std::optional<ConfigSnapshot> restore;
  // Reports this replica received for other replicas' permits, to pass on.
  std::vector<core::ForwardedReport> forwarded;
  // The membership (TickReply::members_epoch, members_version) this replica
  // last applied; the reply lists the live replicas only when the store's
  // differs. "" before the first list: the reply always carries one.
  std::string members_epoch_seen;
  uint64_t members_seen = 0;
  // The breaker records this replica has seen (TickReply::breakers_epoch,
  // breakers_version); 0, 0 before the first. See TickReply::breakers.
  uint64_t breakers_epoch_seen = 0;
  uint64_t breakers_seen = 0;
};

// The stored breaker record of a policy the request did not push.
struct PolicyBreaker {
  std::string policy;
  core::BreakerRecord record;  // times on the store's clock
};

struct TickReply {
  // The store's clock when it answered (Redis TIME).
  absl::Time store_now = absl::InfinitePast();
  // The store's config epoch, and whether it differs from the one pushed.
  std::string config_epoch;
  bool config_lost = false;
  // Live replicas, this one included. Empty when members_unchanged.
  std::vector<std::string> replicas;
  // The membership the store answered: the version changes with every join,
  // leave, weight change and expiry of a replica, and the epoch whenever
  // the store lost the membership (so the pair never repeats).
  std::string members_epoch;
  uint64_t members_version = 0;
  // The membership is the one the request saw (members_epoch_seen,
  // members_seen): `replicas` is left out and the caller keeps its list.
  // live_weight is answered all the same.
  bool members_unchanged = false;
  // The sum of the live replicas' weights (TickRequest::weight): how many
  // sluiced processes share static shares. 0 when the store does not know;
  // then replicas.size() counts.
  uint32_t live_weight = 0;
  // One entry per pushed policy, in push order.
  std::vector<PolicyPull> policies;
  // Present when the store's config version differs from config_seen.
  std::optional<ConfigSnapshot> config;
  // Reports for this replica's permits that reached other replicas.
  std::vector<core::ForwardedReport> forwarded_to_me;
  // Forwarded reports of this tick that did not fit their issuer's inbox.
  uint64_t inbox_dropped = 0;
  // When positive, the store asks for this replica's next tick this soon
  // instead of a whole interval later (a central replica's ledger: units
  // this replica is owed are about to be freed, or it should confirm soon
  // that it gave units back). The sync loop keeps it within [kMinTickGap,
  // interval]. Zero: the usual interval.
  absl::Duration tick_again_in = absl::ZeroDuration();
  // Quiet policies. A store that sets breakers_epoch (non-zero; a central
  // replica's ledger) answers for the breakers of policies a request left
  // out: `breakers` holds the record of every policy not pushed whose
  // record changed since the request's (breakers_epoch_seen,
  // breakers_seen), or of every policy that has one when the epoch
  // differs. A replica may then leave out a policy with nothing to push
  // (SyncLoop's quiet policies) and still hear of every trip. A store that
  // leaves the epoch 0 (Redis) answers breakers only in `policies`, and
  // every policy with a breaker must be pushed.
  uint64_t breakers_epoch = 0;
  uint64_t breakers_version = 0;
  std::vector<PolicyBreaker> breakers;
};

// The least time between two ticks of one replica that a nudge or the
// store's tick_again_in asks for, so that neither makes a busy loop.
constexpr absl::Duration kMinTickGap = absl::Milliseconds(50);

// Most forwarded reports an inbox keeps; past it the oldest are dropped
// (their permits then expire at the issuer as TIMEOUT).
constexpr long long kMaxInbox = 100000;

// What a store tells the operator about its connections (metrics, logs,
// GetState). Counts are totals since the store was made.
struct StoreStatus {
  // Where the store writes now: "127.0.0.1:6379", the master Sentinel named,
  // or the masters of a Redis Cluster.
  std::string endpoint;
  // Failed connections and round trips by kind: "connect", "timeout",
  // "auth" (wrong user or password), "readonly" (a replica answered),
  // "protocol" (an answer of an unexpected shape), ...
  std::map<std::string, uint64_t> errors;
  // Topology changes followed: "master_changed" (Sentinel), "moved" and
  // "ask" (Redis Cluster redirections), "slots_refreshed", ...
  std::map<std::string, uint64_t> events;
};

// The shared ledger of the cluster. A Tick is one round trip whatever the
// request rate: it refreshes this replica's membership and, for every policy,
// stores what the replica pushes and returns what all replicas stored. It
// fails as a whole (UNAVAILABLE, DEADLINE_EXCEEDED) when the store is
// unreachable or too slow, and with FAILED_PRECONDITION when it answered
// that it cannot serve at all (a central replica cut off from its own
// store): the sync loop then decides from local state at once instead of
// holding its grants for the stale period. A failed tick may still have been
// applied, which
// is harmless because every pushed value is a level or a cumulative total,
// never an increment. Tick is called from the sync loop's thread only; the
// config writes may come from any thread, concurrently with Tick.
class Store : public base::StatsSource {
 public:
  virtual ~Store() = default;
  virtual absl::StatusOr<TickReply> Tick(const TickRequest& request) = 0;

  // Admin writes to the shared config; every replica applies them on its
  // next tick. `expected_version` 0 skips the compare-and-set; otherwise a
  // mismatch (or an absent policy) is ABORTED. Storing unchanged content
  // keeps the version. UNAVAILABLE when the store cannot be reached.
  virtual absl::StatusOr<ConfigWrite> PutPolicy(const StoredPolicy& policy,
                                                uint64_t expected_version) = 0;
  // NOT_FOUND when absent. The name stays deleted: seeding skips it.
  virtual absl::StatusOr<ConfigWrite> DeletePolicy(
      const std::string& name, uint64_t expected_version) = 0;
  // NOT_FOUND when the policy is absent. kAuto clears the override.
  virtual absl::StatusOr<ConfigWrite> SetOverride(
      const StoredOverride& override) = 0;

  // What the operator sees, e.g. "redis 127.0.0.1:6379".
  virtual std::string Describe() const = 0;

  // Safe from any thread.
  virtual StoreStatus status() const { return {}; }

  // status() as the sluice_store_endpoint_info, sluice_store_errors_total
  // and sluice_store_events_total metrics; a store with more to show adds
  // it.
  void WriteStats(base::StatsWriter& out) const override;
};

}  // namespace sluice::cluster

#endif  // SLUICE_SERVER_CLUSTER_STORE_H_
