// SPDX-License-Identifier: Apache-2.0
// The load generator's pure parts: when requests are due, how answers are
// read and counted. No sockets, no clock.
#include <gtest/gtest.h>

#include <string>

#include "loadgen_schedule.h"
#include "loadgen_stats.h"

namespace sluice::examples {
namespace {

using ::absl::Milliseconds;
using ::absl::Seconds;

RateSchedule MustParse(const std::string& spec) {
  absl::StatusOr<RateSchedule> s = RateSchedule::Parse(spec);
  EXPECT_TRUE(s.ok()) << s.status();
  return *std::move(s);
}

TEST(RateScheduleTest, ParsesStepsRampsCommentsAndLines) {
  const RateSchedule s = MustParse(
      "5s:100, 20s:100-600  # ramp\n"
      "# hold\n"
      "500ms:600\n");
  ASSERT_EQ(s.segments().size(), 3u);
  EXPECT_EQ(s.segments()[1].length, Seconds(20));
  EXPECT_EQ(s.segments()[1].from, 100);
  EXPECT_EQ(s.segments()[1].to, 600);
  EXPECT_EQ(s.segments()[2].from, 600);
  EXPECT_EQ(s.length(), Milliseconds(25500));
}

TEST(RateScheduleTest, RejectsBadSegmentsNamingThem) {
  for (const char* spec : {"", "# nothing", "5s", "x:10", "0s:10", "5s:-1",
                           "5s:10-", "5s:abc"}) {
    absl::StatusOr<RateSchedule> s = RateSchedule::Parse(spec);
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << spec;
  }
  EXPECT_NE(RateSchedule::Parse("1s:5, 2s:x").status().message().find("2s:x"),
            std::string::npos);
}

TEST(RateScheduleTest, SteadyRateSendsEvenlySpacedRequests) {
  const RateSchedule s = MustParse("5s:100");
  EXPECT_DOUBLE_EQ(s.CountBy(Seconds(1)), 100);
  EXPECT_DOUBLE_EQ(s.CountBy(Seconds(9)), 500);
  EXPECT_EQ(*s.SendTime(0), absl::ZeroDuration());
  EXPECT_EQ(*s.SendTime(1), Milliseconds(10));
  EXPECT_EQ(*s.SendTime(499), Milliseconds(4990));
  EXPECT_FALSE(s.SendTime(500).has_value());
}

TEST(RateScheduleTest, RampFollowsTheIntegralOfTheRate) {
  // 0 -> 100/s over 10 s, then 2 s at 50/s: 500 + 100 requests.
  const RateSchedule s = MustParse("10s:0-100,2s:50");
  EXPECT_DOUBLE_EQ(s.RateAt(Seconds(5)), 50);
  EXPECT_DOUBLE_EQ(s.RateAt(Seconds(11)), 50);
  EXPECT_DOUBLE_EQ(s.RateAt(Seconds(12)), 0);
  EXPECT_DOUBLE_EQ(s.CountBy(Seconds(5)), 125);
  EXPECT_DOUBLE_EQ(s.CountBy(Seconds(12)), 600);
  EXPECT_NEAR(absl::ToDoubleSeconds(*s.SendTime(125)), 5, 1e-9);
  EXPECT_NEAR(absl::ToDoubleSeconds(*s.SendTime(500)), 10, 1e-9);
  EXPECT_NEAR(absl::ToDoubleSeconds(*s.SendTime(550)), 11, 1e-9);
  EXPECT_FALSE(s.SendTime(600).has_value());
  // Every request of the second 9..10 s (rate 90..100) is due in it.
  int in_last_second = 0;
  absl::Duration previous = absl::ZeroDuration();
  for (uint64_t n = 0; n < 600; ++n) {
    const absl::Duration t = *s.SendTime(n);
    ASSERT_GE(t, previous) << n;
    previous = t;
    if (t >= Seconds(9) && t < Seconds(10)) ++in_last_second;
  }
  EXPECT_EQ(in_last_second, 95);
}

TEST(RateScheduleTest, RampDownAndZeroRateSegments) {
  const RateSchedule s = MustParse("2s:100-0,1s:0,1s:10");
  EXPECT_DOUBLE_EQ(s.CountBy(Seconds(4)), 110);
  EXPECT_NEAR(absl::ToDoubleSeconds(*s.SendTime(75)), 1, 1e-9);
  // The silent second is skipped: request 100 opens the last segment.
  EXPECT_NEAR(absl::ToDoubleSeconds(*s.SendTime(100)), 3, 1e-9);
}

TEST(ResponseHeadTest, ReadsStatusLengthAndSluiceHeaders) {
  const std::string text =
      "HTTP/1.1 429 Too Many Requests\r\ncontent-length: 12\r\n"
      "X-Sluice-Result: rejected\r\nx-sluice-reason: CONCURRENCY_LIMIT\r\n"
      "Connection: close\r\n\r\n{\"a\":\"b\"}";
  EXPECT_FALSE(ParseResponseHead(text.substr(0, 40)).has_value());
  const std::optional<ResponseHead> head = ParseResponseHead(text);
  ASSERT_TRUE(head.has_value());
  EXPECT_EQ(head->status, 429);
  EXPECT_EQ(head->content_length, 12u);
  EXPECT_EQ(head->head_bytes, text.find("{"));
  EXPECT_TRUE(head->close);
  EXPECT_EQ(head->result, "rejected");
  EXPECT_EQ(head->reason, "CONCURRENCY_LIMIT");
  EXPECT_EQ(Classify(*head), Outcome::kRefused);
}

TEST(ResponseHeadTest, ChunkedOrNotHttpIsStatusZero) {
  EXPECT_EQ(ParseResponseHead("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked"
                              "\r\n\r\n")->status,
            0);
  EXPECT_EQ(ParseResponseHead("SSH-2.0\r\n\r\n")->status, 0);
}

TEST(ClassifyTest, WhatEachGatewayAnswerMeans) {
  ResponseHead h;
  h.status = 200;
  h.result = "backend";
  EXPECT_EQ(Classify(h), Outcome::kOk);
  h.result = "degraded";
  EXPECT_EQ(Classify(h), Outcome::kDegraded);
  h.status = 503;
  h.result = "rejected";
  EXPECT_EQ(Classify(h), Outcome::kRefused);
  h.result = "error";
  h.status = 502;
  EXPECT_EQ(Classify(h), Outcome::kError);
  h.result = "";
  h.status = 503;  // the backend's own "queue full", straight through
  EXPECT_EQ(Classify(h), Outcome::kError);
  h.status = 404;
  EXPECT_EQ(Classify(h), Outcome::kOther);
}

TEST(RecorderTest, CountsBySecondAndWritesRows) {
  Recorder r;
  r.Sent(Milliseconds(100));
  r.Sent(Milliseconds(900));
  r.Sent(Milliseconds(1500));
  r.Finished(Milliseconds(120), Outcome::kOk, "", Milliseconds(20));
  r.Finished(Milliseconds(950), Outcome::kDegraded, "ADAPTIVE_THROTTLED",
             Milliseconds(1));
  r.Finished(Milliseconds(1100), Outcome::kOk, "", Milliseconds(40));
  r.Finished(Milliseconds(1600), Outcome::kRefused, "CONCURRENCY_LIMIT",
             Milliseconds(1));
  r.Finished(Milliseconds(3100), Outcome::kTimeout, "", Seconds(2));
  r.Outstanding(Milliseconds(1200), 3);
  r.Outstanding(Milliseconds(1300), 2);
  ASSERT_EQ(r.seconds().size(), 4u);
  EXPECT_EQ(r.seconds()[0].sent, 2u);
  EXPECT_EQ(r.seconds()[1].sent, 1u);
  EXPECT_EQ(r.seconds()[1].outstanding_max, 3u);
  EXPECT_EQ(r.seconds()[3].timeouts, 1u);
  EXPECT_EQ(Recorder::CsvHeader(),
            "second,offered,sent,ok,degraded,refused,errors,other,timeouts,"
            "conn_errors,outstanding_max,p50_ms,p99_ms,reasons");
  EXPECT_EQ(r.CsvRow(0, 100), "0,100.0,2,1,1,0,0,0,0,0,0,20.00,20.00,"
                              "ADAPTIVE_THROTTLED=1");
  EXPECT_EQ(r.CsvRow(1, 100), "1,100.0,1,1,0,1,0,0,0,0,3,40.00,40.00,"
                              "CONCURRENCY_LIMIT=1");
  EXPECT_EQ(r.CsvRow(2, 0), "2,0.0,0,0,0,0,0,0,0,0,0,,,");
}

}  // namespace
}  // namespace sluice::examples
