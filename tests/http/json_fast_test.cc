// SPDX-License-Identifier: Apache-2.0
// The direct JSON path of the hot endpoints against protobuf's converter:
// what the fast printer prints is byte for byte what PrintJson prints, and
// what the fast decoder takes, ParseJson takes into an equal message.

#include "server/http/json_fast.h"

#include <google/protobuf/util/message_differencer.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/http/json_codec.h"
#include "sluice/v1/decision.pb.h"

namespace sluice::http {
namespace {

using google::protobuf::util::MessageDifferencer;

// Strings a response may carry: empty, every printable ASCII byte alone,
// escapes, non-ASCII and invalid UTF-8.
std::vector<std::string> SampleStrings() {
  std::vector<std::string> out = {"",
                                  "p-1",
                                  "7f3a9c",
                                  "a\"b",
                                  "a\\b",
                                  "line\nbreak",
                                  "tab\t",
                                  "\x01",
                                  "\x7f",
                                  "caf\xc3\xa9",
                                  "\xe2\x80\xa8",
                                  "\xff",
                                  "\xf0\x9f\x98\x80",
                                  "<&>='"};
  for (int c = 0x20; c < 0x7f; ++c) out.push_back(std::string(1, char(c)));
  return out;
}

// Durations as (seconds, nanos): whole, 3, 6 and 9 digits, limits, and
// some protobuf refuses to print.
std::vector<std::pair<int64_t, int32_t>> SampleDurations() {
  return {{0, 0},
          {0, 1},
          {0, 1000},
          {0, 1000000},
          {0, 250000000},
          {0, 999999999},
          {1, 0},
          {1, 500000000},
          {12, 345678},
          {315576000000, 0},
          {315576000001, 0},
          {-1, 0},
          {0, -5},
          {-2, -500000000},
          {3, 1000000000}};
}

void ExpectPrintsAsProtobuf(const google::protobuf::Message& message,
                            bool fast_ok, const std::string& fast) {
  const absl::StatusOr<std::string> slow = PrintJson(message);
  if (!fast_ok) return;
  ASSERT_TRUE(slow.ok()) << message.ShortDebugString();
  EXPECT_EQ(fast, *slow) << message.ShortDebugString();
}

TEST(FastPrintJsonTest, AcquireResponseMatchesProtobufByteForByte) {
  int printed = 0;
  v1::AcquireResponse response;
  // Every enum value (and one unknown number) of each enum field.
  for (int verdict = 0; verdict <= 4; ++verdict) {
    for (int reason = 0; reason <= 9; ++reason) {
      for (int breaker = 0; breaker <= 6; ++breaker) {
        response.Clear();
        response.set_verdict(static_cast<v1::Verdict>(verdict));
        response.set_reason(static_cast<v1::Reason>(reason));
        response.set_breaker_state(static_cast<v1::BreakerState>(breaker));
        std::string fast;
        const bool ok = FastPrintJson(response, &fast);
        printed += ok ? 1 : 0;
        ExpectPrintsAsProtobuf(response, ok, fast);
      }
    }
  }
  for (const std::string& id : SampleStrings()) {
    response.Clear();
    response.set_permit_id(id);
    std::string fast;
    const bool ok = FastPrintJson(response, &fast);
    printed += ok ? 1 : 0;
    ExpectPrintsAsProtobuf(response, ok, fast);
  }
  for (const auto& [seconds, nanos] : SampleDurations()) {
    // call_timeout, retry_after, then both (and a permit, so the scalar
    // fields are not all at their defaults).
    for (int which = 0; which < 3; ++which) {
      response.Clear();
      if (which != 1) {
        response.mutable_call_timeout()->set_seconds(seconds);
        response.mutable_call_timeout()->set_nanos(nanos);
      }
      if (which != 0) {
        response.set_permit_id("p-2");
        response.mutable_retry_after()->set_seconds(seconds);
        response.mutable_retry_after()->set_nanos(nanos);
      }
      std::string fast;
      const bool ok = FastPrintJson(response, &fast);
      printed += ok ? 1 : 0;
      ExpectPrintsAsProtobuf(response, ok, fast);
    }
  }
  for (int64_t remaining : {int64_t{0}, int64_t{-1}, int64_t{42},
                            std::numeric_limits<int64_t>::min(),
                            std::numeric_limits<int64_t>::max()}) {
    for (uint64_t version :
         {uint64_t{0}, uint64_t{7}, std::numeric_limits<uint64_t>::max()}) {
      for (int32_t status : {0, 200, -1, std::numeric_limits<int32_t>::min(),
                             std::numeric_limits<int32_t>::max()}) {
        response.Clear();
        response.set_verdict(v1::ALLOW);
        response.set_permit_id("p-9");
        response.mutable_call_timeout()->set_seconds(2);
        response.set_remaining(remaining);
        response.set_policy_version(version);
        response.set_http_status(status);
        std::string fast;
        ASSERT_TRUE(FastPrintJson(response, &fast));
        ++printed;
        ExpectPrintsAsProtobuf(response, true, fast);
      }
    }
  }
  // A fallback is left to protobuf.
  response.Clear();
  response.mutable_fallback()->set_payload("{}");
  std::string fast;
  EXPECT_FALSE(FastPrintJson(response, &fast));
  // The fast printer must do most of the work, or this test proves little.
  EXPECT_GT(printed, 400);
}

TEST(FastPrintJsonTest, ReportResultResponseMatchesProtobufByteForByte) {
  for (int breaker = 0; breaker <= 7; ++breaker) {
    v1::ReportResultResponse response;
    response.set_breaker_state(static_cast<v1::BreakerState>(breaker));
    std::string fast;
    const bool ok = FastPrintJson(response, &fast);
    EXPECT_EQ(ok, breaker <= 5);
    ExpectPrintsAsProtobuf(response, ok, fast);
  }
}

// Decodes `json` both ways: when the fast decoder takes it, protobuf's
// must take it too, into an equal message. Returns whether the fast one
// took it.
template <typename T>
bool FastAgrees(const std::string& json) {
  T fast;
  if (!FastParseJson(json, &fast)) return false;
  T slow;
  const absl::Status status = ParseJson(json, &slow);
  EXPECT_TRUE(status.ok()) << json << ": " << status;
  EXPECT_TRUE(MessageDifferencer::Equals(fast, slow))
      << json << "\nfast: " << fast.ShortDebugString()
      << "\nslow: " << slow.ShortDebugString();
  return true;
}

TEST(FastParseJsonTest, TakesWhatClientsSendAsProtobufReadsIt) {
  for (const std::string& json : std::vector<std::string>{
           "{}", " { } ",
           R"({"dependency":"payments","key":"user-1","permits":1})",
           R"({"dependency": "inventory", "key": "", "permits": 0,
               "caller": "checkout"})",
           R"({"permits":4294967295,"caller":"caf\u00e9x"})",
           R"({"key":"a\"b\\c\/d\b\f\n\r\t"})",
           "{\"dependency\":\"caf\xc3\xa9 \xf0\x9f\x98\x80\x7f\"}",
           R"({"caller":"x","dependency":"y"})"}) {
    SCOPED_TRACE(json);
    if (json.find("\\u") != std::string::npos) {
      EXPECT_FALSE(FastAgrees<v1::AcquireRequest>(json));
    } else {
      EXPECT_TRUE(FastAgrees<v1::AcquireRequest>(json));
    }
  }
  for (const std::string& json : std::vector<std::string>{
           R"({"dependency":"payments","key":"user-1","permitId":"p-1",
               "outcome":"SUCCESS","latency":"0.005000000s"})",
           R"({"permit_id":"p","outcome":"CANCELLED","status_code":-502})",
           R"({"statusCode":2147483647,"outcome":"OUTCOME_UNSPECIFIED"})",
           R"({"statusCode":-2147483648,"latency":"315576000000s"})",
           R"({"latency":"-1.5s"})", R"({"latency":"0.000000001s"})",
           R"({"latency":"-0s"})", R"({"latency":"007.120s"})",
           R"({"outcome":"TIMEOUT","latency":"12.34s"})"}) {
    SCOPED_TRACE(json);
    EXPECT_TRUE(FastAgrees<v1::ReportResultRequest>(json));
  }
}

TEST(FastParseJsonTest, LeavesEverythingElseToProtobuf) {
  // Each of these is either refused by ParseJson or uses a form the fast
  // decoder does not read; it must decline all of them.
  for (const std::string& json :
       std::vector<std::string>{"",
                                "[]",
                                "null",
                                "{",
                                "{}x",
                                "{} {}",
                                R"({"permits":1,})",
                                R"({"permits":"1"})",
                                R"({"permits":1.0})",
                                R"({"permits":1e0})",
                                R"({"permits":-1})",
                                R"({"permits":01})",
                                R"({"permits":4294967296})",
                                R"({"permits":null})",
                                R"({"key":null})",
                                R"({"key":1})",
                                R"({"key":"a","key":"b"})",
                                R"({"bogus":1})",
                                R"({"Key":"a"})",
                                R"({"key":"\u0041"})",
                                "{\"key\":\"a\x01\"}",
                                "{\"key\":\"\xff\"}",
                                R"({"key":"a\x"})",
                                R"({"key":"unterminated})",
                                "\f{}",
                                R"({'key':'a'})",
                                R"({"permits":true})"}) {
    SCOPED_TRACE(json);
    EXPECT_FALSE(FastAgrees<v1::AcquireRequest>(json));
  }
  for (const std::string& json : std::vector<std::string>{
           R"({"outcome":"success"})", R"({"outcome":1})",
           R"({"outcome":"NOPE"})", R"({"latency":"1"})",
           R"({"latency":"1.s"})", R"({"latency":".5s"})",
           R"({"latency":"0.1234567890s"})", R"({"latency":"+1s"})",
           R"({"latency":"315576000001s"})", R"({"latency":" 1s"})",
           R"({"latency":{"seconds":1}})", R"({"latency":1})",
           R"({"statusCode":-0})", R"({"statusCode":2147483648})",
           R"({"permitId":"a","permit_id":"b"})",
           R"({"statusCode":1,"status_code":1})"}) {
    SCOPED_TRACE(json);
    EXPECT_FALSE(FastAgrees<v1::ReportResultRequest>(json));
  }
}

}  // namespace
}  // namespace sluice::http
