// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_CLUSTER_LEASE_LEDGER_H_
#define SLUICE_SERVER_CLUSTER_LEASE_LEDGER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/cluster/leaf_server.h"
#include "server/cluster/store.h"
#include "server/core/clock.h"
#include "server/core/tick.h"

namespace sluice::cluster {

// What a central replica's ledger tells the operator. Counts are totals
// since the ledger was made; levels are as of the call.
struct LedgerStats {
  // Leaves heard from within the stale period.
  uint32_t leaves = 0;
  // Leaf ticks answered, and refused by reason.
  uint64_t leaf_ticks = 0;
  uint64_t leaf_ticks_refused = 0;  // the sum of the four below
  uint64_t refused_stale = 0;       // ABORTED: (incarnation, sequence) old
  uint64_t refused_unavailable = 0; // UNAVAILABLE: no good upstream tick
  uint64_t refused_too_many = 0;    // RESOURCE_EXHAUSTED: max_leaves
  uint64_t refused_invalid = 0;     // INVALID_ARGUMENT: over a bound
  // The central's own ticks through the ledger, and those upstream failed.
  uint64_t upstream_ticks = 0;
  uint64_t upstream_failures = 0;
  // (policy, key) pools held now, and the units in them by resource
  // (core::kRateUnits, core::kSlotUnits): what upstream granted this
  // central and is still in force, what is leased to leaves and to the
  // central itself now (grants in force, previous ones included).
  uint64_t pools = 0;
  core::Units pool_units{};
  core::Units leaf_units{};
  core::Units self_units{};
  // Breaker transitions from leaves accepted (queued upstream) and refused
  // by the ledger's compare-and-set; queued ones upstream refused.
  uint64_t breaker_accepted = 0;
  uint64_t breaker_refused = 0;
  uint64_t breaker_upstream_refused = 0;
  // Forwarded reports delivered in memory to another leaf (or the central),
  // passed upstream, and dropped (inbox full or issuer unknown).
  uint64_t forwarded_delivered = 0;
  uint64_t forwarded_upstream = 0;
  uint64_t forwarded_dropped = 0;
};

// A central replica's side of the grant tree. It is the Store of the
// central's own SyncLoop: a Tick adds the leaves' demand, usage, grants in
// force, outcomes and probe-lease wishes to the central's push, forwards it
// to the upstream store (Redis), and keeps what Redis granted as a pool per
// (policy, key) that it splits between the central and its leaves. It is
// also the LeafServer: ServeLeaf answers a leaf's tick from that memory,
// never waiting on the upstream store. The grants in force under this
// central (its own and its leaves', lost replies included) never add up to
// more than what upstream holds for it. Admin writes and Describe/status go
// to the upstream store. Safe for concurrent use.
class LeaseLedger final : public Store, public LeafServer {
 public:
  struct Options {
    // The central replica's own id (its SyncLoop's).
    std::string replica_id;
    // The SyncLoop's stale period: how long an upstream grant lasts, and
    // how long a silent leaf stays counted as live.
    absl::Duration stale_after = absl::Seconds(3);
    // The sync loops' tick interval. Units above the parties' whole shares
    // (sub-unit shares taking turns) move at slot boundaries two intervals
    // apart, so that every party hears a tick ahead whether it gains or
    // loses one.
    absl::Duration interval = absl::Seconds(1);
    // A leaf's lease ends at least this long before the central's grant
    // (the round trip and the clocks' drift).
    absl::Duration margin = absl::Milliseconds(200);
    // Most leaves served at once; past it ServeLeaf is RESOURCE_EXHAUSTED.
    size_t max_leaves = 10000;
    // Asks the central's SyncLoop for a tick soon (a leaf's breaker
    // transition, a new leaf's first demand). May be empty. Called without
    // the ledger's lock held.
    std::function<void()> nudge;
  };

  // `upstream` (the RedisStore) and `clock` must outlive the ledger.
  LeaseLedger(Store* upstream, core::Clock* clock, Options options);
  ~LeaseLedger() override;

  LeaseLedger(const LeaseLedger&) = delete;
  LeaseLedger& operator=(const LeaseLedger&) = delete;

  // The central's own SyncLoop only (one thread).
  absl::StatusOr<TickReply> Tick(const TickRequest& request) override;
  // A leaf's tick, from memory. Any thread.
  absl::StatusOr<TickReply> ServeLeaf(const TickRequest& request) override;

  // Forwarded to the upstream store.
  absl::StatusOr<ConfigWrite> PutPolicy(const StoredPolicy& policy,
                                        uint64_t expected_version) override;
  absl::StatusOr<ConfigWrite> DeletePolicy(const std::string& name,
                                           uint64_t expected_version) override;
  absl::StatusOr<ConfigWrite> SetOverride(
      const StoredOverride& override) override;
  std::string Describe() const override;
  StoreStatus status() const override;

  LedgerStats stats() const;
  // The upstream store's status, and stats() as the metrics of a central
  // replica's leaves (sluice_leaves, sluice_leaf_*, sluice_lease_units).
  void WriteStats(base::StatsWriter& out) const override;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice::cluster

#endif  // SLUICE_SERVER_CLUSTER_LEASE_LEDGER_H_
