// SPDX-License-Identifier: Apache-2.0
#include "convert.h"

#include "wire/time.h"

namespace sluice::client::internal {
namespace {

// The public enums list the proto values in order, so the way out is a
// cast: Reason and BreakerState from 0 (their unspecified value), Verdict
// and Outcome from 1. The way in keeps its switches, which map values a
// newer server may add.
static_assert(static_cast<int>(Reason::kNone) == v1::REASON_UNSPECIFIED);
static_assert(static_cast<int>(Reason::kRateLimited) == v1::RATE_LIMITED);
static_assert(static_cast<int>(Reason::kConcurrencyLimited) ==
              v1::CONCURRENCY_LIMITED);
static_assert(static_cast<int>(Reason::kCircuitOpen) == v1::CIRCUIT_OPEN);
static_assert(static_cast<int>(Reason::kProbeLimit) == v1::PROBE_LIMIT);
static_assert(static_cast<int>(Reason::kUnknownDependency) ==
              v1::UNKNOWN_DEPENDENCY);
static_assert(static_cast<int>(Reason::kStoreUnavailable) ==
              v1::STORE_UNAVAILABLE);
static_assert(static_cast<int>(Reason::kAdaptiveThrottled) ==
              v1::ADAPTIVE_THROTTLED);
static_assert(static_cast<int>(Reason::kShadow) == v1::SHADOW);
static_assert(static_cast<int>(Reason::kShadow) == v1::Reason_MAX);
static_assert(static_cast<int>(BreakerState::kUnknown) ==
              v1::BREAKER_STATE_UNSPECIFIED);
static_assert(static_cast<int>(BreakerState::kClosed) == v1::CLOSED);
static_assert(static_cast<int>(BreakerState::kOpen) == v1::OPEN);
static_assert(static_cast<int>(BreakerState::kHalfOpen) == v1::HALF_OPEN);
static_assert(static_cast<int>(BreakerState::kForcedOpen) == v1::FORCED_OPEN);
static_assert(static_cast<int>(BreakerState::kForcedClosed) ==
              v1::FORCED_CLOSED);
static_assert(static_cast<int>(Verdict::kAllow) + 1 == v1::ALLOW);
static_assert(static_cast<int>(Verdict::kReject) + 1 == v1::REJECT);
static_assert(static_cast<int>(Verdict::kDegrade) + 1 == v1::DEGRADE);
static_assert(static_cast<int>(Outcome::kSuccess) + 1 == v1::SUCCESS);
static_assert(static_cast<int>(Outcome::kFailure) + 1 == v1::FAILURE);
static_assert(static_cast<int>(Outcome::kTimeout) + 1 == v1::TIMEOUT);
static_assert(static_cast<int>(Outcome::kCancelled) + 1 == v1::CANCELLED);

}  // namespace

Verdict VerdictFromProto(v1::Verdict verdict) {
  switch (verdict) {
    case v1::REJECT:
      return Verdict::kReject;
    case v1::DEGRADE:
      return Verdict::kDegrade;
    default:
      // ALLOW, and anything a newer server may add: the caller can always
      // make an allowed call.
      return Verdict::kAllow;
  }
}

Reason ReasonFromProto(v1::Reason reason) {
  switch (reason) {
    case v1::RATE_LIMITED:
      return Reason::kRateLimited;
    case v1::CONCURRENCY_LIMITED:
      return Reason::kConcurrencyLimited;
    case v1::CIRCUIT_OPEN:
      return Reason::kCircuitOpen;
    case v1::PROBE_LIMIT:
      return Reason::kProbeLimit;
    case v1::UNKNOWN_DEPENDENCY:
      return Reason::kUnknownDependency;
    case v1::STORE_UNAVAILABLE:
      return Reason::kStoreUnavailable;
    case v1::ADAPTIVE_THROTTLED:
      return Reason::kAdaptiveThrottled;
    case v1::SHADOW:
      return Reason::kShadow;
    default:
      return Reason::kNone;
  }
}

BreakerState BreakerStateFromProto(v1::BreakerState state) {
  switch (state) {
    case v1::CLOSED:
      return BreakerState::kClosed;
    case v1::OPEN:
      return BreakerState::kOpen;
    case v1::HALF_OPEN:
      return BreakerState::kHalfOpen;
    case v1::FORCED_OPEN:
      return BreakerState::kForcedOpen;
    case v1::FORCED_CLOSED:
      return BreakerState::kForcedClosed;
    default:
      return BreakerState::kUnknown;
  }
}

Fallback FallbackFromProto(const v1::Fallback& fallback) {
  Fallback out;
  switch (fallback.strategy()) {
    case v1::Fallback::DEFAULT:
      out.strategy = Fallback::Strategy::kDefault;
      break;
    case v1::Fallback::STATIC:
      out.strategy = Fallback::Strategy::kStatic;
      break;
    case v1::Fallback::CACHE:
      out.strategy = Fallback::Strategy::kCache;
      break;
    default:
      out.strategy = Fallback::Strategy::kNone;
      break;
  }
  out.payload = fallback.payload();
  out.content_type = fallback.content_type();
  for (int r : fallback.on()) {
    out.on.push_back(ReasonFromProto(static_cast<v1::Reason>(r)));
  }
  out.cache_ttl = DurationFromProto(fallback.cache_ttl());
  out.serve_on_failure = fallback.serve_on_failure();
  return out;
}

v1::Verdict VerdictToProto(Verdict verdict) {
  return static_cast<v1::Verdict>(static_cast<int>(verdict) + 1);
}

v1::Reason ReasonToProto(Reason reason) {
  return static_cast<int>(reason) <= v1::Reason_MAX
             ? static_cast<v1::Reason>(reason)
             : v1::REASON_UNSPECIFIED;
}

v1::Outcome OutcomeToProto(Outcome outcome) {
  return static_cast<v1::Outcome>(static_cast<int>(outcome) + 1);
}

v1::BreakerState BreakerStateToProto(BreakerState state) {
  return static_cast<v1::BreakerState>(state);
}

absl::Duration DurationFromProto(const google::protobuf::Duration& d) {
  return wire::DurationFromProto(d, "duration").value_or(absl::ZeroDuration());
}

}  // namespace sluice::client::internal
