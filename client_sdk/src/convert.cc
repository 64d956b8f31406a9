// SPDX-License-Identifier: Apache-2.0
#include "convert.h"

#include "wire/enums/enum_lists.h"
#include "wire/time.h"

namespace sluice::client::internal {

// Every switch is generated from wire/enums/enum_lists.h, so a row the
// public enums lack does not compile. The way in maps a value a newer server
// may add to the enum's neutral value.

Verdict VerdictFromProto(v1::Verdict verdict) {
  using E = Verdict;
  switch (verdict) {
    SLUICE_VERDICT_LIST(SLUICE_ENUM_FROM_PROTO_CASE)
    default:
      // Anything a newer server may add: the caller can always make an
      // allowed call.
      return Verdict::kAllow;
  }
}

Reason ReasonFromProto(v1::Reason reason) {
  using E = Reason;
  switch (reason) {
    SLUICE_REASON_LIST(SLUICE_ENUM_FROM_PROTO_CASE)
    default:
      return Reason::kNone;
  }
}

BreakerState BreakerStateFromProto(v1::BreakerState state) {
  using E = BreakerState;
  switch (state) {
    SLUICE_BREAKER_STATE_LIST(SLUICE_ENUM_FROM_PROTO_CASE)
    default:
      return BreakerState::kUnknown;
  }
}

namespace {

Fallback::Strategy StrategyFromProto(v1::Fallback::Strategy strategy) {
  using E = Fallback::Strategy;
  switch (strategy) {
    SLUICE_FALLBACK_STRATEGY_LIST(SLUICE_ENUM_FROM_PROTO_CASE)
    default:
      return Fallback::Strategy::kNone;
  }
}

}  // namespace

Fallback FallbackFromProto(const v1::Fallback& fallback) {
  Fallback out;
  out.strategy = StrategyFromProto(fallback.strategy());
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
  using E = Verdict;
  switch (verdict) { SLUICE_VERDICT_LIST(SLUICE_ENUM_TO_PROTO_CASE) }
  return v1::VERDICT_UNSPECIFIED;
}

v1::Reason ReasonToProto(Reason reason) {
  using E = Reason;
  switch (reason) {
    SLUICE_REASON_LIST(SLUICE_ENUM_TO_PROTO_CASE)
    default:
      // The SDK-only reasons.
      return v1::REASON_UNSPECIFIED;
  }
}

v1::Outcome OutcomeToProto(Outcome outcome) {
  using E = Outcome;
  switch (outcome) { SLUICE_OUTCOME_LIST(SLUICE_ENUM_TO_PROTO_CASE) }
  return v1::OUTCOME_UNSPECIFIED;
}

v1::BreakerState BreakerStateToProto(BreakerState state) {
  using E = BreakerState;
  switch (state) {
    SLUICE_BREAKER_STATE_LIST(SLUICE_ENUM_TO_PROTO_CASE)
    case BreakerState::kUnknown:
      break;
  }
  return v1::BREAKER_STATE_UNSPECIFIED;
}

absl::Duration DurationFromProto(const google::protobuf::Duration& d) {
  return wire::DurationFromProto(d, "duration").value_or(absl::ZeroDuration());
}

}  // namespace sluice::client::internal
