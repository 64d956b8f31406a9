#include "convert.h"

#include <cstdint>

namespace sluice::client::internal {

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

v1::Outcome OutcomeToProto(Outcome outcome) {
  switch (outcome) {
    case Outcome::kSuccess:
      return v1::SUCCESS;
    case Outcome::kFailure:
      return v1::FAILURE;
    case Outcome::kTimeout:
      return v1::TIMEOUT;
    case Outcome::kCancelled:
      return v1::CANCELLED;
  }
  return v1::CANCELLED;
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

absl::Duration DurationFromProto(const google::protobuf::Duration& d) {
  return absl::Seconds(d.seconds()) + absl::Nanoseconds(d.nanos());
}

void DurationToProto(absl::Duration d, google::protobuf::Duration* out) {
  if (d < absl::ZeroDuration()) d = absl::ZeroDuration();
  absl::Duration rem;
  const int64_t seconds = absl::IDivDuration(d, absl::Seconds(1), &rem);
  out->set_seconds(seconds);
  out->set_nanos(static_cast<int32_t>(absl::ToInt64Nanoseconds(rem)));
}

}  // namespace sluice::client::internal
