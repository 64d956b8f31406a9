// SPDX-License-Identifier: Apache-2.0
#include "tests/testing/fake_clock.h"

#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "server/core/events.h"
#include "tests/testing/recording_event_sink.h"

namespace sluice::testing {
namespace {

TEST(FakeClockTest, StartsAtFixedNonEpochTime) {
  FakeClock clock;
  EXPECT_EQ(clock.Now(), absl::FromUnixSeconds(1767225600));  // 2026-01-01Z
  EXPECT_NE(clock.Now(), absl::UnixEpoch());
  EXPECT_EQ(clock.Now(), clock.Now());
}

TEST(FakeClockTest, AdvanceAndSetTime) {
  FakeClock clock;
  const absl::Time start = clock.Now();
  clock.Advance(absl::Milliseconds(1500));
  EXPECT_EQ(clock.Now() - start, absl::Milliseconds(1500));
  const absl::Time later = start + absl::Hours(5);
  clock.SetTime(later);
  EXPECT_EQ(clock.Now(), later);
}

TEST(FakeClockTest, ConcurrentAdvanceLosesNoStep) {
  FakeClock clock;
  const absl::Time start = clock.Now();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&clock] {
      for (int i = 0; i < 1000; ++i) {
        clock.Advance(absl::Milliseconds(1));
        (void)clock.Now();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(clock.Now() - start, absl::Seconds(4));
}

TEST(RecordingEventSinkTest, RecordsInOrder) {
  RecordingEventSink sink;
  core::BreakerTransition a;
  a.dependency = "a";
  a.to = core::BreakerState::kOpen;
  core::BreakerTransition b;
  b.dependency = "b";
  sink.OnBreakerTransition(a);
  sink.OnBreakerTransition(b);
  ASSERT_EQ(sink.size(), 2u);
  EXPECT_EQ(sink.transitions()[0].dependency, "a");
  EXPECT_EQ(sink.transitions()[0].to, core::BreakerState::kOpen);
  EXPECT_EQ(sink.transitions()[1].dependency, "b");
  sink.Clear();
  EXPECT_EQ(sink.size(), 0u);
}

}  // namespace
}  // namespace sluice::testing
