// SPDX-License-Identifier: Apache-2.0
#include "backoff.h"

#include "gtest/gtest.h"

namespace sluice::client::internal {
namespace {

const absl::Time kStart = absl::FromUnixSeconds(1767225600);  // 2026-01-01

Backoff::Options NoJitter() {
  Backoff::Options options;
  options.after_failures = 3;
  options.initial = absl::Milliseconds(100);
  options.max = absl::Milliseconds(400);
  options.jitter = 0;
  return options;
}

TEST(BackoffTest, AsksUntilThresholdOfFailuresInARow) {
  Backoff backoff(NoJitter());
  absl::Time now = kStart;
  backoff.RecordFailure(now);
  backoff.RecordFailure(now);
  EXPECT_TRUE(backoff.ShouldAsk(now));
  backoff.RecordSuccess();  // Resets the run.
  backoff.RecordFailure(now);
  backoff.RecordFailure(now);
  EXPECT_TRUE(backoff.ShouldAsk(now));
  backoff.RecordFailure(now);
  EXPECT_FALSE(backoff.ShouldAsk(now));
  EXPECT_TRUE(backoff.backing_off());
}

TEST(BackoffTest, OneProbeAfterThePeriodThenDoublingUpToMax) {
  Backoff backoff(NoJitter());
  absl::Time now = kStart;
  for (int i = 0; i < 3; ++i) backoff.RecordFailure(now);
  EXPECT_EQ(backoff.current(), absl::Milliseconds(100));

  now += absl::Milliseconds(99);
  EXPECT_FALSE(backoff.ShouldAsk(now));
  now += absl::Milliseconds(1);
  EXPECT_TRUE(backoff.ShouldAsk(now));   // The probe.
  EXPECT_FALSE(backoff.ShouldAsk(now));  // Everyone else waits for it.
  backoff.RecordFailure(now);
  EXPECT_EQ(backoff.current(), absl::Milliseconds(200));

  now += absl::Milliseconds(199);
  EXPECT_FALSE(backoff.ShouldAsk(now));
  now += absl::Milliseconds(1);
  EXPECT_TRUE(backoff.ShouldAsk(now));
  backoff.RecordFailure(now);
  EXPECT_EQ(backoff.current(), absl::Milliseconds(400));

  now += absl::Milliseconds(400);
  EXPECT_TRUE(backoff.ShouldAsk(now));
  backoff.RecordFailure(now);
  EXPECT_EQ(backoff.current(), absl::Milliseconds(400));  // Capped.
}

TEST(BackoffTest, EndPeriodLetsOneProbeGoAtOnce) {
  Backoff backoff(NoJitter());
  absl::Time now = kStart;
  EXPECT_TRUE(backoff.ShouldAsk(now));
  backoff.EndPeriod(now);  // Not backing off: nothing to end.
  EXPECT_FALSE(backoff.backing_off());
  for (int i = 0; i < 3; ++i) backoff.RecordFailure(now);
  now += absl::Milliseconds(10);
  EXPECT_FALSE(backoff.ShouldAsk(now));
  backoff.EndPeriod(now);  // The connection came back 90 ms early.
  EXPECT_TRUE(backoff.ShouldAsk(now));   // The probe.
  EXPECT_FALSE(backoff.ShouldAsk(now));  // Everyone else waits for it.
  backoff.RecordFailure(now);            // It failed after all: doubling.
  EXPECT_EQ(backoff.current(), absl::Milliseconds(200));
  EXPECT_FALSE(backoff.ShouldAsk(now + absl::Milliseconds(199)));
  backoff.EndPeriod(now + absl::Milliseconds(50));
  EXPECT_TRUE(backoff.ShouldAsk(now + absl::Milliseconds(50)));
  backoff.RecordSuccess();
  EXPECT_FALSE(backoff.backing_off());
}

TEST(BackoffTest, StragglerFailuresDoNotExtendThePeriod) {
  Backoff backoff(NoJitter());
  absl::Time now = kStart;
  for (int i = 0; i < 3; ++i) backoff.RecordFailure(now);
  // Calls that were already out fail later; no probe was sent.
  backoff.RecordFailure(now + absl::Milliseconds(50));
  backoff.RecordFailure(now + absl::Milliseconds(60));
  EXPECT_EQ(backoff.current(), absl::Milliseconds(100));
  EXPECT_TRUE(backoff.ShouldAsk(now + absl::Milliseconds(100)));
}

TEST(BackoffTest, SuccessfulProbeEndsTheBackoff) {
  Backoff backoff(NoJitter());
  absl::Time now = kStart;
  for (int i = 0; i < 3; ++i) backoff.RecordFailure(now);
  now += absl::Milliseconds(100);
  ASSERT_TRUE(backoff.ShouldAsk(now));
  backoff.RecordSuccess();
  EXPECT_FALSE(backoff.backing_off());
  EXPECT_TRUE(backoff.ShouldAsk(now));
  EXPECT_TRUE(backoff.ShouldAsk(now));
  // And it takes a full run of failures again to back off.
  backoff.RecordFailure(now);
  EXPECT_TRUE(backoff.ShouldAsk(now));
}

TEST(BackoffTest, JitterStaysInItsBand) {
  Backoff::Options options = NoJitter();
  options.jitter = 0.2;
  options.after_failures = 1;
  for (uint64_t seed = 1; seed <= 50; ++seed) {
    options.seed = seed;
    Backoff backoff(options);
    backoff.RecordFailure(kStart);
    EXPECT_FALSE(backoff.ShouldAsk(kStart + absl::Milliseconds(79)));
    EXPECT_TRUE(backoff.ShouldAsk(kStart + absl::Milliseconds(121)));
  }
}

}  // namespace
}  // namespace sluice::client::internal
