// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_CLUSTER_WARM_VIEW_H_
#define SLUICE_SERVER_CLUSTER_WARM_VIEW_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "server/cluster/store.h"
#include "server/core/adaptive_limit.h"
#include "server/core/latency_baseline.h"

namespace sluice::cluster {

// What a replica starts from when its own adaptive limit or baseline has
// learned nothing yet (see core::DependencyUpdate::cluster_adaptive).
struct WarmView {
  // The mean of the steady limits and the lowest baseline latency.
  std::optional<core::AdaptiveLimitState> adaptive;
  // The baseline with the most learned windows.
  std::optional<core::BaselineState> baseline;
};

// Combines the stored warm entries of a policy for replica `me`: only
// entries learned under `digest` count, and only what they learned (a
// steady limit with a baseline latency; a baseline with windows). Each part
// comes from the other live replicas (`live`, this tick's membership), or,
// when none of them has it, from the entries left by replicas that are no
// longer live (a rollout replaced them all), `me`'s previous life included;
// the store keeps those for key_ttl. Pure; safe for concurrent use.
WarmView CombineWarm(const std::vector<ReplicaWarm>& entries, uint64_t digest,
                     const std::string& me,
                     const absl::flat_hash_set<std::string>& live);

}  // namespace sluice::cluster

#endif  // SLUICE_SERVER_CLUSTER_WARM_VIEW_H_
