// SPDX-License-Identifier: Apache-2.0
// Unit tests of the DecisionService edge: request validation and the
// core <-> proto conversions. (server/rpc has no tests directory of its own
// yet; these live beside the server's integration test.)

#include "server/rpc/decision_convert.h"

#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sluice/v1/admin.pb.h"
#include "wire/status.h"

namespace sluice::rpc {
namespace {

using ::testing::HasSubstr;

constexpr char kId[] = "0123456789abcdeffedcba9876543210";
const core::PermitId kIdValue{0x0123456789abcdef, 0xfedcba9876543210};

TEST(PermitIdTest, RoundTripsAndRejectsMalformed) {
  EXPECT_EQ(FormatPermitId(core::PermitId{}), "");
  EXPECT_EQ(FormatPermitId(kIdValue), kId);
  EXPECT_EQ(FormatPermitId({1, 2}), "00000000000000010000000000000002");
  EXPECT_EQ(FormatPermitId({~uint64_t{0}, 0}),
            "ffffffffffffffff0000000000000000");
  EXPECT_TRUE(ParsePermitId("")->empty());
  EXPECT_EQ(*ParsePermitId(kId), kIdValue);
  EXPECT_EQ(*ParsePermitId("0123456789ABCDEFFEDCBA9876543210"), kIdValue);
  EXPECT_EQ(*ParsePermitId(FormatPermitId({1, 2})), (core::PermitId{1, 2}));
  for (const std::string& bad : std::vector<std::string>{
           "42", std::string("18446744073709551615"),
        std::string(kId).substr(1), std::string(kId) + "0",
        " " + std::string(kId), std::string(kId) + " ",
        "0x23456789abcdeffedcba9876543210", "-123456789abcdeffedcba9876543210",
        "0123456789abcdeffedcba987654321g", std::string(32, 'z'),
        std::string(kId).substr(0, 16) + "." + std::string(kId).substr(16)}) {
    absl::StatusOr<core::PermitId> id = ParsePermitId(bad);
    EXPECT_EQ(id.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(id.status().message(), HasSubstr("32 hex digits")) << bad;
  }
}

TEST(PermitIdTest, ErrorsQuoteOnlyPrintableAscii) {
  EXPECT_THAT(ParsePermitId("x").status().message(), HasSubstr("got \"x\""));
  EXPECT_THAT(ParsePermitId(std::string(50, 'y')).status().message(),
              HasSubstr("got \"" + std::string(40, 'y') + "...\""));
  // 39 ASCII bytes and a 2-byte character: a quote of 40 bytes would cut
  // it in half. Not quoted at all.
  const std::string cut = std::string(39, 'a') + "\xc3\xa9";
  absl::Status status = ParsePermitId(cut).status();
  EXPECT_THAT(status.message(), HasSubstr("41 bytes that are not printable"));
  EXPECT_EQ(status.message().find('\xc3'), absl::string_view::npos);
  status = ParsePermitId(std::string("a\0b", 3)).status();
  EXPECT_THAT(status.message(), HasSubstr("3 bytes that are not printable"));
}

TEST(PermitIdTest, CarriesTheIssuingReplicaInClusterMode) {
  const std::string with_replica = std::string(kId) + "@sluice-7d9f-x2k4q";
  EXPECT_EQ(*ParsePermitId(with_replica), kIdValue);
  EXPECT_EQ(PermitIssuer(with_replica), "sluice-7d9f-x2k4q");
  EXPECT_EQ(PermitIssuer(kId), "");
  EXPECT_FALSE(ParsePermitId(std::string(kId) + "@").ok());
  EXPECT_FALSE(ParsePermitId("abc@r0").ok());
  EXPECT_FALSE(ParsePermitId(std::string(kId) + "@" + std::string(300, 'r')).ok());
  v1::ReportResultRequest request;
  request.set_dependency("inventory");
  request.set_permit_id(std::string(kId) + "@r1");
  request.set_outcome(v1::FAILURE);
  absl::StatusOr<ReportArgs> args = ParseReportRequest(request);
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_EQ(args->permit_id, kIdValue);
  EXPECT_EQ(args->issuer, "r1");
}

TEST(DurationTest, ConvertsBothWaysAndRejectsInvalid) {
  google::protobuf::Duration proto;
  DurationToProto(absl::Milliseconds(1500), &proto);
  EXPECT_EQ(proto.seconds(), 1);
  EXPECT_EQ(proto.nanos(), 500000000);
  EXPECT_EQ(*DurationFromProto(proto, "d"), absl::Milliseconds(1500));
  DurationToProto(-absl::Milliseconds(1500), &proto);
  EXPECT_EQ(proto.seconds(), -1);
  EXPECT_EQ(proto.nanos(), -500000000);
  DurationToProto(absl::InfiniteDuration(), &proto);
  EXPECT_EQ(proto.seconds(), 315576000000);

  proto.set_seconds(1);
  proto.set_nanos(-1);
  EXPECT_THAT(DurationFromProto(proto, "latency").status().message(),
              HasSubstr("latency"));
  proto.set_seconds(0);
  proto.set_nanos(1000000000);
  EXPECT_FALSE(DurationFromProto(proto, "latency").ok());
}

TEST(ValidateAcquireTest, EnforcesLimits) {
  v1::AcquireRequest request;
  request.set_dependency("inventory");
  EXPECT_TRUE(ValidateAcquireRequest(request).ok());
  request.set_permits(kMaxPermits);
  EXPECT_TRUE(ValidateAcquireRequest(request).ok());
  request.set_permits(kMaxPermits + 1);
  EXPECT_THAT(ValidateAcquireRequest(request).message(),
              HasSubstr("permits must be at most 1000000"));
  request.set_permits(1);
  request.set_key(std::string(kMaxKeyBytes + 1, 'k'));
  EXPECT_THAT(ValidateAcquireRequest(request).message(), HasSubstr("key"));
  request.set_key("");
  request.set_dependency("");
  EXPECT_EQ(ValidateAcquireRequest(request).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ParseReportTest, ChecksOutcomeLatencyAndPermit) {
  v1::ReportResultRequest request;
  request.set_dependency("inventory");
  request.set_permit_id(kId);
  request.set_outcome(v1::TIMEOUT);
  request.mutable_latency()->set_nanos(120000000);
  absl::StatusOr<ReportArgs> args = ParseReportRequest(request);
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_EQ(args->permit_id, kIdValue);
  EXPECT_EQ(args->outcome, core::Outcome::kTimeout);
  EXPECT_EQ(args->latency, absl::Milliseconds(120));

  request.set_outcome(static_cast<v1::Outcome>(7));
  EXPECT_THAT(ParseReportRequest(request).status().message(),
              HasSubstr("got 7"));
  request.set_outcome(v1::OUTCOME_UNSPECIFIED);
  EXPECT_THAT(ParseReportRequest(request).status().message(),
              HasSubstr("OUTCOME_UNSPECIFIED"));
  request.set_outcome(v1::SUCCESS);
  request.mutable_latency()->set_seconds(-2);
  request.mutable_latency()->set_nanos(0);
  EXPECT_THAT(ParseReportRequest(request).status().message(),
              HasSubstr("latency must not be negative"));
}

TEST(DecisionToProtoTest, CopiesFallbackOnDegradeAndForFailedCalls) {
  auto policy = std::make_shared<core::PolicyConfig>();
  policy->name = "inventory";
  policy->fallback.strategy = core::FallbackStrategy::kCache;
  policy->fallback.payload = "{}";
  policy->fallback.content_type = "application/json";
  policy->fallback.on_mask =
      (1u << static_cast<int>(core::Reason::kCircuitOpen)) |
      (1u << static_cast<int>(core::Reason::kRateLimited));
  policy->fallback.cache_ttl = absl::Seconds(30);
  policy->fallback.serve_on_failure = true;

  core::Decision decision;
  decision.verdict = core::Verdict::kDegrade;
  decision.reason = core::Reason::kCircuitOpen;
  decision.retry_after = absl::Milliseconds(250);
  decision.breaker_state = core::BreakerState::kOpen;
  decision.remaining = 7;
  decision.policy_version = 3;
  decision.policy = policy.get();
  v1::AcquireResponse response;
  DecisionToProto(decision, &response);
  EXPECT_EQ(response.verdict(), v1::DEGRADE);
  EXPECT_EQ(response.reason(), v1::CIRCUIT_OPEN);
  EXPECT_EQ(response.permit_id(), "");
  EXPECT_EQ(response.retry_after().nanos(), 250000000);
  EXPECT_EQ(response.breaker_state(), v1::OPEN);
  EXPECT_EQ(response.remaining(), 7);
  EXPECT_EQ(response.policy_version(), 3u);
  EXPECT_EQ(response.fallback().strategy(), v1::Fallback::CACHE);
  EXPECT_EQ(response.fallback().payload(), "{}");
  EXPECT_EQ(response.fallback().content_type(), "application/json");
  EXPECT_THAT(response.fallback().on(),
              ::testing::ElementsAre(v1::RATE_LIMITED, v1::CIRCUIT_OPEN));
  EXPECT_EQ(response.fallback().cache_ttl().seconds(), 30);
  EXPECT_TRUE(response.fallback().serve_on_failure());

  decision.verdict = core::Verdict::kAllow;
  decision.reason = core::Reason::kNone;
  decision.permit_id = kIdValue;
  v1::AcquireResponse allowed;
  DecisionToProto(decision, &allowed);
  // serve_on_failure: the gateway gets the fallback to serve if the call
  // fails.
  EXPECT_EQ(allowed.fallback().payload(), "{}");
  EXPECT_EQ(allowed.permit_id(), kId);

  policy->fallback.serve_on_failure = false;
  v1::AcquireResponse plain;
  DecisionToProto(decision, &plain);
  EXPECT_FALSE(plain.has_fallback());
}

// The names Sluice writes in headers, metric labels and logs (the core's,
// from wire/enums/enum_lists.h) are protoc's names, which the JSON API
// prints: the one exception is the reason of a plain ALLOW.
TEST(EnumNamesTest, AreProtocNamesExceptNoneForAPlainAllow) {
  for (int r = 0; r < core::kReasonCount; ++r) {
    const auto reason = static_cast<core::Reason>(r);
    EXPECT_EQ(core::ReasonName(reason),
              r == 0 ? "NONE" : v1::Reason_Name(static_cast<v1::Reason>(r)));
  }
  EXPECT_EQ(core::ReasonName(static_cast<core::Reason>(core::kReasonCount)),
            "REASON_UNSPECIFIED");
  for (int v = 1; v <= v1::Verdict_MAX; ++v) {
    EXPECT_EQ(core::VerdictName(static_cast<core::Verdict>(v)),
              v1::Verdict_Name(static_cast<v1::Verdict>(v)));
  }
  for (int s = 1; s <= v1::BreakerState_MAX; ++s) {
    EXPECT_EQ(core::BreakerStateName(static_cast<core::BreakerState>(s)),
              v1::BreakerState_Name(static_cast<v1::BreakerState>(s)));
  }
  for (int o = 1; o <= v1::Outcome_MAX; ++o) {
    EXPECT_EQ(core::OutcomeName(static_cast<core::Outcome>(o)),
              v1::Outcome_Name(static_cast<v1::Outcome>(o)));
  }
  for (int m = 1; m <= v1::BreakerOverride_MAX; ++m) {
    EXPECT_EQ(core::BreakerOverrideName(static_cast<core::BreakerOverride>(m)),
              v1::BreakerOverride_Name(static_cast<v1::BreakerOverride>(m)));
  }
}

// The kinds of refusal in the reason list: which status a refusal answers
// and which reasons a fallback may name.
TEST(EnumNamesTest, RefusalKindsGiveTheStatusAndTheFallbackReasons) {
  EXPECT_EQ(core::RefusalHttpStatus(core::Reason::kRateLimited), 429);
  EXPECT_EQ(core::RefusalHttpStatus(core::Reason::kConcurrencyLimited), 429);
  EXPECT_EQ(core::RefusalHttpStatus(core::Reason::kCircuitOpen), 503);
  EXPECT_EQ(core::RefusalHttpStatus(core::Reason::kUnknownDependency), 503);
  EXPECT_EQ(core::RefusalHttpStatus(core::Reason::kAdaptiveThrottled), 503);
  std::vector<std::string> may_apply;
  for (int r = 0; r < core::kReasonCount; ++r) {
    const auto reason = static_cast<core::Reason>(r);
    if (core::FallbackMayApply(reason)) {
      may_apply.emplace_back(core::ReasonName(reason));
    }
  }
  EXPECT_THAT(may_apply,
              ::testing::ElementsAre("RATE_LIMITED", "CONCURRENCY_LIMITED",
                                     "CIRCUIT_OPEN", "PROBE_LIMIT",
                                     "STORE_UNAVAILABLE",
                                     "ADAPTIVE_THROTTLED"));
}

TEST(StatusConvertTest, KeepsCodeAndMessage) {
  grpc::Status s =
      ToGrpcStatus(absl::InvalidArgumentError("dependency is required"));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), "dependency is required");
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
  EXPECT_EQ(ToGrpcStatus(absl::UnavailableError("x")).error_code(),
            grpc::StatusCode::UNAVAILABLE);
}

}  // namespace
}  // namespace sluice::rpc
