// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_BASE_PERIODIC_H_
#define SLUICE_BASE_PERIODIC_H_

#include <algorithm>
#include <functional>

#include "absl/time/time.h"

namespace sluice::base {

// One run of periodic work. It returns how long after this run the next
// one is due, so work whose pace changes (a retry sooner after a failure)
// says so each time; fixed-pace work returns its interval.
using PeriodicRun = std::function<absl::Duration()>;

struct PeriodicOptions {
  // How long after the start the first run is due; zero: at once.
  absl::Duration first_run_in = absl::ZeroDuration();
  // The least time from a Wake to the run it asks for, so that a caller
  // that wakes the task over and over cannot turn it into a busy loop.
  absl::Duration wake_gap = absl::ZeroDuration();
};

// Work an Env runs again and again (Env::StartPeriodic), one run at a
// time, until it is stopped. Destroying it stops it. Safe for concurrent
// use, except that neither Stop nor the destructor may be called from a
// run.
class PeriodicTask {
 public:
  virtual ~PeriodicTask() = default;

  // Asks for a run `wake_gap` from now, unless one is due sooner. A Wake
  // during a run asks for a run after it: what woke the task may have come
  // too late for the run in progress. No effect after Stop.
  virtual void Wake() = 0;
  // No run starts after Stop returns; a run in progress is waited for.
  // Idempotent.
  virtual void Stop() = 0;
};

// When a periodic task runs next: the schedule both the thread of the real
// Env and a test's manual Env follow, so tests see the production order of
// runs and wakes. Not thread-safe; the owner locks.
class PeriodicSchedule {
 public:
  PeriodicSchedule(const PeriodicOptions& options, absl::Time start)
      : wake_gap_(options.wake_gap), due_(start + options.first_run_in) {}

  // When the next run is due.
  absl::Time due() const { return std::min(due_, woken_due_); }
  // A Wake at `now`.
  void Wake(absl::Time now) {
    woken_due_ = std::min(woken_due_, now + wake_gap_);
  }
  // A run starts: it answers every Wake before it.
  void Started() { woken_due_ = absl::InfiniteFuture(); }
  // The run that started last ended at `now` and asked for the next one
  // `next_in` later.
  void Finished(absl::Time now, absl::Duration next_in) {
    due_ = now + next_in;
  }

 private:
  const absl::Duration wake_gap_;
  absl::Time due_;
  absl::Time woken_due_ = absl::InfiniteFuture();
};

}  // namespace sluice::base

#endif  // SLUICE_BASE_PERIODIC_H_
