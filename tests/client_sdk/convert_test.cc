// SPDX-License-Identifier: Apache-2.0
// The SDK's names and enum conversions, which read the generated proto ones.

#include "convert.h"

#include "gtest/gtest.h"
#include "sluice/client/types.h"

namespace sluice::client {
namespace {

TEST(NamesTest, AreTheProtoNamesPlusTheSdkOnlyOnes) {
  EXPECT_EQ(VerdictName(Verdict::kAllow), "ALLOW");
  EXPECT_EQ(VerdictName(Verdict::kDegrade), "DEGRADE");
  EXPECT_EQ(ReasonName(Reason::kNone), "NONE");
  EXPECT_EQ(ReasonName(Reason::kRateLimited), "RATE_LIMITED");
  EXPECT_EQ(ReasonName(Reason::kShadow), "SHADOW");
  EXPECT_EQ(ReasonName(Reason::kSluiceUnavailable), "SLUICE_UNAVAILABLE");
  EXPECT_EQ(ReasonName(Reason::kCallFailed), "CALL_FAILED");
  EXPECT_EQ(OutcomeName(Outcome::kCancelled), "CANCELLED");
  EXPECT_EQ(BreakerStateName(BreakerState::kUnknown), "UNKNOWN");
  EXPECT_EQ(BreakerStateName(BreakerState::kHalfOpen), "HALF_OPEN");
  EXPECT_EQ(VerdictName(static_cast<Verdict>(9)), "UNKNOWN");
}

TEST(ConvertTest, RoundTripsEveryProtoValue) {
  for (int r = 0; r <= v1::Reason_MAX; ++r) {
    const auto reason = static_cast<v1::Reason>(r);
    EXPECT_EQ(internal::ReasonToProto(internal::ReasonFromProto(reason)),
              reason);
  }
  EXPECT_EQ(internal::ReasonToProto(Reason::kSluiceUnavailable),
            v1::REASON_UNSPECIFIED);
  for (v1::Verdict v : {v1::ALLOW, v1::REJECT, v1::DEGRADE}) {
    EXPECT_EQ(internal::VerdictToProto(internal::VerdictFromProto(v)), v);
  }
  for (int s = 0; s <= v1::BreakerState_MAX; ++s) {
    const auto state = static_cast<v1::BreakerState>(s);
    EXPECT_EQ(
        internal::BreakerStateToProto(internal::BreakerStateFromProto(state)),
        state);
  }
  EXPECT_EQ(internal::OutcomeToProto(Outcome::kTimeout), v1::TIMEOUT);
}

TEST(ConvertTest, AMalformedDurationReadsAsZero) {
  google::protobuf::Duration d;
  d.set_seconds(2);
  d.set_nanos(500000000);
  EXPECT_EQ(internal::DurationFromProto(d), absl::Milliseconds(2500));
  d.set_nanos(-1);
  EXPECT_EQ(internal::DurationFromProto(d), absl::ZeroDuration());
}

}  // namespace
}  // namespace sluice::client
