// SPDX-License-Identifier: Apache-2.0
#include "server/app/event_sinks.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "spdlog/spdlog.h"

namespace sluice::app {

void LoggingEventSink::OnBreakerTransition(const core::BreakerTransition& t) {
  const std::string key =
      t.key.empty() ? "" : absl::StrCat(" key \"", t.key, "\"");
  const std::string until =
      t.open_until == absl::InfinitePast()
          ? ""
          : absl::StrCat(", open until ",
                         absl::FormatTime("%H:%M:%E3S", t.open_until,
                                          absl::LocalTimeZone()));
  const spdlog::level::level_enum level = t.to == core::BreakerState::kClosed
                                              ? spdlog::level::info
                                              : spdlog::level::warn;
  spdlog::log(level, "breaker \"{}\"{}: {} -> {} ({}; generation {}{})",
              t.dependency, key, std::string(core::BreakerStateName(t.from)),
              std::string(core::BreakerStateName(t.to)), t.cause, t.generation,
              until);
}

void LoggingEventSink::OnAdaptiveChange(const core::AdaptiveChange& c) {
  const std::string key =
      c.key.empty() ? "" : absl::StrCat(" key \"", c.key, "\"");
  switch (c.kind) {
    case core::AdaptiveChange::Kind::kLimit:
      spdlog::log(c.to > c.from ? spdlog::level::info : spdlog::level::warn,
                  "adaptive limit \"{}\"{}: {} -> {} ({})", c.dependency, key,
                  c.from, c.to, c.cause);
      return;
    case core::AdaptiveChange::Kind::kThrottleStarted:
      spdlog::warn(
          "adaptive throttle \"{}\"{}: started, refusing {:.1f}% of calls "
          "({})",
          c.dependency, key, 100 * c.to, c.cause);
      return;
    case core::AdaptiveChange::Kind::kThrottleStopped:
      spdlog::info("adaptive throttle \"{}\"{}: stopped ({})", c.dependency,
                   key, c.cause);
      return;
  }
}

FanOutEventSink::FanOutEventSink(std::initializer_list<core::EventSink*> sinks)
    : sinks_([&] {
        std::vector<core::EventSink*> present;
        for (core::EventSink* sink : sinks) {
          if (sink != nullptr) present.push_back(sink);
        }
        return present;
      }()) {}

void FanOutEventSink::OnBreakerTransition(const core::BreakerTransition& t) {
  for (core::EventSink* sink : sinks_) sink->OnBreakerTransition(t);
}

void FanOutEventSink::OnAdaptiveChange(const core::AdaptiveChange& c) {
  for (core::EventSink* sink : sinks_) sink->OnAdaptiveChange(c);
}

void FanOutEventSink::OnClusterDemand(const std::string& dependency,
                                      const std::string& key) {
  for (core::EventSink* sink : sinks_) sink->OnClusterDemand(dependency, key);
}

}  // namespace sluice::app
