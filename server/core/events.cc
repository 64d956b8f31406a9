// SPDX-License-Identifier: Apache-2.0
#include "server/core/events.h"

namespace sluice::core {

absl::string_view AdaptiveChangeKindName(AdaptiveChange::Kind kind) {
  switch (kind) {
    case AdaptiveChange::Kind::kLimit:
      return "LIMIT";
    case AdaptiveChange::Kind::kThrottleStarted:
      return "THROTTLE_STARTED";
    case AdaptiveChange::Kind::kThrottleStopped:
      return "THROTTLE_STOPPED";
  }
  return "UNKNOWN";
}

}  // namespace sluice::core
