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
v1::Outcome OutcomeToProto(Outcome outcome);
Fallback FallbackFromProto(const v1::Fallback& fallback);
absl::Duration DurationFromProto(const google::protobuf::Duration& d);
void DurationToProto(absl::Duration d, google::protobuf::Duration* out);

}  // namespace sluice::client::internal

#endif  // SLUICE_CLIENT_SRC_CONVERT_H_
