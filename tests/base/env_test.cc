// SPDX-License-Identifier: Apache-2.0
// Periodic tasks: the schedule on a manual Env (driven by a fake clock),
// and the real Env's thread, which must stop and wake at once.
#include "base/env.h"

#include <memory>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/testing/fake_clock.h"
#include "tests/testing/manual_env.h"

namespace sluice::base {
namespace {

using ::sluice::testing::FakeClock;
using ::sluice::testing::ManualEnv;

TEST(ManualEnvTest, RunsWhatIsDueByTheTestsClock) {
  FakeClock clock;
  ManualEnv env(&clock);
  int runs = 0;
  PeriodicOptions options;
  options.first_run_in = absl::Seconds(1);
  auto task = env.StartPeriodic(options, [&] {
    ++runs;
    return absl::Seconds(10);
  });
  EXPECT_EQ(env.RunDue(), 0);
  clock.Advance(absl::Seconds(1));
  EXPECT_EQ(env.RunDue(), 1);
  EXPECT_EQ(env.RunDue(), 0);  // next due 10 s after the run
  clock.Advance(absl::Seconds(9));
  EXPECT_EQ(env.RunDue(), 0);
  clock.Advance(absl::Seconds(1));
  EXPECT_EQ(env.RunDue(), 1);
  EXPECT_EQ(env.RunAll(), 1);  // not due, run anyway
  EXPECT_EQ(runs, 3);
}

TEST(ManualEnvTest, TheIntervalComesFromEachRun) {
  FakeClock clock;
  ManualEnv env(&clock);
  absl::Duration next_in = absl::Milliseconds(200);
  auto task = env.StartPeriodic(PeriodicOptions(), [&] { return next_in; });
  EXPECT_EQ(env.RunDue(), 1);  // first_run_in zero: at once
  EXPECT_EQ(env.next_due(), clock.Now() + absl::Milliseconds(200));
  next_in = absl::Seconds(1);
  clock.Advance(absl::Milliseconds(200));
  EXPECT_EQ(env.RunDue(), 1);
  EXPECT_EQ(env.next_due(), clock.Now() + absl::Seconds(1));
}

TEST(ManualEnvTest, WakeRunsAfterTheGapUnlessSoonerDue) {
  FakeClock clock;
  ManualEnv env(&clock);
  PeriodicOptions options;
  options.first_run_in = absl::Seconds(10);
  options.wake_gap = absl::Milliseconds(50);
  int runs = 0;
  auto task = env.StartPeriodic(options, [&] {
    ++runs;
    return absl::Seconds(10);
  });
  task->Wake();
  EXPECT_EQ(env.next_due(), clock.Now() + absl::Milliseconds(50));
  clock.Advance(absl::Milliseconds(49));
  EXPECT_EQ(env.RunDue(), 0);
  task->Wake();  // a second wake does not postpone the first
  clock.Advance(absl::Milliseconds(1));
  EXPECT_EQ(env.RunDue(), 1);
  // The run answered the wakes: the next is an interval away.
  EXPECT_EQ(env.next_due(), clock.Now() + absl::Seconds(10));
  clock.Advance(absl::Seconds(9) + absl::Milliseconds(990));
  task->Wake();  // due sooner than the gap anyway
  EXPECT_EQ(env.next_due(), clock.Now() + absl::Milliseconds(10));
  EXPECT_EQ(runs, 1);
}

TEST(ManualEnvTest, AWakeDuringARunAsksForAnotherRun) {
  FakeClock clock;
  ManualEnv env(&clock);
  PeriodicOptions options;
  options.wake_gap = absl::Milliseconds(50);
  std::unique_ptr<PeriodicTask> task;
  bool wake_in_run = true;
  task = env.StartPeriodic(options, [&] {
    if (wake_in_run) task->Wake();
    wake_in_run = false;
    return absl::Seconds(1);
  });
  EXPECT_EQ(env.RunDue(), 1);
  EXPECT_EQ(env.next_due(), clock.Now() + absl::Milliseconds(50));
  clock.Advance(absl::Milliseconds(50));
  EXPECT_EQ(env.RunDue(), 1);
  EXPECT_EQ(env.next_due(), clock.Now() + absl::Seconds(1));
}

TEST(ManualEnvTest, AStoppedTaskNeverRunsAgain) {
  FakeClock clock;
  ManualEnv env(&clock);
  int runs = 0;
  auto task = env.StartPeriodic(PeriodicOptions(), [&] {
    ++runs;
    return absl::Seconds(1);
  });
  EXPECT_EQ(env.running(), 1);
  task->Stop();
  task->Stop();
  task->Wake();
  EXPECT_EQ(env.running(), 0);
  EXPECT_EQ(env.RunAll(), 0);
  task.reset();
  EXPECT_EQ(runs, 0);
}

// The real Env. Nothing here waits for time to pass: a task due in an hour
// must stop at once, and a wake must run it at once; a wait that times out
// fails the test.
TEST(DefaultEnvTest, StopDoesNotWaitForTheInterval) {
  int runs = 0;
  PeriodicOptions options;
  options.first_run_in = absl::Hours(1);
  auto task = Env::Default()->StartPeriodic(options, [&] {
    ++runs;
    return absl::Hours(1);
  });
  const absl::Time start = Env::Default()->Now();
  task->Stop();
  task->Stop();
  EXPECT_LT(Env::Default()->Now() - start, absl::Minutes(1));
  EXPECT_EQ(runs, 0);
}

TEST(DefaultEnvTest, WakeRunsAtOnceAndRunsFollowTheirInterval) {
  absl::Notification first, second;
  int runs = 0;  // the task's thread only, until Stop returns
  PeriodicOptions options;
  options.first_run_in = absl::Hours(1);
  auto task = Env::Default()->StartPeriodic(options, [&] {
    ++runs;
    if (runs == 1) {
      first.Notify();
      return absl::ZeroDuration();  // the next run at once
    }
    if (runs == 2) second.Notify();
    return absl::Hours(1);
  });
  task->Wake();
  ASSERT_TRUE(first.WaitForNotificationWithTimeout(absl::Minutes(1)));
  ASSERT_TRUE(second.WaitForNotificationWithTimeout(absl::Minutes(1)));
  task.reset();
  EXPECT_EQ(runs, 2);
}

}  // namespace
}  // namespace sluice::base
