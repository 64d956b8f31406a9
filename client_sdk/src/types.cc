// SPDX-License-Identifier: Apache-2.0
#include "sluice/client/types.h"

#include <string>

#include "convert.h"
#include "counters.h"
#include "sluice/client/client.h"

namespace sluice::client {

namespace {

// The generated *_Name gives "" for a value outside the enum.
absl::string_view OrUnknown(const std::string& name) {
  return name.empty() ? absl::string_view("UNKNOWN") : name;
}

}  // namespace

// The proto's names, except for the values it has none for.
absl::string_view VerdictName(Verdict verdict) {
  return OrUnknown(v1::Verdict_Name(internal::VerdictToProto(verdict)));
}

absl::string_view ReasonName(Reason reason) {
  switch (reason) {
    case Reason::kNone:
      return "NONE";
    case Reason::kSluiceUnavailable:
      return "SLUICE_UNAVAILABLE";
    case Reason::kCallFailed:
      return "CALL_FAILED";
    default:
      return OrUnknown(v1::Reason_Name(internal::ReasonToProto(reason)));
  }
}

absl::string_view OutcomeName(Outcome outcome) {
  return OrUnknown(v1::Outcome_Name(internal::OutcomeToProto(outcome)));
}

absl::string_view BreakerStateName(BreakerState state) {
  if (state == BreakerState::kUnknown) return "UNKNOWN";
  return OrUnknown(
      v1::BreakerState_Name(internal::BreakerStateToProto(state)));
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
