// SPDX-License-Identifier: Apache-2.0
#include "server/rpc/admin_events.h"

#include <atomic>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/stats_recorder.h"

namespace sluice::rpc {
namespace {

v1::Event PolicyEvent(const std::string& dep, uint64_t version) {
  return PolicyChangedEvent(dep, version - 1, version, "test");
}

std::vector<v1::Event> Drain(EventHub::Subscription* sub) {
  std::vector<v1::Event> out;
  v1::Event e;
  while (sub->Pop(&e)) out.push_back(e);
  return out;
}

TEST(EventHubTest, DeliversInOrderWithReplicaAndTime) {
  EventHub hub({/*queue_size=*/16, /*replica_id=*/"r1"});
  auto sub = hub.Subscribe("", nullptr);
  hub.Publish(PolicyEvent("a", 1));
  hub.Publish(PolicyEvent("b", 2));
  std::vector<v1::Event> got = Drain(sub.get());
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].dependency(), "a");
  EXPECT_EQ(got[1].new_version(), 2u);
  EXPECT_EQ(got[0].replica_id(), "r1");
  EXPECT_GT(got[0].time().seconds(), 0);
}

TEST(EventHubTest, FiltersByDependencyButStoreEventsReachEveryone) {
  EventHub hub({16, "r1"});
  auto only_a = hub.Subscribe("a", nullptr);
  hub.Publish(PolicyEvent("a", 1));
  hub.Publish(PolicyEvent("b", 2));
  hub.Publish(StoreEvent(false, "redis down"));
  std::vector<v1::Event> got = Drain(only_a.get());
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].dependency(), "a");
  EXPECT_EQ(got[1].kind(), v1::Event::STORE_DOWN);
}

TEST(EventHubTest, SlowWatcherLosesOldestAndIsToldHowMany) {
  EventHub hub({/*queue_size=*/4, "r1"});
  auto slow = hub.Subscribe("", nullptr);
  auto fast = hub.Subscribe("", nullptr);
  std::vector<v1::Event> fast_got;
  for (uint64_t v = 1; v <= 10; ++v) {
    hub.Publish(PolicyEvent("a", v));
    std::vector<v1::Event> got = Drain(fast.get());
    fast_got.insert(fast_got.end(), got.begin(), got.end());
  }
  // The fast watcher saw everything.
  ASSERT_EQ(fast_got.size(), 10u);

  std::vector<v1::Event> got = Drain(slow.get());
  ASSERT_EQ(got.size(), 5u);
  EXPECT_EQ(got[0].kind(), v1::Event::EVENTS_DROPPED);
  EXPECT_EQ(got[0].missed(), 6u);
  // The newest four survive, in order.
  EXPECT_EQ(got[1].new_version(), 7u);
  EXPECT_EQ(got[4].new_version(), 10u);
  EXPECT_EQ(hub.dropped(), 6u);
  // Once told, the count starts again.
  hub.Publish(PolicyEvent("a", 11));
  got = Drain(slow.get());
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].new_version(), 11u);
}

TEST(EventHubTest, PublishNeverWaitsForAWatcherAndNotifies) {
  EventHub hub({8, "r1"});
  std::atomic<int> notified{0};
  auto sub = hub.Subscribe("", [&] { ++notified; });
  // Nobody reads: 100k publishes from 4 threads finish regardless.
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 25000; ++i) hub.Publish(PolicyEvent("a", 1));
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(notified.load(), 100000);
  std::vector<v1::Event> got = Drain(sub.get());
  ASSERT_EQ(got.size(), 9u);
  EXPECT_EQ(got[0].missed(), 100000u - 8u);
}

TEST(EventHubTest, UnsubscribedWatcherGetsNothing) {
  EventHub hub({8, "r1"});
  auto sub = hub.Subscribe("", nullptr);
  EXPECT_EQ(hub.watchers(), 1u);
  hub.Unsubscribe(sub.get());
  EXPECT_EQ(hub.watchers(), 0u);
  hub.Publish(PolicyEvent("a", 1));
  EXPECT_TRUE(Drain(sub.get()).empty());
}

// Its metrics: the watchers open now and the events dropped for them.
TEST(EventHubTest, StatsAreTheOpenWatchersAndTheDroppedEvents) {
  EventHub hub({/*queue_size=*/2, "r1"});
  using sluice::testing::StatsRecorder;
  EXPECT_EQ(StatsRecorder(hub).Sum("sluice_watchers"), 0);
  EXPECT_EQ(StatsRecorder(hub).Sum("sluice_watch_events_dropped_total"), 0);
  auto first = hub.Subscribe("", nullptr);
  auto second = hub.Subscribe("", nullptr);
  for (uint64_t v = 1; v <= 5; ++v) hub.Publish(PolicyEvent("a", v));
  StatsRecorder stats(hub);
  EXPECT_EQ(stats.Sum("sluice_watchers"), 2);
  EXPECT_EQ(stats.Sum("sluice_watch_events_dropped_total"), hub.dropped());
  EXPECT_GT(hub.dropped(), 0u);
  hub.Unsubscribe(first.get());
  EXPECT_EQ(StatsRecorder(hub).Sum("sluice_watchers"), 1);
}

TEST(EventHubTest, BreakerTransitionCarriesCauseAndGeneration) {
  EventHub hub({8, "r1"});
  auto sub = hub.Subscribe("inventory", nullptr);
  core::BreakerTransition t;
  t.dependency = "inventory";
  t.from = core::BreakerState::kClosed;
  t.to = core::BreakerState::kOpen;
  t.cause = "5 consecutive failures";
  t.at = absl::FromUnixSeconds(1767225600);
  t.generation = 3;
  t.open_until = t.at + absl::Seconds(15);
  hub.OnBreakerTransition(t);
  std::vector<v1::Event> got = Drain(sub.get());
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].kind(), v1::Event::BREAKER_TRANSITION);
  EXPECT_EQ(got[0].from(), v1::CLOSED);
  EXPECT_EQ(got[0].to(), v1::OPEN);
  EXPECT_EQ(got[0].cause(), "5 consecutive failures");
  EXPECT_EQ(got[0].breaker_generation(), 3u);
  EXPECT_EQ(got[0].time().seconds(), 1767225600);
  EXPECT_EQ(got[0].open_until().seconds(), 1767225615);
}

TEST(EventHubTest, AdaptiveChangesBecomeTheirKindsWithOldAndNewValues) {
  EventHub hub({8, "r1"});
  auto sub = hub.Subscribe("search", nullptr);
  core::AdaptiveChange c;
  c.dependency = "search";
  c.key = "tenant-1";
  c.kind = core::AdaptiveChange::Kind::kLimit;
  c.from = 40;
  c.to = 22;
  c.cause = "mean latency 48ms > 1.5 x baseline 20ms at 31.2 in flight";
  c.at = absl::FromUnixSeconds(1767225600);
  hub.OnAdaptiveChange(c);
  c.kind = core::AdaptiveChange::Kind::kThrottleStarted;
  c.from = 0;
  c.to = 0.25;
  c.cause = "accepts 30 of 80 requests";
  hub.OnAdaptiveChange(c);
  c.kind = core::AdaptiveChange::Kind::kThrottleStopped;
  c.from = 0.25;
  c.to = 0;
  hub.OnAdaptiveChange(c);
  // Another dependency's change does not reach this watcher.
  c.dependency = "inventory";
  hub.OnAdaptiveChange(c);

  std::vector<v1::Event> got = Drain(sub.get());
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].kind(), v1::Event::ADAPTIVE_LIMIT_CHANGED);
  EXPECT_EQ(got[0].dependency(), "search");
  EXPECT_EQ(got[0].key(), "tenant-1");
  EXPECT_EQ(got[0].old_value(), 40);
  EXPECT_EQ(got[0].new_value(), 22);
  EXPECT_EQ(got[0].cause(),
            "mean latency 48ms > 1.5 x baseline 20ms at 31.2 in flight");
  EXPECT_EQ(got[0].time().seconds(), 1767225600);
  EXPECT_EQ(got[0].replica_id(), "r1");
  EXPECT_EQ(got[1].kind(), v1::Event::THROTTLE_STARTED);
  EXPECT_EQ(got[1].old_value(), 0);
  EXPECT_EQ(got[1].new_value(), 0.25);
  EXPECT_EQ(got[2].kind(), v1::Event::THROTTLE_STOPPED);
  EXPECT_EQ(got[2].old_value(), 0.25);
  EXPECT_EQ(got[2].new_value(), 0);
}

}  // namespace
}  // namespace sluice::rpc
