// SPDX-License-Identifier: Apache-2.0
#include "wire/time.h"

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "google/protobuf/util/time_util.h"

namespace sluice::wire {
namespace {

using google::protobuf::util::TimeUtil;

constexpr int32_t kMaxNanos = 999'999'999;

}  // namespace

google::protobuf::Duration DurationToProto(absl::Duration duration) {
  const absl::Duration kMax = absl::Seconds(TimeUtil::kDurationMaxSeconds) +
                              absl::Nanoseconds(kMaxNanos);
  if (duration > kMax) duration = kMax;
  if (duration < -kMax) duration = -kMax;
  absl::Duration rem;
  const int64_t seconds = absl::IDivDuration(duration, absl::Seconds(1), &rem);
  google::protobuf::Duration out;
  out.set_seconds(seconds);
  out.set_nanos(static_cast<int32_t>(absl::ToInt64Nanoseconds(rem)));
  return out;
}

void DurationToProto(absl::Duration duration, google::protobuf::Duration* out) {
  *out = DurationToProto(duration);
}

absl::StatusOr<absl::Duration> DurationFromProto(
    const google::protobuf::Duration& proto, absl::string_view field) {
  const int64_t s = proto.seconds();
  const int32_t n = proto.nanos();
  if (s > TimeUtil::kDurationMaxSeconds || s < TimeUtil::kDurationMinSeconds ||
      n > kMaxNanos || n < -kMaxNanos || (s > 0 && n < 0) ||
      (s < 0 && n > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " must be a valid duration, got {seconds: ", s,
                     ", nanos: ", n, "}"));
  }
  return absl::Seconds(s) + absl::Nanoseconds(n);
}

google::protobuf::Timestamp TimestampToProto(absl::Time time) {
  return TimeUtil::NanosecondsToTimestamp(absl::ToUnixNanos(time));
}

absl::Time TimestampFromProto(const google::protobuf::Timestamp& proto) {
  return absl::FromUnixSeconds(proto.seconds()) +
         absl::Nanoseconds(proto.nanos());
}

absl::StatusOr<absl::Duration> ParseDurationFlag(absl::string_view text) {
  absl::Duration d;
  if (!absl::ParseDuration(text, &d) || d == absl::InfiniteDuration() ||
      d == -absl::InfiniteDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expected a duration such as 5s, 250ms or 1m30s, got \"", text, "\""));
  }
  return d;
}

std::string FormatDurationProto(const google::protobuf::Duration& proto) {
  return absl::FormatDuration(absl::Seconds(proto.seconds()) +
                              absl::Nanoseconds(proto.nanos()));
}

}  // namespace sluice::wire
