// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_WIRE_TIME_H_
#define SLUICE_WIRE_TIME_H_

// google.protobuf.Duration and Timestamp <-> absl, and the duration syntax
// of the command-line tools. Pure functions; safe for concurrent use.

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "google/protobuf/duration.pb.h"
#include "google/protobuf/timestamp.pb.h"

namespace sluice::wire {

// Clamps to the range google.protobuf.Duration documents (about +-10,000
// years), so an infinite duration becomes the largest one.
google::protobuf::Duration DurationToProto(absl::Duration duration);
void DurationToProto(absl::Duration duration, google::protobuf::Duration* out);

// Rejects what JSON parsing would refuse but a binary message can carry:
// seconds out of range, nanos beyond +-999,999,999, mixed signs. The error
// is INVALID_ARGUMENT
//   "<field> must be a valid duration, got {seconds: 1, nanos: -5}".
// Negative durations are valid here; the caller states its own sign rule.
absl::StatusOr<absl::Duration> DurationFromProto(
    const google::protobuf::Duration& proto, absl::string_view field);

// Exact for instants within +-292 years of the epoch, including before it
// (-1.5 s is seconds -2, nanos 500000000).
google::protobuf::Timestamp TimestampToProto(absl::Time time);
absl::Time TimestampFromProto(const google::protobuf::Timestamp& proto);

// A command-line duration as absl::ParseDuration reads it ("5s", "250ms",
// "1m30s"); INVALID_ARGUMENT otherwise. The sign rule is the caller's.
absl::StatusOr<absl::Duration> ParseDurationFlag(absl::string_view text);

// A duration for people, as absl::FormatDuration writes it ("1m30s").
std::string FormatDurationProto(const google::protobuf::Duration& proto);

}  // namespace sluice::wire

#endif  // SLUICE_WIRE_TIME_H_
