// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_CORE_EVENTS_H_
#define SLUICE_SERVER_CORE_EVENTS_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "server/core/breaker_state.h"

namespace sluice::core {

struct BreakerTransition {
  std::string dependency;
  std::string key;  // "" unless the policy is per_key
  BreakerState from = BreakerState::kClosed;
  BreakerState to = BreakerState::kClosed;
  // Why, for operators: "5 consecutive failures",
  // "failure rate 62% >= 50% over 10s, 40 calls", "probe failed", ...
  std::string cause;
  absl::Time at;
  // Increases with every trip and every close of this breaker.
  uint64_t generation = 0;
  // When an OPEN breaker lets probes through; InfinitePast otherwise.
  absl::Time open_until = absl::InfinitePast();
};

// A move of an adaptive gate: a new adaptive in-flight limit, or SRE
// throttling that starts or stops refusing.
struct AdaptiveChange {
  enum class Kind : uint8_t {
    kLimit = 1,            // adaptive_concurrency moved its limit
    kThrottleStarted = 2,  // adaptive_throttle began refusing calls
    kThrottleStopped = 3,  // ... and stopped
  };
  std::string dependency;
  std::string key;  // "" unless the policy is per_key
  Kind kind = Kind::kLimit;
  // kLimit: the limit before and after. Throttle: the refusal probability.
  double from = 0;
  double to = 0;
  // Why, for operators: "mean latency 48ms > 1.5 x baseline 20ms at 31.2
  // in flight", "limit reached, latency 21ms within 1.5 x baseline 20ms".
  std::string cause;
  absl::Time at;
};

// Receives state changes from the engine. Called synchronously while the
// dependency's lock is held, so an implementation must be quick and must not
// call back into the Engine. Must be safe for concurrent use.
class EventSink {
 public:
  virtual ~EventSink() = default;
  virtual void OnBreakerTransition(const BreakerTransition& transition) = 0;
  virtual void OnAdaptiveChange(const AdaptiveChange& change) {}
  // Cluster mode: a cluster-scope gate of `dependency` (`key`: "" unless
  // the policy is per_key) refused a call, and the key pushed no demand
  // with the last tick (its first demand, or demand after a quiet tick).
  // The store learns of it only from the next tick, so a sink may ask for
  // that tick now. Called at most once per tick per dependency.
  virtual void OnClusterDemand(const std::string& dependency,
                               const std::string& key) {}
};

absl::string_view AdaptiveChangeKindName(AdaptiveChange::Kind kind);

}  // namespace sluice::core

#endif  // SLUICE_SERVER_CORE_EVENTS_H_
