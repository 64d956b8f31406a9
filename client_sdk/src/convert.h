// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_CLIENT_SRC_CONVERT_H_
#define SLUICE_CLIENT_SRC_CONVERT_H_

#include "absl/time/time.h"
#include "google/protobuf/duration.pb.h"
#include "sluice/client/types.h"
#include "sluice/v1/decision.pb.h"

namespace sluice::client::internal {

// The only place the SDK's public types meet the generated ones.
Verdict VerdictFromProto(v1::Verdict verdict);
Reason ReasonFromProto(v1::Reason reason);
BreakerState BreakerStateFromProto(v1::BreakerState state);
Fallback FallbackFromProto(const v1::Fallback& fallback);

v1::Verdict VerdictToProto(Verdict verdict);
// REASON_UNSPECIFIED for kNone and the SDK-only reasons.
v1::Reason ReasonToProto(Reason reason);
v1::Outcome OutcomeToProto(Outcome outcome);
// BREAKER_STATE_UNSPECIFIED for kUnknown.
v1::BreakerState BreakerStateToProto(BreakerState state);

// A duration from the server; a malformed one (which a server of ours never
// sends) reads as zero, i.e. "not given".
absl::Duration DurationFromProto(const google::protobuf::Duration& d);

}  // namespace sluice::client::internal

#endif  // SLUICE_CLIENT_SRC_CONVERT_H_
