// SPDX-License-Identifier: Apache-2.0
#include "server/core/types.h"

#include "server/core/events.h"

namespace sluice::core {

absl::string_view VerdictName(Verdict v) {
  switch (v) {
    case Verdict::kAllow:
      return "ALLOW";
    case Verdict::kReject:
      return "REJECT";
    case Verdict::kDegrade:
      return "DEGRADE";
  }
  return "VERDICT_UNSPECIFIED";
}

absl::string_view ReasonName(Reason r) {
  switch (r) {
    case Reason::kNone:
      return "NONE";
    case Reason::kRateLimited:
      return "RATE_LIMITED";
    case Reason::kConcurrencyLimited:
      return "CONCURRENCY_LIMITED";
    case Reason::kCircuitOpen:
      return "CIRCUIT_OPEN";
    case Reason::kProbeLimit:
      return "PROBE_LIMIT";
    case Reason::kUnknownDependency:
      return "UNKNOWN_DEPENDENCY";
    case Reason::kStoreUnavailable:
      return "STORE_UNAVAILABLE";
    case Reason::kAdaptiveThrottled:
      return "ADAPTIVE_THROTTLED";
    case Reason::kShadow:
      return "SHADOW";
  }
  return "REASON_UNSPECIFIED";
}

absl::string_view BreakerStateName(BreakerState s) {
  switch (s) {
    case BreakerState::kClosed:
      return "CLOSED";
    case BreakerState::kOpen:
      return "OPEN";
    case BreakerState::kHalfOpen:
      return "HALF_OPEN";
    case BreakerState::kForcedOpen:
      return "FORCED_OPEN";
    case BreakerState::kForcedClosed:
      return "FORCED_CLOSED";
  }
  return "BREAKER_STATE_UNSPECIFIED";
}

absl::string_view OutcomeName(Outcome o) {
  switch (o) {
    case Outcome::kSuccess:
      return "SUCCESS";
    case Outcome::kFailure:
      return "FAILURE";
    case Outcome::kTimeout:
      return "TIMEOUT";
    case Outcome::kCancelled:
      return "CANCELLED";
  }
  return "OUTCOME_UNSPECIFIED";
}

absl::string_view BreakerOverrideName(BreakerOverride o) {
  switch (o) {
    case BreakerOverride::kAuto:
      return "AUTO";
    case BreakerOverride::kForceOpen:
      return "FORCE_OPEN";
    case BreakerOverride::kForceClosed:
      return "FORCE_CLOSED";
  }
  return "BREAKER_OVERRIDE_UNSPECIFIED";
}

absl::string_view AdaptiveChangeKindName(AdaptiveChange::Kind kind) {
  switch (kind) {
    case AdaptiveChange::Kind::kLimit:
      return "LIMIT";
    case AdaptiveChange::Kind::kThrottleStarted:
      return "THROTTLE_STARTED";
    case AdaptiveChange::Kind::kThrottleStopped:
      return "THROTTLE_STOPPED";
  }
  return "UNKNOWN";
}

}  // namespace sluice::core
