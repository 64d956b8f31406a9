// SPDX-License-Identifier: Apache-2.0
// The engine's observers in sluiced: the log lines of adaptive moves and the
// fan-out to every sink.

#include "server/app/event_sinks.h"

#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "spdlog/spdlog.h"
#include "tests/testing/captured_log.h"

namespace sluice::app {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

core::AdaptiveChange Change(core::AdaptiveChange::Kind kind, double from,
                            double to) {
  core::AdaptiveChange c;
  c.dependency = "search";
  c.kind = kind;
  c.from = from;
  c.to = to;
  c.cause = "why";
  c.at = absl::FromUnixSeconds(1767225600);
  return c;
}

TEST(LoggingEventSinkTest, WarnsWhenCapacityShrinksInformsWhenItReturns) {
  testing::CapturedLog log;
  LoggingEventSink sink;
  sink.OnAdaptiveChange(Change(core::AdaptiveChange::Kind::kLimit, 40, 22));
  sink.OnAdaptiveChange(Change(core::AdaptiveChange::Kind::kLimit, 22, 25));
  sink.OnAdaptiveChange(
      Change(core::AdaptiveChange::Kind::kThrottleStarted, 0, 0.25));
  core::AdaptiveChange keyed =
      Change(core::AdaptiveChange::Kind::kThrottleStopped, 0.25, 0);
  keyed.key = "tenant-1";
  sink.OnAdaptiveChange(keyed);

  const auto lines = log.lines();
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0].first, spdlog::level::warn);
  EXPECT_EQ(lines[0].second, "adaptive limit \"search\": 40 -> 22 (why)");
  EXPECT_EQ(lines[1].first, spdlog::level::info);
  EXPECT_EQ(lines[1].second, "adaptive limit \"search\": 22 -> 25 (why)");
  EXPECT_EQ(lines[2].first, spdlog::level::warn);
  EXPECT_EQ(lines[2].second,
            "adaptive throttle \"search\": started, refusing 25.0% of calls "
            "(why)");
  EXPECT_EQ(lines[3].first, spdlog::level::info);
  EXPECT_EQ(lines[3].second,
            "adaptive throttle \"search\" key \"tenant-1\": stopped (why)");
}

// Records what it is told, tagged with its name.
class TaggingSink final : public core::EventSink {
 public:
  TaggingSink(std::string name, std::vector<std::string>* seen)
      : name_(std::move(name)), seen_(seen) {}
  void OnBreakerTransition(const core::BreakerTransition& t) override {
    seen_->push_back(name_ + ":breaker:" + t.dependency);
  }
  void OnAdaptiveChange(const core::AdaptiveChange& c) override {
    seen_->push_back(name_ + ":adaptive:" + c.dependency + "->" +
                     std::to_string(static_cast<int>(c.to)));
  }

 private:
  const std::string name_;
  std::vector<std::string>* const seen_;
};

TEST(FanOutEventSinkTest, ForwardsEveryEventToEachSinkInOrder) {
  std::vector<std::string> seen;
  TaggingSink a("a", &seen);
  TaggingSink b("b", &seen);
  FanOutEventSink fan({&a, nullptr, &b});
  fan.OnAdaptiveChange(Change(core::AdaptiveChange::Kind::kLimit, 10, 11));
  core::BreakerTransition t;
  t.dependency = "inventory";
  fan.OnBreakerTransition(t);
  EXPECT_THAT(seen, ElementsAre("a:adaptive:search->11", "b:adaptive:search->11",
                                "a:breaker:inventory", "b:breaker:inventory"));
}

}  // namespace
}  // namespace sluice::app
