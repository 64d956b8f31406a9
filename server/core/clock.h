// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_CORE_CLOCK_H_
#define SLUICE_SERVER_CORE_CLOCK_H_

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace sluice::core {

// Source of time for the core. The core never reads the clock by itself, so
// tests drive it with a fake and no test sleeps. Implementations are safe for
// concurrent use.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;
};

// Wall-clock time. Wall time (not a monotonic clock) because breaker
// open-until times are shared between replicas in cluster mode.
class RealClock final : public Clock {
 public:
  // clock_gettime(CLOCK_REALTIME) through the vDSO. Not absl::Now(): in
  // Debian's abseil it keeps shared calibration state behind a spin lock,
  // and in engine_bench with 2 threads 11% of the time went to it and to
  // waiting on its lock.
  absl::Time Now() const override;
  // A process-wide instance.
  static RealClock* Get();
};

}  // namespace sluice::core

#endif  // SLUICE_SERVER_CORE_CLOCK_H_
