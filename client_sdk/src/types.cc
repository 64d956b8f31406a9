#include "sluice/client/types.h"

#include "counters.h"
#include "sluice/client/client.h"

namespace sluice::client {

absl::string_view VerdictName(Verdict verdict) {
  switch (verdict) {
    case Verdict::kAllow:
      return "ALLOW";
    case Verdict::kReject:
      return "REJECT";
    case Verdict::kDegrade:
      return "DEGRADE";
  }
  return "UNKNOWN";
}

absl::string_view ReasonName(Reason reason) {
  switch (reason) {
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
    case Reason::kSluiceUnavailable:
      return "SLUICE_UNAVAILABLE";
    case Reason::kCallFailed:
      return "CALL_FAILED";
  }
  return "UNKNOWN";
}

absl::string_view OutcomeName(Outcome outcome) {
  switch (outcome) {
    case Outcome::kSuccess:
      return "SUCCESS";
    case Outcome::kFailure:
      return "FAILURE";
    case Outcome::kTimeout:
      return "TIMEOUT";
    case Outcome::kCancelled:
      return "CANCELLED";
  }
  return "UNKNOWN";
}

absl::string_view BreakerStateName(BreakerState state) {
  switch (state) {
    case BreakerState::kUnknown:
      return "UNKNOWN";
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
  return "UNKNOWN";
}

Outcome DefaultClassify(const absl::StatusOr<Response>& result) {
  if (result.ok()) {
    return result->status_code >= 500 ? Outcome::kFailure : Outcome::kSuccess;
  }
  switch (result.status().code()) {
    case absl::StatusCode::kDeadlineExceeded:
      return Outcome::kTimeout;
    case absl::StatusCode::kCancelled:
      return Outcome::kCancelled;
    default:
      return Outcome::kFailure;
  }
}

namespace internal {

ClientStats Counters::Snapshot() const {
  ClientStats s;
  s.acquires = acquires.load(std::memory_order_relaxed);
  s.local_decisions = local_decisions.load(std::memory_order_relaxed);
  s.backoff_decisions = backoff_decisions.load(std::memory_order_relaxed);
  s.reports_sent = reports_sent.load(std::memory_order_relaxed);
  s.reports_failed = reports_failed.load(std::memory_order_relaxed);
  s.reports_dropped = reports_dropped.load(std::memory_order_relaxed);
  s.report_batches = report_batches.load(std::memory_order_relaxed);
  s.reports_auto_cancelled =
      reports_auto_cancelled.load(std::memory_order_relaxed);
  s.cache_hits = cache_hits.load(std::memory_order_relaxed);
  s.cache_misses = cache_misses.load(std::memory_order_relaxed);
  return s;
}

}  // namespace internal
}  // namespace sluice::client
