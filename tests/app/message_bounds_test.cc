// SPDX-License-Identifier: Apache-2.0
// The data port's request budgets, checked on serialized bytes before
// protobuf builds anything.

#include "server/rpc/message_bounds.h"

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include <string>

#include "envoy/service/accesslog/v3/als.pb.h"
#include "envoy/service/ratelimit/v3/rls.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sluice/v1/decision.pb.h"

namespace sluice::rpc {
namespace {

using envoy::service::ratelimit::v3::RateLimitRequest;
using ::testing::HasSubstr;

// `n` empty elements of field 1 (two bytes each: tag, length 0).
std::string EmptyElements(int n, int field = 1) {
  std::string bytes;
  for (int i = 0; i < n; ++i) {
    bytes.push_back(static_cast<char>(field << 3 | 2));
    bytes.push_back('\0');
  }
  return bytes;
}

v1::DecideRequest LargestValidDecide() {
  v1::DecideRequest request;
  for (int i = 0; i < 1000; ++i) {
    v1::DecideCall* call = request.add_calls();
    call->set_request_id(UINT64_MAX - i);
    v1::ReportResultRequest* report = call->mutable_report();
    report->set_dependency(std::string(256, 'd'));
    report->set_key(std::string(1024, 'k'));
    report->set_permit_id(std::string(20, '9') + "@" + std::string(256, 'r'));
    report->set_outcome(v1::TIMEOUT);
    report->mutable_latency()->set_seconds(315576000000);
    report->mutable_latency()->set_nanos(999999999);
  }
  return request;
}

TEST(MessageBoundsTest, TheLargestValidMessagesFitTheirBudgets) {
  const v1::DecideRequest decide = LargestValidDecide();
  EXPECT_LE(decide.ByteSizeLong(), kDecideBudget.max_bytes);
  v1::DecideRequest parsed;
  ASSERT_TRUE(
      ParseBounded(decide.SerializeAsString(), kDecideBudget, &parsed).ok());
  EXPECT_EQ(parsed.calls_size(), 1000);

  v1::AcquireRequest acquire;
  acquire.set_dependency(std::string(256, 'd'));
  acquire.set_key(std::string(1024, 'k'));
  acquire.set_permits(1000000);
  acquire.set_caller(std::string(256, 'c'));
  v1::AcquireRequest acquire_parsed;
  EXPECT_TRUE(ParseBounded(acquire.SerializeAsString(), kAcquireBudget,
                           &acquire_parsed)
                  .ok());

  RateLimitRequest rls;
  rls.set_domain(std::string(256, 'd'));
  for (int i = 0; i < 64; ++i) {
    auto* d = rls.add_descriptors();
    for (int j = 0; j < 8; ++j) {
      auto* e = d->add_entries();
      e->set_key("header_match");
      e->set_value(std::string(64, 'v'));
    }
    d->mutable_hits_addend()->set_value(3);
  }
  RateLimitRequest rls_parsed;
  EXPECT_TRUE(
      ParseBounded(rls.SerializeAsString(), kRateLimitBudget, &rls_parsed)
          .ok());
}

// 256 renewals (DecisionServiceImpl::kMaxRenewals) with the longest names
// and the largest counts fit; the 257th is refused before anything is built.
TEST(MessageBoundsTest, RenewLeasesIsBoundedByItsRenewals) {
  v1::RenewLeasesRequest renew;
  renew.set_client(UINT64_MAX);
  for (int i = 0; i < 256; ++i) {
    v1::ClientLeaseRenewal* r = renew.add_leases();
    r->set_dependency(std::string(253, 'd') + std::to_string(100 + i));
    r->set_lease(UINT64_MAX);
    for (auto set : {&v1::ClientLeaseRenewal::set_tokens_spent,
                     &v1::ClientLeaseRenewal::set_admitted,
                     &v1::ClientLeaseRenewal::set_successes,
                     &v1::ClientLeaseRenewal::set_slow,
                     &v1::ClientLeaseRenewal::set_failures,
                     &v1::ClientLeaseRenewal::set_timeouts,
                     &v1::ClientLeaseRenewal::set_cancelled}) {
      (r->*set)(UINT64_MAX);
    }
    r->set_in_flight(UINT32_MAX);
    r->set_want_tokens(UINT32_MAX);
    r->set_want_slots(UINT32_MAX);
  }
  EXPECT_LE(renew.ByteSizeLong(), kRenewLeasesBudget.max_bytes);
  v1::RenewLeasesRequest parsed;
  ASSERT_TRUE(ParseBounded(renew.SerializeAsString(), kRenewLeasesBudget,
                           &parsed)
                  .ok());
  EXPECT_EQ(parsed.leases_size(), 256);

  EXPECT_THAT(std::string(ParseBounded(EmptyElements(257, 2),
                                       kRenewLeasesBudget, &parsed)
                              .message()),
              HasSubstr("leases: at most 256"));
}

TEST(MessageBoundsTest, TooManyElementsAreCountedAndRefusedUnbuilt) {
  v1::DecideRequest request;
  const absl::Status s =
      ParseBounded(EmptyElements(1001), kDecideBudget, &request);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "calls: at most 1000 per DecideRequest, got 1001; none was "
            "handled");
  EXPECT_EQ(request.calls_size(), 0);
  // A million: counted to the end all the same.
  EXPECT_THAT(std::string(ParseBounded(EmptyElements(1000000), kDecideBudget,
                                       &request)
                              .message()),
              HasSubstr("got 1000000"));
  v1::ReportResultsRequest reports;
  EXPECT_THAT(std::string(ParseBounded(EmptyElements(10001), kReportsBudget,
                                       &reports)
                              .message()),
              HasSubstr("reports: at most 10000 per ReportResultsRequest, got "
                        "10001"));
  RateLimitRequest rls;
  EXPECT_THAT(std::string(ParseBounded(EmptyElements(65, 2),
                                       kRateLimitBudget, &rls)
                              .message()),
              HasSubstr("descriptors: at most 64 per RateLimitRequest, got "
                        "65"));
}

// `inner` as field `field` of a message: tag, length, bytes.
std::string Nested(int field, const std::string& inner) {
  std::string bytes(1, static_cast<char>(field << 3 | 2));
  for (size_t v = inner.size();; v >>= 7) {
    if (v < 0x80) {
      bytes.push_back(static_cast<char>(v));
      break;
    }
    bytes.push_back(static_cast<char>((v & 0x7f) | 0x80));
  }
  return bytes + inner;
}

TEST(MessageBoundsTest, ElementsOfANestedFieldAreCountedOverEveryOccurrence) {
  // StreamAccessLogsMessage.http_logs (2).log_entry (1): 1,000 pass.
  envoy::service::accesslog::v3::StreamAccessLogsMessage m;
  ASSERT_TRUE(ParseBounded(Nested(2, EmptyElements(1000)), kAccessLogBudget,
                           &m)
                  .ok());
  EXPECT_EQ(m.http_logs().log_entry_size(), 1000);
  // Split over two occurrences of http_logs (which protobuf merges): 1,001.
  m.Clear();
  absl::Status s = ParseBounded(
      Nested(2, EmptyElements(600)) + Nested(2, EmptyElements(401)),
      kAccessLogBudget, &m);
  EXPECT_EQ(s.message(),
            "log_entry: at most 1000 per StreamAccessLogsMessage, got 1001; "
            "none was handled");
  EXPECT_EQ(m.http_logs().log_entry_size(), 0);
  // Elements of the same number elsewhere do not count: tcp_logs (3) has
  // its own entries, which the field budget bounds.
  EXPECT_TRUE(ParseBounded(Nested(3, EmptyElements(1001)), kAccessLogBudget,
                           &m)
                  .ok());
  // Past the field budget, the rest is still counted to the end.
  EXPECT_THAT(std::string(ParseBounded(Nested(2, EmptyElements(400000)),
                                       kAccessLogBudget, &m)
                              .message()),
              HasSubstr("got 400000"));
}

TEST(MessageBoundsTest, FieldsAtEveryDepthAndUnknownFieldsCount) {
  // 1000 calls, each with 100 unknown varint fields: few calls, too many
  // fields.
  std::string bytes;
  for (int i = 0; i < 1000; ++i) {
    std::string call;
    for (int f = 0; f < 100; ++f) call.append("\xa0\x06\x01", 3);  // 100: 1
    bytes.push_back('\x0a');
    bytes.push_back(static_cast<char>(0x80 | (call.size() & 0x7f)));
    bytes.push_back(static_cast<char>(call.size() >> 7));
    bytes += call;
  }
  v1::DecideRequest request;
  const absl::Status s = ParseBounded(bytes, kDecideBudget, &request);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("more than 16064 fields"));
  // Unknown top-level fields of an Acquire.
  std::string unknown;
  for (int i = 0; i < 100; ++i) unknown.append("\xa0\x06\x01", 3);
  v1::AcquireRequest acquire;
  EXPECT_FALSE(ParseBounded(unknown, kAcquireBudget, &acquire).ok());
}

TEST(MessageBoundsTest, SizeAndMalformedBytes) {
  v1::AcquireRequest acquire;
  acquire.set_caller(std::string(16 << 10, 'c'));
  v1::AcquireRequest parsed;
  const absl::Status big =
      ParseBounded(acquire.SerializeAsString(), kAcquireBudget, &parsed);
  EXPECT_EQ(big.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(big.message()),
              HasSubstr("the limit is 16384 bytes"));
  for (const std::string& bad :
       {std::string("\x0a\x05\x01", 3),         // length past the end
        std::string("\x0b", 1),                  // a group
        std::string("\x00\x01", 2),              // field number 0
        std::string("\x08\xff\xff\xff", 4),      // truncated varint
        std::string("\x0a\x02\x0a\x05", 4)}) {   // nested length past its end
    v1::DecideRequest request;
    const absl::Status s = ParseBounded(bad, kDecideBudget, &request);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  }
}

TEST(MessageBoundsTest, AByteBufferOfSeveralSlicesIsReadWhole) {
  const std::string bytes = LargestValidDecide().SerializeAsString();
  const size_t half = bytes.size() / 2;
  grpc::Slice slices[] = {grpc::Slice(bytes.substr(0, half)),
                          grpc::Slice(bytes.substr(half))};
  grpc::ByteBuffer buffer(slices, 2);
  v1::DecideRequest request;
  ASSERT_TRUE(ParseBounded(buffer, kDecideBudget, &request).ok());
  EXPECT_EQ(request.calls_size(), 1000);
  grpc::ByteBuffer out;
  ASSERT_TRUE(SerializeToBuffer(request, &out).ok());
  EXPECT_EQ(out.Length(), bytes.size());
}

}  // namespace
}  // namespace sluice::rpc
