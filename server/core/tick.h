// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_CORE_TICK_H_
#define SLUICE_SERVER_CORE_TICK_H_

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "server/core/adaptive_limit.h"
#include "server/core/circuit_breaker.h"
#include "server/core/latency_baseline.h"
#include "server/core/outcome.h"
#include "server/core/permit_seal.h"

// What the engine hands the cluster sync loop once per tick, and what the
// loop hands back. The core only produces and consumes these plain values;
// server/cluster turns them into store calls.

namespace sluice::core {

// The cluster-scope resources one key's gates draw on, each counted in whole
// units:
//   kRate   the token bucket's capacity in tokens (the refill rate follows
//           the capacity: rate x units / burst), or the sliding window's
//           count per window;
//   kSlots  concurrency slots.
enum ClusterResource : int { kRateUnits = 0, kSlotUnits = 1 };
constexpr int kClusterResources = 2;
using Units = std::array<int64_t, kClusterResources>;

// One key (or the dependency, key "") as the sync loop pushes it.
struct KeyTick {
  std::string key;
  // The cluster-wide limit of each resource; 0 when that gate is not
  // cluster-scope.
  Units limit{};
  // Units wanted over the last tick: permits asked, converted to the
  // resource (bucket tokens or window counts), and peak calls in flight plus
  // calls refused for concurrency.
  std::array<double, kClusterResources> demand{};
  // Units in use now that outlive a smaller grant: the sliding window's
  // count, the calls in flight.
  Units usage{};
  // How long that usage may still be in use if this replica stopped now:
  // a window count until the window has slid past it (`per`), a call in
  // flight until its permit expires. The store holds it that long after
  // the replica leaves, restarts or dies.
  std::array<absl::Duration, kClusterResources> usage_left{};
  // The grant this replica applies now, and how much longer it may (0 when
  // it has none). The store keeps counting it against the others until this
  // replica reports a newer one, so a lost reply never frees capacity that
  // is still in use.
  Units applied{};
  absl::Duration applied_left = absl::ZeroDuration();
  // Permits admitted since the gate set was created (the books).
  uint64_t admitted_total = 0;
};

struct DependencyTick {
  std::string name;
  bool per_key = false;
  // Keys to share: the one entry "" without per_key; with per_key, the keys
  // that hold a grant or were refused by a cluster-scope gate since the last
  // tick (the hot keys). Empty without a cluster-scope gate.
  std::vector<KeyTick> keys;
  bool has_breaker = false;
  OutcomeTotals outcomes;
  BreakerRecord breaker;
  // Probe leases this replica wants (HALF_OPEN only) and the cluster cap.
  uint32_t leases_wanted = 0;
  uint32_t lease_cap = 0;
  // How long an unreported probe may hold its lease.
  absl::Duration lease_ttl = absl::ZeroDuration();
  // Warm state of the dependency's adaptive limit and latency baseline
  // (not of per_key keys, which stay with each replica), for replicas that
  // start without one. `policy_digest` tells which policy it belongs to.
  uint64_t policy_digest = 0;
  // The policy has an adaptive limit or a latency baseline: the tick asks
  // for the others' warm state, whether or not it has any of its own yet
  // (the optionals below are only set once something was learned).
  bool has_warm = false;
  std::optional<AdaptiveLimitState> adaptive;
  std::optional<BaselineState> baseline;
};

// This replica's grant for one key, from the store.
struct KeyGrant {
  std::string key;
  // False for a per_key key the store sent back to its static share
  // (floor(limit / (replicas + 1)) of each resource, no store entry).
  bool granted = true;
  Units units{};
  // The cluster limits the store split to make this grant (the pushed
  // KeyTick::limit), and whether it was split as a per_key key. A replica
  // whose policy changed meanwhile scales the units down to its new limit
  // and drops a grant split under the other per_key setting.
  Units limit{};
  bool per_key = false;
  // Until when the grant holds, on this replica's clock. Past it the store
  // may have handed the capacity to another replica.
  absl::Time valid_until = absl::InfinitePast();
};

struct DependencyUpdate {
  std::string name;
  std::vector<KeyGrant> grants;
  // Outcomes other replicas saw since the last tick.
  OutcomeWindow remote_outcomes;
  // The stored breaker record (times on this replica's clock), when there
  // is one.
  std::optional<BreakerRecord> breaker;
  // The stored record is the one this replica pushed in this tick.
  bool mine = false;
  // The push carried a local transition that the store refused (the stored
  // record had moved on, or the replica was told to adopt first).
  bool rejected = false;
  uint32_t leases_granted = 0;
  // The other live replicas' warm state under the same policy digest: their
  // steady limits' mean and lowest baseline latency, and the most learned
  // baseline. A replica whose adaptive limit has not judged a window yet
  // starts from it (see GateSet::ApplyWarm).
  std::optional<AdaptiveLimitState> cluster_adaptive;
  std::optional<BaselineState> cluster_baseline;
};

// A ReportResult that reached a replica other than the one that issued the
// permit. The receiving replica hands it to its sync loop, which passes it
// through the store to the issuer, which settles the permit as if it had
// been reported there.
struct ForwardedReport {
  std::string issuer;  // replica id from the permit
  std::string dependency;
  std::string key;
  PermitId permit_id;  // as the report carried it; the issuer checks it
  Outcome outcome = Outcome::kSuccess;
  absl::Duration latency = absl::ZeroDuration();
};

}  // namespace sluice::core

#endif  // SLUICE_SERVER_CORE_TICK_H_
