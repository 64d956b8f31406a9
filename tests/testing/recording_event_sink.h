// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_TESTS_TESTING_RECORDING_EVENT_SINK_H_
#define SLUICE_TESTS_TESTING_RECORDING_EVENT_SINK_H_

#include <cstddef>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "server/core/events.h"

namespace sluice::testing {

// Keeps every breaker transition and adaptive change it is told about, for
// tests to inspect.
// Safe for concurrent use.
class RecordingEventSink final : public core::EventSink {
 public:
  void OnBreakerTransition(const core::BreakerTransition& transition) override
      ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    transitions_.push_back(transition);
  }

  void OnAdaptiveChange(const core::AdaptiveChange& change) override
      ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    changes_.push_back(change);
  }
  std::vector<core::AdaptiveChange> changes() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return changes_;
  }

  // A copy, so callers need not hold the lock.
  std::vector<core::BreakerTransition> transitions() const
      ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return transitions_;
  }

  size_t size() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return transitions_.size();
  }

  void Clear() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    transitions_.clear();
    changes_.clear();
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<core::BreakerTransition> transitions_ ABSL_GUARDED_BY(mu_);
  std::vector<core::AdaptiveChange> changes_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sluice::testing

#endif  // SLUICE_TESTS_TESTING_RECORDING_EVENT_SINK_H_
