// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_CORE_TYPES_H_
#define SLUICE_SERVER_CORE_TYPES_H_

#include <cstdint>

#include "absl/strings/string_view.h"

// Enumerations of the decision core. Their numeric values equal those of the
// sluice.v1 protos, so the RPC edge converts with a checked static_cast.

namespace sluice::core {

enum class Verdict : uint8_t { kAllow = 1, kReject = 2, kDegrade = 3 };

enum class Reason : uint8_t {
  kNone = 0,
  kRateLimited = 1,
  kConcurrencyLimited = 2,
  kCircuitOpen = 3,
  kProbeLimit = 4,
  kUnknownDependency = 5,
  kStoreUnavailable = 6,
  kAdaptiveThrottled = 7,
  kShadow = 8,
};
inline constexpr int kReasonCount = 9;

enum class BreakerState : uint8_t {
  kClosed = 1,
  kOpen = 2,
  kHalfOpen = 3,
  kForcedOpen = 4,
  kForcedClosed = 5,
};

enum class Outcome : uint8_t {
  kSuccess = 1,
  kFailure = 2,
  kTimeout = 3,
  kCancelled = 4,
};

// What a permit that is never reported counts as once it expires.
enum class Unreported : uint8_t {
  // A call that never reported is taken to have timed out: the breaker
  // counts it as a failure. For callers that always report (the SDK).
  kTimeout = 1,
  // The caller may never report (Envoy's rate-limit filter has no report):
  // expiry only frees what the permit holds and judges nothing, except for
  // a HALF_OPEN probe, whose expiry is a failed probe. A policy with
  // neither an in-flight cap nor a breaker issues no permit at all.
  kRelease = 2,
};

enum class Scope : uint8_t { kLocal = 1, kCluster = 2 };

enum class RateAlgorithm : uint8_t { kTokenBucket = 1, kSlidingWindow = 2 };

enum class FallbackStrategy : uint8_t {
  kNone = 1,
  kDefault = 2,
  kStatic = 3,
  kCache = 4,
};

enum class StoreFailureMode : uint8_t {
  kFailOpen = 1,
  kLocal = 2,
  kFailClosed = 3,
};

enum class BreakerOverride : uint8_t {
  kAuto = 1,
  kForceOpen = 2,
  kForceClosed = 3,
};

// What the engine answers for a dependency that has no policy.
enum class UnknownDependencyAction : uint8_t { kAllow = 1, kReject = 2 };

// The HTTP status a gateway answers when refused for `reason`: 429 when the
// caller went over a limit, 503 for every other refusal. The one statement of
// the rule: Decision::http_status carries it to the wire, and clients answer
// what the server sent (wire/http_status.h).
constexpr int RefusalHttpStatus(Reason reason) {
  return reason == Reason::kRateLimited ||
                 reason == Reason::kConcurrencyLimited
             ? 429
             : 503;
}

// Upper-case names as used in the protos, YAML and logs ("HALF_OPEN"). The
// RPC edge names proto values with the generated *_Name instead; these stay
// for the readers without the protos: the breaker's trip cause, the metrics
// labels (reason NONE, where the proto says REASON_UNSPECIFIED) and the
// override modes the cluster store writes.
absl::string_view VerdictName(Verdict v);
absl::string_view ReasonName(Reason r);
absl::string_view BreakerStateName(BreakerState s);
absl::string_view OutcomeName(Outcome o);
absl::string_view BreakerOverrideName(BreakerOverride o);

}  // namespace sluice::core

#endif  // SLUICE_SERVER_CORE_TYPES_H_
