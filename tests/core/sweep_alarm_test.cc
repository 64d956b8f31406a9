// SPDX-License-Identifier: Apache-2.0
// SweepAlarm, the wait of the housekeeping thread: due() is the earliest
// time published since the last Reset, and a Wait ends when due() goes
// below what it planned with, when stopped, or at its deadline. No test
// waits for real time to pass: the deadlines are either past already or an
// hour away, so a wake-up that is lost hangs the test (and ctest's timeout
// fails it) instead of passing it by luck.
#include "server/core/sweep_alarm.h"

#include <thread>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace sluice::core {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1'780'000'000);
constexpr absl::Duration kHour = absl::Hours(1);

TEST(SweepAlarm, DueIsTheEarliestPublishedSinceTheLastReset) {
  SweepAlarm alarm;
  EXPECT_EQ(alarm.due(), absl::InfiniteFuture());
  alarm.Lower(kT0 + absl::Seconds(5));
  alarm.Lower(kT0 + absl::Seconds(2));
  alarm.Lower(kT0 + absl::Seconds(9));  // later: no effect
  EXPECT_EQ(alarm.due(), kT0 + absl::Seconds(2));
  alarm.Lower(absl::InfinitePast());
  EXPECT_EQ(alarm.due(), absl::InfinitePast());
  alarm.Reset();
  EXPECT_EQ(alarm.due(), absl::InfiniteFuture());
  alarm.Lower(kT0 + absl::Seconds(9));
  EXPECT_EQ(alarm.due(), kT0 + absl::Seconds(9));
}

TEST(SweepAlarm, AWaitWithNothingLoweredEndsAtItsDeadline) {
  SweepAlarm alarm;
  alarm.Lower(kT0 + absl::Seconds(5));
  // Not below what the wait planned with (equal is not below).
  EXPECT_EQ(alarm.Wait(kT0 + absl::Seconds(5), absl::InfinitePast()),
            SweepAlarm::Wake::kDeadline);
  EXPECT_EQ(alarm.Wait(absl::InfinitePast(), absl::InfinitePast()),
            SweepAlarm::Wake::kDeadline);
}

TEST(SweepAlarm, ALowerBetweenThePlanAndTheWaitEndsItAtOnce) {
  SweepAlarm alarm;
  alarm.Lower(kT0 + absl::Seconds(5));
  const absl::Time planned = alarm.due();
  alarm.Lower(kT0 + absl::Seconds(1));
  EXPECT_EQ(alarm.Wait(planned, absl::Now() + kHour),
            SweepAlarm::Wake::kLowered);
}

TEST(SweepAlarm, ALowerWakesAWaitOnAnotherThread) {
  SweepAlarm alarm;
  const absl::Time planned = alarm.due();  // nothing due
  SweepAlarm::Wake wake = SweepAlarm::Wake::kDeadline;
  std::thread sleeper([&] { wake = alarm.Wait(planned, absl::InfiniteFuture()); });
  alarm.Lower(kT0);
  sleeper.join();
  EXPECT_EQ(wake, SweepAlarm::Wake::kLowered);
}

TEST(SweepAlarm, StopEndsEveryWaitNowAndLater) {
  SweepAlarm alarm;
  SweepAlarm::Wake wake = SweepAlarm::Wake::kDeadline;
  // InfinitePast: no due time can go below it.
  std::thread sleeper(
      [&] { wake = alarm.Wait(absl::InfinitePast(), absl::InfiniteFuture()); });
  alarm.Stop();
  sleeper.join();
  EXPECT_EQ(wake, SweepAlarm::Wake::kStopped);
  alarm.Lower(absl::InfinitePast());
  EXPECT_EQ(alarm.Wait(absl::InfiniteFuture(), absl::InfiniteFuture()),
            SweepAlarm::Wake::kStopped);
}

TEST(PlanSweep, WakesAtTheDueTimeWithinTheGaps) {
  const absl::Time earliest = kT0 + absl::Milliseconds(100);
  const absl::Time latest = kT0 + absl::Seconds(1);
  // Due in between: then, and an earlier due time moves it.
  SweepPlan plan = PlanSweep(kT0 + absl::Milliseconds(400), earliest, latest);
  EXPECT_EQ(plan.wake, kT0 + absl::Milliseconds(400));
  EXPECT_EQ(plan.wake_if_below, kT0 + absl::Milliseconds(400));
  // Nothing due: the longest gap, and anything due before it moves it.
  plan = PlanSweep(absl::InfiniteFuture(), earliest, latest);
  EXPECT_EQ(plan.wake, latest);
  EXPECT_EQ(plan.wake_if_below, latest);
  // Due already (a change): the shortest gap, which nothing can move.
  plan = PlanSweep(absl::InfinitePast(), earliest, latest);
  EXPECT_EQ(plan.wake, earliest);
  EXPECT_EQ(plan.wake_if_below, absl::InfinitePast());
  plan = PlanSweep(kT0, earliest, latest);
  EXPECT_EQ(plan.wake, earliest);
  EXPECT_EQ(plan.wake_if_below, absl::InfinitePast());
}

}  // namespace
}  // namespace sluice::core
