// The JSON mapping of the HTTP API: what parses, what prints, and that each
// error names the field and what it takes, whatever protobuf's own wording.

#include "server/http/json_codec.h"

#include <nlohmann/json.hpp>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/http/decision_api.h"
#include "sluice/v1/decision.pb.h"

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

}  // namespace
}  // namespace sluice::http
