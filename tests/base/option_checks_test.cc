// SPDX-License-Identifier: Apache-2.0
#include "base/option_checks.h"

#include <cstdint>
#include <limits>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace sluice::base {
namespace {

TEST(OptionChecksTest, MustBeNamesTheSettingTheRuleAndTheValue) {
  absl::Status s = MustBe("--threads", "even", "3");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "--threads must be even, got 3");
}

TEST(OptionChecksTest, PositiveDurationRefusesZeroAndBelow) {
  EXPECT_TRUE(CheckPositive("--timeout", absl::Nanoseconds(1)).ok());
  EXPECT_TRUE(CheckPositive("--timeout", absl::InfiniteDuration()).ok());
  EXPECT_EQ(CheckPositive("--timeout", absl::ZeroDuration()).message(),
            "--timeout must be > 0, got 0");
  EXPECT_EQ(CheckPositive("--timeout", absl::Milliseconds(-1500)).message(),
            "--timeout must be > 0, got -1.5s");
  EXPECT_EQ(CheckPositive("--timeout", -absl::InfiniteDuration()).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(OptionChecksTest, PositiveCountRefusesZeroAndBelow) {
  EXPECT_TRUE(CheckPositive("Options.count", 1).ok());
  EXPECT_EQ(CheckPositive("Options.count", 0).message(),
            "Options.count must be >= 1, got 0");
  EXPECT_EQ(CheckPositive("Options.count", std::numeric_limits<int64_t>::min())
                .message(),
            "Options.count must be >= 1, got -9223372036854775808");
}

TEST(OptionChecksTest, AtLeastTakesTheBoundItself) {
  EXPECT_TRUE(
      CheckAtLeast("--interval", absl::Milliseconds(10), absl::Milliseconds(10))
          .ok());
  EXPECT_EQ(CheckAtLeast("--interval", absl::Microseconds(9999),
                         absl::Milliseconds(10))
                .message(),
            "--interval must be at least 10ms, got 9.999ms");
  EXPECT_TRUE(CheckAtLeast("--replicas", uint32_t{1}, 1).ok());
  EXPECT_EQ(CheckAtLeast("--replicas", uint32_t{0}, 1).message(),
            "--replicas must be at least 1, got 0");
}

TEST(OptionChecksTest, InRangeTakesBothBounds) {
  EXPECT_TRUE(CheckInRange("--threads", 1, 1, 256).ok());
  EXPECT_TRUE(CheckInRange("--threads", 256, 1, 256).ok());
  EXPECT_EQ(CheckInRange("--threads", 0, 1, 256).message(),
            "--threads must be in [1, 256], got 0");
  EXPECT_EQ(CheckInRange("--threads", 257, 1, 256).message(),
            "--threads must be in [1, 256], got 257");
  // The largest uint32_t is compared as the number it is, not wrapped.
  EXPECT_EQ(
      CheckInRange("--leaves", std::numeric_limits<uint32_t>::max(), 0, 100000)
          .message(),
      "--leaves must be in [0, 100000], got 4294967295");
}

}  // namespace
}  // namespace sluice::base
