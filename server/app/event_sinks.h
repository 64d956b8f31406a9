// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_APP_EVENT_SINKS_H_
#define SLUICE_SERVER_APP_EVENT_SINKS_H_

#include <initializer_list>
#include <string>
#include <vector>

#include "server/core/events.h"

namespace sluice::app {

// Logs every breaker transition and adaptive move, one line each: info for
// a close, a raised limit or throttling that stopped; warn otherwise. Safe
// for concurrent use.
class LoggingEventSink final : public core::EventSink {
 public:
  void OnBreakerTransition(const core::BreakerTransition& t) override;
  void OnAdaptiveChange(const core::AdaptiveChange& c) override;
};

// Hands every event to each of a fixed list of sinks, in order. The
// list is complete at construction, so the engine's observers are built
// before the engine. Safe for concurrent use if the sinks are.
class FanOutEventSink final : public core::EventSink {
 public:
  // Null entries are skipped. The sinks must outlive this object.
  FanOutEventSink(std::initializer_list<core::EventSink*> sinks);

  void OnBreakerTransition(const core::BreakerTransition& t) override;
  void OnAdaptiveChange(const core::AdaptiveChange& c) override;
  void OnClusterDemand(const std::string& dependency,
                       const std::string& key) override;

 private:
  const std::vector<core::EventSink*> sinks_;
};

}  // namespace sluice::app

#endif  // SLUICE_SERVER_APP_EVENT_SINKS_H_
