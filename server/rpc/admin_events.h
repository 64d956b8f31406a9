// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_RPC_ADMIN_EVENTS_H_
#define SLUICE_SERVER_RPC_ADMIN_EVENTS_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/stats.h"
#include "server/core/breaker_state.h"
#include "server/core/events.h"
#include "sluice/v1/admin.pb.h"

namespace sluice::rpc {

// Fans operator events (breaker transitions, adaptive limit and throttle
// moves, policy changes, overrides, store up/down) out to WatchEvents streams. Each watcher has a bounded
// queue: when it is full the oldest event goes, and the watcher's next read
// starts with one EVENTS_DROPPED event saying how many it missed. Publish
// never waits for a watcher. Safe for concurrent use.
class EventHub final : public core::EventSink, public base::StatsSource {
 public:
  struct Options {
    // Events queued per watcher before the oldest are dropped.
    size_t queue_size = 1024;
    // Written into every event's replica_id.
    std::string replica_id;
  };

  // One watcher's queue. Safe for concurrent use.
  class Subscription {
   public:
    // Next event, if any: an EVENTS_DROPPED event first when events were
    // dropped since the last Pop.
    bool Pop(v1::Event* out) ABSL_LOCKS_EXCLUDED(mu_);
    const std::string& dependency() const { return dependency_; }

   private:
    friend class EventHub;
    Subscription(std::string dependency, size_t capacity,
                 std::function<void()> on_event)
        : dependency_(std::move(dependency)),
          capacity_(capacity),
          on_event_(std::move(on_event)) {}
    // Queues `event`; returns how many events this push dropped (0 or 1).
    uint64_t Push(const v1::Event& event) ABSL_LOCKS_EXCLUDED(mu_);

    const std::string dependency_;
    const size_t capacity_;
    const std::function<void()> on_event_;
    absl::Mutex mu_;
    std::deque<v1::Event> queue_ ABSL_GUARDED_BY(mu_);
    uint64_t missed_ ABSL_GUARDED_BY(mu_) = 0;
  };

  explicit EventHub(Options options);

  // Starts a watcher of `dependency` ("" for all). `on_event` is called
  // after an event was queued for it, from the publishing thread and with
  // no hub lock held; it must be quick and must not call Publish.
  std::shared_ptr<Subscription> Subscribe(std::string dependency,
                                          std::function<void()> on_event)
      ABSL_LOCKS_EXCLUDED(mu_);
  void Unsubscribe(const Subscription* subscription) ABSL_LOCKS_EXCLUDED(mu_);

  // Stamps replica_id (and the time, when unset) and queues `event` for
  // every matching watcher.
  void Publish(v1::Event event) ABSL_LOCKS_EXCLUDED(mu_);

  // core::EventSink: breaker transitions and adaptive moves from the engine.
  void OnBreakerTransition(const core::BreakerTransition& transition) override;
  void OnAdaptiveChange(const core::AdaptiveChange& change) override;

  // Events dropped for slow watchers since start.
  uint64_t dropped() const { return dropped_.load(std::memory_order_relaxed); }
  size_t watchers() const ABSL_LOCKS_EXCLUDED(mu_);
  // dropped() and watchers() as sluice_watch_events_dropped_total and
  // sluice_watchers.
  void WriteStats(base::StatsWriter& out) const override
      ABSL_LOCKS_EXCLUDED(mu_);
  const std::string& replica_id() const { return options_.replica_id; }

 private:
  const Options options_;
  std::atomic<uint64_t> dropped_{0};
  mutable absl::Mutex mu_;
  std::vector<std::shared_ptr<Subscription>> subscriptions_
      ABSL_GUARDED_BY(mu_);
};

// Event builders, so that every producer fills the same fields.
v1::Event BreakerTransitionEvent(const core::BreakerTransition& transition);
// ADAPTIVE_LIMIT_CHANGED, THROTTLE_STARTED or THROTTLE_STOPPED.
v1::Event AdaptiveChangeEvent(const core::AdaptiveChange& change);
v1::Event PolicyChangedEvent(const std::string& dependency,
                             uint64_t old_version, uint64_t new_version,
                             const std::string& cause);
v1::Event OverrideEvent(const std::string& dependency,
                        core::BreakerOverride override,
                        const std::string& cause);
v1::Event StoreEvent(bool up, const std::string& cause);

}  // namespace sluice::rpc

#endif  // SLUICE_SERVER_RPC_ADMIN_EVENTS_H_
