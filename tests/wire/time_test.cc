// SPDX-License-Identifier: Apache-2.0
#include "wire/time.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sluice::wire {
namespace {

using ::testing::HasSubstr;

google::protobuf::Duration Proto(int64_t seconds, int32_t nanos) {
  google::protobuf::Duration d;
  d.set_seconds(seconds);
  d.set_nanos(nanos);
  return d;
}

TEST(DurationTest, RoundTripsBothSigns) {
  for (absl::Duration d : {absl::ZeroDuration(), absl::Milliseconds(1500),
                           -absl::Milliseconds(1500), absl::Nanoseconds(1),
                           absl::Hours(24 * 365)}) {
    absl::StatusOr<absl::Duration> back =
        DurationFromProto(DurationToProto(d), "d");
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, d);
  }
  const google::protobuf::Duration negative =
      DurationToProto(-absl::Milliseconds(1500));
  EXPECT_EQ(negative.seconds(), -1);
  EXPECT_EQ(negative.nanos(), -500000000);
}

TEST(DurationTest, ClampsInfinityToTheProtoRange) {
  EXPECT_EQ(DurationToProto(absl::InfiniteDuration()).seconds(), 315576000000);
  EXPECT_EQ(DurationToProto(absl::InfiniteDuration()).nanos(), 999999999);
  EXPECT_EQ(DurationToProto(-absl::InfiniteDuration()).seconds(),
            -315576000000);
}

TEST(DurationTest, RejectsMalformedNamingTheField) {
  EXPECT_EQ(DurationFromProto(Proto(1, -5), "call_timeout").status().message(),
            "call_timeout must be a valid duration, got {seconds: 1, nanos: "
            "-5}");
  EXPECT_FALSE(DurationFromProto(Proto(-1, 5), "d").ok());
  EXPECT_FALSE(DurationFromProto(Proto(0, 1000000000), "d").ok());
  EXPECT_FALSE(DurationFromProto(Proto(0, -1000000000), "d").ok());
  EXPECT_FALSE(DurationFromProto(Proto(315576000001, 0), "d").ok());
  EXPECT_TRUE(DurationFromProto(Proto(315576000000, 0), "d").ok());
  EXPECT_TRUE(DurationFromProto(Proto(0, -999999999), "d").ok());
  EXPECT_EQ(DurationFromProto(Proto(0, 5), "d").status().code(),
            absl::StatusCode::kOk);
}

TEST(TimestampTest, BeforeTheEpochNanosStayPositive) {
  const google::protobuf::Timestamp t =
      TimestampToProto(absl::UnixEpoch() - absl::Milliseconds(1500));
  EXPECT_EQ(t.seconds(), -2);
  EXPECT_EQ(t.nanos(), 500000000);
  EXPECT_EQ(TimestampFromProto(t), absl::UnixEpoch() - absl::Milliseconds(1500));
}

TEST(TimestampTest, RoundTripsAfterTheEpoch) {
  const absl::Time now = absl::FromUnixNanos(1767225600123456789);
  const google::protobuf::Timestamp t = TimestampToProto(now);
  EXPECT_EQ(t.seconds(), 1767225600);
  EXPECT_EQ(t.nanos(), 123456789);
  EXPECT_EQ(TimestampFromProto(t), now);
}

TEST(DurationFlagTest, ParsesAbslSyntax) {
  EXPECT_EQ(*ParseDurationFlag("5s"), absl::Seconds(5));
  EXPECT_EQ(*ParseDurationFlag("1m30s"), absl::Seconds(90));
  EXPECT_EQ(*ParseDurationFlag("-250ms"), absl::Milliseconds(-250));
  EXPECT_THAT(ParseDurationFlag("soon").status().message(),
              HasSubstr("\"soon\""));
  EXPECT_FALSE(ParseDurationFlag("5").ok());
  EXPECT_FALSE(ParseDurationFlag("inf").ok());
}

TEST(DurationFlagTest, FormatsForPeople) {
  EXPECT_EQ(FormatDurationProto(Proto(90, 0)), "1m30s");
  EXPECT_EQ(FormatDurationProto(Proto(0, 250000000)), "250ms");
}

}  // namespace
}  // namespace sluice::wire
