// SPDX-License-Identifier: Apache-2.0
#include "loadgen_schedule.h"

#include <cmath>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace sluice::examples {
namespace {

absl::Status Bad(absl::string_view segment, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("schedule segment \"", segment, "\": ", why));
}

bool ParseRate(absl::string_view text, double* rate) {
  return absl::SimpleAtod(absl::StripAsciiWhitespace(text), rate) &&
         std::isfinite(*rate) && *rate >= 0;
}

// Requests in the first `t` seconds of a segment.
double SegmentCount(const RateSchedule::Segment& s, double t) {
  const double length = absl::ToDoubleSeconds(s.length);
  const double slope = length > 0 ? (s.to - s.from) / length : 0;
  return s.from * t + slope * t * t / 2;
}

}  // namespace

absl::StatusOr<RateSchedule> RateSchedule::Parse(absl::string_view spec) {
  std::vector<Segment> segments;
  for (absl::string_view line : absl::StrSplit(spec, '\n')) {
    line = line.substr(0, line.find('#'));
    for (absl::string_view item : absl::StrSplit(line, ',')) {
      item = absl::StripAsciiWhitespace(item);
      if (item.empty()) continue;
      const size_t colon = item.find(':');
      if (colon == absl::string_view::npos) {
        return Bad(item, "want LENGTH:RATE or LENGTH:FROM-TO, e.g. 10s:200");
      }
      Segment s;
      if (!absl::ParseDuration(
              std::string(absl::StripAsciiWhitespace(item.substr(0, colon))),
              &s.length) ||
          s.length <= absl::ZeroDuration()) {
        return Bad(item, "the length must be a positive duration, e.g. 10s");
      }
      const absl::string_view rates = item.substr(colon + 1);
      const size_t dash = rates.find('-');
      const bool ok =
          dash == absl::string_view::npos
              ? ParseRate(rates, &s.from) && (s.to = s.from, true)
              : ParseRate(rates.substr(0, dash), &s.from) &&
                    ParseRate(rates.substr(dash + 1), &s.to);
      if (!ok) return Bad(item, "rates must be numbers >= 0 (per second)");
      segments.push_back(s);
    }
  }
  if (segments.empty()) {
    return absl::InvalidArgumentError("schedule: no segments");
  }
  return RateSchedule(std::move(segments));
}

RateSchedule::RateSchedule(std::vector<Segment> segments)
    : segments_(std::move(segments)) {
  double at = 0;
  double count = 0;
  for (const Segment& s : segments_) {
    start_s_.push_back(at);
    start_count_.push_back(count);
    const double length = absl::ToDoubleSeconds(s.length);
    at += length;
    count += SegmentCount(s, length);
  }
  length_ = absl::Seconds(at);
  total_count_ = count;
}

double RateSchedule::RateAt(absl::Duration t) const {
  const double ts = absl::ToDoubleSeconds(t);
  for (size_t i = 0; i < segments_.size(); ++i) {
    const Segment& s = segments_[i];
    const double length = absl::ToDoubleSeconds(s.length);
    const double into = ts - start_s_[i];
    if (into >= 0 && into < length) {
      return s.from + (s.to - s.from) * into / length;
    }
  }
  return 0;
}

double RateSchedule::CountBy(absl::Duration t) const {
  const double ts = absl::ToDoubleSeconds(t);
  if (ts <= 0) return 0;
  for (size_t i = 0; i < segments_.size(); ++i) {
    const double length = absl::ToDoubleSeconds(segments_[i].length);
    const double into = ts - start_s_[i];
    if (into < length) return start_count_[i] + SegmentCount(segments_[i], into);
  }
  return total_count_;
}

std::optional<absl::Duration> RateSchedule::SendTime(uint64_t n) const {
  const double m = static_cast<double>(n);
  if (m >= total_count_) return std::nullopt;
  for (size_t i = 0; i < segments_.size(); ++i) {
    const Segment& s = segments_[i];
    const double length = absl::ToDoubleSeconds(s.length);
    const double in_segment = SegmentCount(s, length);
    const double k = m - start_count_[i];
    if (k >= in_segment) continue;
    // Solve from * t + slope * t^2 / 2 = k for the t in [0, length].
    const double slope = (s.to - s.from) / length;
    double t = 0;
    if (std::abs(slope) < 1e-12) {
      t = k / s.from;
    } else {
      const double disc = std::max(0.0, s.from * s.from + 2 * slope * k);
      t = (std::sqrt(disc) - s.from) / slope;
    }
    t = std::min(std::max(t, 0.0), length);
    return absl::Seconds(start_s_[i] + t);
  }
  return std::nullopt;
}

}  // namespace sluice::examples
