#ifndef SLUICE_SERVER_CORE_TICK_H_
#define SLUICE_SERVER_CORE_TICK_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "server/core/circuit_breaker.h"
#include "server/core/types.h"

// What the engine hands the cluster sync loop once per tick, and what the
// loop hands back. The core only produces and consumes these plain values;
// server/cluster turns them into store calls.

namespace sluice::core {

// Demand of one key (or of the dependency, key "") over the last tick.
struct KeyTick {
  std::string key;
  // Permits asked for, per second of the tick.
  double rate_demand = 0;
  // Most calls in flight at once, plus calls refused for concurrency.
  double concurrency_demand = 0;
  // Permits admitted since the gate set was created.
  uint64_t admitted_total = 0;
};

struct DependencyTick {
  std::string name;
  bool per_key = false;
  bool cluster_rate = false;         // rate_limit.scope == CLUSTER
  bool cluster_concurrency = false;  // concurrency.scope == CLUSTER
  // The cluster-wide limits the shares divide, in the units of the demand.
  double rate_per_second = 0;
  double max_in_flight = 0;
  // Keys active in the last tick (always the one entry "" without per_key).
  std::vector<KeyTick> keys;
  bool has_breaker = false;
  OutcomeTotals outcomes;
  BreakerRecord breaker;
  // Probe leases this replica wants (HALF_OPEN only) and the cluster cap.
  uint32_t leases_wanted = 0;
  uint32_t lease_cap = 0;
  // How long an unreported probe may hold its lease.
  absl::Duration lease_ttl = absl::ZeroDuration();
};

struct KeyShare {
  std::string key;
  // This replica's fraction of the cluster limit, in [0, 1].
  double rate_fraction = 1;
  double concurrency_fraction = 1;
};

struct DependencyUpdate {
  std::string name;
  std::vector<KeyShare> shares;
  // Outcomes other replicas saw since the last tick.
  OutcomeWindow remote_outcomes;
  // The stored breaker record, when there is one.
  std::optional<BreakerRecord> breaker;
  bool mine = false;  // the stored record is this replica's own
  uint32_t leases_granted = 0;
};

// A ReportResult that reached a replica other than the one that issued the
// permit. The receiving replica hands it to its sync loop, which passes it
// through the store to the issuer, which settles the permit as if it had
// been reported there.
struct ForwardedReport {
  std::string issuer;  // replica id from the permit
  std::string dependency;
  std::string key;
  uint64_t permit_id = 0;
  Outcome outcome = Outcome::kSuccess;
  absl::Duration latency = absl::ZeroDuration();
};

}  // namespace sluice::core

#endif  // SLUICE_SERVER_CORE_TICK_H_
