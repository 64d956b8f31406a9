// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_BASE_OPTION_CHECKS_H_
#define SLUICE_BASE_OPTION_CHECKS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace sluice::base {

// The range checks of the option validators (sluiced's flags, the SDK's
// ClientOptions). Each returns OK, or INVALID_ARGUMENT with the text
// MustBe writes. `name` is the setting as its user spells it:
// "--redis-timeout", "ClientOptions.report_timeout".

// "<name> must be <rule>, got <value>".
inline absl::Status MustBe(absl::string_view name, absl::string_view rule,
                           absl::string_view value) {
  return absl::InvalidArgumentError(
      absl::StrCat(name, " must be ", rule, ", got ", value));
}

// value > 0: "<name> must be > 0, got -1s".
inline absl::Status CheckPositive(absl::string_view name,
                                  absl::Duration value) {
  if (value > absl::ZeroDuration()) return absl::OkStatus();
  return MustBe(name, "> 0", absl::FormatDuration(value));
}

// value >= 1: "<name> must be >= 1, got 0". The SDK's wording; sluiced's
// flags say "at least 1" (CheckAtLeast), and users have seen both.
inline absl::Status CheckPositive(absl::string_view name, int64_t value) {
  if (value >= 1) return absl::OkStatus();
  return MustBe(name, ">= 1", absl::StrCat(value));
}

// value >= min: "<name> must be at least 10ms, got 5ms".
inline absl::Status CheckAtLeast(absl::string_view name, absl::Duration value,
                                 absl::Duration min) {
  if (value >= min) return absl::OkStatus();
  return MustBe(name, absl::StrCat("at least ", absl::FormatDuration(min)),
                absl::FormatDuration(value));
}

// value >= min: "<name> must be at least 1, got 0".
inline absl::Status CheckAtLeast(absl::string_view name, int64_t value,
                                 int64_t min) {
  if (value >= min) return absl::OkStatus();
  return MustBe(name, absl::StrCat("at least ", min), absl::StrCat(value));
}

// min <= value <= max: "<name> must be in [1, 256], got 0".
inline absl::Status CheckInRange(absl::string_view name, int64_t value,
                                 int64_t min, int64_t max) {
  if (value >= min && value <= max) return absl::OkStatus();
  return MustBe(name, absl::StrCat("in [", min, ", ", max, "]"),
                absl::StrCat(value));
}

}  // namespace sluice::base

#endif  // SLUICE_BASE_OPTION_CHECKS_H_
