// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_CLIENT_TYPES_H_
#define SLUICE_CLIENT_TYPES_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace sluice::client {

// The enums below mirror the lists of wire/enums/enum_lists.h, enumerator
// for enumerator (their numbers may differ): the SDK's conversions and names
// are generated from those lists and do not compile while a row has no
// enumerator here.

// What the gateway should do with a call (sluice.v1.Verdict).
enum class Verdict {
  kAllow,    // Make the call, then report it.
  kReject,   // Do not make the call; answer with http_status (429 or 503).
  kDegrade,  // Do not make the call; serve the fallback.
};

// Why a verdict is not a plain ALLOW (sluice.v1.Reason), plus two reasons
// only the SDK gives.
enum class Reason {
  kNone,
  kRateLimited,
  kConcurrencyLimited,
  kCircuitOpen,
  kProbeLimit,
  kUnknownDependency,
  kStoreUnavailable,
  kAdaptiveThrottled,
  kShadow,
  // SDK only: Sluice was unreachable or too slow (or the client is backing
  // off after such failures), so the SDK decided by ClientOptions::on_failure.
  kSluiceUnavailable,
  // SDK only, in CallResult: the allowed call failed or timed out and the
  // fallback was served instead.
  kCallFailed,
};

// How a downstream call went (sluice.v1.Outcome).
enum class Outcome {
  kSuccess,
  kFailure,    // Counts against the breaker.
  kTimeout,    // Counts against the breaker.
  kCancelled,  // The caller gave up; does not count.
};

// Breaker state as Sluice last saw it (sluice.v1.BreakerState).
enum class BreakerState {
  kUnknown,  // Not told (e.g. the SDK decided locally).
  kClosed,
  kOpen,
  kHalfOpen,
  kForcedOpen,
  kForcedClosed,
};

// What to serve instead of the real answer (sluice.v1.Fallback).
struct Fallback {
  enum class Strategy {
    kNone,     // No fallback.
    kDefault,  // The gateway's own default answer (CallOptions::default_fallback).
    kStatic,   // `payload` with `content_type`.
    kCache,    // The last good response for (dependency, key), younger than
               // cache_ttl; `payload` on a miss.
  };
  Strategy strategy = Strategy::kNone;
  std::string payload;
  std::string content_type;
  // Reasons this fallback applies to; empty means all.
  std::vector<Reason> on;
  // How old a cached response may be (kCache).
  absl::Duration cache_ttl = absl::ZeroDuration();
  // Also serve the fallback when an allowed call fails.
  bool serve_on_failure = false;
};

// Stable upper-case names, as in the proto ("RATE_LIMITED", "CLOSED", ...);
// the SDK-only reasons are "SLUICE_UNAVAILABLE" and "CALL_FAILED".
absl::string_view VerdictName(Verdict verdict);
absl::string_view ReasonName(Reason reason);
absl::string_view OutcomeName(Outcome outcome);
absl::string_view BreakerStateName(BreakerState state);

}  // namespace sluice::client

#endif  // SLUICE_CLIENT_TYPES_H_
