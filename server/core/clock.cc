// SPDX-License-Identifier: Apache-2.0
#include "server/core/clock.h"

#include <time.h>

namespace sluice::core {

absl::Time RealClock::Now() const {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return absl::TimeFromTimespec(ts);
}

RealClock* RealClock::Get() {
  static RealClock* const clock = new RealClock();
  return clock;
}

}  // namespace sluice::core
