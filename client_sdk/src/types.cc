// SPDX-License-Identifier: Apache-2.0
#include "sluice/client/types.h"

#include "counters.h"
#include "sluice/client/client.h"
#include "wire/enums/enum_lists.h"

namespace sluice::client {

// The names of wire/enums/enum_lists.h, which the server writes too, and
// the SDK's own.
absl::string_view VerdictName(Verdict verdict) {
  using E = Verdict;
  switch (verdict) { SLUICE_VERDICT_LIST(SLUICE_ENUM_NAME_CASE) }
  return "UNKNOWN";
}

absl::string_view ReasonName(Reason reason) {
  using E = Reason;
  switch (reason) {
    SLUICE_REASON_LIST(SLUICE_ENUM_NAME_CASE)
    case Reason::kSluiceUnavailable:
      return "SLUICE_UNAVAILABLE";
    case Reason::kCallFailed:
      return "CALL_FAILED";
  }
  return "REASON_UNSPECIFIED";
}

absl::string_view OutcomeName(Outcome outcome) {
  using E = Outcome;
  switch (outcome) { SLUICE_OUTCOME_LIST(SLUICE_ENUM_NAME_CASE) }
  return "UNKNOWN";
}

absl::string_view BreakerStateName(BreakerState state) {
  using E = BreakerState;
  switch (state) {
    SLUICE_BREAKER_STATE_LIST(SLUICE_ENUM_NAME_CASE)
    case BreakerState::kUnknown:
      break;
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
  s.lease_refusals = lease_refusals.load(std::memory_order_relaxed);
  s.lease_decisions_while_unreachable =
      lease_decisions_while_unreachable.load(std::memory_order_relaxed);
  s.lease_renewals = lease_renewals.load(std::memory_order_relaxed);
  s.lease_renewal_failures =
      lease_renewal_failures.load(std::memory_order_relaxed);
  s.lease_expiries = lease_expiries.load(std::memory_order_relaxed);
  s.leases_ended = leases_ended.load(std::memory_order_relaxed);
  return s;
}

}  // namespace internal
}  // namespace sluice::client
