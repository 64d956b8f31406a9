#ifndef SLUICE_SERVER_APP_EVENT_SINKS_H_
#define SLUICE_SERVER_APP_EVENT_SINKS_H_

#include <initializer_list>
#include <vector>

#include "server/core/events.h"

namespace sluice::app {

// Logs every breaker transition, one line each: info for a close, warn
// otherwise. Safe for concurrent use.
class LoggingEventSink final : public core::EventSink {
 public:
  void OnBreakerTransition(const core::BreakerTransition& t) override;
};

// Hands every transition to each of a fixed list of sinks, in order. The
// list is complete at construction, so the engine's observers are built
// before the engine. Safe for concurrent use if the sinks are.
class FanOutEventSink final : public core::EventSink {
 public:
  // Null entries are skipped. The sinks must outlive this object.
  FanOutEventSink(std::initializer_list<core::EventSink*> sinks);

  void OnBreakerTransition(const core::BreakerTransition& t) override;

 private:
  const std::vector<core::EventSink*> sinks_;
};

}  // namespace sluice::app

#endif  // SLUICE_SERVER_APP_EVENT_SINKS_H_
