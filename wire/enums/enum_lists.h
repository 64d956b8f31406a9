// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_WIRE_ENUMS_ENUM_LISTS_H_
#define SLUICE_WIRE_ENUMS_ENUM_LISTS_H_

// The enumerations of sluice.v1, one list each: the only place a value is
// added. The core generates its enums and their names from these rows, the
// RPC edge and the SDK their conversions to and from the proto enums, and
// wire/enum_lists_check.cc fails the build when a row and the .proto
// disagree, or the .proto has a value no row mirrors.
//
// A list applies X to one row per value, in the order of the numbers:
//   X(enumerator, number, proto enumerator, name [, more columns])
// enumerator  the C++ name of the value in the core and the SDK;
// number      the value's number in the .proto;
// proto       its name in the generated code, after "v1::";
// name        the name Sluice writes for it in metric labels, headers, logs
//             and error messages: the .proto's name, except "NONE" for the
//             reason of a plain ALLOW.
//
// This header includes nothing, so the core can use it without seeing the
// protos.

// sluice.v1.Verdict; VERDICT_UNSPECIFIED has no row (every decision has a
// verdict).
#define SLUICE_VERDICT_LIST(X)        \
  X(kAllow, 1, ALLOW, "ALLOW")        \
  X(kReject, 2, REJECT, "REJECT")     \
  X(kDegrade, 3, DEGRADE, "DEGRADE")

// sluice.v1.Reason, with one more column, the kind of refusal:
//   kNotRefused  the call is allowed;
//   kOverLimit   the caller went over a limit: HTTP 429, and the policy's
//                fallback may apply;
//   kRefused     any other refusal by a policy: HTTP 503, and the
//                fallback may apply;
//   kNoPolicy    refused without a policy (so without a fallback): 503.
#define SLUICE_REASON_LIST(X)                                             \
  X(kNone, 0, REASON_UNSPECIFIED, "NONE", kNotRefused)                    \
  X(kRateLimited, 1, RATE_LIMITED, "RATE_LIMITED", kOverLimit)            \
  X(kConcurrencyLimited, 2, CONCURRENCY_LIMITED, "CONCURRENCY_LIMITED",   \
    kOverLimit)                                                           \
  X(kCircuitOpen, 3, CIRCUIT_OPEN, "CIRCUIT_OPEN", kRefused)              \
  X(kProbeLimit, 4, PROBE_LIMIT, "PROBE_LIMIT", kRefused)                 \
  X(kUnknownDependency, 5, UNKNOWN_DEPENDENCY, "UNKNOWN_DEPENDENCY",      \
    kNoPolicy)                                                            \
  X(kStoreUnavailable, 6, STORE_UNAVAILABLE, "STORE_UNAVAILABLE",         \
    kRefused)                                                             \
  X(kAdaptiveThrottled, 7, ADAPTIVE_THROTTLED, "ADAPTIVE_THROTTLED",      \
    kRefused)                                                             \
  X(kShadow, 8, SHADOW, "SHADOW", kNotRefused)

// sluice.v1.BreakerState.
#define SLUICE_BREAKER_STATE_LIST(X)                   \
  X(kClosed, 1, CLOSED, "CLOSED")                      \
  X(kOpen, 2, OPEN, "OPEN")                            \
  X(kHalfOpen, 3, HALF_OPEN, "HALF_OPEN")              \
  X(kForcedOpen, 4, FORCED_OPEN, "FORCED_OPEN")        \
  X(kForcedClosed, 5, FORCED_CLOSED, "FORCED_CLOSED")

// sluice.v1.Outcome.
#define SLUICE_OUTCOME_LIST(X)             \
  X(kSuccess, 1, SUCCESS, "SUCCESS")       \
  X(kFailure, 2, FAILURE, "FAILURE")       \
  X(kTimeout, 3, TIMEOUT, "TIMEOUT")       \
  X(kCancelled, 4, CANCELLED, "CANCELLED")

// sluice.v1.BreakerOverride (admin.proto). The cluster store writes these
// names.
#define SLUICE_BREAKER_OVERRIDE_LIST(X)            \
  X(kAuto, 1, AUTO, "AUTO")                        \
  X(kForceOpen, 2, FORCE_OPEN, "FORCE_OPEN")       \
  X(kForceClosed, 3, FORCE_CLOSED, "FORCE_CLOSED")

// sluice.v1.Fallback.Strategy.
#define SLUICE_FALLBACK_STRATEGY_LIST(X)          \
  X(kNone, 1, Fallback::NONE, "NONE")             \
  X(kDefault, 2, Fallback::DEFAULT, "DEFAULT")    \
  X(kStatic, 3, Fallback::STATIC, "STATIC")       \
  X(kCache, 4, Fallback::CACHE, "CACHE")

// sluice.v1.Policy.StoreFailureMode.
#define SLUICE_STORE_FAILURE_MODE_LIST(X)                 \
  X(kFailOpen, 1, Policy::FAIL_OPEN, "FAIL_OPEN")         \
  X(kLocal, 2, Policy::LOCAL, "LOCAL")                    \
  X(kFailClosed, 3, Policy::FAIL_CLOSED, "FAIL_CLOSED")

// Row macros for the code generated from a list. Where a macro names the
// enum, it takes it as `E`: declare `using E = <the enum>;` first.

// enumerator = number, (an enum's body).
#define SLUICE_ENUM_ENUMERATOR(enumerator, number, ...) enumerator = number,
// A case of a switch over E that returns the row's name.
#define SLUICE_ENUM_NAME_CASE(enumerator, number, proto, name, ...) \
  case E::enumerator:                                              \
    return name;
// "+ 1" per row: `0 SLUICE_X_LIST(SLUICE_ENUM_PLUS_ONE)` counts the rows.
#define SLUICE_ENUM_PLUS_ONE(...) +1
// Defines `constexpr absl::string_view function(type value)`: the row's
// name, or `unknown` for a number without a row. The includer includes
// absl/strings/string_view.h.
#define SLUICE_ENUM_NAME_FUNCTION(function, type, list, unknown) \
  constexpr absl::string_view function(type value) {            \
    using E = type;                                             \
    switch (value) { list(SLUICE_ENUM_NAME_CASE) }              \
    return unknown;                                             \
  }
// A case of a switch over the proto enum that returns E's value.
#define SLUICE_ENUM_FROM_PROTO_CASE(enumerator, number, proto, ...) \
  case v1::proto:                                                  \
    return E::enumerator;
// A case of a switch over E that returns the proto value.
#define SLUICE_ENUM_TO_PROTO_CASE(enumerator, number, proto, ...) \
  case E::enumerator:                                            \
    return v1::proto;

#endif  // SLUICE_WIRE_ENUMS_ENUM_LISTS_H_
