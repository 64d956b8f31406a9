// SPDX-License-Identifier: Apache-2.0
// Compile-time checks of wire/enums/enum_lists.h against the .protos: a row
// whose number is not the .proto's, or a .proto value that no row mirrors,
// fails the build here. The core's enums are generated from the rows, so
// they carry the proto numbers and the converters may cast.

#include "sluice/v1/admin.pb.h"
#include "sluice/v1/decision.pb.h"
#include "sluice/v1/policy.pb.h"
#include "wire/enums/enum_lists.h"

namespace sluice::wire {
namespace {

#define SLUICE_CHECK_ROW(enumerator, number, proto, ...)   \
  static_assert(v1::proto == number,                      \
                "enum_lists.h: v1::" #proto " is not " #number);

SLUICE_VERDICT_LIST(SLUICE_CHECK_ROW)
SLUICE_REASON_LIST(SLUICE_CHECK_ROW)
SLUICE_BREAKER_STATE_LIST(SLUICE_CHECK_ROW)
SLUICE_OUTCOME_LIST(SLUICE_CHECK_ROW)
SLUICE_BREAKER_OVERRIDE_LIST(SLUICE_CHECK_ROW)
SLUICE_FALLBACK_STRATEGY_LIST(SLUICE_CHECK_ROW)
SLUICE_STORE_FAILURE_MODE_LIST(SLUICE_CHECK_ROW)
#undef SLUICE_CHECK_ROW

// Every .proto value but X_UNSPECIFIED (0) has a row; Reason's 0 has one
// too (kNone). The numbers are dense, so counting rows is enough.
static_assert(0 SLUICE_VERDICT_LIST(SLUICE_ENUM_PLUS_ONE) + 1 ==
                  v1::Verdict_ARRAYSIZE,
              "a sluice.v1.Verdict value has no row in enum_lists.h");
static_assert(0 SLUICE_REASON_LIST(SLUICE_ENUM_PLUS_ONE) ==
                  v1::Reason_ARRAYSIZE,
              "a sluice.v1.Reason value has no row in enum_lists.h");
static_assert(0 SLUICE_BREAKER_STATE_LIST(SLUICE_ENUM_PLUS_ONE) + 1 ==
                  v1::BreakerState_ARRAYSIZE,
              "a sluice.v1.BreakerState value has no row in enum_lists.h");
static_assert(0 SLUICE_OUTCOME_LIST(SLUICE_ENUM_PLUS_ONE) + 1 ==
                  v1::Outcome_ARRAYSIZE,
              "a sluice.v1.Outcome value has no row in enum_lists.h");
static_assert(0 SLUICE_BREAKER_OVERRIDE_LIST(SLUICE_ENUM_PLUS_ONE) + 1 ==
                  v1::BreakerOverride_ARRAYSIZE,
              "a sluice.v1.BreakerOverride value has no row in enum_lists.h");
static_assert(0 SLUICE_FALLBACK_STRATEGY_LIST(SLUICE_ENUM_PLUS_ONE) + 1 ==
                  v1::Fallback::Strategy_ARRAYSIZE,
              "a sluice.v1.Fallback.Strategy value has no row in "
              "enum_lists.h");
static_assert(0 SLUICE_STORE_FAILURE_MODE_LIST(SLUICE_ENUM_PLUS_ONE) + 1 ==
                  v1::Policy::StoreFailureMode_ARRAYSIZE,
              "a sluice.v1.Policy.StoreFailureMode value has no row in "
              "enum_lists.h");

}  // namespace
}  // namespace sluice::wire
