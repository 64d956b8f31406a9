// SPDX-License-Identifier: Apache-2.0
// The JSON mapping of the HTTP API: what parses, what prints, and that each
// error names the field and what it takes, whatever protobuf's own wording.

#include "server/http/json_codec.h"

#include <nlohmann/json.hpp>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/http/decision_api.h"
#include "sluice/v1/decision.pb.h"
#include "wire/quote.h"

namespace sluice::http {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

// The error message of parsing `json` into a T, or "" when it parses.
template <typename T>
std::string ParseError(const std::string& json) {
  T message;
  const absl::Status status = ParseJson(json, &message);
  if (status.ok()) return "";
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(std::string(status.message()), Not(HasSubstr("\n")));
  return std::string(status.message());
}

TEST(ParseJsonTest, TakesCamelCaseAndProtoNamesAndStringIntegers) {
  v1::DecideRequest request;
  ASSERT_TRUE(ParseJson(R"({"calls": [
      {"requestId": "18446744073709551615",
       "report": {"permitId": "7", "outcome": "FAILURE", "latency": "0.25s",
                  "status_code": 502}},
      {"request_id": 2, "acquire": {"dependency": "inventory", "permits": 3}}
    ]})",
                        &request)
                  .ok());
  ASSERT_EQ(request.calls_size(), 2);
  EXPECT_EQ(request.calls(0).request_id(), 18446744073709551615u);
  EXPECT_EQ(request.calls(0).report().permit_id(), "7");
  EXPECT_EQ(request.calls(0).report().outcome(), v1::FAILURE);
  EXPECT_EQ(request.calls(0).report().latency().nanos(), 250000000);
  EXPECT_EQ(request.calls(0).report().status_code(), 502);
  EXPECT_EQ(request.calls(1).request_id(), 2u);
  EXPECT_EQ(request.calls(1).acquire().permits(), 3u);
}

TEST(ParseJsonTest, UnknownFieldsAreNamedWithTheFieldsThereAre) {
  EXPECT_EQ(
      ParseError<v1::AcquireRequest>(R"({"dependency": "a", "bogus": 1})"),
      "unknown field \"bogus\" (AcquireRequest has dependency, key, "
      "permits, caller)");
  EXPECT_EQ(ParseError<v1::DecideRequest>(
                R"({"calls": [{"acquire": {"depndency": "a"}}]})"),
            "unknown field \"depndency\" in calls[0].acquire (AcquireRequest "
            "has dependency, key, permits, caller)");
  EXPECT_THAT(ParseError<v1::ReportResultsRequest>(
                  R"({"reports": [{}, {"permit": "1"}]})"),
              AllOf(HasSubstr("unknown field \"permit\" in reports[1]"),
                    HasSubstr("permitId")));
}

TEST(ParseJsonTest, WrongTypesNameTheFieldAndWhatItTakes) {
  EXPECT_EQ(ParseError<v1::AcquireRequest>(R"({"permits": "many"})"),
            "permits: invalid value \"many\"; expected a whole number from 0 "
            "to 4294967295");
  EXPECT_EQ(ParseError<v1::AcquireRequest>(R"({"permits": -1})"),
            "permits: invalid value -1; expected a whole number from 0 to "
            "4294967295");
  EXPECT_EQ(ParseError<v1::AcquireRequest>(R"({"dependency": 5})"),
            "dependency: invalid value 5; expected a string");
  EXPECT_EQ(ParseError<v1::AcquireRequest>(R"({"dependency": {"a": 1}})"),
            "dependency: expected a string, got a JSON object");
  EXPECT_EQ(ParseError<v1::AcquireRequest>(R"({"dependency": ["a"]})"),
            "dependency: expected a string, got a JSON array");
  EXPECT_EQ(ParseError<v1::ReportResultsRequest>(
                R"({"reports": [{}, {"outcome": "NOPE"}]})"),
            "reports[1].outcome: invalid value \"NOPE\"; expected one of "
            "OUTCOME_UNSPECIFIED, SUCCESS, FAILURE, TIMEOUT, CANCELLED");
  EXPECT_THAT(ParseError<v1::ReportResultRequest>(R"({"latency": "5ms"})"),
              AllOf(HasSubstr("latency: "),
                    HasSubstr("expected a duration string in seconds such as "
                              "\"0.250s\"")));
  EXPECT_EQ(ParseError<v1::DecideRequest>(R"({"calls": [{"acquire": 5}]})"),
            "calls[0].acquire: invalid value 5; expected a JSON object "
            "(AcquireRequest)");
  EXPECT_EQ(ParseError<v1::DecideRequest>(R"({"calls": [{"requestId": -5}]})"),
            "calls[0].request_id: invalid value -5; expected a whole number "
            "from 0 to 18446744073709551615, as a string or a number");
}

TEST(ParseJsonTest, BothSidesOfAOneofAreRefused) {
  EXPECT_EQ(ParseError<v1::DecideRequest>(
                R"({"calls": [{"acquire": {}, "report": {}}]})"),
            "calls[0]: set only one of acquire or report");
}

TEST(ParseJsonTest, SyntaxErrorsSayWhereWithoutEchoingTheBody) {
  EXPECT_EQ(ParseError<v1::AcquireRequest>(""),
            "request body is empty; expected a JSON object (AcquireRequest)");
  EXPECT_EQ(ParseError<v1::AcquireRequest>(" \n "),
            "request body is empty; expected a JSON object (AcquireRequest)");
  EXPECT_EQ(ParseError<v1::AcquireRequest>("[1, 2]"),
            "request body must be a JSON object (AcquireRequest)");
  EXPECT_EQ(ParseError<v1::AcquireRequest>(R"({"dependency": "a" "key": 1})"),
            "request body is not valid JSON: Expected , or } after key:value "
            "pair, near '\"key\": 1}'");
  EXPECT_THAT(ParseError<v1::AcquireRequest>(R"({"dependency": )"),
              HasSubstr("request body is not valid JSON: Unexpected end"));
  const std::string long_body =
      R"({"dependency": ")" + std::string(5000, 'x') + R"(" "key": 1})";
  EXPECT_LT(ParseError<v1::AcquireRequest>(long_body).size(), 200u);
}

TEST(PrintJsonTest, PrintsDefaultsCamelCaseAndInt64AsStrings) {
  v1::AcquireResponse response;
  response.set_verdict(v1::REJECT);
  response.set_remaining(0);
  response.set_policy_version(12);
  response.mutable_retry_after()->set_nanos(500000000);
  const absl::StatusOr<std::string> json = PrintJson(response);
  ASSERT_TRUE(json.ok()) << json.status();
  const nlohmann::json j = nlohmann::json::parse(*json);
  EXPECT_EQ(j["verdict"], "REJECT");
  EXPECT_EQ(j["reason"], "REASON_UNSPECIFIED");
  EXPECT_EQ(j["permitId"], "");
  EXPECT_EQ(j["remaining"], "0");
  EXPECT_EQ(j["policyVersion"], "12");
  EXPECT_EQ(j["httpStatus"], 0);
  EXPECT_EQ(j["retryAfter"], "0.500s");
  EXPECT_FALSE(j.contains("fallback"));  // unset messages stay out
}

TEST(JsonQuoteTest, EscapesAndRepairsUtf8) {
  EXPECT_EQ(JsonQuote("a\"b\\c\n\x01"), R"("a\"b\\c\n\u0001")");
  EXPECT_EQ(JsonQuote("caf\xc3\xa9 \xe2\x82\xac"),
            "\"caf\xc3\xa9 \xe2\x82\xac\"");
  EXPECT_EQ(JsonQuote("a\xff"), "\"a\xef\xbf\xbd\"");
  EXPECT_EQ(JsonQuote("\xc0\xaf"), "\"\xef\xbf\xbd\xef\xbf\xbd\"");  // overlong
  EXPECT_EQ(JsonQuote("\xed\xa0\x80"),
            "\"\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\"");  // a surrogate
  EXPECT_NO_THROW(nlohmann::json::parse(JsonQuote("x\xfe\x80y")));
}

TEST(StatusMappingTest, GrpcCodesMapToHttpStatuses) {
  EXPECT_EQ(HttpStatusForCode(absl::StatusCode::kInvalidArgument), 400);
  EXPECT_EQ(HttpStatusForCode(absl::StatusCode::kFailedPrecondition), 400);
  EXPECT_EQ(HttpStatusForCode(absl::StatusCode::kNotFound), 404);
  EXPECT_EQ(HttpStatusForCode(absl::StatusCode::kResourceExhausted), 429);
  EXPECT_EQ(HttpStatusForCode(absl::StatusCode::kUnavailable), 503);
  EXPECT_EQ(HttpStatusForCode(absl::StatusCode::kDeadlineExceeded), 504);
  EXPECT_EQ(HttpStatusForCode(absl::StatusCode::kUnimplemented), 501);
  EXPECT_EQ(HttpStatusForCode(absl::StatusCode::kInternal), 500);
  EXPECT_EQ(HttpStatusForCode(absl::StatusCode::kUnknown), 500);
  const Reply reply = ErrorReply(absl::UnavailableError("store \"x\" down"));
  EXPECT_EQ(reply.status, 503);
  const nlohmann::json j = nlohmann::json::parse(reply.body);
  EXPECT_EQ(j["code"], 14);
  EXPECT_EQ(j["status"], "UNAVAILABLE");
  EXPECT_EQ(j["message"], "store \"x\" down");
}

// Empty elements, n of them, in the top-level array `member`.
std::string Amplified(const std::string& member, size_t n) {
  std::string body = "{\"" + member + "\": [";
  for (size_t i = 0; i < n; ++i) body += i == 0 ? "{}" : ",{}";
  return body + "]}";
}

constexpr JsonBudget kCalls{1000 * 16 + 64, "calls", 1000};

TEST(CheckJsonShapeTest, CountsTheElementsOfTheCountedArray) {
  EXPECT_TRUE(CheckJsonShape(Amplified("calls", 1000), kCalls).ok());
  const absl::Status over = CheckJsonShape(Amplified("calls", 1001), kCalls);
  EXPECT_EQ(over.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(over.message(),
            "calls: at most 1000 per request, got 1001; none was handled");
  // 1.4 million empty calls (4 MiB): counted to the end, one error.
  const absl::Status huge =
      CheckJsonShape(Amplified("calls", 1400000), kCalls);
  EXPECT_THAT(std::string(huge.message()),
              HasSubstr("at most 1000 per request, got 1400000"));
}

TEST(CheckJsonShapeTest, OnlyDirectElementsOfTheTopLevelMemberCount) {
  // Nested arrays and strings that look like the member do not count.
  EXPECT_TRUE(CheckJsonShape(
                  R"({"calls": [{"acquire": {"dependency": "calls",
                      "key": "[1,2,3]"}}, [[1,2],[3,4]]],
                      "x": {"calls": [1,2,3,4,5]}})",
                  JsonBudget{64, "calls", 2})
                  .ok());
  EXPECT_FALSE(CheckJsonShape(R"({"calls": [1,2,3]})",
                              JsonBudget{64, "calls", 2})
                   .ok());
  // Escaped quotes inside strings do not end them.
  EXPECT_TRUE(CheckJsonShape(R"({"k": "a\"],[", "calls": [1,2]})",
                             JsonBudget{64, "calls", 2})
                  .ok());
}

TEST(CheckJsonShapeTest, BoundsValuesAtEveryDepthAndTheNesting) {
  // Elements hidden in a member that is not counted still count as values.
  std::string many = "{\"other\": [";
  for (int i = 0; i < 100; ++i) many += i == 0 ? "0" : ",0";
  many += "]}";
  EXPECT_TRUE(CheckJsonShape(many, JsonBudget{102, "", 0}).ok());
  const absl::Status values = CheckJsonShape(many, JsonBudget{101, "", 0});
  EXPECT_THAT(std::string(values.message()),
              HasSubstr("more than 101 JSON values"));
  const std::string deep = std::string(kMaxJsonDepth, '[') +
                           std::string(kMaxJsonDepth, ']');
  EXPECT_TRUE(CheckJsonShape(deep, JsonBudget{1000, "", 0}).ok());
  const std::string deeper = "[" + deep + "]";
  EXPECT_THAT(std::string(
                  CheckJsonShape(deeper, JsonBudget{1000, "", 0}).message()),
              HasSubstr("deeper than 32 levels"));
}

TEST(CheckJsonShapeTest, LeavesSyntaxErrorsToTheParser) {
  // A form feed or vertical tab is neither JSON whitespace nor a value:
  // the scan still moves on (it once looped forever on "\f", found by
  // fuzz/json_codec_fuzzer).
  for (const char* broken :
       {"", "}", "]]]", "{\"calls\": [", "{\"calls\": \"unterminated",
        "{\"a\" 1}", "\\", "\f", "\v", "[\f\f]", "{\"calls\":[1\v]}"}) {
    EXPECT_TRUE(CheckJsonShape(broken, kCalls).ok()) << broken;
  }
  // Counts up to the error are checked all the same.
  std::string cut = Amplified("calls", 4000);
  cut.resize(cut.size() / 2);
  EXPECT_FALSE(CheckJsonShape(cut, kCalls).ok());
}

TEST(ParseJsonTest, ABudgetIsCheckedBeforeParsing) {
  v1::DecideRequest request;
  const absl::Status s =
      ParseJson(Amplified("calls", 1001), kCalls, &request);
  EXPECT_FALSE(s.ok());
  // Refused before anything was built.
  EXPECT_EQ(request.calls_size(), 0);
  ASSERT_TRUE(ParseJson(Amplified("calls", 3), kCalls, &request).ok());
  EXPECT_EQ(request.calls_size(), 3);
}

TEST(ParseJsonTest, SyntaxErrorsQuoteWholeCharactersOnly) {
  // Protobuf's context line after the error ends in half of the first
  // "\xc3\xa9"; the message quoting it must still be valid UTF-8.
  v1::AcquireRequest request;
  const std::string body =
      "{\"dependency\": 1 " + std::string(19, 'x') + "\xc3\xa9\xc3\xa9}";
  const absl::Status s = ParseJson(body, &request);
  ASSERT_FALSE(s.ok());
  const std::string message(s.message());
  for (size_t i = 0; i < message.size();) {
    const size_t n = wire::Utf8SequenceLength(message, i);
    ASSERT_NE(n, 0u) << "invalid UTF-8 at byte " << i << ": " << message;
    i += n;
  }
}

}  // namespace
}  // namespace sluice::http
