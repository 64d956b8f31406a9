// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_CLIENT_SDK_EXAMPLES_LOADGEN_SCHEDULE_H_
#define SLUICE_CLIENT_SDK_EXAMPLES_LOADGEN_SCHEDULE_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace sluice::examples {

// An offered load over time: segments of steady or linearly ramping request
// rates, one after the other. The n-th request is due when the integral of
// the rate reaches n, so a run sends the same requests at the same offsets
// whatever the answers (an open loop, as real users arrive).
// Immutable; safe for concurrent use.
class RateSchedule {
 public:
  struct Segment {
    absl::Duration length;
    double from = 0;  // requests per second at the segment's start
    double to = 0;    // ... and at its end (== from: a steady rate)
  };

  // Segments separated by commas or newlines, each LENGTH:RATE or
  // LENGTH:FROM-TO, e.g. "5s:100, 20s:100-600, 30s:600". '#' starts a
  // comment. Errors are INVALID_ARGUMENT naming the segment.
  static absl::StatusOr<RateSchedule> Parse(absl::string_view spec);

  absl::Duration length() const { return length_; }
  const std::vector<Segment>& segments() const { return segments_; }

  // Offered rate at offset `t` (0 outside the schedule).
  double RateAt(absl::Duration t) const;
  // Requests offered in [0, t): the integral of the rate.
  double CountBy(absl::Duration t) const;
  // Offset at which request `n` (from 0) is due; nullopt when the schedule
  // ends before it.
  std::optional<absl::Duration> SendTime(uint64_t n) const;

 private:
  explicit RateSchedule(std::vector<Segment> segments);

  std::vector<Segment> segments_;
  // Offsets and counts at each segment's start.
  std::vector<double> start_s_;
  std::vector<double> start_count_;
  absl::Duration length_;
  double total_count_ = 0;
};

}  // namespace sluice::examples

#endif  // SLUICE_CLIENT_SDK_EXAMPLES_LOADGEN_SCHEDULE_H_
