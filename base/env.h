// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_BASE_ENV_H_
#define SLUICE_BASE_ENV_H_

#include <memory>

#include "absl/time/time.h"
#include "base/periodic.h"

namespace sluice::base {

// Where a component's periodic work runs and by which time it is
// scheduled: the seam that lets a test drive every periodic component
// (the policy file watcher, the TLS reloader, the cluster sync loop, the
// state file keeper) on the caller's thread by one mechanism, a manual Env
// (tests/testing/manual_env.h), instead of a test hook in each.
// Implementations are safe for concurrent use.
class Env {
 public:
  virtual ~Env() = default;

  // The time periodic work is scheduled by: in the process's Env a
  // monotonic clock (only differences mean anything), in a test's its fake
  // clock.
  virtual absl::Time Now() const = 0;
  // Starts running `run`, first `options.first_run_in` from now, then each
  // time the interval it returns has passed, until the task is stopped.
  virtual std::unique_ptr<PeriodicTask> StartPeriodic(
      const PeriodicOptions& options, PeriodicRun run) = 0;

  // The process's Env: one thread per periodic task, which waits on a
  // condition variable between runs, so Stop and Wake take effect at once.
  static Env* Default();
};

}  // namespace sluice::base

#endif  // SLUICE_BASE_ENV_H_
