// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_CORE_OUTCOME_H_
#define SLUICE_SERVER_CORE_OUTCOME_H_

#include <cstdint>

#include "absl/strings/string_view.h"
#include "wire/enums/enum_lists.h"

// How a call went, as its caller reports it, and what a permit that is
// never reported counts as.

namespace sluice::core {

// Generated from wire/enums/enum_lists.h (so with the sluice.v1 numbers).
enum class Outcome : uint8_t { SLUICE_OUTCOME_LIST(SLUICE_ENUM_ENUMERATOR) };

// "SUCCESS", "FAILURE", ... as in the protos.
SLUICE_ENUM_NAME_FUNCTION(OutcomeName, Outcome, SLUICE_OUTCOME_LIST,
                          "OUTCOME_UNSPECIFIED")

// What a permit that is never reported counts as once it expires.
enum class Unreported : uint8_t {
  // A call that never reported is taken to have timed out: the breaker
  // counts it as a failure. For callers that always report (the SDK).
  kTimeout = 1,
  // The caller may never report (Envoy's rate-limit filter has no report):
  // expiry only frees what the permit holds and judges nothing, except for
  // a HALF_OPEN probe, whose expiry is a failed probe. A policy with
  // neither an in-flight cap nor a breaker issues no permit at all.
  kRelease = 2,
};

}  // namespace sluice::core

#endif  // SLUICE_SERVER_CORE_OUTCOME_H_
