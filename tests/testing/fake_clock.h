// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_TESTS_TESTING_FAKE_CLOCK_H_
#define SLUICE_TESTS_TESTING_FAKE_CLOCK_H_

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/civil_time.h"
#include "absl/time/time.h"
#include "server/core/clock.h"

namespace sluice::testing {

// A clock that moves only when told to, so no test sleeps. Starts at
// 2026-01-01T00:00:00Z rather than the Unix epoch, so code that treats the
// epoch or zero as "unset" is caught. Safe for concurrent use.
class FakeClock final : public core::Clock {
 public:
  static absl::Time DefaultStart() {
    return absl::FromCivil(absl::CivilSecond(2026, 1, 1, 0, 0, 0),
                           absl::UTCTimeZone());
  }

  FakeClock() : now_(DefaultStart()) {}
  explicit FakeClock(absl::Time start) : now_(start) {}

  absl::Time Now() const override ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return now_;
  }

  void Advance(absl::Duration d) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    now_ += d;
  }

  void SetTime(absl::Time t) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    now_ = t;
  }

 private:
  mutable absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sluice::testing

#endif  // SLUICE_TESTS_TESTING_FAKE_CLOCK_H_
