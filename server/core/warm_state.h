// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_CORE_WARM_STATE_H_
#define SLUICE_SERVER_CORE_WARM_STATE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "server/core/adaptive_limit.h"
#include "server/core/circuit_breaker.h"
#include "server/core/latency_baseline.h"

// What the engine hands out to survive a restart, and takes back at start:
// adaptive limits, learned baselines and OPEN breakers. The core only
// produces and consumes these plain values; server/app keeps them in the
// state file and server/cluster in the store.

namespace sluice::core {

struct KeyWarmState {
  std::string key;  // "" unless the policy is per_key
  std::optional<AdaptiveLimitState> limit;
  std::optional<BaselineState> baseline;
  // Only for a breaker that is OPEN (times on the engine's clock, which is
  // the wall clock in a server).
  std::optional<BreakerRecord> breaker;
};

struct DependencyWarmState {
  std::string name;
  // PolicyConfig::digest of the policy the state was learned under.
  uint64_t digest = 0;
  std::vector<KeyWarmState> keys;
};

// What Engine::ImportWarmState did with a saved state.
struct WarmImport {
  size_t dependencies = 0;  // taken back
  size_t keys = 0;
  // Skipped: no such policy now, or the policy changed since (digest).
  std::vector<std::string> unknown;
  std::vector<std::string> changed;
  // Keys with values no policy could have learned (a NaN, a negative
  // variance, a steady limit of 0): those values were not taken.
  size_t invalid_keys = 0;
};

}  // namespace sluice::core

#endif  // SLUICE_SERVER_CORE_WARM_STATE_H_
