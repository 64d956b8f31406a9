// SPDX-License-Identifier: Apache-2.0
#include "server/rpc/admin_events.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "wire/time.h"

namespace sluice::rpc {

bool EventHub::Subscription::Pop(v1::Event* out) {
  absl::MutexLock lock(&mu_);
  if (missed_ > 0) {
    *out = v1::Event();
    out->set_kind(v1::Event::EVENTS_DROPPED);
    *out->mutable_time() = wire::TimestampToProto(absl::Now());
    out->set_dependency(dependency_);
    out->set_missed(missed_);
    out->set_cause(absl::StrCat(missed_, " event", missed_ == 1 ? "" : "s",
                                " dropped: this watcher read too slowly"));
    missed_ = 0;
    return true;
  }
  if (queue_.empty()) return false;
  *out = std::move(queue_.front());
  queue_.pop_front();
  return true;
}

uint64_t EventHub::Subscription::Push(const v1::Event& event) {
  absl::MutexLock lock(&mu_);
  uint64_t dropped = 0;
  if (queue_.size() >= capacity_) {
    queue_.pop_front();
    ++missed_;
    dropped = 1;
  }
  queue_.push_back(event);
  return dropped;
}

EventHub::EventHub(Options options) : options_(std::move(options)) {}

std::shared_ptr<EventHub::Subscription> EventHub::Subscribe(
    std::string dependency, std::function<void()> on_event) {
  std::shared_ptr<Subscription> sub(new Subscription(
      std::move(dependency), std::max<size_t>(1, options_.queue_size),
      std::move(on_event)));
  absl::MutexLock lock(&mu_);
  subscriptions_.push_back(sub);
  return sub;
}

void EventHub::Unsubscribe(const Subscription* subscription) {
  absl::MutexLock lock(&mu_);
  subscriptions_.erase(
      std::remove_if(subscriptions_.begin(), subscriptions_.end(),
                     [&](const std::shared_ptr<Subscription>& s) {
                       return s.get() == subscription;
                     }),
      subscriptions_.end());
}

size_t EventHub::watchers() const {
  absl::MutexLock lock(&mu_);
  return subscriptions_.size();
}

void EventHub::WriteStats(base::StatsWriter& out) const {
  static constexpr base::MetricDef kWatchEventsDropped = base::CounterDef(
      "sluice_watch_events_dropped_total", {},
      "Events dropped because a WatchEvents client read too slowly.");
  out.Write(kWatchEventsDropped, static_cast<double>(dropped()));
  static constexpr base::MetricDef kWatchers = base::GaugeDef(
      "sluice_watchers", {},
      "WatchEvents streams open now (sluicectl watch and the like).");
  out.Write(kWatchers, static_cast<double>(watchers()));
}

void EventHub::Publish(v1::Event event) {
  event.set_replica_id(options_.replica_id);
  if (!event.has_time()) {
    *event.mutable_time() = wire::TimestampToProto(absl::Now());
  }
  std::vector<std::shared_ptr<Subscription>> matched;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& sub : subscriptions_) {
      if (sub->dependency_.empty() || event.dependency().empty() ||
          sub->dependency_ == event.dependency()) {
        matched.push_back(sub);
      }
    }
  }
  for (const auto& sub : matched) {
    dropped_.fetch_add(sub->Push(event), std::memory_order_relaxed);
    if (sub->on_event_) sub->on_event_();
  }
}

void EventHub::OnBreakerTransition(const core::BreakerTransition& transition) {
  Publish(BreakerTransitionEvent(transition));
}

void EventHub::OnAdaptiveChange(const core::AdaptiveChange& change) {
  Publish(AdaptiveChangeEvent(change));
}

v1::Event AdaptiveChangeEvent(const core::AdaptiveChange& c) {
  v1::Event event;
  switch (c.kind) {
    case core::AdaptiveChange::Kind::kLimit:
      event.set_kind(v1::Event::ADAPTIVE_LIMIT_CHANGED);
      break;
    case core::AdaptiveChange::Kind::kThrottleStarted:
      event.set_kind(v1::Event::THROTTLE_STARTED);
      break;
    case core::AdaptiveChange::Kind::kThrottleStopped:
      event.set_kind(v1::Event::THROTTLE_STOPPED);
      break;
  }
  *event.mutable_time() = wire::TimestampToProto(c.at);
  event.set_dependency(c.dependency);
  event.set_key(c.key);
  event.set_old_value(c.from);
  event.set_new_value(c.to);
  event.set_cause(c.cause);
  return event;
}

v1::Event BreakerTransitionEvent(const core::BreakerTransition& t) {
  v1::Event event;
  event.set_kind(v1::Event::BREAKER_TRANSITION);
  *event.mutable_time() = wire::TimestampToProto(t.at);
  event.set_dependency(t.dependency);
  event.set_key(t.key);
  event.set_from(static_cast<v1::BreakerState>(t.from));
  event.set_to(static_cast<v1::BreakerState>(t.to));
  event.set_cause(t.cause);
  event.set_breaker_generation(t.generation);
  if (t.open_until != absl::InfinitePast()) {
    *event.mutable_open_until() = wire::TimestampToProto(t.open_until);
  }
  return event;
}

v1::Event PolicyChangedEvent(const std::string& dependency,
                             uint64_t old_version, uint64_t new_version,
                             const std::string& cause) {
  v1::Event event;
  event.set_kind(v1::Event::POLICY_CHANGED);
  event.set_dependency(dependency);
  event.set_old_version(old_version);
  event.set_new_version(new_version);
  event.set_cause(cause);
  return event;
}

v1::Event OverrideEvent(const std::string& dependency,
                        core::BreakerOverride override,
                        const std::string& cause) {
  v1::Event event;
  event.set_kind(v1::Event::OVERRIDE_SET);
  event.set_dependency(dependency);
  event.set_override(static_cast<v1::BreakerOverride>(override));
  event.set_cause(cause);
  return event;
}

v1::Event StoreEvent(bool up, const std::string& cause) {
  v1::Event event;
  event.set_kind(up ? v1::Event::STORE_UP : v1::Event::STORE_DOWN);
  event.set_cause(cause);
  return event;
}

}  // namespace sluice::rpc
