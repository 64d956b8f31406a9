// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_CORE_BREAKER_STATE_H_
#define SLUICE_SERVER_CORE_BREAKER_STATE_H_

#include <cstdint>

#include "absl/strings/string_view.h"
#include "wire/enums/enum_lists.h"

// A circuit breaker's state and an operator's override of it, generated from
// wire/enums/enum_lists.h (so with the sluice.v1 numbers).

namespace sluice::core {

enum class BreakerState : uint8_t {
  SLUICE_BREAKER_STATE_LIST(SLUICE_ENUM_ENUMERATOR)
};

enum class BreakerOverride : uint8_t {
  SLUICE_BREAKER_OVERRIDE_LIST(SLUICE_ENUM_ENUMERATOR)
};

// Upper-case names as in the protos ("HALF_OPEN"): the trip cause, the
// metric labels, the transition log, and the override modes the cluster
// store writes.
SLUICE_ENUM_NAME_FUNCTION(BreakerStateName, BreakerState,
                          SLUICE_BREAKER_STATE_LIST,
                          "BREAKER_STATE_UNSPECIFIED")

SLUICE_ENUM_NAME_FUNCTION(BreakerOverrideName, BreakerOverride,
                          SLUICE_BREAKER_OVERRIDE_LIST,
                          "BREAKER_OVERRIDE_UNSPECIFIED")

}  // namespace sluice::core

#endif  // SLUICE_SERVER_CORE_BREAKER_STATE_H_
