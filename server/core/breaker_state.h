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
constexpr absl::string_view BreakerStateName(BreakerState state) {
  using E = BreakerState;
  switch (state) { SLUICE_BREAKER_STATE_LIST(SLUICE_ENUM_NAME_CASE) }
  return "BREAKER_STATE_UNSPECIFIED";
}

constexpr absl::string_view BreakerOverrideName(BreakerOverride mode) {
  using E = BreakerOverride;
  switch (mode) { SLUICE_BREAKER_OVERRIDE_LIST(SLUICE_ENUM_NAME_CASE) }
  return "BREAKER_OVERRIDE_UNSPECIFIED";
}

}  // namespace sluice::core

#endif  // SLUICE_SERVER_CORE_BREAKER_STATE_H_
