#include "server/core/clock.h"

namespace sluice::core {

RealClock* RealClock::Get() {
  static RealClock* const clock = new RealClock();
  return clock;
}

}  // namespace sluice::core
